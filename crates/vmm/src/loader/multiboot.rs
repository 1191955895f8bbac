//! Multiboot v1 header lookup (the format `qemu -kernel` accepts for bare-metal kernels).

/// Header magic in the kernel image.
pub const MULTIBOOT_HEADER_MAGIC: u32 = 0x1bad_b002;
/// Value in EAX at entry.
pub const MULTIBOOT_BOOTLOADER_MAGIC: u32 = 0x2bad_b002;
/// Flag 16: load addresses come from the header instead of the ELF.
pub const FLAG_AOUT_KLUDGE: u32 = 1 << 16;
/// The header must lie within this many bytes of the start of the file.
const SEARCH_LIMIT: usize = 8192;

/// The fixed part of a multiboot header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultibootHeader {
    /// Where it starts in the file.
    pub offset: usize,
    /// Its flags word (`FLAG_AOUT_KLUDGE`, ...).
    pub flags: u32,
}

/// Why an image has no usable multiboot header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MultibootError {
    /// The magic is there, its checksum is wrong.
    #[error("header at {0:#x} has a bad checksum")]
    BadChecksum(usize),
    /// No magic where a header may be.
    #[error("no header in the first 8 KiB")]
    NotFound,
    /// Load addresses from the header instead of the ELF (`FLAG_AOUT_KLUDGE`).
    #[error("a.out kludge (flag 16) is not supported")]
    AoutKludge,
}

/// Find a 4-byte aligned multiboot header in the first 8 KiB and verify its checksum.
pub fn find_header(bytes: &[u8]) -> Result<MultibootHeader, MultibootError> {
    let limit = bytes.len().min(SEARCH_LIMIT);
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let mut offset = 0;
    while offset + 12 <= limit {
        if word(offset) == MULTIBOOT_HEADER_MAGIC {
            let flags = word(offset + 4);
            let checksum = word(offset + 8);
            if MULTIBOOT_HEADER_MAGIC.wrapping_add(flags).wrapping_add(checksum) != 0 {
                return Err(MultibootError::BadChecksum(offset));
            }
            return Ok(MultibootHeader { offset, flags });
        }
        offset += 4;
    }
    Err(MultibootError::NotFound)
}
