//! The exact backend: the VMM single-steps the guest (KVM_GUESTDBG_SINGLESTEP) and feeds
//! every retired instruction to [`ExactSource::retire`], so instructions and branches are
//! counted exactly and deterministically. Core cycles are a model clock: one cycle per
//! retired instruction, as instruction-set emulators define theirs. Reference cycles tick
//! with the TSC, as on hardware, so ref-cycles / RDTSC over a window is about 1.
//!
//! Each retired instruction counts by the privilege level it ran at, as hardware decides
//! with EVENTSEL's USR and OS bits (FIXED_CTR_CTRL's per counter): user mode (CPL > 0) for
//! USR, the kernel (CPL 0) for OS. Reference cycles follow the TSC while an OS-flagged
//! counter runs, whatever the privilege level (the TSC cannot tell them apart).
//!
//! Its parts: `decode` and `retire` (which instruction retired), `stepping` (single-step
//! control: guest debug, event windows), `handler_watch` (breakpoints on exception
//! handlers while stepping), `blocks` (the block engine: the guest runs to a point far down
//! the path `ahead` runs before it, and the instructions on the way retire together).

pub mod ahead;
pub mod blocks;
pub mod decode;
pub mod handler_watch;
pub mod retire;
pub mod stepping;

use decode::InsnClass;
use pmu::{ArchEvent, BackendError, CountSource, HostEventConfig, PmcIdx, PMC_SLOTS};

#[derive(Debug, Clone, Copy)]
struct ExactCounter {
    config: HostEventConfig,
    enabled: bool,
    count: u64,
    /// Raw count at which the VMM must be told of an overflow.
    deadline: Option<u64>,
    /// Condition of the previous step, for edge detection.
    last_condition: bool,
    /// Reference cycles counted at CPL0: the TSC while the counter runs, in place of `count`.
    tsc: Option<super::Stopwatch>,
}

impl ExactCounter {
    /// Occurrences of the event in one step (one model cycle) in user mode (`user`) or
    /// the kernel.
    fn occurrences(&self, class: InsnClass, user: bool) -> u64 {
        if !(if user { self.config.usr } else { self.config.os }) {
            return 0;
        }
        match self.config.event {
            ArchEvent::Instructions | ArchEvent::CoreCycles => 1,
            ArchEvent::Branches => u64::from(class.is_branch()),
            _ => 0,
        }
    }

    /// Apply CMASK / INV / EDGE (SDM): with a CMASK the counter counts cycles in which the
    /// event occurred at least CMASK times (fewer, with INV); EDGE counts false->true.
    fn step(&mut self, class: InsnClass, user: bool) -> u64 {
        let cfg = self.config;
        if cfg.event == ArchEvent::RefCycles {
            return 0; // counted by the TSC (`tsc`)
        }
        let n = self.occurrences(class, user);
        if cfg.cmask == 0 {
            return n;
        }
        let condition = (n >= u64::from(cfg.cmask)) != cfg.inv;
        let rising = condition && !self.last_condition;
        self.last_condition = condition;
        u64::from(if cfg.edge { rising } else { condition })
    }

    /// The raw count at TSC `now`.
    fn value(&self, now: u64) -> u64 {
        self.tsc.map_or(self.count, |t| t.value(now))
    }
}

/// What `retire_early` changes, kept to be put back if the write faults after all.
#[derive(Debug, Clone, Copy)]
struct Checkpoint {
    counters: [Option<ExactCounter>; PMC_SLOTS],
    overflow_pending: bool,
    steps: u64,
}

/// Counts from single-stepping.
#[derive(Debug)]
pub struct ExactSource {
    counters: [Option<ExactCounter>; PMC_SLOTS],
    enabled_mask: u64,
    overflow_pending: bool,
    /// Instructions retired while stepping (all counters or none).
    pub steps: u64,
    /// The state before the last `retire_early`, for a write that faults after all.
    checkpoint: Option<Box<Checkpoint>>,
    /// The TSC (a parameter for tests).
    tsc: fn() -> u64,
}

impl Default for ExactSource {
    fn default() -> Self {
        ExactSource {
            counters: [None; PMC_SLOTS],
            enabled_mask: 0,
            overflow_pending: false,
            steps: 0,
            checkpoint: None,
            tsc: super::host_tsc,
        }
    }
}

impl ExactSource {
    /// A source with no counter open, reading the host TSC.
    pub fn new() -> Self {
        Self::default()
    }

    fn slot(&mut self, pmc: PmcIdx) -> &mut ExactCounter {
        self.counters[pmc.slot()].as_mut().expect("model protocol: event is open")
    }

    /// Whether any counter counts (the VMM single-steps then, and while any is programmed).
    pub fn counting(&self) -> bool {
        self.enabled_mask != 0
    }

    /// One instruction of class `class` retired, in user mode (`user`) or the kernel.
    pub fn retire(&mut self, class: InsnClass, user: bool) {
        self.steps += 1;
        let now = (self.tsc)();
        for slot in PmcIdx::iter_mask(self.enabled_mask).map(PmcIdx::slot) {
            match self.counters[slot].expect("enabled implies open").tsc {
                Some(_) => self.check_deadline(slot, now),
                None => self.count_one(slot, class, user),
            }
        }
    }

    /// The counter in `slot` sees one instruction of class `class` retire.
    fn count_one(&mut self, slot: usize, class: InsnClass, user: bool) {
        let c = self.counters[slot].as_mut().expect("open");
        let n = c.step(class, user);
        c.count += n;
        if n > 0 {
            self.check_deadline(slot, 0);
        }
    }

    /// An armed counter that reached its deadline (by TSC `now` for reference cycles).
    fn check_deadline(&mut self, slot: usize, now: u64) {
        let c = self.counters[slot].as_mut().expect("open");
        if c.deadline.is_some_and(|d| c.value(now) >= d) {
            c.deadline = None;
            self.overflow_pending = true;
        }
    }

    /// A guest WRMSR exits: it retires before its write takes effect, so the counters that
    /// count now count it and a counter it enables does not (docs/DESIGN.md). Undone by
    /// [`ExactSource::faulted`] if the write #GPs. WRMSR is privileged: it retires in the
    /// kernel.
    pub fn retire_early(&mut self) {
        self.checkpoint = Some(Box::new(Checkpoint {
            counters: self.counters,
            overflow_pending: self.overflow_pending,
            steps: self.steps,
        }));
        self.retire(InsnClass::Other, false);
    }

    /// The instruction retired early faulted instead: it did not retire.
    pub fn faulted(&mut self) {
        if let Some(state) = self.checkpoint.take() {
            let Checkpoint { counters, overflow_pending, steps } = *state;
            (self.counters, self.overflow_pending, self.steps) = (counters, overflow_pending, steps);
        }
    }

    /// How many more instructions may retire before the first that could reach an armed
    /// counter's deadline, that one included (None: no deadline; 0: a reference-cycles
    /// deadline, which the TSC reaches at any instruction). Each retired instruction adds at
    /// most one to a counter, so a block no longer than this overflows, if at all, at its
    /// last instruction, where stepping would.
    pub fn retirements_to_deadline(&self) -> Option<u64> {
        PmcIdx::iter_mask(self.enabled_mask)
            .filter_map(|p| self.counters[p.slot()].as_ref())
            .filter_map(|c| c.deadline.map(|d| if c.tsc.is_some() { 0 } else { d.saturating_sub(c.count).max(1) }))
            .min()
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
            tsc: (config.event == ArchEvent::RefCycles && config.os).then(super::Stopwatch::default),
        };
        self.counters[pmc.slot()] = Some(counter);
        Ok(())
    }

    fn close(&mut self, pmc: PmcIdx) {
        self.counters[pmc.slot()] = None;
        self.enabled_mask &= !pmc.mask();
    }

    /// Counting starts with the next instruction to retire (the enabling WRMSR has retired
    /// already: `retire_early`).
    fn enable(&mut self, pmc: PmcIdx) {
        let now = (self.tsc)();
        let c = self.slot(pmc);
        c.enabled = true;
        if let Some(t) = c.tsc.as_mut() {
            t.start(now);
        }
        self.enabled_mask |= pmc.mask();
    }

    fn disable(&mut self, pmc: PmcIdx) {
        let now = (self.tsc)();
        let c = self.slot(pmc);
        if let Some(t) = c.tsc.as_mut() {
            t.stop(now);
        }
        c.enabled = false;
        self.enabled_mask &= !pmc.mask();
    }

    fn read(&mut self, pmc: PmcIdx) -> u64 {
        let now = (self.tsc)();
        self.slot(pmc).value(now)
    }

    fn arm_overflow(&mut self, pmc: PmcIdx, after: Option<u64>) {
        let now = (self.tsc)();
        let c = self.slot(pmc);
        c.deadline = after.map(|n| c.value(now) + n.max(1));
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
        assert!(!src.counting());
        src.retire_early(); // the enabling WRMSR retires before its write: not counted
        src.enable(p0);
        src.enable(p1);
        assert!(src.counting());
        for class in [InsnClass::Other, InsnClass::Branch, InsnClass::Other, InsnClass::Branch] {
            src.retire(class, false);
        }
        assert_eq!((src.read(p0), src.read(p1)), (4, 2));
        src.retire_early(); // the WRMSR that disables p0 counts
        src.disable(p0);
        src.retire(InsnClass::Branch, false);
        assert_eq!((src.read(p0), src.read(p1)), (5, 3));
    }

    #[test]
    fn a_faulting_wrmsr_does_not_retire() {
        let mut src = ExactSource::new();
        let p = PmcIdx::gp(0).unwrap();
        src.open(p, &config(ArchEvent::Instructions)).unwrap();
        src.enable(p);
        src.arm_overflow(p, Some(1));
        src.retire_early();
        assert_eq!(src.read(p), 1);
        src.faulted();
        assert_eq!(src.read(p), 0, "taken back");
        assert!(!src.take_overflow(), "and so is the overflow it caused");
        src.retire(InsnClass::Other, false);
        assert!(src.take_overflow(), "the deadline still holds");
    }

    #[test]
    fn overflow_fires_exactly_at_the_deadline() {
        let mut src = ExactSource::new();
        let p = PmcIdx::fixed(0).unwrap();
        src.open(p, &config(ArchEvent::Instructions)).unwrap();
        src.enable(p);
        src.arm_overflow(p, Some(3));
        src.retire(InsnClass::Other, false);
        src.retire(InsnClass::Other, false);
        assert!(!src.take_overflow());
        src.retire(InsnClass::Other, false);
        assert!(src.take_overflow());
        src.retire(InsnClass::Other, false);
        assert!(!src.take_overflow(), "a deadline fires once");
    }

    #[test]
    fn a_block_may_run_up_to_the_nearest_deadline() {
        let mut src = ExactSource::new();
        let (p, q) = (PmcIdx::gp(0).unwrap(), PmcIdx::gp(1).unwrap());
        src.open(p, &config(ArchEvent::Instructions)).unwrap();
        src.open(q, &config(ArchEvent::Branches)).unwrap();
        src.enable(p);
        src.enable(q);
        assert_eq!(src.retirements_to_deadline(), None);
        src.arm_overflow(p, Some(10));
        src.arm_overflow(q, Some(4));
        assert_eq!(src.retirements_to_deadline(), Some(4), "branches may be every instruction");
        for _ in 0..3 {
            src.retire(InsnClass::Other, false);
        }
        assert_eq!(src.retirements_to_deadline(), Some(4));
        src.arm_overflow(q, None);
        assert_eq!(src.retirements_to_deadline(), Some(7));
    }

    #[test]
    fn usr_only_counts_nothing_at_cpl0() {
        let mut src = ExactSource::new();
        let p = PmcIdx::gp(0).unwrap();
        src.open(p, &HostEventConfig { os: false, usr: true, ..config(ArchEvent::Instructions) }).unwrap();
        src.enable(p);
        src.retire(InsnClass::Other, false);
        assert_eq!(src.read(p), 0);
    }

    #[test]
    fn cmask_inv_and_edge() {
        let mut src = ExactSource::new();
        let p = PmcIdx::gp(0).unwrap();
        // Cycles in which fewer than 1 branch retired (cmask=1, inv).
        src.open(p, &HostEventConfig { cmask: 1, inv: true, ..config(ArchEvent::Branches) }).unwrap();
        src.enable(p);
        for class in [InsnClass::Other, InsnClass::Branch, InsnClass::Other, InsnClass::Other] {
            src.retire(class, false);
        }
        assert_eq!(src.read(p), 3);
        // Edge: transitions into "a branch retired".
        let q = PmcIdx::gp(1).unwrap();
        src.open(q, &HostEventConfig { cmask: 1, edge: true, ..config(ArchEvent::Branches) }).unwrap();
        src.enable(q);
        for class in [InsnClass::Branch, InsnClass::Branch, InsnClass::Other, InsnClass::Branch] {
            src.retire(class, false);
        }
        assert_eq!(src.read(q), 2);
    }

    static FAKE_TSC: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1000);

    #[test]
    fn reference_cycles_follow_the_tsc() {
        use std::sync::atomic::Ordering::Relaxed;
        let mut src = ExactSource { tsc: || FAKE_TSC.load(Relaxed), ..ExactSource::new() };
        let p = PmcIdx::fixed(2).unwrap();
        src.open(p, &config(ArchEvent::RefCycles)).unwrap();
        src.enable(p);
        FAKE_TSC.fetch_add(500, Relaxed);
        src.retire(InsnClass::Other, false);
        assert_eq!(src.read(p), 500, "ticks with the TSC, not per instruction");
        src.arm_overflow(p, Some(1000));
        FAKE_TSC.fetch_add(999, Relaxed);
        src.retire(InsnClass::Other, false);
        assert!(!src.take_overflow());
        FAKE_TSC.fetch_add(1, Relaxed);
        src.retire(InsnClass::Other, false);
        assert!(src.take_overflow(), "overflows when the TSC reaches the deadline");
        src.disable(p);
        FAKE_TSC.fetch_add(10_000, Relaxed);
        assert_eq!(src.read(p), 1500, "stopped while disabled");
    }

    #[test]
    fn refuses_events_it_cannot_count() {
        let mut src = ExactSource::new();
        assert_eq!(src.open(PmcIdx::gp(0).unwrap(), &config(ArchEvent::LlcMisses)), Err(BackendError::Unsupported));
        assert!(!src.supports(ArchEvent::BranchMisses));
    }
}
