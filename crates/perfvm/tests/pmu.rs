//! The virtual PMU end to end: the guest conformance suite under every backend and policy,
//! telemetry, and the PMU-off configuration.

mod common;
use common::*;

/// Run pmu_arch in each execution mode and return its consoles, asserting the suite's last
/// line says no failures (`--stats` on stderr). The guest learns its backend from the VMM's
/// CPUID leaf: no `--cmdline`.
fn pmu_arch(backend: &str, policy: &str) -> Vec<String> {
    pmu_arch_stats(backend, policy).into_iter().map(|(out, _)| out).collect()
}

/// `pmu_arch`, with each run's `--stats` (stderr) beside its console.
fn pmu_arch_stats(backend: &str, policy: &str) -> Vec<(String, String)> {
    let mut outs = Vec::new();
    for mode in modes(&format!("pmu_arch {backend}/{policy}")) {
        let args = ["run", "pmu_arch", "--backend", backend, "--policy", policy, "--native", mode, "--stats"];
        let o = perfvm(&[&args[..], &["--timeout", "300"]].concat());
        let out = stdout(&o);
        let what = format!("pmu_arch {backend}/{policy}, --native {mode}");
        assert_eq!(code(&o), 0, "{what}:\n{out}\n{}", stderr(&o));
        let last = out.trim_end().lines().last().unwrap_or("");
        assert!(last.contains(" passed, 0 failed"), "{what}: {last}\n{out}");
        assert!(!out.contains("FAIL:"), "{what}: {out}");
        outs.push((out, stderr(&o)));
    }
    outs
}

#[test]
fn conformance_perf_backend_reuse() {
    require_kvm!();
    for (emulated, out) in pmu_arch("perf", "reuse").iter().enumerate().map(|(i, out)| (i == 0, out)) {
        assert!(out.contains("pmu_arch: ranged counts"), "{out}");
        // The VMM runs an emulated guest's RDPMC on the vPMU, every form; natively KVM #GPs it.
        if emulated {
            assert!(out.contains("PASS: rdpmc: RDPMC 0 after disable = 0x12345 (RDMSR 0x12345)"), "{out}");
            assert!(out.contains("PASS: rdpmc: fast RDPMC 0 returns the low 32 bits"), "{out}");
        } else {
            assert!(out.contains("PASS: rdpmc: RDPMC 0 #GPs natively outside exact mode"), "{out}");
        }
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
    for (out, stats) in pmu_arch_stats("exact", "reuse") {
        assert!(out.contains("pmu_arch: exact counts"), "{out}");
        // The #GPs of RDPMC and the kinds' #UD stop the step at their handlers' entries.
        assert!(stats.contains("exception-entry 3"), "{stats}");
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

/// Run pmu_amd under `--cpu-vendor amd` (plus `extra` flags) in each execution mode and
/// return its consoles, asserting the suite's last line says no failures. Where the VMM departs
/// from AMD hardware the guest says `SKIP: ...VMM DISAGREES...` instead of failing.
fn pmu_amd(backend: &str, policy: &str, extra: &[&str]) -> Vec<String> {
    let mut outs = Vec::new();
    for mode in modes(&format!("pmu_amd {backend}/{policy} {extra:?}")) {
        let args =
            ["run", "pmu_amd", "--cpu-vendor", "amd", "--backend", backend, "--policy", policy, "--native", mode];
        let o = perfvm(&[&args[..], extra, &["--timeout", "300"]].concat());
        let out = stdout(&o);
        let what = format!("pmu_amd {backend}/{policy} {extra:?}, --native {mode}");
        assert_eq!(code(&o), 0, "{what}:\n{out}\n{}", stderr(&o));
        let last = out.trim_end().lines().last().unwrap_or("");
        assert!(last.contains(" passed, 0 failed"), "{what}: {last}\n{out}");
        assert!(!out.contains("FAIL:"), "{what}: {out}");
        assert!(out.contains("PASS: identity: vendor AuthenticAMD"), "{what}: {out}");
        assert!(out.contains("PASS: identity: PerfMonV2 (CPUID 0x80000022 EAX[0])"), "{what}: {out}");
        assert!(out.contains("PASS: identity: no Intel perfmon leaf (CPUID 0xA = 0 0 0 0)"), "{what}: {out}");
        assert!(out.contains("PASS: legacy: PERF_CTR0-"), "{what}: {out}");
        assert!(out.contains("PASS: gating: EN set, GLOBAL_CTL clear: no count"), "{what}: {out}");
        assert!(
            out.contains("PASS: reserved: PERF_CTL0 with HostOnly (41): accepted, bit(s) dropped"),
            "{what}: {out}"
        );
        assert!(out.contains("PASS: reserved: GLOBAL_STATUS write of 0: accepted and ignored"), "{what}: {out}");
        assert!(out.contains("PASS: #GP: PERF_CTL6/PERF_CTR6"), "{what}: {out}");
        assert!(out.contains("PASS: overflow-nmi: one PMI delivered (1;"), "{what}: {out}");
        assert!(out.contains("PASS: overflow-nmi: STATUS_CLR clears it"), "{what}: {out}");
        assert!(out.contains("PASS: overflow-vector: one PMI delivered (1;"), "{what}: {out}");
        assert!(out.contains("PASS: overflow-vector: STATUS_SET sets it again"), "{what}: {out}");
        outs.push(out);
    }
    outs
}

#[test]
fn amd_conformance_perf_backend_reuse() {
    require_kvm!();
    // The first console is emulated, the second (where the host has it) native.
    for (emulated, out) in pmu_amd("perf", "reuse", &[]).iter().enumerate().map(|(i, out)| (i == 0, out)) {
        assert!(out.contains("pmu_amd: ranged counts, 4 counters"), "{out}");
        assert!(out.contains("PASS: identity: CPUID 0x80000022 EBX[3:0] = 4 core counters"), "{out}");
        // RDPMC is KVM's here and #GPs, unless the VMM traps it (emulated guests with
        // symbols); bad indexes #GP either way.
        if emulated {
            assert!(out.contains("PASS: rdpmc: RDPMC 0 of a running counter = 0x12345"), "{out}");
            assert!(out.contains("PASS: rdpmc: RDPMC 1..3 read all 48 bits of each counter"), "{out}");
        } else {
            assert!(out.contains("PASS: rdpmc: RDPMC 0 #GPs natively outside exact mode"), "{out}");
        }
        assert!(out.contains("PASS: rdpmc: RDPMC 4 (no such counter) #GPs"), "{out}");
        assert!(out.contains("PASS: overflow-vector: GLOBAL_STATUS = 0x8 in the handler (bit 3)"), "{out}");
    }
}

#[test]
fn amd_conformance_exact_backend_reuse() {
    require_kvm!();
    for out in pmu_amd("exact", "reuse", &[]) {
        assert!(out.contains("pmu_amd: exact counts, 4 counters"), "{out}");
        assert!(out.contains("PASS: gp: PMC0 instructions = 2005 (expect 2005)"), "{out}");
        assert!(out.contains("PASS: gp: PMC3 instructions = 2005 (expect 2005)"), "{out}");
        assert!(out.contains("PASS: gp: PMC0 branches = 1000 (expect 1000)"), "{out}");
        assert!(out.contains("PASS: gp: PMC0 cycles = 2005 (expect 2005)"), "{out}");
        assert!(out.contains("PASS: gating: EN alone starts and stops PMC3 (another counter programmed): instructions = 2003 (expect 2003)"), "{out}");
        assert!(out.contains("PASS: rdpmc: RDPMC 0 of a running counter = 0x12346 (expect 0x12346)"), "{out}");
        assert!(out.contains("PASS: rdpmc: RDPMC 1..3 read all 48 bits of each counter"), "{out}");
        assert!(out.contains("PASS: pmi-rip: PMI after 8 instructions at jnz"), "{out}");
        // The exact backend counts every event: the only skips are the VMM's known departures.
        for skip in out.lines().filter(|l| l.starts_with("SKIP:")) {
            assert!(skip.contains("VMM DISAGREES"), "exact backend skips nothing else: {skip}\n{out}");
        }
    }
}

/// Other counter counts: 1 (no legacy alias beyond counter 0, no other counter to gate) and
/// PerfCtrExtCore's full six.
#[test]
fn amd_conformance_other_counter_counts() {
    require_kvm!();
    for out in pmu_amd("exact", "reuse", &["--counters", "1"]) {
        assert!(out.contains("PASS: identity: CPUID 0x80000022 EBX[3:0] = 1 core counters"), "{out}");
        assert!(out.contains("PASS: #GP: PERF_CTL1 (0xc0010202) of 1 counters"), "{out}");
    }
    for out in pmu_amd("exact", "reuse", &["--counters", "6"]) {
        assert!(out.contains("PASS: identity: CPUID 0x80000022 EBX[3:0] = 6 core counters"), "{out}");
        assert!(out.contains("PASS: gp: PMC5 instructions = 2005 (expect 2005)"), "{out}");
        assert!(out.contains("PASS: overflow-vector: GLOBAL_STATUS = 0x20 in the handler (bit 5)"), "{out}");
    }
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
    // A PMI by NMI is accounted with its NMI: a KVM_NMI, timed on its own too, or one queued
    // in the entry's synced events (a PMI found at its overflow signal's exit).
    let ioctls = pmu["vmm"]["ops"]["kvm-nmi"]["count"].as_u64().unwrap_or(0);
    let queued = pmu["vmm"]["nmis_in_events"].as_u64().unwrap();
    let delivered = pmu["vmm"]["ops"]["pmi-delivery"]["count"].as_u64().unwrap();
    assert!(ioctls + queued >= 1 && delivered >= 1, "{pmu}");
}

/// The agent's sampling PMIs, each found at the exit its overflow signal caused, take their
/// NMI into the guest with the next KVM_RUN's synced events (no KVM_NMI ioctl), and every
/// one still reaches the agent's handler as a sample (`--pv-samples off`: with them on, the
/// VMM takes the samples and raises no PMI).
#[test]
fn sampling_pmis_enter_with_the_synced_events() {
    require_kvm!();
    let out = std::env::temp_dir().join(format!("perfvm-nmi-events-{}.json", std::process::id()));
    let out = out.to_str().unwrap();
    let o = perfvm(&["record", "--stats", "--pv-samples", "off", "-c", "20000000", "-o", out, "ftest"]);
    let err = stderr(&o);
    assert_eq!(code(&o), 0, "{err}");
    let field = |name: &str| -> u64 {
        let line = err.lines().find(|l| l.trim_start().starts_with(name)).unwrap_or_else(|| panic!("{name} in {err}"));
        line.split_whitespace().last().unwrap().parse().unwrap()
    };
    let (delivered, queued) = (field("PMIs delivered"), field("PMI NMIs in entry"));
    assert!(delivered >= 10, "{err}");
    // Nearly all: a PMI found at another exit (a counter read that saw the wrap) uses the ioctl.
    assert!(queued * 10 >= delivered * 9 && queued <= delivered, "{queued} of {delivered} PMIs: {err}");
    let all = format!("{}{err}", stdout(&o));
    let samples = all.lines().find_map(|l| l.split("agent: samples ").nth(1)).and_then(|r| r.split(' ').next());
    let samples: u64 = samples.and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("agent samples in {all}"));
    assert_eq!(samples, delivered, "every PMI a sample: {err}");
    let _ = std::fs::remove_file(out);
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

/// `mov ecx, msr; mov eax, lo; xor edx, edx; wrmsr`.
fn wrmsr(ecx: u32, eax: u32) -> Vec<u8> {
    [&[0xb9][..], &ecx.to_le_bytes(), &[0xb8], &eax.to_le_bytes(), &[0x31, 0xd2, 0x0f, 0x30]].concat()
}

/// A raw-code guest (no kit, no VIF note) that counts `5 nop; mfence; lfence; sfence; 3
/// mov/xor; wrmsr` on counter 0 of the PMU whose MSRs are given, and exits through the
/// debug-exit port with the count: `prologue`, then `global := 0`, `ctl := instructions,
/// OS, EN`, `ctr := 0`, `global := 1`, the window, `rdmsr ctr`, `out %al, $0xf4; hlt`.
fn counting_guest(name: &str, prologue: &[u8], global: u32, ctl: u32, ctl_value: u32, ctr: u32) -> String {
    let program = [
        prologue.to_vec(),
        wrmsr(global, 0), // the global enables' reset value enables the GP counters
        wrmsr(ctl, ctl_value),
        wrmsr(ctr, 0),
        wrmsr(global, 1), // counter 0 counts from the next instruction
        vec![0x90; 5],    // 5 x nop
        vec![0x0f, 0xae, 0xf0, 0x0f, 0xae, 0xe8, 0x0f, 0xae, 0xf8], // mfence, lfence, sfence
        [&[0xb9][..], &global.to_le_bytes(), &[0x31, 0xc0, 0x31, 0xd2, 0x0f, 0x30]].concat(), // global := 0
        [&[0xb9][..], &ctr.to_le_bytes(), &[0x0f, 0x32]].concat(), // rdmsr ctr
        vec![0xe6, 0xf4, 0xf4], // out %al, $0xf4 (exit status (al << 1) | 1); hlt
    ]
    .concat();
    temp_file(&format!("{name}.elf"), &vmm::loader::synthetic::elf64_code(&program))
}

/// A guest that knows nothing of perfvm counts exactly 12 on the exact backend (the disabling
/// WRMSR counts, the enabling one does not; each fence retires once), natively
/// (`--native on`) and emulated.
#[test]
fn a_foreign_guest_counts_exactly_twelve_instructions() {
    require_kvm!();
    // Intel: PERFEVTSEL0 = instructions retired (0xC0), OS, EN; PMC0; GLOBAL_CTRL.
    let path = counting_guest("foreign-intel", &[], 0x38f, 0x186, 0x0042_00c0, 0xc1);
    for mode in modes("a_foreign_guest_counts_exactly_twelve_instructions") {
        let o = perfvm(&["run", &path, "--backend", "exact", "--native", mode, "--timeout", "60"]);
        assert_eq!(code(&o), (12 << 1) | 1, "--native {mode}: {}", stderr(&o));
    }
}

/// The same on AMD: a guest that finds PerfMonV2 in CPUID 0x80000022 (or exits with 0x7f)
/// counts retired instructions (0xC0) on PERF_CTL0/PERF_CTR0 (0xC0010200/1) under
/// PerfCntrGlobalCtl (0xC0000301): 12 with `--cpu-vendor amd`. Emulated, where the guest's
/// CPUID is the VMM's (natively the host answers CPUID); natively without the check.
#[test]
fn a_foreign_amd_guest_counts_exactly_twelve_instructions() {
    require_kvm!();
    let cpuid_gate = [
        &[0xb8, 0x22, 0x00, 0x00, 0x80][..], // mov $0x80000022, %eax
        &[0x0f, 0xa2],                       // cpuid
        &[0xa8, 0x01],                       // test $1, %al (PerfMonV2)
        &[0x75, 0x05],                       // jnz past the exit
        &[0xb0, 0x7f, 0xe6, 0xf4, 0xf4],     // mov $0x7f, %al; out %al, $0xf4; hlt
    ]
    .concat();
    let amd = ["--cpu-vendor", "amd", "--backend", "exact", "--timeout", "60"];
    let gated = counting_guest("foreign-amd-gated", &cpuid_gate, 0xc000_0301, 0xc001_0200, 0x0042_00c0, 0xc001_0201);
    let o = perfvm(&[&["run", &gated, "--native", "off"][..], &amd].concat());
    assert_eq!(code(&o), (12 << 1) | 1, "{}", stderr(&o));
    let intel = perfvm(&["run", &gated, "--native", "off", "--backend", "exact", "--timeout", "60"]);
    assert_eq!(code(&intel), (0x7f << 1) | 1, "no PerfMonV2 under the Intel identity");
    if modes("a_foreign_amd_guest_counts_exactly_twelve_instructions").contains(&"on") {
        let plain = counting_guest("foreign-amd", &[], 0xc000_0301, 0xc001_0200, 0x0042_00c0, 0xc001_0201);
        let o = perfvm(&[&["run", &plain, "--native", "on"][..], &amd].concat());
        assert_eq!(code(&o), (12 << 1) | 1, "--native on: {}", stderr(&o));
    }
}

/// The event filter with AMD event codes: denying retired instructions (0xC0) under
/// `vendor = "amd"` leaves the AMD guest's count at 0; allowing them, 12.
#[test]
fn an_amd_event_filter_works_on_amd_event_codes() {
    require_kvm!();
    let guest = counting_guest("filtered-amd", &[], 0xc000_0301, 0xc001_0200, 0x0042_00c0, 0xc001_0201);
    for (action, expect) in [("deny", 0), ("allow", 12)] {
        let body = format!("action = \"{action}\"\nvendor = \"amd\"\nevents = [ {{ event = 0xc0 }} ]\n");
        let filter = temp_file(&format!("amd-{action}.toml"), body.as_bytes());
        let args = ["--cpu-vendor", "amd", "--backend", "exact", "--native", "off", "--timeout", "60"];
        let o = perfvm(&[&["run", &guest, "--pmu-filter", &filter][..], &args].concat());
        assert_eq!(code(&o), (expect << 1) | 1, "{action}: {}", stderr(&o));
    }
}

/// `--cpu-vendor amd`: an AMD identity whatever the host, with the AMD vPMU: no Intel
/// leaf 0xA (the Intel conformance suite finds no PMU), said in `--stats`.
#[test]
fn an_amd_identity_has_the_amd_pmu() {
    require_kvm!();
    let o = perfvm(&["run", "pmu_arch", "--cpu-vendor", "amd", "--json", "--timeout", "120"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(doc["console"].as_str().unwrap().contains("SKIP: no architectural PMU (CPUID.0AH version 0)"), "{doc}");
    let cpu = &doc["stats"]["cpu"];
    assert_eq!(cpu["vendor"], "AuthenticAMD");
    assert_eq!(cpu["pmu"], "AMD PerfMonV2, 4 core counters", "{cpu}");
    let intel = perfvm(&["run", "hello", "--stats"]);
    assert!(stderr(&intel).contains("cpu: GenuineIntel, PMU: Intel architectural perfmon v2"), "{}", stderr(&intel));
}
