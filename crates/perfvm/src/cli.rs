//! Command-line definitions.

use clap::{Args, Parser, Subcommand, ValueEnum};

/// perfvm: a KVM virtual machine monitor whose guests get a fast, accurate virtual PMU.
#[derive(Debug, Parser)]
#[command(name = "perfvm", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Boot a guest kernel and run it to its end.
    Run(RunArgs),
    /// Reproduce the seed documents' measurements, legacy vs ours in one run.
    Bench(BenchArgs),
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Suites to run (default: all).
    pub suites: Vec<String>,
    /// Fewer repetitions and smaller guests.
    #[arg(long)]
    pub quick: bool,
    /// Repetitions per configuration.
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Print results as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Options shared by every command that boots a guest.
#[derive(Debug, Args, Clone)]
pub struct VmArgs {
    /// Guest kernel: a path to an ELF, or the name of a guest built from guest/ (hello, ftest, ...).
    pub guest: String,
    /// Number of vCPUs (each on its own thread).
    #[arg(long, default_value_t = 1)]
    pub vcpus: u32,
    /// Guest memory in MiB.
    #[arg(long, default_value_t = 256)]
    pub mem: u64,
    /// Text appended to the guest command line (after the guest's name).
    #[arg(long, default_value = "")]
    pub cmdline: String,
    /// Stop the guest after this many seconds.
    #[arg(long, allow_negative_numbers = true)]
    pub timeout: Option<f64>,
    #[command(flatten)]
    pub pmu: PmuArgs,
}

/// The virtual PMU.
#[derive(Debug, Args, Clone)]
pub struct PmuArgs {
    /// Give the guest a virtual PMU (Intel architectural perfmon v2).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub pmu: OnOff,
    /// What counts: host perf events, or exact counting by single-stepping.
    #[arg(long, value_enum, default_value_t = BackendArg::Perf)]
    pub backend: BackendArg,
    /// Host event policy: reuse events (with lazy release), or re-create on every write.
    #[arg(long, value_enum, default_value_t = PolicyArg::Reuse)]
    pub policy: PolicyArg,
    /// General-purpose counters per vCPU (1-8).
    #[arg(long, default_value_t = 4)]
    pub counters: u8,
    /// Reuse policy: release a host event left unused for this much vCPU run time (ms).
    #[arg(long, default_value_t = 1.0)]
    pub release_after_ms: f64,
    /// Most host perf events the VM may hold (default: counters x vCPUs, fixed included).
    #[arg(long)]
    pub max_host_events: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    Perf,
    Exact,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PolicyArg {
    Reuse,
    Legacy,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub vm: VmArgs,
    /// Print VM exit statistics at the end (to stderr).
    #[arg(long)]
    pub stats: bool,
    /// Print one JSON document (end, statistics, console output) on stdout.
    #[arg(long)]
    pub json: bool,
}
