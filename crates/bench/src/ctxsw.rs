//! Suite `ctxsw` (seed 000 table 5, seed 003's 2-task test): a guest context switch with
//! per-task counting (perf attached to the tasks) under legacy and reuse, and without.

use super::{config, count_cycles, mode_name, tsc, value, Bench};
use perfvm::Failure;
use pmu::Policy;
use profile::measure::{fmt, ratio, Summary};
use profile::table::{Cell, Column, Table};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use vmm::config::BackendKind;
use vmm::vpmu::stats::PmuOp;

/// Per guest PMU operation: the VMM's µs and host perf syscalls per switch, one per run.
type OpRuns = BTreeMap<PmuOp, (Vec<f64>, Vec<f64>)>;

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
    // [mode][configuration][switch, sched-out, sched-in, VMM PMU time, host perf syscalls,
    // PMU MSR exits] per switch
    let mut khz = 0;
    let mut per: Vec<Vec<[Vec<f64>; 6]>> =
        b.modes.iter().map(|_| (0..configs.len()).map(|_| Default::default()).collect()).collect();
    // [mode][configuration] operation -> (VMM µs, host perf syscalls) per switch, per run
    let mut by_op: Vec<Vec<OpRuns>> =
        b.modes.iter().map(|_| (0..configs.len()).map(|_| Default::default()).collect()).collect();
    for _ in 0..b.reps {
        for ((&mode, per), by_op) in b.modes.iter().zip(&mut per).zip(&mut by_op) {
            for ((c, v), by_op) in configs.iter().zip(per.iter_mut()).zip(by_op.iter_mut()) {
                // MSR programming (no PV page), to isolate what the policy changes.
                let settings = vmm::config::PmuSettings {
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
                let pmu = report.stats.pmu.as_ref();
                let vmm_ns = pmu.map_or(0.0, |p| p.vmm.handle_ns as f64);
                v[0].push(us(value(&report, "ctxsw.total_cycles").unwrap_or(f64::NAN) / switches));
                v[1].push(us(value(&report, "ctxsw.sched_out_cycles").unwrap_or(f64::NAN) / switches));
                v[2].push(us(value(&report, "ctxsw.sched_in_cycles").unwrap_or(f64::NAN) / switches));
                v[3].push(vmm_ns / switches / 1000.0);
                v[4].push(pmu.map_or(0.0, |p| p.host_syscalls as f64) / switches);
                v[5].push(pmu.map_or(0.0, |p| p.vmm.msr_exits as f64) / switches);
                for (op, t) in pmu.iter().flat_map(|p| p.vmm.ops.iter()) {
                    let (us, syscalls) = by_op.entry(op).or_default();
                    us.push(t.total_ns as f64 / switches / 1000.0);
                    syscalls.push(t.syscalls as f64 / switches);
                }
            }
        }
    }
    let s: Vec<Vec<[Summary; 6]>> =
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
    // Seed 000's row: the whole perf-attached switch. Here it is mostly the guest's own work
    // and its exits, so the row that isolates the vPMU follows: the VMM's PMU time per switch.
    let (mut seed, mut vpmu) = (Vec::new(), Vec::new());
    for (&mode, s) in b.modes.iter().zip(&s) {
        let (legacy, reuse) = (&s[1], &s[2]);
        let name = mode_name(mode);
        text.push_str(&format!(
            "seed 000's row, perf-attached switch legacy/reuse, {name}: {} (sched-in {}, sched-out {})\n",
            ratio(legacy[0].median, reuse[0].median),
            ratio(legacy[2].median, reuse[2].median),
            ratio(legacy[1].median, reuse[1].median),
        ));
        seed.push(json!({"mode": name, "legacy_over_reuse": legacy[0].median / reuse[0].median}));
    }
    for (m, (&mode, s)) in b.modes.iter().zip(&s).enumerate() {
        let (legacy, reuse) = (&s[1], &s[2]);
        let name = mode_name(mode);
        text.push_str(&format!(
            "the vPMU's share, VMM PMU time per switch legacy/reuse, {name}: {} ({} vs {} µs; {} vs {} MSR exits, {} vs {} host perf syscalls per switch)\n",
            ratio(legacy[3].median, reuse[3].median),
            fmt(legacy[3].median),
            fmt(reuse[3].median),
            fmt(legacy[5].median),
            fmt(reuse[5].median),
            fmt(legacy[4].median),
            fmt(reuse[4].median),
        ));
        for (policy, i) in [("legacy", 1), ("reuse", 2)] {
            text.push_str(&format!("  {policy:<6} per switch:"));
            for (op, (us, syscalls)) in &by_op[m][i] {
                let (us, syscalls) = (Summary::of(us).median, Summary::of(syscalls).median);
                text.push_str(&format!(" {} {} µs ({} syscalls);", op.label(), fmt(us), fmt(syscalls)));
            }
            text.push('\n');
        }
        vpmu.push(json!({"mode": name, "legacy_over_reuse": legacy[3].median / reuse[3].median,
                         "legacy_us": legacy[3], "reuse_us": reuse[3],
                         "legacy_syscalls": legacy[4], "reuse_syscalls": reuse[4],
                         "legacy_msr_exits": legacy[5], "reuse_msr_exits": reuse[5]}));
    }
    Ok((text, json!({"rows": table.json(), "reps": b.reps, "tsc_khz": khz, "seed_000": seed, "vmm_pmu_time": vpmu})))
}
