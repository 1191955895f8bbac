//! `perfvm record`: sample a guest workload through its perf agent (several events taking
//! turns on the counters where they are more than the counters, as `stat` multiplexes
//! them), or, with `-a`, from the VMM; with `--reference` on the exact backend, attribute
//! every retired instruction; and write the record file (the profile library's format)
//! plus collapsed stacks for flamegraph tools.

use crate::cli::{BackendArg, CallGraphArg, RecordArgs};
use crate::output::{check_writable, warn_all, write_file, write_file_keeping_old};
use crate::run::{boot_under_agent, vm_config};
use crate::Failure;
use pmu::tsc::{SamplePeriod, TscRate};
use profile::agent::Order;
use profile::events::{self, Event};
use profile::{Mode, Notifications, Profile, Record, Sample, SampledEvent, FORMAT};
use std::time::Instant;
use vmm::profiling::sampler::CallGraph;
use vmm::profiling::unwind::cfi_section;
use vmm::VmConfig;

/// What one recorded run gives.
#[derive(Debug)]
pub struct Capture {
    /// The record file.
    pub record: Record,
    /// Its first event's samples resolved against the guest's symbols.
    pub profile: Profile,
    /// The run's exit code.
    pub code: i32,
    /// The run's VM statistics.
    pub stats: vmm::stats::VmStats,
    /// The guest's perf agent said something (a mark, a message).
    pub agent_seen: bool,
    /// CPU time of the vCPU threads over the run, ns.
    pub thread_ns: u64,
}

/// Period from `-c` / `-F`: frequency means samples per second of guest cycles. The exact
/// backend counts retired instructions, not time, so it takes a period of its own.
fn period(args: &RecordArgs, events: &[Event], native: bool, mode: Mode) -> Result<SamplePeriod, Failure> {
    let exact = args.vm.pmu.backend == BackendArg::Exact && mode != Mode::Vcpus;
    match (args.count, args.freq) {
        (Some(_), Some(_)) => Err(Failure::usage("give -c PERIOD or -F FREQ, not both")),
        (Some(0), _) => Err(Failure::usage("-c PERIOD must be positive")),
        (Some(c), None) => Ok(SamplePeriod::Count(c)),
        (None, None) if exact => Ok(SamplePeriod::Count(crate::cli::DEFAULT_EXACT_PERIOD)),
        (None, freq) => {
            let freq = freq.unwrap_or(crate::cli::default_record_freq(native));
            if let Some(other) = events.iter().find(|&&e| !events::is_cycles(e) || exact) {
                return Err(Failure::usage(format!(
                    "-F needs a cycles event on the perf backend; give -c PERIOD for {}",
                    other.name
                )));
            }
            if freq == 0 {
                return Err(Failure::usage("-F FREQ must be positive"));
            }
            Ok(SamplePeriod::Hz(freq))
        }
    }
}

/// How `-g` / `--call-graph` unwind in `mode` for a guest ELF of these bytes: with -a the
/// VMM unwinds, by the ELF's CFI by default where it has some; the guest agent walks frame
/// pointers.
fn call_graph(args: &RecordArgs, mode: Mode, elf: &[u8]) -> Result<Option<CallGraph>, Failure> {
    if !args.call_graph && args.call_graph_mode.is_none() {
        return Ok(None);
    }
    let cfi = cfi_section(elf);
    match (mode, args.call_graph_mode) {
        (Mode::Reference, _) => Ok(None),
        (Mode::Sampled, Some(CallGraphArg::Dwarf)) => Err(Failure::usage(
            "--call-graph dwarf is the VMM's unwinding: add -a (the guest agent walks frame pointers)",
        )),
        (Mode::Sampled, _) | (Mode::Vcpus, Some(CallGraphArg::Fp)) => Ok(Some(CallGraph::FramePointers)),
        (Mode::Vcpus, Some(CallGraphArg::Dwarf)) if cfi.is_none() => Err(Failure::usage(
            "--call-graph dwarf: the guest ELF has no .eh_frame or .debug_frame (build it with -g, or use --call-graph fp)",
        )),
        (Mode::Vcpus, _) if cfi.is_some() => Ok(Some(CallGraph::Dwarf)),
        (Mode::Vcpus, _) => Ok(Some(CallGraph::FramePointers)),
    }
}

/// How the chains of a record were unwound, as its header says it.
fn unwinding(mode: Mode, callgraph: Option<CallGraph>, elf: &[u8]) -> Option<String> {
    match (mode, callgraph?) {
        (Mode::Reference, _) => None,
        (Mode::Sampled, _) => Some("fp: the guest agent followed the frame pointers".into()),
        (_, CallGraph::FramePointers) => Some("fp: the VMM followed the guest's frame pointers".into()),
        (_, CallGraph::Dwarf) => Some(format!(
            "dwarf: the VMM unwound with the guest ELF's {} (frame pointers where no FDE covers an address)",
            cfi_section(elf).map_or("CFI", |s| s.name())
        )),
    }
}

/// Boot a guest, sample `events` as `mode` says (`callgraph`: with call chains unwound so),
/// and build its record.
#[allow(clippy::too_many_arguments)]
pub fn record(
    mut config: VmConfig,
    guest: &str,
    args: &[String],
    events: &[Event],
    period: SamplePeriod,
    mode: Mode,
    callgraph: Option<CallGraph>,
    started: Instant,
) -> Result<Capture, Failure> {
    if matches!(period, SamplePeriod::Count(n) if n >= 1 << 31) && mode == Mode::Sampled {
        return Err(Failure::usage("-c PERIOD must be below 2^31"));
    }
    let elf_bytes = std::fs::read(&config.kernel).unwrap_or_default();
    let extra = std::mem::take(&mut config.cmdline);
    let vendor = config.cpu_vendor.pmu_vendor();
    let instructions = events::by_raw(0x00c0);
    config.cmdline = match mode {
        Mode::Reference => {
            // The agent counts instructions (so the VMM single-steps) and the VMM attributes
            // every retired instruction; no PMIs disturb the workload.
            if let Some(p) = config.pmu.as_mut() {
                p.trace_rips = true;
            }
            Order::Stat { events: vec![instructions], per_task: false }.cmdline(vendor, args, &extra)
        }
        Mode::Sampled => Order::Record { events: events.to_vec(), period, callchain: callgraph.is_some() }
            .cmdline(vendor, args, &extra),
        Mode::Vcpus => {
            config.sampling = Some(vmm::profiling::sampler::SamplingConfig {
                period,
                callchain: callgraph,
                max_samples: config.max_samples,
            });
            [args.join(" "), extra].iter().filter(|s| !s.is_empty()).cloned().collect::<Vec<_>>().join(" ")
        }
    };
    let report = boot_under_agent(&config, started)?;
    crate::run::note_stepped_size(&report, args);
    let code = report.end.exit_code();
    if let Some(msg) = report.end.message() {
        eprintln!("perfvm: {msg}");
    }
    // The running VM states its TSC rate (a second VM would only ask KVM the same again).
    let tsc = TscRate::from_khz(report.tsc_khz)
        .ok_or_else(|| Failure::failed("the VM stated no TSC rate: -F cannot be turned into a period"))?;
    let period = if mode == Mode::Reference { 1 } else { tsc.cycles_of(period) };
    let sampled: Vec<Event> = if mode == Mode::Reference { vec![instructions] } else { events.to_vec() };
    let mut unattributed = 0;
    let samples: Vec<Sample> = match mode {
        Mode::Reference => {
            let mut by_ip: Vec<(u64, u64)> = report.rip_profile.iter().map(|(&ip, &n)| (ip, n)).collect();
            by_ip.sort_unstable();
            by_ip
                .into_iter()
                .map(|(ip, n)| Sample { event: 0, time_ns: 0, vcpu: 0, task: 0, ip, period: n, callchain: vec![] })
                .collect()
        }
        Mode::Sampled => {
            let at = agent_clock(&report.agent, tsc);
            // Each sample carries its counter's event code, which names one event of the
            // list (record refuses two events of one code).
            let to_sample = |s: &vmm::devices::SampleRecord| {
                Some(Sample {
                    event: sampled.iter().position(|e| e.raw == s.event)?,
                    time_ns: at(s.tsc),
                    vcpu: s.vcpu,
                    task: s.task,
                    ip: s.rip,
                    period,
                    callchain: s.callchain.clone(),
                })
            };
            let samples: Vec<Sample> = report.agent.samples.iter().filter_map(to_sample).collect();
            unattributed = report.agent.samples.len() - samples.len();
            samples
        }
        Mode::Vcpus => report
            .samples
            .taken
            .iter()
            .map(|s| Sample {
                event: 0,
                time_ns: s.time_ns,
                vcpu: s.vcpu,
                task: 0,
                ip: s.ip,
                period,
                callchain: s.callchain.clone(),
            })
            .collect(),
    };
    let pmu = report.stats.pmu.as_ref();
    let notifications = pmu.map_or_else(Notifications::default, |p| {
        let n = p.notifications;
        Notifications { taken: n.taken, lost: n.lost, throttled: n.throttled }
    });
    let reference = mode == Mode::Reference;
    let whole_run = |e: &Event| report.agent.counts.iter().find(|c| c.task == 0 && c.event == e.raw);
    let sampled_event = |e: &Event| {
        let count = whole_run(e);
        SampledEvent {
            count: count.map(|c| c.value),
            time_enabled: count.map_or(0, |c| c.time_enabled),
            time_running: count.map_or(0, |c| c.time_running),
            ..SampledEvent::new(e.display(), e.raw, period)
        }
    };
    let record = Record {
        format: FORMAT.into(),
        guest: guest.to_owned(),
        elf: std::fs::canonicalize(&config.kernel).unwrap_or(config.kernel.clone()).display().to_string(),
        args: args.to_vec(),
        events: sampled.iter().map(sampled_event).collect(),
        backend: match mode {
            Mode::Vcpus => "VMM: vCPU thread task-clock x TSC (no agent)".into(),
            _ => pmu.map(|p| p.backend_detail.clone()).unwrap_or_default(),
        },
        policy: pmu.map(|p| p.policy.clone()).unwrap_or_default(),
        mode,
        callgraph: callgraph.is_some() && !reference,
        unwinding: unwinding(mode, callgraph, &elf_bytes),
        samples,
        tasks: report.agent.tasks.clone(),
        samples_dropped: report.agent.samples_dropped_guest
            + report.agent.samples_dropped_vmm
            + report.samples.dropped
            + unattributed as u64,
        notifications,
        partial: matches!(report.end, vmm::VmEnd::Signal { .. } | vmm::VmEnd::Timeout { .. }),
        workload_ns: report.agent.workload_ns(),
        wall_ns: report.stats.wall_ns,
        exits: report.stats.workload_exits_but_console(),
    };
    let (resolver, warnings) = crate::guest_symbols::resolver(&elf_bytes, &config.kernel.display().to_string(), false);
    warn_all(warnings);
    let profile = Profile::build(&record.of_event(0), &resolver);
    let agent_seen = report.agent.messages > 0 || !report.agent.marks.is_empty();
    let thread_ns = report.vcpu_counts.iter().map(|c| c.thread_ns).sum();
    Ok(Capture { record, profile, code, stats: report.stats, agent_seen, thread_ns })
}

/// Guest TSC (at `tsc`) -> host ns since the VM was built, through the agent's START mark
/// (0 where the agent sent no TSC or no mark).
fn agent_clock(agent: &vmm::devices::AgentData, tsc: TscRate) -> impl Fn(u64) -> u64 {
    let start = agent.marks.iter().find(|m| m.kind == vmm::guest_abi::MarkKind::Start).map(|m| (m.tsc, m.host_ns));
    move |at| match start {
        Some((t0, ns0)) if at != 0 => {
            (i128::from(ns0) + tsc.delta_ns(i128::from(at) - i128::from(t0))).clamp(0, i128::from(u64::MAX)) as u64
        }
        _ => 0,
    }
}

/// What `mode` can sample of `events`: the agent samples several, each of its own event
/// code (the code is all a sample carries); `-a` samples one clock, the reference
/// instructions.
fn check_events(events: &[Event], mode: Mode) -> Result<(), Failure> {
    let list = || events.iter().map(Event::display).collect::<Vec<_>>().join(", ");
    match (mode, events) {
        (Mode::Vcpus, [_, _, ..]) => Err(Failure::usage(format!(
            "-a samples one event, the vCPU threads' time, not {}: drop -a to sample several through the guest's perf agent",
            list()
        ))),
        (Mode::Vcpus, [event]) if !events::is_cycles(*event) => Err(Failure::usage(format!(
            "-a samples cycles (the vCPU threads' time); {} needs the guest's perf agent (drop -a)",
            event.name
        ))),
        (Mode::Vcpus, [event]) if event.levels == events::Levels::User => Err(Failure::usage(format!(
            "-a samples the vCPU threads' time, which cannot tell user mode from the kernel: {} (drop -a)",
            event.display()
        ))),
        (Mode::Reference, [_, _, ..]) => {
            Err(Failure::usage(format!("--reference attributes retired instructions, one event: not {}", list())))
        }
        _ => match same_code(events) {
            Some((a, b)) => Err(Failure::usage(format!(
                "{} and {} are one event code, whose samples cannot be told apart: record them in runs of their own",
                a.display(),
                b.display()
            ))),
            None => Ok(()),
        },
    }
}

/// The first two events of one code (`cycles:u`, `cycles:k`), if any.
fn same_code(events: &[Event]) -> Option<(Event, Event)> {
    events.iter().enumerate().find_map(|(i, &b)| events[..i].iter().find(|a| a.raw == b.raw).map(|&a| (a, b)))
}

pub fn run(args: RecordArgs, started: Instant) -> Result<i32, Failure> {
    let events = events::parse_list(&args.event).map_err(Failure::usage)?;
    if args.reference && args.vm.pmu.backend != BackendArg::Exact {
        return Err(Failure::usage("--reference needs --backend exact"));
    }
    let mode = match (args.reference, args.all_cpus) {
        (true, true) => return Err(Failure::usage("--reference and -a exclude each other")),
        (true, false) => Mode::Reference,
        (false, true) => Mode::Vcpus,
        (false, false) => Mode::Sampled,
    };
    check_events(&events, mode)?;
    if mode != Mode::Vcpus {
        crate::run::check_agent_vendor(&args.vm)?;
    }
    let config = vm_config(&args.vm, false)?;
    let callgraph = call_graph(&args, mode, &std::fs::read(&config.kernel).unwrap_or_default())?;
    let native = crate::bench::runs_natively(&config, config.native);
    let period = if args.reference { SamplePeriod::Count(1) } else { period(&args, &events, native, mode)? };
    let folded = format!("{}.folded", args.output);
    check_writable(&args.output)?;
    check_writable(&folded)?;
    let capture = record(config, &args.vm.guest, &args.args, &events, period, mode, callgraph, started)?;
    let (record, code) = (&capture.record, capture.code);
    let json = record.to_json();
    // The folded stacks (of the first event) first: the record file names the run, so it
    // lands last.
    write_file(&folded, capture.profile.folded().as_bytes())?;
    write_file_keeping_old(&args.output, json.as_bytes())?;
    eprintln!(
        "[ perfvm record: Captured and wrote {:.3} MB {} ({} samples{}{}) ]",
        json.len() as f64 / 1e6,
        args.output,
        record.sample_count(),
        if record.samples_dropped > 0 { format!(", {} dropped", record.samples_dropped) } else { String::new() },
        if record.partial { ", partial: the run was cut short" } else { "" }
    );
    if args.stats {
        eprint!("{}", crate::stats_text::vm_stats(&capture.stats));
        if let Some(per_sample) = record.exits_per_sample() {
            eprintln!(
                "\n  {} exits while the workload ran (console output aside), {} samples: {per_sample:.2} exits per sample",
                record.exits,
                record.sample_count()
            );
        }
    }
    let software_clock = mode == Mode::Vcpus || record.backend.contains("task-clock");
    for event in events.iter().filter(|e| e.levels == events::Levels::Kernel && software_clock) {
        eprintln!("perfvm: {}: the software clock samples every privilege level", event.display());
    }
    for warning in record.shortfalls() {
        eprintln!("perfvm: warning: {warning}");
    }
    let names = || record.events.iter().map(|e| e.name.as_str()).collect::<Vec<_>>().join(", ");
    if record.sample_count() == 0 && code == 0 {
        match capture.agent_seen || mode != Mode::Sampled {
            true if events.iter().all(|e| e.levels == events::Levels::User) && software_clock => eprintln!(
                "perfvm: no samples: the perf backend's software clock cannot tell user mode from the kernel ({}; \
                 --backend exact counts by privilege level)",
                names()
            ),
            true => eprintln!("perfvm: no samples (does the backend count {}?)", names()),
            false => eprintln!(
                "perfvm: no samples: the guest runs no perfvm agent (perfvm record -a samples any guest from the VMM)"
            ),
        }
    }
    Ok(code)
}
