#!/usr/bin/env bash
# Runs every pathem test: unit, statistical, end-to-end through pcap captures.
# Installs what the tests need first when run as root on Debian/Ubuntu (CI does exactly this).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for tool in ip:iproute2 ethtool:ethtool iperf3:iperf3 ping:iputils-ping nft:nftables; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool#*:}")
done
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "scripts/test.sh: installing ${need[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

cargo fmt --all -- --check
cargo test --workspace --locked 2>&1
