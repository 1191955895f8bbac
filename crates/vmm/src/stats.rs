//! Run statistics: VM exits by reason with counts and VMM handling time.

use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Count and handling time of one exit reason.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct ExitCount {
    /// Exits of this reason.
    pub count: u64,
    /// Time the VMM spent handling these exits (not time in the guest).
    pub handle_ns: u64,
}

/// Per-vCPU statistics, merged into [`VmStats`] at the end of a run.
#[derive(Debug, Default, Clone, Serialize)]
pub struct VcpuStats {
    /// Exits by reason.
    pub exits: BTreeMap<&'static str, ExitCount>,
    /// Time spent inside KVM_RUN.
    pub run_ns: u64,
    /// KVM_RUN calls, cancelled entries included.
    pub entries: u64,
    /// What the request step did.
    pub requests: crate::requests::RequestStats,
    /// Syscalls the vCPU thread made (raw_syscalls:sys_enter), when counted.
    pub syscalls: Option<u64>,
    /// How the vCPU executed: "native" or "emulated".
    pub mode: &'static str,
    /// KVM's own non-zero statistics of this vCPU at the end (binary stats fd).
    pub kvm: BTreeMap<String, u64>,
    /// Exits while the guest agent's workload ran (between its START and END marks), by reason.
    pub workload_exits: BTreeMap<&'static str, u64>,
    /// `INT n` the VMM delivered because the host's emulator rejects it (`softint`).
    pub soft_ints: u64,
}

/// KVM statistics `--stats` shows per vCPU (all are in `--json`).
const KVM_STATS_SHOWN: [&str; 6] = ["exits", "insn_emulation", "nmi_injections", "irq_injections", "halt_exits", "pf_taken"];

impl VcpuStats {
    /// Count one exit of `reason` that took `handled_in` to handle.
    pub fn record(&mut self, reason: &'static str, handled_in: Duration) {
        let e = self.exits.entry(reason).or_default();
        e.count += 1;
        e.handle_ns += handled_in.as_nanos() as u64;
    }
}

/// Whole-VM statistics.
#[derive(Debug, Default, Clone, Serialize)]
pub struct VmStats {
    /// Wall time of the run, from the start of `perfvm run`.
    pub wall_ns: u64,
    /// From the start of `perfvm run` to the guest's first console byte.
    pub first_console_byte_ns: Option<u64>,
    /// Exits by reason, all vCPUs.
    pub exits: BTreeMap<&'static str, ExitCount>,
    /// Exits of every reason, all vCPUs.
    pub total_exits: u64,
    /// Exits while the guest agent's workload ran, by reason.
    pub workload_exits: BTreeMap<&'static str, u64>,
    /// Time inside KVM_RUN, all vCPUs.
    pub run_ns: u64,
    /// KVM_RUN calls, all vCPUs.
    pub entries: u64,
    /// What the request steps did, all vCPUs.
    pub requests: crate::requests::RequestStats,
    /// Syscalls of the vCPU threads (raw_syscalls:sys_enter), when counted.
    pub vcpu_syscalls: Option<u64>,
    /// Accesses to ports no device claims, by port (hex string for JSON keys).
    pub unclaimed_ports: BTreeMap<String, u64>,
    /// Console bytes not kept because the capture buffer was full.
    pub console_bytes_dropped: u64,
    /// The virtual PMU's report, when the VM has one.
    pub pmu: Option<crate::pmu_report::PmuReport>,
    /// How the vCPUs executed and why.
    pub execution: Option<crate::native::Execution>,
    /// The CPU identity the guest saw.
    pub cpu: Option<crate::identity::CpuReport>,
    /// Per vCPU: its mode, exits, and KVM's own statistics.
    pub vcpus: Vec<VcpuStats>,
}

impl VmStats {
    /// Exits while the workload ran, less its console output: what sampling and counting cost.
    pub fn workload_exits_but_console(&self) -> u64 {
        self.workload_exits.iter().filter(|(r, _)| **r != "serial").map(|(_, n)| n).sum()
    }

    /// Add one vCPU's statistics (and keep them in `vcpus`).
    pub fn merge_vcpu(&mut self, v: &VcpuStats) {
        for (reason, c) in &v.exits {
            let e = self.exits.entry(reason).or_default();
            e.count += c.count;
            e.handle_ns += c.handle_ns;
            self.total_exits += c.count;
        }
        for (reason, n) in &v.workload_exits {
            *self.workload_exits.entry(reason).or_default() += n;
        }
        self.run_ns += v.run_ns;
        self.entries += v.entries;
        self.requests.merge(&v.requests);
        if let Some(n) = v.syscalls {
            *self.vcpu_syscalls.get_or_insert(0) += n;
        }
        self.vcpus.push(v.clone());
    }

    /// Human-readable table, as `--stats` prints it.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let secs = self.wall_ns as f64 / 1e9;
        out.push_str(&format!(
            "\n VM statistics ({:.6} s wall, {:.6} s in KVM_RUN, {} entries)\n\n",
            secs,
            self.run_ns as f64 / 1e9,
            self.entries
        ));
        if let Some(c) = &self.cpu {
            out.push_str(&format!("  cpu: {}, PMU: {}\n", c.vendor, c.pmu));
        }
        if let Some(e) = &self.execution {
            out.push_str(&format!("  execution: {} ({})\n", e.name(), e.reason));
            for (i, v) in self.vcpus.iter().enumerate() {
                let kvm: Vec<String> =
                    KVM_STATS_SHOWN.iter().filter_map(|k| v.kvm.get(*k).map(|n| format!("{k} {n}"))).collect();
                out.push_str(&format!(
                    "    vcpu{i}: {}, {} exits to the VMM; KVM: {}\n",
                    v.mode,
                    v.exits.values().map(|c| c.count).sum::<u64>(),
                    if kvm.is_empty() { "no statistics".into() } else { kvm.join(", ") }
                ));
            }
            out.push('\n');
        }
        out.push_str(&format!("  {:<16} {:>12} {:>14} {:>12}\n", "exit reason", "count", "handle time", "avg"));
        for (reason, c) in &self.exits {
            let avg = c.handle_ns.checked_div(c.count).unwrap_or(0);
            out.push_str(&format!(
                "  {:<16} {:>12} {:>11.3} ms {:>9} ns\n",
                reason,
                c.count,
                c.handle_ns as f64 / 1e6,
                avg
            ));
        }
        out.push_str(&format!("  {:<16} {:>12}\n", "total", self.total_exits));
        let r = &self.requests;
        if r.pmi_nmis + r.external_nmis + r.cancelled_entries > 0 {
            out.push_str(&format!(
                "\n  NMIs: {} from PMIs, {} external, {} passes with both (PMI first in {}), {} cancelled entries ({:.3} per PMI)\n",
                r.pmi_nmis, r.external_nmis, r.both_pending, r.pmi_injected_first, r.cancelled_entries, r.extra_entries_per_pmi()
            ));
        }
        if let Some(n) = self.vcpu_syscalls {
            out.push_str(&format!("  vCPU syscalls: {n} ({:.3} per KVM_RUN)\n", n as f64 / self.entries.max(1) as f64));
        }
        if let Some(ns) = self.first_console_byte_ns {
            out.push_str(&format!("\n  first console byte after {:.3} ms\n", ns as f64 / 1e6));
        }
        if let Some(pmu) = &self.pmu {
            out.push_str(&pmu.render());
        }
        if !self.unclaimed_ports.is_empty() {
            out.push_str("\n  unclaimed ports (reads all-ones, writes dropped):\n");
            for (port, n) in &self.unclaimed_ports {
                out.push_str(&format!("    {port:<8} {n:>10}\n"));
            }
        }
        out
    }
}
