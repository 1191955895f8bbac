//! `perfvm stat` with more events than counters: the agent multiplexes them on a timer tick
//! and the table scales each count by its time enabled over time running, with perf's
//! `(xx.xx%)` column, in both execution modes.

mod common;
use common::*;
use serde_json::Value;

fn stat_json(args: &[&str]) -> Value {
    let o = perfvm(args);
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    serde_json::from_slice(&o.stdout).expect("JSON")
}

/// The whole-run lines: (event, scaled value, running percent).
fn lines(doc: &Value) -> Vec<(String, Option<u64>, Option<f64>)> {
    doc["counts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["task"] == 0)
        .map(|c| (c["event"].as_str().unwrap().to_owned(), c["value"].as_u64(), c["running_percent"].as_f64()))
        .collect()
}

#[test]
fn more_events_than_counters_are_multiplexed_and_scaled() {
    require_kvm!();
    // No host PMU here: the perf backend counts cycles and ref-cycles (from a clock). One GP
    // counter and the same event twice: both copies must estimate the same count.
    for mode in modes("more_events_than_counters_are_multiplexed_and_scaled") {
        let doc = stat_json(&[
            "stat",
            "--json",
            "--native",
            mode,
            "--counters",
            "1",
            "-e",
            "cycles,ref-cycles",
            "-e",
            "cycles",
            "ftest",
        ]);
        let got = lines(&doc);
        assert_eq!(got.len(), 3, "{mode}: {got:?}");
        for (event, value, running) in &got {
            assert!(value.is_some_and(|v| v > 0), "{mode}: {event} counted: {got:?}");
            let running = running.unwrap_or_else(|| panic!("{mode}: {event} shares the counter: {got:?}"));
            assert!(running > 5.0 && running < 100.0, "{mode}: {event} ran {running}%");
        }
        // Three events on one counter: each about a third of the time.
        let shares: f64 = got.iter().map(|(_, _, r)| r.unwrap()).sum();
        assert!(shares <= 100.5, "{mode}: one counter, shares add up to at most 100%: {got:?}");
        // Host load makes the vCPU's clock uneven from slice to slice: a generous tolerance.
        // (ref-cycles ticks in real time, cycles in vCPU thread time: not comparable here.)
        let (a, b) = (got[0].1.unwrap() as f64, got[2].1.unwrap() as f64);
        assert!((a / b - 1.0).abs() < 0.3, "{mode}: the two cycles estimates agree: {got:?}");
        let console = doc["console"].as_str().unwrap();
        assert!(console.contains("agent: multiplexing 3 events on 1 counters"), "{mode}: {console}");
    }
}

#[test]
fn events_that_fit_print_no_running_column_and_e_repeats() {
    require_kvm!();
    let comma = perfvm(&["stat", "--counters", "2", "-e", "cycles,ref-cycles", "ftest"]);
    let repeated = perfvm(&["stat", "--counters", "2", "-e", "cycles", "-e", "ref-cycles", "ftest"]);
    for o in [&comma, &repeated] {
        let err = stderr(o);
        assert_eq!(code(o), 0, "{err}");
        let table: Vec<&str> =
            err.lines().filter(|l| l.split_whitespace().nth(1).is_some_and(|w| w.ends_with("cycles"))).collect();
        assert_eq!(table.len(), 2, "both events, each on its own counter: {err}");
        assert!(table.iter().all(|l| !l.contains('%')), "ran all the time: no percentage: {err}");
        assert!(!err.contains("multiplexing"), "{err}");
    }
}
