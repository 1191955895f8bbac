//! `report`'s perf habits (--stdio, -n, --percent-limit, -g without chains), its header
//! (losses, the event count, a cut-short run), old record files, the pprof export read back
//! by Go's pprof, and exit 1 for output that cannot be written.

mod common;
use common::*;
use serde_json::json;
use std::process::Command;

/// qux 3 samples, foo 1, main 1 (period 1000), no chains.
fn flat(name: &str) -> String {
    let samples: &[(u64, &[u64], u64)] =
        &[(0x110, &[], 1000), (0x114, &[], 1000), (0x118, &[], 1000), (0x210, &[], 1000), (0x310, &[], 1000)];
    record_file(name, &symbol_elf(), samples)
}

fn ok(args: &[&str]) -> String {
    let o = perfvm(args);
    assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
    stdout(&o)
}

#[test]
fn stdio_is_accepted_and_changes_nothing() {
    let file = flat("stdio.json");
    assert_eq!(ok(&["report", "--stdio", "-i", &file]), ok(&["report", "-i", &file]));
}

#[test]
fn show_nr_samples_adds_a_samples_column() {
    let file = flat("n.json");
    let out = ok(&["report", "-n", "-i", &file]);
    assert!(out.contains("# Overhead       Samples  Command          Shared Object    Symbol\n"), "{out}");
    assert!(out.contains("    60.00%             3  ftest            ftest            [.] qux\n"), "{out}");
    assert!(out.contains("    20.00%             1  ftest            ftest            [.] foo\n"), "{out}");
    assert_eq!(out, ok(&["report", "--show-nr-samples", "-i", &file]));
}

#[test]
fn percent_limit_leaves_out_small_entries() {
    let file = flat("limit.json");
    let out = ok(&["report", "--percent-limit", "30", "-i", &file]);
    assert!(out.contains("[.] qux\n") && !out.contains("[.] foo") && !out.contains("[.] main"), "{out}");
    assert!(out.contains("# Event count (approx.): 5000\n"), "the header counts every sample: {out}");
    assert_usage_error(&perfvm(&["report", "--percent-limit", "200", "-i", &file]), "--percent-limit");
}

#[test]
fn g_without_chains_shows_the_flat_table_and_a_note() {
    let file = flat("nochains.json");
    let o = perfvm(&["report", "-g", "-i", &file]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout(&o), ok(&["report", "-i", &file]), "the flat table");
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("has no call chains (record it with -g): showing the flat table"), "{err}");
}

#[test]
fn the_header_states_losses_the_event_count_and_a_partial_run() {
    // Periods of a throttled run differ; the Event count is their sum, not samples x period.
    let file = record_file("lossy.json", &symbol_elf(), &[(0x110, &[], 100_000), (0x110, &[], 250_000)]);
    let mut doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    doc["samples_dropped"] = json!(12);
    doc["notifications"] = json!({"taken": 2, "lost": 1349, "throttled": 60240});
    doc["event_count"] = json!(700_000);
    doc["partial"] = json!(true);
    let file = temp_file("lossy.json", doc.to_string().as_bytes());
    let out = ok(&["report", "-i", &file]);
    let header = "# lost: 12 samples dropped (not buffered or not kept), 1,349 overflow notifications lost; 60,240 periods throttled\n\
                  # the event counted 700,000 over the workload; the samples stand for 350,000 of them (50.00%)\n\
                  # partial: the run was cut short (SIGINT, SIGTERM or --timeout): the samples until then\n\
                  #\n\
                  # Total Lost Samples: 1361\n\
                  #\n\
                  # Samples: 2 of event 'cycles'\n\
                  # Event count (approx.): 350000\n";
    assert!(out.contains(header), "{out}");
    let plain = ok(&["report", "-i", &flat("plain.json")]);
    assert!(plain.contains("# lost: 0 samples dropped") && !plain.contains("partial"), "{plain}");
}

#[test]
fn old_record_files_are_converted_or_refused_naming_their_version() {
    let elf = symbol_elf();
    let v1 = |samples: serde_json::Value, list: serde_json::Value| {
        json!({"format": "perfvm-record-1", "guest": "ftest", "elf": elf, "args": [], "event": "cycles",
               "raw_event": 0x3c, "period": 1000, "backend": "b", "policy": "p", "mode": "sampled",
               "samples": samples, "samples_dropped": 0, "workload_ns": null, "wall_ns": 1,
               "profile": {"rows": [{"command": "ftest", "object": "ftest", "symbol": "qux", "weight": 2}]},
               "rips": [], "sample_list": list})
        .to_string()
    };
    let list = json!([{"time_ns": 1, "vcpu": 0, "task": 0, "ip": 0x110, "period": 1000},
                      {"time_ns": 2, "vcpu": 0, "task": 0, "ip": 0x210, "period": 1000}]);
    let old = temp_file("v1.json", v1(json!(2), list).as_bytes());
    let out = ok(&["report", "-i", &old]);
    assert!(out.contains("    50.00%  ftest            ftest            [.] qux\n"), "{out}");
    let rows_only = temp_file("v1-rows.json", v1(json!(2), json!([])).as_bytes());
    assert_usage_error(&perfvm(&["report", "-i", &rows_only]), "a perfvm-record-1 file without its samples");
    let future = temp_file("v9.json", br#"{"format": "perfvm-record-9"}"#);
    assert_usage_error(&perfvm(&["script", "-i", &future]), "record format 'perfvm-record-9' is not supported");
}

#[test]
fn output_that_cannot_be_written_exits_1() {
    let file = flat("full.json");
    for args in [
        vec!["script", "-i", &file, "-o", "/dev/full"],
        vec!["script", "-i", &file, "--format", "pprof", "-o", "/dev/full"],
        vec!["report", "-i", &file, "--flamegraph", "/dev/full"],
    ] {
        let o = perfvm(&args);
        let err = stderr(&o);
        assert_eq!(code(&o), 1, "{args:?}: {err}");
        // (The symbol ELF has no DWARF: the exports warn of it first.)
        let errors: Vec<&str> = err.lines().filter(|l| !l.starts_with("perfvm: warning: ")).collect();
        assert!(errors.len() == 1 && errors[0].starts_with("perfvm: cannot write /dev/full: "), "{err}");
    }
    let o = Command::new(env!("CARGO_BIN_EXE_perfvm"))
        .args(["report", "-i", &file])
        .stdout(std::fs::File::options().write(true).open("/dev/full").unwrap())
        .output()
        .unwrap();
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).starts_with("perfvm: cannot write the output: "), "{}", stderr(&o));
}

#[test]
fn a_flamegraph_path_that_cannot_be_written_fails_before_the_report() {
    let o = perfvm(&["report", "-i", &flat("early.json"), "--flamegraph", "/nonexistent-dir/x.svg"]);
    assert_usage_error(&o, "cannot write /nonexistent-dir/x.svg: No such file or directory");
    assert!(stdout(&o).is_empty(), "no report printed: {}", stdout(&o));
}

/// `go tool pprof ARGS FILE`'s output, or None where Go is not installed.
pub fn go_pprof(args: &[&str], file: &str) -> Option<String> {
    let dir = std::env::temp_dir();
    if Command::new("go").arg("version").current_dir(&dir).output().map_or(true, |o| !o.status.success()) {
        eprintln!("SKIP go tool pprof: no Go toolchain (the export is decoded with the crate instead)");
        return None;
    }
    let o = Command::new("go").args(["tool", "pprof"]).args(args).arg(file).current_dir(&dir).output().unwrap();
    assert!(o.status.success(), "go tool pprof {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    Some(String::from_utf8_lossy(&o.stdout).into_owned())
}

#[test]
fn pprof_export_reads_back() {
    let samples: &[(u64, &[u64], u64)] =
        &[(0x110, &[0x215, 0x321], 1000), (0x110, &[0x215, 0x321], 1000), (0x210, &[0x321], 2000)];
    let file = record_file("pp.json", &symbol_elf(), samples);
    let out = temp_file("pp.pb.gz", b"");
    let o = perfvm(&["script", "-i", &file, "--format", "pprof", "-o", &out]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(&bytes[..2], [0x1f, 0x8b], "gzipped");
    let pb = profile::pprof::decode(&bytes).unwrap();
    let s = |i: i64| pb.string_table[i as usize].clone();
    assert_eq!(
        pb.sample_type.iter().map(|t| (s(t.r#type), s(t.unit))).collect::<Vec<_>>(),
        [("samples".to_owned(), "count".to_owned()), ("cycles".to_owned(), "count".to_owned())]
    );
    assert_eq!(pb.sample.iter().map(|x| x.value[1]).sum::<i64>(), 4000);
    let Some(top) = go_pprof(&["-top", "-nodecount=20"], &out) else { return };
    let flat = |name: &str| {
        let row = top.lines().find(|l| l.split_whitespace().last() == Some(name)).unwrap_or_else(|| panic!("{top}"));
        row.split_whitespace().nth(1).unwrap().to_owned()
    };
    assert_eq!((flat("qux"), flat("foo"), flat("main")), ("50.00%".into(), "50.00%".into(), "0%".into()), "{top}");
    let traces = go_pprof(&["-traces"], &out).unwrap();
    assert!(traces.contains("qux\n") && traces.contains("foo\n") && traces.contains("main\n"), "{traces}");
    let samples = go_pprof(&["-top", "-sample_index=samples"], &out).unwrap();
    assert!(samples.contains("Type: samples"), "{samples}");
}

/// A record of two events: cycles (qux twice, foo) and instructions (main), in the current
/// format.
fn two_events(name: &str) -> String {
    let sample =
        |event: u32, ip: u64| json!({"event": event, "time_ns": 1, "vcpu": 0, "task": 0, "ip": ip, "period": 1000});
    let doc = json!({"format": "perfvm-record-3", "guest": "ftest", "elf": symbol_elf(), "args": [],
        "events": [{"name": "cycles", "raw_event": 0x3c, "period": 1000},
                   {"name": "instructions", "raw_event": 0xc0, "period": 1000}],
        "backend": "test", "policy": "test", "mode": "sampled",
        "samples": [sample(0, 0x110), sample(1, 0x310), sample(0, 0x114), sample(0, 0x210)]});
    temp_file(name, doc.to_string().as_bytes())
}

#[test]
fn several_events_get_a_section_each_and_one_is_picked_by_event() {
    let file = two_events("two.json");
    let out = ok(&["report", "-i", &file]);
    let (cycles, instructions) = out.split_once("\n# Samples: 1 of event 'instructions'\n").expect(&out);
    assert!(cycles.contains("# Samples: 3 of event 'cycles'\n") && cycles.contains("    66.67%  ftest  "), "{out}");
    assert!(instructions.contains("   100.00%  ftest            ftest            [.] main\n"), "{out}");
    let only = ok(&["report", "-i", &file, "--event", "instructions"]);
    assert!(only.starts_with("# perfvm record of 'ftest': sampled mode, period 1000\n"), "{only}");
    assert!(!only.contains("'cycles'") && only.contains("[.] main"), "{only}");
    assert_usage_error(
        &perfvm(&["report", "-i", &file, "--event", "branches"]),
        "two.json has no event 'branches' (it has cycles, instructions)",
    );
    let script = ok(&["script", "-i", &file, "--event", "cycles"]);
    assert!(script.lines().count() == 3 && !script.contains("instructions:"), "{script}");
    // An export holds one event: the first, with a note saying so, or the one picked.
    let pb = temp_file("two.pb.gz", b"");
    let o = perfvm(&["script", "-i", &file, "--format", "pprof", "-o", &pb]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).contains("holds 2 events: the pprof export shows the first, cycles (--event NAME picks one)"));
    let o = perfvm(&["script", "-i", &file, "--event", "instructions", "--format", "speedscope"]);
    assert!(stdout(&o).contains("\"name\":\"ftest: instructions\"") && !stderr(&o).contains("note"), "{}", stderr(&o));
}
