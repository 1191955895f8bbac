//! Kernel image loading: validate an ELF's loadable segments against guest memory and
//! decide how the kernel is entered (64-bit direct boot or multiboot v1).

mod elf;
pub mod linux;
mod multiboot;
pub mod synthetic;

pub use elf::{parse_segments, Segment};
pub use multiboot::{find_header, MultibootHeader, MULTIBOOT_BOOTLOADER_MAGIC};

use crate::arch::x86_64::layout::{BOOT_AREA_END, BOOT_AREA_START};
use thiserror::Error;

/// Why a guest image cannot be loaded. Each message is one line for the CLI.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum LoadError {
    /// The file does not start with an ELF header (nor is it a bzImage).
    #[error("not an ELF file (nor a Linux bzImage)")]
    NotElf,
    /// An ELF we cannot boot (machine, class, type; what is wrong).
    #[error("unsupported ELF: {0}")]
    Unsupported(String),
    /// Headers or segments that do not hold together: cut off, or filesz > memsz (which).
    #[error("truncated ELF: {0}")]
    Truncated(String),
    /// No PT_LOAD segment.
    #[error("ELF has no loadable segments")]
    NoSegments,
    /// A segment ends beyond guest RAM.
    #[error("segment {index} [{start:#x}, {end:#x}) does not fit in guest memory ({mem_mib} MiB)")]
    OutOfMemory {
        /// Index of the segment among the loadable ones.
        index: usize,
        /// Its first guest-physical address.
        start: u64,
        /// First address past it.
        end: u64,
        /// Guest RAM, MiB.
        mem_mib: u64,
    },
    /// A segment overlaps the memory the VMM writes boot data to.
    #[error(
        "segment {index} [{start:#x}, {end:#x}) overlaps the VMM boot area [{:#x}, {:#x})",
        BOOT_AREA_START,
        BOOT_AREA_END
    )]
    BootArea {
        /// Index of the segment among the loadable ones.
        index: usize,
        /// Its first guest-physical address.
        start: u64,
        /// First address past it.
        end: u64,
    },
    /// Two segments (their indices) overlap.
    #[error("segments {0} and {1} overlap")]
    Overlap(usize, usize),
    /// The entry point is in no segment.
    #[error("entry point {0:#x} is outside the loaded segments")]
    EntryOutside(u64),
    /// A 32-bit ELF whose multiboot header is missing or bad (why).
    #[error("32-bit ELF without a valid multiboot header: {0}")]
    Multiboot(multiboot::MultibootError),
    /// A Linux kernel (bzImage or vmlinux) or its initrd that cannot boot.
    #[error(transparent)]
    Linux(#[from] linux::LinuxError),
    /// `--initrd` given with a kernel that is not Linux.
    #[error("--initrd needs a Linux kernel (a bzImage or a vmlinux ELF)")]
    InitrdWithoutLinux,
}

/// How the vCPUs enter the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootProtocol {
    /// 64-bit long mode at the entry, perfvm boot info in RSI.
    Direct64,
    /// 32-bit protected mode per multiboot v1, info in EBX.
    Multiboot,
    /// Linux's 64-bit boot protocol: long mode at startup_64, `boot_params` in RSI; APs
    /// wait for INIT/SIPI.
    Linux64,
}

/// A validated kernel image, ready to copy into guest memory.
#[derive(Debug)]
pub struct KernelImage {
    /// How the vCPUs enter it.
    pub protocol: BootProtocol,
    /// Guest-physical entry point.
    pub entry: u64,
    /// What to copy where, in program header order.
    pub segments: Vec<Segment>,
    /// Highest guest-physical address used by the image (exclusive).
    pub end: u64,
    /// The image declares (ELF note) that it follows the native-mode VIF convention.
    pub vif_note: bool,
    /// Linux boot protocol data (setup header, initrd), for `BootProtocol::Linux64`.
    pub linux: Option<linux::LinuxBoot>,
}

/// Parse and validate `bytes` as any guest kernel: a Linux bzImage or vmlinux (booted with
/// `initrd`, if any, through the Linux protocol), or one of perfvm's ELF64 or multiboot
/// guests. Returns the image and the bytes its segments are copied from.
pub fn load_guest(bytes: Vec<u8>, initrd: Option<Vec<u8>>, mem_size: u64) -> Result<(KernelImage, Vec<u8>), LoadError> {
    if linux_image::is_linux(&bytes) {
        return linux::load(&bytes, initrd, mem_size);
    }
    if initrd.is_some() {
        // Say what is wrong with the file first (not an ELF, ...), then the option.
        load_kernel(&bytes, mem_size)?;
        return Err(LoadError::InitrdWithoutLinux);
    }
    Ok((load_kernel(&bytes, mem_size)?, bytes))
}

/// Parse and validate `bytes` as a kernel for a guest with `mem_size` bytes of RAM.
pub fn load_kernel(bytes: &[u8], mem_size: u64) -> Result<KernelImage, LoadError> {
    let parsed = parse_segments(bytes)?;
    let protocol = if parsed.is_64bit {
        BootProtocol::Direct64
    } else {
        let header = find_header(bytes).map_err(LoadError::Multiboot)?;
        if header.flags & multiboot::FLAG_AOUT_KLUDGE != 0 {
            return Err(LoadError::Multiboot(multiboot::MultibootError::AoutKludge));
        }
        BootProtocol::Multiboot
    };
    let segments = parsed.segments;
    if segments.is_empty() {
        return Err(LoadError::NoSegments);
    }
    validate_placement(&segments, mem_size)?;
    if !segments.iter().any(|s| s.contains(parsed.entry)) {
        return Err(LoadError::EntryOutside(parsed.entry));
    }
    let end = segments.iter().map(Segment::end).max().unwrap_or(0);
    Ok(KernelImage { protocol, entry: parsed.entry, segments, end, vif_note: parsed.vif_note, linux: None })
}

/// Every segment inside RAM, outside the boot area, and no two overlapping.
pub(crate) fn validate_placement(segments: &[Segment], mem_size: u64) -> Result<(), LoadError> {
    for (index, s) in segments.iter().enumerate() {
        let (start, end) = (s.paddr, s.end());
        if end > mem_size || end < start {
            return Err(LoadError::OutOfMemory { index, start, end, mem_mib: mem_size >> 20 });
        }
        if start < BOOT_AREA_END && end > BOOT_AREA_START {
            return Err(LoadError::BootArea { index, start, end });
        }
    }
    let mut order: Vec<usize> = (0..segments.len()).collect();
    order.sort_by_key(|&i| segments[i].paddr);
    for pair in order.windows(2) {
        let (a, b) = (&segments[pair[0]], &segments[pair[1]]);
        if a.end() > b.paddr {
            return Err(LoadError::Overlap(pair[0].min(pair[1]), pair[0].max(pair[1])));
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests;
