//! The one trait through which the model reaches the outside world: a source of counts.
//! The VMM implements it (host `perf_event_open`, exact single-step); tests use
//! `MockSource`. The trait is object-safe; [`crate::Pmu`] is generic over it, and
//! `Pmu<Box<dyn CountSource>>` works through the blanket impl below.

use crate::error::BackendError;
use crate::event::ArchEvent;
use crate::pmc::PmcIdx;

/// What the host must count for one virtual counter. Pin control is not part of it (KVM
/// ignores PC too), so toggling PC never reopens an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HostEventConfig {
    /// Architectural event.
    pub event: ArchEvent,
    /// Count at CPL > 0. The guest runs at CPL 0 in perfvm's VMs, so a USR-only counter
    /// should count nothing: the backend honours this (e.g. `exclude_kernel`).
    pub usr: bool,
    /// Count at CPL 0.
    pub os: bool,
    /// Edge detect.
    pub edge: bool,
    /// Invert the CMASK comparison.
    pub inv: bool,
    /// Counter mask (0: count every event).
    pub cmask: u8,
    /// Sampling counter: the guest asked for a PMI on overflow (EVENTSEL.INT / fixed PMI).
    pub interrupt: bool,
}

/// A source of event counts for the virtual counters.
///
/// Protocol the model follows (`MockSource` checks it): `open` creates a *disabled* event
/// at raw count 0 with no overflow notification; `enable`/`disable`/`read`/`arm_overflow`/
/// `close` are only called on an open event; `enable` only on a disabled one and `disable`
/// only on an enabled one.
pub trait CountSource {
    /// Whether this source counts `event` honestly. Asked once, when the PMU is built.
    fn supports(&self, event: ArchEvent) -> bool;
    /// Creates the host-side event for virtual counter `pmc`, disabled. May fail (e.g. the
    /// per-VM cap is reached); the counter then counts nothing until a later retry.
    fn open(&mut self, pmc: PmcIdx, config: &HostEventConfig) -> Result<(), BackendError>;
    /// Destroys the host-side event.
    fn close(&mut self, pmc: PmcIdx);
    /// Starts counting.
    fn enable(&mut self, pmc: PmcIdx);
    /// Stops counting; the raw count stays readable.
    fn disable(&mut self, pmc: PmcIdx);
    /// Raw count since open, in event units (monotonic).
    fn read(&mut self, pmc: PmcIdx) -> u64;
    /// Asks to be notified (by the VMM, asynchronously; it then calls
    /// [`crate::Pmu::collect_overflows`]) after `after` more counts; `None` disarms. The
    /// deadline survives `disable`/`enable`.
    fn arm_overflow(&mut self, pmc: PmcIdx, after: Option<u64>);
    /// Starts counting on every counter of `mask` (GLOBAL_CTRL layout; each open and
    /// disabled). A source that can start them in one host operation overrides this.
    fn enable_many(&mut self, mask: u64) {
        PmcIdx::iter_mask(mask).for_each(|pmc| self.enable(pmc));
    }
    /// Stops counting on every counter of `mask` (each open and enabled).
    fn disable_many(&mut self, mask: u64) {
        PmcIdx::iter_mask(mask).for_each(|pmc| self.disable(pmc));
    }
}

impl<T: CountSource + ?Sized> CountSource for Box<T> {
    fn supports(&self, event: ArchEvent) -> bool {
        (**self).supports(event)
    }
    fn open(&mut self, pmc: PmcIdx, config: &HostEventConfig) -> Result<(), BackendError> {
        (**self).open(pmc, config)
    }
    fn close(&mut self, pmc: PmcIdx) {
        (**self).close(pmc)
    }
    fn enable(&mut self, pmc: PmcIdx) {
        (**self).enable(pmc)
    }
    fn disable(&mut self, pmc: PmcIdx) {
        (**self).disable(pmc)
    }
    fn read(&mut self, pmc: PmcIdx) -> u64 {
        (**self).read(pmc)
    }
    fn arm_overflow(&mut self, pmc: PmcIdx, after: Option<u64>) {
        (**self).arm_overflow(pmc, after)
    }
    fn enable_many(&mut self, mask: u64) {
        (**self).enable_many(mask)
    }
    fn disable_many(&mut self, mask: u64) {
        (**self).disable_many(mask)
    }
}
