//! ELF32/ELF64 program headers -> loadable segments (placed at p_paddr, as QEMU does).

use super::LoadError;
use goblin::elf::{header, program_header::PT_LOAD, Elf};

/// Owner and type of the note a guest carries to declare it follows the VIF convention
/// (guest/include/abi/perfvm_boot.h).
pub const NOTE_OWNER: &str = "perfvm";
/// Note type of the VIF declaration.
pub const NOTE_VIF: u32 = 0x100;

/// One PT_LOAD segment: `filesz` bytes from the file, then zeroes up to `memsz`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Guest-physical load address (p_paddr).
    pub paddr: u64,
    /// Where its bytes start in the file.
    pub file_offset: usize,
    /// Bytes taken from the file.
    pub filesz: u64,
    /// Bytes it occupies in memory (the rest is zeroed).
    pub memsz: u64,
}

impl Segment {
    /// First address past the segment (saturating, so huge memsz cannot wrap).
    pub fn end(&self) -> u64 {
        self.paddr.saturating_add(self.memsz)
    }

    /// Whether `addr` lies inside the segment.
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.paddr && addr < self.end()
    }
}

/// The parts of an ELF the loader needs.
#[derive(Debug)]
pub struct ParsedElf {
    /// ELFCLASS64 (direct boot) rather than ELFCLASS32 (multiboot).
    pub is_64bit: bool,
    /// The entry point, e_entry.
    pub entry: u64,
    /// The PT_LOAD segments, in program header order.
    pub segments: Vec<Segment>,
    /// The image carries the perfvm VIF note: it follows the native-mode convention.
    pub vif_note: bool,
}

/// Parse an x86 ELF executable's loadable segments, checking them against the file size.
pub fn parse_segments(bytes: &[u8]) -> Result<ParsedElf, LoadError> {
    if bytes.len() < 4 || &bytes[..4] != b"\x7fELF" {
        return Err(LoadError::NotElf);
    }
    let elf = Elf::parse(bytes).map_err(|e| LoadError::Truncated(e.to_string()))?;
    match (elf.is_64, elf.header.e_machine) {
        (true, header::EM_X86_64) | (false, header::EM_386) => {}
        (_, m) => return Err(LoadError::Unsupported(format!("machine {m} is not x86"))),
    }
    if elf.header.e_type != header::ET_EXEC {
        return Err(LoadError::Unsupported("not an executable (ET_EXEC)".into()));
    }
    let mut segments = Vec::new();
    for (index, ph) in elf.program_headers.iter().filter(|p| p.p_type == PT_LOAD).enumerate() {
        if ph.p_filesz > ph.p_memsz {
            return Err(LoadError::Truncated(format!("segment {index} filesz > memsz")));
        }
        let file_end = ph.p_offset.checked_add(ph.p_filesz);
        if file_end.is_none_or(|end| end > bytes.len() as u64) {
            return Err(LoadError::Truncated(format!(
                "segment {index} needs bytes up to {:#x}, file has {:#x}",
                ph.p_offset.saturating_add(ph.p_filesz),
                bytes.len()
            )));
        }
        if ph.p_memsz == 0 {
            continue;
        }
        segments.push(Segment {
            paddr: ph.p_paddr,
            file_offset: ph.p_offset as usize,
            filesz: ph.p_filesz,
            memsz: ph.p_memsz,
        });
    }
    let vif_note = elf
        .iter_note_headers(bytes)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .any(|note| note.n_type == NOTE_VIF && note.name == NOTE_OWNER && note.desc.len() >= 4);
    Ok(ParsedElf { is_64bit: elf.is_64, entry: elf.entry, segments, vif_note })
}
