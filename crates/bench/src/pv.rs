//! Suite `pv` (seed 003): per-task counting across guest context switches, programming the
//! counters through the paravirtual page (one doorbell) vs plain MSRs; a 2-task switch and a
//! ring of N tasks, each with MSRs, a PV publish per switch and the default PV switch that
//! shares a publish over the tasks that ran; exits to program 8 counters.

use super::{config, count_cycles, mode_name, tsc, value, Bench};
use perfvm::Failure;
use profile::measure::{fmt, ratio, Summary};
use profile::table::{Cell, Column, Table};
use serde_json::{json, Value};
use vmm::config::PmuSettings;

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
        Column::left("workload", 18),
        Column::left("mode", 8),
        Column::right("MSR µs/sw", 11),
        Column::right("PV-1 µs/sw", 11),
        Column::right("PV µs/sw", 10),
        Column::right("MSR/PV-1", 9),
        Column::right("MSR/PV", 8),
        Column::right("MSR ex/sw", 10),
        Column::right("PV-1 ex/sw", 11),
        Column::right("PV ex/sw", 9),
    ]);
    // Per-task switching three ways: MSR programming (4 exits), the PV page with a publish
    // at every switch (`--pv-publish-us 0`: one doorbell), and the default, which shares
    // each publish (at most one per ms) over the tasks that ran (no exit per switch).
    // Exits per switch are the difference of a run at half the rounds (the console's and
    // the agent's fixed exits cancel out).
    let ways: [(&str, bool, Option<u32>); 3] = [("msr", false, None), ("pv1", true, Some(0)), ("pv", true, None)];
    let mut line =
        |label: String, guest: &str, args: &dyn Fn(bool) -> String, total_key: &str| -> Result<(), Failure> {
            for &mode in &b.modes {
                let mut per: [Vec<f64>; 6] = Default::default();
                for _ in 0..b.reps {
                    for (k, &(_, pv, publish_us)) in ways.iter().enumerate() {
                        let order = |half: bool| {
                            let line = count_cycles(true, &args(half));
                            match publish_us {
                                Some(us) => line.replacen(" -p -- ", &format!(" -p --pv-publish-us {us} -- "), 1),
                                None => line,
                            }
                        };
                        let Some(full) = b.run(&config(guest, &order(false), settings(pv, 4)), mode)? else { continue };
                        let Some(half) = b.run(&config(guest, &order(true), settings(pv, 4)), mode)? else { continue };
                        let switches = |r: &vmm::RunReport| value(r, &format!("{guest}.switches")).unwrap_or(0.0);
                        let sw = switches(&full).max(1.0);
                        per[k].push(tsc(&full)?.cycles_to_us(value(&full, total_key).unwrap_or(f64::NAN)) / sw);
                        let d_sw = switches(&full) - switches(&half);
                        let d_exits = full.stats.total_exits as f64 - half.stats.total_exits as f64;
                        per[k + 3].push(if d_sw > 0.0 { (d_exits / d_sw).max(0.0) } else { f64::NAN });
                    }
                }
                let s = per.each_ref().map(|v| Summary::of(v));
                table.push(vec![
                    Cell::label("workload", label.clone()),
                    Cell::label("mode", mode_name(mode)),
                    Cell::new("msr_us_per_switch", s[0], fmt(s[0].median)),
                    Cell::new("pv_publish_each_us_per_switch", s[1], fmt(s[1].median)),
                    Cell::new("pv_us_per_switch", s[2], fmt(s[2].median)),
                    Cell::text(ratio(s[0].median, s[1].median)),
                    Cell::text(ratio(s[0].median, s[2].median)),
                    Cell::new("msr_exits_per_switch", s[3], format!("{:.2}", s[3].median)),
                    Cell::new("pv_publish_each_exits_per_switch", s[4], format!("{:.2}", s[4].median)),
                    Cell::new("pv_exits_per_switch", s[5], format!("{:.2}", s[5].median)),
                ]);
            }
            Ok(())
        };
    let rounds = if b.quick { 100 } else { 200 };
    let halve = |n: u32, half: bool| if half { n / 2 } else { n };
    line("2-task switch".into(), "ctxsw", &|half| halve(rounds, half).to_string(), "ctxsw.total_cycles")?;
    for &n in sizes {
        let rounds = if b.quick { 20 } else { 50 };
        line(
            format!("ring of {n} tasks"),
            "ring",
            &|half| format!("{n} {}", halve(rounds, half)),
            "ring.total_cycles",
        )?;
    }
    text.push('\n');
    text.push_str(&table.text());
    Ok((text, json!({"exits_per_8_counter_programming": programming, "rows": table.json(), "reps": b.reps})))
}
