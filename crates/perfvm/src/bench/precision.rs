//! Suite `precision` (seed 000, "vPMU Precision Comparison"): ftest's per-function profile
//! from sampling compared with the exact reference (every retired instruction attributed),
//! as total variation distance; samples per second of guest run time, legacy vs reuse; and
//! the cost of sampling at the default rate.

use super::stats::{fmt, Summary};
use super::{config, pmu, tsc_khz};
use crate::cli::DEFAULT_RECORD_FREQ;
use crate::events;
use crate::profile::tvd;
use crate::record::{record, RecordFile};
use crate::Failure;
use pmu::Policy;
use serde_json::{json, Value};
use std::time::Instant;
use vmm::vm::BackendKind;

fn profile(
    backend: BackendKind,
    policy: Policy,
    event: &str,
    period: u64,
    reference: bool,
) -> Result<RecordFile, Failure> {
    let mut cfg = config("ftest", "", pmu(backend, policy));
    cfg.capture_console = true;
    let (file, code) = record(cfg, "ftest", &[], events::parse(event).unwrap(), period, reference, Instant::now())?;
    if code != 0 {
        return Err(Failure { code: 1, message: format!("ftest record ended with {code}") });
    }
    Ok(file)
}

fn shares(f: &RecordFile) -> Value {
    let mut v: Vec<(String, f64)> = f.profile.shares().into_iter().filter(|(_, s)| *s >= 0.005).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    json!(v)
}

pub fn run(reps: usize, quick: bool) -> Result<(String, Value), Failure> {
    let khz = tsc_khz()?;
    let default_period = khz * 1000 / DEFAULT_RECORD_FREQ;
    let fast_period = khz * 1000 / 2000;
    let reference = profile(BackendKind::Exact, Policy::default(), "instructions", 1, true)?;
    let exact = profile(BackendKind::Exact, Policy::default(), "instructions", 997, false)?;
    let mut text =
        String::from("precision — ftest per-function shares vs the exact reference (TVD: 0 same, 1 disjoint)\n\n");
    text.push_str(&format!("{:<46} {:>10} {:>8}\n", "profile", "samples", "TVD"));
    let mut rows = vec![
        json!({"profile": "reference: exact, every retired instruction", "samples": reference.samples, "tvd": 0.0, "shares": shares(&reference)}),
    ];
    text.push_str(&format!("{:<46} {:>10} {:>8}\n", "reference (exact, every instruction)", reference.samples, "0"));
    let t = tvd(&reference.profile, &exact.profile);
    text.push_str(&format!("{:<46} {:>10} {:>8.4}\n", "record -e instructions -c 997, exact", exact.samples, t));
    rows.push(json!({"profile": "record -e instructions -c 997 --backend exact", "samples": exact.samples, "tvd": t, "shares": shares(&exact)}));
    for (label, period) in [
        (format!("record -e cycles -F {DEFAULT_RECORD_FREQ}, perf"), default_period),
        ("record -e cycles -F 2000, perf".to_owned(), fast_period),
    ] {
        let mut tvds = Vec::new();
        let mut samples = Vec::new();
        for _ in 0..reps.max(1) {
            let f = profile(BackendKind::Perf, Policy::default(), "cycles", period, false)?;
            tvds.push(tvd(&reference.profile, &f.profile));
            samples.push(f.samples as f64);
        }
        let (t, n) = (Summary::of(&tvds), Summary::of(&samples));
        text.push_str(&format!(
            "{:<46} {:>10} {:>8.4}  (median of {}, {:.4}–{:.4})\n",
            label,
            fmt(n.median),
            t.median,
            t.n,
            t.min,
            t.max
        ));
        rows.push(json!({"profile": label, "samples": n, "tvd": t}));
    }
    text.push_str("\nshares (reference | exact sampled):\n");
    let (rs, es) = (reference.profile.shares(), exact.profile.shares());
    let mut syms: Vec<_> = rs.iter().filter(|(_, v)| **v >= 0.005).collect();
    syms.sort_by(|a, b| b.1.total_cmp(a.1));
    for (s, v) in syms {
        text.push_str(&format!(
            "  {:<12} {:>6.2}% | {:>6.2}%\n",
            s,
            100.0 * v,
            100.0 * es.get(s).copied().unwrap_or(0.0)
        ));
    }

    // Samples in the same guest run time, and what sampling costs, on the perf backend.
    let mut per_policy = Vec::new();
    for (label, policy) in [("legacy", Policy::Legacy), ("reuse", Policy::default())] {
        let mut rate = Vec::new();
        for _ in 0..reps.max(1) {
            let f = profile(BackendKind::Perf, policy, "cycles", fast_period, false)?;
            rate.push(f.samples as f64 / (f.workload_ns.unwrap_or(f.wall_ns) as f64 / 1e9));
        }
        per_policy.push((label, Summary::of(&rate)));
    }
    text.push_str(&format!(
        "\nsamples per second of guest run time (record -e cycles -F 2000, perf): legacy {} | reuse {}\n",
        fmt(per_policy[0].1.median),
        fmt(per_policy[1].1.median)
    ));
    let mut plain = Vec::new();
    let mut sampled = Vec::new();
    let runs = if quick { 3 } else { reps.max(5) };
    for _ in 0..runs {
        let mut cfg = config("ftest", "stat -e 0x003c --", pmu(BackendKind::Perf, Policy::default()));
        cfg.capture_console = true;
        let r = super::run_config(&cfg)?;
        plain.push(r.agent.workload_ns().unwrap_or(r.stats.wall_ns) as f64);
        let f = profile(BackendKind::Perf, Policy::default(), "cycles", default_period, false)?;
        sampled.push(f.workload_ns.unwrap_or(f.wall_ns) as f64);
    }
    let (p, s) = (Summary::of(&plain), Summary::of(&sampled));
    let overhead = 100.0 * (s.median / p.median - 1.0);
    text.push_str(&format!(
        "sampling overhead at the default rate (-F {DEFAULT_RECORD_FREQ}): ftest {:.3} s counting vs {:.3} s sampling = {:+.2}% ({} runs each)\n",
        p.median / 1e9,
        s.median / 1e9,
        overhead,
        runs
    ));
    Ok((
        text,
        json!({"rows": rows, "samples_per_second": {"legacy": per_policy[0].1, "reuse": per_policy[1].1},
               "overhead_percent": overhead, "plain_ns": p, "sampled_ns": s, "default_period": default_period}),
    ))
}
