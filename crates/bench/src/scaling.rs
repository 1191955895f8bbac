//! Suite `scaling`: how the VMM cost of guest PMU operations grows with the number of
//! counters (1..8) and of vCPUs (1..2), legacy vs reuse (pmuops, perf backend).

use super::{mode_name, Bench};
use perfvm::Failure;
use pmu::Policy;
use profile::measure::{fmt, ratio, Summary};
use profile::table::{Cell, Column, Table};
use serde_json::{json, Value};
use vmm::config::PmuSettings;
use vmm::host::pvm::native::NativeMode;
use vmm::vpmu::stats::PmuOp;

/// Median over runs of the mean VMM ns per GLOBAL_CTRL enable, and per PMU MSR exit.
fn measure(
    b: &Bench,
    mode: NativeMode,
    (counters, vcpus): (u8, u32),
    policy: Policy,
    reps: usize,
    rounds: u32,
) -> Result<(Summary, Summary), Failure> {
    let (mut enable, mut per_exit) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let mut cfg = super::config(
            "pmuops",
            &format!("{rounds} 1"),
            Some(PmuSettings { gp_counters: counters, policy, ..Default::default() }),
        );
        cfg.vcpus = vcpus;
        let Some(r) = b.run(&cfg, mode)? else { break };
        let p = r.stats.pmu.as_ref().expect("PMU");
        if let Some(t) = p.vmm.ops.get(&PmuOp::GlobalCtrlEnable) {
            enable.push(t.mean_ns());
        }
        per_exit.push(p.vmm.handle_ns as f64 / p.vmm.msr_exits.max(1) as f64);
    }
    Ok((Summary::of(&enable), Summary::of(&per_exit)))
}

pub fn run(b: &Bench) -> Result<(String, Value), Failure> {
    let rounds = if b.quick { 30 } else { 100 };
    let reps = b.reps.min(3);
    let mut table = Table::new(&[
        Column::left("counters x vCPUs", 18),
        Column::left("mode", 8),
        Column::right("legacy", 14),
        Column::right("reuse", 14),
        Column::right("legacy/reuse", 13),
    ]);
    let counters: &[u8] = if b.quick { &[1, 4, 8] } else { &[1, 2, 3, 4, 5, 6, 7, 8] };
    let mut grid: Vec<(u8, u32)> = counters.iter().map(|&c| (c, 1)).collect();
    grid.push((4, 2));
    for (c, v) in grid {
        for &mode in &b.modes {
            let (l, _) = measure(b, mode, (c, v), Policy::Legacy, reps, rounds)?;
            let (r, _) = measure(b, mode, (c, v), Policy::default(), reps, rounds)?;
            table.push(vec![
                Cell::text(format!("{c} x {v}")),
                Cell::json("counters", c),
                Cell::json("vcpus", v),
                Cell::label("mode", mode_name(mode)),
                Cell::new("legacy_ns", l, format!("{} ns", fmt(l.median))),
                Cell::new("reuse_ns", r, format!("{} ns", fmt(r.median))),
                Cell::text(ratio(l.median, r.median)),
            ]);
        }
    }
    let text = format!(
        "scaling — VMM ns per GLOBAL_CTRL enable (all counters on), pmuops {rounds} rounds, {reps} runs each\n\n{}",
        table.text()
    );
    Ok((text, json!({"rows": table.json(), "rounds": rounds, "reps": reps})))
}
