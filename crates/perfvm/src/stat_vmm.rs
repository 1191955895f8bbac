//! The counts `stat` takes from the VMM rather than from the guest's agent: `stat -a`
//! counts a whole guest with no agent (the vCPU threads' CPU time; on the exact backend
//! every instruction and branch it retired), and a `stat` cut short before the agent
//! reported shows the counters the agent had programmed as the vPMU held them at the end.

use pmu::tsc::TscRate;
use pmu::{ArchEvent, EventSet};
use profile::counts::{Count, Run};
use profile::events::{self, Event};
use vmm::vm::BackendKind;
use vmm::vmm_counts::VcpuCounts;
use vmm::RunReport;

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
    let retired =
        |f: fn(&vmm::vmm_counts::Retired) -> u64| vcpus.iter().filter_map(|v| v.retired.as_ref()).map(f).sum();
    let thread_ns: u64 = vcpus.iter().map(|v| v.thread_ns).sum();
    let exact = backend == Some(BackendKind::Exact);
    let value = |e: &Event| match events::architectural(e.raw) {
        Some(ArchEvent::CoreCycles) if exact => Some(retired(|r| r.instructions)),
        Some(ArchEvent::CoreCycles) => TscRate::from_khz(tsc_khz).map(|t| t.ns_to_cycles(thread_ns)),
        Some(ArchEvent::Instructions) if exact => Some(retired(|r| r.instructions)),
        Some(ArchEvent::Branches) if exact => Some(retired(|r| r.branches)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use vmm::vmm_counts::{CounterView, Retired};

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
        let vcpus = [counts(Some(Retired { instructions: 100, branches: 9 }))];
        let run = whole_guest_of(&vcpus, 1_000_000, &events, Some(BackendKind::Exact));
        let got: Vec<(bool, u64)> = run.counts.iter().map(|c| (c.unsupported, c.value)).collect();
        assert_eq!(got, [(false, 100), (false, 100), (false, 9), (true, 0)]);
    }
}
