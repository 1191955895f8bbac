//! Run statistics: VM exits by reason with counts and VMM handling time. Beside them, KVM's
//! own per-vCPU statistics (`kvm`) and the vCPU thread's syscalls counted by the host
//! (`syscount`).

pub mod kvm;
pub mod syscount;

use serde::Serialize;
use std::collections::BTreeMap;

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
    pub requests: crate::vstate::requests::RequestStats,
    /// Syscalls the vCPU thread made (raw_syscalls:sys_enter), when counted.
    pub syscalls: Option<u64>,
    /// How the vCPU executed: "native" or "emulated".
    pub mode: &'static str,
    /// KVM's own non-zero statistics of this vCPU at the end (binary stats fd).
    pub kvm: BTreeMap<String, u64>,
    /// Exits while the guest agent's workload ran (between its START and END marks), by reason.
    pub workload_exits: BTreeMap<&'static str, u64>,
    /// What the VMM completed for the guest, by kind: instructions the host's emulator
    /// rejected (`complete`), SYSCALLs and RDPMCs it ran, exception entries while stepping.
    pub completed: BTreeMap<&'static str, u64>,
}

/// Exits by reason as the vCPU loop counts them, put in [`VcpuStats`] at the end of the run.
/// The reasons are static strings, found here by address first: a map would compare their
/// bytes at every exit, on caches the guest left cold.
#[derive(Debug, Default)]
pub(crate) struct ExitTally(Vec<(&'static str, ExitCount, u64)>);

impl ExitTally {
    /// Count one exit of `reason` that took `handle_ns` to handle, and whether the guest
    /// agent's workload was running.
    pub(crate) fn record(&mut self, reason: &'static str, handle_ns: u64, in_workload: bool) {
        let at = match self.0.iter().position(|(r, ..)| std::ptr::eq(*r, reason)) {
            Some(i) => i,
            None => self.0.iter().position(|(r, ..)| *r == reason).unwrap_or_else(|| {
                self.0.push((reason, ExitCount::default(), 0));
                self.0.len() - 1
            }),
        };
        let (_, count, workload) = &mut self.0[at];
        count.count += 1;
        count.handle_ns += handle_ns;
        *workload += u64::from(in_workload);
    }

    /// Add the exits to `stats`.
    pub(crate) fn into_stats(self, stats: &mut VcpuStats) {
        for (reason, c, workload) in self.0 {
            let e = stats.exits.entry(reason).or_default();
            e.count += c.count;
            e.handle_ns += c.handle_ns;
            if workload > 0 {
                *stats.workload_exits.entry(reason).or_default() += workload;
            }
        }
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
    pub requests: crate::vstate::requests::RequestStats,
    /// Syscalls of the vCPU threads (raw_syscalls:sys_enter), when counted.
    pub vcpu_syscalls: Option<u64>,
    /// Accesses to ports no device claims, by port (hex string for JSON keys).
    pub unclaimed_ports: BTreeMap<String, u64>,
    /// Console bytes not kept because the capture buffer was full.
    pub console_bytes_dropped: u64,
    /// The virtual PMU's report, when the VM has one.
    pub pmu: Option<crate::vpmu::report::PmuReport>,
    /// How the vCPUs executed and why.
    pub execution: Option<crate::host::pvm::native::Execution>,
    /// The CPU identity the guest saw.
    pub cpu: Option<crate::arch::x86_64::identity::CpuReport>,
    /// Per vCPU: its mode, exits, and KVM's own statistics.
    pub vcpus: Vec<VcpuStats>,
    /// What the VMM completed for the guest, by kind, all vCPUs.
    pub completed: BTreeMap<&'static str, u64>,
    /// A Linux guest's whole kernel command line.
    pub kernel_cmdline: Option<String>,
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
        for (kind, n) in &v.completed {
            *self.completed.entry(kind).or_default() += n;
        }
        self.vcpus.push(v.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tally_counts_as_a_map_by_reason_would() {
        let mut tally = ExitTally::default();
        // The same label from another place may be another copy of the string.
        let copy: &'static str = String::from("msr-write").leak();
        tally.record("msr-write", 10, false);
        tally.record("hlt", 5, true);
        tally.record(copy, 20, true);
        tally.record("msr-write", 1, false);
        let mut stats = VcpuStats::default();
        tally.into_stats(&mut stats);
        let counts: Vec<_> = stats.exits.iter().map(|(r, c)| (*r, c.count, c.handle_ns)).collect();
        assert_eq!(counts, [("hlt", 1, 5), ("msr-write", 3, 31)]);
        assert_eq!(stats.workload_exits.into_iter().collect::<Vec<_>>(), [("hlt", 1), ("msr-write", 1)]);
    }
}
