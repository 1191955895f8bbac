//! Software PEBS, the model's half (Intel SDM Vol. 3B, "Processor Event Based Sampling"
//! and "Debug Store (DS) Mechanism"): the registers IA32_PEBS_ENABLE, IA32_DS_AREA and
//! IA32_MISC_ENABLE, and when a PEBS assist is due. Every PMU owns IA32_MISC_ENABLE, so
//! its PEBS_UNAVAIL bit says the truth (set without PEBS) whatever the host's KVM reports;
//! the other two exist only with PEBS. The VMM does the memory half: it reads
//! the DS save area, writes the record, and tells the model what happened
//! ([`Pmu::pebs_record_written`], [`Pmu::pebs_record_dropped`],
//! [`Pmu::pebs_buffer_interrupt`]).
//!
//! What the model advertises (only with [`crate::PmuConfig::pebs`]): PEBS record format
//! [`PEBS_RECORD_FORMAT`] (the Nehalem layout, [`PEBS_RECORD_SIZE`] bytes: RFLAGS, RIP,
//! RAX..R15, IA32_PERF_GLOBAL_STATUS, data linear address, data source, latency), trap-like
//! (PERF_CAPABILITIES.PEBS_TRAP) with the architectural registers (PEBS_ARCH_REG).
//!
//! When an assist happens, per the SDM for this format ("Performance Counter
//! Prioritization"): a PEBS counter that overflows (max -> 0) sets its GLOBAL_STATUS bit
//! and *arms* PEBS; the first event after that (the counter's 0 -> 1 transition)
//! *triggers* the assist, at the completion of the instruction that caused it. The assist
//! writes a record (trap-like: the RIP is the next instruction's), clears the counter's
//! GLOBAL_STATUS bit and reloads the counter from the DS area's "PEBS counter reset" value;
//! if the record does not fit below the absolute maximum, the assist is skipped entirely
//! (no record, no reload, the status bit stays). So with a reset value of `-p` records come
//! every `p + 1` events.
//!
//! A PEBS counter never raises the counter-overflow PMI, whatever its EVENTSEL.INT (Linux
//! programs PEBS events with INT clear): its interrupt is the DS buffer's, raised when the
//! PEBS index reaches the interrupt threshold, with GLOBAL_STATUS.OvfBuffer (bit 62) set.
//!
//! Only the moment of overflow matters: PEBS costs nothing on VM entries and exits, and a
//! PEBS_ENABLE bit of a counter that is not enabled in both its EVENTSEL.EN and
//! GLOBAL_CTRL does nothing (such a counter does not count, so never overflows).

use crate::backend::CountSource;
use crate::msr::Initiator;
use crate::pmc::{PmcIdx, COUNTER_MASK};
use crate::pmu::Pmu;

/// The PEBS record format advertised in IA32_PERF_CAPABILITIES\[11:8\].
pub const PEBS_RECORD_FORMAT: u8 = 1;
/// Bytes in one record of [`PEBS_RECORD_FORMAT`]: 22 quadwords.
pub const PEBS_RECORD_SIZE: u64 = 0xB0;
/// IA32_PERF_GLOBAL_STATUS.OvfBuffer: the PEBS index reached the interrupt threshold.
pub const GLOBAL_STATUS_OVF_BUFFER: u64 = 1 << 62;
/// IA32_MISC_ENABLE bit 7: performance monitoring available (read-only; writes ignored).
pub const MISC_ENABLE_EMON: u64 = 1 << 7;
/// IA32_MISC_ENABLE bit 11: branch trace storage unavailable (read-only).
pub const MISC_ENABLE_BTS_UNAVAIL: u64 = 1 << 11;
/// IA32_MISC_ENABLE bit 12: PEBS unavailable (read-only).
pub const MISC_ENABLE_PEBS_UNAVAIL: u64 = 1 << 12;

/// Whether `addr` is canonical for 48-bit linear addresses (bits 63:47 all equal).
pub(crate) const fn is_canonical(addr: u64) -> bool {
    ((addr as i64) << 16 >> 16) as u64 == addr
}

impl<B: CountSource> Pmu<B> {
    /// IA32_PEBS_ENABLE.
    pub fn pebs_enable(&self) -> u64 {
        self.pebs_enable
    }

    /// IA32_DS_AREA: the guest-linear address of the DS save area.
    pub fn ds_area(&self) -> u64 {
        self.ds_area
    }

    /// IA32_PERF_GLOBAL_STATUS, without folding any counter (a PEBS record stores it).
    pub fn global_status(&self) -> u64 {
        self.global_status
    }

    /// The counters for which PEBS is in effect: PEBS_ENABLE bits of counters enabled in
    /// both their EVENTSEL.EN and GLOBAL_CTRL (GLOBAL_CTRL layout). A counter's overflow is
    /// a PEBS overflow exactly when it was in this set while its counts accrued (its host
    /// event runs only while it is enabled, and PEBS_ENABLE writes fold the counters they
    /// flip first), so nothing needs to follow this set on VM transitions.
    pub fn pebs_effective(&self) -> u64 {
        self.pebs_enable & self.local_enables & self.global_ctrl
    }

    /// Some PEBS assist is due ([`Pmu::take_pebs_overflows`]). No backend call.
    pub fn pebs_pending(&self) -> bool {
        self.pebs_pending != 0
    }

    /// The PEBS counters whose assist is due (GLOBAL_CTRL layout), now reported: for each
    /// the VMM writes a record and calls [`Pmu::pebs_record_written`] or
    /// [`Pmu::pebs_record_dropped`]. Call it after [`Pmu::collect_overflows`], which folds
    /// the counters and so finds the triggered assists.
    pub fn take_pebs_overflows(&mut self) -> u64 {
        std::mem::take(&mut self.pebs_pending)
    }

    /// The VMM wrote counter `idx`'s PEBS record: the assist clears the counter's overflow
    /// bit in GLOBAL_STATUS and reloads the counter with `reset` (the DS area's "PEBS
    /// counter reset" value, masked to the counter width), re-arming its overflow.
    pub fn pebs_record_written(&mut self, idx: PmcIdx, reset: u64) {
        if !self.caps.has(idx) {
            return;
        }
        self.global_status &= !idx.mask();
        self.write_counter(idx, reset & COUNTER_MASK);
        self.stats.pebs_records += 1;
    }

    /// The VMM could not write counter `idx`'s record (the buffer is full, or the DS area
    /// is unreadable): the assist is skipped entirely, so the counter keeps counting from
    /// where it is and its GLOBAL_STATUS bit stays set (SDM: "If the bounds checks fail,
    /// the PEBS will be skipped entirely").
    pub fn pebs_record_dropped(&mut self, _idx: PmcIdx) {
        self.stats.pebs_dropped += 1;
    }

    /// A record brought the PEBS index to the interrupt threshold: sets
    /// GLOBAL_STATUS.OvfBuffer (bit 62). The VMM then delivers the PMI through LVTPC.
    pub fn pebs_buffer_interrupt(&mut self) {
        self.global_status |= GLOBAL_STATUS_OVF_BUFFER;
        self.stats.pebs_interrupts += 1;
        self.stats.pmis_requested += 1;
    }

    /// Counter `idx` wrapped: if PEBS is enabled for it, arm its assist (no PMI) and return
    /// true. Its counts accrued while it counted, i.e. while fully enabled.
    pub(crate) fn pebs_overflow(&mut self, idx: PmcIdx) -> bool {
        if self.pebs_enable & idx.mask() == 0 {
            return false;
        }
        self.pebs_armed |= idx.mask();
        true
    }

    /// After a fold: an armed counter that has counted since its overflow triggers its
    /// assist. It is re-armed for a full period meanwhile, in case the assist is skipped.
    pub(crate) fn pebs_check_trigger(&mut self, idx: PmcIdx) {
        let pmc = &mut self.pmcs[idx.slot()];
        if self.pebs_armed & idx.mask() != 0 && pmc.saved != 0 {
            self.pebs_armed &= !idx.mask();
            self.pebs_pending |= idx.mask();
            pmc.needs_arm = true;
        }
    }

    /// Counter `idx` is an armed PEBS counter: its next notification is due after one
    /// event (the trigger), not at the wrap.
    pub(crate) fn is_pebs_armed(&self, idx: PmcIdx) -> bool {
        self.pebs_armed & idx.mask() != 0
    }

    /// Counter `idx` was written: it forgets an armed assist.
    pub(crate) fn pebs_disarm(&mut self, idx: PmcIdx) {
        self.pebs_armed &= !idx.mask();
    }

    /// WRMSR IA32_PEBS_ENABLE. Reserved bits (all but one per GP counter) #GP.
    pub(crate) fn write_pebs_enable(&mut self, data: u64) -> Option<()> {
        if data & self.caps.pebs_enable_reserved() != 0 {
            return None;
        }
        let diff = self.pebs_enable ^ data;
        // Counts so far accrued under the old setting: an overflow among them is a PEBS
        // overflow iff PEBS was on. Only flipped, running counters are touched.
        for idx in PmcIdx::iter_mask(diff) {
            self.fold_if_running(idx);
        }
        self.pebs_enable = data;
        // A counter leaving PEBS forgets its armed assist and waits for its wrap again.
        for idx in PmcIdx::iter_mask(self.pebs_armed & !data) {
            self.pebs_armed &= !idx.mask();
            if self.pmcs[idx.slot()].running() {
                self.arm(idx);
            } else {
                self.pmcs[idx.slot()].needs_arm = true;
            }
        }
        Some(())
    }

    /// WRMSR IA32_DS_AREA: a linear address, #GP unless canonical (KVM).
    pub(crate) fn write_ds_area(&mut self, data: u64) -> Option<()> {
        if !is_canonical(data) {
            return None;
        }
        self.ds_area = data;
        Some(())
    }

    /// WRMSR IA32_MISC_ENABLE, as KVM `kvm_set_msr_common`: a guest write that would
    /// change BTS_UNAVAIL or PEBS_UNAVAIL #GPs, EMON keeps its value, every other bit is
    /// kept as written (KVM checks no reserved bits here); the host may write anything.
    pub(crate) fn write_misc_enable(&mut self, data: u64, who: Initiator) -> Option<()> {
        let mut data = data;
        if who == Initiator::Guest {
            let read_only = MISC_ENABLE_BTS_UNAVAIL | MISC_ENABLE_PEBS_UNAVAIL;
            if (self.misc_enable ^ data) & read_only != 0 {
                return None;
            }
            data = data & !MISC_ENABLE_EMON | self.misc_enable & MISC_ENABLE_EMON;
        }
        self.misc_enable = data;
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_addresses() {
        assert!(is_canonical(0));
        assert!(is_canonical(0x0000_7FFF_FFFF_FFFF));
        assert!(is_canonical(0xFFFF_8000_0000_0000));
        assert!(is_canonical(u64::MAX));
        assert!(!is_canonical(0x0000_8000_0000_0000));
        assert!(!is_canonical(0xFFFF_7FFF_FFFF_FFFF));
        assert!(!is_canonical(1 << 63));
    }

    #[test]
    fn record_size_is_22_quadwords() {
        // RFLAGS, RIP, 16 GPRs, GLOBAL_STATUS, DLA, DSE, latency.
        assert_eq!(PEBS_RECORD_SIZE, 22 * 8);
    }
}
