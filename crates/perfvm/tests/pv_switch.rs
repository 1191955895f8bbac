//! Per-task counting through the PV page: on the perf backend a guest context switch is one
//! doorbell (the counters keep running and the outgoing task is charged at the VMM's
//! publish), and the per-task rows still add up to the whole; on the exact backend the
//! switch stops and restarts the counters (two doorbells), so counts stay exact.

mod common;
use common::*;

fn run_json(args: &[&str]) -> serde_json::Value {
    let o = perfvm(args);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    serde_json::from_slice(&o.stdout).expect("JSON")
}

/// (switches the guest made, doorbells the VMM answered) for `ctxsw 100` under `stat -p`.
fn switches_and_doorbells(mode: &str, backend: &str) -> (u64, u64) {
    let cmdline = "stat -e 0x003c -p -- 100";
    let doc = run_json(&["run", "ctxsw", "--json", "--native", mode, "--backend", backend, "--cmdline", cmdline]);
    let console = doc["console"].as_str().unwrap();
    let switches = console
        .split_whitespace()
        .find_map(|w| w.strip_prefix("switches="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no switch count: {console}"));
    (switches, doc["stats"]["pmu"]["pv"]["doorbells"].as_u64().unwrap())
}

#[test]
fn a_pv_switch_is_one_doorbell_on_the_perf_backend_and_two_on_the_exact_one() {
    require_kvm!();
    for mode in modes("pv switch") {
        let (switches, doorbells) = switches_and_doorbells(mode, "perf");
        assert!(switches >= 200, "--native {mode}: {switches} switches");
        // Besides one per switch: the setup, the first start, the final stop.
        assert!(
            (switches..=switches + 4).contains(&doorbells),
            "--native {mode}, perf: {doorbells} doorbells for {switches} switches"
        );
        let (switches, doorbells) = switches_and_doorbells(mode, "exact");
        assert!(
            (2 * switches..=2 * switches + 4).contains(&doorbells),
            "--native {mode}, exact: {doorbells} doorbells for {switches} switches"
        );
    }
}

#[test]
fn per_task_rows_add_up_with_counters_left_running() {
    require_kvm!();
    for mode in modes("pv switch rows") {
        let doc = run_json(&["stat", "--json", "--native", mode, "--per-task", "-e", "cycles", "ctxsw", "100"]);
        let counts = doc["counts"].as_array().unwrap();
        let row = |pick: &dyn Fn(&serde_json::Value) -> bool| {
            counts.iter().find(|c| pick(c)).and_then(|c| c["value"].as_u64()).unwrap_or_else(|| panic!("{doc}"))
        };
        let whole = row(&|c| c["task"] == 0);
        let ping = row(&|c| c["task_name"] == "ping");
        let pong = row(&|c| c["task_name"] == "pong");
        let outside = row(&|c| c["task_name"] == "[outside tasks]");
        assert_eq!(ping + pong + outside, whole, "--native {mode}: the rows add up");
        // The two tasks do the same work: their cycles (vCPU time) agree within the noise of
        // a busy host.
        let ratio = ping as f64 / pong as f64;
        assert!((0.5..2.0).contains(&ratio), "--native {mode}: ping/pong {ratio:.2}");
    }
}
