//! The perf backend: one host `perf_event_open` event per virtual counter, on the vCPU
//! thread. With a host PMU, hardware events that count guest mode only (exclude_host). With
//! none (perf_event_open of hardware events fails, as on kvm_pvm hosts), a software
//! `task-clock` event per counter, turned into cycles with the TSC frequency; such a clock
//! also counts the vCPU thread's time handling exits in the VMM. Overflows arrive as a
//! signal to the vCPU thread (see `kick::pmu_signal`).

use super::perf_sys::*;
use crate::kick;
use pmu::{ArchEvent, BackendError, CountSource, HostEventConfig, PmcIdx};
use serde::Serialize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const SLOTS: usize = 35;
/// A sampling period so long it never fires: perf only accepts IOC_PERIOD on events opened
/// as sampling events, so every event is opened with this and re-armed as needed.
const NEVER: u64 = 1 << 62;
/// Shortest overflow period we program for the software clock. The kernel's floor is 10 us;
/// we stay well above it because every notification costs the vCPU a signal and an exit.
const MIN_CLOCK_PERIOD_NS: u64 = 50_000;

/// What the host can count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum PerfMode {
    /// Host PMU: hardware events, guest mode only.
    Hardware,
    /// No host PMU: cycles from the vCPU thread's task-clock at `tsc_khz`.
    SoftwareClock { tsc_khz: u64 },
}

impl PerfMode {
    /// Hardware if the host can open a hardware instructions event, else software clock.
    pub fn detect(tsc_khz: u64) -> PerfMode {
        let probe = PerfEventAttr {
            type_: PERF_TYPE_HARDWARE,
            config: PERF_COUNT_HW_INSTRUCTIONS,
            flags: FLAG_DISABLED | FLAG_EXCLUDE_HOST,
            ..Default::default()
        };
        match PerfEvent::open(&probe) {
            Ok(_) => PerfMode::Hardware,
            Err(_) => PerfMode::SoftwareClock { tsc_khz: tsc_khz.max(1) },
        }
    }

    pub fn describe(&self) -> String {
        match self {
            PerfMode::Hardware => "hardware events (host PMU, guest mode only)".into(),
            PerfMode::SoftwareClock { tsc_khz } => {
                format!("software task-clock (no host PMU): cycles = vCPU thread time x {tsc_khz} kHz TSC")
            }
        }
    }
}

/// A per-VM cap on open host events, shared by every vCPU's backend.
#[derive(Debug)]
pub struct EventBudget {
    limit: usize,
    open: AtomicUsize,
    /// Highest number open at once.
    pub peak: AtomicUsize,
    /// Opens refused because the cap was reached.
    pub refused: AtomicUsize,
}

impl EventBudget {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(EventBudget {
            limit,
            open: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
        })
    }

    fn take(&self) -> bool {
        let taken = self.open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.limit).then_some(n + 1));
        match taken {
            Ok(n) => {
                self.peak.fetch_max(n + 1, Ordering::Relaxed);
                true
            }
            Err(_) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    fn give_back(&self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }

    pub fn open_now(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    pub fn limit(&self) -> usize {
        self.limit
    }
}

/// What became of the software clock's overflow notifications.
#[derive(Debug, Default, Clone, Copy, Serialize, serde::Deserialize)]
pub struct NotificationStats {
    /// Notifications (signals) taken.
    pub taken: u64,
    /// Notifications that never arrived: a counter was found a whole period or more past its
    /// overflow point when it was re-armed.
    pub lost: u64,
    /// Periods stretched beyond what the guest programmed, to keep overflow handling within
    /// its share of vCPU time (`--pmi-max-percent`).
    pub throttled: u64,
}

impl NotificationStats {
    pub fn merge(&mut self, other: &NotificationStats) {
        self.taken += other.taken;
        self.lost += other.lost;
        self.throttled += other.throttled;
    }
}

#[derive(Debug)]
struct PerfCounter {
    event: PerfEvent,
    enabled: bool,
    /// (raw count when armed, counts until overflow)
    armed: Option<(u64, u64)>,
}

/// Host perf events of one vCPU.
#[derive(Debug)]
pub struct PerfSource {
    mode: PerfMode,
    counters: [Option<PerfCounter>; SLOTS],
    budget: Arc<EventBudget>,
    /// Shortest software-clock period now allowed (MIN_CLOCK_PERIOD_NS, or more when
    /// throttled).
    floor_ns: u64,
    pub notifications: NotificationStats,
}

impl PerfSource {
    pub fn new(mode: PerfMode, budget: Arc<EventBudget>) -> Self {
        PerfSource {
            mode,
            counters: std::array::from_fn(|_| None),
            budget,
            floor_ns: MIN_CLOCK_PERIOD_NS,
            notifications: NotificationStats::default(),
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

    fn counter(&mut self, pmc: PmcIdx) -> &mut PerfCounter {
        self.counters[pmc.bit() as usize].as_mut().expect("model protocol: event is open")
    }

    /// After an overflow notification: the kernel's sampling timer is periodic, so a short
    /// period set for "what remains" would keep firing at that rate. Re-issue every armed,
    /// enabled counter's remaining distance (the model has re-armed the ones that wrapped).
    pub fn rearm_after_notification(&mut self) {
        self.notifications.taken += 1;
        for slot in 0..SLOTS {
            let Some(c) = &self.counters[slot] else { continue };
            if c.enabled && c.armed.is_some() {
                let pmc = PmcIdx::from_bit(slot as u32).expect("slot of a counter");
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
        let Some((armed_at, after)) = self.counter(pmc).armed else { return };
        let now = self.read(pmc);
        let remaining = after.saturating_sub(now.saturating_sub(armed_at)).max(1);
        let period = self.to_host_units(remaining);
        let _ = self.counter(pmc).event.set_period(period);
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
        let event = match PerfEvent::open(&attr) {
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
        self.counters[pmc.bit() as usize] = Some(PerfCounter { event, enabled: false, armed: None });
        Ok(())
    }

    fn close(&mut self, pmc: PmcIdx) {
        if self.counters[pmc.bit() as usize].take().is_some() {
            self.budget.give_back();
        }
    }

    fn enable(&mut self, pmc: PmcIdx) {
        let c = self.counter(pmc);
        c.enabled = true;
        let _ = c.event.enable();
        // A period set while disabled is not restarted by the kernel: do it now.
        self.restart_period(pmc);
    }

    fn disable(&mut self, pmc: PmcIdx) {
        let now = self.read(pmc);
        self.count_lost(pmc, now);
        let c = self.counter(pmc);
        c.enabled = false;
        let _ = c.event.disable();
    }

    fn read(&mut self, pmc: PmcIdx) -> u64 {
        let raw = self.counter(pmc).event.read().unwrap_or(0);
        self.in_event_units(raw)
    }

    fn arm_overflow(&mut self, pmc: PmcIdx, after: Option<u64>) {
        match after {
            Some(after) => {
                let now = self.read(pmc);
                self.count_lost(pmc, now);
                let floor = self.floor_in_event_units();
                if self.floor_ns > MIN_CLOCK_PERIOD_NS && after < floor {
                    self.notifications.throttled += 1;
                }
                self.counter(pmc).armed = Some((now, after));
                if self.counter(pmc).enabled {
                    self.restart_period(pmc);
                }
            }
            None => {
                let c = self.counter(pmc);
                c.armed = None;
                let _ = c.event.set_period(NEVER);
            }
        }
    }
}

impl Drop for PerfSource {
    fn drop(&mut self) {
        for slot in 0..SLOTS {
            if self.counters[slot].take().is_some() {
                self.budget.give_back();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cycles() -> HostEventConfig {
        HostEventConfig {
            event: ArchEvent::CoreCycles,
            usr: false,
            os: true,
            edge: false,
            inv: false,
            cmask: 0,
            interrupt: false,
        }
    }

    #[test]
    fn software_clock_converts_units() {
        let src = PerfSource::new(PerfMode::SoftwareClock { tsc_khz: 2_000_000 }, EventBudget::new(4));
        assert_eq!(src.in_event_units(1_000), 2_000, "1 us at 2 GHz is 2000 cycles");
        assert_eq!(src.to_host_units(2_000_000), 1_000_000);
        assert_eq!(src.to_host_units(1), MIN_CLOCK_PERIOD_NS);
        assert_eq!(src.to_host_units(200_000_000), 100_000_000);
        let mut src = src;
        src.set_period_floor(1_000_000);
        assert_eq!(src.to_host_units(2_000), 1_000_000, "throttled: no period below the floor");
        src.set_period_floor(0);
        assert_eq!(src.to_host_units(1), MIN_CLOCK_PERIOD_NS, "never below the static floor");
        assert!(!src.supports(ArchEvent::Instructions), "a clock cannot count instructions");
        assert!(src.supports(ArchEvent::CoreCycles));
    }

    #[test]
    fn budget_caps_open_events() {
        let budget = EventBudget::new(1);
        let mut src = PerfSource::new(PerfMode::SoftwareClock { tsc_khz: 1_000_000 }, budget.clone());
        let (p0, p1) = (PmcIdx::gp(0).unwrap(), PmcIdx::gp(1).unwrap());
        if let Err(e) = src.open(p0, &cycles()) {
            eprintln!("SKIP budget_caps_open_events: perf_event_open: {e}");
            return;
        }
        assert_eq!(src.open(p1, &cycles()), Err(BackendError::LimitReached));
        assert_eq!(budget.refused.load(Ordering::Relaxed), 1);
        src.close(p0);
        assert_eq!(budget.open_now(), 0);
        src.open(p1, &cycles()).unwrap();
        drop(src);
        assert_eq!(budget.open_now(), 0, "dropping the source gives every event back");
    }

    #[test]
    fn edge_and_cmask_are_refused() {
        let mut src = PerfSource::new(PerfMode::SoftwareClock { tsc_khz: 1_000_000 }, EventBudget::new(4));
        let cfg = HostEventConfig { cmask: 1, ..cycles() };
        assert_eq!(src.open(PmcIdx::gp(0).unwrap(), &cfg), Err(BackendError::Unsupported));
    }
}
