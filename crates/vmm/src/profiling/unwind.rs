//! Guest call chains from the guest ELF's call frame information (`record -a --call-graph
//! dwarf`): the CFI in `.eh_frame` or `.debug_frame` says, for every instruction, where the
//! caller's frame and return address are, so chains hold the true callers of code built
//! without frame pointers (and of GCC 12's leaf functions, which get none whatever the
//! flags). framehop (samply's unwinder) does the unwinding, from the sampled registers and
//! guest memory read through the guest's page tables; where no FDE covers an address (hand
//! written assembly), it follows the frame pointer, as `record -g` does everywhere.
//!
//! The CFI comes from a file the user gave: it is parsed once per VM, and a sample's unwind
//! is bounded (MAX_DEPTH frames, reads that fail end the chain), checked (every step must
//! move up the stack), and shielded from a panic inside the unwinder.

use crate::profiling::sampler::MAX_DEPTH;
use crate::vstate::linear::LinearMemory;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};
use goblin::elf::Elf;

/// Which section the CFI came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CfiSection {
    /// `.eh_frame` (what `-fasynchronous-unwind-tables`, GCC's default, emits).
    EhFrame,
    /// `.debug_frame` (what `-g` emits; the guest kit's ELFs carry this one).
    DebugFrame,
}

impl CfiSection {
    /// The section's name.
    pub fn name(self) -> &'static str {
        match self {
            CfiSection::EhFrame => ".eh_frame",
            CfiSection::DebugFrame => ".debug_frame",
        }
    }
}

/// The CFI section an ELF image carries, if any (`.eh_frame` first, as framehop reads it).
pub fn cfi_section(elf_bytes: &[u8]) -> Option<CfiSection> {
    let elf = Elf::parse(elf_bytes).ok()?;
    let has = |wanted: &str| {
        elf.section_headers.iter().any(|s| {
            s.sh_size > 0
                && s.sh_type != goblin::elf::section_header::SHT_NOBITS
                && elf.shdr_strtab.get_at(s.sh_name) == Some(wanted)
        })
    };
    if has(".eh_frame") {
        Some(CfiSection::EhFrame)
    } else if has(".debug_frame") {
        Some(CfiSection::DebugFrame)
    } else {
        None
    }
}

/// The guest image's unwind information, shared by every vCPU thread of a VM.
pub struct GuestUnwinder {
    unwinder: UnwinderX86_64<Vec<u8>>,
    /// Where the CFI came from.
    pub section: CfiSection,
}

impl std::fmt::Debug for GuestUnwinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestUnwinder").field("section", &self.section).finish_non_exhaustive()
    }
}

/// A vCPU thread's cache of unwind rules (by address).
pub struct UnwindCache(CacheX86_64);

impl std::fmt::Debug for UnwindCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UnwindCache")
    }
}

impl Default for UnwindCache {
    fn default() -> Self {
        UnwindCache(CacheX86_64::new())
    }
}

/// The bytes of a named section of `elf`, if it has them in the file.
fn section<'a>(elf: &Elf<'_>, bytes: &'a [u8], name: &str) -> Option<(std::ops::Range<u64>, &'a [u8])> {
    let sh = elf.section_headers.iter().find(|s| elf.shdr_strtab.get_at(s.sh_name) == Some(name))?;
    if sh.sh_type == goblin::elf::section_header::SHT_NOBITS {
        return None;
    }
    let start = usize::try_from(sh.sh_offset).ok()?;
    let data = bytes.get(start..start.checked_add(usize::try_from(sh.sh_size).ok()?)?)?;
    Some((sh.sh_addr..sh.sh_addr.checked_add(sh.sh_size)?, data))
}

impl GuestUnwinder {
    /// The unwind information of a 64-bit ELF loaded where it is linked (as perfvm loads
    /// it), or None if it has no CFI section (or is no ELF64).
    pub fn from_elf(bytes: &[u8]) -> Option<GuestUnwinder> {
        let elf = Elf::parse(bytes).ok()?;
        if !elf.is_64 {
            return None;
        }
        let section_kind = cfi_section(bytes)?;
        let loads = elf.program_headers.iter().filter(|p| p.p_type == goblin::elf::program_header::PT_LOAD);
        let start = loads.clone().map(|p| p.p_vaddr).min()? & !0xfff;
        let end = loads.map(|p| p.p_vaddr.saturating_add(p.p_memsz)).max()?;
        let owned = |s: Option<(std::ops::Range<u64>, &[u8])>| s.map(|(range, data)| (range, data.to_vec()));
        let text = owned(section(&elf, bytes, ".text"));
        let eh_frame = owned(section(&elf, bytes, ".eh_frame"));
        let eh_frame_hdr = owned(section(&elf, bytes, ".eh_frame_hdr"));
        let info = ExplicitModuleSectionInfo {
            // Addresses are the linked ones; the base keeps them relative to the image.
            base_svma: start,
            text_svma: text.as_ref().map(|t| t.0.clone()),
            text: text.map(|t| t.1),
            got_svma: section(&elf, bytes, ".got").map(|g| g.0),
            eh_frame_svma: eh_frame.as_ref().map(|e| e.0.clone()),
            eh_frame: eh_frame.map(|e| e.1),
            eh_frame_hdr_svma: eh_frame_hdr.as_ref().map(|e| e.0.clone()),
            eh_frame_hdr: eh_frame_hdr.map(|e| e.1),
            debug_frame: section(&elf, bytes, ".debug_frame").map(|d| d.1.to_vec()),
            ..Default::default()
        };
        let mut unwinder = UnwinderX86_64::new();
        unwinder.add_module(Module::new("guest".into(), start..end, start, info));
        Some(GuestUnwinder { unwinder, section: section_kind })
    }

    /// The return addresses of the stack at `(rip, rsp, rbp)`, innermost caller first, at
    /// most MAX_DEPTH of them: the chain ends where a read fails, the unwinder finds the
    /// stack's end or a step would not move up the stack.
    pub fn chain(
        &self,
        cache: &mut UnwindCache,
        mem: &mut (impl LinearMemory + ?Sized),
        rip: u64,
        rsp: u64,
        rbp: u64,
    ) -> Vec<u64> {
        let mut chain = Vec::new();
        // framehop checks its steps; a panic on malformed CFI must still not end the VMM.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut read = |addr: u64| mem.read_u64(addr).ok_or(());
            let regs = UnwindRegsX86_64::new(rip, rsp, rbp);
            let mut frames = self.unwinder.iter_frames(rip, regs, &mut cache.0, &mut read);
            while chain.len() < MAX_DEPTH {
                match frames.next() {
                    Ok(Some(FrameAddress::ReturnAddress(ret))) => chain.push(ret.get()),
                    Ok(Some(FrameAddress::InstructionPointer(_))) => {}
                    Ok(None) | Err(_) => break,
                }
            }
        }));
        chain
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vstate::linear::Words;
    use std::collections::HashMap;

    /// A minimal ELF64 image: one PT_LOAD at 1 MiB and the named sections.
    fn elf_with(sections: &[(&str, u64, Vec<u8>)]) -> Vec<u8> {
        // Layout: header, phdr, section data, shstrtab, section headers.
        let mut shstr = vec![0u8];
        let mut names = Vec::new();
        for (name, _, _) in sections {
            names.push(shstr.len() as u32);
            shstr.extend_from_slice(name.as_bytes());
            shstr.push(0);
        }
        let shstr_name = shstr.len() as u32;
        shstr.extend_from_slice(b".shstrtab\0");
        let mut out = vec![0u8; 64 + 56];
        let mut offsets = Vec::new();
        for (_, _, data) in sections {
            offsets.push(out.len() as u64);
            out.extend_from_slice(data);
        }
        let shstr_off = out.len() as u64;
        out.extend_from_slice(&shstr);
        while !out.len().is_multiple_of(8) {
            out.push(0);
        }
        let shoff = out.len() as u64;
        out.extend_from_slice(&[0u8; 64]); // the null section
        let sh = |out: &mut Vec<u8>, name: u32, ty: u32, addr: u64, off: u64, size: u64| {
            out.extend_from_slice(&name.to_le_bytes());
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&0u64.to_le_bytes()); // flags
            out.extend_from_slice(&addr.to_le_bytes());
            out.extend_from_slice(&off.to_le_bytes());
            out.extend_from_slice(&size.to_le_bytes());
            out.extend_from_slice(&[0u8; 8]); // link, info
            out.extend_from_slice(&1u64.to_le_bytes()); // align
            out.extend_from_slice(&0u64.to_le_bytes()); // entsize
        };
        for (i, (_, addr, data)) in sections.iter().enumerate() {
            sh(&mut out, names[i], 1, *addr, offsets[i], data.len() as u64);
        }
        sh(&mut out, shstr_name, 3, 0, shstr_off, shstr.len() as u64);
        // ELF header.
        out[0..4].copy_from_slice(b"\x7fELF");
        out[4] = 2; // 64-bit
        out[5] = 1; // little-endian
        out[6] = 1;
        out[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
        out[18..20].copy_from_slice(&62u16.to_le_bytes()); // x86-64
        out[20..24].copy_from_slice(&1u32.to_le_bytes());
        out[24..32].copy_from_slice(&0x10_0000u64.to_le_bytes()); // entry
        out[32..40].copy_from_slice(&64u64.to_le_bytes()); // phoff
        out[40..48].copy_from_slice(&shoff.to_le_bytes());
        out[52..54].copy_from_slice(&64u16.to_le_bytes());
        out[54..56].copy_from_slice(&56u16.to_le_bytes());
        out[56..58].copy_from_slice(&1u16.to_le_bytes());
        out[58..60].copy_from_slice(&64u16.to_le_bytes());
        out[60..62].copy_from_slice(&(sections.len() as u16 + 2).to_le_bytes());
        out[62..64].copy_from_slice(&(sections.len() as u16 + 1).to_le_bytes());
        // PT_LOAD R+X at 1 MiB, 64 KiB.
        let ph = 64;
        out[ph..ph + 4].copy_from_slice(&1u32.to_le_bytes());
        out[ph + 4..ph + 8].copy_from_slice(&5u32.to_le_bytes());
        out[ph + 16..ph + 24].copy_from_slice(&0x10_0000u64.to_le_bytes());
        out[ph + 24..ph + 32].copy_from_slice(&0x10_0000u64.to_le_bytes());
        out[ph + 32..ph + 40].copy_from_slice(&0x1_0000u64.to_le_bytes());
        out[ph + 40..ph + 48].copy_from_slice(&0x1_0000u64.to_le_bytes());
        out
    }

    /// A .debug_frame with one CIE (CFA = rsp + 8, RA at CFA - 8) and one FDE for a leaf
    /// at [0x100100, 0x100140): no frame of its own, its return address at [rsp].
    fn leaf_debug_frame() -> Vec<u8> {
        let mut cie = Vec::new();
        cie.extend_from_slice(&0xffff_ffffu32.to_le_bytes()); // CIE id
        cie.push(1); // version
        cie.push(0); // augmentation ""
        cie.push(1); // code alignment
        cie.push(0x78); // data alignment -8
        cie.push(16); // return address register
        cie.extend_from_slice(&[0x0c, 7, 8]); // DW_CFA_def_cfa rsp, 8
        cie.extend_from_slice(&[0x90, 1]); // DW_CFA_offset r16 (RA), 1 * -8
        while (cie.len() + 4) % 8 != 0 {
            cie.push(0); // DW_CFA_nop
        }
        let mut out = (cie.len() as u32).to_le_bytes().to_vec();
        out.extend_from_slice(&cie);
        let mut fde = Vec::new();
        fde.extend_from_slice(&0u32.to_le_bytes()); // CIE at offset 0
        fde.extend_from_slice(&0x10_0100u64.to_le_bytes());
        fde.extend_from_slice(&0x40u64.to_le_bytes());
        while (fde.len() + 4) % 8 != 0 {
            fde.push(0);
        }
        out.extend_from_slice(&(fde.len() as u32).to_le_bytes());
        out.extend_from_slice(&fde);
        out
    }

    #[test]
    fn a_leaf_without_a_frame_gets_its_caller_from_the_cfi() {
        let elf = elf_with(&[(".text", 0x10_0000, vec![0x90; 0x200]), (".debug_frame", 0, leaf_debug_frame())]);
        assert_eq!(cfi_section(&elf), Some(CfiSection::DebugFrame));
        let u = GuestUnwinder::from_elf(&elf).expect("CFI");
        // The leaf at 0x100120 was called from 0x100050 (no CFI there: frame pointers), whose
        // frame at 0x8000 holds its caller 0x100080 and the end of the chain (rbp 0).
        let mut mem = Words(HashMap::from([(0x7ff0, 0x10_0050), (0x8000, 0), (0x8008, 0x10_0080)]));
        let chain = u.chain(&mut UnwindCache::default(), &mut mem, 0x10_0120, 0x7ff0, 0x8000);
        assert_eq!(chain, [0x10_0050, 0x10_0080]);
        // Frame pointers alone would have named the leaf's caller's caller first.
        assert_eq!(crate::profiling::sampler::frames(&mut mem, 0x8000, 0x7ff0), [0x10_0080]);
    }

    #[test]
    fn no_cfi_no_unwinder() {
        let elf = elf_with(&[(".text", 0x10_0000, vec![0x90; 0x200])]);
        assert_eq!(cfi_section(&elf), None);
        assert!(GuestUnwinder::from_elf(&elf).is_none());
        assert!(GuestUnwinder::from_elf(b"not an elf").is_none());
    }

    /// Garbage CFI and garbage stacks end chains, bounded, and never panic.
    #[test]
    fn corrupt_cfi_and_stacks_are_survived() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..200 {
            let mut cfi = leaf_debug_frame();
            for _ in 0..1 + round % 8 {
                let i = (next() as usize) % cfi.len();
                cfi[i] = next() as u8;
            }
            if round % 5 == 0 {
                cfi = (0..64).map(|_| next() as u8).collect();
            }
            let elf = elf_with(&[(".text", 0x10_0000, vec![0x90; 0x200]), (".debug_frame", 0, cfi)]);
            let Some(u) = GuestUnwinder::from_elf(&elf) else { continue };
            // A stack that loops back on itself.
            let words =
                (0..64u64).flat_map(|i| [(0x8000 + i * 16, 0x8000 + (i % 4) * 16), (0x8008 + i * 16, 0x10_0120)]);
            let mut mem = Words(words.chain((0..32u64).map(|i| (0x7f00 + i * 8, next()))).collect());
            let chain = u.chain(&mut UnwindCache::default(), &mut mem, 0x10_0100 + next() % 0x40, 0x7f00, 0x8000);
            assert!(chain.len() <= MAX_DEPTH);
        }
    }
}
