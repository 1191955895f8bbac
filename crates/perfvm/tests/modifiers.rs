//! Event modifiers `:u` / `:k`: the agent programs EVENTSEL.USR / OS as they say; the exact
//! backend counts by privilege level (the guest kit's guests run at CPL0, so `:k` counts
//! what the unmodified event counts and `:u` nothing); the perf backend's software clock
//! cannot tell the levels apart and says so.

mod common;
use common::*;

/// (event, status, value) of each line of `stat --json`.
fn lines(o: &std::process::Output) -> Vec<(String, String, Option<u64>)> {
    let doc: serde_json::Value = serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)));
    doc["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (c["event"].as_str().unwrap().to_owned(), c["status"].as_str().unwrap().to_owned(), c["value"].as_u64())
        })
        .collect()
}

fn value(lines: &[(String, String, Option<u64>)], event: &str) -> Option<u64> {
    lines.iter().find(|l| l.0 == event).unwrap_or_else(|| panic!("{event} in {lines:?}")).2
}

#[test]
fn the_exact_backend_counts_by_level() {
    require_kvm!();
    // Six events, a counter each (no multiplexing in so short a run).
    let evs = "instructions,instructions:k,instructions:u,branches,branches:k,branches:u";
    for all_cpus in [false, true] {
        let mut args = vec!["stat", "--backend", "exact", "--counters", "8", "--json", "-e", evs];
        if all_cpus {
            args.push("-a");
        }
        args.push("hello");
        let o = perfvm(&args);
        assert_eq!(code(&o), 0, "-a {all_cpus}: {}", stderr(&o));
        let l = lines(&o);
        let instructions = value(&l, "instructions").expect("counted");
        assert!(instructions > 0, "{l:?}");
        assert_eq!(value(&l, "instructions:k"), Some(instructions), "-a {all_cpus}: all at CPL0: {l:?}");
        assert_eq!(value(&l, "instructions:u"), Some(0), "-a {all_cpus}: {l:?}");
        let branches = value(&l, "branches").expect("counted");
        assert_eq!(value(&l, "branches:k"), Some(branches), "-a {all_cpus}: {l:?}");
        assert_eq!(value(&l, "branches:u"), Some(0), "-a {all_cpus}: {l:?}");
    }
}

#[test]
fn the_perf_backend_says_what_it_cannot_split() {
    require_kvm!();
    let o = perfvm(&["stat", "--json", "-e", "cycles,cycles:u,cycles:k", "hello"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let l = lines(&o);
    let cycles = value(&l, "cycles").expect("counted");
    let kernel = value(&l, "cycles:k").expect("counted");
    if doc["backend"].as_str().unwrap().contains("task-clock") {
        assert_eq!(l[1].1, "not_supported", "{l:?}");
        let o = perfvm(&["stat", "-e", "cycles:u,cycles:k", "hello"]);
        let err = stderr(&o);
        assert!(
            err.contains(" cycles:u: the perf backend's software clock cannot tell user mode from the kernel"),
            "{err}"
        );
        assert!(err.contains(" cycles:k: the software clock counts every privilege level"), "{err}");
    } else {
        // A host PMU: guest mode at CPL0 only, so user-mode cycles are few.
        let user = value(&l, "cycles:u").expect("counted");
        assert!(user < kernel / 10 && user < cycles / 10, "{l:?}");
    }
    assert!(kernel > 0 && cycles > 0, "{l:?}");
}

#[test]
fn modifiers_are_refused_where_they_cannot_be_honoured() {
    let o = perfvm(&["stat", "-e", "cycles:x", "hello"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("bad modifier ':x'"), "{}", stderr(&o));
    let o = perfvm(&["record", "-a", "-e", "cycles:u", "hello"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot tell user mode from the kernel: cycles:u"), "{}", stderr(&o));
}
