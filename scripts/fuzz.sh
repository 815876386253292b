#!/usr/bin/env bash
# Fuzzes every parser of pathem for SECONDS each (default 10), one target after another.
#   bash scripts/fuzz.sh 600              # ten minutes each, as done while developing
#   bash scripts/fuzz.sh 3600 pcap config # an hour each of two targets
# Needs a nightly toolchain and cargo-fuzz (`rustup toolchain install nightly` and
# `cargo install cargo-fuzz`); without them it says so and skips (exit 0), unless
# PATHEM_REQUIRE_FUZZ=1, when it fails. A crash leaves its input in fuzz/artifacts/TARGET/ and
# fails the run: copy it into fuzz/regressions/TARGET/ once fixed, where the test suite replays
# it on stable Rust forever after.
# New inputs the fuzzer finds go to a temporary directory, so a run leaves the work tree as it
# found it; PATHEM_FUZZ_KEEP=1 writes them into fuzz/corpus/TARGET/ instead (to grow the kept
# corpus on purpose, then `cargo fuzz cmin` and commit).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-10}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(units specs netem config traces pcap offload filter probe)

skip() {
    echo "fuzz: SKIPPED: $1" >&2
    if [ "${PATHEM_REQUIRE_FUZZ:-0}" = 1 ]; then exit 1; fi
    exit 0
}
command -v rustup >/dev/null 2>&1 || skip "no rustup to provide a nightly toolchain"
rustup run nightly rustc --version >/dev/null 2>&1 ||
    rustup toolchain install nightly --profile minimal >/dev/null 2>&1 ||
    skip "no nightly toolchain and it cannot be installed"
command -v cargo-fuzz >/dev/null 2>&1 ||
    cargo install cargo-fuzz --locked >/dev/null 2>&1 ||
    skip "cargo-fuzz is not installed and cannot be installed"

cargo +nightly fuzz build >/dev/null 2>&1 || cargo +nightly fuzz build
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t" "fuzz/regressions/$t"
    echo "fuzz: $t for ${secs}s"
    log="$(mktemp)"
    # libFuzzer adds what it finds to the first directory; the others only seed it.
    grown="$scratch/$t"
    mkdir -p "$grown"
    if [ "${PATHEM_FUZZ_KEEP:-0}" = 1 ]; then grown="fuzz/corpus/$t"; fi
    if ! cargo +nightly fuzz run "$t" "$grown" "fuzz/corpus/$t" "fuzz/regressions/$t" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 >"$log" 2>&1; then
        grep -E "panicked|ERROR|SUMMARY|Test unit written" "$log" >&2 || tail -20 "$log" >&2
        echo "fuzz: $t FAILED: see fuzz/artifacts/$t/" >&2
        exit 1
    fi
    grep -E "^Done" "$log" || true
    rm -f "$log"
done
echo "fuzz: ${#targets[@]} targets ran ${secs}s each without a failure"
