//! Counter overflow: wrap detection, arming, GLOBAL_STATUS and the PMI request.

use crate::backend::CountSource;
use crate::pmc::{PmcIdx, COUNTER_MASK};
use crate::pmu::Pmu;

/// Counts until a counter holding `value` wraps past 2^48 (a full period from 0, as KVM
/// `get_sample_period`).
pub(crate) fn period_to_overflow(value: u64) -> u64 {
    match value.wrapping_neg() & COUNTER_MASK {
        0 => COUNTER_MASK + 1,
        p => p,
    }
}

/// `saved + delta` masked to the width, and whether it wrapped. `saved` is already masked.
pub(crate) fn accumulate(saved: u64, delta: u64) -> (u64, bool) {
    (saved.wrapping_add(delta) & COUNTER_MASK, delta > COUNTER_MASK - saved)
}

impl<B: CountSource> Pmu<B> {
    /// Counter `idx` wrapped: set its GLOBAL_STATUS bit and, if the configuration its
    /// counts accrued under asked for a PMI (INT / fixed PMI), owe the guest one (KVM
    /// `__kvm_perf_overflow`). A PEBS counter arms its assist instead of owing a PMI; an
    /// auto-reloaded counter (`reload.rs`) is reloaded and acknowledged at once.
    pub(crate) fn overflowed(&mut self, idx: PmcIdx) {
        self.stats.overflows += 1;
        self.pmcs[idx.slot()].needs_arm = true;
        if !self.auto_reload_on_overflow(idx) {
            // A PMU without a status register (AMD before PerfMonV2) records nothing.
            self.global_status |= idx.mask() & !self.caps.global_status_reserved();
            if self.pebs_overflow(idx) {
                return;
            }
        }
        let pmc = &self.pmcs[idx.slot()];
        if pmc.host.is_some_and(|h| h.config.interrupt) {
            self.pmi_pending = true;
        }
    }

    /// Called by the VMM when the backend signals an overflow notification: folds every
    /// running counter, sets GLOBAL_STATUS for those that wrapped, re-arms them, and returns
    /// whether a PMI must be delivered (some overflowed counter has INT / PMI set, now or
    /// since the last call). The VMM delivers it through LVTPC itself. PEBS counters never
    /// ask for this PMI; their due assists are then in [`Pmu::take_pebs_overflows`].
    pub fn collect_overflows(&mut self) -> bool {
        for idx in PmcIdx::iter_mask(self.open_mask) {
            let pmc = &self.pmcs[idx.slot()];
            if pmc.running() {
                self.fold_if_running(idx);
                if self.pmcs[idx.slot()].needs_arm {
                    self.arm(idx);
                }
            }
        }
        let pmi = std::mem::take(&mut self.pmi_pending);
        if pmi {
            self.stats.pmis_requested += 1;
        }
        pmi
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn period_edges() {
        assert_eq!(period_to_overflow(0), 1 << 48);
        assert_eq!(period_to_overflow(COUNTER_MASK), 1);
        assert_eq!(period_to_overflow(COUNTER_MASK - 9), 10);
        assert_eq!(period_to_overflow(0xFFFF_8000_0000), 0x8000_0000);
    }

    #[test]
    fn accumulate_wraps() {
        assert_eq!(accumulate(0, 5), (5, false));
        assert_eq!(accumulate(COUNTER_MASK - 1, 1), (COUNTER_MASK, false));
        assert_eq!(accumulate(COUNTER_MASK, 1), (0, true));
        assert_eq!(accumulate(COUNTER_MASK - 1, 3), (1, true));
        assert_eq!(accumulate(5, 1 << 48), (5, true), "a full period is a wrap");
        assert!(accumulate(5, u64::MAX).1);
    }
}
