//! Suite `pmu-ops` (seed 000, tables 1-4): what each guest PMU operation costs the VMM under
//! the legacy policy (re-create host events on every write) and under reuse, plus the
//! guest-measured PMI handler, from the `pmuops` guest on the perf backend; and PMI delivery
//! to a PV guest (the agent sampling through the PV page, no LVTPC mask) against its floor,
//! one bare `KVM_NMI` ioctl timed in the same runs.

use super::{config, console_value, mode_name, sample_cycles, Bench, NATIVE_WORK_SCALE};
use perfvm::Failure;
use pmu::Policy;
use profile::measure::{fmt, ratio, Summary};
use profile::table::{Cell, Column, Table};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use vmm::arch::x86_64::identity::CpuVendor;
use vmm::config::{BackendKind, PmuSettings};
use vmm::host::pvm::native::NativeMode;
use vmm::host::runs_at_full_speed;
use vmm::vpmu::stats::PmuOp;

/// The operations the tables show, in order (counter writes, GLOBAL_STATUS, OVF_CTRL and
/// other MSRs are left out).
fn table_ops() -> impl Iterator<Item = &'static PmuOp> {
    const ALL: &[PmuOp] = &PmuOp::ALL;
    ALL.iter().filter(|op| !matches!(op, PmuOp::CounterWrite | PmuOp::StatusRead | PmuOp::OvfCtrlWrite | PmuOp::Other))
}

/// One of a policy's per-run values.
type Field = fn(&PolicyRuns) -> &Vec<f64>;

#[derive(Default)]
struct PolicyRuns {
    means: BTreeMap<PmuOp, Vec<f64>>,
    maxes: BTreeMap<PmuOp, Vec<f64>>,
    syscalls: BTreeMap<PmuOp, Vec<f64>>,
    handler_mean: Vec<f64>,
    handler_max: Vec<f64>,
    created: Vec<f64>,
    total_syscalls: Vec<f64>,
}

pub fn run(b: &Bench) -> Result<(String, Value), Failure> {
    let mut text = String::new();
    let mut value = json!({});
    let mut enable = Vec::new();
    for vendor in [CpuVendor::Intel, CpuVendor::Amd] {
        let (t, v) = run_vendor(b, vendor)?;
        text.push_str(&t);
        enable.push(reuse_enable_ns(&v));
        value[vendor_name(vendor)] = v;
    }
    // The model's cost must not depend on the vendor.
    for (mode, (intel, amd)) in b.modes.iter().zip(enable[0].iter().zip(&enable[1])) {
        text.push_str(&format!(
            "AMD / Intel, reuse GLOBAL_CTRL enable, {}: {} / {} ns = {:.2}\n",
            mode_name(*mode),
            fmt(*amd),
            fmt(*intel),
            amd / intel
        ));
    }
    let (pv_text, pv_json) = pv_delivery(b)?;
    text.push_str(&pv_text);
    value["pv_pmi_delivery"] = pv_json;
    Ok((text, value))
}

fn vendor_name(vendor: CpuVendor) -> &'static str {
    match vendor {
        CpuVendor::Intel => "intel",
        CpuVendor::Amd => "amd",
    }
}

/// Median reuse GLOBAL_CTRL enable per mode, from a vendor's JSON rows.
fn reuse_enable_ns(v: &Value) -> Vec<f64> {
    let rows = v["rows"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    rows.iter()
        .filter(|r| r["operation"] == "GLOBAL_CTRL enable")
        .map(|r| r["reuse_mean_ns"]["median"].as_f64().unwrap_or(f64::NAN))
        .collect()
}

/// The suite for the vPMU of `vendor`.
fn run_vendor(b: &Bench, vendor: CpuVendor) -> Result<(String, Value), Failure> {
    let (reps, modes) = (b.reps, &b.modes);
    let cmdline = if b.quick { "100 20" } else { "300 60" };
    let policies = [("legacy", Policy::Legacy), ("reuse", Policy::default())];
    // [mode][policy]
    let mut runs: Vec<[PolicyRuns; 2]> = modes.iter().map(|_| Default::default()).collect();
    let mut backend_detail = String::new();
    for _ in 0..reps {
        for (&mode, mode_runs) in modes.iter().zip(&mut runs) {
            for ((_, policy), r) in policies.iter().zip(mode_runs.iter_mut()) {
                let settings = PmuSettings { backend: BackendKind::Perf, policy: *policy, ..Default::default() };
                let mut cfg = config("pmuops", cmdline, Some(settings));
                cfg.cpu_vendor = vendor;
                let Some(report) = b.run(&cfg, mode)? else { continue };
                let pmu = report.stats.pmu.as_ref().expect("PMU report");
                backend_detail = pmu.backend_detail.clone();
                for op in table_ops() {
                    if let Some(t) = pmu.vmm.ops.get(op) {
                        r.means.entry(*op).or_default().push(t.mean_ns());
                        r.maxes.entry(*op).or_default().push(t.max_ns as f64);
                        r.syscalls.entry(*op).or_default().push(t.syscalls_per_op());
                    }
                }
                r.handler_mean.extend(console_value(&report, "pmuops: pmi handler", "mean_ns"));
                r.handler_max.extend(console_value(&report, "pmuops: pmi handler", "max_ns"));
                r.created.push(pmu.host_events_created as f64);
                r.total_syscalls.push(pmu.host_syscalls as f64);
            }
        }
    }
    let mut table = Table::new(&[
        Column::left("operation", 24),
        Column::left("mode", 8),
        Column::right("legacy mean", 14),
        Column::right("legacy max", 12),
        Column::right("reuse mean", 14),
        Column::right("reuse max", 12),
        Column::right("legacy/reuse", 13),
    ]);
    let ns = |key, v: f64| Cell::new(key, v, format!("{} ns", fmt(v)));
    let mut row = |label: &str, mode: NativeMode, [lm, lx, rm, rx]: [Summary; 4]| {
        table.push(vec![
            Cell::label("operation", label),
            Cell::label("mode", mode_name(mode)),
            Cell::new("legacy_mean_ns", lm, format!("{} ns", fmt(lm.median))),
            ns("legacy_max_ns", lx.max),
            Cell::new("reuse_mean_ns", rm, format!("{} ns", fmt(rm.median))),
            ns("reuse_max_ns", rx.max),
            Cell::new("ratio", lm.median / rm.median, ratio(lm.median, rm.median)),
        ]);
    };
    let get = |r: &PolicyRuns, op: &PmuOp, max: bool| {
        Summary::of(if max { &r.maxes } else { &r.means }.get(op).map(Vec::as_slice).unwrap_or(&[]))
    };
    for op in table_ops() {
        // An operation some run saw gets a row in every mode (n/a where none saw it).
        if !runs.iter().flatten().any(|r| r.means.contains_key(op)) {
            continue;
        }
        for (&mode, [l, r]) in modes.iter().zip(&runs) {
            row(op.label(), mode, [get(l, op, false), get(l, op, true), get(r, op, false), get(r, op, true)]);
        }
    }
    for (&mode, [l, r]) in modes.iter().zip(&runs) {
        let handler = [&l.handler_mean, &l.handler_max, &r.handler_mean, &r.handler_max].map(|v| Summary::of(v));
        row("PMI handler (guest)", mode, handler);
    }
    let mut text = format!(
        "pmu-ops — VMM time per guest PMU operation, {} vPMU, perf backend ({backend_detail})\n\
         {reps} runs per policy, alternating: median of the per-run means, and the worst single operation\n\n{}\n",
        if vendor == CpuVendor::Amd { "AMD" } else { "Intel" },
        table.text()
    );
    let mut value = json!({"backend": backend_detail, "reps": reps, "guest_cmdline": cmdline, "rows": table.json()});
    let totals: [(&str, &str, Field); 2] = [
        ("host events created/run", "host_events_created", |p| &p.created),
        ("backend syscalls/run", "backend_syscalls", |p| &p.total_syscalls),
    ];
    for (label, key, field) in totals {
        for (&mode, [l, r]) in modes.iter().zip(&runs) {
            let (l, r) = (Summary::of(field(l)), Summary::of(field(r)));
            text.push_str(&format!("{label:<24} {:<8} {:>14} {:>27}\n", mode_name(mode), fmt(l.median), fmt(r.median)));
            value[key][mode_name(mode)] = json!({"legacy": l, "reuse": r});
        }
    }
    let mut per_op = Table::new(&[
        Column::left("operation", 24),
        Column::left("mode", 8),
        Column::right("legacy", 8),
        Column::right("reuse", 8),
    ]);
    for op in table_ops() {
        for (&mode, [l, r]) in modes.iter().zip(&runs) {
            let [l, r] = [l, r].map(|p| Summary::of(p.syscalls.get(op).map(Vec::as_slice).unwrap_or(&[])));
            if l.n + r.n == 0 {
                continue;
            }
            per_op.push(vec![
                Cell::label("operation", op.label()),
                Cell::label("mode", mode_name(mode)),
                Cell::new("legacy", l, format!("{:.2}", l.median)),
                Cell::new("reuse", r, format!("{:.2}", r.median)),
            ]);
        }
    }
    text.push_str(&format!("\nhost perf syscalls per operation (median of the per-run means)\n{}\n", per_op.text()));
    value["syscalls_per_operation"] = per_op.json();
    Ok((text, value))
}

/// PMI delivery to a PV guest: the agent samples ftest at ~1 kHz through the PV page, taking
/// its samples in its PMI handler (`--pv-samples off`), and declares it needs no LVTPC mask,
/// so each PMI is the overflow's handling plus its NMI: one `KVM_NMI`, which the same runs
/// time alone (the floor), or, for a PMI found at the exit of the overflow's signal, none
/// (the NMI goes in with the entry's synced events). A mode whose runs issued no `KVM_NMI`
/// is held against the other modes' floor.
fn pv_delivery(b: &Bench) -> Result<(String, Value), Failure> {
    let hz = 1000; // a sample per ms of guest cycles (vCPU time on the software clock)
    let mut table = Table::new(&[
        Column::left("", 30),
        Column::left("mode", 8),
        Column::right("mean", 14),
        Column::right("max", 14),
        Column::right("x floor", 8),
        Column::left("NMIs", 0),
    ]);
    let mut runs = vec![];
    for &mode in &b.modes {
        let mut run = DeliveryRuns::default();
        for _ in 0..b.reps {
            // The agent's PMIs (with PV samples on, the VMM takes its samples: no PMI at all).
            let settings = PmuSettings {
                backend: BackendKind::Perf,
                policy: Policy::default(),
                pv_samples: false,
                ..Default::default()
            };
            let mut cfg = config("ftest", "", Some(settings));
            let work = if runs_at_full_speed(&cfg, mode) { NATIVE_WORK_SCALE.to_string() } else { "1".into() };
            cfg.cmdline = sample_cycles(hz, &work);
            let Some(report) = b.run(&cfg, mode)? else { continue };
            let vmm = &report.stats.pmu.as_ref().expect("PMU report").vmm;
            if let Some(d) = vmm.ops.get(&PmuOp::PmiDelivery) {
                run.delivery.push(d.mean_ns());
                run.delivery_max.push(d.max_ns as f64);
                run.in_events.push(vmm.nmis_in_events as f64 / d.count.max(1) as f64);
            }
            // The floor, where the runs issued KVM_NMI ioctls (a PMI found at a signal's exit
            // queues its NMI in the entry's events instead).
            if let Some(f) = vmm.ops.get(&PmuOp::KvmNmi) {
                run.floor.push(f.mean_ns());
                run.floor_max.push(f.max_ns as f64);
            }
        }
        runs.push((mode, run));
    }
    let every_floor: Vec<f64> = runs.iter().flat_map(|(_, r)| r.floor.iter().copied()).collect();
    for (mode, run) in &runs {
        let [d, dx, f, fx, e] =
            [&run.delivery, &run.delivery_max, &run.floor, &run.floor_max, &run.in_events].map(|v| Summary::of(v));
        let (floor, whose) = match run.floor.is_empty() {
            false => (f.median, ""),
            true => (Summary::of(&every_floor).median, " (the other modes' floor)"),
        };
        let ns = |v: f64| format!("{} ns", fmt(v));
        table.push(vec![
            Cell::text("PMI delivery (PV, no mask)"),
            Cell::label("mode", mode_name(*mode)),
            Cell::new("pmi_delivery_ns", d, ns(d.median)),
            Cell::text(ns(dx.max)),
            Cell::new("ratio", d.median / floor, ratio(d.median, floor)),
            Cell::json("kvm_nmi_ns", f),
            Cell::new("nmis_in_events", e, format!("{:.0}% in the entry's events{whose}", 100.0 * e.median)),
        ]);
        // The floor's line: its numbers are in the row above's JSON.
        table.push(vec![
            Cell::text("KVM_NMI ioctl (floor)"),
            Cell::text(mode_name(*mode)),
            Cell::text(ns(f.median)),
            Cell::text(ns(fx.max)),
        ]);
    }
    // What the rest is: the software clock re-arms its timer at every notification.
    let rearm = ioc_period_ns();
    let text = format!(
        "\nPMI delivery to a PV guest (agent sampling ftest {hz} times per second of cycles, perf backend, reuse)\n{}\
         one PERF_EVENT_IOC_PERIOD on a task-clock event here (the clock's re-arm at each notification): {}\n",
        table.text(),
        rearm.map_or("n/a".into(), |ns| format!("{} ns", fmt(ns)))
    );
    Ok((text, json!({ "rows": table.json(), "ioc_period_ns": rearm })))
}

/// One mode's PV PMI deliveries and `KVM_NMI` floors, per run (ns).
#[derive(Default)]
struct DeliveryRuns {
    delivery: Vec<f64>,
    delivery_max: Vec<f64>,
    floor: Vec<f64>,
    floor_max: Vec<f64>,
    in_events: Vec<f64>,
}

/// The mean cost of one `PERF_EVENT_IOC_PERIOD` on a running task-clock event of this
/// thread at a sampling period (1 ms): it restarts the event's hrtimer, which, the nearest
/// timer of the CPU, reprograms the clock event device. Over 2,000 calls.
fn ioc_period_ns() -> Option<f64> {
    use vmm::backends::perf_sys::{PerfEvent, PerfEventAttr, PERF_COUNT_SW_TASK_CLOCK, PERF_TYPE_SOFTWARE};
    let attr = PerfEventAttr {
        type_: PERF_TYPE_SOFTWARE,
        config: PERF_COUNT_SW_TASK_CLOCK,
        sample_period: 1_000_000,
        ..Default::default()
    };
    let clock = PerfEvent::open_untracked(&attr).ok()?;
    const CALLS: u64 = 2000;
    let started = std::time::Instant::now();
    for i in 0..CALLS {
        clock.set_period(1_000_000 + (i & 1)).ok()?;
    }
    Some(started.elapsed().as_nanos() as f64 / CALLS as f64)
}
