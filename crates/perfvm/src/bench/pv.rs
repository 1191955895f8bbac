//! Suite `pv` (seed 003): per-task counting across guest context switches, programming the
//! counters through the paravirtual page (one doorbell) vs plain MSRs; a 2-task switch and a
//! ring of N tasks; exits to program 8 counters.

use super::stats::{fmt, ratio, Summary};
use super::{config, count_cycles, mode_name, tsc, value, Bench};
use crate::Failure;
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
    let mut rows = Vec::new();
    let sizes: &[u32] = if b.quick { &[2, 8] } else { &[2, 4, 8, 16, 32, 64] };
    text.push_str(&format!(
        "\n{:<22} {:<8} {:>16} {:>16} {:>10} {:>14} {:>14}\n",
        "workload", "mode", "MSR µs/switch", "PV µs/switch", "MSR/PV", "MSR exits/sw", "PV exits/sw"
    ));
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
            text.push_str(&format!(
                "{:<22} {:<8} {:>16} {:>16} {:>10} {:>14} {:>14}\n",
                label,
                mode_name(mode),
                fmt(s[0].median),
                fmt(s[1].median),
                ratio(s[0].median, s[1].median),
                fmt(s[2].median),
                fmt(s[3].median)
            ));
            rows.push(json!({"workload": label, "mode": mode_name(mode), "msr_us_per_switch": s[0], "pv_us_per_switch": s[1], "msr_exits_per_switch": s[2], "pv_exits_per_switch": s[3]}));
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
    Ok((text, json!({"exits_per_8_counter_programming": programming, "rows": rows, "reps": b.reps})))
}
