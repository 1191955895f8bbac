//! Auto-reload: paravirtual sampling without MSR accesses in the PMI handler. A guest that
//! asks for it (through the VMM's PV page) gives each sampling counter a reload value; when
//! such a counter wraps, the model reloads it at once (the overshoot kept, as a PEBS assist
//! reloads from the DS area), acknowledges the overflow itself (no GLOBAL_STATUS bit), and
//! reports it in [`Pmu::take_auto_reloaded`] and a per-counter reload count instead. The
//! PMI is still owed when the counter's INT/PMI bit asks for one.
//!
//! Without a reload value a counter follows the SDM exactly; `reset` forgets every value.

use crate::backend::CountSource;
use crate::pmc::{PmcIdx, COUNTER_MASK, PMC_SLOTS};
use crate::pmu::Pmu;

/// Per-counter reload values and what the reloads did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct AutoReload {
    values: [Option<u64>; PMC_SLOTS],
    counts: [u64; PMC_SLOTS],
    /// Counters reloaded since the last [`Pmu::take_auto_reloaded`] (GLOBAL_CTRL layout).
    reloaded: u64,
}

impl<B: CountSource> Pmu<B> {
    /// Reload counter `idx` with `value` (masked to the width) whenever it wraps; `None`
    /// returns it to SDM semantics. Ignored for a counter this PMU does not have.
    pub fn set_auto_reload(&mut self, idx: PmcIdx, value: Option<u64>) {
        if self.caps.has(idx) {
            self.auto_reload.values[idx.slot()] = value.map(|v| v & COUNTER_MASK);
        }
    }

    /// Whether any counter has a reload value.
    pub fn auto_reload_active(&self) -> bool {
        self.auto_reload.values.iter().any(Option::is_some)
    }

    /// Counters reloaded since the last call (GLOBAL_CTRL layout).
    pub fn take_auto_reloaded(&mut self) -> u64 {
        std::mem::take(&mut self.auto_reload.reloaded)
    }

    /// How many times counter `idx` was reloaded since the PMU was built or reset.
    pub fn auto_reloads(&self, idx: PmcIdx) -> u64 {
        self.auto_reload.counts[idx.slot()]
    }

    /// Counter `idx` just wrapped: reload it if it has a reload value; true if it did. An
    /// overshoot of whole periods (the wrap was noticed late) counts one reload per period,
    /// as hardware would have wrapped that often.
    pub(crate) fn auto_reload_on_overflow(&mut self, idx: PmcIdx) -> bool {
        let slot = idx.slot();
        let Some(value) = self.auto_reload.values[slot] else { return false };
        let period = (COUNTER_MASK + 1) - value; // value < 2^48, so period >= 1
        let pmc = &mut self.pmcs[slot];
        let overshoot = pmc.saved;
        pmc.saved = value + overshoot % period;
        self.auto_reload.counts[slot] += 1 + overshoot / period;
        self.auto_reload.reloaded |= idx.mask();
        true
    }
}
