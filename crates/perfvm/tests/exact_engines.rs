//! The exact backend's two engines, differentially: `--exact-engine steps` (every instruction
//! single-stepped, the reference) and `--exact-engine blocks` (the guest runs from branch to
//! branch) run the same guests and must agree on every count, every sampled instruction and
//! every address of the reference profile, in each execution mode. The per-address and
//! per-sample comparisons step ftest many times over: they are the slow tier's (.ci/run).

mod common;
use common::*;
use std::collections::BTreeMap;

const ENGINES: [&str; 2] = ["steps", "blocks"];

fn json(o: &std::process::Output) -> serde_json::Value {
    assert_eq!(code(o), 0, "{}", stderr(o));
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

/// Every count of a `stat --json`, by event and task.
fn counts(doc: &serde_json::Value) -> BTreeMap<(String, u64), Option<u64>> {
    doc["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| ((c["event"].as_str().unwrap().to_owned(), c["task"].as_u64().unwrap()), c["value"].as_u64()))
        .collect()
}

/// A record's samples as (event, instruction pointer, period), in the order taken.
fn samples(path: &str) -> Vec<(u64, u64, u64)> {
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let field = |s: &serde_json::Value, k: &str| s[k].as_u64().unwrap();
    doc["samples"].as_array().unwrap().iter().map(|s| (field(s, "event"), field(s, "ip"), field(s, "period"))).collect()
}

fn tmp(name: &str) -> String {
    std::env::temp_dir().join(format!("perfvm-engines-{}-{name}", std::process::id())).display().to_string()
}

/// `args` run once per engine (`--exact-engine` appended), each output as `read` takes it.
fn both<T>(args: &[&str], read: impl Fn(&std::process::Output) -> T) -> [T; 2] {
    ENGINES.map(|engine| read(&perfvm(&[args, &["--exact-engine", engine]].concat())))
}

#[test]
fn ftest_counts_agree() {
    require_kvm!();
    for mode in modes("ftest_counts_agree") {
        let args =
            ["stat", "--json", "--backend", "exact", "--native", mode, "-e", "instructions,branches,cycles", "ftest"];
        let [steps, blocks] = both(&args, |o| counts(&json(o)));
        assert!(steps.values().all(Option::is_some), "{steps:?}");
        assert_eq!(steps, blocks, "--native {mode}");
    }
}

#[test]
#[ignore = "slow tier: ftest stepped eight times over (.ci/run runs it with --ignored)"]
fn every_retired_instruction_is_attributed_alike() {
    require_kvm!();
    for mode in modes("every_retired_instruction_is_attributed_alike") {
        let [steps, blocks] = ENGINES.map(|engine| {
            let out = tmp(&format!("ref-{mode}-{engine}.json"));
            let args = ["record", "--backend", "exact", "--reference", "--native", mode, "--exact-engine", engine];
            let o = perfvm(&[&args[..], &["-o", &out, "ftest"]].concat());
            assert_eq!(code(&o), 0, "{}", stderr(&o));
            let mut by_ip: BTreeMap<u64, u64> = BTreeMap::new();
            for (_, ip, period) in samples(&out) {
                *by_ip.entry(ip).or_default() += period;
            }
            by_ip
        });
        assert!(steps.len() > 100, "{}", steps.len());
        assert_eq!(steps, blocks, "--native {mode}: per-address retired instructions");
    }
}

#[test]
#[ignore = "slow tier: ftest stepped eight times over (.ci/run runs it with --ignored)"]
fn sampled_pmis_land_on_the_same_instructions() {
    require_kvm!();
    for mode in modes("sampled_pmis_land_on_the_same_instructions") {
        for events in ["instructions", "branches"] {
            let [steps, blocks] = ENGINES.map(|engine| {
                let out = tmp(&format!("sampled-{mode}-{events}-{engine}.json"));
                let args = ["record", "--backend", "exact", "-e", events, "-c", "997", "--native", mode];
                let o = perfvm(&[&args[..], &["--exact-engine", engine, "-o", &out, "ftest"]].concat());
                assert_eq!(code(&o), 0, "{}", stderr(&o));
                samples(&out)
            });
            assert!(steps.len() > 100, "{events}: {}", steps.len());
            assert_eq!(steps, blocks, "--native {mode}, {events}: every PMI at the same instruction");
        }
    }
}

/// The console without what follows the TSC (reference cycles, RDTSC deltas).
fn untimed(out: &str) -> String {
    out.lines().filter(|l| !l.contains("ref-cycles") && !l.contains("RDTSC") && !l.contains("tsc=")).collect()
}

#[test]
fn conformance_guests_agree() {
    require_kvm!();
    for mode in modes("conformance_guests_agree") {
        for (guest, extra) in [("pmu_arch", &[][..]), ("pmu_amd", &["--cpu-vendor", "amd"][..])] {
            let args =
                [&["run", guest, "--backend", "exact", "--native", mode, "--timeout", "300"][..], extra].concat();
            let [steps, blocks] = both(&args, |o| {
                assert_eq!(code(o), 0, "{guest} --native {mode}: {}\n{}", stdout(o), stderr(o));
                stdout(o)
            });
            assert!(steps.contains(" passed, 0 failed"), "{steps}");
            assert_eq!(untimed(&steps), untimed(&blocks), "{guest} --native {mode}");
        }
    }
}

#[test]
fn levels_agree() {
    require_kvm!();
    let evs = "instructions,instructions:k,instructions:u,branches,branches:k,branches:u";
    for mode in modes("levels_agree") {
        let args = ["stat", "--backend", "exact", "--counters", "8", "--json", "--native", mode, "-e", evs, "hello"];
        let [steps, blocks] = both(&args, |o| counts(&json(o)));
        assert_eq!(steps, blocks, "--native {mode}");
    }
}

#[test]
fn the_block_engine_runs_blocks_where_breakpoints_stop_the_guest() {
    require_kvm!();
    let o =
        perfvm(&["stat", "--backend", "exact", "--exact-engine", "blocks", "--stats", "-e", "instructions", "ftest"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    let blocks = err.lines().find(|l| l.trim_start().starts_with("blocks "));
    if vmm::host::caps().stops_at_breakpoints() {
        let line = blocks.unwrap_or_else(|| panic!("{err}"));
        assert!(line.contains(" 0 lost, 0 not as run ahead"), "{line}");
        // The path is run ahead through branches: ftest's main loop (~220 instructions a
        // pass) in a block or two per pass, not one per branch (~6.5 instructions).
        let words: Vec<&str> = line.split_whitespace().collect();
        let n = |i: usize| words[i].trim_start_matches('(').parse::<f64>().unwrap_or_else(|_| panic!("{line}"));
        let (blocks, insns) = (n(1), n(2));
        assert!(insns / blocks > 50.0, "{insns} instructions in {blocks} blocks: {line}");
    } else {
        assert!(blocks.is_none(), "stepped where breakpoints do not stop the guest: {err}");
    }
}
