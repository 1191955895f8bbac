//! `perfvm script` (perf script's text, the speedscope export) and `report`'s call-graph
//! views and source lines through the command line: on synthetic record files, and on a
//! real `record` of ftest.

mod common;
use common::*;
use serde_json::Value;

/// A record file whose samples run qux from main (two) and main itself (one), with call
/// chains, naming `elf`.
fn chained_record(name: &str, elf: &str) -> String {
    record_file(name, elf, &[(0x110, &[0x321], 1000), (0x110, &[0x321], 1000), (0x320, &[], 1000)])
}

/// The same without call chains.
fn flat_record(name: &str) -> String {
    record_file(name, &symbol_elf(), &[(0x110, &[], 1000)])
}

#[test]
fn bad_flags_and_files_are_one_line_errors() {
    assert_usage_error(&perfvm(&["script", "-i", "/nonexistent.json"]), "cannot read /nonexistent.json");
    let junk = temp_file("junk-script.json", b"[1, 2]");
    assert_usage_error(&perfvm(&["script", "-i", &junk]), "not a perfvm record file");
    assert_usage_error(
        &perfvm(&["script", "--format", "svg"]),
        "invalid value 'svg' for '--format <FORMAT>' [possible values: perf, speedscope, pprof]",
    );
    let flat = flat_record("flat.json");
    assert_usage_error(&perfvm(&["script", "-i", &flat, "--format", "pprof"]), "--format pprof writes a binary file");
    let o = perfvm(&["script", "-i", &flat, "-o", "/nonexistent-dir/out.txt"]);
    assert_usage_error(&o, "cannot write /nonexistent-dir/out.txt");
    assert_usage_error(
        &perfvm(&["report", "-i", &flat, "--sort", "sym,pid"]),
        "--sort: unknown key 'pid' (comm, dso, sym, srcline)",
    );
    assert_usage_error(&perfvm(&["report", "--compare", &flat, &flat, "-g"]), "--compare compares symbols");
}

#[test]
fn script_prints_chains_and_warns_once_without_the_elf() {
    let file = chained_record("chained.json", "/nonexistent/ftest.elf");
    let o = perfvm(&["script", "-i", &file]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("perfvm: warning: cannot read /nonexistent/ftest.elf"), "{err}");
    let out = stdout(&o);
    let first: Vec<&str> = out.split("\n\n").next().unwrap().lines().collect();
    assert_eq!(first[0], "ftest       0 [000]     0.001000:       1000 cycles:");
    assert_eq!(first[1], "\t             110 [unknown] (/nonexistent/ftest.elf)");
    assert_eq!(first[2], "\t             321 [unknown] (/nonexistent/ftest.elf)");
    assert_eq!(out.matches("cycles:").count(), 3, "{out}");
    let hidden = stdout(&perfvm(&["script", "-i", &file, "-G"]));
    assert_eq!(hidden.lines().count(), 3, "one line per sample: {hidden}");
}

#[test]
fn report_shows_children_self_and_the_call_graph() {
    let file = chained_record("graph.json", &symbol_elf());
    let o = perfvm(&["report", "-i", &file]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("# Children      Self  Command          Shared Object    Symbol\n"), "{out}");
    assert!(out.contains("   100.00%    33.33%  ftest            ftest            [.] main\n"), "{out}");
    assert!(out.contains("    66.67%    66.67%  ftest            ftest            [.] qux\n"), "{out}");
    let o = perfvm(&["report", "-i", &file, "-g"]);
    let out = stdout(&o);
    let graph = "[.] main\n            |\n            ---main\n               |\n                --66.67%--qux\n\n";
    assert!(out.contains(graph), "{out}");
    let o = perfvm(&["report", "-i", &file, "--no-children"]);
    let out = stdout(&o);
    assert!(
        out.contains("# Overhead  Command") && out.contains("    66.67%  ftest            ftest            [.] qux\n"),
        "{out}"
    );
    assert!(!out.contains("Children"), "{out}");
}

#[test]
fn record_then_script_export_and_source_lines() {
    require_kvm!();
    // The exact backend: where instructions go is the same on every host, so qux's hottest
    // line is first whatever the host CPU (a time profile would rank by the host's costs).
    let data = temp_file("e2e.json", b"");
    let o = perfvm(&["record", "--backend", "exact", "-e", "instructions", "-c", "2003", "-o", &data, "ftest"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));

    let o = perfvm(&["script", "-i", &data, "--srcline"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).is_empty(), "the guest has DWARF: {}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.len() >= 20, "{out}");
    assert!(lines[0].contains(" instructions: ") && lines[0].contains("ftest.elf)"), "{out}");
    assert!(out.contains(" qux+0x"), "qux sampled: {out}");
    assert!(lines.iter().filter(|l| l.starts_with("  ftest.c:")).count() * 4 >= lines.len(), "srclines: {out}");

    let export = temp_file("e2e.speedscope.json", b"");
    let o = perfvm(&["script", "-i", &data, "--format", "speedscope", "-o", &export]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&export).unwrap()).expect("JSON");
    assert_eq!(doc["$schema"], "https://www.speedscope.app/file-format-schema.json");
    let frames = doc["shared"]["frames"].as_array().unwrap();
    let qux = frames.iter().find(|f| f["name"] == "qux").expect("a qux frame");
    assert!(qux["file"].as_str().unwrap().ends_with("ftest.c") && qux["line"].as_u64().unwrap() > 0, "{qux}");
    let profile = &doc["profiles"][0];
    assert_eq!(profile["type"], "sampled");
    assert_eq!(profile["samples"].as_array().unwrap().len(), profile["weights"].as_array().unwrap().len());

    let o = perfvm(&["report", "-i", &data, "--sort", "sym,srcline"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("# Overhead  Symbol") && out.contains("Source:Line"), "{out}");
    let first = out.lines().find(|l| l.contains("[.] ")).unwrap();
    assert!(first.contains("[.] qux") && first.contains("ftest.c:"), "qux's hottest line first: {out}");
}

#[test]
fn a_reader_that_stops_early_is_not_an_error() {
    // 3000 samples in 3000 functions: far more output than a pipe holds.
    let names: Vec<String> = (0..3000).map(|i| format!("f{i}")).collect();
    let functions: Vec<(&str, u64, u64)> = names.iter().zip(0x1000u64..).map(|(n, at)| (n.as_str(), at, 1)).collect();
    let elf = temp_file("big.elf", &profile::testelf::with_functions(&functions));
    let samples: Vec<(u64, &[u64], u64)> = (0..3000u64).map(|i| (0x1000 + i, &[0x99u64][..], 1)).collect();
    let file = record_file("big.json", &elf, &samples);
    for args in [vec!["script", "-i", &file], vec!["report", "-i", &file, "-g"]] {
        let o = perfvm_to_a_closed_reader(&args);
        let err = stderr(&o);
        assert_eq!(code(&o), 0, "{args:?}: {err}");
        assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{args:?}: {err}");
    }
}
