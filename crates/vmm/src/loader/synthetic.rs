//! Minimal ELF64 executables built byte by byte, for tests of the loader, the CLI's error
//! paths, and foreign guests (code that knows nothing of the guest kit).

/// An ELF64 x86-64 executable with one PT_LOAD per (paddr, filesz, memsz), each segment's
/// bytes `hlt`; file data follows the headers.
pub fn elf64(entry: u64, segs: &[(u64, u64, u64)]) -> Vec<u8> {
    let bytes: Vec<Vec<u8>> = segs.iter().map(|&(_, filesz, _)| vec![0xf4; filesz as usize]).collect();
    let with: Vec<(u64, &[u8], u64)> = segs.iter().zip(&bytes).map(|(&(p, _, m), b)| (p, &b[..], m)).collect();
    elf64_with(entry, &with)
}

/// A guest whose only code is `code`, loaded and entered at 1 MiB.
pub fn elf64_code(code: &[u8]) -> Vec<u8> {
    elf64_with(0x100000, &[(0x100000, code, code.len() as u64)])
}

/// An ELF64 x86-64 executable with one PT_LOAD per (paddr, file bytes, memsz).
pub fn elf64_with(entry: u64, segs: &[(u64, &[u8], u64)]) -> Vec<u8> {
    let phoff = 64u64;
    let data_off = phoff + 56 * segs.len() as u64;
    let mut out = vec![0u8; 64];
    out[..4].copy_from_slice(b"\x7fELF");
    out[4] = 2; // ELFCLASS64
    out[5] = 1; // little endian
    out[6] = 1;
    out[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    out[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
    out[20..24].copy_from_slice(&1u32.to_le_bytes());
    out[24..32].copy_from_slice(&entry.to_le_bytes());
    out[32..40].copy_from_slice(&phoff.to_le_bytes());
    out[52..54].copy_from_slice(&64u16.to_le_bytes());
    out[54..56].copy_from_slice(&56u16.to_le_bytes());
    out[56..58].copy_from_slice(&(segs.len() as u16).to_le_bytes());
    let mut offset = data_off;
    for &(paddr, bytes, memsz) in segs {
        let filesz = bytes.len() as u64;
        let mut ph = vec![0u8; 56];
        ph[0..4].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
        ph[4..8].copy_from_slice(&5u32.to_le_bytes());
        ph[8..16].copy_from_slice(&offset.to_le_bytes());
        ph[16..24].copy_from_slice(&paddr.to_le_bytes());
        ph[24..32].copy_from_slice(&paddr.to_le_bytes());
        ph[32..40].copy_from_slice(&filesz.to_le_bytes());
        ph[40..48].copy_from_slice(&memsz.to_le_bytes());
        out.extend_from_slice(&ph);
        offset += filesz;
    }
    for &(_, bytes, _) in segs {
        out.extend_from_slice(bytes);
    }
    out
}

/// A minimal bzImage (boot protocol 2.15, 64-bit) around `payload`: a boot sector and one
/// setup sector with the setup header, then the payload at payload_offset 0. For the CLI's
/// Linux error paths: `payload` may be an ELF (uncompressed kernel) or anything else.
pub fn bzimage(payload: &[u8]) -> Vec<u8> {
    let mut image = vec![0u8; 1024];
    image[0x1f1] = 1; // setup_sects
    image[0x1fe..0x200].copy_from_slice(&0xaa55u16.to_le_bytes()); // boot_flag
    image[0x202..0x206].copy_from_slice(b"HdrS");
    image[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes()); // version 2.15
    image[0x211] = 1; // loadflags: LOADED_HIGH
    image[0x22c..0x230].copy_from_slice(&0x7fff_ffffu32.to_le_bytes()); // initrd_addr_max
    image[0x236..0x238].copy_from_slice(&1u16.to_le_bytes()); // xloadflags: XLF_KERNEL_64
    image[0x238..0x23c].copy_from_slice(&2047u32.to_le_bytes()); // cmdline_size
    image[0x248..0x24c].copy_from_slice(&0u32.to_le_bytes()); // payload_offset
    image[0x24c..0x250].copy_from_slice(&(payload.len() as u32).to_le_bytes()); // payload_length
    image.extend_from_slice(payload);
    image
}
