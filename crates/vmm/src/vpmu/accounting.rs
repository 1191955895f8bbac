//! What the VMM side of one vPMU did and what it cost (`--stats`, `bench pmu-ops`).

use crate::vpmu::stats::{OpStart, PmuOp, VpmuStats};
use pmu::tsc::TscRate;

/// Why the loop issued a `KVM_NMI`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NmiSource {
    /// The PMI the PMU request owed as an NMI.
    Pmi,
    /// An NMI from outside the PMU (the NMI port, the NMI source thread).
    External,
}

/// The statistics of one vCPU's vPMU, and the operations still being timed.
#[derive(Debug)]
pub(super) struct Accounting {
    /// The host TSC's rate, which times the operations.
    tsc: TscRate,
    stats: VpmuStats,
    /// When the PMI now owed as an NMI began to be handled (accounted at its KVM_NMI).
    pmi_started: Option<OpStart>,
    /// A PMI was raised and the guest has not enabled counters since: its next enable is
    /// its PMI handler's restart (`PmuOp::GlobalCtrlEnableAfterPmi`).
    pmi_since_enable: bool,
}

impl Accounting {
    /// Nothing accounted yet; operations timed with the host TSC at `tsc`.
    pub(super) fn new(tsc: TscRate) -> Self {
        Accounting { tsc, stats: VpmuStats::default(), pmi_started: None, pmi_since_enable: false }
    }

    pub(super) fn stats(&self) -> &VpmuStats {
        &self.stats
    }

    /// Where single-stepping counts its steps and emulated RDPMCs.
    pub(super) fn stats_mut(&mut self) -> &mut VpmuStats {
        &mut self.stats
    }

    /// A guest RDMSR or WRMSR exit of `op` was handled, from `started`.
    pub(super) fn msr_exit(&mut self, op: PmuOp, started: OpStart) {
        let op = match op {
            PmuOp::GlobalCtrlEnable if std::mem::take(&mut self.pmi_since_enable) => PmuOp::GlobalCtrlEnableAfterPmi,
            op => op,
        };
        self.stats.msr_exits += 1;
        self.op(op, started);
    }

    /// VMM time spent on the PMU that no operation owns (a fold that raised no PMI, a
    /// doorbell).
    pub(super) fn handled(&mut self, started: OpStart) {
        self.stats.handle_ns += started.elapsed_ns(self.tsc);
    }

    /// A PMI went to the guest: delivered at once (by vector), or owed as an NMI, whose
    /// delivery ends with its `KVM_NMI` (`nmi_injected`).
    pub(super) fn pmi_delivered(&mut self, started: OpStart, as_nmi: bool) {
        self.stats.pmis_delivered += 1;
        self.pmi_since_enable = true;
        match as_nmi {
            true => self.pmi_started = Some(started),
            false => self.op(PmuOp::PmiDelivery, started),
        }
    }

    /// LVTPC was masked: the PMI is not sent (its status stays set, as on hardware).
    pub(super) fn pmi_masked(&mut self, started: OpStart) {
        self.stats.pmis_masked += 1;
        self.op(PmuOp::PmiDelivery, started);
    }

    /// The LAPIC could not be read or written: the PMI is lost, not masked.
    pub(super) fn pmi_failed(&mut self, started: OpStart) {
        self.stats.pmi_ioctl_failures += 1;
        self.op(PmuOp::PmiDelivery, started);
    }

    /// The loop issued a `KVM_NMI` that began at `started`.
    pub(super) fn nmi_injected(&mut self, started: OpStart, source: NmiSource) {
        self.stats.ops.entry(PmuOp::KvmNmi).add(started, self.tsc);
        if let Some(t) = self.pmi_started.take().filter(|_| source == NmiSource::Pmi) {
            self.op(PmuOp::PmiDelivery, t);
        }
    }

    /// The loop queued the PMI's NMI in the next entry's events (no `KVM_NMI` ioctl): the
    /// PMI's delivery ends here.
    pub(super) fn nmi_queued(&mut self) {
        self.stats.nmis_in_events += 1;
        if let Some(t) = self.pmi_started.take() {
            self.op(PmuOp::PmiDelivery, t);
        }
    }

    /// The loop's `KVM_NMI` failed: a PMI owed as that NMI is lost.
    pub(super) fn nmi_failed(&mut self, source: NmiSource) {
        if source == NmiSource::Pmi && self.pmi_started.take().is_some() {
            self.stats.pmis_delivered -= 1;
            self.stats.pmi_ioctl_failures += 1;
        }
    }

    fn op(&mut self, op: PmuOp, started: OpStart) {
        self.stats.handle_ns += self.stats.ops.entry(op).add(started, self.tsc);
    }
}
