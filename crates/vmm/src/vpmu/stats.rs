//! What the VMM's side of the vPMU costs: time and host perf syscalls per guest PMU
//! operation, and the per-vCPU counts `--stats` and the bench report.

use pmu::tsc::TscRate;
use pmu::PmuReg;
use serde::ser::{Serialize, SerializeMap, Serializer};

/// Guest PMU operations whose VMM-side cost the bench compares (seed 000's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PmuOp {
    /// WRMSR of an IA32_PERFEVTSELx.
    EventselWrite,
    /// WRMSR of IA32_FIXED_CTR_CTRL.
    FixedCtrlWrite,
    /// WRMSR of a non-zero IA32_PERF_GLOBAL_CTRL (programming: no PMI since the last one).
    GlobalCtrlEnable,
    /// The first non-zero IA32_PERF_GLOBAL_CTRL write after a PMI: the guest's PMI handler
    /// restarting the counters it reloaded, which moves the nearest overflow (the sampling
    /// timer is re-armed for it).
    GlobalCtrlEnableAfterPmi,
    /// WRMSR of IA32_PERF_GLOBAL_CTRL = 0.
    GlobalCtrlDisable,
    /// RDMSR of a GP or fixed counter.
    CounterRead,
    /// WRMSR of a GP or fixed counter.
    CounterWrite,
    /// RDMSR of IA32_PERF_GLOBAL_STATUS.
    StatusRead,
    /// WRMSR of IA32_PERF_GLOBAL_OVF_CTRL.
    OvfCtrlWrite,
    /// From the overflow's notification to the PMI raised, its `KVM_NMI` ioctl included.
    PmiDelivery,
    /// One bare `KVM_NMI` ioctl (any NMI the loop injects): PMI delivery's floor.
    KvmNmi,
    /// Any other PMU MSR access.
    Other,
}

impl PmuOp {
    /// Every operation, in table order.
    pub const ALL: [PmuOp; 12] = [
        PmuOp::EventselWrite,
        PmuOp::FixedCtrlWrite,
        PmuOp::GlobalCtrlEnable,
        PmuOp::GlobalCtrlEnableAfterPmi,
        PmuOp::GlobalCtrlDisable,
        PmuOp::CounterRead,
        PmuOp::CounterWrite,
        PmuOp::StatusRead,
        PmuOp::OvfCtrlWrite,
        PmuOp::PmiDelivery,
        PmuOp::KvmNmi,
        PmuOp::Other,
    ];

    /// The operation's name in tables.
    pub fn label(self) -> &'static str {
        match self {
            PmuOp::EventselWrite => "EVENTSEL write",
            PmuOp::FixedCtrlWrite => "FIXED_CTR_CTRL write",
            PmuOp::GlobalCtrlEnable => "GLOBAL_CTRL enable",
            PmuOp::GlobalCtrlEnableAfterPmi => "GLOBAL_CTRL enable (PMI)",
            PmuOp::GlobalCtrlDisable => "GLOBAL_CTRL disable",
            PmuOp::CounterRead => "counter read",
            PmuOp::CounterWrite => "counter write",
            PmuOp::StatusRead => "GLOBAL_STATUS read",
            PmuOp::OvfCtrlWrite => "GLOBAL_OVF_CTRL write",
            PmuOp::PmiDelivery => "PMI delivery (VMM)",
            PmuOp::KvmNmi => "KVM_NMI ioctl (floor)",
            PmuOp::Other => "other PMU MSR",
        }
    }

    /// The operation a write of `value` to the register the model decoded is (any vendor).
    pub(crate) fn of_write(reg: Option<PmuReg>, value: u64) -> PmuOp {
        match reg {
            Some(PmuReg::EventSel(_)) => PmuOp::EventselWrite,
            Some(PmuReg::FixedCtrCtrl) => PmuOp::FixedCtrlWrite,
            Some(PmuReg::GlobalCtrl) if value == 0 => PmuOp::GlobalCtrlDisable,
            Some(PmuReg::GlobalCtrl) => PmuOp::GlobalCtrlEnable,
            Some(PmuReg::Counter(..)) => PmuOp::CounterWrite,
            Some(PmuReg::GlobalStatusClear) => PmuOp::OvfCtrlWrite,
            _ => PmuOp::Other,
        }
    }

    /// The operation a read of the register the model decoded is.
    pub(crate) fn of_read(reg: Option<PmuReg>) -> PmuOp {
        match reg {
            Some(PmuReg::Counter(..)) => PmuOp::CounterRead,
            Some(PmuReg::GlobalStatus) => PmuOp::StatusRead,
            _ => PmuOp::Other,
        }
    }
}

/// Count, total and worst VMM time of one kind of operation, and the host perf syscalls
/// it made.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct OpTime {
    /// Operations.
    pub count: u64,
    /// Their total VMM time, ns.
    pub total_ns: u64,
    /// The longest one, ns.
    pub max_ns: u64,
    /// Host perf syscalls they made.
    pub syscalls: u64,
}

/// When an operation started: the host TSC and the thread's perf syscall count. (The TSC,
/// not the monotonic clock: an operation is a few hundred ns, on caches the guest left
/// cold, and `clock_gettime` would add its own vDSO and library pages to them.)
#[derive(Debug, Clone, Copy)]
pub struct OpStart {
    tsc: u64,
    syscalls: u64,
}

impl OpStart {
    /// An operation starting now, on the calling thread.
    pub fn now() -> Self {
        OpStart { tsc: crate::backends::host_tsc(), syscalls: crate::backends::perf_sys::thread_syscalls() }
    }

    /// Nanoseconds since the start, with the host TSC at `tsc`.
    pub fn elapsed_ns(&self, tsc: TscRate) -> u64 {
        tsc.cycles_to_ns(crate::backends::host_tsc().saturating_sub(self.tsc))
    }
}

impl OpTime {
    /// One operation that began at `start` ends now; returns its ns.
    pub fn add(&mut self, start: OpStart, tsc: TscRate) -> u64 {
        let ns = start.elapsed_ns(tsc);
        self.count += 1;
        self.total_ns += ns;
        self.max_ns = self.max_ns.max(ns);
        self.syscalls += crate::backends::perf_sys::thread_syscalls() - start.syscalls;
        ns
    }

    /// Add another vCPU's operations of the same kind.
    pub fn merge(&mut self, other: &OpTime) {
        self.count += other.count;
        self.total_ns += other.total_ns;
        self.max_ns = self.max_ns.max(other.max_ns);
        self.syscalls += other.syscalls;
    }

    /// Host perf syscalls per operation.
    pub fn syscalls_per_op(&self) -> f64 {
        self.syscalls as f64 / self.count.max(1) as f64
    }

    /// Mean VMM time per operation, ns (0 without any).
    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.total_ns as f64 / self.count as f64
        }
    }
}

/// The time of every kind of operation: an array, as each MSR exit adds to one on caches
/// the guest left cold (a map's nodes and search code are more lines to fetch).
#[derive(Debug, Default, Clone)]
pub struct OpTimes([OpTime; PmuOp::ALL.len()]);

impl OpTimes {
    /// The operations of kind `op`, if there were any.
    pub fn get(&self, op: &PmuOp) -> Option<&OpTime> {
        Some(&self.0[*op as usize]).filter(|t| t.count > 0)
    }

    /// Where operations of kind `op` add up.
    pub fn entry(&mut self, op: PmuOp) -> &mut OpTime {
        &mut self.0[op as usize]
    }

    /// The kinds that happened, in table order.
    pub fn iter(&self) -> impl Iterator<Item = (PmuOp, &OpTime)> {
        PmuOp::ALL.into_iter().filter_map(|op| self.get(&op).map(|t| (op, t)))
    }
}

/// As a map from the operations that happened, as before.
impl Serialize for OpTimes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        for (op, t) in self.iter() {
            map.serialize_entry(&op, t)?;
        }
        map.end()
    }
}

/// VMM-side vPMU telemetry of one vCPU (the model keeps its own, [`pmu::PmuStats`]).
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct VpmuStats {
    /// VMM time per guest PMU operation.
    pub ops: OpTimes,
    /// RDMSR/WRMSR exits of PMU MSRs.
    pub msr_exits: u64,
    /// PMIs raised into the guest (as an NMI or by vector).
    pub pmis_delivered: u64,
    /// PMIs not sent because the guest's LVTPC was masked.
    pub pmis_masked: u64,
    /// PMIs whose NMI went in with the next entry's synced events, not a `KVM_NMI` ioctl.
    pub nmis_in_events: u64,
    /// PMIs lost because an ioctl failed (KVM_GET_LAPIC, KVM_SET_LAPIC, KVM_SIGNAL_MSI,
    /// KVM_NMI).
    pub pmi_ioctl_failures: u64,
    /// Time spent in the VMM on PMU MSR exits and overflow handling.
    pub handle_ns: u64,
    /// Instructions single-stepped by the exact backend.
    pub steps: u64,
    /// RDPMC instructions the VMM ran for the guest while stepping.
    pub rdpmc_emulated: u64,
    /// Blocks the block engine ran (`--exact-engine blocks`); their instructions are in `steps`.
    pub blocks: u64,
    /// Instructions retired in blocks.
    pub block_insns: u64,
    /// Blocks that ended where their plan does not say (counted to the stop as far as known).
    pub blocks_lost: u64,
    /// Blocks that reached their end with registers other than the ones run ahead.
    pub blocks_mispredicted: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_has_its_own_slot_and_serializes_as_a_map() {
        for (i, op) in PmuOp::ALL.into_iter().enumerate() {
            assert_eq!(op as usize, i, "{op:?}: ALL is in declaration order");
        }
        let mut ops = OpTimes::default();
        ops.entry(PmuOp::CounterRead).count = 2;
        ops.entry(PmuOp::KvmNmi).count = 1;
        assert!(ops.get(&PmuOp::Other).is_none(), "no operation, no entry");
        assert_eq!(
            ops.iter().map(|(op, t)| (op, t.count)).collect::<Vec<_>>(),
            [(PmuOp::CounterRead, 2), (PmuOp::KvmNmi, 1)]
        );
        let json = serde_json::to_value(&ops).unwrap();
        assert_eq!(json.as_object().unwrap().keys().collect::<Vec<_>>(), ["counter-read", "kvm-nmi"]);
    }
}
