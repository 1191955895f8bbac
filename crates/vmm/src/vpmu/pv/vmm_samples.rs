//! PV page version 5: samples the VMM takes for the guest's agent (guest/include/abi/perfvm_pv.h,
//! `struct pv_vmm_sampling`). With paravirtual sampling the VMM already finds each sampling
//! counter's wrap at an exit and reloads it there (`sampling.rs`); a guest that opts in has
//! the VMM take the sample at that exit too, as `record -a` does (`profiling::sampler`): the
//! guest's RIP from the registers KVM synced out (what the PMI's NMI frame would have held),
//! the slot's event code and the task the guest keeps in the page, and with call chains the
//! return addresses by the frame pointers. The guest then programs its sampling counters
//! without INT: no NMI, no handler per sample.

use crate::devices::MAX_CALLCHAIN;
use crate::profiling::Sample;
use crate::vpmu::pv::{PvPage, V3_SIZE};
use pmu::PmcIdx;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Offset of the section in the page.
const OFFSET: u64 = V3_SIZE as u64;
/// Counter slots of the page (PV_COUNTERS): GP 0-7, then fixed 0-2.
const SLOTS: usize = pmu::PMC_SLOTS;
/// Size of the section: flags, task, `code[SLOTS]`, 5 reserved u16, samples.
pub const SIZE: u32 = (8 + SLOTS * 2 + 10 + 8) as u32;
const TASK_OFFSET: u64 = OFFSET + 4;
const CODE_OFFSET: u64 = OFFSET + 8;
const SAMPLES_OFFSET: u64 = CODE_OFFSET + SLOTS as u64 * 2 + 10;
/// Guest flag: the VMM samples each reloaded counter.
const V_SAMPLE: u32 = 1 << 0;
/// Guest flag: with call chains, by the frame pointers.
const V_CHAIN: u32 = 1 << 1;

/// What the guest asked of the VMM's samples, as read at registration or a doorbell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmmSampling {
    /// Take call chains.
    pub chain: bool,
    /// Each counter slot's event code.
    codes: [u16; SLOTS],
}

impl VmmSampling {
    /// The event code the guest gave counter `idx`'s samples.
    pub fn code(&self, idx: PmcIdx) -> u16 {
        self.codes[idx.slot()]
    }
}

/// The guest's request, if its page (version 5 on) asks the VMM to sample.
pub fn configure(mem: &GuestMemoryMmap, page: PvPage) -> Option<VmmSampling> {
    if page.version < 5 {
        return None;
    }
    let flags: u32 = mem.read_obj(GuestAddress(page.gpa + OFFSET)).ok()?;
    if flags & V_SAMPLE == 0 {
        return None;
    }
    let mut codes = [0u16; SLOTS];
    for (slot, code) in codes.iter_mut().enumerate() {
        *code = mem.read_obj(GuestAddress(page.gpa + CODE_OFFSET + 2 * slot as u64)).unwrap_or(0);
    }
    Some(VmmSampling { chain: flags & V_CHAIN != 0, codes })
}

/// The samples of the counters in `reloaded` (GLOBAL_CTRL layout) at this exit, whose guest
/// registers are `regs` (and `chain` their return addresses, if asked for): one each,
/// task from the page; their count is added to the page's `samples`.
pub fn take(
    mem: &GuestMemoryMmap,
    page: PvPage,
    asked: &VmmSampling,
    reloaded: u64,
    ip: u64,
    chain: &[u64],
) -> Vec<Sample> {
    let task: u32 = mem.read_obj(GuestAddress(page.gpa + TASK_OFFSET)).unwrap_or(0);
    let callchain = &chain[..chain.len().min(MAX_CALLCHAIN)];
    let samples: Vec<Sample> = PmcIdx::iter_mask(reloaded)
        .map(|idx| Sample { time_ns: 0, vcpu: 0, task, event: asked.code(idx), ip, callchain: callchain.to_vec() })
        .collect();
    let at = GuestAddress(page.gpa + SAMPLES_OFFSET);
    let n: u64 = mem.read_obj(at).unwrap_or(0);
    let _ = mem.write_obj(n.wrapping_add(samples.len() as u64), at);
    samples
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_5_page_that_asks_gets_one_sample_per_reloaded_counter() {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
        let page = PvPage { gpa: 0x1000, version: 5 };
        assert_eq!(configure(&mem, page), None, "not asked");
        mem.write_obj(V_SAMPLE | V_CHAIN, GuestAddress(0x1000 + OFFSET)).unwrap();
        mem.write_obj(0x003cu16, GuestAddress(0x1000 + CODE_OFFSET)).unwrap(); // PMC0: cycles
        mem.write_obj(0x00c0u16, GuestAddress(0x1000 + CODE_OFFSET + 2 * 8)).unwrap(); // fixed 0
        mem.write_obj(7u32, GuestAddress(0x1000 + TASK_OFFSET)).unwrap();
        assert_eq!(configure(&mem, PvPage { gpa: 0x1000, version: 4 }), None, "an older page has no section");
        let asked = configure(&mem, page).unwrap();
        assert!(asked.chain);
        let chain: Vec<u64> = (1..=40).collect();
        let s = take(&mem, page, &asked, 1 | 1 << 32, 0x10_0000, &chain);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].event, s[0].task, s[0].ip), (0x3c, 7, 0x10_0000));
        assert_eq!(s[1].event, 0xc0);
        assert_eq!(s[0].callchain.len(), MAX_CALLCHAIN, "cut as the agent's are");
        assert_eq!(mem.read_obj::<u64>(GuestAddress(0x1000 + SAMPLES_OFFSET)).unwrap(), 2);
    }

    #[test]
    fn the_section_is_laid_out_as_c_lays_it_out() {
        assert_eq!(SIZE, 48);
        assert_eq!(SAMPLES_OFFSET - OFFSET, 40);
    }
}
