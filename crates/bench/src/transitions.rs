//! Suite `transitions` (seed 001): the cheapest exit's roundtrip seen from the guest, and the
//! vCPU thread's syscalls per KVM_RUN, with the vPMU off, on but idle, and on and counting.

use super::{config, mode_name, Bench};
use perfvm::Failure;
use profile::measure::{fmt, Summary};
use profile::table::{Cell, Column, Table};
use serde_json::{json, Value};
use vmm::config::PmuSettings;
use vmm::RunReport;

/// The OUT roundtrip in ns from portio's first line, `portio: median <c> cycles, <ns> ns`.
pub fn portio_ns(report: &RunReport) -> Option<f64> {
    let text = super::console(report);
    let line = text.lines().find(|l| l.starts_with("portio: median"))?;
    line.split(", ").nth(1)?.split(' ').next()?.parse().ok()
}

/// Roundtrips (ns) and syscalls per KVM_RUN of the vPMU-off configuration without the
/// seccomp filters, per mode: measured before bench confines itself (`measure_unfiltered`).
static UNFILTERED: std::sync::OnceLock<Vec<(Vec<f64>, Vec<f64>)>> = std::sync::OnceLock::new();

/// ns per KVM_RUN ioctl without and with a vCPU thread's filters (vmm::confine::cost).
static IOCTL_NS: std::sync::OnceLock<(f64, f64)> = std::sync::OnceLock::new();

/// Run the vPMU-off configuration with the filters off, for the seccomp rows; before the
/// VMM thread is confined (a confined thread cannot be unconfined).
pub fn measure_unfiltered(b: &Bench) -> Result<(), Failure> {
    if let Ok(ns) = vmm::confine::cost::ioctl_ns(200_000, 5) {
        let _ = IOCTL_NS.set(ns);
    }
    vmm::confine::set_enabled(false);
    let measured = b.modes.iter().map(|&mode| roundtrips(b, None, "", mode)).collect::<Result<Vec<_>, _>>();
    vmm::confine::set_enabled(true);
    let _ = UNFILTERED.set(measured?);
    Ok(())
}

/// `b.reps` runs of portio: roundtrip ns and syscalls per KVM_RUN.
fn roundtrips(
    b: &Bench,
    pmu: Option<PmuSettings>,
    cmdline: &str,
    mode: vmm::host::pvm::native::NativeMode,
) -> Result<(Vec<f64>, Vec<f64>), Failure> {
    let (mut ns, mut per_run) = (Vec::new(), Vec::new());
    for _ in 0..b.reps {
        let mut cfg = config("portio", cmdline, pmu.clone());
        cfg.count_syscalls = vmm::stats::syscount::unavailable_reason().is_none();
        let Some(r) = b.run(&cfg, mode)? else { break };
        ns.extend(portio_ns(&r));
        if let Some(n) = r.stats.vcpu_syscalls {
            per_run.push(n as f64 / r.stats.entries.max(1) as f64);
        }
    }
    Ok((ns, per_run))
}

pub fn run(b: &Bench) -> Result<(String, Value), Failure> {
    let pebs = PmuSettings { pebs: true, ..Default::default() };
    let configs: [(&str, Option<PmuSettings>, &str); 4] = [
        ("vPMU off", None, ""),
        ("vPMU on, idle", Some(PmuSettings::default()), ""),
        ("vPMU on, counting", Some(PmuSettings::default()), "count"),
        ("vPMU on, PEBS counting", Some(pebs), "count pebs"),
    ];
    let counting = vmm::stats::syscount::unavailable_reason();
    let mut table = Table::new(&[
        Column::left("configuration", 22),
        Column::left("mode", 8),
        Column::right("roundtrip", 14),
        Column::right("syscalls per KVM_RUN", 20),
    ]);
    let mut filter_cost = Vec::new();
    let row = |table: &mut Table, label: &str, mode, (ns, per_run): &(Vec<f64>, Vec<f64>)| {
        let (n, p) = (Summary::of(ns), Summary::of(per_run));
        table.push(vec![
            Cell::label("configuration", label),
            Cell::label("mode", mode_name(mode)),
            Cell::new("roundtrip_ns", n, format!("{} ns", fmt(n.median))),
            Cell::new("syscalls_per_entry", p, if p.n > 0 { format!("{:.4}", p.median) } else { "n/a".into() }),
        ]);
        n.median
    };
    for (label, pmu, cmdline) in configs {
        for (i, &mode) in b.modes.iter().enumerate() {
            let on = row(&mut table, label, mode, &roundtrips(b, pmu.clone(), cmdline, mode)?);
            // The same configuration without the filters, where bench measured it.
            if let (None, Some(off)) = (&pmu, UNFILTERED.get().and_then(|u| u.get(i))) {
                let off = row(&mut table, "vPMU off, seccomp off", mode, off);
                filter_cost.push((mode, on - off));
            }
        }
    }
    let mut text = format!(
        "transitions — port-IO exit roundtrip seen from the guest (portio, median of 1001), {} runs each\n\n{}",
        b.reps,
        table.text()
    );
    if let Some(reason) = counting {
        text.push_str(&format!("(syscalls not counted: {reason})\n"));
    }
    for (mode, cost) in &filter_cost {
        text.push_str(&format!(
            "seccomp filters' cost per exit ({}): {cost:+.0} ns (median roundtrip, filters on - off)\n",
            mode_name(*mode)
        ));
    }
    if let Some((off, on)) = IOCTL_NS.get() {
        text.push_str(&format!(
            "seccomp filters' cost per KVM_RUN ioctl (a vCPU thread's three, measured in a thread): {off:.0} -> {on:.0} ns ({:+.0} ns)\n",
            on - off
        ));
    }
    let cost: Vec<Value> =
        filter_cost.iter().map(|(m, c)| json!({"mode": mode_name(*m), "seccomp_ns_per_exit": c})).collect();
    Ok((
        text,
        json!({"rows": table.json(), "reps": b.reps, "seccomp_cost": cost,
        "seccomp_ioctl_ns": IOCTL_NS.get().map(|(off, on)| json!({"off": off, "on": on}))}),
    ))
}
