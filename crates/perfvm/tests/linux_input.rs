//! A Linux kernel or initrd that cannot boot: one line on stderr, exit 2, no guest started.
//! These checks come before the VM is built, so they need no /dev/kvm; the kernels are
//! synthetic bzImages (vmm::loader::synthetic::bzimage).

mod common;
use common::*;
use vmm::loader::synthetic::bzimage;

/// A "vmlinux": 4 MiB at 16 MiB, entered at its start.
fn vmlinux() -> Vec<u8> {
    elf64(16 << 20, &[(16 << 20, 0x100, 4 << 20)])
}

#[test]
fn neither_elf_nor_bzimage() {
    let path = temp_file("linux-neither", b"MZ\x90\x00 not a kernel at all");
    assert_usage_error(&perfvm(&["run", &path, "--initrd", &path]), "not an ELF file (nor a Linux bzImage)");
}

#[test]
fn corrupt_payload() {
    let mut lz4 = 0x184c_2102u32.to_le_bytes().to_vec();
    lz4.extend_from_slice(&[0x40, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x10, 0, 0, 0]);
    let path = temp_file("linux-corrupt", &bzimage(&lz4));
    assert_usage_error(&perfvm(&["run", &path]), "bzImage payload (lz4) is corrupt");
    let path = temp_file("linux-unknown", &bzimage(b"\x00\x01 what is this"));
    assert_usage_error(&perfvm(&["run", &path]), "bzImage payload: unknown compression");
}

#[test]
fn kernel_larger_than_memory() {
    let path = temp_file("linux-big", &bzimage(&vmlinux()));
    assert_usage_error(&perfvm(&["run", &path, "--mem", "16"]), "does not fit in guest memory (16 MiB)");
}

#[test]
fn initrd_larger_than_memory() {
    let kernel = temp_file("linux-kernel", &bzimage(&vmlinux()));
    let initrd = temp_file("linux-initrd", &vec![0u8; 48 << 20]);
    assert_usage_error(
        &perfvm(&["run", &kernel, "--initrd", &initrd, "--mem", "64"]),
        "initrd of 50331648 bytes does not fit in guest memory (64 MiB)",
    );
}

#[test]
fn missing_initrd() {
    let kernel = temp_file("linux-kernel2", &bzimage(&vmlinux()));
    assert_usage_error(
        &perfvm(&["run", &kernel, "--initrd", "/nonexistent/initrd.cpio"]),
        "--initrd /nonexistent/initrd.cpio: no such file",
    );
}

#[test]
fn initrd_with_a_kernel_that_is_not_linux() {
    let guest = temp_file("not-linux.elf", &elf64(0x100000, &[(0x100000, 0x10, 0x10)]));
    let initrd = temp_file("linux-initrd2", b"070701");
    assert_usage_error(&perfvm(&["run", &guest, "--initrd", &initrd]), "--initrd needs a Linux kernel");
}
