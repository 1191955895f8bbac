//! Counting backends behind the PMU model's `CountSource` trait, and what the vCPU loop asks
//! of them beyond counting ([`VmmSource`]): the only place that knows which backend is which.

use clock::ClockSource;
use exact::ExactSource;
use perf::{NotificationStats, PerfMode, PerfSource};
use pmu::{ArchEvent, BackendError, CountSource, HostEventConfig, PmcIdx};

pub mod clock;
pub mod exact;
pub mod perf;
pub mod perf_sys;

/// What the vCPU loop asks of a backend beyond counting. The defaults are a backend that
/// neither single-steps nor takes notifications.
pub trait VmmSource: CountSource {
    /// What counts, for `--stats`.
    fn describe(&self) -> String;
    /// An overflow found since the last call that no host notification announces.
    fn take_overflow(&mut self) -> bool {
        false
    }
    /// The guest ran since the last call: a count read from now on is new.
    fn guest_ran(&mut self) {}
    /// A host overflow notification is about to be handled.
    fn notification_taken(&mut self) {}
    /// A host overflow notification was handled: re-issue what the kernel keeps periodic.
    fn after_notification(&mut self) {}
    /// No notification period shorter than `ns` (PMI throttling).
    fn set_period_floor(&mut self, _ns: u64) {}
    /// What became of the host's notifications, where there are any.
    fn notifications(&self) -> Option<&NotificationStats> {
        None
    }
    /// Whether some counter counts by single-stepping the guest.
    fn counts_by_steps(&self) -> bool {
        false
    }
    /// Whether the guest must be single-stepped now, given whether any counter is
    /// programmed (a stepping backend also emulates RDPMC then).
    fn wants_steps(&self, _any_programmed: bool) -> bool {
        false
    }
    /// Whether a running counter of `event` advances at the guest TSC's rate while the
    /// vCPU runs, so that a PV page can extrapolate it without an exit.
    fn counts_at_tsc_rate(&self, _event: ArchEvent) -> bool {
        false
    }
    /// The host TSC at which this exit read the counts that `counts_at_tsc_rate` events
    /// show (None: not known to that precision).
    fn read_tsc(&self) -> Option<u64> {
        None
    }
    /// Single-stepping: one instruction of `class` retired, in user mode (`user`) or the
    /// kernel.
    fn retire(&mut self, _class: exact::decode::InsnClass, _user: bool) {}
    /// Single-stepping: the WRMSR now exiting retires before its write takes effect.
    fn retire_early(&mut self) {}
    /// Single-stepping: what `retire_early` retired faulted instead.
    fn faulted(&mut self) {}
    /// Single-stepping: how many instructions may retire before the first that could reach
    /// a deadline, that one included (None: no limit).
    fn retirements_to_deadline(&self) -> Option<u64> {
        None
    }
}

impl VmmSource for PerfSource {
    fn describe(&self) -> String {
        self.mode().describe()
    }
    fn notification_taken(&mut self) {
        PerfSource::notification_taken(self);
    }
    fn after_notification(&mut self) {
        self.rearm_after_notification();
    }
    fn set_period_floor(&mut self, ns: u64) {
        PerfSource::set_period_floor(self, ns);
    }
    fn notifications(&self) -> Option<&NotificationStats> {
        Some(&self.notifications)
    }
    /// The software clock's cycles; ref-cycles follow the TSC itself and need an exit.
    fn counts_at_tsc_rate(&self, event: ArchEvent) -> bool {
        matches!(self.mode(), PerfMode::SoftwareClock { .. }) && event == ArchEvent::CoreCycles
    }
}

impl VmmSource for ClockSource {
    fn describe(&self) -> String {
        format!("{}, one clock shared by all counters", self.mode().describe())
    }
    fn guest_ran(&mut self) {
        ClockSource::guest_ran(self);
    }
    fn notification_taken(&mut self) {
        ClockSource::notification_taken(self);
    }
    fn after_notification(&mut self) {
        ClockSource::after_notification(self);
    }
    fn set_period_floor(&mut self, ns: u64) {
        ClockSource::set_period_floor(self, ns);
    }
    fn notifications(&self) -> Option<&NotificationStats> {
        Some(&self.notifications)
    }
    /// Cycles; ref-cycles follow the TSC itself and need an exit.
    fn counts_at_tsc_rate(&self, event: ArchEvent) -> bool {
        event == ArchEvent::CoreCycles
    }
    fn read_tsc(&self) -> Option<u64> {
        ClockSource::read_tsc(self)
    }
}

impl VmmSource for ExactSource {
    fn describe(&self) -> String {
        "single-step: exact instructions and branches; cycles = model clock, 1 per retired instruction".into()
    }
    fn take_overflow(&mut self) -> bool {
        ExactSource::take_overflow(self)
    }
    fn counts_by_steps(&self) -> bool {
        self.counting()
    }
    fn wants_steps(&self, any_programmed: bool) -> bool {
        self.counting() || any_programmed
    }
    fn retire(&mut self, class: exact::decode::InsnClass, user: bool) {
        ExactSource::retire(self, class, user);
    }
    fn retire_early(&mut self) {
        ExactSource::retire_early(self);
    }
    fn faulted(&mut self) {
        ExactSource::faulted(self);
    }
    fn retirements_to_deadline(&self) -> Option<u64> {
        ExactSource::retirements_to_deadline(self)
    }
}

/// The backend of a vCPU's PMU.
// Both variants are kilobytes (a counter table each) and differ by ~1.4 KB. There is one
// Backend per vCPU, built once and kept in place in its Pmu for the whole run, so the unused
// space is a few KB per VM and no hot path moves it; boxing a variant would only add a heap
// indirection to every counter operation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Backend {
    /// Host perf events, one per counter (`--backend perf` with a host PMU, or the legacy
    /// policy).
    Perf(PerfSource),
    /// One software clock for every counter (`--backend perf`, reuse, no host PMU).
    Clock(ClockSource),
    /// Single-stepping (`--backend exact`).
    Exact(ExactSource),
}

/// `Backend`'s methods of `$trait`, each forwarded to the variant's source.
macro_rules! forward {
    ($trait:ident;) => {};
    ($trait:ident; fn $name:ident(&self $(, $arg:ident: $ty:ty)*) $(-> $ret:ty)?; $($rest:tt)*) => {
        fn $name(&self $(, $arg: $ty)*) $(-> $ret)? {
            match self {
                Backend::Perf(s) => $trait::$name(s $(, $arg)*),
                Backend::Clock(s) => $trait::$name(s $(, $arg)*),
                Backend::Exact(s) => $trait::$name(s $(, $arg)*),
            }
        }
        forward!($trait; $($rest)*);
    };
    ($trait:ident; fn $name:ident(&mut self $(, $arg:ident: $ty:ty)*) $(-> $ret:ty)?; $($rest:tt)*) => {
        fn $name(&mut self $(, $arg: $ty)*) $(-> $ret)? {
            match self {
                Backend::Perf(s) => $trait::$name(s $(, $arg)*),
                Backend::Clock(s) => $trait::$name(s $(, $arg)*),
                Backend::Exact(s) => $trait::$name(s $(, $arg)*),
            }
        }
        forward!($trait; $($rest)*);
    };
}

impl CountSource for Backend {
    forward! { CountSource;
        fn supports(&self, event: ArchEvent) -> bool;
        fn open(&mut self, pmc: PmcIdx, config: &HostEventConfig) -> Result<(), BackendError>;
        fn close(&mut self, pmc: PmcIdx);
        fn enable(&mut self, pmc: PmcIdx);
        fn disable(&mut self, pmc: PmcIdx);
        fn read(&mut self, pmc: PmcIdx) -> u64;
        fn arm_overflow(&mut self, pmc: PmcIdx, after: Option<u64>);
        fn enable_many(&mut self, mask: u64);
        fn disable_many(&mut self, mask: u64);
    }
}

impl VmmSource for Backend {
    forward! { VmmSource;
        fn describe(&self) -> String;
        fn take_overflow(&mut self) -> bool;
        fn guest_ran(&mut self);
        fn notification_taken(&mut self);
        fn after_notification(&mut self);
        fn set_period_floor(&mut self, ns: u64);
        fn notifications(&self) -> Option<&NotificationStats>;
        fn counts_by_steps(&self) -> bool;
        fn wants_steps(&self, any_programmed: bool) -> bool;
        fn counts_at_tsc_rate(&self, event: ArchEvent) -> bool;
        fn read_tsc(&self) -> Option<u64>;
        fn retire(&mut self, class: exact::decode::InsnClass, user: bool);
        fn retire_early(&mut self);
        fn faulted(&mut self);
        fn retirements_to_deadline(&self) -> Option<u64>;
    }
}

/// The host TSC, which the guest's TSC follows at the same rate.
pub fn host_tsc() -> u64 {
    // SAFETY: RDTSC has no memory effects; every x86-64 CPU has it.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// A count that runs between `start` and `stop` against a monotonic clock (the TSC for
/// reference cycles, the shared software clock's ns for cycles).
#[derive(Debug, Default, Clone, Copy)]
pub struct Stopwatch {
    total: u64,
    since: Option<u64>,
}

impl Stopwatch {
    /// Start counting at clock `now`; a count already running keeps its start.
    pub fn start(&mut self, now: u64) {
        self.since.get_or_insert(now);
    }

    /// Stop counting at clock `now`, keeping the total.
    pub fn stop(&mut self, now: u64) {
        self.total = self.value(now);
        self.since = None;
    }

    /// The count at clock `now` (ignored while stopped).
    pub fn value(&self, now: u64) -> u64 {
        self.total + self.since.map_or(0, |s| now.saturating_sub(s))
    }

    /// Whether it counts now.
    pub fn running(&self) -> bool {
        self.since.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::Stopwatch;

    #[test]
    fn a_stopwatch_runs_only_between_start_and_stop() {
        let mut t = Stopwatch::default();
        assert_eq!(t.value(100), 0);
        t.start(100);
        t.start(150); // already running: the first start holds
        assert_eq!(t.value(160), 60);
        t.stop(200);
        assert_eq!(t.value(1_000), 100, "stopped");
        t.start(1_000);
        assert_eq!(t.value(1_010), 110);
    }
}
