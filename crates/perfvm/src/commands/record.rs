//! `perfvm record`: sample a guest workload through its perf agent (several events taking
//! turns on the counters where they are more than the counters, as `stat` multiplexes
//! them), or, with `-a`, from the VMM; with `--reference` on the exact backend, attribute
//! every retired instruction; and write the record file (the profile library's format)
//! plus collapsed stacks for flamegraph tools. The run's record is assembled by the
//! session layer (`session::record`); this checks the flags and writes.

use crate::cli::{BackendArg, CallGraphArg, RecordArgs};
use crate::config::{check_agent_vendor, vm_config};
use crate::output::{check_writable, write_file, write_file_keeping_old};
use crate::session::record::record;
use crate::Failure;
use pmu::tsc::SamplePeriod;
use profile::events::{self, Event};
use profile::Mode;
use std::time::Instant;
use vmm::profiling::sampler::CallGraph;
use vmm::profiling::unwind::cfi_section;

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

/// `perfvm record`: the run's exit code, or why it could not record.
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
        check_agent_vendor(&args.vm)?;
    }
    let config = vm_config(&args.vm, false)?;
    let callgraph = call_graph(&args, mode, &std::fs::read(&config.kernel).unwrap_or_default())?;
    let native = vmm::host::runs_at_full_speed(&config, config.native);
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
