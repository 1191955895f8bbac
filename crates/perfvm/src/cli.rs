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
    /// Count events of a guest workload, as `perf stat` does.
    Stat(StatArgs),
    /// Sample a guest workload, as `perf record` does.
    Record(RecordArgs),
    /// Show a recorded profile, as `perf report` does.
    Report(ReportArgs),
    /// Reproduce the seed documents' measurements, legacy vs ours in one run.
    Bench(BenchArgs),
}

/// `-F` when neither `-c` nor `-F` is given (samples per second of guest cycles). Each
/// sample costs the guest ~200 us here (its PMI handler is emulated at ~1 us/instruction
/// plus a few exits), so 100 Hz keeps sampling overhead near 2% (docs/PERFORMANCE.md).
pub const DEFAULT_RECORD_FREQ: u64 = 100;

#[derive(Debug, Args)]
pub struct StatArgs {
    /// Events to count, comma-separated (cycles, instructions, ref-cycles, cache-references,
    /// cache-misses, branches, branch-misses, or rUUEE).
    #[arg(short = 'e', long = "event", default_value = "cycles,instructions,branches,branch-misses")]
    pub events: String,
    /// Count per guest task too (counters saved and restored on every guest context switch).
    #[arg(short = 'p', long = "per-task")]
    pub per_task: bool,
    /// Print counts, statistics and console as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also print VM exit and vPMU statistics.
    #[arg(long = "stats")]
    pub vm_stats: bool,
    #[command(flatten)]
    pub vm: VmArgs,
    /// Arguments of the guest workload.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Event to sample.
    #[arg(short = 'e', long = "event", default_value = "cycles")]
    pub event: String,
    /// Sample every PERIOD events.
    #[arg(short = 'c', long = "count")]
    pub count: Option<u64>,
    /// Sample FREQ times per second of guest cycles (cycles events on the perf backend;
    /// default 100 when neither -c nor -F is given).
    #[arg(short = 'F', long = "freq")]
    pub freq: Option<u64>,
    /// Output file (JSON); collapsed stacks go to FILE.folded.
    #[arg(short = 'o', long = "output", default_value = "perfvm.data.json")]
    pub output: String,
    /// Exact backend: attribute every retired instruction instead of sampling (the reference).
    #[arg(long)]
    pub reference: bool,
    /// Also print VM exit and vPMU statistics, and exits per sample.
    #[arg(long = "stats")]
    pub stats: bool,
    #[command(flatten)]
    pub vm: VmArgs,
    /// Arguments of the guest workload.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Record file to read.
    #[arg(short = 'i', long = "input", default_value = "perfvm.data.json")]
    pub input: String,
    /// Also write a flamegraph SVG.
    #[arg(long, value_name = "OUT.svg")]
    pub flamegraph: Option<String>,
    /// Show two record files side by side with their total variation distance.
    #[arg(long, num_args = 2, value_names = ["A", "B"])]
    pub compare: Option<Vec<String>>,
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
    /// Write one SVG chart per suite into this directory.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<String>,
    /// Execution modes: both = every configuration emulated and native, side by side;
    /// off = emulated only; on = native only; auto = native where the guest carries the VIF note.
    #[arg(long, value_enum, default_value_t = crate::bench::Modes::Both)]
    pub native: crate::bench::Modes,
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
    /// Run the guest natively (at host speed, kvm_pvm's VIF mode): auto = when the host
    /// supports it and the guest carries the perfvm VIF note; on = any 64-bit guest.
    #[arg(long, value_enum, default_value_t = NativeArg::Auto)]
    pub native: NativeArg,
    /// The CPU the guest is told it runs on, whatever the host: intel (GenuineIntel with the
    /// Intel vPMU) or amd (AuthenticAMD; no AMD vPMU yet, so the guest has no PMU).
    #[arg(long, value_enum, default_value_t = VendorArg::Intel)]
    pub cpu_vendor: VendorArg,
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
    /// Event filter (TOML or JSON, KVM_SET_PMU_EVENT_FILTER semantics): denied events never
    /// count nor raise PMIs; see docs/FILTER.md.
    #[arg(long, value_name = "FILE")]
    pub pmu_filter: Option<std::path::PathBuf>,
    /// Offer the paravirtual PMU page (batched programming, exitless reads); off: guests
    /// fall back to MSRs.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub pv: OnOff,
    /// Software PEBS: advertise PEBS (record format 1) and write a record into the guest's
    /// DS buffer on each PEBS counter overflow.
    #[arg(long)]
    pub pebs: bool,
    /// Order of the requests before each entry: PMU/PMI then NMI (ours), or NMI first (legacy).
    #[arg(long, value_enum, default_value_t = OrderArg::PmiFirst)]
    pub request_order: OrderArg,
    /// Inject an NMI into vCPU 0 every this many milliseconds (a host NMI source).
    #[arg(long, value_name = "MS")]
    pub nmi_every: Option<f64>,
    /// Most share of vCPU time (percent) the VMM spends handling overflow notifications
    /// before it stretches sampling periods, like perf's perf_cpu_time_max_percent (100:
    /// never throttle).
    #[arg(long, value_name = "PCT", default_value_t = vmm::throttle::DEFAULT_MAX_PERCENT,
          value_parser = clap::value_parser!(u8).range(1..=100))]
    pub pmi_max_percent: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NativeArg {
    Auto,
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VendorArg {
    Intel,
    Amd,
}

impl From<VendorArg> for vmm::identity::CpuVendor {
    fn from(v: VendorArg) -> Self {
        match v {
            VendorArg::Intel => vmm::identity::CpuVendor::Intel,
            VendorArg::Amd => vmm::identity::CpuVendor::Amd,
        }
    }
}

impl From<NativeArg> for vmm::native::NativeMode {
    fn from(arg: NativeArg) -> Self {
        match arg {
            NativeArg::Auto => vmm::native::NativeMode::Auto,
            NativeArg::On => vmm::native::NativeMode::On,
            NativeArg::Off => vmm::native::NativeMode::Off,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OrderArg {
    PmiFirst,
    Legacy,
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
