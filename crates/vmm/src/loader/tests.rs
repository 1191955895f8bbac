//! Loader tests on synthetic ELF images built byte by byte.

use super::synthetic::elf64;
use super::*;

const MIB: u64 = 1 << 20;

/// A minimal ELF32 with one PT_LOAD and, optionally, a multiboot header at the data start.
fn elf32_multiboot(paddr: u64, checksum_ok: bool) -> Vec<u8> {
    let mut out = vec![0u8; 52];
    out[..4].copy_from_slice(b"\x7fELF");
    out[4] = 1; // ELFCLASS32
    out[5] = 1;
    out[6] = 1;
    out[16..18].copy_from_slice(&2u16.to_le_bytes());
    out[18..20].copy_from_slice(&3u16.to_le_bytes()); // EM_386
    out[20..24].copy_from_slice(&1u32.to_le_bytes());
    out[24..28].copy_from_slice(&(paddr as u32 + 12).to_le_bytes());
    out[28..32].copy_from_slice(&52u32.to_le_bytes());
    out[40..42].copy_from_slice(&52u16.to_le_bytes());
    out[42..44].copy_from_slice(&32u16.to_le_bytes());
    out[44..46].copy_from_slice(&1u16.to_le_bytes());
    let data_off = 52 + 32;
    let mut ph = vec![0u8; 32];
    ph[0..4].copy_from_slice(&1u32.to_le_bytes());
    ph[4..8].copy_from_slice(&(data_off as u32).to_le_bytes());
    ph[8..12].copy_from_slice(&(paddr as u32).to_le_bytes());
    ph[12..16].copy_from_slice(&(paddr as u32).to_le_bytes());
    ph[16..20].copy_from_slice(&64u32.to_le_bytes());
    ph[20..24].copy_from_slice(&64u32.to_le_bytes());
    out.extend_from_slice(&ph);
    let flags = 3u32;
    let mut checksum = 0u32.wrapping_sub(MULTIBOOT_HEADER_MAGIC_FOR_TEST).wrapping_sub(flags);
    if !checksum_ok {
        checksum ^= 1;
    }
    let mut data = vec![0u8; 64];
    data[0..4].copy_from_slice(&MULTIBOOT_HEADER_MAGIC_FOR_TEST.to_le_bytes());
    data[4..8].copy_from_slice(&flags.to_le_bytes());
    data[8..12].copy_from_slice(&checksum.to_le_bytes());
    out.extend_from_slice(&data);
    out
}

const MULTIBOOT_HEADER_MAGIC_FOR_TEST: u32 = 0x1bad_b002;

#[test]
fn loads_segments_at_paddr_with_bss() {
    let image = elf64(0x100000, &[(0x100000, 0x20, 0x1000), (0x200000, 0x10, 0x10)]);
    let k = load_kernel(&image, 256 * MIB).unwrap();
    assert_eq!(k.protocol, BootProtocol::Direct64);
    assert_eq!(k.entry, 0x100000);
    assert_eq!(k.segments.len(), 2);
    assert_eq!(k.segments[0].memsz, 0x1000);
    assert_eq!(k.segments[0].filesz, 0x20);
    assert_eq!(k.end, 0x200010);
}

#[test]
fn rejects_non_elf_and_truncation() {
    assert_eq!(load_kernel(b"hello world", MIB).unwrap_err(), LoadError::NotElf);
    assert_eq!(load_kernel(b"", MIB).unwrap_err(), LoadError::NotElf);
    let image = elf64(0x100000, &[(0x100000, 0x100, 0x100)]);
    let err = load_kernel(&image[..image.len() - 1], 256 * MIB).unwrap_err();
    assert!(matches!(err, LoadError::Truncated(_)), "{err}");
    let err = load_kernel(&image[..40], 256 * MIB).unwrap_err();
    assert!(matches!(err, LoadError::Truncated(_)), "{err}");
}

#[test]
fn rejects_segment_beyond_memory() {
    let image = elf64(0x100000, &[(0x100000, 0x10, 300 * MIB)]);
    let err = load_kernel(&image, 256 * MIB).unwrap_err();
    assert!(matches!(err, LoadError::OutOfMemory { index: 0, .. }), "{err}");
    assert!(err.to_string().contains("does not fit in guest memory (256 MiB)"));
}

#[test]
fn huge_memsz_does_not_wrap() {
    let image = elf64(0x100000, &[(0x100000, 0x10, u64::MAX - 0x10)]);
    assert!(matches!(load_kernel(&image, 256 * MIB), Err(LoadError::OutOfMemory { .. })));
}

#[test]
fn rejects_overlapping_segments() {
    let image = elf64(0x100000, &[(0x200000, 0x10, 0x1000), (0x100000, 0x10, 0x100001)]);
    assert_eq!(load_kernel(&image, 256 * MIB).unwrap_err(), LoadError::Overlap(0, 1));
}

#[test]
fn adjacent_segments_are_fine() {
    let image = elf64(0x100000, &[(0x100000, 0x10, 0x1000), (0x101000, 0x10, 0x10)]);
    assert!(load_kernel(&image, 256 * MIB).is_ok());
}

#[test]
fn rejects_boot_area() {
    let image = elf64(0x8000, &[(0x8000, 0x10, 0x10)]);
    assert!(matches!(load_kernel(&image, 256 * MIB), Err(LoadError::BootArea { .. })));
}

#[test]
fn rejects_entry_outside() {
    let image = elf64(0x500000, &[(0x100000, 0x10, 0x10)]);
    assert_eq!(load_kernel(&image, 256 * MIB).unwrap_err(), LoadError::EntryOutside(0x500000));
}

#[test]
fn rejects_no_segments() {
    let image = elf64(0x100000, &[]);
    assert_eq!(load_kernel(&image, 256 * MIB).unwrap_err(), LoadError::NoSegments);
}

#[test]
fn multiboot_header_found_and_checked() {
    let good = elf32_multiboot(0x100000, true);
    let k = load_kernel(&good, 256 * MIB).unwrap();
    assert_eq!(k.protocol, BootProtocol::Multiboot);
    let bad = elf32_multiboot(0x100000, false);
    let err = load_kernel(&bad, 256 * MIB).unwrap_err();
    assert!(err.to_string().contains("bad checksum"), "{err}");
}

#[test]
fn find_header_needs_alignment_and_limit() {
    let mut bytes = vec![0u8; 9000];
    bytes[8192..8196].copy_from_slice(&MULTIBOOT_HEADER_MAGIC_FOR_TEST.to_le_bytes());
    assert!(find_header(&bytes).is_err());
    let mut bytes = vec![0u8; 64];
    bytes[2..6].copy_from_slice(&MULTIBOOT_HEADER_MAGIC_FOR_TEST.to_le_bytes());
    assert!(find_header(&bytes).is_err());
}
