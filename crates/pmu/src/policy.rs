//! Host event policies: when a virtual counter's host event is created, reused, parked
//! and released. This is what perfvm measures.

use crate::backend::{CountSource, HostEventConfig};
use crate::pmc::{HostEvent, PmcIdx};
use crate::pmu::Pmu;
use serde::{Deserialize, Serialize};

/// Default lazy-release slice: 1 ms of vCPU run time.
pub const DEFAULT_RELEASE_AFTER_NS: u64 = 1_000_000;

/// How host events follow guest PMU programming.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Policy {
    /// Event reuse + lazy release (the Intel vPMU proposal, KVM since "Reuse perf_event to
    /// avoid unnecessary pmc_reprogram_counter"): a counter's host event is opened once per
    /// configuration; only a change of that configuration (event, umask, usr, os, edge,
    /// inv, cmask, int) closes and reopens it. Enable toggles (EVENTSEL.EN, FIXED_CTR_CTRL
    /// OS|USR, GLOBAL_CTRL) become backend enable/disable. An event the guest leaves
    /// stopped is closed by [`Pmu::tick`] once it has been idle for `release_after_ns` of
    /// vCPU run time (measured at tick granularity).
    Reuse {
        /// Idle run time after which a stopped host event is released.
        release_after_ns: u64,
    },
    /// KVM before the proposal (`reprogram_gp_counter`, `reprogram_fixed_counters`,
    /// `global_ctrl_changed`): every write that *changes* an EVENTSEL, a FIXED_CTR_CTRL
    /// field or a GLOBAL_CTRL bit closes the affected counters' host events and, if they
    /// still count, creates new ones. Old KVM returned early on an unchanged value and
    /// reprogrammed only the flipped GLOBAL_CTRL bits / changed fixed fields, so this does
    /// too. A counter that stops counting loses its host event at once.
    Legacy,
}

impl Default for Policy {
    fn default() -> Self {
        Policy::Reuse { release_after_ns: DEFAULT_RELEASE_AFTER_NS }
    }
}

/// What to do with a counter's host event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// No event, none needed.
    Nothing,
    /// The open event is the right one.
    Keep,
    /// Create one.
    Open(HostEventConfig),
    /// Close the open one and create another.
    Replace(HostEventConfig),
    /// Close it.
    Close,
    /// Keep it open but stopped, and start its idle clock.
    Park,
}

/// Decides a counter's host event. `changed`: its control register was just written with
/// a different value (Legacy recreates on any such write).
pub(crate) fn plan(
    policy: Policy,
    current: Option<HostEventConfig>,
    desired: Option<HostEventConfig>,
    changed: bool,
) -> Plan {
    let legacy = policy == Policy::Legacy;
    match (current, desired) {
        (None, None) => Plan::Nothing,
        (None, Some(d)) => Plan::Open(d),
        (Some(c), Some(d)) if c == d && !(legacy && changed) => Plan::Keep,
        (Some(_), Some(d)) => Plan::Replace(d),
        (Some(_), None) if legacy => Plan::Close,
        (Some(_), None) => Plan::Park,
    }
}

impl<B: CountSource> Pmu<B> {
    /// Brings counter `idx`'s host event in line with the guest registers and the policy.
    pub(crate) fn reconcile(&mut self, idx: PmcIdx, changed: bool) {
        if self.reconcile_config(idx, changed) {
            self.start_event(idx);
        } else {
            self.stop_event(idx);
        }
    }

    /// `reconcile` for every counter of `mask`, starting and stopping host events in one
    /// backend call each.
    pub(crate) fn reconcile_many(&mut self, mask: u64, changed: bool) {
        let (mut start, mut stop) = (0, 0);
        for idx in PmcIdx::iter_mask(mask) {
            if self.reconcile_config(idx, changed) {
                start |= idx.mask();
            } else {
                stop |= idx.mask();
            }
        }
        self.stop_events(stop);
        self.start_events(start);
    }

    /// The host event of counter `idx` as the registers and policy want it (opened,
    /// replaced, parked or closed); returns whether it should count now.
    fn reconcile_config(&mut self, idx: PmcIdx, changed: bool) -> bool {
        let desired = self.desired_config(idx);
        if changed && desired.is_none() && self.counting(idx) && self.filtered(idx) {
            self.stats.filtered_programs += 1;
        }
        let current = self.pmcs[idx.slot()].host.map(|h| h.config);
        match plan(self.policy, current, desired, changed) {
            Plan::Nothing => {}
            Plan::Keep => {
                if let Some(h) = &mut self.pmcs[idx.slot()].host {
                    if h.idle_since.take().is_some() {
                        self.stats.events_reused += 1;
                    }
                }
            }
            Plan::Open(cfg) => self.open_event(idx, cfg),
            Plan::Replace(cfg) => {
                self.close_event(idx);
                self.open_event(idx, cfg);
            }
            Plan::Close => self.close_event(idx),
            Plan::Park => {
                // Stopped by the caller (with the other counters of the same write).
                let now = self.now_ns;
                if let Some(h) = &mut self.pmcs[idx.slot()].host {
                    h.idle_since.get_or_insert(now);
                }
            }
        }
        desired.is_some() && self.scheduled_in
    }

    /// Advances the vCPU run-time clock to `run_time_ns` (accumulated time the vCPU ran)
    /// and, under [`Policy::Reuse`], closes host events idle for at least the release
    /// slice. Cheap when no host event is open.
    pub fn tick(&mut self, run_time_ns: u64) {
        self.now_ns = run_time_ns;
        let Policy::Reuse { release_after_ns } = self.policy else {
            return;
        };
        for idx in PmcIdx::iter_mask(self.open_mask) {
            if let Some(HostEvent { idle_since: Some(t), .. }) = self.pmcs[idx.slot()].host {
                if run_time_ns.saturating_sub(t) >= release_after_ns {
                    self.discard_event(idx);
                    self.stats.events_lazily_released += 1;
                }
            }
        }
    }

    /// The vCPU leaves its CPU: folds every running counter and disables its host event
    /// (events stay open). Idempotent.
    pub fn sched_out(&mut self) {
        if !std::mem::replace(&mut self.scheduled_in, false) {
            return;
        }
        self.stop_events(self.open_mask);
    }

    /// The vCPU is back: re-enables the host events of counters that should count, and
    /// retries creating those whose `open` failed. Idempotent.
    pub fn sched_in(&mut self) {
        if std::mem::replace(&mut self.scheduled_in, true) {
            return;
        }
        let wanted = self.global_ctrl & self.local_enables & self.caps.counters();
        self.reconcile_many(wanted | self.open_mask, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ArchEvent;

    fn cfg(cmask: u8) -> Option<HostEventConfig> {
        Some(HostEventConfig {
            event: ArchEvent::CoreCycles,
            usr: true,
            os: true,
            edge: false,
            inv: false,
            cmask,
            interrupt: false,
        })
    }

    const REUSE: Policy = Policy::Reuse { release_after_ns: 10 };

    #[test]
    fn reuse_plans() {
        for changed in [false, true] {
            assert_eq!(plan(REUSE, None, None, changed), Plan::Nothing);
            assert_eq!(plan(REUSE, None, cfg(0), changed), Plan::Open(cfg(0).unwrap()));
            assert_eq!(plan(REUSE, cfg(0), cfg(0), changed), Plan::Keep);
            assert_eq!(plan(REUSE, cfg(0), cfg(1), changed), Plan::Replace(cfg(1).unwrap()));
            assert_eq!(plan(REUSE, cfg(0), None, changed), Plan::Park);
        }
    }

    #[test]
    fn legacy_plans() {
        let l = Policy::Legacy;
        assert_eq!(plan(l, None, None, true), Plan::Nothing);
        assert_eq!(plan(l, None, cfg(0), true), Plan::Open(cfg(0).unwrap()));
        assert_eq!(plan(l, cfg(0), cfg(0), true), Plan::Replace(cfg(0).unwrap()));
        assert_eq!(plan(l, cfg(0), cfg(0), false), Plan::Keep);
        assert_eq!(plan(l, cfg(0), cfg(1), false), Plan::Replace(cfg(1).unwrap()));
        assert_eq!(plan(l, cfg(0), None, true), Plan::Close);
        assert_eq!(plan(l, cfg(0), None, false), Plan::Close);
    }

    #[test]
    fn default_is_reuse_1ms() {
        assert_eq!(Policy::default(), Policy::Reuse { release_after_ns: 1_000_000 });
    }
}
