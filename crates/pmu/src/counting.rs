//! The counting model: a virtual counter's value is `saved + (raw - raw_start)` while its
//! host event runs; stopping, reading or writing folds the delta into `saved`. Also the
//! primitives that open, close, start and stop a counter's host event.

use crate::backend::{CountSource, HostEventConfig};
use crate::overflow::{accumulate, period_to_overflow};
use crate::pmc::{HostEvent, PmcIdx};
use crate::pmu::Pmu;

impl<B: CountSource> Pmu<B> {
    /// Folds a running counter's new counts into `saved`, noting a wrap past 2^48.
    fn fold(&mut self, idx: PmcIdx) {
        let raw = self.host.read(idx);
        let pmc = &mut self.pmcs[idx.slot()];
        let (value, wrapped) = accumulate(pmc.saved, raw.wrapping_sub(pmc.raw_start));
        pmc.saved = value;
        pmc.raw_start = raw;
        if wrapped {
            self.overflowed(idx);
        }
        self.pebs_check_trigger(idx);
    }

    /// Folds counter `idx` if its host event runs.
    pub(crate) fn fold_if_running(&mut self, idx: PmcIdx) {
        if self.pmcs[idx.slot()].running() {
            self.fold(idx);
        }
    }

    /// Guest-visible value of counter `idx` (already masked to the width).
    pub(crate) fn read_counter(&mut self, idx: PmcIdx) -> u64 {
        self.fold_if_running(idx);
        self.pmcs[idx.slot()].saved
    }

    /// Sets counter `idx` to `value` (already widened/masked). A running counter restarts
    /// from `value` and is re-armed at once; a stopped one is re-armed when it starts.
    pub(crate) fn write_counter(&mut self, idx: PmcIdx, value: u64) {
        let running = self.pmcs[idx.slot()].running();
        if running {
            self.fold(idx);
        }
        self.pebs_disarm(idx);
        let pmc = &mut self.pmcs[idx.slot()];
        pmc.saved = value;
        pmc.needs_arm = true;
        if running {
            self.arm(idx);
        }
    }

    /// Asks for a notification when counter `idx` would wrap past 2^48 (an armed PEBS
    /// counter: at its next event, which triggers the assist).
    pub(crate) fn arm(&mut self, idx: PmcIdx) {
        let pebs_armed = self.is_pebs_armed(idx);
        let pmc = &mut self.pmcs[idx.slot()];
        pmc.needs_arm = false;
        let after = if pebs_armed { 1 } else { period_to_overflow(pmc.saved) };
        self.host.arm_overflow(idx, Some(after));
    }

    /// Creates counter `idx`'s host event, disabled. On failure the counter has none and
    /// counts nothing until a later reconcile (next write to it, or `sched_in`) retries.
    pub(crate) fn open_event(&mut self, idx: PmcIdx, config: HostEventConfig) {
        match self.host.open(idx, &config) {
            Ok(()) => {
                let pmc = &mut self.pmcs[idx.slot()];
                pmc.host = Some(HostEvent { config, enabled: false, idle_since: None });
                pmc.raw_start = 0;
                pmc.needs_arm = true;
                self.open_mask |= idx.mask();
                self.stats.events_created += 1;
            }
            Err(_) => self.stats.open_failures += 1,
        }
    }

    /// Folds and closes counter `idx`'s host event, if any.
    pub(crate) fn close_event(&mut self, idx: PmcIdx) {
        self.fold_if_running(idx);
        self.discard_event(idx);
    }

    /// Closes counter `idx`'s host event, if any, without reading it.
    pub(crate) fn discard_event(&mut self, idx: PmcIdx) {
        if self.pmcs[idx.slot()].host.take().is_some() {
            self.host.close(idx);
            self.open_mask &= !idx.mask();
            self.stats.events_closed += 1;
        }
    }

    /// Enables counter `idx`'s host event if it is open and stopped, arming it first if
    /// its notification is stale.
    pub(crate) fn start_event(&mut self, idx: PmcIdx) {
        self.start_events(idx.mask());
    }

    /// Disables counter `idx`'s host event if it runs, then folds its final count.
    pub(crate) fn stop_event(&mut self, idx: PmcIdx) {
        self.stop_events(idx.mask());
    }

    /// `start_event` for every counter of `mask`, in one backend call (a GLOBAL_CTRL write
    /// costs the host O(1) where the backend can group its events).
    pub(crate) fn start_events(&mut self, mask: u64) {
        let stopped = PmcIdx::iter_mask(mask & self.open_mask)
            .filter(|idx| matches!(self.pmcs[idx.slot()].host, Some(HostEvent { enabled: false, .. })))
            .fold(0, |m, idx| m | idx.mask());
        if stopped == 0 {
            return;
        }
        for idx in PmcIdx::iter_mask(stopped) {
            if self.pmcs[idx.slot()].needs_arm {
                self.arm(idx);
            }
        }
        self.host.enable_many(stopped);
        for idx in PmcIdx::iter_mask(stopped) {
            if let Some(h) = &mut self.pmcs[idx.slot()].host {
                h.enabled = true;
            }
        }
    }

    /// `stop_event` for every counter of `mask`, in one backend call.
    pub(crate) fn stop_events(&mut self, mask: u64) {
        let running = PmcIdx::iter_mask(mask & self.open_mask)
            .filter(|idx| self.pmcs[idx.slot()].running())
            .fold(0, |m, idx| m | idx.mask());
        if running == 0 {
            return;
        }
        // Disable before reading so no count slips in between.
        self.host.disable_many(running);
        for idx in PmcIdx::iter_mask(running) {
            self.fold(idx);
            if let Some(h) = &mut self.pmcs[idx.slot()].host {
                h.enabled = false;
            }
        }
    }
}
