//! Suite `ctxsw` (seed 000 table 5, seed 003's 2-task test): a guest context switch with
//! per-task counting (perf attached to the tasks) under legacy and reuse, and without.

use super::{config, count_cycles, mode_name, tsc, value, Bench};
use crate::Failure;
use pmu::Policy;
use profile::measure::{fmt, ratio, Summary};
use profile::table::{Cell, Column, Table};
use serde_json::{json, Value};
use vmm::vm::BackendKind;

struct Config<'a> {
    label: &'static str,
    cmdline: &'a str,
    policy: Policy,
}

pub fn run(b: &Bench) -> Result<(String, Value), Failure> {
    let plain = if b.quick { "100" } else { "200" };
    let counted = count_cycles(true, plain);
    let configs = [
        Config { label: "no perf attached", cmdline: plain, policy: Policy::default() },
        Config { label: "perf attached, legacy", cmdline: &counted, policy: Policy::Legacy },
        Config { label: "perf attached, reuse", cmdline: &counted, policy: Policy::default() },
    ];
    // [mode][configuration][switch, sched-out, sched-in, VMM PMU time]
    let mut khz = 0;
    let mut per: Vec<Vec<[Vec<f64>; 4]>> =
        b.modes.iter().map(|_| (0..configs.len()).map(|_| Default::default()).collect()).collect();
    for _ in 0..b.reps {
        for (&mode, per) in b.modes.iter().zip(&mut per) {
            for (c, v) in configs.iter().zip(per.iter_mut()) {
                // MSR programming (no PV page), to isolate what the policy changes.
                let settings = vmm::vm::PmuSettings {
                    backend: BackendKind::Perf,
                    policy: c.policy,
                    pv: false,
                    ..Default::default()
                };
                let Some(report) = b.run(&config("ctxsw", c.cmdline, Some(settings)), mode)? else { continue };
                let switches = value(&report, "ctxsw.switches").unwrap_or(0.0).max(1.0);
                let tsc = tsc(&report)?;
                let us = |cycles: f64| tsc.cycles_to_us(cycles);
                khz = tsc.khz();
                let vmm_ns = report.stats.pmu.as_ref().map_or(0.0, |p| p.vmm.handle_ns as f64);
                v[0].push(us(value(&report, "ctxsw.total_cycles").unwrap_or(f64::NAN) / switches));
                v[1].push(us(value(&report, "ctxsw.sched_out_cycles").unwrap_or(f64::NAN) / switches));
                v[2].push(us(value(&report, "ctxsw.sched_in_cycles").unwrap_or(f64::NAN) / switches));
                v[3].push(vmm_ns / switches / 1000.0);
            }
        }
    }
    let s: Vec<Vec<[Summary; 4]>> =
        per.iter().map(|m| m.iter().map(|v| v.each_ref().map(|v| Summary::of(v))).collect()).collect();
    let mut table = Table::new(&[
        Column::left("configuration", 26),
        Column::left("mode", 8),
        Column::right("switch", 12),
        Column::right("sched-out", 12),
        Column::right("sched-in", 12),
        Column::right("VMM PMU time", 16),
    ]);
    let us = |key, s: Summary| Cell::new(key, s, format!("{} µs", fmt(s.median)));
    for (i, c) in configs.iter().enumerate() {
        for (&mode, s) in b.modes.iter().zip(&s) {
            let m = &s[i];
            table.push(vec![
                Cell::label("configuration", c.label),
                Cell::label("mode", mode_name(mode)),
                us("switch_us", m[0]),
                us("sched_out_us", m[1]),
                us("sched_in_us", m[2]),
                us("vmm_pmu_us", m[3]),
            ]);
        }
    }
    let mut text = format!(
        "ctxsw — guest context switch between 2 tasks, perf backend, MSR programming, {} runs each (median µs per switch)\n\n{}\n",
        b.reps,
        table.text()
    );
    for (&mode, s) in b.modes.iter().zip(&s) {
        text.push_str(&format!(
            "legacy/reuse, {}: switch {}, sched-in {}, sched-out {}, VMM PMU time {}\n",
            mode_name(mode),
            ratio(s[1][0].median, s[2][0].median),
            ratio(s[1][2].median, s[2][2].median),
            ratio(s[1][1].median, s[2][1].median),
            ratio(s[1][3].median, s[2][3].median)
        ));
    }
    Ok((text, json!({"rows": table.json(), "reps": b.reps, "tsc_khz": khz})))
}
