//! Software PEBS end to end: the guest `pebs` suite with `--pebs` on both backends (exact
//! record contents on the exact backend) and without `--pebs` (PEBS advertised nowhere,
//! its MSRs #GP), plus the PEBS line of `--stats`.

mod common;
use common::*;

/// Run the pebs guest in each execution mode and return its consoles, asserting the suite's
/// last line says no failures.
fn pebs_guest(args: &[&str]) -> Vec<String> {
    modes(&format!("pebs {args:?}"))
        .into_iter()
        .map(|mode| {
            let all = [&["run", "pebs", "--timeout", "300", "--native", mode][..], args].concat();
            let o = perfvm(&all);
            let out = stdout(&o);
            assert_eq!(code(&o), 0, "pebs {args:?} --native {mode}:\n{out}\n{}", stderr(&o));
            let last = out.trim_end().lines().last().unwrap_or("");
            assert!(last.contains(" passed, 0 failed"), "{args:?} --native {mode}: {last}\n{out}");
            assert!(!out.contains("FAIL:"), "{out}");
            out
        })
        .collect()
}

#[test]
fn exact_backend_records_are_exact() {
    require_kvm!();
    for out in pebs_guest(&["--pebs", "--backend", "exact"]) {
        assert!(out.contains("pebs: PEBS available"), "{out}");
        for line in [
            "PASS: caps: PEBS record format 1",
            "PASS: caps: MISC_ENABLE = 0x880",
            "PASS: msr: PEBS_ENABLE bit 4 (no such counter): #GP",
            "PASS: msr: DS_AREA: non-canonical #GP",
            "PASS: gating: PEBS bit, GLOBAL_CTRL set, EN clear: no record (0)",
            "PASS: gating: PEBS bit, EN set, GLOBAL_CTRL clear: no record (0)",
            "PASS: exact-records: 6 records, index advanced by 6 x 176 bytes",
            "PASS: exact-records: every record's RIP is the instruction after the triggering one",
            "PASS: exact-records: every record's RSI, RAX, RCX, RDX and RFLAGS are the registers",
            "PASS: exact-records: PMC0 reloaded from the reset value, plus the disabling WRMSR (0xfffffffffffb)",
            "PASS: exact-records: PMC0 from -10: first record after 11, then every 7 (5 records)",
            "PASS: records: the buffer filled (4 of 4)",
            "PASS: threshold-pmi: one PMI (1)",
            "PASS: threshold-pmi: GLOBAL_STATUS.OvfBuffer set in the handler",
            "PASS: threshold-pmi: the PMI lands where the threshold record was taken",
        ] {
            assert!(out.contains(line), "missing {line:?}:\n{out}");
        }
    }
}

#[test]
fn exact_records_are_deterministic() {
    require_kvm!();
    let args = ["--pebs", "--backend", "exact"];
    let pass = |s: &str| s.lines().filter(|l| l.starts_with("PASS:")).map(str::to_owned).collect::<Vec<_>>();
    // Per mode: natively the guest reads the VMM's CPUID table, which keeps CPUID.1:EDX.DS
    // (the emulated path's KVM clears it), so one capability line differs between modes.
    for (a, b) in pebs_guest(&args).iter().zip(&pebs_guest(&args)) {
        assert_eq!(pass(a), pass(b), "run after run");
    }
}

#[test]
fn perf_backend_records_in_range() {
    require_kvm!();
    for out in pebs_guest(&["--pebs", "--backend", "perf"]) {
        assert!(out.contains("pebs: PEBS available"), "{out}");
        assert!(out.contains("PASS: records: every record's RIP lies in the loop"), "{out}");
        assert!(out.contains("PASS: threshold-pmi: one PMI (1)"), "{out}");
        assert!(out.contains("SKIP: exact-records: exact record contents need the exact backend"), "{out}");
    }
}

#[test]
fn without_pebs_nothing_is_advertised() {
    require_kvm!();
    for backend in ["exact", "perf"] {
        for out in pebs_guest(&["--backend", backend]) {
            assert!(out.contains("pebs: PEBS not available"), "{backend}: {out}");
            for line in [
                "PASS: caps: CPUID.1:EDX.DS clear",
                "PASS: caps: PERF_CAPABILITIES advertises no PEBS (0x2000)",
                "PASS: caps: MISC_ENABLE says PEBS unavailable (0x1880)",
                "PASS: caps: PEBS_ENABLE read: #GP",
                "PASS: caps: PEBS_ENABLE write: #GP",
                "PASS: caps: DS_AREA read: #GP",
                "PASS: caps: DS_AREA write: #GP",
            ] {
                assert!(out.contains(line), "{backend}: missing {line:?}:\n{out}");
            }
            assert!(out.trim_end().ends_with("8 passed, 0 failed"), "{backend}: {out}");
        }
    }
}

#[test]
fn stats_count_pebs_records() {
    require_kvm!();
    let o = perfvm(&["run", "pebs", "--pebs", "--backend", "exact", "--stats", "--timeout", "300"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    let line = err
        .lines()
        .find(|l| l.trim_start().starts_with("PEBS records"))
        .unwrap_or_else(|| panic!("no PEBS line: {err}"));
    assert!(line.contains("written") && line.contains("dropped") && line.contains("buffer PMIs"), "{line}");
    let o = perfvm(&["run", "pebs", "--pebs", "--backend", "exact", "--json", "--timeout", "300"]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let model = &doc["stats"]["pmu"]["model"];
    let n = |k: &str| model[k].as_u64().unwrap_or_else(|| panic!("no {k}: {model}"));
    // The suite fills a 4-record buffer (drops after it) and crosses one threshold.
    assert!(n("pebs_records") > 0 && n("pebs_dropped") > 0 && n("pebs_interrupts") > 0, "{model}");
    assert!(n("pmis_requested") >= n("pebs_interrupts"), "{model}");
}

#[test]
fn pebs_needs_the_pmu() {
    let o = perfvm(&["run", "pebs", "--pebs", "--pmu", "off"]);
    assert_usage_error(&o, "--pebs needs the virtual PMU");
}
