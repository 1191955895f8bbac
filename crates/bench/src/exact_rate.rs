//! Suite `exact`: how fast the exact backend counts, by engine. ftest counting instructions
//! and branches with the agent, single-stepped (`--exact-engine steps`) and run in blocks
//! (`blocks`, the path run ahead in the VMM), in each mode: instructions per second of the
//! vCPU thread's CPU time (what the VMM spends on each instruction included, whatever else
//! the host runs), and the counts, which must be the same.

use super::{config, mode_name, Bench};
use perfvm::Failure;
use profile::agent::Order;
use profile::events;
use profile::measure::{fmt, per_second, Summary};
use profile::table::{Cell, Column, Table};
use serde_json::{json, Value};
use vmm::config::{BackendKind, ExactEngine, PmuSettings};

/// ftest's units: ~10^6 instructions each (stepped at ~10^5 a second).
fn units(quick: bool) -> u64 {
    if quick {
        1
    } else {
        3
    }
}

const ENGINES: [(ExactEngine, &str); 2] = [(ExactEngine::Steps, "steps"), (ExactEngine::Blocks, "blocks")];

pub fn run(b: &Bench) -> Result<(String, Value), Failure> {
    let order = Order::Stat { events: vec![events::by_raw(0x00c0), events::by_raw(0x00c4)], per_task: false };
    let cmdline = order.cmdline(pmu::Vendor::Intel, &[units(b.quick).to_string()], "");
    let mut table = Table::new(&[
        Column::left("mode", 10),
        Column::left("engine", 8),
        Column::right("instructions", 14),
        Column::right("branches", 12),
        Column::right("instr/s", 12),
        Column::right("vs steps", 10),
    ]);
    for &mode in &b.modes {
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); ENGINES.len()];
        let mut counts: Vec<Option<(u64, u64)>> = vec![None; ENGINES.len()];
        for _ in 0..b.reps {
            for (i, &(engine, _)) in ENGINES.iter().enumerate() {
                let pmu = PmuSettings { backend: BackendKind::Exact, exact_engine: engine, ..Default::default() };
                let mut cfg = config("ftest", &cmdline, Some(pmu));
                cfg.timeout = Some(std::time::Duration::from_secs(1800));
                let Some(r) = b.run(&cfg, mode)? else { continue };
                let count = |raw: u16| r.agent.counts.iter().find(|c| c.event == raw).map(|c| c.value);
                let (Some(insns), Some(branches)) = (count(0x00c0), count(0x00c4)) else {
                    return Err(Failure::failed(format!("ftest counted nothing ({})", mode_name(mode))));
                };
                // The same guest counts the same on every run and engine.
                match counts[i].replace((insns, branches)) {
                    Some(seen) if seen != (insns, branches) => {
                        return Err(Failure::failed(format!(
                            "counts differ run to run: {seen:?} then {:?}",
                            (insns, branches)
                        )))
                    }
                    _ => {}
                }
                let thread_ns: u64 = r.vcpu_counts.iter().map(|c| c.thread_ns).sum();
                rates[i].push(insns as f64 / (thread_ns.max(1) as f64 / 1e9));
            }
        }
        if counts[0].is_some() && counts[1].is_some() && counts[0] != counts[1] {
            return Err(Failure::failed(format!("the engines count differently: {:?} and {:?}", counts[0], counts[1])));
        }
        let steps = Summary::of(&rates[0]).median;
        for (i, &(_, name)) in ENGINES.iter().enumerate() {
            let rate = Summary::of(&rates[i]);
            let (insns, branches) = counts[i].unwrap_or_default();
            let vs = rate.median / steps;
            table.push(vec![
                Cell::new("mode", mode_name(mode), mode_name(mode)),
                Cell::new("engine", name, name),
                Cell::new("instructions", insns, fmt(insns as f64)),
                Cell::new("branches", branches, fmt(branches as f64)),
                Cell::new("instr_per_s", rate, per_second(rate.median)),
                Cell::new("vs_steps", vs, format!("{}x", fmt(vs))),
            ]);
        }
    }
    let text = format!(
        "Exact counting rate (ftest {} units, instructions and branches; per second of vCPU thread CPU time)\n{}",
        units(b.quick),
        table.text()
    );
    Ok((text, json!({ "rows": table.json() })))
}
