//! The exact backend: the VMM single-steps the guest (KVM_GUESTDBG_SINGLESTEP) and feeds
//! every retired instruction to [`ExactSource::retire`], so instructions and branches are
//! counted exactly and deterministically. Cycles are a model clock: one cycle per retired
//! instruction, as instruction-set emulators define theirs.
//!
//! The guest is assumed to run at CPL0 (all perfvm guests do): an OS-flagged counter
//! counts, a USR-only counter counts nothing.

use super::decode::InsnClass;
use pmu::{ArchEvent, BackendError, CountSource, HostEventConfig, PmcIdx};

/// Counter slots, indexed by `PmcIdx::bit()` (GP 0..8, fixed 32..35).
const SLOTS: usize = 35;

#[derive(Debug, Clone, Copy)]
struct ExactCounter {
    config: HostEventConfig,
    enabled: bool,
    count: u64,
    /// Raw count at which the VMM must be told of an overflow.
    deadline: Option<u64>,
    /// Condition of the previous step, for edge detection.
    last_condition: bool,
    /// Enabled by the instruction now in flight (a WRMSR): that one does not count.
    skip_inflight: bool,
}

impl ExactCounter {
    /// Occurrences of the event in one step (one model cycle).
    fn occurrences(&self, class: InsnClass) -> u64 {
        if !self.config.os {
            return 0;
        }
        match self.config.event {
            ArchEvent::Instructions | ArchEvent::CoreCycles | ArchEvent::RefCycles => 1,
            ArchEvent::Branches => u64::from(class == InsnClass::Branch),
            _ => 0,
        }
    }

    /// Apply CMASK / INV / EDGE (SDM): with a CMASK the counter counts cycles in which the
    /// event occurred at least CMASK times (fewer, with INV); EDGE counts false->true.
    fn step(&mut self, class: InsnClass) -> u64 {
        let n = self.occurrences(class);
        let cfg = self.config;
        if cfg.cmask == 0 {
            return n;
        }
        let condition = (n >= u64::from(cfg.cmask)) != cfg.inv;
        let rising = condition && !self.last_condition;
        self.last_condition = condition;
        u64::from(if cfg.edge { rising } else { condition })
    }
}

/// Counts from single-stepping.
#[derive(Debug)]
pub struct ExactSource {
    counters: [Option<ExactCounter>; SLOTS],
    enabled_mask: u64,
    overflow_pending: bool,
    /// Instructions retired while stepping (all counters or none).
    pub steps: u64,
}

impl Default for ExactSource {
    fn default() -> Self {
        ExactSource { counters: [None; SLOTS], enabled_mask: 0, overflow_pending: false, steps: 0 }
    }
}

impl ExactSource {
    pub fn new() -> Self {
        Self::default()
    }

    fn slot(&mut self, pmc: PmcIdx) -> &mut ExactCounter {
        self.counters[pmc.bit() as usize].as_mut().expect("model protocol: event is open")
    }

    /// Whether any counter counts, i.e. whether the VMM must single-step.
    pub fn stepping_needed(&self) -> bool {
        self.enabled_mask != 0
    }

    /// One instruction of class `class` retired.
    pub fn retire(&mut self, class: InsnClass) {
        self.steps += 1;
        let mut mask = self.enabled_mask;
        while mask != 0 {
            let bit = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let c = self.counters[bit].as_mut().expect("enabled implies open");
            if std::mem::take(&mut c.skip_inflight) {
                continue;
            }
            let n = c.step(class);
            if n == 0 {
                continue;
            }
            c.count += n;
            if c.deadline.is_some_and(|d| c.count >= d) {
                c.deadline = None;
                self.overflow_pending = true;
            }
        }
    }

    /// Whether an armed counter reached its deadline since the last call.
    pub fn take_overflow(&mut self) -> bool {
        std::mem::take(&mut self.overflow_pending)
    }
}

impl CountSource for ExactSource {
    fn supports(&self, event: ArchEvent) -> bool {
        matches!(event, ArchEvent::Instructions | ArchEvent::CoreCycles | ArchEvent::RefCycles | ArchEvent::Branches)
    }

    fn open(&mut self, pmc: PmcIdx, config: &HostEventConfig) -> Result<(), BackendError> {
        if !self.supports(config.event) {
            return Err(BackendError::Unsupported);
        }
        let counter = ExactCounter {
            config: *config,
            enabled: false,
            count: 0,
            deadline: None,
            last_condition: false,
            skip_inflight: false,
        };
        self.counters[pmc.bit() as usize] = Some(counter);
        Ok(())
    }

    fn close(&mut self, pmc: PmcIdx) {
        self.counters[pmc.bit() as usize] = None;
        self.enabled_mask &= !pmc.mask();
    }

    /// Enabling happens while the guest's enabling WRMSR is in flight: counting starts
    /// with the instruction after it, so a measured region holds exactly its instructions.
    fn enable(&mut self, pmc: PmcIdx) {
        let c = self.slot(pmc);
        c.enabled = true;
        c.skip_inflight = true;
        self.enabled_mask |= pmc.mask();
    }

    fn disable(&mut self, pmc: PmcIdx) {
        self.slot(pmc).enabled = false;
        self.enabled_mask &= !pmc.mask();
    }

    fn read(&mut self, pmc: PmcIdx) -> u64 {
        self.slot(pmc).count
    }

    fn arm_overflow(&mut self, pmc: PmcIdx, after: Option<u64>) {
        let c = self.slot(pmc);
        c.deadline = after.map(|n| c.count + n.max(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(event: ArchEvent) -> HostEventConfig {
        HostEventConfig { event, usr: false, os: true, edge: false, inv: false, cmask: 0, interrupt: false }
    }

    #[test]
    fn counts_instructions_and_branches_while_enabled() {
        let mut src = ExactSource::new();
        let (p0, p1) = (PmcIdx::gp(0).unwrap(), PmcIdx::gp(1).unwrap());
        src.open(p0, &config(ArchEvent::Instructions)).unwrap();
        src.open(p1, &config(ArchEvent::Branches)).unwrap();
        assert!(!src.stepping_needed());
        src.enable(p0);
        src.enable(p1);
        assert!(src.stepping_needed());
        src.retire(InsnClass::Branch); // the enabling instruction itself
        for class in [InsnClass::Other, InsnClass::Branch, InsnClass::Other, InsnClass::Branch] {
            src.retire(class);
        }
        assert_eq!((src.read(p0), src.read(p1)), (4, 2));
        src.disable(p0);
        src.retire(InsnClass::Branch);
        assert_eq!((src.read(p0), src.read(p1)), (4, 3));
    }

    #[test]
    fn overflow_fires_exactly_at_the_deadline() {
        let mut src = ExactSource::new();
        let p = PmcIdx::fixed(0).unwrap();
        src.open(p, &config(ArchEvent::Instructions)).unwrap();
        src.enable(p);
        src.retire(InsnClass::Other); // the enabling instruction
        src.arm_overflow(p, Some(3));
        src.retire(InsnClass::Other);
        src.retire(InsnClass::Other);
        assert!(!src.take_overflow());
        src.retire(InsnClass::Other);
        assert!(src.take_overflow());
        src.retire(InsnClass::Other);
        assert!(!src.take_overflow(), "a deadline fires once");
    }

    #[test]
    fn usr_only_counts_nothing_at_cpl0() {
        let mut src = ExactSource::new();
        let p = PmcIdx::gp(0).unwrap();
        src.open(p, &HostEventConfig { os: false, usr: true, ..config(ArchEvent::Instructions) }).unwrap();
        src.enable(p);
        src.retire(InsnClass::Other);
        assert_eq!(src.read(p), 0);
    }

    #[test]
    fn cmask_inv_and_edge() {
        let mut src = ExactSource::new();
        let p = PmcIdx::gp(0).unwrap();
        // Cycles in which fewer than 1 branch retired (cmask=1, inv).
        src.open(p, &HostEventConfig { cmask: 1, inv: true, ..config(ArchEvent::Branches) }).unwrap();
        src.enable(p);
        src.retire(InsnClass::Other);
        for class in [InsnClass::Other, InsnClass::Branch, InsnClass::Other, InsnClass::Other] {
            src.retire(class);
        }
        assert_eq!(src.read(p), 3);
        // Edge: transitions into "a branch retired".
        let q = PmcIdx::gp(1).unwrap();
        src.open(q, &HostEventConfig { cmask: 1, edge: true, ..config(ArchEvent::Branches) }).unwrap();
        src.enable(q);
        src.retire(InsnClass::Other);
        for class in [InsnClass::Branch, InsnClass::Branch, InsnClass::Other, InsnClass::Branch] {
            src.retire(class);
        }
        assert_eq!(src.read(q), 2);
    }

    #[test]
    fn refuses_events_it_cannot_count() {
        let mut src = ExactSource::new();
        assert_eq!(src.open(PmcIdx::gp(0).unwrap(), &config(ArchEvent::LlcMisses)), Err(BackendError::Unsupported));
        assert!(!src.supports(ArchEvent::BranchMisses));
    }
}
