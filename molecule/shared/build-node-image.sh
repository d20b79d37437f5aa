#!/usr/bin/env bash
# build-node-image.sh: the image of the molecule scenarios' node containers, built offline from Debian: a
# debootstrap of bookworm (minbase) plus what Ansible needs to run there, turned into an image with
# `docker import`. The image is built once per version of this script and of roles/images' rootfs builder
# (their hash is the image's label and tag); later runs find it and return at once.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
project=$(cd "$here/../.." && pwd)
rootfs_builder="$project/roles/images/files/debian-rootfs.sh"

IMAGE=${MINIK8S_NODE_IMAGE:-minik8s-node:bookworm}
CACHE_DIR=${MINIK8S_MOLECULE_CACHE:-/var/cache/minik8s-molecule}
MIRROR=${MINIK8S_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
LABEL=minik8s.node-image.hash
# python3 and python3-apt for Ansible's modules, iproute2 for its facts (addresses, default route), tini as
# PID 1: supervisord, which the roles start, daemonizes and leaves its exited children to PID 1 to reap.
PACKAGES=(python3 python3-apt iproute2 tini)

hash=$( (cat "${BASH_SOURCE[0]}" "$rootfs_builder"; echo "$MIRROR ${PACKAGES[*]}") | sha256sum | cut -c1-16)

mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/.node-image.lock"
flock 9

if [[ $(docker image inspect -f "{{ index .Config.Labels \"$LABEL\" }}" "$IMAGE" 2>/dev/null) == "$hash" ]]; then
    echo "node image $IMAGE is up to date ($hash)"
    exit 0
fi

if ! command -v debootstrap >/dev/null; then
    echo "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null \
        || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
                 apt-get install -y -q --no-install-recommends debootstrap >/dev/null; }
fi

echo "building node image $IMAGE ($hash)"
started=$SECONDS
work=$(mktemp -d /var/tmp/minik8s-node-image.XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM
debootstrap --variant=minbase "$SUITE" "$work/base" "$MIRROR" >"$work/debootstrap.log" 2>&1 \
    || { cat "$work/debootstrap.log" >&2; exit 1; }
tar -cpf "$work/base.tar" -C "$work/base" .
rm -rf "$work/base"
sh "$rootfs_builder" "$work/base.tar" "$work/node.tar" "" "${PACKAGES[@]}" >"$work/rootfs.log" 2>&1 \
    || { cat "$work/rootfs.log" >&2; exit 1; }

previous=$(docker image inspect -f '{{ .Id }}' "$IMAGE" 2>/dev/null || true)
docker import \
    --change "LABEL $LABEL=$hash" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENTRYPOINT ["/usr/bin/tini", "--"]' \
    --change 'CMD ["sleep", "infinity"]' \
    "$work/node.tar" "$IMAGE" >/dev/null
# The image this one replaces, unless a container still uses it.
if [[ -n $previous ]]; then
    docker image rm "$previous" >/dev/null 2>&1 || true
fi
echo "built node image $IMAGE in $((SECONDS - started)) s"
