//! Work a vCPU does before each KVM_RUN, in a fixed order (seed 002, "Service NMI requests
//! after PMI requests"): the PMU request first — pending overflows become a PMI, which
//! LVTPC usually turns into an NMI — then NMI injection, so that NMI leaves with this very
//! entry. The legacy order injects NMIs first; a PMI found afterwards is only seen by the
//! last check before entry, which cancels the entry and goes round again: one extra
//! KVM_RUN (with immediate_exit, returning before any guest instruction) per such PMI.

use serde::Serialize;

/// In which order the request step services the PMU and NMI requests (`--request-order`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RequestOrder {
    /// PMU/PMI before NMI (ours).
    #[default]
    PmiFirst,
    /// NMI before PMU/PMI (KVM before the fix).
    Legacy,
}

/// What the request step did.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct RequestStats {
    /// PMIs delivered as NMIs.
    pub pmi_nmis: u64,
    /// NMIs requested from outside the PMU (NMI port, NMI source).
    pub external_nmis: u64,
    /// Passes where a PMI and another NMI were pending together.
    pub both_pending: u64,
    /// ... and the PMI's NMI was injected first.
    pub pmi_injected_first: u64,
    /// Entries cancelled because a PMI turned up after the NMI step (legacy order).
    pub cancelled_entries: u64,
}

impl RequestStats {
    /// Add another vCPU's counts to these.
    pub fn merge(&mut self, o: &RequestStats) {
        self.pmi_nmis += o.pmi_nmis;
        self.external_nmis += o.external_nmis;
        self.both_pending += o.both_pending;
        self.pmi_injected_first += o.pmi_injected_first;
        self.cancelled_entries += o.cancelled_entries;
    }

    /// Extra entries per PMI delivered as an NMI.
    pub fn extra_entries_per_pmi(&self) -> f64 {
        if self.pmi_nmis == 0 {
            0.0
        } else {
            self.cancelled_entries as f64 / self.pmi_nmis as f64
        }
    }
}
