//! Suite `pmu-ops` (seed 000, tables 1-4): what each guest PMU operation costs the VMM under
//! the legacy policy (re-create host events on every write) and under reuse, plus the
//! guest-measured PMI handler, from the `pmuops` guest on the perf backend.

use super::stats::{fmt, ratio, Summary};
use super::{console_value, run_guest};
use crate::Failure;
use pmu::Policy;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use vmm::vm::{BackendKind, PmuSettings};
use vmm::vpmu::PmuOp;

/// Operations in table order, with their labels.
const OPS: &[(PmuOp, &str)] = &[
    (PmuOp::EventselWrite, "EVENTSEL write"),
    (PmuOp::FixedCtrlWrite, "FIXED_CTR_CTRL write"),
    (PmuOp::GlobalCtrlEnable, "GLOBAL_CTRL enable"),
    (PmuOp::GlobalCtrlDisable, "GLOBAL_CTRL disable"),
    (PmuOp::CounterRead, "counter read"),
    (PmuOp::PmiDelivery, "PMI delivery (VMM)"),
];

#[derive(Default)]
struct PolicyRuns {
    means: BTreeMap<PmuOp, Vec<f64>>,
    maxes: BTreeMap<PmuOp, Vec<f64>>,
    handler_mean: Vec<f64>,
    handler_max: Vec<f64>,
    created: Vec<f64>,
    syscalls: Vec<f64>,
}

pub fn run(reps: usize, quick: bool) -> Result<(String, Value), Failure> {
    let cmdline = if quick { "100 20" } else { "300 60" };
    let policies = [("legacy", Policy::Legacy), ("reuse", Policy::default())];
    let mut runs: [PolicyRuns; 2] = Default::default();
    let mut backend_detail = String::new();
    for _ in 0..reps {
        for (i, (_, policy)) in policies.iter().enumerate() {
            let settings = PmuSettings { backend: BackendKind::Perf, policy: *policy, ..Default::default() };
            let report = run_guest("pmuops", cmdline, Some(settings))?;
            let pmu = report.stats.pmu.as_ref().expect("PMU report");
            backend_detail = pmu.backend_detail.clone();
            let r = &mut runs[i];
            for (op, _) in OPS {
                if let Some(t) = pmu.vmm.ops.get(op) {
                    r.means.entry(*op).or_default().push(t.mean_ns());
                    r.maxes.entry(*op).or_default().push(t.max_ns as f64);
                }
            }
            r.handler_mean.extend(console_value(&report, "pmuops: pmi handler", "mean_ns"));
            r.handler_max.extend(console_value(&report, "pmuops: pmi handler", "max_ns"));
            r.created.push(pmu.model.events_created as f64);
            r.syscalls.push(pmu.host_syscalls as f64);
        }
    }
    let mut text = format!(
        "pmu-ops — VMM time per guest PMU operation, perf backend ({backend_detail})\n\
         {reps} runs per policy, alternating: median of the per-run means, and the worst single operation\n\n\
         {:<24} {:>14} {:>12} {:>14} {:>12} {:>13}\n",
        "operation", "legacy mean", "legacy max", "reuse mean", "reuse max", "legacy/reuse"
    );
    let mut rows = Vec::new();
    let mut row = |label: &str, lm: Summary, lx: Summary, rm: Summary, rx: Summary| {
        text.push_str(&format!(
            "{:<24} {:>11} ns {:>9} ns {:>11} ns {:>9} ns {:>13}\n",
            label,
            fmt(lm.median),
            fmt(lx.max),
            fmt(rm.median),
            fmt(rx.max),
            ratio(lm.median, rm.median)
        ));
        rows.push(json!({"operation": label, "legacy_mean_ns": lm, "legacy_max_ns": lx.max, "reuse_mean_ns": rm, "reuse_max_ns": rx.max, "ratio": lm.median / rm.median}));
    };
    let get = |r: &PolicyRuns, op: &PmuOp, max: bool| {
        Summary::of(if max { &r.maxes } else { &r.means }.get(op).map(Vec::as_slice).unwrap_or(&[]))
    };
    for (op, label) in OPS {
        if runs[0].means.contains_key(op) || runs[1].means.contains_key(op) {
            row(
                label,
                get(&runs[0], op, false),
                get(&runs[0], op, true),
                get(&runs[1], op, false),
                get(&runs[1], op, true),
            );
        }
    }
    row(
        "PMI handler (guest)",
        Summary::of(&runs[0].handler_mean),
        Summary::of(&runs[0].handler_max),
        Summary::of(&runs[1].handler_mean),
        Summary::of(&runs[1].handler_max),
    );
    let created = (Summary::of(&runs[0].created), Summary::of(&runs[1].created));
    let syscalls = (Summary::of(&runs[0].syscalls), Summary::of(&runs[1].syscalls));
    text.push_str(&format!(
        "\n{:<24} {:>14} {:>27}\n",
        "host events created/run",
        fmt(created.0.median),
        fmt(created.1.median)
    ));
    text.push_str(&format!(
        "{:<24} {:>14} {:>27}\n",
        "backend syscalls/run",
        fmt(syscalls.0.median),
        fmt(syscalls.1.median)
    ));
    let value = json!({
        "backend": backend_detail,
        "reps": reps,
        "guest_cmdline": cmdline,
        "rows": rows,
        "events_created": {"legacy": created.0, "reuse": created.1},
        "backend_syscalls": {"legacy": syscalls.0, "reuse": syscalls.1},
    });
    Ok((text, value))
}
