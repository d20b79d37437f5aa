#!/bin/sh
# debian-rootfs.sh BASE_TARBALL OUTPUT_TARBALL SETUP PACKAGE...
# Unpacks a Debian root filesystem, installs PACKAGEs into it in a chroot (services are kept from starting),
# runs the shell command SETUP there (may be empty), strips apt's caches and writes the result as a tarball
# for `docker import`.
set -eu
base=$1 output=$2 setup=$3
shift 3
work=$(mktemp -d /var/tmp/minik8s-rootfs.XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM

tar -xpf "$base" -C "$work"
cp /etc/resolv.conf "$work/etc/resolv.conf"
printf '#!/bin/sh\nexit 101\n' >"$work/usr/sbin/policy-rc.d"
chmod 755 "$work/usr/sbin/policy-rc.d"
chroot "$work" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
if [ -n "$setup" ]; then
    chroot "$work" /bin/sh -c "$setup"
fi
chroot "$work" apt-get clean
rm -rf "$work"/var/lib/apt/lists/* "$work/usr/sbin/policy-rc.d"
: >"$work/etc/resolv.conf"
tar -cpf "$output.partial" -C "$work" .
mv "$output.partial" "$output"
