//! `--stats` as text: the VM's and the vPMU's statistics in the tables perf users read.

use vmm::stats::VmStats;
use vmm::vpmu::report::PmuReport;

/// KVM statistics `--stats` shows per vCPU (all are in `--json`).
const KVM_STATS_SHOWN: [&str; 6] =
    ["exits", "insn_emulation", "nmi_injections", "irq_injections", "halt_exits", "pf_taken"];

/// The VM statistics as `--stats` prints them.
pub fn vm_stats(s: &VmStats) -> String {
    let mut out = String::new();
    let secs = s.wall_ns as f64 / 1e9;
    out.push_str(&format!(
        "\n VM statistics ({:.6} s wall, {:.6} s in KVM_RUN, {} entries)\n\n",
        secs,
        s.run_ns as f64 / 1e9,
        s.entries
    ));
    if let Some(c) = &s.cpu {
        out.push_str(&format!("  cpu: {}, PMU: {}\n", c.vendor, c.pmu));
    }
    if let Some(line) = &s.kernel_cmdline {
        out.push_str(&format!("  kernel command line: {line}\n"));
    }
    if !s.completed.is_empty() {
        let kinds: Vec<String> = s.completed.iter().map(|(k, n)| format!("{k} {n}")).collect();
        out.push_str(&format!("  completed by the VMM: {}\n", kinds.join(", ")));
    }
    if let Some(e) = &s.execution {
        out.push_str(&format!("  execution: {} ({})\n", e.name(), e.reason));
        for (i, v) in s.vcpus.iter().enumerate() {
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
    for (reason, c) in &s.exits {
        let avg = c.handle_ns.checked_div(c.count).unwrap_or(0);
        out.push_str(&format!(
            "  {:<16} {:>12} {:>11.3} ms {:>9} ns\n",
            reason,
            c.count,
            c.handle_ns as f64 / 1e6,
            avg
        ));
    }
    out.push_str(&format!("  {:<16} {:>12}\n", "total", s.total_exits));
    let r = &s.requests;
    if r.pmi_nmis + r.external_nmis + r.cancelled_entries > 0 {
        out.push_str(&format!(
            "\n  NMIs: {} from PMIs, {} external, {} passes with both (PMI first in {}), {} cancelled entries ({:.3} per PMI)\n",
            r.pmi_nmis, r.external_nmis, r.both_pending, r.pmi_injected_first, r.cancelled_entries, r.extra_entries_per_pmi()
        ));
    }
    if let Some(n) = s.vcpu_syscalls {
        out.push_str(&format!("  vCPU syscalls: {n} ({:.3} per KVM_RUN)\n", n as f64 / s.entries.max(1) as f64));
    }
    if let Some(ns) = s.first_console_byte_ns {
        out.push_str(&format!("\n  first console byte after {:.3} ms\n", ns as f64 / 1e6));
    }
    if let Some(pmu) = &s.pmu {
        out.push_str(&pmu_report(pmu));
    }
    if !s.unclaimed_ports.is_empty() {
        out.push_str("\n  unclaimed ports (reads all-ones, writes dropped):\n");
        for (port, n) in &s.unclaimed_ports {
            out.push_str(&format!("    {port:<8} {n:>10}\n"));
        }
    }
    out
}

/// The vPMU part of `--stats`.
fn pmu_report(r: &PmuReport) -> String {
    let m = &r.model;
    let mut out = format!(
        "\n vPMU: {:?} backend — {}\n       policy {}, {} GP + {} fixed counters, CPUID.0AH = {:08x} {:08x} {:08x} {:08x}\n\n",
        r.backend, r.backend_detail, r.policy, r.gp_counters, r.fixed_counters,
        r.cpuid_0xa[0], r.cpuid_0xa[1], r.cpuid_0xa[2], r.cpuid_0xa[3]
    );
    let rows: [(&str, u64); 15] = [
        ("counter events opened", m.events_created),
        ("counter events reused", m.events_reused),
        ("lazily released", m.events_lazily_released),
        ("counter events closed", m.events_closed),
        ("host events created", r.host_events_created as u64),
        ("open failures", m.open_failures),
        ("filtered programs", m.filtered_programs),
        ("PMU MSR exits", r.vmm.msr_exits),
        ("overflows", m.overflows),
        ("PMIs delivered", r.vmm.pmis_delivered),
        ("PMIs masked", r.vmm.pmis_masked),
        ("PMI NMIs in entry", r.vmm.nmis_in_events),
        ("PMI ioctls failed", r.vmm.pmi_ioctl_failures),
        ("backend syscalls", r.host_syscalls),
        ("failed perf ioctls", r.host_ioctl_failures),
    ];
    for (name, n) in rows {
        out.push_str(&format!("  {name:<22} {n:>12}\n"));
    }
    out.push_str(&format!("  {:<22} {:>9.3} ms\n", "VMM time in PMU", r.vmm.handle_ns as f64 / 1e6));
    out.push_str(&format!(
        "  {:<22} {:>12} (peak {}, {} refused)\n",
        "host event cap", r.host_events_cap, r.host_events_peak, r.host_events_refused
    ));
    let pv = &r.pv;
    if pv.registrations + pv.refusals > 0 {
        out.push_str(&format!(
            "  {:<22} {} accepted, {} refused, {} doorbells ({} batched writes), {} publishes\n",
            "PV page", pv.registrations, pv.refusals, pv.doorbells, pv.batched_writes, pv.publishes
        ));
    }
    if pv.auto_reloads + pv.unmasked_pmis > 0 {
        out.push_str(&format!(
            "  {:<22} {} reloads at the wrap, {} PMIs as one NMI (no LVTPC ioctls), {} samples taken by the VMM (no PMI)\n",
            "PV sampling", pv.auto_reloads, pv.unmasked_pmis, pv.vmm_samples
        ));
    }
    let n = &r.notifications;
    if n.taken + n.lost > 0 {
        out.push_str(&format!(
            "  {:<22} {} taken, {} lost, {} periods throttled\n",
            "overflow notifications", n.taken, n.lost, n.throttled
        ));
    }
    if let Some(t) = &r.throttle {
        out.push_str(&format!(
            "  {:<22} at most {}% of vCPU time; an exit costs {:.1} us here (measured)\n",
            "PMI throttle",
            t.max_percent,
            t.exit_roundtrip_ns as f64 / 1e3
        ));
    }
    if m.pebs_records + m.pebs_dropped > 0 {
        out.push_str(&format!(
            "  {:<22} {} written, {} dropped, {} buffer PMIs\n",
            "PEBS records", m.pebs_records, m.pebs_dropped, m.pebs_interrupts
        ));
    }
    if r.vmm.steps > 0 {
        out.push_str(&format!("  {:<22} {:>12}\n", "single-steps", r.vmm.steps));
    }
    if r.vmm.blocks > 0 {
        let v = &r.vmm;
        out.push_str(&format!(
            "  {:<22} {:>12} ({} instructions, {} lost, {} not as run ahead)\n",
            "blocks", v.blocks, v.block_insns, v.blocks_lost, v.blocks_mispredicted
        ));
    }
    if !m.msr_writes.is_empty() || !m.msr_reads.is_empty() {
        out.push_str("\n  PMU MSR accesses       reads     writes\n");
        let mut msrs: Vec<u32> = m.msr_reads.keys().chain(m.msr_writes.keys()).copied().collect();
        msrs.sort_unstable();
        msrs.dedup();
        for msr in msrs {
            let r = m.msr_reads.get(&msr).copied().unwrap_or(0);
            let w = m.msr_writes.get(&msr).copied().unwrap_or(0);
            out.push_str(&format!("  {msr:#08x}        {r:>10} {w:>10}\n"));
        }
    }
    out
}
