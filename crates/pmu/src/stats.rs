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
}
