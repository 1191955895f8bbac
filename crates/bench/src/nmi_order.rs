//! Suite `nmi-order` (seed 002): entries cancelled because a PMI turned up after the NMI
//! step, legacy request order vs ours, under PMI-heavy sampling plus a host NMI source.

use super::{config, mode_name, pmu, sample_cycles, Bench, NATIVE_WORK_SCALE};
use perfvm::Failure;
use pmu::Policy;
use profile::measure::{fmt, Summary};
use profile::table::{Cell, Column, Table};
use serde_json::{json, Value};
use std::time::Duration;
use vmm::config::BackendKind;
use vmm::host::pvm::native::NativeMode;
use vmm::host::runs_at_full_speed;
use vmm::vstate::requests::RequestOrder;

pub fn run(b: &Bench) -> Result<(String, Value), Failure> {
    // A PMI every 0.5 ms of guest cycles, an NMI from the host every 1 ms.
    let hz = 2000;
    let work = if b.quick { 1 } else { 3 };
    let native = b.modes.iter().any(|m| *m != NativeMode::Off);
    let mut table = Table::new(&[
        Column::left("request order", 22),
        Column::left("mode", 8),
        Column::right("PMIs", 8),
        Column::right("NMIs", 10),
        Column::right("cancelled", 12),
        Column::right("per PMI", 14),
        Column::right("per 10 s", 16),
    ]);
    for (label, order) in [("legacy (NMI first)", RequestOrder::Legacy), ("ours (PMI first)", RequestOrder::PmiFirst)] {
        for &mode in &b.modes {
            let (mut pmis, mut nmis, mut cancelled, mut per_pmi, mut per_10s) =
                (vec![], vec![], vec![], vec![], vec![]);
            let mut cfg = config("ftest", "", pmu(BackendKind::Perf, Policy::default()));
            cfg.request_order = order;
            cfg.nmi_interval = Some(Duration::from_millis(1));
            let scale = if runs_at_full_speed(&cfg, mode) { NATIVE_WORK_SCALE } else { 1 };
            cfg.cmdline = sample_cycles(hz, &(work * scale).to_string());
            for _ in 0..b.reps {
                let Some(r) = b.run(&cfg, mode)? else { break };
                let q = r.stats.requests;
                pmis.push(q.pmi_nmis as f64);
                nmis.push(q.external_nmis as f64);
                cancelled.push(q.cancelled_entries as f64);
                per_pmi.push(q.extra_entries_per_pmi());
                per_10s.push(q.cancelled_entries as f64 * 1e10 / r.stats.wall_ns.max(1) as f64);
            }
            let s = [&pmis, &nmis, &cancelled, &per_pmi, &per_10s].map(|v| Summary::of(v));
            table.push(vec![
                Cell::label("order", label),
                Cell::label("mode", mode_name(mode)),
                Cell::new("pmis", s[0], fmt(s[0].median)),
                Cell::new("external_nmis", s[1], fmt(s[1].median)),
                Cell::new("cancelled_entries", s[2], fmt(s[2].median)),
                Cell::new("per_pmi", s[3], format!("{:.3}", s[3].median)),
                Cell::new("per_10s", s[4], fmt(s[4].median)),
            ]);
        }
    }
    let text = format!(
        "nmi-order — ftest sampled {hz} times per second of guest cycles plus a host NMI every 1 ms, {} runs each{}\n\n{}",
        b.reps,
        if native { format!("; natively ftest does {NATIVE_WORK_SCALE}x the work") } else { String::new() },
        table.text()
    );
    Ok((text, json!({"rows": table.json(), "sample_hz": hz, "reps": b.reps, "native_work_scale": NATIVE_WORK_SCALE})))
}
