//! PV page version 3: paravirtual sampling (guest/include/abi/perfvm_pv.h, `struct
//! pv_sampling`). The guest gives each sampling counter a reload value; the model reloads it
//! at the wrap and acknowledges the overflow itself (pmu `reload.rs`), and the VMM reports
//! the reloads here, so the guest's PMI handler reads memory instead of MSRs. A guest that
//! also declares it needs no LVTPC mask gets each PMI as a single KVM_NMI, without the
//! KVM_GET_LAPIC/KVM_SET_LAPIC pair that masking takes.

use crate::vpmu::pv::{PvPage, V2_SIZE};
use pmu::{CountSource, PmcIdx, Pmu};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Offset of the section in the page.
const OFFSET: u64 = V2_SIZE as u64;
/// Counter slots of the page (PV_COUNTERS): GP 0-7, then fixed 0-2.
const SLOTS: u64 = pmu::PMC_SLOTS as u64;
/// Size of the section: flags, reserved, `reload[SLOTS]`, status, `reloads[SLOTS]`.
pub const SIZE: u32 = (8 + SLOTS * 8 + 8 + SLOTS * 8) as u32;
const RELOAD_OFFSET: u64 = OFFSET + 8;
const STATUS_OFFSET: u64 = RELOAD_OFFSET + SLOTS * 8;
const RELOADS_OFFSET: u64 = STATUS_OFFSET + 8;
/// Guest flag: reload counters with `reload[i]` (0: that counter follows the SDM).
const S_RELOAD: u32 = 1 << 0;
/// Guest flag: deliver PMIs as NMIs without masking LVTPC.
const S_PMI_NO_MASK: u32 = 1 << 1;

/// The counter in page slot `slot` (GP 0-7, then fixed 0-2).
fn counter(slot: u64) -> Option<PmcIdx> {
    if slot < 8 {
        PmcIdx::gp(slot as u8)
    } else {
        PmcIdx::fixed((slot - 8) as u8)
    }
}

/// Read the guest's sampling settings into the model. Returns whether PMIs go unmasked.
pub fn configure<B: CountSource>(mem: &GuestMemoryMmap, page: PvPage, pmu: &mut Pmu<B>) -> bool {
    if page.version < 3 {
        return false;
    }
    let flags: u32 = mem.read_obj(GuestAddress(page.gpa + OFFSET)).unwrap_or(0);
    for slot in 0..SLOTS {
        let value: u64 = mem.read_obj(GuestAddress(page.gpa + RELOAD_OFFSET + slot * 8)).unwrap_or(0);
        let reload = (flags & S_RELOAD != 0 && value != 0).then_some(value);
        if let Some(idx) = counter(slot) {
            pmu.set_auto_reload(idx, reload);
        }
    }
    flags & S_PMI_NO_MASK != 0
}

/// Report reloaded counters: OR them into `status`, less those in `sampled` (the VMM took
/// their samples: version 5), and publish every reload count.
pub fn publish_reloads<B: CountSource>(mem: &GuestMemoryMmap, page: PvPage, pmu: &Pmu<B>, reloaded: u64, sampled: u64) {
    let status: u64 = mem.read_obj(GuestAddress(page.gpa + STATUS_OFFSET)).unwrap_or(0);
    for slot in 0..SLOTS {
        if let Some(idx) = counter(slot).filter(|i| reloaded & i.mask() != 0) {
            let _ = mem.write_obj(pmu.auto_reloads(idx), GuestAddress(page.gpa + RELOADS_OFFSET + slot * 8));
        }
    }
    if reloaded & !sampled != 0 {
        let _ = mem.write_obj(status | (reloaded & !sampled), GuestAddress(page.gpa + STATUS_OFFSET));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmu::{Initiator, MockSource, MsrIndex, PmuConfig};

    #[test]
    fn reload_values_reach_the_model_and_reloads_are_published() {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
        let page = PvPage { gpa: 0x1000, version: 3 };
        let mut pmu = Pmu::new(PmuConfig::default(), MockSource::new()).unwrap();
        mem.write_obj(S_RELOAD | S_PMI_NO_MASK, GuestAddress(0x1000 + OFFSET)).unwrap();
        let reload = 100u64.wrapping_neg() & pmu::COUNTER_MASK;
        mem.write_obj(reload, GuestAddress(0x1000 + RELOAD_OFFSET)).unwrap();
        assert!(configure(&mem, page, &mut pmu));
        pmu.set_msr(MsrIndex::a_pmc(0), reload, Initiator::Guest).ok();
        pmu.set_msr(MsrIndex::perfevtsel(0), 0x5300c0, Initiator::Guest).ok(); // instructions, INT
        let gp0 = PmcIdx::gp(0).unwrap();
        pmu.backend_mut().advance(gp0, 250);
        assert!(pmu.collect_overflows());
        let reloaded = pmu.take_auto_reloaded();
        assert_eq!(reloaded, 1);
        mem.write_obj(4u64, GuestAddress(0x1000 + STATUS_OFFSET)).unwrap(); // a bit the guest has not cleared
        publish_reloads(&mem, page, &pmu, reloaded, 0);
        assert_eq!(mem.read_obj::<u64>(GuestAddress(0x1000 + STATUS_OFFSET)).unwrap(), 5);
        assert_eq!(mem.read_obj::<u64>(GuestAddress(0x1000 + RELOADS_OFFSET)).unwrap(), pmu.auto_reloads(gp0));
        // A counter the VMM sampled (version 5) is counted, not reported in status.
        mem.write_obj(0u64, GuestAddress(0x1000 + STATUS_OFFSET)).unwrap();
        publish_reloads(&mem, page, &pmu, reloaded, reloaded);
        assert_eq!(mem.read_obj::<u64>(GuestAddress(0x1000 + STATUS_OFFSET)).unwrap(), 0);
        // Turning the flag off returns every counter to the SDM rules.
        mem.write_obj(0u32, GuestAddress(0x1000 + OFFSET)).unwrap();
        assert!(!configure(&mem, page, &mut pmu));
        assert!(!pmu.auto_reload_active());
    }

    #[test]
    fn older_pages_have_no_sampling_section() {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
        let mut pmu = Pmu::new(PmuConfig::default(), MockSource::new()).unwrap();
        mem.write_obj(S_RELOAD | S_PMI_NO_MASK, GuestAddress(0x1000 + OFFSET)).unwrap();
        assert!(!configure(&mem, PvPage { gpa: 0x1000, version: 2 }, &mut pmu));
        assert!(!pmu.auto_reload_active());
    }
}
