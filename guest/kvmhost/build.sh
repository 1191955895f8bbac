#!/bin/sh
# Build target/kvmhost/host.cpio: the initramfs of a "standard KVM host", Debian's stock cloud
# kernel (the one guest/linux/fetch-and-build.sh fetches) booted under QEMU TCG with
# `-cpu max`, whose emulated SVM lets kvm_amd load and give a real /dev/kvm. It holds:
#
#   /init                        guest/kvmhost/init (loads KVM, runs /cmds)
#   /bin/busybox + applets       from busybox-static
#   /lib/modules/kvm/*.ko        irqbypass, kvm, kvm-amd from the same kernel package
#   /usr/bin/perfvm + libraries  target/release/perfvm (PERFVM_BIN), debug info stripped
#   /usr/bin/perfvm-bench        the bench binary beside it, where it is built (perfvm bench)
#   /guests/*.elf                the guest kit (guest/build, or PERFVM_GUEST_DIR)
#   /linux/vmlinuz, /linux/initramfs.cpio   the Linux guest assets, to boot Linux inside
#
# Cached: does nothing when host.cpio is newer than all of these. Output dir: KVMHOST_DIR.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${KVMHOST_DIR:-$root/target/kvmhost}
linux=${PERFVM_LINUX_DIR:-$root/target/linux}
perfvm=${PERFVM_BIN:-$root/target/release/perfvm}
bench=$(dirname "$perfvm")/perfvm-bench
[ -x "$bench" ] || bench=
guests=${PERFVM_GUEST_DIR:-$root/guest/build}
say() { echo "kvmhost-build: $*" >&2; }

[ -x "$perfvm" ] || { say "no perfvm binary at $perfvm (cargo build --release)"; exit 1; }
ls "$guests"/*.elf >/dev/null 2>&1 || { say "no guest kit in $guests (cargo build --release)"; exit 1; }
# The kernel, its modules (in the stage) and the Linux guest's initramfs; it caches itself.
PERFVM_LINUX_DIR=$linux sh "$root/guest/linux/fetch-and-build.sh"
mkdir -p "$out"

cpio=$out/host.cpio
if [ -s "$cpio" ] && [ -z "$(find "$here/init" "$here/build.sh" "$perfvm" $bench "$guests" "$linux/vmlinuz" "$linux/initramfs.cpio" \
    -maxdepth 1 -type f -newer "$cpio" 2>/dev/null)" ]; then
    exit 0
fi

# The modules of the kernel vmlinuz is (kernel-package names it: linux-image-VERSION).
kver=$(sed 's/^linux-image-//' "$linux/kernel-package")
mods=$linux/stage/lib/modules/$kver/kernel
[ -d "$mods" ] || { say "no modules for $kver in $linux/stage"; exit 1; }

rootfs=$out/rootfs
rm -rf "$rootfs"
mkdir -p "$rootfs"/bin "$rootfs"/sbin "$rootfs"/usr/bin "$rootfs"/proc "$rootfs"/sys "$rootfs"/dev \
    "$rootfs"/tmp "$rootfs"/root "$rootfs"/etc "$rootfs"/lib/modules/kvm "$rootfs"/guests "$rootfs"/linux
cp "$linux/stage/bin/busybox" "$rootfs/bin/busybox"
for applet in $("$rootfs/bin/busybox" --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$rootfs/bin/$applet"
done

# busybox insmod takes plain .ko only: decompress where the package compressed them.
for m in virt/lib/irqbypass arch/x86/kvm/kvm arch/x86/kvm/kvm-amd; do
    dst=$rootfs/lib/modules/kvm/$(basename "$m").ko
    if [ -f "$mods/$m.ko" ]; then cp "$mods/$m.ko" "$dst"
    elif [ -f "$mods/$m.ko.xz" ]; then xz -dc "$mods/$m.ko.xz" >"$dst"
    elif [ -f "$mods/$m.ko.zst" ]; then zstd -qdc "$mods/$m.ko.zst" >"$dst"
    else say "no module $m in $mods"; exit 1
    fi
done

# perfvm (and perfvm-bench) run on the host's libc: copy what ldd resolves, at the same
# paths. Its debug info
# (most of its size) only slows the boot's unpacking.
objcopy --strip-debug "$perfvm" "$rootfs/usr/bin/perfvm"
[ -z "$bench" ] || objcopy --strip-debug "$bench" "$rootfs/usr/bin/perfvm-bench"
ldd "$perfvm" $bench | awk '$3 ~ /^\// {print $3} $1 ~ /^\/.*[^:]$/ {print $1}' | sort -u | while read -r lib; do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
done

cp "$guests"/*.elf "$rootfs/guests/"
cp "$linux/vmlinuz" "$linux/initramfs.cpio" "$rootfs/linux/"
mknod "$rootfs/dev/console" c 5 1 2>/dev/null || true
cp "$here/init" "$rootfs/init"
chmod 755 "$rootfs/init"

(cd "$rootfs" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) >"$cpio.tmp"
mv "$cpio.tmp" "$cpio"
rm -rf "$rootfs"
say "$(du -h "$cpio" | cut -f1) $cpio (kernel $kver)"
