//! `perfvm bench` (this binary, `perfvm-bench`, which `perfvm bench` runs): the seed
//! documents' tables, reproduced as ratios inside one run. Each suite boots its guests in
//! this process, legacy and ours alternately, several times, and reports medians with their
//! spread; every configuration runs in each execution mode of `--native` (emulated and
//! native by default), one table row per mode. It is built apart from the product: the
//! `perfvm` binary does not link it.

mod charts;
mod ctxsw;
mod exact_rate;
mod linux;
mod nmi_order;
mod plot;
mod pmu_ops;
mod precision;
mod precision_host;
mod pv;
mod rate;
mod sampling_overhead;
mod scaling;
mod transitions;

use clap::Parser;
use perfvm::guests;
use perfvm::Failure;
use pmu::tsc::{SamplePeriod, TscRate};
use profile::agent::Order;
use profile::events;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use vmm::config::PmuSettings;
use vmm::host::pvm::native::NativeMode;
use vmm::{RunReport, Vm, VmConfig};

/// The suites, in the order `perfvm bench` runs them.
pub const SUITES: &[&str] =
    &["rate", "pmu-ops", "ctxsw", "precision", "transitions", "nmi-order", "pv", "scaling", "exact"];

/// Suites that run only when named: a stock Linux boot is tens of minutes here.
pub const NAMED_ONLY: &[&str] = &["linux"];

/// Natively, compute-bound guests run thousands of times faster (the `rate` suite): suites
/// scale such workloads (ftest) by this much so a native run lasts, and samples, about as
/// long as an emulated one.
pub const NATIVE_WORK_SCALE: u64 = 5000;

/// A native run takes seconds at most; a hung one (e.g. a guest that breaks the native
/// conventions) should not hold the bench for the emulated timeout.
const NATIVE_TIMEOUT: Duration = Duration::from_secs(60);

/// `perfvm bench`'s flags.
#[derive(Debug, Parser)]
#[command(name = "perfvm bench", bin_name = "perfvm bench", version)]
#[command(about = "Reproduce the seed documents' tables as ratios inside one run")]
pub struct BenchArgs {
    /// Suites to run (default: all but `linux`, which runs only when named).
    pub suites: Vec<String>,
    /// Smaller guests, and 2 repetitions unless --reps is given.
    #[arg(long)]
    pub quick: bool,
    /// Repetitions per configuration (at least 1; default 5, or 2 with --quick).
    #[arg(long, value_name = "N")]
    pub reps: Option<usize>,
    /// Print results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write one SVG chart per suite into this directory.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<String>,
    /// Execution modes: both = every configuration emulated and native, side by side;
    /// off = emulated only; on = native only; auto = native where the guest carries the VIF note.
    #[arg(long, value_enum, default_value_t = Modes::Both)]
    pub native: Modes,
}

/// `bench --native`: which execution modes every configuration runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Modes {
    /// Native where the host supports it and the guest carries the VIF note.
    Auto,
    /// Native only.
    On,
    /// Emulated only.
    Off,
    /// Emulated and native, side by side.
    Both,
}

impl Modes {
    fn list(self) -> Vec<NativeMode> {
        match self {
            Modes::Auto => vec![NativeMode::Auto],
            Modes::On => vec![NativeMode::On],
            Modes::Off => vec![NativeMode::Off],
            Modes::Both => vec![NativeMode::Off, NativeMode::On],
        }
    }
}

/// A mode's name in tables and JSON: `--native off` is "hardware" where guest code runs in
/// hardware (kvm_intel, kvm_amd), as `--stats` says.
pub fn mode_name(mode: NativeMode) -> &'static str {
    match mode {
        NativeMode::Off => vmm::host::caps().execution_name(false),
        NativeMode::On => "native",
        NativeMode::Auto => "auto",
    }
}

/// What every suite gets: repetitions, size, the execution modes, and the native
/// configurations that failed.
#[derive(Debug)]
pub struct Bench {
    /// Repetitions per configuration.
    pub reps: usize,
    /// Smaller guests (`--quick`).
    pub quick: bool,
    /// The execution modes every configuration runs in.
    pub modes: Vec<NativeMode>,
    /// "what (mode)" -> error. Native execution is newer than the emulated path: a native
    /// failure leaves its cells n/a and is listed under the table instead of ending the bench.
    failed: RefCell<BTreeMap<String, String>>,
}

impl Bench {
    /// Run one configuration's measurement in `mode`. An emulated failure ends the bench; a
    /// native one is recorded, and that configuration is skipped (None) from then on.
    /// SIGINT/SIGTERM end the bench whatever the run made of them.
    pub fn attempt<T>(
        &self,
        mode: NativeMode,
        what: &str,
        measure: impl FnOnce() -> Result<T, Failure>,
    ) -> Result<Option<T>, Failure> {
        let result = self.attempt_in_mode(mode, what, measure);
        match vmm::vstate::kick::termination() {
            Some(signal) => Err(Failure::interrupted("bench", signal)),
            None => result,
        }
    }

    fn attempt_in_mode<T>(
        &self,
        mode: NativeMode,
        what: &str,
        measure: impl FnOnce() -> Result<T, Failure>,
    ) -> Result<Option<T>, Failure> {
        if mode == NativeMode::Off {
            return measure().map(Some);
        }
        let key = format!("{} ({})", what.trim_end(), mode_name(mode));
        if self.failed.borrow().contains_key(&key) {
            return Ok(None);
        }
        match measure() {
            Ok(v) => Ok(Some(v)),
            Err(e) => {
                self.failed.borrow_mut().insert(key, e.to_string());
                Ok(None)
            }
        }
    }

    /// Boot `config` in `mode` (see `attempt`).
    pub fn run(&self, config: &VmConfig, mode: NativeMode) -> Result<Option<RunReport>, Failure> {
        let vcpus = if config.vcpus > 1 { format!(" --vcpus {}", config.vcpus) } else { String::new() };
        let what = format!("{} {}{vcpus}", config.kernel_arg0, config.cmdline);
        self.attempt(mode, &what, || run_config(&in_mode(config, mode)))
    }

    /// The failures since the last call, as lines for the table and as JSON.
    fn take_failures(&self) -> (String, Value) {
        let failed = std::mem::take(&mut *self.failed.borrow_mut());
        let text = failed
            .iter()
            .map(|(what, e)| {
                // First and last lines: the guest's end and (from its console) its last words.
                let (first, last) = (e.lines().next().unwrap_or(""), e.lines().last().unwrap_or(""));
                if first == last {
                    format!("  {what}: {first}\n")
                } else {
                    format!("  {what}: {first} ... {last}\n")
                }
            })
            .collect::<String>();
        (text, json!(failed))
    }
}

/// `config` set up to run in `mode`.
pub fn in_mode(config: &VmConfig, mode: NativeMode) -> VmConfig {
    let mut config = config.clone();
    config.native = mode;
    if mode != NativeMode::Off {
        config.timeout = Some(NATIVE_TIMEOUT);
    }
    config
}

/// A VM configuration for a bench guest, console captured, with Intel's PMU identity on
/// every host (the seeds' tables are Intel's, PEBS among them; `pmu-ops` sets each vendor's
/// in turn), not the host vendor's that a run defaults to on kvm_amd and kvm_intel.
pub fn config(guest: &str, cmdline: &str, pmu: Option<PmuSettings>) -> VmConfig {
    VmConfig {
        kernel: guests::resolve(guest),
        kernel_arg0: guest.to_owned(),
        cmdline: cmdline.to_owned(),
        capture_console: true,
        timeout: Some(std::time::Duration::from_secs(600)),
        pmu,
        cpu_vendor: vmm::arch::x86_64::identity::CpuVendor::Intel,
        ..Default::default()
    }
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
fn run_config(config: &VmConfig) -> Result<RunReport, Failure> {
    let guest = config.kernel_arg0.as_str();
    PROGRESS.with(|p| {
        if let Some(bar) = p.borrow().as_ref() {
            bar.inc(1);
            let mode = mode_name(config.native);
            bar.set_message(format!("run {}: {guest} {} ({mode})", bar.position(), config.cmdline));
        }
    });
    let vm = Vm::build(config).map_err(perfvm::session::build_failure)?;
    let report = vm.run(Instant::now());
    if report.end.exit_code() != 0 {
        let console = String::from_utf8_lossy(&report.console.captured()).into_owned();
        return Err(Failure::failed(format!("bench guest {guest} failed ({:?}): {console}", report.end)));
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

/// One software event held open for the whole bench. The host kernel patches its perf
/// static keys at the first task event after a second without any: 8-30 ms here (a throwaway
/// C probe: 30.3 ms for the first open, 7.8 ms after a 2 s pause, 5-11 µs otherwise). Every
/// run would carry that once, in its first enable (legacy's nearly always, reuse's when
/// the previous run ended over a second before), and a per-switch figure over a few hundred
/// switches would be mostly that one operation. The event never counts anything anyone reads.
fn keep_perf_warm() -> Option<vmm::backends::perf_sys::PerfEvent> {
    use vmm::backends::perf_sys::{PerfEvent, PerfEventAttr, PERF_COUNT_SW_TASK_CLOCK, PERF_TYPE_SOFTWARE};
    let attr = PerfEventAttr { type_: PERF_TYPE_SOFTWARE, config: PERF_COUNT_SW_TASK_CLOCK, ..Default::default() };
    PerfEvent::open_untracked(&attr).ok()
}

fn main() {
    // As the perfvm binary's main: inherited by every thread; filters come per thread.
    vmm::confine::limit_core_dumps();
    if let Err(e) = vmm::confine::set_no_new_privs() {
        eprintln!("perfvm: {e}");
        std::process::exit(1);
    }
    let args = match BenchArgs::try_parse() {
        Ok(args) => args,
        Err(e) if !e.use_stderr() => {
            // --help / --version.
            let _ = e.print();
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("perfvm: {}", perfvm::cli::error_line(&e.to_string(), "perfvm bench"));
            std::process::exit(2);
        }
    };
    match run(args) {
        Ok(code) => std::process::exit(code),
        Err(f) => {
            eprintln!("perfvm: {f}");
            std::process::exit(f.code());
        }
    }
}

fn run(args: BenchArgs) -> Result<i32, Failure> {
    let suites: Vec<String> =
        if args.suites.is_empty() { SUITES.iter().map(|s| s.to_string()).collect() } else { args.suites.clone() };
    for s in &suites {
        if !SUITES.contains(&s.as_str()) && !NAMED_ONLY.contains(&s.as_str()) {
            let available = [SUITES, NAMED_ONLY].concat().join(", ");
            return Err(Failure::usage(format!("unknown bench suite '{s}' (available: {available})")));
        }
    }
    if suites.iter().any(|s| s == "linux") {
        linux::assets()?;
    }
    let reps = repetitions(&args)?;
    let _warm = keep_perf_warm();
    // From here a Ctrl-C (between runs too) ends the bench at the next run, with exit 130.
    vmm::vstate::kick::catch_termination();
    let mut modes = args.native.list();
    let mut results = serde_json::Map::new();
    results.insert("machine".into(), machine());
    if modes != [NativeMode::Off] {
        if let Err(reason) = vmm::host::pvm::native::host_support() {
            eprintln!("perfvm bench: this host cannot run guests natively ({reason}): emulated only");
            results.insert("native_unavailable".into(), json!(reason.to_string()));
            modes = vec![NativeMode::Off];
        }
    }
    results.insert("modes".into(), json!(modes.iter().map(|m| mode_name(*m)).collect::<Vec<_>>()));
    let bench = Bench { reps, quick: args.quick, modes, failed: Default::default() };
    // Start what needs a process first, then confine the VMM for every suite (and the
    // progress spinner's thread, which inherits the filter).
    if suites.iter().any(|s| s == "rate") {
        rate::measure_host(reps, args.quick);
    }
    if suites.iter().any(|s| s == "precision") && bench.modes.iter().any(|m| *m != NativeMode::Off) {
        precision::measure_host(reps, args.quick);
    }
    if suites.iter().any(|s| s == "transitions") {
        transitions::measure_unfiltered(&bench)?;
    }
    vmm::confine::confine_thread(vmm::confine::ThreadKind::Vmm).map_err(|e| Failure::failed(e.to_string()))?;
    for suite in &suites {
        if !args.json {
            eprintln!("perfvm bench: running {suite} ...");
        }
        start_progress(suite, args.json);
        let result: Result<(String, Value), Failure> = match suite.as_str() {
            "rate" => rate::run(&bench),
            "pmu-ops" => pmu_ops::run(&bench),
            "ctxsw" => ctxsw::run(&bench),
            "precision" => precision::run(&bench),
            "transitions" => transitions::run(&bench),
            "nmi-order" => nmi_order::run(&bench),
            "pv" => pv::run(&bench),
            "scaling" => scaling::run(&bench),
            "exact" => exact_rate::run(&bench),
            "linux" => linux::run(&bench),
            _ => unreachable!(),
        };
        finish_progress();
        let (mut text, mut value) = result?;
        let (failed_text, failed) = bench.take_failures();
        if !failed_text.is_empty() {
            text.push_str(&format!("\nnative runs that failed (their cells are n/a):\n{failed_text}"));
            value["native_failures"] = failed;
        }
        if !args.json {
            perfvm::output::emit(&(text + "\n"))?;
        }
        if let (Some(dir), Some(chart)) = (&args.plot, charts::chart_for(suite, &value)) {
            let path = chart.write(std::path::Path::new(dir), suite).map_err(Failure::failed)?;
            eprintln!("perfvm bench: wrote {}", path.display());
        }
        results.insert(suite.clone(), value);
    }
    if args.json {
        perfvm::output::emit(&(serde_json::to_string_pretty(&Value::Object(results)).expect("JSON") + "\n"))?;
    }
    Ok(0)
}

/// Repetitions per configuration: `--reps`, else 2 with `--quick` and 5 without.
fn repetitions(args: &BenchArgs) -> Result<usize, Failure> {
    match args.reps {
        Some(0) => Err(Failure::usage("--reps must be at least 1")),
        Some(n) => Ok(n),
        None if args.quick => Ok(2),
        None => Ok(5),
    }
}

/// The TSC rate a run's VM stated, for turning the cycles its guest measured into time.
pub fn tsc(report: &RunReport) -> Result<TscRate, Failure> {
    TscRate::from_khz(report.tsc_khz).ok_or_else(|| Failure::failed("a bench VM stated no TSC rate"))
}

/// The agent's orders to count cycles around `workload` (per task too when `per_task`).
pub fn count_cycles(per_task: bool, workload: &str) -> String {
    let order = Order::Stat { events: vec![events::by_raw(0x003c)], per_task };
    order.cmdline(pmu::Vendor::Intel, &[workload.to_owned()], "")
}

/// The agent's orders to sample cycles `hz` times per second around `workload`.
pub fn sample_cycles(hz: u64, workload: &str) -> String {
    let order = Order::Record { events: vec![events::by_raw(0x003c)], period: SamplePeriod::Hz(hz), callchain: false };
    order.cmdline(pmu::Vendor::Intel, &[workload.to_owned()], "")
}

/// PMU settings with a backend and policy, the rest default.
pub fn pmu(backend: vmm::config::BackendKind, policy: pmu::Policy) -> Option<PmuSettings> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(quick: bool, reps: Option<usize>) -> BenchArgs {
        BenchArgs { suites: vec![], quick, reps, json: false, plot: None, native: Modes::Off }
    }

    #[test]
    fn quick_sets_the_repetitions_only_without_reps() {
        assert_eq!(repetitions(&args(false, None)).unwrap(), 5);
        assert_eq!(repetitions(&args(true, None)).unwrap(), 2);
        assert_eq!(repetitions(&args(true, Some(7))).unwrap(), 7);
        assert_eq!(repetitions(&args(false, Some(0))).unwrap_err().to_string(), "--reps must be at least 1");
    }
}
