//! Transitions: PMI before NMI (seed 002) and zero PMU cost on VM entry/exit while the guest
//! does not use the PMU (seed 001).

mod common;
use common::*;

fn stats_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.push("--json");
    let o = perfvm(&all);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    serde_json::from_slice(&o.stdout).expect("JSON")
}

#[test]
fn pmi_and_nmi_due_together_pmi_first_no_extra_entry() {
    require_kvm!();
    let doc = stats_json(&["nmiorder", "--backend", "exact", "--request-order", "pmi-first"]);
    assert!(doc["console"].as_str().unwrap().contains("3 passed, 0 failed"), "{}", doc["console"]);
    let r = &doc["stats"]["requests"];
    assert_eq!(r["both_pending"], 1, "{r}");
    assert_eq!(r["pmi_injected_first"], 1, "{r}");
    assert_eq!(r["cancelled_entries"], 0, "{r}");
}

#[test]
fn legacy_order_cancels_an_entry_per_late_pmi() {
    require_kvm!();
    let doc = stats_json(&["nmiorder", "--backend", "exact", "--request-order", "legacy"]);
    assert!(doc["console"].as_str().unwrap().contains("3 passed, 0 failed"), "{}", doc["console"]);
    let r = &doc["stats"]["requests"];
    assert_eq!(r["pmi_injected_first"], 0, "{r}");
    assert_eq!(r["cancelled_entries"], r["pmi_nmis"], "{r}");
    assert!(r["cancelled_entries"].as_u64().unwrap() >= 1, "{r}");
}

#[test]
fn idle_pmu_costs_no_syscall_per_exit() {
    require_kvm!();
    if let Some(reason) = vmm::stats::syscount::unavailable_reason() {
        common::skip("idle_pmu_costs_no_syscall_per_exit", &reason);
        return;
    }
    let off = stats_json(&["portio", "--pmu", "off"]);
    let on = stats_json(&["portio", "--pmu", "on"]);
    let per_run =
        |d: &serde_json::Value| d["stats"]["vcpu_syscalls"].as_f64().unwrap() / d["stats"]["entries"].as_f64().unwrap();
    let (a, b) = (per_run(&off), per_run(&on));
    assert!(off["stats"]["entries"].as_u64().unwrap() > 2000);
    assert!((a - b).abs() < 0.002, "syscalls per KVM_RUN: pmu off {a:.4}, pmu on (idle) {b:.4}");
    assert_eq!(on["stats"]["pmu"]["host_syscalls"], 0, "no PMU syscall at all while idle");
}

#[test]
fn pv_page_negotiates_batches_and_reads_without_exits() {
    require_kvm!();
    for mode in modes("pvtest") {
        // The exact backend's counters need an exit to read: its stamp checks are one
        // (no stamp) instead of four.
        for (backend, checks) in [("perf", 19), ("exact", 16)] {
            let doc = stats_json(&["pvtest", "--backend", backend, "--native", mode]);
            let console = doc["console"].as_str().unwrap();
            let summary = format!("{checks} passed, 0 failed");
            assert!(console.trim_end().ends_with(&summary), "{backend}, --native {mode}: {console}");
            if backend == "perf" {
                assert!(console.contains("PASS: stamps: running and stamped"), "--native {mode}: {console}");
            }
            let pv = &doc["stats"]["pmu"]["pv"];
            assert_eq!(pv["refusals"], 2, "newer guest and bad size refused: {pv}");
            assert!(pv["doorbells"].as_u64().unwrap() >= 2, "{pv}");
        }
    }
}

#[test]
fn batched_programming_of_8_counters_takes_one_exit() {
    require_kvm!();
    let exits = |how: &str, rounds: &str| {
        let doc = stats_json(&["pvtest", "--counters", "8", "--cmdline", &format!("prog {how} {rounds}")]);
        doc["stats"]["total_exits"].as_u64().unwrap()
    };
    // 40 vs 20 rounds: the same console output, so only the programming differs.
    let msr = (exits("msr", "40") - exits("msr", "20")) as f64 / 20.0;
    let pv = (exits("pv", "40") - exits("pv", "20")) as f64 / 20.0;
    assert_eq!(msr, 17.0, "GLOBAL_CTRL + 8 EVENTSELs + 8 counters");
    assert_eq!(pv, 1.0, "one doorbell");
}

/// Regression: a short "remaining" overflow period once stayed armed on the software clock's
/// periodic timer and stormed the vCPU with signals until the RT-signal queue overflowed
/// (the process died of SIGIO). Sampling plus host NMIs must run to completion.
#[test]
fn sampling_with_host_nmis_completes() {
    require_kvm!();
    // ~0.6 s of work in each mode (natively ~5,000 times the instructions).
    for (mode, units) in modes("host NMIs").into_iter().zip(["1", "2000"]) {
        let cmdline = format!("record -e 0x003c -c 1222701 -- {units}");
        // The agent's samples through PMIs (the VMM would take them without one).
        let args = ["ftest", "--nmi-every", "1", "--timeout", "120", "--native", mode, "--pv-samples", "off"];
        let doc = stats_json(&[&args[..], &["--cmdline", &cmdline]].concat());
        assert_eq!(doc["exit_code"], 0);
        let r = &doc["stats"]["requests"];
        assert!(r["pmi_nmis"].as_u64().unwrap() > 100, "--native {mode}: {r}");
        assert!(r["external_nmis"].as_u64().unwrap() > 100, "--native {mode}: {r}");
        assert_eq!(r["pmi_injected_first"], r["both_pending"], "{r}");
        assert_eq!(r["cancelled_entries"], 0, "{r}");
    }
}
