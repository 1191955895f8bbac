//! Native mode (kvm_pvm's VIF mode): the mode decision, its fallbacks, speed as a ratio,
//! and identical results in both modes.

mod common;
use common::*;
use serde_json::Value;

/// `perfvm run --json` with extra arguments: the parsed document.
fn run_json(args: &[&str]) -> Value {
    let mut all = vec!["run", "--json", "--timeout", "300"];
    all.extend_from_slice(args);
    let o = perfvm(&all);
    assert_eq!(code(&o), 0, "{all:?}: {}", stderr(&o));
    serde_json::from_str(&stdout(&o)).expect("JSON document")
}

fn execution(doc: &Value) -> (bool, String) {
    let e = &doc["stats"]["execution"];
    (e["native"].as_bool().expect("native flag"), e["reason"].as_str().unwrap_or("").to_owned())
}

/// A copy of a kit guest without its VIF note.
fn without_note(guest: &str) -> String {
    let elf = format!("{}/../../guest/build/{guest}.elf", env!("CARGO_MANIFEST_DIR"));
    let out = temp_file(&format!("{guest}-nonote.elf"), b"");
    let o = std::process::Command::new("objcopy")
        .args(["--remove-section=.note.perfvm", &elf, &out])
        .output()
        .expect("objcopy (binutils)");
    assert!(o.status.success(), "objcopy: {}", String::from_utf8_lossy(&o.stderr));
    out
}

#[test]
fn kit_guests_run_natively_by_default() {
    require_native!();
    let doc = run_json(&["hello"]);
    let (native, reason) = execution(&doc);
    assert!(native, "auto with the kit's note: {reason}");
    assert_eq!(doc["stats"]["vcpus"][0]["mode"], "native");
    // KVM's own statistics show the emulator stayed (almost) idle.
    let emulated = doc["stats"]["vcpus"][0]["kvm"]["insn_emulation"].as_u64().unwrap_or(0);
    assert!(emulated < 10_000, "{emulated} instructions emulated");
}

#[test]
fn a_guest_without_the_note_runs_emulated_on_auto_and_natively_on_on() {
    require_native!();
    let plain = without_note("hello");
    let auto = run_json(&[&plain]);
    let (native, reason) = execution(&auto);
    assert!(!native);
    assert!(reason.contains("no perfvm VIF note"), "{reason}");
    let on = run_json(&["--native", "on", &plain]);
    assert!(execution(&on).0);
    assert_eq!(auto["console"], on["console"], "same output in both modes");
}

#[test]
fn probe_failure_falls_back_on_auto_and_fails_on_on() {
    require_kvm!();
    let run = |mode: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_perfvm"))
            .args(["run", "--json", "--native", mode, "hello"])
            .env(vmm::host::pvm::native::PROBE_ENV, "fail")
            .output()
            .expect("perfvm")
    };
    let auto = run("auto");
    assert_eq!(code(&auto), 0, "{}", stderr(&auto));
    let doc: Value = serde_json::from_str(&stdout(&auto)).unwrap();
    let (native, reason) = execution(&doc);
    assert!(!native);
    assert!(reason.contains("made to fail"), "{reason}");
    assert_usage_error(&run("on"), "--native on: the native-mode probe was made to fail");
}

#[test]
fn multiboot_guests_cannot_be_forced_native() {
    require_kvm!();
    assert_usage_error(&perfvm(&["run", "--native", "on", "mbtest"]), "needs a 64-bit ELF guest");
    let doc = run_json(&["mbtest"]);
    assert_eq!(execution(&doc), (false, "32-bit multiboot entry".to_owned()));
}

/// Instructions per nanosecond inside KVM_RUN for `ftest units` in `mode`. ftest's work is
/// proportional to its units (4500 loop iterations each).
fn ftest_rate(mode: &str, units: u32) -> f64 {
    let doc = run_json(&["--native", mode, "--pmu", "off", "--cmdline", &units.to_string(), "ftest"]);
    assert_eq!(execution(&doc).0, mode == "on");
    f64::from(units) / doc["stats"]["run_ns"].as_f64().expect("run_ns")
}

#[test]
fn native_runs_at_least_100x_faster_than_emulated() {
    require_native!();
    // Time inside KVM_RUN on both sides, so a busy host slows both alike.
    let (emulated, native) = (ftest_rate("off", 1), ftest_rate("on", 200));
    let ratio = native / emulated;
    assert!(ratio >= 100.0, "native/emulated = {ratio:.0}x");
}

/// Exact instructions and branches of `ftest 1` in `mode`, as `stat --json` reports them.
fn exact_counts(mode: &str) -> Vec<u64> {
    let o = perfvm(&[
        "stat",
        "--json",
        "--native",
        mode,
        "--backend",
        "exact",
        // Counts as stepping does (tests/exact_engines.rs), in a third of the time.
        "--exact-engine",
        "blocks",
        "-e",
        "instructions,branches",
        "ftest",
        "1",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let counts: Vec<u64> =
        doc["counts"].as_array().expect("counts").iter().filter_map(|c| c["value"].as_u64()).collect();
    assert_eq!(counts.len(), 2, "{doc}");
    counts
}

#[test]
fn exact_counts_are_identical_in_both_modes() {
    require_native!();
    let emulated = exact_counts("off");
    assert_eq!(exact_counts("on"), emulated);
    assert_eq!(exact_counts("on"), emulated, "and run after run");
}
