//! A Linux kernel image read on the host, by the VMM (which boots it) and by the profile
//! library (which names its addresses): a bzImage's setup header and payload (`bzimage`),
//! the payload's decompression (`decompress`), and the kernel's symbols from its kallsyms
//! tables where its ELF symbols were stripped (`kallsyms`).

pub mod bzimage;
pub mod decompress;
pub mod kallsyms;

use thiserror::Error;

/// Why a kernel image cannot be read. One line each.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ImageError {
    /// The bzImage's setup header is unusable (why).
    #[error("bad bzImage setup header: {0}")]
    Header(String),
    /// The payload starts with no compression magic we know.
    #[error("bzImage payload: unknown compression")]
    UnknownCompression,
    /// A compression we recognize but do not decompress.
    #[error("bzImage payload: {0} compression is not supported (gzip, lz4, zstd, xz, lzma are)")]
    UnsupportedCompression(&'static str),
    /// The payload does not decompress.
    #[error("bzImage payload ({kind}) is corrupt: {reason}")]
    Corrupt {
        /// The compression.
        kind: &'static str,
        /// What the decompressor said.
        reason: String,
    },
    /// The decompressed payload is not a 64-bit kernel ELF.
    #[error("bzImage payload is not a 64-bit ELF kernel: {0}")]
    Payload(String),
}

/// ELF note owners that mark a Linux kernel: its own notes, and Xen's (the PVH entry note).
const LINUX_NOTE_OWNERS: [&str; 2] = ["Linux", "Xen"];

/// Whether `bytes` is a kernel for the Linux boot protocol: a bzImage, or a 64-bit ELF that
/// carries Linux's or Xen's ELF notes (every vmlinux has them; perfvm's own guests do not).
pub fn is_linux(bytes: &[u8]) -> bool {
    bzimage::is_bzimage(bytes) || elf_has_linux_notes(bytes)
}

fn elf_has_linux_notes(bytes: &[u8]) -> bool {
    let Ok(elf) = goblin::elf::Elf::parse(bytes) else { return false };
    elf.is_64
        && elf
            .iter_note_headers(bytes)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .any(|note| LINUX_NOTE_OWNERS.contains(&note.name))
}

/// The kernel ELF (vmlinux) of a bzImage, decompressed; a vmlinux is its own.
pub fn kernel_elf(bytes: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, ImageError> {
    if !bzimage::is_bzimage(bytes) {
        return Ok(bytes.into());
    }
    let bz = bzimage::parse(bytes)?;
    Ok(decompress::decompress(bz.payload)?.1.into())
}
