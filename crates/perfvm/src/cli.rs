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
    /// Print every recorded sample, as `perf script` does, or export them for a viewer.
    Script(ScriptArgs),
    /// Reproduce the seed documents' measurements, legacy vs ours in one run (perfvm-bench).
    #[command(disable_help_flag = true)]
    Bench {
        /// perfvm-bench's arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// List the events the virtual PMU offers, as `perf list` does.
    List,
}

/// `-F` when neither `-c` nor `-F` is given (samples per second of guest cycles). Each
/// sample costs the guest ~200 us here (its PMI handler is emulated at ~1 us/instruction
/// plus a few exits), so 100 Hz keeps sampling overhead near 2% (docs/PERFORMANCE.md,
/// "Sampling overhead").
pub const DEFAULT_RECORD_FREQ: u64 = 100;

/// The same, for a guest that runs natively: a sample costs there what its exits cost
/// (tens of us), so 1 kHz, perf's habit, stays within a few percent and gives a ~1 s
/// workload a thousand samples.
pub const DEFAULT_NATIVE_RECORD_FREQ: u64 = 1000;

/// `record`'s default `-F` for a guest that runs natively or emulated.
pub fn default_record_freq(native: bool) -> u64 {
    if native {
        DEFAULT_NATIVE_RECORD_FREQ
    } else {
        DEFAULT_RECORD_FREQ
    }
}

/// `-c` on the exact backend when neither `-c` nor `-F` is given. Its events count retired
/// instructions (cycles are a model clock of one per instruction), single-stepped at ~10^5
/// per second here: ~100 samples from ftest's 10^6 instructions. Prime, so the samples do
/// not fall in step with a loop.
pub const DEFAULT_EXACT_PERIOD: u64 = 10_007;

#[derive(Debug, Args)]
pub struct StatArgs {
    /// Events to count, comma-separated or -e repeated (cycles, instructions, ref-cycles,
    /// cache-references, cache-misses, branches, branch-misses, or rUUEE), each optionally
    /// with :u (user mode) or :k (kernel). More than the vPMU has counters for are
    /// multiplexed and scaled, as perf does.
    #[arg(short = 'e', long = "event", default_value = "cycles,instructions,branches,branch-misses")]
    pub events: Vec<String>,
    /// Count per guest task too (counters saved and restored on every guest context switch),
    /// with a row for what ran outside the tasks.
    #[arg(long = "per-task")]
    pub per_task: bool,
    /// Run the workload N times and print the mean of each count with its spread.
    #[arg(short = 'r', long = "repeat", value_name = "N", default_value_t = 1)]
    pub repeat: u32,
    /// Count the whole guest from the VMM, no agent needed (any guest ELF): cycles are the
    /// vCPU threads' CPU time x TSC; --backend exact counts instructions and branches
    /// exactly, single-stepping the whole run.
    #[arg(short = 'a', long = "all-cpus")]
    pub all_cpus: bool,
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
    /// Events to sample, comma-separated, each optionally with :u or :k; more than the
    /// counters take turns on them (multiplexed, as stat does).
    #[arg(short = 'e', long = "event", default_value = "cycles")]
    pub event: String,
    /// Sample every PERIOD events (default: -F 1000 natively and -F 100 emulated for cycles
    /// on the perf backend, 10007 on the exact backend).
    #[arg(short = 'c', long = "count", value_name = "PERIOD")]
    pub count: Option<u64>,
    /// Sample FREQ times per second of guest cycles (cycles events on the perf backend;
    /// default 1000 natively, 100 emulated, when neither -c nor -F is given).
    #[arg(short = 'F', long = "freq")]
    pub freq: Option<u64>,
    /// Output file (JSON); collapsed stacks go to FILE.folded.
    #[arg(short = 'o', long = "output", default_value = "perfvm.data.json")]
    pub output: String,
    /// Exact backend: attribute every retired instruction instead of sampling (the reference).
    #[arg(long)]
    pub reference: bool,
    /// Sample every vCPU from the VMM, as `perf kvm --guest record` does: any guest ELF, no
    /// agent needed (cycles: the vCPU threads' time).
    #[arg(short = 'a', long = "all-cpus")]
    pub all_cpus: bool,
    /// Record call chains: with -a unwound by the VMM with the guest ELF's CFI (dwarf) when
    /// it has .eh_frame or .debug_frame, else by frame pointers; without -a the guest
    /// agent walks frame pointers.
    #[arg(short = 'g')]
    pub call_graph: bool,
    /// Record call chains unwound so: fp (frame pointers) or dwarf (the guest ELF's CFI,
    /// unwound by the VMM: with -a).
    #[arg(long = "call-graph", value_enum, value_name = "MODE")]
    pub call_graph_mode: Option<CallGraphArg>,
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
    /// Record file to read (default perfvm.data.json); with --compare B, the A side.
    #[arg(short = 'i', long = "input")]
    pub input: Option<String>,
    /// Also write a flamegraph SVG; with --compare, a differential one (B against A: red
    /// grew, blue shrank).
    #[arg(long, value_name = "OUT.svg")]
    pub flamegraph: Option<String>,
    /// Show two record files side by side with their total variation distance:
    /// --compare A B, or -i A --compare B.
    #[arg(long, num_args = 1..=2, value_names = ["A", "B"])]
    pub compare: Option<Vec<String>>,
    /// Columns to group samples by, comma-separated: comm, dso, sym, srcline (file:line from
    /// the guest ELF's DWARF). Default: comm,dso,sym.
    #[arg(short = 's', long = "sort", value_name = "KEYS")]
    pub sort: Option<String>,
    /// Under each entry, its call graph (needs a record made with -g).
    #[arg(short = 'g', long = "call-graph")]
    pub call_graph: bool,
    /// With call chains, show only where samples were taken (Self), not the Children column.
    #[arg(long = "no-children")]
    pub no_children: bool,
    /// Print the report as text on stdout (perf's --stdio; the only interface here).
    #[arg(long)]
    pub stdio: bool,
    /// Add a column with each entry's number of samples.
    #[arg(short = 'n', long = "show-nr-samples")]
    pub show_nr_samples: bool,
    /// Leave out entries (and call-graph branches) under this share of the events, percent.
    #[arg(long = "percent-limit", value_name = "PCT")]
    pub percent_limit: Option<f64>,
    /// Show only this event of a record of several (as `record -e` named it, e.g.
    /// instructions:k); default: each in a section of its own.
    #[arg(long = "event", value_name = "NAME")]
    pub event: Option<String>,
}

#[derive(Debug, Args)]
pub struct ScriptArgs {
    /// Record file to read.
    #[arg(short = 'i', long = "input", default_value = "perfvm.data.json")]
    pub input: String,
    /// Output format: perf (perf script's text), speedscope (JSON for
    /// https://www.speedscope.app) or pprof (gzipped profile.proto for go tool pprof and fleet
    /// profilers; needs -o).
    #[arg(long, value_enum, default_value_t = ScriptFormat::Perf)]
    pub format: ScriptFormat,
    /// Write to FILE instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<String>,
    /// Print the source line (file:line, from the guest ELF's DWARF) under each address.
    #[arg(long)]
    pub srcline: bool,
    /// Leave out the call chains.
    #[arg(short = 'G', long = "hide-call-graph")]
    pub hide_call_graph: bool,
    /// Only this event's samples of a record of several (the exports take the first
    /// without it).
    #[arg(long = "event", value_name = "NAME")]
    pub event: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScriptFormat {
    Perf,
    Speedscope,
    Pprof,
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
    /// Text appended to the guest command line (after the guest's name; for a Linux kernel,
    /// after perfvm's default Linux command line, which --stats prints).
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    pub cmdline: String,
    /// Initial ramdisk for a Linux kernel (GUEST a bzImage or a vmlinux ELF).
    #[arg(long, value_name = "FILE")]
    pub initrd: Option<std::path::PathBuf>,
    /// Stop the guest after this many seconds.
    #[arg(long, allow_negative_numbers = true)]
    pub timeout: Option<f64>,
    /// Run the guest natively (at host speed, kvm_pvm's VIF mode): auto = when the host
    /// supports it and the guest carries the perfvm VIF note; on = any 64-bit guest.
    #[arg(long, value_enum, default_value_t = NativeArg::Auto)]
    pub native: NativeArg,
    /// The CPU the guest is told it runs on, whatever the host: intel (GenuineIntel with the
    /// Intel vPMU) or amd (AuthenticAMD with the AMD vPMU: PerfMonV2, --counters 48-bit
    /// counters up to 6, no fixed counters); stat and record's perf agent drive either.
    /// Default: the host CPU's vendor on kvm_intel/kvm_amd, intel on kvm_pvm.
    #[arg(long, value_enum)]
    pub cpu_vendor: Option<VendorArg>,
    /// Confine the VMM's threads with seccomp filters (docs/SECURITY.md); off is for
    /// debugging a filter only, and says so.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub seccomp: OnOff,
    #[command(flatten)]
    pub pmu: PmuArgs,
}

/// The virtual PMU.
#[derive(Debug, Args, Clone)]
pub struct PmuArgs {
    /// Give the guest a virtual PMU (Intel architectural perfmon v2, or AMD PerfMonV2 with
    /// --cpu-vendor amd).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub pmu: OnOff,
    /// What counts: host perf events, or exact counting by single-stepping.
    #[arg(long, value_enum, default_value_t = BackendArg::Perf)]
    pub backend: BackendArg,
    /// How the exact backend finds what retired: single-step every instruction, or run the
    /// guest down the path the VMM runs ahead of it and step only what a block cannot hold
    /// (same counts).
    #[arg(long, value_enum, default_value_t = ExactEngineArg::Blocks)]
    pub exact_engine: ExactEngineArg,
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
    /// With the PV page, take the agent's samples in the VMM at the exit where a sampling
    /// counter wraps, with no PMI into the guest per sample; off: a PMI per sample, taken
    /// by the agent's handler.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub pv_samples: OnOff,
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
    #[arg(long, value_name = "PCT", default_value_t = vmm::vpmu::throttle::DEFAULT_MAX_PERCENT,
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

impl From<VendorArg> for vmm::arch::x86_64::identity::CpuVendor {
    fn from(v: VendorArg) -> Self {
        match v {
            VendorArg::Intel => vmm::arch::x86_64::identity::CpuVendor::Intel,
            VendorArg::Amd => vmm::arch::x86_64::identity::CpuVendor::Amd,
        }
    }
}

impl From<NativeArg> for vmm::host::pvm::native::NativeMode {
    fn from(arg: NativeArg) -> Self {
        match arg {
            NativeArg::Auto => vmm::host::pvm::native::NativeMode::Auto,
            NativeArg::On => vmm::host::pvm::native::NativeMode::On,
            NativeArg::Off => vmm::host::pvm::native::NativeMode::Off,
        }
    }
}

/// How `record` unwinds call chains (perf's `--call-graph`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CallGraphArg {
    /// Frame pointers.
    Fp,
    /// The guest ELF's DWARF CFI (.eh_frame or .debug_frame).
    Dwarf,
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
pub enum ExactEngineArg {
    Steps,
    Blocks,
}

impl From<ExactEngineArg> for vmm::config::ExactEngine {
    fn from(arg: ExactEngineArg) -> Self {
        match arg {
            ExactEngineArg::Steps => vmm::config::ExactEngine::Steps,
            ExactEngineArg::Blocks => vmm::config::ExactEngine::Blocks,
        }
    }
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

/// The command whose help fits the arguments: `perfvm stat` for `stat ...`.
pub fn help_command(args: &[String]) -> String {
    use clap::CommandFactory;
    match args.get(1) {
        Some(sub) if Cli::command().find_subcommand(sub).is_some() => format!("perfvm {sub}"),
        _ => "perfvm".into(),
    }
}

/// clap's error as one line: its message, the details clap puts on the lines below it
/// (missing arguments, possible values, tips), and the help to read (`help`, unless the
/// error shows a usage line).
pub fn error_line(rendered: &str, help: &str) -> String {
    let mut line = String::new();
    let mut help = help.to_owned();
    for part in rendered.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("For more information")) {
        if let Some(usage) = part.strip_prefix("Usage: ") {
            let words = usage.split_whitespace().take_while(|w| !w.starts_with(['[', '<', '-']));
            help = words.collect::<Vec<_>>().join(" ");
        } else if line.is_empty() {
            line.push_str(part.trim_start_matches("error: "));
        } else {
            line.push_str(if part.starts_with("tip:") { "; " } else { " " });
            line.push_str(part);
        }
    }
    if line.is_empty() {
        line.push_str("invalid arguments");
    }
    format!("{line} (see {help} --help)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn error_of(args: &[&str]) -> String {
        let owned: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        error_line(&Cli::try_parse_from(args).unwrap_err().to_string(), &help_command(&owned))
    }

    #[test]
    fn clap_errors_keep_their_details_on_one_line() {
        assert_eq!(
            error_of(&["perfvm", "stat"]),
            "the following required arguments were not provided: <GUEST> (see perfvm stat --help)"
        );
        let e = error_of(&["perfvm", "run", "hello", "--backend", "foo"]);
        assert_eq!(
            e,
            "invalid value 'foo' for '--backend <BACKEND>' [possible values: perf, exact] (see perfvm run --help)"
        );
        let e = error_of(&["perfvm", "run", "hello", "--bakend", "exact"]);
        assert!(e.contains("unexpected argument '--bakend' found; tip: a similar argument exists: '--backend'"), "{e}");
        assert!(e.ends_with("(see perfvm run --help)"), "{e}");
        assert_eq!(error_line("error: boom\n", "perfvm"), "boom (see perfvm --help)");
        assert_eq!(error_of(&["perfvm", "frobnicate"]), "unrecognized subcommand 'frobnicate' (see perfvm --help)");
    }
}
