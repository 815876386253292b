#!/usr/bin/env bash
# Builds the Debian package with `cargo deb -p pathem`: the release binary, a man page per
# subcommand and the bash, zsh and fish completions (both written by the binary itself from
# its clap definitions into target/pkg), the README, CHANGELOG, examples and licences.
#   bash scripts/package.sh             # target/debian/pathem_VERSION-1_ARCH.deb
# (under cargo's target directory: $CARGO_TARGET_DIR/debian when that is set; the last line
# printed is the package's path).
# Installs cargo-deb with cargo when it is missing. PATHEM_PACKAGE_PROFILE=test packages the
# test build instead of a release build, PATHEM_PACKAGE_TARGET=TRIPLE the build for that
# target (x86_64-unknown-linux-musl: a static pathem). The test script packages a build it has
# already made: the OCI image's static release build as root, else the test build.
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${PATHEM_PACKAGE_PROFILE:-release}"
target="${PATHEM_PACKAGE_TARGET:-}"
# Where cargo builds (it honours CARGO_TARGET_DIR and build.target-dir): the man pages and
# completions must come from the binary this run built, not from a stale one under target/.
tdir="$(bash scripts/target-dir.sh)"
targeted=()
placed=()
# With a target, cargo-deb would write to TARGET_DIR/TRIPLE/debian: the package goes to
# TARGET_DIR/debian all the same.
[ -z "$target" ] || { targeted=(--target "$target"); placed=(--output "$tdir/debian"); }
command -v cargo-deb >/dev/null 2>&1 || {
    echo "scripts/package.sh: installing cargo-deb" >&2
    cargo install cargo-deb --locked --quiet
}
cargo build --locked -p pathem --profile "$profile" "${targeted[@]}"
dir=release
[ "$profile" = release ] || dir=debug
out="$tdir/${target:+$target/}"
bin="$out$dir/pathem"
rm -rf target/pkg
mkdir -p target/pkg/man target/pkg/completions
"$bin" manpages target/pkg/man
gzip -9n target/pkg/man/*.1
"$bin" completions bash >target/pkg/completions/pathem.bash
"$bin" completions zsh >target/pkg/completions/_pathem
"$bin" completions fish >target/pkg/completions/pathem.fish
if [ "$profile" = test ]; then
    # Cargo puts the test profile's binaries in target/debug; cargo-deb looks in target/test.
    mkdir -p "${out}test"
    cp "$bin" "${out}test/pathem"
fi
cargo deb -p pathem --no-build --locked --strip --profile "$profile" \
    "${targeted[@]}" "${placed[@]}" "$@"
