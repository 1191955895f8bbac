//! The counts of a run, as the counting model (`profile::counts`) takes them: the guest
//! agent's, or the VMM's where there is no agent's: `stat -a` counts a whole guest with no
//! agent (the vCPU threads' CPU time; on the exact backend every instruction and branch it
//! retired), and a `stat` cut short before the agent reported shows the counters the agent
//! had programmed as the vPMU held them at the end.

use crate::Failure;
use pmu::tsc::TscRate;
use pmu::{ArchEvent, CountSource, EventSet};
use profile::counts::{Count, Run};
use profile::counts::{Line, Status};
use profile::events::{self, Event, Levels};
use vmm::config::BackendKind;
use vmm::devices::{AgentData, COUNT_UNSUPPORTED};
use vmm::profiling::counts::{Retired, VcpuCounts};
use vmm::RunReport;

/// The events the exact backend counts.
pub fn exact_events() -> EventSet {
    let exact = vmm::backends::exact::ExactSource::new();
    EventSet::from_fn(|e| exact.supports(e))
}

/// What the agent sent, as the counting model takes it.
fn run_of(agent: &AgentData) -> Run {
    let count = |c: &vmm::guest_abi::AgentCount| Count {
        event: c.event,
        unsupported: c.flags & COUNT_UNSUPPORTED != 0,
        task: c.task,
        value: c.value,
        time_enabled: c.time_enabled,
        time_running: c.time_running,
    };
    Run { counts: agent.counts.iter().map(count).collect(), tasks: agent.tasks.clone() }
}

/// The counts of one run: the agent's, or (`-a`: `all_cpus`, or a run cut short before the
/// agent reported) the VMM's; an error for a guest that sent none and has no agent.
pub fn counts_of(report: &RunReport, all_cpus: bool, events: &[Event], code: i32) -> Result<Run, Failure> {
    let backend = report.stats.pmu.as_ref().map(|p| p.backend);
    if all_cpus {
        return Ok(whole_guest(report, events, backend));
    }
    if report.agent.counts.iter().any(|c| c.task == 0) {
        return Ok(run_of(&report.agent));
    }
    if matches!(report.end, vmm::VmEnd::Signal { .. } | vmm::VmEnd::Timeout { .. }) {
        eprintln!(
            "perfvm: cut short before the guest's agent reported: the counts are its counters as the vPMU held them \
             at the end (an event on no counter then: <not counted>; a multiplexed one: its last turn only)"
        );
        return Ok(counters_at_end(&report.vcpu_counts, events));
    }
    let code = if code == 0 { 1 } else { code };
    let message = if report.agent.marks.is_empty() && report.agent.messages == 0 {
        "the guest sent no counts: it runs no perfvm agent (perfvm stat -a counts any guest from the VMM)"
    } else {
        "the guest's agent sent no counts (its workload did not end: perfvm stat -a counts from the VMM)"
    };
    Err(Failure::Status { code, message: message.into() })
}

/// The events `stat -a` counts on `backend`.
pub fn whole_guest_events(backend: Option<BackendKind>) -> EventSet {
    match backend {
        Some(BackendKind::Exact) => {
            EventSet::from_fn(|e| matches!(e, ArchEvent::CoreCycles | ArchEvent::Instructions | ArchEvent::Branches))
        }
        _ => EventSet::from_fn(|e| e == ArchEvent::CoreCycles),
    }
}

/// `stat -a`: what the VMM counted of the whole guest, for each of `events` (`-e` order).
/// Cycles: the vCPU threads' CPU time at the guest TSC's rate on the perf backend (as its
/// software clock counts them), the model clock (one per instruction) on the exact one.
pub fn whole_guest(report: &RunReport, events: &[Event], backend: Option<BackendKind>) -> Run {
    whole_guest_of(&report.vcpu_counts, report.tsc_khz, events, backend)
}

/// [`whole_guest`] from the vCPUs' counts and the guest TSC's rate.
fn whole_guest_of(vcpus: &[VcpuCounts], tsc_khz: u64, events: &[Event], backend: Option<BackendKind>) -> Run {
    let retired = |f: fn(&Retired) -> u64| vcpus.iter().filter_map(|v| v.retired.as_ref()).map(f).sum::<u64>();
    let thread_ns: u64 = vcpus.iter().map(|v| v.thread_ns).sum();
    let exact = backend == Some(BackendKind::Exact);
    // Instructions (and the model clock) or branches at the event's levels.
    let by_level = |e: &Event, all: fn(&Retired) -> u64, user: fn(&Retired) -> u64| match e.levels {
        Levels::All => retired(all),
        Levels::User => retired(user),
        Levels::Kernel => retired(all) - retired(user),
    };
    let value = |e: &Event| match events::architectural(e.raw) {
        Some(ArchEvent::CoreCycles | ArchEvent::Instructions) if exact => {
            Some(by_level(e, |r| r.instructions, |r| r.user_instructions))
        }
        Some(ArchEvent::Branches) if exact => Some(by_level(e, |r| r.branches, |r| r.user_branches)),
        // The clock cannot tell the levels apart.
        Some(ArchEvent::CoreCycles) if e.levels != Levels::User => {
            TscRate::from_khz(tsc_khz).map(|t| t.ns_to_cycles(thread_ns))
        }
        _ => None,
    };
    let counts = events
        .iter()
        .map(|e| {
            let v = value(e);
            Count {
                event: e.raw,
                unsupported: v.is_none(),
                task: 0,
                value: v.unwrap_or(0),
                time_enabled: 0,
                time_running: 0,
            }
        })
        .collect();
    Run { counts, tasks: Default::default() }
}

/// A run cut short before the agent reported: each of `events` (`-e` order) as the counter
/// the agent had programmed for it held it at the end (the n-th copy of an event the n-th
/// such counter); an event on no counter then is not counted.
pub fn counters_at_end(vcpus: &[VcpuCounts], events: &[Event]) -> Run {
    let mut views: Vec<_> = vcpus.iter().flat_map(|v| v.counters.iter()).collect();
    let counts = events
        .iter()
        .map(|e| {
            let found = events::architectural(e.raw)
                .and_then(|arch| views.iter().position(|v| v.event == arch))
                .map(|i| views.remove(i));
            Count {
                event: e.raw,
                unsupported: found.is_none(),
                task: 0,
                value: found.map_or(0, |v| v.value),
                time_enabled: 0,
                time_running: 0,
            }
        })
        .collect();
    Run { counts, tasks: Default::default() }
}

/// Give each line its event's modifier (by `-e` position); where a clock counted
/// (`clock`: the perf backend's software clock, or `stat -a` on the perf backend), which
/// cannot tell privilege levels apart, a user-only event is `<not supported>`. Returns the
/// lines on stderr that say so: the user-only events, and the kernel-only ones the clock
/// counted, at every level.
pub fn apply_levels(lines: &mut [Line], events: &[Event], clock: bool) -> Vec<String> {
    for line in lines.iter_mut() {
        line.levels = events.get(line.slot).map_or(Levels::All, |e| e.levels);
        if clock && line.levels == Levels::User {
            line.status = Status::NotSupported;
            line.values.clear();
        }
    }
    if !clock {
        return Vec::new();
    }
    let named = |levels: Levels, status: Option<Status>| {
        let mut names: Vec<String> = lines
            .iter()
            .filter(|l| l.levels == levels && status.is_none_or(|s| l.status == s))
            .map(Line::name)
            .collect();
        names.dedup();
        names.join(", ")
    };
    let (user, kernel) = (named(Levels::User, None), named(Levels::Kernel, Some(Status::Counted)));
    let mut notes = Vec::new();
    if !user.is_empty() {
        notes.push(format!(" {user}: the perf backend's software clock cannot tell user mode from the kernel"));
    }
    if !kernel.is_empty() {
        notes.push(format!(
            " {kernel}: the software clock counts every privilege level (the guest kit's guests run at CPL0 only)"
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmm::profiling::counts::{CounterView, Retired};

    fn view(event: ArchEvent, value: u64) -> CounterView {
        let (select, umask) = event.select();
        CounterView {
            fixed: false,
            index: 0,
            event,
            raw: u16::from(umask) << 8 | u16::from(select),
            usr: false,
            os: true,
            value,
        }
    }

    #[test]
    fn counters_at_the_end_match_the_events_in_order() {
        let ev = |n| events::parse(n).unwrap();
        let vcpus = [VcpuCounts {
            counters: vec![
                view(ArchEvent::CoreCycles, 10),
                view(ArchEvent::Instructions, 7),
                view(ArchEvent::CoreCycles, 12),
            ],
            ..Default::default()
        }];
        let run = counters_at_end(&vcpus, &[ev("cycles"), ev("branches"), ev("cycles"), ev("instructions")]);
        let got: Vec<(u16, bool, u64)> = run.counts.iter().map(|c| (c.event, c.unsupported, c.value)).collect();
        assert_eq!(got, [(0x003c, false, 10), (0x00c4, true, 0), (0x003c, false, 12), (0x00c0, false, 7)]);
    }

    #[test]
    fn the_whole_guest_counts_what_the_backend_can() {
        let ev = |n| events::parse(n).unwrap();
        let counts = |retired| VcpuCounts { thread_ns: 2_000_000, retired, ..Default::default() };
        let events = [ev("cycles"), ev("instructions"), ev("branches"), ev("branch-misses")];
        // A 1 GHz TSC: a cycle a ns.
        let run = whole_guest_of(&[counts(None), counts(None)], 1_000_000, &events, Some(BackendKind::Perf));
        let got: Vec<(bool, u64)> = run.counts.iter().map(|c| (c.unsupported, c.value)).collect();
        assert_eq!(got, [(false, 4_000_000), (true, 0), (true, 0), (true, 0)]);
        let retired = Retired { instructions: 100, branches: 9, user_instructions: 30, user_branches: 4 };
        let vcpus = [counts(Some(retired))];
        let run = whole_guest_of(&vcpus, 1_000_000, &events, Some(BackendKind::Exact));
        let got: Vec<(bool, u64)> = run.counts.iter().map(|c| (c.unsupported, c.value)).collect();
        assert_eq!(got, [(false, 100), (false, 100), (false, 9), (true, 0)]);
        let by_level = [ev("instructions:u"), ev("instructions:k"), ev("branches:u"), ev("cycles:k")];
        let run = whole_guest_of(&vcpus, 1_000_000, &by_level, Some(BackendKind::Exact));
        assert_eq!(run.counts.iter().map(|c| c.value).collect::<Vec<_>>(), [30, 70, 4, 70]);
        let run = whole_guest_of(&vcpus, 1_000_000, &[ev("cycles:u"), ev("cycles:k")], Some(BackendKind::Perf));
        assert_eq!(run.counts.iter().map(|c| c.unsupported).collect::<Vec<_>>(), [true, false], "the clock");
    }

    /// A clock cannot split levels: `:u` is not supported, `:k` counted with a note, and
    /// only where a clock counted.
    #[test]
    fn levels_on_a_clock() {
        let events = events::parse_list("cycles:u,cycles:k,instructions:k,cycles").unwrap();
        let count = |e: &Event, unsupported| Count {
            event: e.raw,
            unsupported,
            task: 0,
            value: 5,
            time_enabled: 0,
            time_running: 0,
        };
        let run = Run { counts: events.iter().map(|e| count(e, e.raw != 0x003c)).collect(), tasks: Default::default() };
        let offered = Some(EventSet::from_fn(|e| e == ArchEvent::CoreCycles));
        let mut lines = profile::counts::fold(&[&run], offered);
        let notes = apply_levels(&mut lines, &events, true);
        let got: Vec<(String, Status)> = lines.iter().map(|l| (l.name(), l.status)).collect();
        let want = [
            ("cycles:u", Status::NotSupported),
            ("cycles:k", Status::Counted),
            ("instructions:k", Status::NotSupported),
            ("cycles", Status::Counted),
        ];
        assert_eq!(got, want.map(|(n, s)| (n.to_owned(), s)));
        assert!(notes[0].starts_with(" cycles:u: ") && notes[1].starts_with(" cycles:k: "), "{notes:?}");
        assert_eq!(notes.len(), 2);
        let mut lines = profile::counts::fold(&[&run], offered);
        assert!(apply_levels(&mut lines, &events, false).is_empty(), "the exact backend splits levels");
        assert_eq!(lines[0].status, Status::Counted);
    }
}
