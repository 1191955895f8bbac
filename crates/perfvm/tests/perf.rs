//! Guest perf end to end: `perfvm stat`, `record`, `report` against the guest kit's agent.

mod common;
use common::*;
use serde_json::json;
use std::path::PathBuf;

fn tmp(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("perfvm-perf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name).display().to_string()
}

fn json(o: &std::process::Output) -> serde_json::Value {
    assert_eq!(code(o), 0, "{}\n{}", stdout(o), stderr(o));
    serde_json::from_slice(&o.stdout).expect("JSON")
}

fn count(doc: &serde_json::Value, event: &str) -> Option<u64> {
    doc["counts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["event"] == event && c["task"] == 0 && c["supported"] == true)
        .and_then(|c| c["value"].as_u64())
}

#[test]
fn stat_exact_counts_are_exact_and_repeatable() {
    require_kvm!();
    // ftest 1: its size in every mode (natively by blocks its default is ten times that).
    let run =
        || json(&perfvm(&["stat", "--json", "--backend", "exact", "-e", "instructions,branches,cycles", "ftest", "1"]));
    let (a, b) = (run(), run());
    let insns = count(&a, "instructions").expect("instructions counted");
    assert_eq!(Some(insns), count(&b, "instructions"), "same count every run");
    assert_eq!(count(&a, "branches"), count(&b, "branches"));
    assert_eq!(count(&a, "cycles"), Some(insns), "model clock: one cycle per instruction");
    // ftest is ~10^6 instructions, about one in six a branch.
    assert!((900_000..1_200_000).contains(&insns), "{insns}");
    let branches = count(&a, "branches").unwrap();
    assert!(branches > insns / 10 && branches < insns / 3, "{branches}");
    // Cross-check against the VMM's own attribution of every retired instruction while the
    // counters count: the reference holds the enabling WRMSR (it retires once they run) but
    // not the disabling one; the counter counts the disabling one but not the enabling one.
    let out = tmp("ref.json");
    let o = perfvm(&["record", "--backend", "exact", "--reference", "-o", &out, "ftest", "1"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let reference: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    // One entry per address, its period the instructions retired there.
    let attributed: u64 = reference["samples"].as_array().unwrap().iter().map(|s| s["period"].as_u64().unwrap()).sum();
    assert_eq!(attributed, insns);
}

#[test]
fn stat_prints_perf_shaped_output() {
    require_kvm!();
    let o = perfvm(&["stat", "-e", "cycles,instructions", "ftest"]);
    assert_eq!(code(&o), 0);
    let err = stderr(&o);
    assert!(err.contains(" Performance counter stats for 'ftest':"), "{err}");
    assert!(err.contains("seconds time elapsed"), "{err}");
    let cycles = err.lines().find(|l| l.split_whitespace().nth(1) == Some("cycles")).expect("cycles line");
    assert!(
        cycles.trim_start().chars().next().unwrap().is_ascii_digit() && cycles.contains(','),
        "thousands separators: {cycles}"
    );
    // perf's derived rate: cycles over the workload's seconds.
    let ghz: f64 = cycles.split('#').nth(1).and_then(|r| r.trim().strip_suffix(" GHz")?.parse().ok()).expect(cycles);
    let seconds: f64 = err
        .lines()
        .find(|l| l.ends_with("seconds time elapsed"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let n: f64 = cycles.split_whitespace().next().unwrap().replace(',', "").parse().unwrap();
    assert!((ghz - n / seconds / 1e9).abs() < 0.001, "{cycles}: {ghz} GHz in {seconds} s");
    // No host PMU here: the perf backend counts cycles from a clock and says instructions
    // are not supported rather than inventing them, and that the exact backend counts them
    // (a host with a PMU counts both).
    let hint = "instructions is not supported by the perf backend on this host: --backend exact counts it";
    if err.contains("<not supported>      instructions") {
        assert!(err.contains(hint), "{err}");
    } else {
        assert!(err.lines().any(|l| l.contains("instructions") && l.contains("insn per cycle")), "{err}");
        assert!(!err.contains("--backend exact"), "{err}");
    }
    let out = stdout(&o);
    assert!(out.contains("ftest: iterations="), "guest console stays on stdout");
    assert!(!out.contains("agent:"), "the agent's lines go to stderr: {out}");
    assert!(err.contains("agent: "), "{err}");
}

#[test]
fn events_nothing_counts_and_events_without_a_counter_are_told_apart() {
    require_kvm!();
    // r01c2 is not architectural: no backend counts it. One GP counter: the three ref-cycles
    // take turns on what counters there are (multiplexed, as perf does), none goes uncounted.
    let o = perfvm(&["stat", "--counters", "1", "-e", "r01c2,ref-cycles,ref-cycles,ref-cycles", "ftest"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("     <not supported>      r01c2\n"), "{err}");
    assert!(!err.contains("<not counted>") && !err.contains("<not supported>      ref-cycles"), "{err}");
    let shared = err.lines().filter(|l| l.contains("ref-cycles") && l.trim_end().ends_with("%)")).count();
    assert!(shared >= 1, "some ref-cycles ran part of the time: {err}");
    let doc = json(&perfvm(&["stat", "--json", "-e", "r01c2", "ftest"]));
    let r01c2 = &doc["counts"][0];
    assert_eq!((&r01c2["status"], &r01c2["value"]), (&json!("not_supported"), &json!(null)), "{doc}");
}

#[test]
fn stat_repeats_and_prints_the_spread() {
    require_kvm!();
    let o = perfvm(&["stat", "-r", "3", "-e", "cycles", "ftest"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains(" Performance counter stats for 'ftest' (3 runs):"), "{err}");
    let cycles = err.lines().find(|l| l.contains("cycles")).unwrap();
    assert!(cycles.contains("( +- ") && cycles.ends_with("% )"), "{cycles}");
    assert!(err.contains(" seconds time elapsed  ( +- "), "{err}");
    assert_eq!(stdout(&o).matches("ftest: iterations=").count(), 3, "three runs");
    assert_usage_error(&perfvm(&["stat", "-r", "0", "ftest"]), "-r N must be at least 1");
}

#[test]
fn exact_record_needs_no_period() {
    require_kvm!();
    let out = tmp("exact-default.json");
    let o = perfvm(&["record", "--backend", "exact", "--native", "off", "-o", &out, "ftest"]);
    let err = stderr(&o);
    assert_eq!(code(&o), 0, "{err}");
    assert!(!err.contains("-F"), "{err}");
    assert!(!stdout(&o).contains("agent:"), "the agent's lines go to stderr: {}", stdout(&o));
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(doc["events"][0]["period"], 10_007);
    let samples = doc["samples"].as_array().unwrap().len();
    assert!((50..200).contains(&samples), "~100 samples of ftest's 10^6 instructions: {samples}");
}

#[test]
fn record_stats_print_what_stat_stats_prints() {
    require_kvm!();
    let sections = [" VM statistics (", "exit reason", " vPMU: ", "PMU MSR exits", "PMU MSR accesses"];
    let stat = stderr(&perfvm(&["stat", "--stats", "-e", "cycles", "ftest"]));
    let out = tmp("stats.json");
    let o = perfvm(&["record", "--stats", "-c", "20000000", "-o", &out, "ftest"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let record = stderr(&o);
    for s in sections {
        assert!(stat.contains(s), "stat --stats: {s:?} in {stat}");
        assert!(record.contains(s), "record --stats: {s:?} in {record}");
    }
    assert!(record.contains("exits per sample"), "{record}");
}

#[test]
fn record_and_report_rank_qux_first_within_tvd_bound() {
    require_kvm!();
    let (sampled, reference) = (tmp("sampled.json"), tmp("reference.json"));
    let o = perfvm(&["record", "--backend", "exact", "-e", "instructions", "-c", "997", "-o", &sampled, "ftest"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).contains("[ perfvm record: Captured and wrote"), "{}", stderr(&o));
    assert!(PathBuf::from(format!("{sampled}.folded")).exists(), "collapsed stacks written");
    let o = perfvm(&["record", "--backend", "exact", "--reference", "-o", &reference, "ftest"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));

    let o = perfvm(&["report", "-i", &sampled]);
    assert_eq!(code(&o), 0);
    let out = stdout(&o);
    let number = |prefix: &str| -> u64 {
        out.lines().find_map(|l| l.strip_prefix(prefix)).unwrap().split_whitespace().next().unwrap().parse().unwrap()
    };
    assert_eq!(number("# Event count (approx.): "), number("# Samples: ") * 997, "the sum of the periods: {out}");
    let first = out.lines().find(|l| l.contains("[.] ")).expect("a symbol row");
    assert!(first.ends_with("[.] qux"), "qux ranks first: {out}");
    for f in ["foo", "bar", "main", "random", "random_r"] {
        assert!(out.contains(&format!("[.] {f}\n")), "{f} in {out}");
    }
    let o = perfvm(&["report", "--compare", &reference, &sampled]);
    assert_eq!(code(&o), 0);
    let out = stdout(&o);
    let tvd: f64 =
        out.lines().find_map(|l| l.strip_prefix("# total variation distance: ")).unwrap().trim().parse().unwrap();
    assert!(tvd <= 0.02, "TVD {tvd} > 0.02\n{out}");

    let svg = tmp("flame.svg");
    let o = perfvm(&["report", "-i", &sampled, "--flamegraph", &svg]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<?xml") && svg.contains("qux"), "flamegraph names qux");
}

#[test]
fn perf_errors_are_one_line() {
    let o = perfvm(&["stat", "-e", "cycles,bogus", "ftest"]);
    assert_usage_error(&o, "unknown event 'bogus' (available: cycles, instructions, ref-cycles");
    assert_usage_error(&perfvm(&["record", "-e", "instructions", "ftest"]), "-F needs a cycles event");
    assert_usage_error(&perfvm(&["record", "--reference", "ftest"]), "--reference needs --backend exact");
    assert_usage_error(&perfvm(&["report", "-i", "/nonexistent.json"]), "cannot read /nonexistent.json");
    let junk = temp_file("junk.json", b"{\"x\": 1}");
    assert_usage_error(&perfvm(&["report", "-i", &junk]), "not a perfvm record file");
}

#[test]
fn per_task_counts_add_up_to_the_whole() {
    require_kvm!();
    let doc = json(&perfvm(&["stat", "--json", "--backend", "exact", "--per-task", "-e", "instructions", "tasks"]));
    let counts = doc["counts"].as_array().unwrap();
    let of_task = |t: u64| {
        counts
            .iter()
            .find(|c| c["task"] == t && c["event"] == "instructions")
            .and_then(|c| c["value"].as_u64())
            .unwrap()
    };
    let (whole, a, b) = (of_task(0), of_task(1), of_task(2));
    assert!(a + b <= whole, "tasks {a} + {b} exceed the whole {whole}");
    let outside = counts.iter().find(|c| c["task_name"] == "[outside tasks]").expect("a row outside the tasks");
    assert_eq!(a + b + outside["value"].as_u64().unwrap(), whole, "the rows add up");
    assert!((a + b) as f64 >= 0.95 * whole as f64, "tasks {a} + {b} far below the whole {whole}");
    let ratio = a as f64 / b as f64;
    assert!((1.6..2.4).contains(&ratio), "task-a does about twice task-b's work: {ratio:.2}");
    let names: Vec<_> =
        counts.iter().filter(|c| c["task"] != 0).map(|c| c["task_name"].as_str().unwrap_or("")).collect();
    assert!(names.contains(&"task-a") && names.contains(&"task-b"), "{names:?}");
}
