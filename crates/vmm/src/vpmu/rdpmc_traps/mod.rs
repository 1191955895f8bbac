//! RDPMC in a guest kernel on hosts that give the VMM no RDPMC exit.
//!
//! Linux reads every counter with RDPMC in kernel mode (`x86_perf_event_update`), with no
//! fallback. This host's emulator, which runs kernel code, makes RDPMC a #GP (KVM answers
//! it from an in-kernel PMU that is not the one in use), and so would KVM on any host. So
//! the VMM finds the kernel's RDPMC instructions before boot, decoding the text function
//! by function from the kernel's symbols (its `.symtab`, or the kallsyms tables every
//! distribution kernel carries: `kallsyms::of_elf`), never by byte pattern alone, and
//! turns the first byte of each (0F 33) into INT3 (CC 33). The host's emulator rejects
//! INT3 (an emulation-failure exit, as for Linux's own alternatives self-test), and the
//! VMM, seeing its own trap there, runs the RDPMC on the vPMU model and steps past both
//! bytes; a model #GP is the guest's #GP, as on hardware. An INT3 anywhere else, or one
//! the kernel wrote over a trap, is the guest's own and gets #BP (`complete.rs`).
//!
//! Kernel text the guest patches at run time: alternatives, static keys and ftrace rewrite
//! other bytes (a trap sits in a notrace function with no alternatives: Debian 6.1 has
//! one site, the out-of-line `native_read_pmc` of pv_ops); if the kernel ever rewrites a
//! trap's byte, the byte at RIP is no longer CC and the site is simply not ours anymore.
//! The exact backend decodes each instruction before it retires: [`RdpmcTraps::unpatch`]
//! shows it the original bytes, so it sees the RDPMC and runs it itself.
//!
//! On hardware hosts (kvm_amd, kvm_intel) the trap is `OUT imm8, AL` (E6 `RDPMC_TRAP_PORT`)
//! instead: an INT3 there is a #BP the guest takes, and KVM's #BP interception
//! (`KVM_GUESTDBG_USE_SW_BP`) is not delivered by every SVM (QEMU's TCG checks only the INTn
//! intercept on INT3). A port write exits to the VMM on every VMX and SVM, is as long as
//! RDPMC, and at CPL0 touches nothing else (`host::Breakpoint`).

use iced_x86::{Decoder, DecoderOptions, Mnemonic};
use linux_image::kallsyms::KernelSymbol;
use std::collections::BTreeMap;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// RDPMC's bytes.
const RDPMC: [u8; 2] = [0x0f, 0x33];
/// The port an `OUT imm8, AL` trap writes (unused by PC hardware and by perfvm's devices).
pub const RDPMC_TRAP_PORT: u16 = 0xe3;

/// The two bytes planted over an RDPMC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TrapForm {
    /// INT3 on the first byte (CC 33): kvm_pvm's emulator rejects it.
    #[default]
    Int3,
    /// `OUT RDPMC_TRAP_PORT, AL` (E6 E3): a port exit on hardware hosts.
    PortOut,
}

impl TrapForm {
    /// The trap's bytes.
    pub fn bytes(self) -> [u8; 2] {
        match self {
            TrapForm::Int3 => [0xcc, RDPMC[1]],
            TrapForm::PortOut => [0xe6, RDPMC_TRAP_PORT as u8],
        }
    }
}
/// Longest function decoded: larger "functions" are gaps between symbols (data, padding).
const MAX_FUNCTION: u64 = 1 << 20;

/// The RDPMC instructions of a guest kernel, each trapped by an INT3 the VMM planted.
#[derive(Debug, Default, Clone)]
pub struct RdpmcTraps {
    /// Guest-virtual address -> guest-physical address of each trap.
    sites: BTreeMap<u64, u64>,
    /// What is planted.
    form: TrapForm,
}

impl RdpmcTraps {
    /// The RDPMC instructions in the text of the 64-bit kernel ELF `elf` (its symbols
    /// found by `kallsyms::of_elf`), to be trapped by `form`; none where it has no symbols.
    pub fn find(elf: &[u8], form: TrapForm) -> Self {
        Self { form, ..Self::find_sites(elf) }
    }

    fn find_sites(elf: &[u8]) -> Self {
        let Some(symbols) = linux_image::kallsyms::of_elf(elf) else { return Self::default() };
        let Ok(parsed) = goblin::elf::Elf::parse(elf) else { return Self::default() };
        let loads: Vec<Load> = parsed
            .program_headers
            .iter()
            .filter(|p| p.p_type == goblin::elf::program_header::PT_LOAD && p.is_executable())
            .map(|p| Load { vaddr: p.p_vaddr, paddr: p.p_paddr, offset: p.p_offset, size: p.p_filesz })
            .collect();
        let mut sites = BTreeMap::new();
        for (function, end) in extents(&symbols) {
            let Some(load) = loads.iter().find(|l| l.holds(function)) else { continue };
            let end = end.min(load.vaddr + load.size);
            let (Ok(from), Ok(to)) = (
                usize::try_from(load.offset + (function - load.vaddr)),
                usize::try_from(load.offset + (end - load.vaddr)),
            ) else {
                continue;
            };
            let Some(code) = elf.get(from..to) else { continue };
            for va in rdpmc_in(code, function) {
                sites.insert(va, load.paddr + (va - load.vaddr));
            }
        }
        Self { sites, form: TrapForm::default() }
    }

    /// Put the trap on each site in guest memory (where RDPMC still is).
    pub fn plant(&self, mem: &GuestMemoryMmap) -> Result<(), vm_memory::GuestMemoryError> {
        for &pa in self.sites.values() {
            let mut bytes = [0u8; 2];
            mem.read_slice(&mut bytes, GuestAddress(pa))?;
            if bytes == RDPMC {
                mem.write_slice(&self.form.bytes(), GuestAddress(pa))?;
            }
        }
        Ok(())
    }

    /// How many sites there are.
    pub fn len(&self) -> usize {
        self.sites.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.sites.is_empty()
    }

    /// Whether the instruction in `bytes` (read at `rip`) is the VMM's trap: the site is one
    /// and its bytes are still the trap's.
    pub fn is_trap(&self, rip: u64, bytes: &[u8]) -> bool {
        self.sites.contains_key(&rip) && bytes.starts_with(&self.form.bytes())
    }

    /// `code`, read at guest-virtual `va`, as the kernel wrote it: RDPMC where a trap is.
    pub fn unpatch(&self, va: u64, code: &mut [u8]) {
        let end = va.saturating_add(code.len() as u64);
        for &site in self.sites.range(va..end).map(|(site, _)| site) {
            let at = (site - va) as usize;
            let trap = self.form.bytes();
            if code[at] == trap[0] && code.get(at + 1).is_none_or(|&b| b == trap[1]) {
                code[at] = RDPMC[0];
                if let Some(second) = code.get_mut(at + 1) {
                    *second = RDPMC[1];
                }
            }
        }
    }
}

/// An executable PT_LOAD segment.
struct Load {
    vaddr: u64,
    paddr: u64,
    offset: u64,
    size: u64,
}

impl Load {
    fn holds(&self, va: u64) -> bool {
        (self.vaddr..self.vaddr + self.size).contains(&va)
    }
}

/// Each text symbol with where it ends (the next symbol at a higher address).
fn extents(symbols: &[KernelSymbol]) -> Vec<(u64, u64)> {
    let mut starts: Vec<u64> = symbols.iter().filter(|s| s.is_text()).map(|s| s.addr).collect();
    let mut bounds: Vec<u64> = symbols.iter().map(|s| s.addr).collect();
    starts.dedup();
    bounds.dedup();
    starts
        .into_iter()
        .filter_map(|start| {
            let next = bounds.partition_point(|&b| b <= start);
            let end = *bounds.get(next)?;
            (end - start <= MAX_FUNCTION).then_some((start, end))
        })
        .collect()
}

/// The addresses of the RDPMC instructions in `code`, a function at `va`, decoded in
/// 64-bit mode from its first byte.
fn rdpmc_in(code: &[u8], va: u64) -> Vec<u64> {
    Decoder::with_ip(64, code, va, DecoderOptions::NONE)
        .into_iter()
        .filter(|insn| insn.mnemonic() == Mnemonic::Rdpmc && insn.len() == 2)
        .map(|insn| insn.ip())
        .collect()
}

#[cfg(test)]
mod tests;
