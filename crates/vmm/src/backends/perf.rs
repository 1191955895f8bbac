//! The perf backend with one host `perf_event_open` event per virtual counter, on the vCPU
//! thread. With a host PMU, hardware events that count guest mode only (exclude_host). With
//! none (perf_event_open of hardware events fails, as on kvm_pvm hosts), a software
//! `task-clock` event per counter, turned into cycles with the TSC frequency; such a clock
//! also counts the vCPU thread's time handling exits in the VMM. Overflows arrive as a
//! signal to the vCPU thread (see `kick::pmu_signal`).
//!
//! This is the legacy policy's backend on a software clock (an event per counter, created
//! on every write, as KVM did: the baseline), and every policy's with a host PMU. Under
//! reuse, software-clock counters share one clock instead (`clock.rs`). A stopped event's
//! count is kept from when it stopped, so reading it costs nothing.

use super::perf_sys::*;
use accounting::{Armed, HostEvent};
use period::{clock_counts, lands, MIN_CLOCK_PERIOD_NS, NEVER};
use pmu::{ArchEvent, BackendError, CountSource, HostEventConfig, PmcIdx, PMC_SLOTS};
use std::sync::Arc;

pub(crate) mod accounting;
mod mode;
pub(crate) mod period;
pub use accounting::{EventBudget, NotificationStats};
pub use mode::{PerfMode, HARDWARE, SOFTWARE_CLOCK};
pub use period::clock_supports;

#[derive(Debug)]
struct PerfCounter {
    event: HostEvent,
    enabled: bool,
    armed: Option<Armed>,
    /// While disabled: the raw count it stopped at, in event units.
    stopped_at: Option<u64>,
    /// Armed while disabled: the host period must be set when it starts.
    period_stale: bool,
    /// Software clock, ref-cycles: the guest sees the TSC while the counter runs, as on
    /// hardware, not the thread's CPU time (a busy host shares that out); the task-clock
    /// event still brings the overflow notification (late when the host is busy).
    tsc: Option<super::Stopwatch>,
    /// The count the last read of the running event returned: the model re-arms a counter
    /// right after folding it, and that fold's read serves the arming too.
    last_read: Option<u64>,
    /// The sampling period last given to the host event, in event units (0: none).
    period: u64,
}

/// Host perf events of one vCPU, one per counter.
#[derive(Debug)]
pub struct PerfSource {
    mode: PerfMode,
    counters: [Option<PerfCounter>; PMC_SLOTS],
    budget: Arc<EventBudget>,
    /// Shortest software-clock period now allowed (MIN_CLOCK_PERIOD_NS, or more when
    /// throttled).
    floor_ns: u64,
    /// What became of this vCPU's overflow notifications.
    pub notifications: NotificationStats,
    /// Counters re-armed while the current notification is handled: their period is new
    /// already (GLOBAL_CTRL layout).
    rearmed: u64,
}

impl PerfSource {
    /// A source counting in `mode` with no event open, drawing host events from `budget`.
    pub fn new(mode: PerfMode, budget: Arc<EventBudget>) -> Self {
        PerfSource {
            mode,
            counters: std::array::from_fn(|_| None),
            budget,
            floor_ns: MIN_CLOCK_PERIOD_NS,
            notifications: NotificationStats::default(),
            rearmed: 0,
        }
    }

    /// Let no software-clock period be shorter than `ns` (PMI throttling; never below the
    /// static floor). Hardware events are left to the kernel's own throttling.
    pub fn set_period_floor(&mut self, ns: u64) {
        self.floor_ns = ns.max(MIN_CLOCK_PERIOD_NS);
    }

    /// The floor in event units: the shortest distance a notification can come at.
    fn floor_in_event_units(&self) -> u64 {
        match self.mode {
            PerfMode::Hardware => 1,
            PerfMode::SoftwareClock { .. } => self.mode.in_event_units(self.floor_ns),
        }
    }

    /// What the host counts with.
    pub fn mode(&self) -> PerfMode {
        self.mode
    }

    fn attr(&self, config: &HostEventConfig) -> Option<PerfEventAttr> {
        let mut attr = PerfEventAttr { sample_period: NEVER, flags: FLAG_DISABLED, ..Default::default() };
        match self.mode {
            PerfMode::Hardware => {
                // The host cannot filter edge/inv/cmask for these generic events: refuse
                // rather than count something else.
                if config.edge || config.inv || config.cmask != 0 {
                    return None;
                }
                attr.type_ = PERF_TYPE_HARDWARE;
                attr.config = match config.event {
                    ArchEvent::CoreCycles => PERF_COUNT_HW_CPU_CYCLES,
                    ArchEvent::Instructions => PERF_COUNT_HW_INSTRUCTIONS,
                    ArchEvent::RefCycles => PERF_COUNT_HW_REF_CPU_CYCLES,
                    ArchEvent::LlcReferences => PERF_COUNT_HW_CACHE_REFERENCES,
                    ArchEvent::LlcMisses => PERF_COUNT_HW_CACHE_MISSES,
                    ArchEvent::Branches => PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
                    ArchEvent::BranchMisses => PERF_COUNT_HW_BRANCH_MISSES,
                };
                attr.flags |= FLAG_EXCLUDE_HOST | FLAG_EXCLUDE_HV;
                if !config.os {
                    attr.flags |= FLAG_EXCLUDE_KERNEL;
                }
                if !config.usr {
                    attr.flags |= FLAG_EXCLUDE_USER;
                }
            }
            PerfMode::SoftwareClock { .. } => {
                if !clock_counts(config) {
                    return None;
                }
                attr.type_ = PERF_TYPE_SOFTWARE;
                attr.config = PERF_COUNT_SW_TASK_CLOCK;
            }
        }
        Some(attr)
    }

    /// Event units -> host units, no shorter than the floor.
    fn to_host_units(&self, counts: u64) -> u64 {
        self.mode.to_host_units(counts, self.floor_ns)
    }

    /// A counter stopped at raw count `now`: keep the count and see what notifications it
    /// missed.
    fn stopped(&mut self, pmc: PmcIdx, now: u64) {
        self.count_lost(pmc, now);
        let c = self.counter(pmc);
        c.last_read = None;
        if let Some(t) = &mut c.tsc {
            t.stop(super::host_tsc());
        }
        c.enabled = false;
        c.stopped_at = Some(now);
    }

    /// The host event's count in event units (what notifications and periods follow).
    fn clock(&mut self, pmc: PmcIdx) -> u64 {
        let c = self.counter(pmc);
        match (c.enabled, c.stopped_at) {
            (false, Some(now)) => now,
            _ => {
                let raw = c.event.read().unwrap_or(0);
                let now = self.mode.in_event_units(raw);
                self.counter(pmc).last_read = Some(now);
                now
            }
        }
    }

    fn counter(&mut self, pmc: PmcIdx) -> &mut PerfCounter {
        self.counters[pmc.slot()].as_mut().expect("model protocol: event is open")
    }

    /// An overflow notification is about to be handled.
    pub fn notification_taken(&mut self) {
        self.notifications.taken += 1;
        self.rearmed = 0;
    }

    /// After an overflow notification: the kernel's sampling timer is periodic, so a short
    /// period set for "what remains" would keep firing at that rate. Re-issue every armed,
    /// enabled counter's remaining distance, except those the model re-armed while handling
    /// it (the ones that wrapped: a second re-arm would cost two more syscalls for nothing).
    pub fn rearm_after_notification(&mut self) {
        for slot in 0..PMC_SLOTS {
            let Some(c) = &self.counters[slot] else { continue };
            let pmc = PmcIdx::from_slot(slot).expect("slot of a counter");
            if c.enabled && c.armed.is_some() && self.rearmed & pmc.mask() == 0 {
                self.restart_period(pmc);
            }
        }
    }

    /// Counter `pmc` is re-armed or stopped at raw count `now`: count the notifications it
    /// missed.
    fn count_lost(&mut self, pmc: PmcIdx, now: u64) {
        let floor = self.floor_in_event_units();
        let c = self.counters[pmc.slot()].as_ref().expect("model protocol: event is open");
        if let (true, Some(armed)) = (c.enabled, c.armed) {
            self.notifications.count_lost(armed, now, floor);
        }
    }

    /// (Re)start the overflow period from now, for what remains of the armed distance.
    fn restart_period(&mut self, pmc: PmcIdx) {
        // Just started: the count it stopped at is still the count.
        let now = match self.counter(pmc).stopped_at {
            Some(now) => now,
            None => self.clock(pmc),
        };
        self.restart_period_at(pmc, now);
    }

    /// `restart_period` with the count `now` known (no read).
    fn restart_period_at(&mut self, pmc: PmcIdx, now: u64) {
        let Some(armed) = self.counter(pmc).armed else { return };
        let period = self.to_host_units(armed.remaining(now));
        let in_units = self.mode.in_event_units(period);
        let c = self.counter(pmc);
        c.period = in_units;
        // A failure leaves the old period; perf_sys counts it for --stats.
        c.event.set_period(period).ok();
    }

    /// Whether the host's sampling timer already expires where the model now wants counter
    /// `pmc` to overflow (no ioctl then).
    fn timer_lands(&mut self, pmc: PmcIdx, old: Option<Armed>, now: u64, after: u64) -> bool {
        let period = self.counter(pmc).period;
        old.is_some_and(|old| {
            let fired_at = old.at + old.after;
            period > 0 && now >= fired_at && lands(fired_at + period, now + after, after)
        })
    }
}

impl CountSource for PerfSource {
    fn supports(&self, event: ArchEvent) -> bool {
        let config =
            HostEventConfig { event, usr: false, os: true, edge: false, inv: false, cmask: 0, interrupt: false };
        match self.mode {
            PerfMode::SoftwareClock { .. } => self.attr(&config).is_some(),
            PerfMode::Hardware => self.attr(&config).is_some_and(|a| PerfEvent::open(&a).is_ok()),
        }
    }

    fn open(&mut self, pmc: PmcIdx, config: &HostEventConfig) -> Result<(), BackendError> {
        let attr = self.attr(config).ok_or(BackendError::Unsupported)?;
        let event = HostEvent::open(&attr, &self.budget)?;
        let software = matches!(self.mode, PerfMode::SoftwareClock { .. });
        let tsc = (software && config.event == ArchEvent::RefCycles).then(super::Stopwatch::default);
        self.counters[pmc.slot()] = Some(PerfCounter {
            event,
            enabled: false,
            armed: None,
            stopped_at: Some(0),
            period_stale: false,
            tsc,
            last_read: None,
            period: 0,
        });
        Ok(())
    }

    fn close(&mut self, pmc: PmcIdx) {
        self.counters[pmc.slot()] = None;
    }

    fn enable(&mut self, pmc: PmcIdx) {
        let c = self.counter(pmc);
        c.event.enable().ok(); // a failure is counted by perf_sys (--stats)
        c.enabled = true;
        c.last_read = None;
        if let Some(t) = &mut c.tsc {
            t.start(super::host_tsc());
        }
        if std::mem::take(&mut c.period_stale) {
            // A period set while disabled is not restarted by the kernel: do it now.
            self.restart_period(pmc);
        }
        self.counter(pmc).stopped_at = None;
    }

    fn disable(&mut self, pmc: PmcIdx) {
        // Disable first, so the count read is final.
        self.counter(pmc).event.disable().ok(); // a failure is counted by perf_sys (--stats)
        let raw = self.counter(pmc).event.read().unwrap_or(0);
        let now = self.mode.in_event_units(raw);
        self.stopped(pmc, now);
    }

    fn read(&mut self, pmc: PmcIdx) -> u64 {
        match &self.counter(pmc).tsc {
            Some(t) => t.value(super::host_tsc()),
            None => self.clock(pmc),
        }
    }

    fn arm_overflow(&mut self, pmc: PmcIdx, after: Option<u64>) {
        match after {
            Some(after) => {
                // Every model path folds a running counter (one read) just before re-arming it.
                let now = match self.counter(pmc).last_read.take() {
                    Some(now) if self.counter(pmc).enabled => now,
                    _ => self.clock(pmc),
                };
                self.count_lost(pmc, now);
                let throttling = self.floor_ns > MIN_CLOCK_PERIOD_NS;
                self.notifications.arming(after, self.floor_in_event_units(), throttling);
                self.rearmed |= pmc.mask();
                let c = self.counter(pmc);
                let old = c.armed.replace(Armed { at: now, after });
                c.period_stale = !c.enabled;
                if c.enabled && !self.timer_lands(pmc, old, now, after) {
                    self.restart_period_at(pmc, now);
                }
            }
            None => {
                let c = self.counter(pmc);
                c.armed = None;
                c.period = 0;
                c.event.set_period(NEVER).ok(); // a failure is counted by perf_sys (--stats)
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
