//! Telemetry: what the PMU cost the host, for comparing policies.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Backend calls, per kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendCalls {
    /// `open` (successful or not).
    pub open: u64,
    /// `close`.
    pub close: u64,
    /// `enable`.
    pub enable: u64,
    /// `disable`.
    pub disable: u64,
    /// `read`.
    pub read: u64,
    /// `arm_overflow`.
    pub arm_overflow: u64,
}

impl BackendCalls {
    /// All calls.
    pub fn total(&self) -> u64 {
        self.open + self.close + self.enable + self.disable + self.read + self.arm_overflow
    }

    /// Adds `other` to these counts.
    pub fn add(&mut self, other: &BackendCalls) {
        self.open += other.open;
        self.close += other.close;
        self.enable += other.enable;
        self.disable += other.disable;
        self.read += other.read;
        self.arm_overflow += other.arm_overflow;
    }
}

/// Counters of PMU activity since the PMU was built (kept across `reset`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PmuStats {
    /// Host events created (successful `open`).
    pub events_created: u64,
    /// `open` calls that failed.
    pub open_failures: u64,
    /// Existing idle host events re-enabled instead of creating new ones.
    pub events_reused: u64,
    /// Host events closed by [`crate::Pmu::tick`] after staying idle for a release slice.
    pub events_lazily_released: u64,
    /// Host events closed, for any reason (includes lazy releases).
    pub events_closed: u64,
    /// Backend calls per kind.
    pub backend_calls: BackendCalls,
    /// Counter wraps past 2^48 (GLOBAL_STATUS bits set).
    pub overflows: u64,
    /// Times [`crate::Pmu::collect_overflows`] asked for a PMI.
    pub pmis_requested: u64,
    /// MSR reads by MSR number (including faulting ones).
    pub msr_reads: BTreeMap<u32, u64>,
    /// MSR writes by MSR number (including faulting ones).
    pub msr_writes: BTreeMap<u32, u64>,
    /// RDPMC executions.
    pub rdpmc: u64,
    /// #GP faults returned for guest accesses.
    pub faults: u64,
    /// Host-initiated accesses refused.
    pub host_rejects: u64,
    /// Programming changes (EVENTSEL, FIXED_CTR_CTRL, GLOBAL_CTRL writes, a new filter) that
    /// left an enabled counter not counting because the [`crate::PmuEventFilter`] denies its
    /// event: no host event was created for it.
    #[serde(default)]
    pub filtered_programs: u64,
    /// PEBS records the VMM wrote into the guest's DS buffer.
    #[serde(default)]
    pub pebs_records: u64,
    /// PEBS assists skipped: no room below the absolute maximum, or no readable DS area.
    #[serde(default)]
    pub pebs_dropped: u64,
    /// PMIs for the PEBS buffer reaching its interrupt threshold (also in
    /// `pmis_requested`).
    #[serde(default)]
    pub pebs_interrupts: u64,
}

impl PmuStats {
    /// Adds `other` to these counters (e.g. to sum the vCPUs of a VM).
    pub fn add(&mut self, other: &PmuStats) {
        self.events_created += other.events_created;
        self.open_failures += other.open_failures;
        self.events_reused += other.events_reused;
        self.events_lazily_released += other.events_lazily_released;
        self.events_closed += other.events_closed;
        self.backend_calls.add(&other.backend_calls);
        self.overflows += other.overflows;
        self.pmis_requested += other.pmis_requested;
        for (msr, n) in &other.msr_reads {
            *self.msr_reads.entry(*msr).or_default() += n;
        }
        for (msr, n) in &other.msr_writes {
            *self.msr_writes.entry(*msr).or_default() += n;
        }
        self.rdpmc += other.rdpmc;
        self.faults += other.faults;
        self.host_rejects += other.host_rejects;
        self.filtered_programs += other.filtered_programs;
        self.pebs_records += other.pebs_records;
        self.pebs_dropped += other.pebs_dropped;
        self.pebs_interrupts += other.pebs_interrupts;
    }
}
