//! Unit tests of the perf backend: units, the host-event cap, refused filters.

use super::*;
use std::sync::atomic::Ordering;

/// A cycles event at CPL0, what a software clock counts.
pub(crate) fn cycles() -> HostEventConfig {
    HostEventConfig {
        event: ArchEvent::CoreCycles,
        usr: false,
        os: true,
        edge: false,
        inv: false,
        cmask: 0,
        interrupt: false,
    }
}

#[test]
fn software_clock_converts_units() {
    let src = PerfSource::new(PerfMode::SoftwareClock { tsc_khz: 2_000_000 }, EventBudget::new(4));
    assert_eq!(src.mode.in_event_units(1_000), 2_000, "1 us at 2 GHz is 2000 cycles");
    assert_eq!(src.to_host_units(2_000_000), 1_000_000);
    assert_eq!(src.to_host_units(1), MIN_CLOCK_PERIOD_NS);
    assert_eq!(src.to_host_units(200_000_000), 100_000_000);
    let mut src = src;
    src.set_period_floor(1_000_000);
    assert_eq!(src.to_host_units(2_000), 1_000_000, "throttled: no period below the floor");
    src.set_period_floor(0);
    assert_eq!(src.to_host_units(1), MIN_CLOCK_PERIOD_NS, "never below the static floor");
    assert!(!src.supports(ArchEvent::Instructions), "a clock cannot count instructions");
    assert!(src.supports(ArchEvent::CoreCycles));
}

#[test]
fn budget_caps_open_events() {
    let budget = EventBudget::new(1);
    let mut src = PerfSource::new(PerfMode::SoftwareClock { tsc_khz: 1_000_000 }, budget.clone());
    let (p0, p1) = (PmcIdx::gp(0).unwrap(), PmcIdx::gp(1).unwrap());
    if let Err(e) = src.open(p0, &cycles()) {
        crate::vstate::kvm::skip_test("budget_caps_open_events", &format!("perf_event_open: {e}"));
        return;
    }
    assert_eq!(src.open(p1, &cycles()), Err(BackendError::LimitReached));
    assert_eq!(budget.refused.load(Ordering::Relaxed), 1);
    src.close(p0);
    assert_eq!(budget.open_now(), 0);
    src.open(p1, &cycles()).unwrap();
    drop(src);
    assert_eq!(budget.open_now(), 0, "dropping the source gives every event back");
}

#[test]
fn edge_and_cmask_are_refused() {
    let mut src = PerfSource::new(PerfMode::SoftwareClock { tsc_khz: 1_000_000 }, EventBudget::new(4));
    let cfg = HostEventConfig { cmask: 1, ..cycles() };
    assert_eq!(src.open(PmcIdx::gp(0).unwrap(), &cfg), Err(BackendError::Unsupported));
}

/// A counter the model re-arms while a notification is handled gets its period once.
#[test]
fn a_counter_rearmed_by_the_model_is_not_rearmed_again() {
    let mut src = PerfSource::new(PerfMode::SoftwareClock { tsc_khz: 1_000_000 }, EventBudget::new(4));
    let (p0, p1) = (PmcIdx::gp(0).unwrap(), PmcIdx::gp(1).unwrap());
    if let Err(e) = src.open(p0, &cycles()) {
        eprintln!("SKIP a_counter_rearmed_by_the_model_is_not_rearmed_again: perf_event_open: {e}");
        return;
    }
    src.open(p1, &cycles()).unwrap();
    src.enable(p0);
    src.enable(p1);
    src.arm_overflow(p0, Some(1_000_000_000));
    src.arm_overflow(p1, Some(1_000_000_000));
    let syscalls_of = |src: &mut PerfSource, f: &dyn Fn(&mut PerfSource)| {
        let before = crate::backends::perf_sys::thread_syscalls();
        f(src);
        crate::backends::perf_sys::thread_syscalls() - before
    };
    src.notification_taken();
    let both = syscalls_of(&mut src, &|s| s.rearm_after_notification());
    assert!(both > 0);
    src.notification_taken();
    src.arm_overflow(p0, Some(1_000_000_000)); // p0 wrapped: the model re-arms it
    let after = syscalls_of(&mut src, &|s| s.rearm_after_notification());
    assert_eq!(after, both / 2, "only p1 is re-issued; p0's period is new already");
}

/// The hardware-event path has never run on a host with a PMU (docs/DESIGN.md, "Hosts"):
/// what it asks of perf_event_open is checked here instead.
#[test]
fn hardware_events_count_the_guest_only_at_its_programmed_levels() {
    let src = PerfSource::new(PerfMode::Hardware, EventBudget::new(4));
    let expected = [
        (ArchEvent::CoreCycles, PERF_COUNT_HW_CPU_CYCLES),
        (ArchEvent::Instructions, PERF_COUNT_HW_INSTRUCTIONS),
        (ArchEvent::RefCycles, PERF_COUNT_HW_REF_CPU_CYCLES),
        (ArchEvent::LlcReferences, PERF_COUNT_HW_CACHE_REFERENCES),
        (ArchEvent::LlcMisses, PERF_COUNT_HW_CACHE_MISSES),
        (ArchEvent::Branches, PERF_COUNT_HW_BRANCH_INSTRUCTIONS),
        (ArchEvent::BranchMisses, PERF_COUNT_HW_BRANCH_MISSES),
    ];
    for (event, config) in expected {
        let attr = src.attr(&HostEventConfig { event, usr: true, ..cycles() }).expect("a hardware event");
        assert_eq!((attr.type_, attr.config), (PERF_TYPE_HARDWARE, config), "{event:?}");
        assert_ne!(attr.flags & FLAG_EXCLUDE_HOST, 0, "{event:?}: guest mode only");
        assert_ne!(attr.flags & FLAG_EXCLUDE_HV, 0);
        assert_eq!(attr.flags & (FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_USER), 0, "both levels");
        assert_ne!(attr.flags & FLAG_DISABLED, 0, "opened disabled, enabled by the model");
    }
    let kernel_only = src.attr(&cycles()).unwrap();
    assert_eq!(kernel_only.flags & (FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_USER), FLAG_EXCLUDE_USER);
    let user_only = src.attr(&HostEventConfig { usr: true, os: false, ..cycles() }).unwrap();
    assert_eq!(user_only.flags & (FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_USER), FLAG_EXCLUDE_KERNEL);
    assert!(src.attr(&HostEventConfig { inv: true, ..cycles() }).is_none(), "no filter it cannot honour");
    assert_eq!(src.floor_in_event_units(), 1, "the kernel throttles hardware events itself");
}
