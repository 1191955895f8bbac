//! The perf backend: one host `perf_event_open` event per virtual counter, on the vCPU
//! thread. With a host PMU, hardware events that count guest mode only (exclude_host). With
//! none (perf_event_open of hardware events fails, as on kvm_pvm hosts), a software
//! `task-clock` event per counter, turned into cycles with the TSC frequency; such a clock
//! also counts the vCPU thread's time handling exits in the VMM. Overflows arrive as a
//! signal to the vCPU thread (see `kick::pmu_signal`).
//!
//! Software-clock events share one group under a leader of their own (a task-clock that is
//! never read: this kernel does not run the siblings of a dummy-event leader once they
//! were toggled), so that a guest GLOBAL_CTRL
//! write that starts or stops every counter costs one ioctl (and a stop one group read),
//! whatever the number of counters. Hardware events stay apart: a group is scheduled on the
//! host PMU all or nothing, and the guest may program more counters than the host has free.
//! A stopped event's count is kept from when it stopped, so reading it costs nothing.

use super::perf_sys::*;
use crate::kick;
use pmu::{ArchEvent, BackendError, CountSource, HostEventConfig, PmcIdx, PMC_SLOTS};
use std::sync::Arc;

mod accounting;
mod mode;
pub use accounting::{EventBudget, NotificationStats};
pub use mode::PerfMode;

/// A sampling period so long it never fires: perf only accepts IOC_PERIOD on events opened
/// as sampling events, so every event is opened with this and re-armed as needed.
const NEVER: u64 = 1 << 62;
/// Shortest overflow period we program for the software clock. The kernel's floor is 10 us;
/// we stay well above it because every notification costs the vCPU a signal and an exit.
const MIN_CLOCK_PERIOD_NS: u64 = 50_000;

#[derive(Debug)]
struct PerfCounter {
    event: PerfEvent,
    enabled: bool,
    /// (raw count when armed, counts until overflow)
    armed: Option<(u64, u64)>,
    /// While disabled: the raw count it stopped at, in event units.
    stopped_at: Option<u64>,
    /// Armed while disabled: the host period must be set when it starts.
    period_stale: bool,
    /// The kernel's id (group reads), when in the group.
    id: Option<u64>,
    /// Software clock, ref-cycles: the guest sees the TSC while the counter runs, as on
    /// hardware, not the thread's CPU time (a busy host shares that out); the task-clock
    /// event still brings the overflow notification (late when the host is busy).
    tsc: Option<super::TscCount>,
    /// The count the last read of the running event returned: the model re-arms a counter
    /// right after folding it, and that fold's read serves the arming too.
    last_read: Option<u64>,
    /// The sampling period last given to the host event, in event units (0: none).
    period: u64,
}

/// The software-clock events' group: a leader that stands for no counter, always open.
#[derive(Debug)]
struct Group {
    leader: PerfEvent,
    /// Counters in the group, GLOBAL_CTRL layout.
    members: u64,
    /// Whether the leader is enabled (siblings count only while it is).
    on: bool,
}

/// Host perf events of one vCPU.
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
    /// Software clock: the group, once the first event opened (None: not grouping).
    group: Option<Group>,
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
            group: None,
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
            PerfMode::SoftwareClock { .. } => self.in_event_units(self.floor_ns),
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
                // A clock cannot tell privilege levels apart; perfvm guests run at CPL0, so
                // a counter without OS counts nothing (no event) rather than wrong time.
                if !matches!(config.event, ArchEvent::CoreCycles | ArchEvent::RefCycles) || !config.os {
                    return None;
                }
                attr.type_ = PERF_TYPE_SOFTWARE;
                attr.config = PERF_COUNT_SW_TASK_CLOCK;
            }
        }
        Some(attr)
    }

    /// Event units -> host units (cycles -> ns for the software clock, no shorter than the
    /// floor), rounding up.
    fn to_host_units(&self, counts: u64) -> u64 {
        match self.mode {
            PerfMode::Hardware => counts.max(1),
            PerfMode::SoftwareClock { tsc_khz } => {
                let ns = (u128::from(counts) * 1_000_000).div_ceil(u128::from(tsc_khz));
                (ns.min(u128::from(NEVER)) as u64).max(self.floor_ns)
            }
        }
    }

    /// Host units -> event units.
    fn in_event_units(&self, raw: u64) -> u64 {
        match self.mode {
            PerfMode::Hardware => raw,
            PerfMode::SoftwareClock { tsc_khz } => (u128::from(raw) * u128::from(tsc_khz) / 1_000_000) as u64,
        }
    }

    /// The group to open a software-clock event in (created on first use; None if the host
    /// refuses the leader, or with hardware events).
    fn group(&mut self) -> Option<&Group> {
        if !matches!(self.mode, PerfMode::SoftwareClock { .. }) {
            return None;
        }
        if self.group.is_none() {
            let attr = PerfEventAttr {
                type_: PERF_TYPE_SOFTWARE,
                config: PERF_COUNT_SW_TASK_CLOCK,
                flags: FLAG_DISABLED,
                read_format: PERF_FORMAT_GROUP | PERF_FORMAT_ID,
                ..Default::default()
            };
            let leader = PerfEvent::open(&attr).ok()?;
            self.group = Some(Group { leader, members: 0, on: false });
        }
        self.group.as_ref()
    }

    /// Members of the group that are enabled.
    fn enabled_members(&self) -> u64 {
        let members = self.group.as_ref().map_or(0, |g| g.members);
        PmcIdx::iter_mask(members)
            .filter(|p| self.counters[p.slot()].as_ref().is_some_and(|c| c.enabled))
            .fold(0, |m, p| m | p.mask())
    }

    /// The leader must run for any sibling to count.
    fn leader_on(&mut self, pmc: PmcIdx) {
        if let Some(g) = self.group.as_mut().filter(|g| !g.on && g.members & pmc.mask() != 0) {
            g.on = g.leader.enable().is_ok();
        }
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

    /// A counter started: its host period follows if it was armed while stopped.
    fn started(&mut self, pmc: PmcIdx) {
        let c = self.counter(pmc);
        c.enabled = true;
        c.last_read = None;
        if let Some(t) = &mut c.tsc {
            t.start(super::host_tsc());
        }
        let stale = std::mem::take(&mut c.period_stale);
        if stale {
            // A period set while disabled is not restarted by the kernel: do it now.
            self.restart_period(pmc);
        }
        self.counter(pmc).stopped_at = None;
    }

    /// The host event's count in event units (what notifications and periods follow).
    fn clock(&mut self, pmc: PmcIdx) -> u64 {
        let c = self.counter(pmc);
        match (c.enabled, c.stopped_at) {
            (false, Some(now)) => now,
            _ => {
                let raw = c.event.read().unwrap_or(0);
                let now = self.in_event_units(raw);
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

    /// Counter `pmc` is re-armed or stopped at raw count `now`: every whole period it ran past
    /// its first deadline is a notification that never came (the first may be in flight).
    fn count_lost(&mut self, pmc: PmcIdx, now: u64) {
        let floor = self.floor_in_event_units();
        let c = self.counter(pmc);
        if let (true, Some((armed_at, after))) = (c.enabled, c.armed) {
            let period = after.max(floor);
            self.notifications.lost += now.saturating_sub(armed_at).saturating_sub(period) / period;
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
        let Some((armed_at, after)) = self.counter(pmc).armed else { return };
        let remaining = after.saturating_sub(now.saturating_sub(armed_at)).max(1);
        let period = self.to_host_units(remaining);
        let in_units = self.in_event_units(period);
        let c = self.counter(pmc);
        c.period = in_units;
        let _ = c.event.set_period(period);
    }

    /// Whether the host's sampling timer already expires where the model now wants counter
    /// `pmc` to overflow: a timer that fired starts over with the same period, which is
    /// where periodic sampling with a reload wants the next one (no ioctl then).
    fn timer_lands(&mut self, pmc: PmcIdx, old: Option<(u64, u64)>, now: u64, after: u64) -> bool {
        let period = self.counter(pmc).period;
        old.is_some_and(|(at, a)| {
            let fired_at = at + a;
            period > 0 && now >= fired_at && (fired_at + period).abs_diff(now + after) <= after / 64
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
        // The host cannot filter edge/inv/cmask for these generic events: refuse rather than
        // count something else.
        if config.edge || config.inv || config.cmask != 0 {
            return Err(BackendError::Unsupported);
        }
        let attr = self.attr(config).ok_or(BackendError::Unsupported)?;
        if !self.budget.take() {
            return Err(BackendError::LimitReached);
        }
        let grouped = self.group().is_some();
        let opened = match &self.group {
            Some(g) => PerfEvent::open_in(&attr, &g.leader),
            None => PerfEvent::open(&attr),
        };
        let event = match opened {
            Ok(e) => e,
            Err(e) => {
                self.budget.give_back();
                return Err(BackendError::Os(e.raw_os_error().unwrap_or(0)));
            }
        };
        if let Err(e) = event.signal_overflows_to(gettid(), kick::pmu_signal()) {
            self.budget.give_back();
            return Err(BackendError::Os(e.raw_os_error().unwrap_or(0)));
        }
        let id = if grouped { event.id().ok() } else { None };
        let software = matches!(self.mode, PerfMode::SoftwareClock { .. });
        let tsc = (software && config.event == ArchEvent::RefCycles).then(super::TscCount::default);
        if let (Some(g), Some(_)) = (self.group.as_mut(), id) {
            g.members |= pmc.mask();
        }
        self.counters[pmc.slot()] = Some(PerfCounter {
            event,
            enabled: false,
            armed: None,
            stopped_at: Some(0),
            period_stale: false,
            id,
            tsc,
            last_read: None,
            period: 0,
        });
        Ok(())
    }

    fn close(&mut self, pmc: PmcIdx) {
        if let Some(g) = &mut self.group {
            g.members &= !pmc.mask();
        }
        if self.counters[pmc.slot()].take().is_some() {
            self.budget.give_back();
        }
    }

    fn enable(&mut self, pmc: PmcIdx) {
        self.leader_on(pmc);
        let _ = self.counter(pmc).event.enable();
        self.started(pmc);
    }

    fn disable(&mut self, pmc: PmcIdx) {
        // Disable first, so the count read is final.
        let _ = self.counter(pmc).event.disable();
        let raw = self.counter(pmc).event.read().unwrap_or(0);
        let now = self.in_event_units(raw);
        self.stopped(pmc, now);
    }

    /// One group ioctl, then one disable for each member that must stay stopped (parked
    /// events), when that beats an ioctl per counter.
    fn enable_many(&mut self, mask: u64) {
        let members = self.group.as_ref().map_or(0, |g| g.members);
        let (grouped, extra) = (mask & members, members & !mask & !self.enabled_members());
        if grouped.count_ones() < 2 + extra.count_ones() {
            return PmcIdx::iter_mask(mask).for_each(|pmc| self.enable(pmc));
        }
        let g = self.group.as_mut().expect("members imply a group");
        g.on = g.leader.enable_group().is_ok();
        for pmc in PmcIdx::iter_mask(extra) {
            let _ = self.counter(pmc).event.disable();
        }
        for pmc in PmcIdx::iter_mask(grouped) {
            self.started(pmc);
        }
        PmcIdx::iter_mask(mask & !members).for_each(|pmc| self.enable(pmc));
    }

    /// One group ioctl and one group read, when no other member runs (stopping a stopped
    /// event changes nothing).
    fn disable_many(&mut self, mask: u64) {
        let running = self.enabled_members();
        let members = mask & running;
        if running & !mask != 0 || members.count_ones() < 2 {
            return PmcIdx::iter_mask(mask).for_each(|pmc| self.disable(pmc));
        }
        let g = self.group.as_mut().expect("members imply a group");
        let _ = g.leader.disable_group();
        g.on = false;
        let mut raw = [0u64; PMC_SLOTS];
        let ids: Vec<(u64, usize)> =
            PmcIdx::iter_mask(members).filter_map(|p| Some((self.counter(p).id?, p.slot()))).collect();
        let _ = self.group.as_ref().expect("present").leader.read_group(|id, value| {
            if let Some(&(_, slot)) = ids.iter().find(|(i, _)| *i == id) {
                raw[slot] = value;
            }
        });
        for pmc in PmcIdx::iter_mask(members) {
            let now = self.in_event_units(raw[pmc.slot()]);
            self.stopped(pmc, now);
        }
        PmcIdx::iter_mask(mask & !members).for_each(|pmc| self.disable(pmc));
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
                let floor = self.floor_in_event_units();
                if self.floor_ns > MIN_CLOCK_PERIOD_NS && after < floor {
                    self.notifications.throttled += 1;
                }
                self.rearmed |= pmc.mask();
                let c = self.counter(pmc);
                let old = c.armed.replace((now, after));
                c.period_stale = !c.enabled;
                if c.enabled && !self.timer_lands(pmc, old, now, after) {
                    self.restart_period_at(pmc, now);
                }
            }
            None => {
                let c = self.counter(pmc);
                c.armed = None;
                c.period = 0;
                let _ = c.event.set_period(NEVER);
            }
        }
    }
}

impl Drop for PerfSource {
    fn drop(&mut self) {
        for slot in 0..PMC_SLOTS {
            if self.counters[slot].take().is_some() {
                self.budget.give_back();
            }
        }
    }
}

#[cfg(test)]
mod group_tests;
#[cfg(test)]
mod tests;
