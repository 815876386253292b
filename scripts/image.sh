#!/usr/bin/env bash
# Builds pathem's OCI image FROM scratch: a static musl pathem (the default, pure-Rust build)
# and an empty /tmp, tagged pathem:VERSION and pathem:latest, with podman, else docker, else
# buildah (the first found). Prints the image's size and fails if it is over 20 MB.
# As root on Debian/Ubuntu, installs what it needs first (podman and runc with apt-get, the
# musl target with rustup) and says so. Podman and buildah read scripts/containers.conf
# (CONTAINERS_CONF) unless CONTAINERS_CONF is set already.
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/scripts/containers.conf}"
target=x86_64-unknown-linux-musl
limit=$((20 * 1000 * 1000))

# As root, podman and runc (scripts/containers.conf asks for runc) are installed when missing:
# the image tests run podman.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 &&
    ! { command -v podman && command -v runc; } >/dev/null 2>&1; then
    echo "scripts/image.sh: installing podman runc" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends podman runc >/dev/null
fi
tool=""
for t in podman docker buildah; do
    command -v "$t" >/dev/null 2>&1 || continue
    # A docker client without a daemon cannot build.
    if [ "$t" = docker ] && ! docker info >/dev/null 2>&1; then
        echo "scripts/image.sh: docker's daemon does not answer: not using docker" >&2
        continue
    fi
    tool=$t
    break
done
if [ -z "$tool" ]; then
    echo "scripts/image.sh: no podman, docker or buildah here (apt-get install podman runc)" >&2
    exit 1
fi
if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    echo "scripts/image.sh: installing the Rust target $target" >&2
    rustup target add "$target" >&2
fi

cargo build --release --locked -p pathem --target "$target" 2>&1
# Where cargo built it (CARGO_TARGET_DIR and build.target-dir honoured).
tdir="$(bash scripts/target-dir.sh)"
bin="$tdir/$target/release/pathem"
version="$(cargo pkgid -p pathem | sed 's/.*[#@]//')"

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/rootfs/usr/local/bin" "$ctx/rootfs/tmp"
chmod 1777 "$ctx/rootfs/tmp"
cp "$bin" "$ctx/rootfs/usr/local/bin/pathem"
# The release profile keeps line tables (debug = 1): 24 MB with them, under 4 MB without.
if ! command -v strip >/dev/null 2>&1; then
    echo "scripts/image.sh: needs strip (apt-get install binutils)" >&2
    exit 1
fi
strip "$ctx/rootfs/usr/local/bin/pathem"
cp scripts/Containerfile "$ctx/Containerfile"

# The image these tags named before, removed once they name the new one (no dangling images).
old="$("$tool" image inspect --format '{{.Id}}' pathem:latest 2>/dev/null || true)"
case "$tool" in
    podman | docker)
        # podman: no intermediate images (each instruction would leave one).
        extra=()
        [ "$tool" = podman ] && extra=(--layers=false)
        "$tool" build "${extra[@]}" -q -f "$ctx/Containerfile" --build-arg "VERSION=$version" \
            -t "pathem:$version" -t pathem:latest "$ctx" >/dev/null
        size="$("$tool" image inspect --format '{{.Size}}' pathem:latest)"
        ;;
    buildah)
        buildah bud -q -f "$ctx/Containerfile" --build-arg "VERSION=$version" \
            -t "pathem:$version" -t pathem:latest "$ctx" >/dev/null
        size="$(buildah inspect --type image --format '{{.ImageSize}}' pathem:latest 2>/dev/null ||
            stat -c %s "$ctx/rootfs/usr/local/bin/pathem")"
        ;;
esac
new="$("$tool" image inspect --format '{{.Id}}' pathem:latest 2>/dev/null || true)"
if [ -n "$old" ] && [ "$old" != "$new" ]; then
    "$tool" rmi "$old" >/dev/null 2>&1 || true
fi
echo "pathem:$version and pathem:latest built with $tool: $size bytes ($((size / 1000)) kB)"
if [ "$size" -gt "$limit" ]; then
    echo "scripts/image.sh: the image is $size bytes, over the limit of $limit" >&2
    exit 1
fi
