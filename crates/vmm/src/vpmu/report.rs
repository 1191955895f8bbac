//! The vPMU part of `--stats` / `--json`: backend, policy, CPUID, and telemetry summed over
//! the vCPUs (host events created / reused / released / closed, PMU MSR exits, PMIs,
//! backend syscalls, VMM time).

use crate::backends::perf_sys;
use crate::backends::VmmSource;
use crate::config::{BackendKind, PmuSettings};
use crate::vpmu::{stats::VpmuStats, VcpuPmu};
use pmu::{PmuStats, Policy};
use serde::Serialize;

/// The PMI throttle of a run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ThrottleReport {
    /// The share of vCPU time overflow handling may take, percent.
    pub max_percent: u8,
    /// One exit roundtrip on this host in the run's mode, thread CPU ns (0: not measured).
    pub exit_roundtrip_ns: u64,
}

/// The vPMU's configuration and telemetry for one run, all vCPUs summed.
#[derive(Debug, Clone, Serialize)]
pub struct PmuReport {
    /// Which backend counted.
    pub backend: BackendKind,
    /// What the backend counts with on this host.
    pub backend_detail: String,
    /// The host event policy, described.
    pub policy: String,
    /// General-purpose counters per vCPU.
    pub gp_counters: u8,
    /// Fixed counters per vCPU.
    pub fixed_counters: u8,
    /// CPUID leaf 0xA as the guest sees it (EAX, EBX, ECX, EDX).
    pub cpuid_0xa: [u32; 4],
    /// Whose PMU the guest has (`--cpu-vendor`).
    pub vendor: pmu::Vendor,
    /// The architectural events the vPMU counts (CPUID.0AH:EBX bit order, set = counted):
    /// on Intel the complement of leaf 0xA's EBX, on AMD (no CPUID says) the PMU caps'.
    pub available: pmu::EventSet,
    /// The PMU model's statistics.
    pub model: PmuStats,
    /// The VMM side's statistics (exits, PMIs, time).
    pub vmm: VpmuStats,
    /// perf_event_open/ioctl/read/fcntl/close calls made by the process for PMU events.
    pub host_syscalls: u64,
    /// Of those, ioctls that failed (enable, disable, period): each leaves a counter wrong.
    pub host_ioctl_failures: u64,
    /// The paravirtual PMU page's statistics.
    pub pv: crate::vpmu::pv::PvStats,
    /// The per-VM cap on open host events.
    pub host_events_cap: usize,
    /// The most host events open at once.
    pub host_events_peak: usize,
    /// Host event opens the cap refused.
    pub host_events_refused: usize,
    /// Host perf events created over the run.
    pub host_events_created: usize,
    /// Overflow notifications of the perf backend: taken, lost, throttled.
    pub notifications: crate::backends::perf::NotificationStats,
    /// The PMI throttle (perf backend): its share of vCPU time and the exit it counts.
    pub throttle: Option<ThrottleReport>,
    #[serde(skip)]
    budget: Option<std::sync::Arc<crate::backends::perf::EventBudget>>,
    #[serde(skip)]
    syscalls_at_start: u64,
    #[serde(skip)]
    failed_ioctls_at_start: u64,
}

impl PmuReport {
    /// The report of a VM built with `settings`, from vCPU 0's PMU `pmu`; telemetry starts
    /// at zero and host syscalls are counted from now.
    pub fn new(
        settings: &PmuSettings,
        pmu: &VcpuPmu,
        budget: std::sync::Arc<crate::backends::perf::EventBudget>,
    ) -> Self {
        let backend_detail = pmu.model().backend().describe();
        let policy = match settings.policy {
            Policy::Reuse { release_after_ns } => {
                format!("reuse (lazy release after {:.3} ms of vCPU run time)", release_after_ns as f64 / 1e6)
            }
            Policy::Legacy => "legacy (re-create host events on every write)".into(),
        };
        let caps = pmu.model().caps();
        PmuReport {
            backend: settings.backend,
            backend_detail,
            policy,
            gp_counters: caps.gp_counters(),
            fixed_counters: caps.fixed_counters(),
            cpuid_0xa: caps.cpuid_0xa(),
            vendor: caps.vendor(),
            available: caps.available(),
            model: PmuStats::default(),
            vmm: VpmuStats::default(),
            host_syscalls: 0,
            host_ioctl_failures: 0,
            pv: Default::default(),
            host_events_cap: budget.limit(),
            host_events_peak: 0,
            host_events_refused: 0,
            host_events_created: 0,
            notifications: Default::default(),
            throttle: pmu
                .throttle()
                .map(|t| ThrottleReport { max_percent: t.max_percent(), exit_roundtrip_ns: t.exit_ns() }),
            budget: Some(budget),
            syscalls_at_start: perf_sys::syscalls(),
            failed_ioctls_at_start: perf_sys::failed_ioctls(),
        }
    }

    /// Add one vCPU's telemetry.
    pub fn add_vcpu(&mut self, pmu: &VcpuPmu) {
        self.model.add(&pmu.model_stats());
        let v = pmu.stats();
        let t = &mut self.vmm;
        t.msr_exits += v.msr_exits;
        t.pmis_delivered += v.pmis_delivered;
        t.pmis_masked += v.pmis_masked;
        t.nmis_in_events += v.nmis_in_events;
        t.pmi_ioctl_failures += v.pmi_ioctl_failures;
        t.handle_ns += v.handle_ns;
        t.steps += v.steps;
        t.rdpmc_emulated += v.rdpmc_emulated;
        t.blocks += v.blocks;
        t.block_insns += v.block_insns;
        t.blocks_lost += v.blocks_lost;
        t.blocks_mispredicted += v.blocks_mispredicted;
        self.pv.merge(pmu.pv_stats());
        if let Some(n) = pmu.model().backend().notifications() {
            self.notifications.merge(n);
        }
        for (op, time) in v.ops.iter() {
            t.ops.entry(op).merge(time);
        }
    }

    /// Take the process-wide numbers at the end of the run: syscalls, host event peak.
    pub fn finish(&mut self) {
        self.host_syscalls = perf_sys::syscalls() - self.syscalls_at_start;
        self.host_ioctl_failures = perf_sys::failed_ioctls() - self.failed_ioctls_at_start;
        if let Some(b) = &self.budget {
            self.host_events_peak = b.peak.load(std::sync::atomic::Ordering::Relaxed);
            self.host_events_refused = b.refused.load(std::sync::atomic::Ordering::Relaxed);
            self.host_events_created = b.created.load(std::sync::atomic::Ordering::Relaxed);
        }
    }
}
