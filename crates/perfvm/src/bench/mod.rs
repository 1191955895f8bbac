//! `perfvm bench`: the seed documents' tables, reproduced as ratios inside one run. Each
//! suite boots its guests in this process, legacy and ours alternately, several times, and
//! reports medians with their spread.

mod charts;
mod ctxsw;
mod nmi_order;
mod plot;
mod pmu_ops;
mod precision;
mod pv;
mod scaling;
mod stats;
mod transitions;

use crate::cli::BenchArgs;
use crate::guests;
use crate::Failure;
use serde_json::{json, Value};
use std::time::Instant;
use vmm::vm::PmuSettings;
use vmm::{RunReport, Vm, VmConfig};

/// The suites, in the order `perfvm bench` runs them.
pub const SUITES: &[&str] = &["pmu-ops", "ctxsw", "precision", "transitions", "nmi-order", "pv", "scaling"];

/// A VM configuration for a bench guest, console captured.
pub fn config(guest: &str, cmdline: &str, pmu: Option<PmuSettings>) -> VmConfig {
    VmConfig {
        kernel: guests::resolve(guest),
        kernel_arg0: guest.to_owned(),
        cmdline: cmdline.to_owned(),
        capture_console: true,
        timeout: Some(std::time::Duration::from_secs(600)),
        pmu,
        ..Default::default()
    }
}

/// Boot `guest` with `cmdline` and the given PMU, console captured; the run must succeed.
pub fn run_guest(guest: &str, cmdline: &str, pmu: Option<PmuSettings>) -> Result<RunReport, Failure> {
    run_config(&config(guest, cmdline, pmu))
}

thread_local! {
    /// The progress spinner of the suite running now (None when not on a TTY or in JSON).
    static PROGRESS: std::cell::RefCell<Option<indicatif::ProgressBar>> = const { std::cell::RefCell::new(None) };
}

/// Start a spinner for `suite` if stderr is a terminal and the output is not JSON.
fn start_progress(suite: &str, json: bool) {
    use std::io::IsTerminal;
    let bar = (!json && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(indicatif::ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("template"));
        bar.set_message(format!("{suite}: starting"));
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        bar
    });
    PROGRESS.with(|p| *p.borrow_mut() = bar);
}

fn finish_progress() {
    PROGRESS.with(|p| {
        if let Some(bar) = p.borrow_mut().take() {
            bar.finish_and_clear();
        }
    });
}

/// Boot a bench configuration; the run must succeed.
pub fn run_config(config: &VmConfig) -> Result<RunReport, Failure> {
    let guest = config.kernel_arg0.as_str();
    PROGRESS.with(|p| {
        if let Some(bar) = p.borrow().as_ref() {
            bar.inc(1);
            bar.set_message(format!("run {}: {guest} {}", bar.position(), config.cmdline));
        }
    });
    let vm = Vm::build(config).map_err(|e| Failure::usage(e.to_string()))?;
    let report = vm.run(Instant::now());
    if report.end.exit_code() != 0 {
        let console = String::from_utf8_lossy(&report.console.captured()).into_owned();
        return Err(Failure { code: 1, message: format!("bench guest {guest} failed ({:?}): {console}", report.end) });
    }
    Ok(report)
}

/// Console text of a run.
pub fn console(report: &RunReport) -> String {
    String::from_utf8_lossy(&report.console.captured()).into_owned()
}

/// `key=value` from a console line starting with `prefix`.
pub fn console_value(report: &RunReport, prefix: &str, key: &str) -> Option<f64> {
    let text = console(report);
    let line = text.lines().find(|l| l.starts_with(prefix))?;
    line.split_whitespace().find_map(|w| w.strip_prefix(&format!("{key}="))?.parse().ok())
}

pub fn run(args: BenchArgs) -> Result<i32, Failure> {
    let suites: Vec<String> =
        if args.suites.is_empty() { SUITES.iter().map(|s| s.to_string()).collect() } else { args.suites.clone() };
    for s in &suites {
        if !SUITES.contains(&s.as_str()) {
            return Err(Failure::usage(format!("unknown bench suite '{s}' (available: {})", SUITES.join(", "))));
        }
    }
    let reps = if args.quick { 2 } else { args.reps };
    let mut results = serde_json::Map::new();
    results.insert("machine".into(), machine());
    for suite in &suites {
        if !args.json {
            eprintln!("perfvm bench: running {suite} ...");
        }
        start_progress(suite, args.json);
        let result: Result<(String, Value), Failure> = match suite.as_str() {
            "pmu-ops" => pmu_ops::run(reps, args.quick),
            "ctxsw" => ctxsw::run(reps, args.quick),
            "precision" => precision::run(reps, args.quick),
            "transitions" => transitions::run(reps, args.quick),
            "nmi-order" => nmi_order::run(reps, args.quick),
            "pv" => pv::run(reps, args.quick),
            "scaling" => scaling::run(reps, args.quick),
            _ => unreachable!(),
        };
        finish_progress();
        let (text, value) = result?;
        if !args.json {
            println!("{text}");
        }
        if let (Some(dir), Some(chart)) = (&args.plot, charts::chart_for(suite, &value)) {
            let path = chart.write(std::path::Path::new(dir), suite).map_err(Failure::usage)?;
            eprintln!("perfvm bench: wrote {}", path.display());
        }
        results.insert(suite.clone(), value);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&Value::Object(results)).expect("JSON"));
    }
    Ok(0)
}

/// The guest TSC frequency, for turning guest-measured cycles into time.
pub fn tsc_khz() -> Result<u64, Failure> {
    vmm::kvm::guest_tsc_khz().map_err(|e| Failure::usage(e.to_string()))
}

/// PMU settings with a backend and policy, the rest default.
pub fn pmu(backend: vmm::vm::BackendKind, policy: pmu::Policy) -> Option<PmuSettings> {
    Some(PmuSettings { backend, policy, ..Default::default() })
}

/// A guest value the agent sent, as f64.
pub fn value(report: &RunReport, key: &str) -> Option<f64> {
    report.agent.values.get(key).map(|v| *v as f64)
}

/// Where the numbers come from.
fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_owned();
    let module = if std::path::Path::new("/sys/module/kvm_pvm").exists() { "kvm_pvm" } else { "kvm" };
    json!({ "cpu": cpu, "kernel": kernel, "kvm_module": module, "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0) })
}
