//! Detection and placement of Linux kernels and initrds, on synthetic images.

use super::*;
use crate::loader::synthetic::{bzimage, elf64};
use crate::loader::{load_guest, LoadError};
use linux_image::is_linux;

const MIB: u64 = 1 << 20;

/// A "vmlinux": 4 MiB at 16 MiB, entered at its start.
fn vmlinux() -> Vec<u8> {
    elf64(16 * MIB, &[(16 * MIB, 0x100, 4 * MIB)])
}

#[test]
fn a_bzimage_boots_through_the_linux_protocol() {
    let image = bzimage(&vmlinux());
    assert!(is_linux(&image));
    let (k, bytes) = load_guest(image, Some(vec![7; 5000]), 64 * MIB).unwrap();
    assert_eq!(k.protocol, BootProtocol::Linux64);
    assert_eq!((k.entry, k.end), (16 * MIB, 20 * MIB));
    assert_eq!(bytes, vmlinux(), "segments refer to the payload");
    let linux = k.linux.unwrap();
    assert_eq!(linux.compression, Some(decompress::Compression::None));
    let initrd = linux.initrd.unwrap();
    assert_eq!(initrd.addr, (64 * MIB - 5000) & !0xfff, "as high as RAM allows, page aligned");
    let version = linux.header.unwrap().version;
    assert_eq!(version, 0x020f);
}

#[test]
fn perfvm_guests_are_not_linux() {
    let guest = elf64(0x100000, &[(0x100000, 0x10, 0x10)]);
    assert!(!is_linux(&guest));
    let (k, _) = load_guest(guest.clone(), None, 64 * MIB).unwrap();
    assert_eq!(k.protocol, BootProtocol::Direct64);
    assert!(k.linux.is_none());
    assert_eq!(load_guest(guest, Some(vec![0; 10]), 64 * MIB).unwrap_err(), LoadError::InitrdWithoutLinux);
    assert_eq!(load_guest(b"#!/bin/sh".to_vec(), Some(vec![0; 10]), 64 * MIB).unwrap_err(), LoadError::NotElf);
}

#[test]
fn what_does_not_fit_is_refused() {
    let e = load_guest(bzimage(&vmlinux()), None, 16 * MIB).unwrap_err();
    assert!(matches!(e, LoadError::OutOfMemory { .. }), "{e}");
    let e = load_guest(bzimage(&vmlinux()), Some(vec![0; 45 << 20]), 64 * MIB).unwrap_err();
    assert!(e.to_string().contains("initrd of 47185920 bytes does not fit in guest memory (64 MiB)"), "{e}");
    let e = load_guest(bzimage(&vmlinux()), Some(vec![0; 65 << 20]), 64 * MIB).unwrap_err();
    assert!(matches!(e, LoadError::Linux(LinuxError::InitrdTooBig { .. })), "{e}");
}

#[test]
fn bad_payloads_are_one_line_errors() {
    let mut lz4 = 0x184c_2102u32.to_le_bytes().to_vec();
    lz4.extend_from_slice(&[0x40, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x10, 0, 0, 0]);
    let e = load_guest(bzimage(&lz4), None, 64 * MIB).unwrap_err();
    assert!(matches!(e, LoadError::Linux(LinuxError::Image(ImageError::Corrupt { kind: "lz4", .. }))), "{e}");
    let e = load_guest(bzimage(b"\x00\x01garbage!"), None, 64 * MIB).unwrap_err();
    assert_eq!(e, LoadError::Linux(LinuxError::Image(ImageError::UnknownCompression)));
    let e = load_guest(bzimage(b"\x7fELF not really"), None, 64 * MIB).unwrap_err();
    assert!(matches!(e, LoadError::Linux(LinuxError::Image(ImageError::Payload(_)))), "{e}");
    for e in [e, LoadError::Linux(LinuxError::Image(ImageError::UnknownCompression))] {
        assert_eq!(e.to_string().lines().count(), 1);
    }
}
