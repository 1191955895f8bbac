//! The CLI's perf habits: one-line errors that say what is wrong, report on record files
//! (event count, compare, flamegraphs, an empty profile), record checking its output first,
//! `perfvm list` (bench's flags: crates/bench/tests).

mod common;
use common::*;

/// A record file with these (symbol, samples) of `symbol_elf`'s functions, sampled every
/// `period` cycles.
fn flat_file(name: &str, rows: &[(&str, u64)], period: u64) -> String {
    let at = |symbol: &str| match symbol {
        "qux" => 0x110,
        "foo" => 0x210,
        _ => 0x310,
    };
    let samples: Vec<(u64, &[u64], u64)> =
        rows.iter().flat_map(|&(symbol, n)| std::iter::repeat_n((at(symbol), &[][..], period), n as usize)).collect();
    record_file(name, &symbol_elf(), &samples)
}

#[test]
fn clap_errors_name_the_flag_and_why() {
    assert_usage_error(&perfvm(&["stat"]), "the following required arguments were not provided: <GUEST>");
    assert_usage_error(
        &perfvm(&["run", "hello", "--backend", "foo"]),
        "invalid value 'foo' for '--backend <BACKEND>' [possible values: perf, exact]",
    );
    let o = perfvm(&["run", "hello", "--bakend", "exact"]);
    assert_usage_error(&o, "unexpected argument '--bakend' found; tip: a similar argument exists: '--backend'");
    assert!(stderr(&o).contains("(see perfvm run --help)"), "{}", stderr(&o));
    assert_usage_error(&perfvm(&["report", "--compare"]), "a value is required for '--compare <A> [B]'");
}

#[test]
fn per_task_is_a_long_flag_and_p_is_free() {
    assert_usage_error(&perfvm(&["stat", "-p", "tasks"]), "unexpected argument '-p' found");
    let help = stdout(&perfvm(&["stat", "--help"]));
    assert!(help.contains("--per-task") && !help.contains("-p,"), "{help}");
    assert!(help.contains("-r, --repeat <N>"), "{help}");
}

/// What record cannot sample together is refused in one line, before booting: two events
/// of one code (a sample carries only the code), several from the VMM (-a samples one
/// clock), several for the reference (instructions).
#[test]
fn record_refuses_events_it_cannot_keep_apart() {
    let o = perfvm(&["record", "-e", "cycles:u,instructions,cycles:k", "ftest"]);
    assert_usage_error(&o, "cycles:u and cycles:k are one event code, whose samples cannot be told apart");
    let o = perfvm(&["record", "-a", "-e", "cycles,ref-cycles", "ftest"]);
    assert_usage_error(&o, "-a samples one event, the vCPU threads' time, not cycles, ref-cycles");
    let o = perfvm(&["record", "--backend", "exact", "--reference", "-e", "cycles,branches", "ftest"]);
    assert_usage_error(&o, "--reference attributes retired instructions, one event: not cycles, branches");
    let o = perfvm(&["record", "-e", "cycles,instructions", "-F", "99", "ftest"]);
    assert_usage_error(&o, "-F needs a cycles event on the perf backend; give -c PERIOD for instructions");
}

#[test]
fn record_checks_its_output_before_booting() {
    let started = std::time::Instant::now();
    let o = perfvm(&["record", "-c", "100000", "-o", "/nonexistent-dir/x.json", "ftest", "50"]);
    assert_usage_error(&o, "cannot write /nonexistent-dir/x.json: No such file or directory");
    assert!(stdout(&o).is_empty(), "the workload did not run: {}", stdout(&o));
    assert!(started.elapsed().as_secs() < 10, "failed before the run");
    // An existing file is left as it was until the run ends.
    let existing = temp_file("kept.json", b"old");
    let o = perfvm(&["record", "-c", "100000", "-o", &existing, "/nonexistent/guest.elf"]);
    assert_eq!(code(&o), 2);
    assert_eq!(std::fs::read(&existing).unwrap(), b"old");
}

#[test]
fn report_event_count_is_the_sum_of_the_periods() {
    let file = flat_file("count.json", &[("qux", 3), ("foo", 1)], 1000);
    let o = perfvm(&["report", "-i", &file]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("# Samples: 4 of event 'cycles'\n# Event count (approx.): 4000\n"), "{out}");
    assert!(out.contains("  75.00%  ftest            ftest            [.] qux"), "{out}");
}

#[test]
fn an_empty_profile_gives_a_flamegraph_that_says_so() {
    let file = flat_file("empty.json", &[], 1000);
    let svg = temp_file("empty.svg", b"");
    let o = perfvm(&["report", "-i", &file, "--flamegraph", &svg]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).contains("no samples: wrote an empty flamegraph"), "{}", stderr(&o));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<?xml") && text.trim_end().ends_with("</svg>"), "{text}");
    assert!(text.contains("no samples") && !text.contains("ERROR"), "{text}");
    assert_eq!(text.matches("<text").count(), text.matches("</text>").count(), "{text}");
}

#[test]
fn compare_honours_input_and_flamegraph() {
    let a = flat_file("a.json", &[("qux", 6), ("foo", 2)], 1000);
    let b = flat_file("b.json", &[("qux", 2), ("foo", 6)], 1000);
    let svg = temp_file("diff.svg", b"");
    let o = perfvm(&["report", "-i", &a, "--compare", &b, "--flamegraph", &svg]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains(&format!("# A: {a} (8 cycles samples")) && out.contains(&format!("# B: {b} (")), "{out}");
    assert!(out.contains("# total variation distance: 0.5000"), "{out}");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<?xml") && text.contains("qux") && text.contains("foo"), "differential flamegraph");
    assert!(text.contains("against"), "titled as a comparison");
    // The same as --compare A B.
    let o = perfvm(&["report", "--compare", &a, &b]);
    assert_eq!(stdout(&o), out);
    assert_usage_error(&perfvm(&["report", "-i", &a, "--compare", &a, &b]), "not -i and two files");
}

#[test]
fn list_shows_the_events_with_raw_codes_and_backends() {
    let o = perfvm(&["list"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    let line = |name: &str| out.lines().find(|l| l.trim_start().starts_with(&format!("{name} "))).unwrap_or("");
    assert!(line("instructions").contains("r00c0") && line("instructions").contains(" exact"), "{out}");
    assert!(line("branch-misses").contains("r00c5"), "{out}");
    assert!(out.contains("rUUEE"), "{out}");
}

/// list runs no VM, not even a vCPU to learn the TSC rate: it works without KVM and states
/// no rate (each VM states its own).
#[test]
fn list_needs_no_vm() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_perfvm"))
        .arg("list")
        .env("PERFVM_KVM_DEVICE", "/nonexistent/kvm")
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    let backend = out.lines().find(|l| l.contains("perf backend here: ")).expect(&out);
    assert!(!backend.contains("kHz"), "{backend}");
    assert!(
        backend.contains("hardware events (host PMU") || backend.contains("the guest TSC rate, which each VM states"),
        "{backend}"
    );
}

/// The perf agent drives both vendors' PMUs: `--cpu-vendor` no longer says the AMD guest has
/// no PMU, and `stat`/`record` under the AMD identity are no usage error (they boot; see
/// tests/amd_agent.rs for what they count).
#[test]
fn the_amd_identity_has_a_vpmu_the_agent_drives() {
    for cmd in ["stat", "record", "run"] {
        let o = perfvm(&[cmd, "--help"]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let help = stdout(&o);
        assert!(help.contains("AMD vPMU: PerfMonV2") && !help.contains("no AMD vPMU yet"), "{cmd}: {help}");
        assert!(help.contains("AMD PerfMonV2 with --cpu-vendor amd"), "{cmd}: {help}");
    }
    // A bad option after --cpu-vendor amd is still the user's error, not a vendor refusal.
    let o = perfvm(&["stat", "--cpu-vendor", "amd", "--counters", "0", "ftest"]);
    assert_usage_error(&o, "--counters must be between 1 and");
    assert!(!stderr(&o).contains("drives Intel's PMU only"), "{}", stderr(&o));
}
