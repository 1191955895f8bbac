//! The virtual PMU end to end: the guest conformance suite under every backend and policy,
//! telemetry, and the PMU-off configuration.

mod common;
use common::*;

/// Run pmu_arch in each execution mode and return its consoles, asserting the suite's last
/// line says no failures.
fn pmu_arch(backend: &str, policy: &str) -> Vec<String> {
    let cmdline = if backend == "exact" { "exact" } else { "" };
    let mut outs = Vec::new();
    for mode in modes(&format!("pmu_arch {backend}/{policy}")) {
        let args = ["run", "pmu_arch", "--backend", backend, "--policy", policy, "--native", mode];
        let o = perfvm(&[&args[..], &["--cmdline", cmdline, "--timeout", "300"]].concat());
        let out = stdout(&o);
        let what = format!("pmu_arch {backend}/{policy}, --native {mode}");
        assert_eq!(code(&o), 0, "{what}:\n{out}\n{}", stderr(&o));
        let last = out.trim_end().lines().last().unwrap_or("");
        assert!(last.contains(" passed, 0 failed"), "{what}: {last}\n{out}");
        assert!(!out.contains("FAIL:"), "{what}: {out}");
        outs.push(out);
    }
    outs
}

#[test]
fn conformance_perf_backend_reuse() {
    require_kvm!();
    for out in pmu_arch("perf", "reuse") {
        // No host PMU here: cycles only; the rest is skipped with a reason, never faked.
        assert!(out.contains("PASS: overflow-nmi: one PMI delivered"), "{out}");
    }
}

#[test]
fn conformance_perf_backend_legacy() {
    require_kvm!();
    pmu_arch("perf", "legacy");
}

#[test]
fn conformance_exact_backend_reuse() {
    require_kvm!();
    for out in pmu_arch("exact", "reuse") {
        assert!(out.contains("PASS: gp: PMC0 instructions = 2004 (expect 2004)"), "{out}");
        assert!(out.contains("PASS: gp: PMC0 branches = 1000 (expect 1000)"), "{out}");
        assert!(out.contains("PASS: pmi-rip: PMI after 8 instructions at jnz"), "{out}");
        assert!(!out.contains("SKIP:"), "exact backend skips nothing: {out}");
    }
}

#[test]
fn conformance_exact_backend_legacy() {
    require_kvm!();
    pmu_arch("exact", "legacy");
}

/// Run after run and mode after mode, the exact backend reports the same counts.
#[test]
fn exact_counts_are_deterministic() {
    require_kvm!();
    let counts = |s: &String| s.lines().filter(|l| l.contains(" = ")).map(str::to_owned).collect::<Vec<_>>();
    let runs: Vec<_> = [pmu_arch("exact", "reuse"), pmu_arch("exact", "reuse")].concat();
    for other in &runs[1..] {
        assert_eq!(counts(&runs[0]), counts(other));
    }
}

#[test]
fn stats_report_vpmu_telemetry() {
    require_kvm!();
    let o = perfvm(&["run", "pmu_arch", "--json", "--policy", "reuse", "--timeout", "300"]);
    assert_eq!(code(&o), 0);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let pmu = &doc["stats"]["pmu"];
    assert_eq!(pmu["backend"], "perf");
    assert!(
        pmu["backend_detail"].as_str().unwrap().contains("task-clock")
            || pmu["backend_detail"].as_str().unwrap().contains("hardware")
    );
    assert!(pmu["model"]["events_created"].as_u64().unwrap() > 0);
    assert!(pmu["vmm"]["msr_exits"].as_u64().unwrap() > 100);
    assert!(pmu["vmm"]["pmis_delivered"].as_u64().unwrap() >= 2);
    assert!(pmu["host_syscalls"].as_u64().unwrap() > 0);
    // Every PMU MSR exit is accounted to an operation.
    let ops: u64 = pmu["vmm"]["ops"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "pmi-delivery")
        .map(|(_, v)| v["count"].as_u64().unwrap())
        .sum();
    assert_eq!(ops, pmu["vmm"]["msr_exits"].as_u64().unwrap());
}

#[test]
fn pmu_off_means_no_pmu() {
    require_kvm!();
    let o = perfvm(&["run", "pmu_arch", "--pmu", "off"]);
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "{out}");
    assert!(out.contains("SKIP: no architectural PMU (CPUID.0AH version 0)"), "{out}");
}

#[test]
fn pmu_flags_are_validated() {
    assert_usage_error(&perfvm(&["run", "hello", "--counters", "9"]), "--counters must be between 1 and 8");
    assert_usage_error(&perfvm(&["run", "hello", "--backend", "magic"]), "invalid value 'magic'");
}
