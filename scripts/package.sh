#!/usr/bin/env bash
# Builds the Debian package with `cargo deb -p pathem`: the release binary, a man page per
# subcommand and the bash, zsh and fish completions (both written by the binary itself from
# its clap definitions into target/pkg), the README, CHANGELOG, examples and licences.
#   bash scripts/package.sh             # target/debian/pathem_VERSION-1_ARCH.deb
# Installs cargo-deb with cargo when it is missing. PATHEM_PACKAGE_PROFILE=test packages the
# test build instead of a release build (the test script does, to check the package without a
# second optimised build).
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${PATHEM_PACKAGE_PROFILE:-release}"
command -v cargo-deb >/dev/null 2>&1 || {
    echo "scripts/package.sh: installing cargo-deb" >&2
    cargo install cargo-deb --locked --quiet
}
cargo build --locked -p pathem --profile "$profile"
dir=release
[ "$profile" = release ] || dir=debug
bin="target/$dir/pathem"
rm -rf target/pkg
mkdir -p target/pkg/man target/pkg/completions
"$bin" manpages target/pkg/man
gzip -9n target/pkg/man/*.1
"$bin" completions bash >target/pkg/completions/pathem.bash
"$bin" completions zsh >target/pkg/completions/_pathem
"$bin" completions fish >target/pkg/completions/pathem.fish
if [ "$profile" = test ]; then
    # Cargo puts the test profile's binaries in target/debug; cargo-deb looks in target/test.
    mkdir -p target/test
    cp "$bin" target/test/pathem
fi
cargo deb -p pathem --no-build --locked --strip --profile "$profile" "$@"
