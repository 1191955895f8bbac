//! `perfvm record`: sample a guest workload through its perf agent (or, with `--reference`
//! on the exact backend, attribute every retired instruction), symbolize, and write the
//! profile (documented JSON) plus collapsed stacks for flamegraph tools.

use crate::cli::{BackendArg, RecordArgs};
use crate::events::{self, Event};
use crate::profile::{Profile, ProfileRow};
use crate::run::{boot_under_agent, vm_config};
use crate::stat::agent_cmdline;
use crate::symbols::Symbols;
use crate::Failure;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;
use vmm::VmConfig;

/// Format tag of record files.
pub const FORMAT: &str = "perfvm-record-1";

/// One sample, as `perfvm script` prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Host ns since the VM started (agent samples: guest TSC turned into ns).
    pub time_ns: u64,
    /// The vCPU it was taken on.
    pub vcpu: u32,
    /// The guest task (0: none known).
    pub task: u32,
    /// The interrupted instruction pointer.
    pub ip: u64,
    /// Events this sample stands for.
    pub period: u64,
    /// Return addresses, innermost caller first (empty without `-g`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callchain: Vec<u64>,
}

/// What `perfvm record` writes (`-o FILE`, JSON). Documented in docs/RECORD.md.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecordFile {
    pub format: String,
    pub guest: String,
    /// Path of the guest ELF the samples were symbolized with.
    pub elf: String,
    pub args: Vec<String>,
    pub event: String,
    pub raw_event: u16,
    /// Sampling period in event units (1 for the reference).
    pub period: u64,
    pub backend: String,
    pub policy: String,
    /// "sampled" (PMIs through the guest's perf agent), "vcpus" (the VMM sampled every vCPU,
    /// `-a`) or "reference" (every retired
    /// instruction, exact backend).
    pub mode: String,
    /// Samples taken (reference: instructions retired).
    pub samples: u64,
    pub samples_dropped: u64,
    /// Host time of the guest workload (agent START..END marks), and of the whole VM run.
    pub workload_ns: Option<u64>,
    pub wall_ns: u64,
    pub profile: Profile,
    /// Weight per (rip, task id), for re-symbolization.
    pub rips: Vec<(u64, u32, u64)>,
    /// Every sample in order (sampled records; the reference has only `rips`).
    #[serde(default)]
    pub sample_list: Vec<Sample>,
    /// Samples carry call chains (`-g`).
    #[serde(default)]
    pub callgraph: bool,
    /// Guest task names by task id (the agent's tasks).
    #[serde(default)]
    pub tasks: std::collections::BTreeMap<u32, String>,
    /// What the sampled event counted in the workload, as the agent reports it.
    #[serde(default)]
    pub event_count: Option<u64>,
    /// The perf backend's overflow notifications: taken, lost, throttled.
    #[serde(default)]
    pub notifications: vmm::backends::perf::NotificationStats,
    /// The run was cut short (SIGINT, SIGTERM or --timeout): the profile holds what was
    /// recorded until then.
    #[serde(default)]
    pub partial: bool,
    /// VM exits while the workload ran, but its console output (sampling should cost at most
    /// 2 per sample).
    #[serde(default)]
    pub exits: u64,
    /// The run's VM statistics (`--stats`); not stored in the file.
    #[serde(skip)]
    pub stats: Option<vmm::stats::VmStats>,
}

impl RecordFile {
    /// Why far fewer samples were captured than the event's count and the period predict
    /// (under half), if they were.
    fn shortfall(&self) -> Option<String> {
        let due = self.event_count? / self.period.max(1);
        if self.mode != "sampled" || due < 10 || self.samples * 2 >= due {
            return None;
        }
        let n = self.notifications;
        Some(format!(
            "captured {} samples where the event's count and period predict about {due}: {} overflow notifications lost, {} periods throttled",
            self.samples, n.lost, n.throttled
        ))
    }

    /// What perf's report calls the event count: the sum of the sample periods (every
    /// sample stands for `period` events; the reference's period is 1).
    pub fn sampled_event_count(&self) -> u64 {
        self.profile.total().saturating_mul(self.period)
    }

    /// VM exits of the workload per sample taken (None without samples).
    pub fn exits_per_sample(&self) -> Option<f64> {
        (self.mode == "sampled" && self.samples > 0).then(|| self.exits as f64 / self.samples as f64)
    }
}

impl RecordFile {
    pub fn load(path: &Path) -> Result<RecordFile, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let file: RecordFile =
            serde_json::from_str(&text).map_err(|e| format!("{}: not a perfvm record file: {e}", path.display()))?;
        if file.format != FORMAT {
            return Err(format!("{}: unsupported record format '{}'", path.display(), file.format));
        }
        Ok(file)
    }
}

/// Period from `-c` / `-F`: frequency means samples per second of guest cycles. The exact
/// backend counts retired instructions, not time, so it takes a period of its own.
fn period(args: &RecordArgs, event: Event, native: bool, how: How) -> Result<u64, Failure> {
    let exact = args.vm.pmu.backend == BackendArg::Exact && how != How::Vcpus;
    match (args.count, args.freq) {
        (Some(_), Some(_)) => Err(Failure::usage("give -c PERIOD or -F FREQ, not both")),
        (Some(0), _) => Err(Failure::usage("-c PERIOD must be positive")),
        (Some(c), None) => Ok(c),
        (None, None) if exact => Ok(crate::cli::DEFAULT_EXACT_PERIOD),
        (None, freq) => {
            let freq = freq.unwrap_or(crate::cli::default_record_freq(native));
            let is_cycles = matches!(event.raw, 0x003c | 0x013c);
            if !is_cycles || exact {
                return Err(Failure::usage(format!(
                    "-F needs a cycles event on the perf backend; give -c PERIOD for {}",
                    event.name
                )));
            }
            if freq == 0 {
                return Err(Failure::usage("-F FREQ must be positive"));
            }
            let khz = vmm::kvm::guest_tsc_khz().map_err(|e| Failure::usage(e.to_string()))?;
            Ok((khz * 1000 / freq).max(1))
        }
    }
}

/// Fail before the run, not after it, where `path` cannot be written.
fn check_writable(path: &str) -> Result<(), Failure> {
    let existed = Path::new(path).exists();
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| Failure::usage(format!("cannot write {path}: {e}")))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Who takes the samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// The guest kit's perf agent, on PMIs of the virtual PMU.
    Agent,
    /// The exact backend attributes every retired instruction (the reference).
    Reference,
    /// The VMM samples every vCPU (`-a`): any guest, no agent.
    Vcpus,
}

/// Boot a guest, sample it as `how` says, and build its record. `callgraph`: with call
/// chains.
#[allow(clippy::too_many_arguments)]
pub fn record(
    mut config: VmConfig,
    guest: &str,
    args: &[String],
    event: Event,
    period: u64,
    how: How,
    callgraph: bool,
    started: Instant,
) -> Result<(RecordFile, i32), Failure> {
    if period >= 1 << 31 && how == How::Agent {
        return Err(Failure::usage("-c PERIOD must be below 2^31"));
    }
    let extra = std::mem::take(&mut config.cmdline);
    config.cmdline = match how {
        How::Reference => {
            // The agent counts instructions (so the VMM single-steps) and the VMM attributes
            // every retired instruction; no PMIs disturb the workload.
            if let Some(p) = config.pmu.as_mut() {
                p.trace_rips = true;
            }
            agent_cmdline("stat -e 0x00c0", args, &extra)
        }
        How::Agent => {
            let g = if callgraph { " -g" } else { "" };
            agent_cmdline(&format!("record -e {:#06x} -c {period}{g}", event.raw), args, &extra)
        }
        How::Vcpus => {
            config.sampling =
                Some(vmm::sampler::SamplingConfig { period, callchain: callgraph, max_samples: config.max_samples });
            [args.join(" "), extra].iter().filter(|s| !s.is_empty()).cloned().collect::<Vec<_>>().join(" ")
        }
    };
    let elf_bytes = std::fs::read(&config.kernel).unwrap_or_default();
    let report = boot_under_agent(&config, started)?;
    let code = report.end.exit_code();
    if let Some(msg) = report.end.message() {
        eprintln!("perfvm: {msg}");
    }
    let symbols = Symbols::from_elf(&elf_bytes);
    if symbols.is_empty() {
        eprintln!("perfvm: {} has no function symbols; samples show as [unknown]", config.kernel.display());
    }
    let object = Path::new(guest).file_stem().and_then(|s| s.to_str()).unwrap_or("guest").to_owned();
    let sample_list: Vec<Sample> = match how {
        How::Reference => Vec::new(),
        How::Agent => {
            let at = agent_clock(&report.agent, report.tsc_khz);
            let to_sample = |s: &vmm::devices::SampleRecord| Sample {
                time_ns: at(s.tsc),
                vcpu: 0,
                task: s.task,
                ip: s.rip,
                period,
                callchain: s.callchain.clone(),
            };
            report.agent.samples.iter().map(to_sample).collect()
        }
        How::Vcpus => report
            .samples
            .taken
            .iter()
            .map(|s| Sample {
                time_ns: s.time_ns,
                vcpu: s.vcpu,
                task: 0,
                ip: s.ip,
                period,
                callchain: s.callchain.clone(),
            })
            .collect(),
    };
    let command_of = |task: u32| {
        if task == 0 {
            object.clone()
        } else {
            report.agent.tasks.get(&task).cloned().unwrap_or_else(|| format!("task-{task}"))
        }
    };
    let mut weights: HashMap<(u64, u32), u64> = HashMap::new();
    let profile = if how == How::Reference {
        for (rip, n) in &report.rip_profile {
            *weights.entry((*rip, 0)).or_default() += n;
        }
        Profile::from_rows(weights.iter().map(|(&(rip, task), &weight)| ProfileRow {
            command: command_of(task),
            object: object.clone(),
            symbol: symbols.name(rip),
            weight,
            callers: Vec::new(),
        }))
    } else {
        for s in &sample_list {
            *weights.entry((s.ip, s.task)).or_default() += 1;
        }
        Profile::from_rows(sample_list.iter().map(|s| ProfileRow {
            command: command_of(s.task),
            object: object.clone(),
            symbol: symbols.name(s.ip),
            weight: 1,
            // A return address is just past its call: the caller is the byte before it.
            callers: s.callchain.iter().rev().map(|ret| symbols.name(ret.saturating_sub(1))).collect(),
        }))
    };
    let mut rips: Vec<(u64, u32, u64)> = weights.into_iter().map(|((rip, task), w)| (rip, task, w)).collect();
    rips.sort_unstable();
    let pmu = report.stats.pmu.clone();
    let pmu = pmu.as_ref();
    let reference = how == How::Reference;
    let file = RecordFile {
        format: FORMAT.into(),
        guest: guest.to_owned(),
        elf: std::fs::canonicalize(&config.kernel).unwrap_or(config.kernel.clone()).display().to_string(),
        args: args.to_vec(),
        event: if reference { "instructions".into() } else { event.name.into() },
        raw_event: if reference { 0x00c0 } else { event.raw },
        period,
        backend: match how {
            How::Vcpus => "VMM: vCPU thread task-clock x TSC (no agent)".into(),
            _ => pmu.map(|p| p.backend_detail.clone()).unwrap_or_default(),
        },
        policy: pmu.map(|p| p.policy.clone()).unwrap_or_default(),
        mode: match how {
            How::Agent => "sampled",
            How::Reference => "reference",
            How::Vcpus => "vcpus",
        }
        .into(),
        samples: profile.total(),
        samples_dropped: report.agent.samples_dropped_guest + report.agent.samples_dropped_vmm + report.samples.dropped,
        workload_ns: report.agent.workload_ns(),
        wall_ns: report.stats.wall_ns,
        profile,
        rips,
        callgraph: callgraph && how != How::Reference,
        tasks: report.agent.tasks.clone(),
        sample_list,
        event_count: report.agent.counts.iter().find(|c| c.task == 0 && c.event == event.raw).map(|c| c.value),
        notifications: pmu.map(|p| p.notifications).unwrap_or_default(),
        partial: matches!(report.end, vmm::VmEnd::Signal { .. } | vmm::VmEnd::Timeout { .. }),
        exits: report.stats.workload_exits_but_console(),
        stats: Some(report.stats),
    };
    Ok((file, code))
}

/// Guest TSC (at `tsc_khz`) -> host ns since the VM was built, through the agent's START
/// mark (0 where the agent sent no TSC or no mark).
fn agent_clock(agent: &vmm::devices::AgentData, tsc_khz: u64) -> impl Fn(u64) -> u64 {
    let start = agent.marks.iter().find(|m| m.kind == 1).map(|m| (m.tsc, m.host_ns));
    let khz = tsc_khz.max(1);
    move |tsc| match start {
        Some((t0, ns0)) if tsc != 0 => {
            let delta = (i128::from(tsc) - i128::from(t0)) * 1_000_000 / i128::from(khz);
            (i128::from(ns0) + delta).max(0) as u64
        }
        _ => 0,
    }
}

pub fn run(args: RecordArgs, started: Instant) -> Result<i32, Failure> {
    let event = events::parse(&args.event).map_err(Failure::usage)?;
    if args.reference && args.vm.pmu.backend != BackendArg::Exact {
        return Err(Failure::usage("--reference needs --backend exact"));
    }
    let how = match (args.reference, args.all_cpus) {
        (true, true) => return Err(Failure::usage("--reference and -a exclude each other")),
        (true, false) => How::Reference,
        (false, true) => How::Vcpus,
        (false, false) => How::Agent,
    };
    if how == How::Vcpus && !matches!(event.raw, 0x003c | 0x013c) {
        return Err(Failure::usage(format!(
            "-a samples cycles (the vCPU threads' time); {} needs the guest's perf agent (drop -a)",
            event.name
        )));
    }
    if how != How::Vcpus {
        crate::run::check_agent_vendor(&args.vm)?;
    }
    let config = vm_config(&args.vm, false)?;
    let native = crate::bench::runs_natively(&config, config.native);
    let period = if args.reference { 1 } else { period(&args, event, native, how)? };
    let folded = format!("{}.folded", args.output);
    check_writable(&args.output)?;
    check_writable(&folded)?;
    let (file, code) = record(config, &args.vm.guest, &args.args, event, period, how, args.call_graph, started)?;
    let json = serde_json::to_string(&file).expect("JSON");
    std::fs::write(&args.output, &json).map_err(|e| Failure::usage(format!("cannot write {}: {e}", args.output)))?;
    std::fs::write(&folded, file.profile.folded())
        .map_err(|e| Failure::usage(format!("cannot write {folded}: {e}")))?;
    eprintln!(
        "[ perfvm record: Captured and wrote {:.3} MB {} ({} samples{}{}) ]",
        json.len() as f64 / 1e6,
        args.output,
        file.samples,
        if file.samples_dropped > 0 { format!(", {} dropped", file.samples_dropped) } else { String::new() },
        if file.partial { ", partial: the run was cut short" } else { "" }
    );
    if args.stats {
        if let Some(stats) = &file.stats {
            eprint!("{}", crate::stats_text::vm_stats(stats));
        }
        if let Some(per_sample) = file.exits_per_sample() {
            eprintln!(
                "\n  {} exits while the workload ran (console output aside), {} samples: {per_sample:.2} exits per sample",
                file.exits, file.samples
            );
        }
    }
    if let Some(warning) = file.shortfall() {
        eprintln!("perfvm: warning: {warning}");
    }
    if file.samples == 0 && code == 0 {
        eprintln!(
            "perfvm: no samples (is the guest built with the guest kit's perf agent, and does the backend count {}?)",
            file.event
        );
    }
    Ok(code)
}
