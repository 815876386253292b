#!/usr/bin/env bash
# Tests the Debian package as a user meets it: builds it (scripts/package.sh, from the build
# PATHEM_PACKAGE_PROFILE and PATHEM_PACKAGE_TARGET name, else the test build), installs it with
# dpkg, checks that `pathem --version` runs, `man pathem-run` renders and the completions are
# where the shells look, then removes it and checks that every file it installed is gone.
# Needs root and dpkg; without them it says SKIPPED (a failure when PATHEM_REQUIRE_LIVE=1, as
# the test script sets for root).
set -euo pipefail
cd "$(dirname "$0")/.."
skip() {
    echo "package: SKIPPED: $1"
    [ "${PATHEM_REQUIRE_LIVE:-0}" = 1 ] && exit 1
    exit 0
}
[ "$(id -u)" = 0 ] || skip "not root (dpkg -i needs it)"
command -v dpkg >/dev/null 2>&1 || skip "no dpkg on this system"
command -v man >/dev/null 2>&1 || skip "no man (the test script installs man-db)"
if dpkg -s pathem >/dev/null 2>&1; then
    echo "package: a pathem package is installed already; the test would replace and remove it" >&2
    exit 1
fi
if ! out="$(PATHEM_PACKAGE_PROFILE="${PATHEM_PACKAGE_PROFILE:-test}" bash scripts/package.sh 2>&1)"; then
    echo "$out" >&2
    echo "package: building the package failed" >&2
    exit 1
fi
echo "$out" | grep -v "^warning: Only source paths" || true
# The path cargo deb printed for the package it wrote now (under cargo's target directory): a
# .deb left by an earlier build cannot stand in for this one.
deb="$(echo "$out" | grep '\.deb$' | tail -1)"
[ -n "$deb" ] && [ -f "$deb" ] || { echo "package: no .deb was built" >&2; exit 1; }
trap 'dpkg -r pathem >/dev/null 2>&1 || true' EXIT
dpkg -i "$deb" >/dev/null
files="$(dpkg -L pathem)"
version="$(/usr/bin/pathem --version)"
want="pathem $(grep -m1 '^version' Cargo.toml | cut -d'"' -f2) ("
case "$version" in "$want"*) ;; *) echo "package: --version says '$version', not '$want...'" >&2; exit 1 ;; esac
man -w pathem-run >/dev/null
MANPAGER=cat MANWIDTH=80 man pathem-run 2>/dev/null | grep -q "Emulate a path live" ||
    { echo "package: man pathem-run does not render" >&2; exit 1; }
pages="$(echo "$files" | grep -c '/man1/pathem.*\.1\.gz$')"
for f in /usr/share/bash-completion/completions/pathem /usr/share/zsh/vendor-completions/_pathem \
    /usr/share/fish/vendor_completions.d/pathem.fish /usr/share/doc/pathem/README.md \
    /usr/share/doc/pathem/examples/path.toml /usr/share/doc/pathem/copyright; do
    [ -s "$f" ] || { echo "package: $f missing" >&2; exit 1; }
done
bash -c 'source /usr/share/bash-completion/completions/pathem && complete -p pathem' >/dev/null
dpkg -r pathem >/dev/null
trap - EXIT
left=()
while read -r f; do
    [ -d "$f" ] && continue
    [ -e "$f" ] && left+=("$f")
done <<<"$files"
[ ${#left[@]} -eq 0 ] || { echo "package: dpkg -r left ${left[*]}" >&2; exit 1; }
echo "package: $(basename "$deb") ($(du -k "$deb" | cut -f1) KB): installs, '$version', $pages man pages, completions for bash, zsh and fish; dpkg -r removes all $(echo "$files" | wc -l) paths"
