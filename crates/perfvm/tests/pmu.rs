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
        assert!(out.contains("PASS: gp: PMC0 instructions = 2005 (expect 2005)"), "{out}");
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
    // Every count but ref-cycles, which follow the TSC.
    let counts = |s: &String| {
        s.lines().filter(|l| l.contains(" = ") && !l.contains("ref-cycles")).map(str::to_owned).collect::<Vec<_>>()
    };
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
    // Every PMU MSR exit is accounted to an operation (PMIs and their NMIs are no exits).
    let ops: u64 = pmu["vmm"]["ops"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| !["pmi-delivery", "kvm-nmi"].contains(&k.as_str()))
        .map(|(_, v)| v["count"].as_u64().unwrap())
        .sum();
    assert_eq!(ops, pmu["vmm"]["msr_exits"].as_u64().unwrap());
    // A PMI by NMI is accounted with its KVM_NMI, which is timed on its own too.
    let nmis = pmu["vmm"]["ops"]["kvm-nmi"]["count"].as_u64().unwrap();
    assert!(nmis >= 1 && pmu["vmm"]["ops"]["pmi-delivery"]["count"].as_u64().unwrap() >= 1, "{pmu}");
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

/// A guest that knows nothing of perfvm (no kit, no VIF note, raw machine code) programs
/// PMC0 for instructions, counts `5 nop; mfence; lfence; sfence; 3 mov/xor; wrmsr` and
/// exits with the count through the debug-exit port: the exact backend says 12 (the
/// disabling WRMSR counts, the enabling one does not; each fence retires once), natively
/// (`--native on`) and emulated.
#[test]
fn a_foreign_guest_counts_exactly_twelve_instructions() {
    require_kvm!();
    let wrmsr = |ecx: u32, eax: u32| [&[0xb9][..], &ecx.to_le_bytes(), &[0xb8], &eax.to_le_bytes(), &[0x31, 0xd2, 0x0f, 0x30]].concat();
    let program = [
        wrmsr(0x38f, 0),           // GLOBAL_CTRL := 0 (its reset value enables the GP counters)
        wrmsr(0x186, 0x0042_00c0), // PERFEVTSEL0: instructions retired, OS, EN
        wrmsr(0xc1, 0),            // PMC0 := 0
        wrmsr(0x38f, 1),           // GLOBAL_CTRL: PMC0 counts from the next instruction
        vec![0x90; 5],             // 5 x nop
        vec![0x0f, 0xae, 0xf0, 0x0f, 0xae, 0xe8, 0x0f, 0xae, 0xf8], // mfence, lfence, sfence
        vec![0xb9, 0x8f, 0x03, 0, 0, 0x31, 0xc0, 0x31, 0xd2, 0x0f, 0x30], // GLOBAL_CTRL := 0
        vec![0xb9, 0xc1, 0, 0, 0, 0x0f, 0x32], // rdmsr PMC0
        vec![0xe6, 0xf4, 0xf4],    // out %al, $0xf4 (exit status (al << 1) | 1); hlt
    ]
    .concat();
    let path = temp_file("foreign-count.elf", &vmm::loader::synthetic::elf64_code(&program));
    for mode in modes("a_foreign_guest_counts_exactly_twelve_instructions") {
        let o = perfvm(&["run", &path, "--backend", "exact", "--native", mode, "--timeout", "60"]);
        assert_eq!(code(&o), (12 << 1) | 1, "--native {mode}: {}", stderr(&o));
    }
}

/// `--cpu-vendor amd`: an AMD identity whatever the host, and, with no AMD vPMU yet, no PMU
/// at all (leaf 0xA zero, the PMU MSRs not routed), said in `--stats`.
#[test]
fn an_amd_identity_has_no_pmu_yet() {
    require_kvm!();
    let o = perfvm(&["run", "pmu_arch", "--cpu-vendor", "amd", "--json", "--timeout", "120"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(doc["console"].as_str().unwrap().contains("SKIP: no architectural PMU (CPUID.0AH version 0)"), "{doc}");
    let cpu = &doc["stats"]["cpu"];
    assert_eq!(cpu["vendor"], "AuthenticAMD");
    assert!(cpu["pmu"].as_str().unwrap().starts_with("none"), "{cpu}");
    let intel = perfvm(&["run", "hello", "--stats"]);
    assert!(stderr(&intel).contains("cpu: GenuineIntel, PMU: Intel architectural perfmon v2"), "{}", stderr(&intel));
}
