#!/bin/sh
# Fetch Debian's stock cloud kernel, busybox-static and linux-perf (with the shared
# libraries perf needs) with `apt-get download`, build the kit's static Linux programs,
# and pack an uncompressed initramfs (cpio newc). Everything lands in target/linux/
# (override with PERFVM_LINUX_DIR); a second run with everything present does nothing.
#
#   target/linux/vmlinuz          the kernel (bzImage), as /boot/vmlinuz-* has it
#   target/linux/initramfs.cpio   busybox, perf + libraries, /init, /bin/loop, /bin/twofunc
#
# Needs apt-get, dpkg-deb, gcc, ldd and cpio (installed with apt-get when missing).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${PERFVM_LINUX_DIR:-$root/target/linux}
debs=$out/debs
stage=$out/stage
mkdir -p "$out"

say() { echo "fetch-and-build: $*" >&2; }

# Up to date: both files there and newer than every input of the initramfs.
if [ -s "$out/vmlinuz" ] && [ -s "$out/initramfs.cpio" ] &&
    [ -z "$(find "$here" -newer "$out/initramfs.cpio" -type f 2>/dev/null)" ]; then
    exit 0
fi

apt_ready=
need_apt() {
    [ -n "$apt_ready" ] && return 0
    if [ -z "$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | grep Depends:)" ]; then
        say "apt-get update"
        apt-get update -qq >&2
    fi
    apt_ready=1
}

command -v cpio >/dev/null || { need_apt; say "installing cpio"; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cpio >&2; }

# One .deb per package, kept in $debs (apt-get download names it NAME_VERSION_ARCH.deb).
fetch() {
    for pkg in "$@"; do
        if ! ls "$debs/${pkg}"_*.deb >/dev/null 2>&1; then
            need_apt
            say "apt-get download $pkg"
            # (apt's sandbox user may not write here: it downloads as root, and says so)
            (cd "$debs" && apt-get download -q "$pkg" 2>&1 | grep -v unsandboxed >&2)
        fi
    done
}
extract() {
    for pkg in "$@"; do
        for deb in "$debs/${pkg}"_*.deb; do
            dpkg-deb -x "$deb" "$stage"
        done
    done
}

mkdir -p "$debs" "$stage"
need_apt
kpkg=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')
[ -n "$kpkg" ] || { say "cannot find the package linux-image-cloud-amd64 depends on"; exit 1; }
fetch "$kpkg" busybox-static linux-perf
extract "$kpkg" busybox-static linux-perf

if [ ! -s "$out/vmlinuz" ]; then
    cp "$(ls "$stage"/boot/vmlinuz-* | head -n 1)" "$out/vmlinuz.tmp"
    mv "$out/vmlinuz.tmp" "$out/vmlinuz"
    echo "$kpkg" > "$out/kernel-package"
fi

# perf: /usr/bin/perf, or perf_<version> where /usr/bin/perf is the versioned wrapper.
perf=$(ls "$stage"/usr/bin/perf_* 2>/dev/null | head -n 1)
[ -n "$perf" ] || perf=$stage/usr/bin/perf
[ -x "$perf" ] || { say "no perf binary in linux-perf"; exit 1; }

# The shared libraries perf needs: ldd against the extracted packages first; a library that
# resolves to the host is mapped to its package (dpkg -S) and that package is fetched, so the
# initramfs holds only files from packages. Repeat until nothing new is needed.
libdirs="$stage/lib/x86_64-linux-gnu:$stage/usr/lib/x86_64-linux-gnu"
round=0
while :; do
    round=$((round + 1))
    [ $round -le 10 ] || { say "library closure does not settle"; exit 1; }
    missing=$(LD_LIBRARY_PATH=$libdirs ldd "$perf" | awk '/not found/ {print $1}')
    [ -z "$missing" ] || { say "libraries not found on the host or in the packages: $missing"; exit 1; }
    new=
    for lib in $(LD_LIBRARY_PATH=$libdirs ldd "$perf" | awk '$3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
        case $lib in "$stage"/*) continue ;; esac
        real=$(readlink -f "$lib")
        pkg=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$real" 2>/dev/null || dpkg -S "${lib#/usr}" 2>/dev/null) || true
        pkg=$(echo "$pkg" | head -n 1 | cut -d: -f1)
        [ -n "$pkg" ] || { say "no package owns $lib"; exit 1; }
        if ! ls "$debs/${pkg}"_*.deb >/dev/null 2>&1; then
            new="$new $pkg"
        fi
    done
    [ -n "$new" ] || break
    # shellcheck disable=SC2086
    fetch $new
    # shellcheck disable=SC2086
    extract $new
done
# ld.so and libc resolve to the host's /lib64 and /lib/x86_64-linux-gnu when libc6 is the
# host's own package: fetch it too so every file comes from a .deb.
fetch libc6
extract libc6

# The root file system.
rootfs=$out/rootfs
rm -rf "$rootfs"
mkdir -p "$rootfs"/bin "$rootfs"/sbin "$rootfs"/usr/bin "$rootfs"/lib/x86_64-linux-gnu "$rootfs"/lib64 \
    "$rootfs"/proc "$rootfs"/sys "$rootfs"/dev "$rootfs"/tmp "$rootfs"/root "$rootfs"/etc
cp "$stage/bin/busybox" "$rootfs/bin/busybox"
for applet in $("$rootfs/bin/busybox" --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$rootfs/bin/$applet"
done
cp "$perf" "$rootfs/usr/bin/perf"
LD_LIBRARY_PATH=$libdirs ldd "$perf" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
    base=$(basename "$name")
    if [ -e "$stage/lib/x86_64-linux-gnu/$base" ]; then
        src="$stage/lib/x86_64-linux-gnu/$base"
    elif [ -e "$stage/usr/lib/x86_64-linux-gnu/$base" ]; then
        src="$stage/usr/lib/x86_64-linux-gnu/$base"
    else
        say "library $base is in no fetched package"
        exit 1
    fi
    cp -L "$src" "$rootfs/lib/x86_64-linux-gnu/$base"
done
cp -L "$stage/lib64/ld-linux-x86-64.so.2" "$rootfs/lib64/ld-linux-x86-64.so.2" 2>/dev/null ||
    cp -L "$stage/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" "$rootfs/lib64/ld-linux-x86-64.so.2"
mknod "$rootfs/dev/console" c 5 1 2>/dev/null || true
cp "$here/init" "$rootfs/init"
chmod 755 "$rootfs/init"

# The kit's static programs (freestanding, raw syscalls, no libc).
make -s -C "$here" OUT="$out/bin" >&2
cp "$out/bin/loop" "$out/bin/twofunc" "$rootfs/bin/"

(cd "$rootfs" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) > "$out/initramfs.cpio.tmp"
mv "$out/initramfs.cpio.tmp" "$out/initramfs.cpio"
say "$(du -h "$out/vmlinuz" | cut -f1) vmlinuz ($kpkg), $(du -h "$out/initramfs.cpio" | cut -f1) initramfs.cpio in $out"
