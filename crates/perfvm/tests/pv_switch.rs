//! Per-task counting through the PV page. On the perf backend a guest context switch makes
//! no exit: the counters keep running, the agent remembers which task ran for how many TSC
//! ticks, and a publish (a doorbell at a switch at most every ms, and the final stop) shares
//! the counters' exact advance since the previous publish over those tasks; the per-task
//! rows add up to the whole, and each is within the bound the agent publishes. With
//! `--pv-publish-us 0` every switch publishes (one doorbell, exact at the exit). On the exact
//! backend the switch stops and restarts the counters (two doorbells), so counts stay exact.

mod common;
use common::*;

fn run_json(args: &[&str]) -> serde_json::Value {
    let o = perfvm(args);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    serde_json::from_slice(&o.stdout).expect("JSON")
}

/// (switches the guest made, doorbells the VMM answered, console) for `ctxsw 100` under
/// `stat -p` with the agent's extra options `opts`.
fn switches_and_doorbells(mode: &str, backend: &str, opts: &str, rounds: u32) -> (u64, u64, String) {
    let cmdline = format!("stat -e 0x003c -p {opts} -- {rounds}");
    let doc = run_json(&["run", "ctxsw", "--json", "--native", mode, "--backend", backend, "--cmdline", &cmdline]);
    let console = doc["console"].as_str().unwrap().to_owned();
    let switches = console
        .split_whitespace()
        .find_map(|w| w.strip_prefix("switches="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no switch count: {console}"));
    (switches, doc["stats"]["pmu"]["pv"]["doorbells"].as_u64().unwrap(), console)
}

#[test]
fn a_pv_switch_makes_no_exit_on_the_perf_backend_one_with_a_publish_each_and_two_on_the_exact_one() {
    require_kvm!();
    for mode in modes("pv switch") {
        let (switches, doorbells, console) = switches_and_doorbells(mode, "perf", "", 100);
        assert!(switches >= 200, "--native {mode}: {switches} switches");
        // At most one publish per ms of switching (a switch costs ~2 ms emulated, ~1 us
        // natively), besides the setup, the first start and the final stop.
        assert!(doorbells <= switches + 3, "--native {mode}, perf: {doorbells} doorbells for {switches} switches");
        if mode == "on" {
            assert!(doorbells <= switches / 10 + 3, "--native on, perf: {doorbells} doorbells for {switches} switches");
        }
        assert!(console.contains("agent: per-task 0x003c shared out at"), "{console}");
        let (switches, doorbells, _) = switches_and_doorbells(mode, "perf", "--pv-publish-us 0", 100);
        assert!(
            (switches..=switches + 4).contains(&doorbells),
            "--native {mode}, perf, a publish per switch: {doorbells} doorbells for {switches} switches"
        );
        let (switches, doorbells, console) = switches_and_doorbells(mode, "exact", "", 100);
        assert!(
            (2 * switches..=2 * switches + 4).contains(&doorbells),
            "--native {mode}, exact: {doorbells} doorbells for {switches} switches"
        );
        assert!(!console.contains("shared out"), "the exact backend shares nothing out: {console}");
    }
}

#[test]
fn per_task_rows_add_up_with_counters_left_running() {
    require_kvm!();
    for mode in modes("pv switch rows") {
        // Natively a round is ~0.5 us: enough of them that the loops, not the first run's
        // page faults, make the tasks' counts.
        let rounds = if mode == "on" { "20000" } else { "100" };
        let doc = run_json(&["stat", "--json", "--native", mode, "--per-task", "-e", "cycles", "ctxsw", rounds]);
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

/// One `agent: pv check 0x003c task <id> exact <n> shared <n> bound <n> settles <n>` line.
#[derive(Debug)]
struct Check {
    task: u64,
    exact: u64,
    shared: u64,
    bound: u64,
    settles: u64,
}

fn checks(console: &str) -> Vec<Check> {
    console
        .lines()
        .filter_map(|l| l.strip_prefix("agent: pv check 0x003c task "))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| w[i].parse::<u64>().unwrap_or_else(|_| panic!("{l}"));
            Check { task: n(0), exact: n(2), shared: n(4), bound: n(6), settles: n(8) }
        })
        .collect()
}

/// `--pv-check`: a publish at every switch charges each task exactly (at the exit), and the
/// same publishes, taken only every `--pv-publish-us`, are shared out as the default does:
/// each task's share is within the published bound of its exact count, and the shares add
/// up to the same whole.
#[test]
fn shared_out_counts_are_within_their_bound_of_the_exact_ones() {
    require_kvm!();
    for mode in modes("pv switch bound") {
        // Several switches per shared interval: a switch costs ~2 ms emulated, a doorbell
        // (one per switch here) ~0.1 ms natively.
        let opts = if mode == "on" { "--pv-check --pv-publish-us 1000" } else { "--pv-check --pv-publish-us 20000" };
        let (switches, _, console) = switches_and_doorbells(mode, "perf", opts, 100);
        let rows = checks(&console);
        assert_eq!(rows.iter().map(|c| c.task).collect::<Vec<_>>(), [0, 1, 2], "{console}");
        assert!(rows[0].settles >= 2, "--native {mode}: shared out {} times in {switches} switches", rows[0].settles);
        let (exact, shared): (u64, u64) = (rows.iter().map(|c| c.exact).sum(), rows.iter().map(|c| c.shared).sum());
        assert_eq!(exact, shared, "--native {mode}: the shares add up to the exact whole");
        for c in &rows {
            assert!(c.exact.abs_diff(c.shared) <= c.bound, "--native {mode}: task {} {c:?}", c.task);
        }
    }
}
