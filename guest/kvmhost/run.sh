#!/bin/sh
# Boot the standard-KVM host (build.sh's host.cpio) under QEMU TCG and run each CMD in it,
# in order, as a shell command line against its /dev/kvm (perfvm is /usr/bin/perfvm, the
# kit's guests are found by name, the Linux guest is /linux/vmlinuz + /linux/initramfs.cpio):
#
#   guest/kvmhost/run.sh [--timeout SECS] 'perfvm run pmu_arch' 'perfvm stat -e cycles ftest'
#
# The console streams to stdout (init frames each command with "kvmhost: run N: CMD" and
# "kvmhost: exit N: STATUS"). Exit 0 when init got to "kvmhost: done"; 124 when the timeout
# (default 3600 s) killed QEMU; 1 otherwise. KVMHOST_SMP and KVMHOST_MEM (MiB) size the host.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${KVMHOST_DIR:-$root/target/kvmhost}
linux=${PERFVM_LINUX_DIR:-$root/target/linux}
timeout=3600
if [ "${1:-}" = --timeout ]; then
    timeout=$2
    shift 2
fi

command -v qemu-system-x86_64 >/dev/null || { echo "kvmhost: qemu-system-x86_64 not found (apt-get install qemu-system-x86)" >&2; exit 1; }
sh "$here/build.sh"

# The commands travel as a second cpio appended to host.cpio: the kernel unpacks
# concatenated archives in order, so /cmds lands beside the rest.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/cmds.d"
for cmd in "$@"; do
    printf '%s\n' "$cmd"
done >"$tmp/cmds.d/cmds"
(cd "$tmp/cmds.d" && echo cmds | cpio -o -H newc --quiet -R 0:0) >"$tmp/cmds.cpio"
cat "$out/host.cpio" "$tmp/cmds.cpio" >"$tmp/run.cpio"

# TCG (whatever /dev/kvm this machine has): `-cpu max` emulates SVM with nested paging.
# quiet keeps the kernel's log off the console (init prints KVM's lines); panic=-1 and
# -no-reboot make a panic end QEMU; poweroff -f at the end does too. cryptomgr.notests: a
# boot under a loaded machine once hung in a crypto self-test (a soft lockup, 500 s).
# QEMU writes the console to a file that tail streams to stdout until QEMU is gone; the
# file then says whether init got to the end. Killed, we take QEMU with us.
: >"$tmp/console" # there before tail looks for it
timeout -k 10 "$timeout" qemu-system-x86_64 -accel tcg -cpu max -smp "${KVMHOST_SMP:-2}" \
    -m "${KVMHOST_MEM:-2048}" -display none -serial stdio -monitor none -no-reboot \
    -kernel "$linux/vmlinuz" -initrd "$tmp/run.cpio" -append "console=ttyS0 quiet panic=-1 cryptomgr.notests" \
    </dev/null >>"$tmp/console" 2>&1 &
qemu=$!
trap 'kill "$qemu" 2>/dev/null; exit 130' INT TERM HUP
tail -n +1 -f --pid="$qemu" "$tmp/console" &
status=0
wait "$qemu" || status=$?
wait
if grep -q "^kvmhost: done" "$tmp/console"; then exit 0; fi
if [ "$status" -eq 124 ]; then
    echo "kvmhost: timed out after $timeout s" >&2
    exit 124
fi
echo "kvmhost: QEMU ended (status $status) before init was done" >&2
exit 1
