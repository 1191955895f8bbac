//! A recorded run assembled into its record (the profile library's format) and the
//! profile of its first event: the agent's samples (placed in time through its START mark),
//! the VMM's (`-a`), or every retired instruction (`--reference`).

use crate::session::{boot_under_agent, note_stepped_size};
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
    note_stepped_size(&config, &report, args);
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
        Mode::Sampled | Mode::Vcpus => {
            // An agent's sample carries its counter's event code, which names one event of
            // the list (record refuses two events of one code); -a samples one event.
            let event_of = |s: &vmm::profiling::Sample| match mode {
                Mode::Vcpus => Some(0),
                _ => sampled.iter().position(|e| e.raw == s.event),
            };
            let taken = if mode == Mode::Vcpus { &report.samples.taken } else { &report.agent.samples };
            let to_sample = |s: &vmm::profiling::Sample| {
                Some(Sample {
                    event: event_of(s)?,
                    time_ns: s.time_ns,
                    vcpu: s.vcpu,
                    task: s.task,
                    ip: s.ip,
                    period,
                    callchain: s.callchain.clone(),
                })
            };
            let samples: Vec<Sample> = taken.iter().filter_map(to_sample).collect();
            unattributed = taken.len() - samples.len();
            samples
        }
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
        unwinding: unwinding(mode, callgraph, &elf_bytes, report.agent.samples_by_vmm > 0),
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
    let (resolver, warnings) = profile::Resolver::of_image(&elf_bytes, &config.kernel.display().to_string(), false);
    crate::output::warn_all(warnings);
    let profile = Profile::build(&record.of_event(0), &resolver);
    let agent_seen = report.agent.messages > 0 || !report.agent.marks.is_empty();
    let thread_ns = report.vcpu_counts.iter().map(|c| c.thread_ns).sum();
    Ok(Capture { record, profile, code, stats: report.stats, agent_seen, thread_ns })
}

/// How the chains of a record were unwound, as its header says it (`by_vmm`: the VMM took
/// the agent's samples, PV page version 5).
fn unwinding(mode: Mode, callgraph: Option<CallGraph>, elf: &[u8], by_vmm: bool) -> Option<String> {
    match (mode, callgraph?) {
        (Mode::Reference, _) => None,
        (Mode::Sampled, _) if by_vmm => {
            Some("fp: the VMM followed the frame pointers at the agent's counters' wraps".into())
        }
        (Mode::Sampled, _) => Some("fp: the guest agent followed the frame pointers".into()),
        (_, CallGraph::FramePointers) => Some("fp: the VMM followed the guest's frame pointers".into()),
        (_, CallGraph::Dwarf) => Some(format!(
            "dwarf: the VMM unwound with the guest ELF's {} (frame pointers where no FDE covers an address)",
            cfi_section(elf).map_or("CFI", |s| s.name())
        )),
    }
}
