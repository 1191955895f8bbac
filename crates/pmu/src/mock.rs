//! [`MockSource`]: a recording [`CountSource`] test double.

use crate::backend::{CountSource, HostEventConfig};
use crate::error::BackendError;
use crate::event::{ArchEvent, EventSet};
use crate::pmc::{PmcIdx, PMC_SLOTS};

/// One call the model made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MockCall {
    /// `open` (recorded even when told to fail).
    Open(PmcIdx, HostEventConfig),
    /// `close`.
    Close(PmcIdx),
    /// `enable`.
    Enable(PmcIdx),
    /// `disable`.
    Disable(PmcIdx),
    /// `read`.
    Read(PmcIdx),
    /// `arm_overflow`.
    Arm(PmcIdx, Option<u64>),
}

/// A host event as the mock holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MockEvent {
    /// Configuration it was opened with.
    pub config: HostEventConfig,
    /// Counting.
    pub enabled: bool,
    /// Raw count since open.
    pub raw: u64,
    /// Raw count at which the overflow notification is due, if armed.
    pub overflow_at: Option<u64>,
}

/// A [`CountSource`] that records every call, counts only what tests feed it with
/// [`MockSource::advance`] (honouring enable and the USR/OS filter against a simulated CPL,
/// 0 by default), can be told to fail `open`, and notes every breach of the backend
/// protocol in [`MockSource::violations`].
#[derive(Clone, Debug)]
pub struct MockSource {
    supported: EventSet,
    events: [Option<MockEvent>; PMC_SLOTS],
    calls: Vec<MockCall>,
    fail_open: bool,
    cpl: u8,
    violations: Vec<String>,
}

impl Default for MockSource {
    fn default() -> Self {
        Self::new()
    }
}

impl MockSource {
    /// A source that counts every architectural event.
    pub fn new() -> Self {
        Self::supporting(&ArchEvent::ALL)
    }

    /// A source that counts only `events`.
    pub fn supporting(events: &[ArchEvent]) -> Self {
        MockSource {
            supported: events.iter().copied().collect(),
            events: [None; PMC_SLOTS],
            calls: Vec::new(),
            fail_open: false,
            cpl: 0,
            violations: Vec::new(),
        }
    }

    /// Makes every following `open` fail (`true`) or succeed (`false`).
    pub fn set_fail_open(&mut self, fail: bool) {
        self.fail_open = fail;
    }

    /// Sets the simulated guest CPL (0 = kernel, counts OS events; >0 counts USR events).
    pub fn set_cpl(&mut self, cpl: u8) {
        self.cpl = cpl;
    }

    /// Lets `n` events happen for `pmc`: counted if its event is open, enabled and its
    /// USR/OS bits select the current CPL. Returns the number counted.
    pub fn advance(&mut self, pmc: PmcIdx, n: u64) -> u64 {
        let cpl = self.cpl;
        match &mut self.events[pmc.slot()] {
            Some(ev) if ev.enabled && (if cpl == 0 { ev.config.os } else { ev.config.usr }) => {
                ev.raw = ev.raw.wrapping_add(n);
                n
            }
            _ => 0,
        }
    }

    /// [`MockSource::advance`] on every counter slot.
    pub fn advance_all(&mut self, n: u64) {
        for idx in (0..PMC_SLOTS).filter_map(PmcIdx::from_slot) {
            self.advance(idx, n);
        }
    }

    /// The host event of `pmc`, if open.
    pub fn event(&self, pmc: PmcIdx) -> Option<&MockEvent> {
        self.events[pmc.slot()].as_ref()
    }

    /// Whether `pmc` has an open event.
    pub fn is_open(&self, pmc: PmcIdx) -> bool {
        self.event(pmc).is_some()
    }

    /// Whether `pmc` has an open, enabled event.
    pub fn is_enabled(&self, pmc: PmcIdx) -> bool {
        self.event(pmc).is_some_and(|e| e.enabled)
    }

    /// Number of open events.
    pub fn open_events(&self) -> usize {
        self.events.iter().flatten().count()
    }

    /// Whether some enabled event has reached its overflow deadline: the moment a real
    /// backend would signal the VMM.
    pub fn overflow_due(&self) -> bool {
        self.events.iter().flatten().any(|e| e.enabled && e.overflow_at.is_some_and(|at| e.raw >= at))
    }

    /// Every call so far.
    pub fn calls(&self) -> &[MockCall] {
        &self.calls
    }

    /// Returns and forgets the calls so far.
    pub fn take_calls(&mut self) -> Vec<MockCall> {
        std::mem::take(&mut self.calls)
    }

    /// Breaches of the backend protocol (should stay empty).
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    fn expect_open(&mut self, pmc: PmcIdx, what: &str) -> Option<&mut MockEvent> {
        if self.events[pmc.slot()].is_none() {
            self.violations.push(format!("{what} on unopened {pmc:?}"));
        }
        self.events[pmc.slot()].as_mut()
    }
}

impl CountSource for MockSource {
    fn supports(&self, event: ArchEvent) -> bool {
        self.supported.contains(event)
    }

    fn open(&mut self, pmc: PmcIdx, config: &HostEventConfig) -> Result<(), BackendError> {
        self.calls.push(MockCall::Open(pmc, *config));
        if self.fail_open {
            return Err(BackendError::LimitReached);
        }
        if !self.supported.contains(config.event) {
            self.violations.push(format!("open of unsupported {:?} on {pmc:?}", config.event));
        }
        if self.events[pmc.slot()].is_some() {
            self.violations.push(format!("open of already open {pmc:?}"));
        }
        self.events[pmc.slot()] = Some(MockEvent { config: *config, enabled: false, raw: 0, overflow_at: None });
        Ok(())
    }

    fn close(&mut self, pmc: PmcIdx) {
        self.calls.push(MockCall::Close(pmc));
        self.expect_open(pmc, "close");
        self.events[pmc.slot()] = None;
    }

    fn enable(&mut self, pmc: PmcIdx) {
        self.calls.push(MockCall::Enable(pmc));
        if let Some(ev) = self.expect_open(pmc, "enable") {
            let was = std::mem::replace(&mut ev.enabled, true);
            if was {
                self.violations.push(format!("redundant enable of {pmc:?}"));
            }
        }
    }

    fn disable(&mut self, pmc: PmcIdx) {
        self.calls.push(MockCall::Disable(pmc));
        if let Some(ev) = self.expect_open(pmc, "disable") {
            let was = std::mem::replace(&mut ev.enabled, false);
            if !was {
                self.violations.push(format!("redundant disable of {pmc:?}"));
            }
        }
    }

    fn read(&mut self, pmc: PmcIdx) -> u64 {
        self.calls.push(MockCall::Read(pmc));
        self.expect_open(pmc, "read").map_or(0, |e| e.raw)
    }

    fn arm_overflow(&mut self, pmc: PmcIdx, after: Option<u64>) {
        self.calls.push(MockCall::Arm(pmc, after));
        if let Some(ev) = self.expect_open(pmc, "arm_overflow") {
            ev.overflow_at = after.map(|a| ev.raw.saturating_add(a));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(usr: bool, os: bool) -> HostEventConfig {
        HostEventConfig { event: ArchEvent::Instructions, usr, os, edge: false, inv: false, cmask: 0, interrupt: false }
    }

    #[test]
    fn counts_only_enabled_and_matching_cpl() {
        let p = PmcIdx::gp(0).unwrap();
        let mut m = MockSource::new();
        assert_eq!(m.advance(p, 5), 0, "not open");
        m.open(p, &cfg(false, true)).unwrap();
        assert_eq!(m.advance(p, 5), 0, "disabled");
        m.enable(p);
        assert_eq!(m.advance(p, 5), 5);
        m.set_cpl(3);
        assert_eq!(m.advance(p, 5), 0, "OS-only at CPL3");
        assert_eq!(m.read(p), 5);
        assert!(m.violations().is_empty());
    }

    #[test]
    fn usr_only_counts_nothing_at_cpl0() {
        let p = PmcIdx::fixed(0).unwrap();
        let mut m = MockSource::new();
        m.open(p, &cfg(true, false)).unwrap();
        m.enable(p);
        assert_eq!(m.advance(p, 7), 0);
    }

    #[test]
    fn overflow_deadline_survives_disable() {
        let p = PmcIdx::gp(1).unwrap();
        let mut m = MockSource::new();
        m.open(p, &cfg(true, true)).unwrap();
        m.arm_overflow(p, Some(10));
        m.enable(p);
        m.advance(p, 9);
        assert!(!m.overflow_due());
        m.disable(p);
        m.enable(p);
        m.advance(p, 1);
        assert!(m.overflow_due());
        m.arm_overflow(p, None);
        assert!(!m.overflow_due());
    }

    /// Found by the model fuzzer: a stopped event past its deadline was reported as due,
    /// although a real backend only signals while counting (the doc always said "enabled").
    #[test]
    fn overflow_due_only_for_enabled_events() {
        let p = PmcIdx::gp(0).unwrap();
        let mut m = MockSource::new();
        m.open(p, &cfg(true, true)).unwrap();
        m.arm_overflow(p, Some(3));
        m.enable(p);
        m.advance(p, 5);
        assert!(m.overflow_due());
        m.disable(p);
        assert!(!m.overflow_due());
    }

    #[test]
    fn records_violations_and_failures() {
        let p = PmcIdx::gp(2).unwrap();
        let mut m = MockSource::supporting(&[ArchEvent::CoreCycles]);
        assert!(!m.supports(ArchEvent::Instructions));
        m.read(p);
        m.set_fail_open(true);
        assert_eq!(m.open(p, &cfg(true, true)), Err(BackendError::LimitReached));
        assert!(!m.is_open(p));
        m.set_fail_open(false);
        m.open(p, &cfg(true, true)).unwrap();
        m.disable(p);
        assert_eq!(m.violations().len(), 3, "{:?}", m.violations());
        assert_eq!(m.take_calls().len(), 4);
        assert!(m.calls().is_empty());
    }
}
