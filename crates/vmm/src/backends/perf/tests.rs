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
        crate::kvm::skip_test("budget_caps_open_events", &format!("perf_event_open: {e}"));
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
