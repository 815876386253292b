#!/usr/bin/env bash
# Runs every pathem test, with DPDK ports built in (--features dpdk): formatting, clippy and
# rustdoc with warnings as errors, unit, statistical,
# end-to-end through pcap captures, live in network namespaces (through DPDK virtual devices
# too), the fuzz corpora; checks that the default build stays pure Rust; then the delay line
# under Miri and each fuzz target briefly.
# Installs what the tests need first when run as root on Debian/Ubuntu (CI does exactly this).
# As root every live test must run: one that cannot fails the run instead of being skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage's start, as time since the run began: where the minutes go.
stage() { echo "scripts/test.sh: [$((SECONDS / 60))m$(printf %02d $((SECONDS % 60)))s] $*" >&2; }
stage "installing what the tests need"

need=()
for tool in ip:iproute2 ethtool:ethtool iperf3:iperf3 ping:iputils-ping nft:nftables pkg-config:pkg-config \
    tcpdump:tcpdump dpdk-testpmd:dpdk-dev man:man-db; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool#*:}")
done
# DPDK's headers and libraries, for --features dpdk.
pkg-config --exists libdpdk 2>/dev/null || need+=(libdpdk-dev)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "scripts/test.sh: installing ${need[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [ "$(id -u)" = 0 ]; then
    export PATHEM_REQUIRE_LIVE=1
fi
# One clean build, not an edit loop: incremental state would only take disk (1.1 GB of the
# run's 4 GB in target/debug) and time to write.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# Every package in Cargo.lock, for every platform: the licence test reads them all with
# `cargo metadata --offline` (as cargo-deny checks every target), and a build fetches only
# this platform's.
cargo fetch --locked

# What the work tree looks like now: the run must leave it so (captures, corpora and logs go
# to temporary directories or ignored paths).
before="$(git status --porcelain 2>/dev/null || true)"

stage "formatting, lints and docs"
cargo fmt --all -- --check
# Lints and docs with warnings as errors, in both builds.
cargo clippy --workspace --all-targets --locked --profile test -- -D warnings 2>&1
cargo clippy --workspace --all-targets --locked --profile test --features dpdk -- -D warnings 2>&1
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --locked --features dpdk 2>&1
# The default build needs no C library: build it, and test the DPDK module's plain-Rust part
# (device strings, EAL arguments, clock fit, the message of a build without DPDK) in it. As
# root the next stage builds it (statically, for musl: the OCI image's pathem, which links
# every library crate), so here it is built only where that stage does not run.
stage "the default build, pure Rust"
if [ "$(id -u)" != 0 ]; then
    cargo build --workspace --locked --profile test 2>&1
fi
cargo test -p pathem-io --locked --lib 2>&1
# The OCI image that crates/pathem/tests/image.rs runs with podman, built first (as root:
# scripts/image.sh installs podman, runc and the musl target when missing; pods need catatonit).
stage "the OCI image"
if [ "$(id -u)" = 0 ]; then
    if ! command -v catatonit >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
        echo "scripts/test.sh: installing catatonit" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends catatonit >/dev/null
    fi
    bash scripts/image.sh
fi
# Everything, DPDK ports included.
stage "every test, DPDK ports included"
cargo test --workspace --locked --features dpdk 2>&1

# The Debian package: built with cargo deb, installed, its man pages and completions checked,
# removed. It packages the OCI image's static release build (scripts/image.sh's target), made
# two stages ago; without root, package-test.sh says it is skipped before building anything.
stage "the Debian package"
PATHEM_PACKAGE_PROFILE=release PATHEM_PACKAGE_TARGET=x86_64-unknown-linux-musl \
    bash scripts/package-test.sh

stage "Miri"
# The delay line's unsafe code under Miri (nightly only; installed here where rustup can).
if rustup run nightly cargo miri --version >/dev/null 2>&1 ||
    rustup component add miri rust-src --toolchain nightly >/dev/null 2>&1 ||
    { rustup toolchain install nightly --profile minimal --component miri,rust-src >/dev/null 2>&1; }; then
    MIRIFLAGS="-Zmiri-disable-isolation" cargo +nightly miri test -p pathem-engine --lib delay_line::tests 2>&1 |
        grep -E "^test |^test result"
else
    echo "miri: SKIPPED: no nightly toolchain with Miri, and rustup cannot install one here"
fi

# Every parser fuzzed for a few seconds: a regression that the corpora miss may still show.
stage "fuzzing"
bash scripts/fuzz.sh "${PATHEM_FUZZ_SECONDS:-6}"

after="$(git status --porcelain 2>/dev/null || true)"
if [ "$before" != "$after" ]; then
    echo "scripts/test.sh: the run changed the work tree:" >&2
    diff <(echo "$before") <(echo "$after") >&2 || true
    exit 1
fi
stage "done: every test passed"
