//! Suite `pv` (seed 003): per-task counting across guest context switches, programming the
//! counters through the paravirtual page (one doorbell) vs plain MSRs; a 2-task switch and a
//! ring of N tasks; exits to program 8 counters.

use super::{config, count_cycles, mode_name, tsc, value, Bench};
use crate::Failure;
use profile::measure::{fmt, ratio, Summary};
use profile::table::{Cell, Column, Table};
use serde_json::{json, Value};
use vmm::vm::PmuSettings;

fn settings(pv: bool, counters: u8) -> Option<PmuSettings> {
    Some(PmuSettings { pv, gp_counters: counters, ..Default::default() })
}

pub fn run(b: &Bench) -> Result<(String, Value), Failure> {
    let mut text = String::from("pv — guest per-task counting, PV page vs MSRs (perf backend)\n\n");
    // Exits to program 8 counters: the difference of two runs with the same console output.
    let mut programming = serde_json::Map::new();
    for &mode in &b.modes {
        let exits = |how: &str, rounds: u32| -> Result<Option<f64>, Failure> {
            let r = b.run(&config("pvtest", &format!("prog {how} {rounds}"), settings(true, 8)), mode)?;
            Ok(r.map(|r| r.stats.total_exits as f64))
        };
        let per = |how| -> Result<f64, Failure> {
            Ok(match (exits(how, 40)?, exits(how, 20)?) {
                (Some(a), Some(b)) => (a - b) / 20.0,
                _ => f64::NAN,
            })
        };
        let (msr, pv) = (per("msr")?, per("pv")?);
        text.push_str(&format!("exits to program 8 counters, {}: MSRs {msr} | PV page {pv}\n", mode_name(mode)));
        programming.insert(mode_name(mode).into(), json!({"msr": msr, "pv": pv}));
    }
    let sizes: &[u32] = if b.quick { &[2, 8] } else { &[2, 4, 8, 16, 32, 64] };
    let mut table = Table::new(&[
        Column::left("workload", 22),
        Column::left("mode", 8),
        Column::right("MSR µs/switch", 16),
        Column::right("PV µs/switch", 16),
        Column::right("MSR/PV", 10),
        Column::right("MSR exits/sw", 14),
        Column::right("PV exits/sw", 14),
    ]);
    let mut line = |label: String, guest: &str, args: String, total_key: &str| -> Result<(), Failure> {
        for &mode in &b.modes {
            let mut per = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
            for _ in 0..b.reps {
                for (k, pv) in [(0, false), (1, true)] {
                    let cfg = config(guest, &count_cycles(true, &args), settings(pv, 4));
                    let Some(r) = b.run(&cfg, mode)? else { continue };
                    let switches = value(&r, &format!("{guest}.switches")).unwrap_or(0.0).max(1.0);
                    per[k].push(tsc(&r)?.cycles_to_us(value(&r, total_key).unwrap_or(f64::NAN)) / switches);
                    per[k + 2].push(r.stats.total_exits as f64 / switches);
                }
            }
            let s = per.each_ref().map(|v| Summary::of(v));
            table.push(vec![
                Cell::label("workload", label.clone()),
                Cell::label("mode", mode_name(mode)),
                Cell::new("msr_us_per_switch", s[0], fmt(s[0].median)),
                Cell::new("pv_us_per_switch", s[1], fmt(s[1].median)),
                Cell::text(ratio(s[0].median, s[1].median)),
                Cell::new("msr_exits_per_switch", s[2], fmt(s[2].median)),
                Cell::new("pv_exits_per_switch", s[3], fmt(s[3].median)),
            ]);
        }
        Ok(())
    };
    line("2-task switch".into(), "ctxsw", if b.quick { "100".into() } else { "200".into() }, "ctxsw.total_cycles")?;
    for &n in sizes {
        line(
            format!("ring of {n} tasks"),
            "ring",
            format!("{n} {}", if b.quick { 20 } else { 50 }),
            "ring.total_cycles",
        )?;
    }
    text.push('\n');
    text.push_str(&table.text());
    Ok((text, json!({"exits_per_8_counter_programming": programming, "rows": table.json(), "reps": b.reps})))
}
