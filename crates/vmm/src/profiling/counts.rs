//! What the VMM knows of a run's counts by itself, with no word from the guest's agent:
//! `stat -a` counts a whole guest from the VMM (the vCPU threads' CPU time, and on the
//! exact backend every retired instruction and branch while it steps the whole run), and a
//! `stat` cut short before the agent reported shows the counters the agent had programmed,
//! as the vPMU holds them at the end.

use crate::backends::exact::decode::InsnClass;
use pmu::{ArchEvent, CountSource, PmcIdx, Pmu};
use serde::Serialize;

/// Instructions and branches retired over a whole run, at every privilege level and in user
/// mode, by the exact backend's retirement rules (docs/DESIGN.md, "Counting as hardware
/// counts"; the level as for EVENTSEL.USR/OS).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Retired {
    /// Instructions retired.
    pub instructions: u64,
    /// Branch instructions retired.
    pub branches: u64,
    /// Of them, the instructions retired in user mode (CPL > 0).
    pub user_instructions: u64,
    /// Of them, the branches retired in user mode.
    pub user_branches: u64,
}

impl Retired {
    /// One instruction of `class` retired, in user mode (`user`) or the kernel.
    pub fn retire(&mut self, class: InsnClass, user: bool) {
        let branch = u64::from(class.is_branch());
        self.instructions += 1;
        self.branches += branch;
        if user {
            self.user_instructions += 1;
            self.user_branches += branch;
        }
    }

    /// A WRMSR (a kernel instruction) retired before its write took effect.
    pub fn retire_early(&mut self) {
        self.instructions += 1;
    }

    /// The WRMSR retired early faulted after all: it did not retire.
    pub fn faulted(&mut self) {
        self.instructions = self.instructions.saturating_sub(1);
    }
}

/// A counter the guest left counting, as the vPMU holds it at the end of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CounterView {
    /// A fixed counter (else general-purpose).
    pub fixed: bool,
    /// Its index among its kind.
    pub index: u8,
    /// The architectural event it counts.
    pub event: ArchEvent,
    /// Its EVENTSEL\[15:0\] in Intel's encoding (`0xUUEE`).
    pub raw: u16,
    /// It counts at CPL > 0.
    pub usr: bool,
    /// It counts at CPL 0.
    pub os: bool,
    /// Its value.
    pub value: u64,
}

/// One vCPU's counts as the VMM saw them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VcpuCounts {
    /// The vCPU.
    pub vcpu: u32,
    /// CPU time of its thread, ns: what the perf backend's software clock counts (cycles
    /// are this x TSC).
    pub thread_ns: u64,
    /// Every instruction it retired (`stat -a` on the exact backend).
    pub retired: Option<Retired>,
    /// The counters counting at the end, in the vPMU's order (fixed counters last).
    pub counters: Vec<CounterView>,
}

/// The counters of `pmu` that count at the end of a run, with their values (folded).
pub fn counters<B: CountSource>(pmu: &mut Pmu<B>) -> Vec<CounterView> {
    let pmcs: Vec<PmcIdx> = pmu.caps().pmcs().collect();
    let configs: Vec<_> = pmcs.iter().map(|&p| pmu.counting_config(p)).collect();
    if configs.iter().all(Option::is_none) {
        return Vec::new();
    }
    let state = pmu.save();
    let (mut gp, mut fixed) = (0u8, 0u8);
    let mut views = Vec::new();
    for (pmc, config) in pmcs.into_iter().zip(configs) {
        let (index, value) = if pmc.is_fixed() {
            fixed += 1;
            (fixed - 1, state.fixed_ctr.get(usize::from(fixed - 1)).copied())
        } else {
            gp += 1;
            (gp - 1, state.pmc.get(usize::from(gp - 1)).copied())
        };
        let (Some(config), Some(value)) = (config, value) else { continue };
        let (select, umask) = config.event.select();
        views.push(CounterView {
            fixed: pmc.is_fixed(),
            index,
            event: config.event,
            raw: u16::from(umask) << 8 | u16::from(select),
            usr: config.usr,
            os: config.os,
            value,
        });
    }
    views
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmu::{Initiator, MockSource, MsrIndex, PmuConfig};

    #[test]
    fn counting_counters_are_seen_with_their_values() {
        let mut pmu = Pmu::new(PmuConfig::default(), MockSource::default()).unwrap();
        assert!(counters(&mut pmu).is_empty(), "nothing programmed");
        // PMC1 counts branches at CPL0, fixed counter 0 instructions at both levels.
        let w = |pmu: &mut Pmu<MockSource>, msr: u32, v: u64| {
            assert!(pmu.set_msr(MsrIndex(msr), v, Initiator::Guest).is_ok())
        };
        w(&mut pmu, 0x187, 0xc4 | 1 << 17 | 1 << 22);
        w(&mut pmu, 0x38d, 0b11);
        w(&mut pmu, 0xc2, 1234);
        w(&mut pmu, 0x38f, 1 << 1 | 1 << 32);
        let views = counters(&mut pmu);
        assert_eq!(views.len(), 2, "{views:?}");
        assert_eq!(
            (views[0].fixed, views[0].index, views[0].raw, views[0].usr, views[0].os),
            (false, 1, 0x00c4, false, true)
        );
        assert_eq!(views[0].value, 1234);
        assert_eq!((views[1].fixed, views[1].index, views[1].event), (true, 0, ArchEvent::Instructions));
        assert!(views[1].usr && views[1].os);
    }

    #[test]
    fn retired_counts_branches_and_undoes_a_faulted_wrmsr() {
        let mut r = Retired::default();
        r.retire(InsnClass::Other, false);
        r.retire(InsnClass::Branch, true);
        r.retire_early();
        r.faulted();
        assert_eq!(r, Retired { instructions: 2, branches: 1, user_instructions: 1, user_branches: 1 });
    }
}
