//! Linux through the x86 64-bit boot protocol (Documentation/x86/boot.rst): a bzImage, whose
//! payload the VMM decompresses on the host so the guest never runs its decompressor under
//! emulation, or a vmlinux ELF. The kernel's PT_LOAD segments go to their physical addresses
//! and every vCPU 0 enters at the ELF entry (startup_64) in long mode with `boot_params` in
//! RSI; the APs wait for INIT/SIPI as on a PC.

pub mod acpi;
pub mod mptable;
pub mod params;

use super::{parse_segments, validate_placement, BootProtocol, KernelImage, LoadError};
use linux_image::{bzimage, decompress, ImageError};
use linux_loader::loader::bootparam::setup_header;
use thiserror::Error;

/// Why a Linux kernel or its initrd cannot be booted. One line each.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum LinuxError {
    /// The kernel image is unreadable (a bad bzImage, a payload that does not decompress).
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The initrd does not fit in guest memory beside the kernel.
    #[error("initrd of {size} bytes does not fit in guest memory ({mem_mib} MiB) above the kernel (ends at {kernel_end:#x})")]
    InitrdTooBig {
        /// Its size, bytes.
        size: u64,
        /// Guest RAM, MiB.
        mem_mib: u64,
        /// First address past the kernel.
        kernel_end: u64,
    },
}

/// What the Linux boot protocol needs beside the kernel's segments.
#[derive(Debug, Clone)]
pub struct LinuxBoot {
    /// The bzImage's setup header (None for a vmlinux ELF), copied into `boot_params`.
    pub header: Option<setup_header>,
    /// The payload's compression (None for a vmlinux ELF).
    pub compression: Option<decompress::Compression>,
    /// The initrd and where it goes.
    pub initrd: Option<Initrd>,
}

/// An initial ramdisk, placed in guest memory.
#[derive(Debug, Clone)]
pub struct Initrd {
    /// Guest-physical address (page aligned).
    pub addr: u64,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// Parse a bzImage or vmlinux for a guest of `mem_size` bytes and place `initrd`. Returns
/// the image and the bytes its segments refer to (the decompressed vmlinux for a bzImage).
pub fn load(bytes: &[u8], initrd: Option<Vec<u8>>, mem_size: u64) -> Result<(KernelImage, Vec<u8>), LoadError> {
    let (header, compression, vmlinux) = if bzimage::is_bzimage(bytes) {
        let bz = bzimage::parse(bytes).map_err(LinuxError::Image)?;
        let (kind, vmlinux) = decompress::decompress(bz.payload).map_err(LinuxError::Image)?;
        (Some(bz.header), Some(kind), vmlinux)
    } else {
        (None, None, bytes.to_vec())
    };
    let parsed = parse_segments(&vmlinux).map_err(|e| match (compression, e) {
        (Some(_), e) => LoadError::Linux(ImageError::Payload(e.to_string()).into()),
        (None, e) => e,
    })?;
    if !parsed.is_64bit {
        return Err(LinuxError::Image(ImageError::Payload("a 32-bit ELF".into())).into());
    }
    // vmlinux's segments carry virtual addresses in p_vaddr and physical ones in p_paddr.
    let segments = parsed.segments;
    if segments.is_empty() {
        return Err(LoadError::NoSegments);
    }
    validate_placement(&segments, mem_size)?;
    let end = segments.iter().map(super::Segment::end).max().unwrap_or(0);
    // startup_64's physical address: e_entry is physical in vmlinux (0x1000000).
    let entry = parsed.entry;
    if !segments.iter().any(|s| s.contains(entry)) {
        return Err(LoadError::EntryOutside(entry));
    }
    let initrd = initrd.map(|bytes| place_initrd(bytes, header.as_ref(), end, mem_size)).transpose()?;
    let image = KernelImage {
        protocol: BootProtocol::Linux64,
        entry,
        segments,
        end,
        vif_note: false,
        linux: Some(LinuxBoot { header, compression, initrd }),
    };
    Ok((image, vmlinux))
}

/// As high as the kernel allows (initrd_addr_max) and RAM holds, page aligned, above the
/// kernel: where boot loaders put it.
fn place_initrd(
    bytes: Vec<u8>,
    header: Option<&setup_header>,
    kernel_end: u64,
    mem_size: u64,
) -> Result<Initrd, LinuxError> {
    let max = header.map_or(0x7fff_ffff, |h| h.initrd_addr_max);
    let top = mem_size.min(u64::from(max) + 1);
    let size = bytes.len() as u64;
    let too_big = || LinuxError::InitrdTooBig { size, mem_mib: mem_size >> 20, kernel_end };
    let addr = top.checked_sub(size).ok_or_else(too_big)? & !0xfff;
    if addr < kernel_end.next_multiple_of(0x1000) {
        return Err(too_big());
    }
    Ok(Initrd { addr, bytes })
}

#[cfg(test)]
mod tests;
