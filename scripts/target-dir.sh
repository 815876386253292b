#!/usr/bin/env bash
# Prints the directory cargo builds into for this workspace (CARGO_TARGET_DIR and
# build.target-dir honoured, else target/ here), for the scripts that take a binary from it;
# one line and exit 1 when cargo names none.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="$(cargo metadata --no-deps --format-version 1 --locked |
    grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)"
[ -n "$dir" ] || { echo "scripts/target-dir.sh: cargo metadata named no target directory" >&2; exit 1; }
echo "$dir"
