//! The software clock's event group and notification re-arming, on real task-clock events.

use super::tests::cycles;
use super::*;
use crate::backends::perf_sys;

/// Run for `ms` of this thread's CPU time (what task-clock counts), however busy the host.
fn spin(ms: u64) {
    let t = crate::vpmu::thread_cpu_ns();
    while crate::vpmu::thread_cpu_ns() - t < ms * 1_000_000 {
        std::hint::spin_loop();
    }
}

/// Software-clock events count alone and as a group, and a stopped count is kept.
#[test]
fn group_and_single_toggles_count() {
    let mut src = PerfSource::new(PerfMode::SoftwareClock { tsc_khz: 1_000_000 }, EventBudget::new(4));
    let (p0, p1) = (PmcIdx::gp(0).unwrap(), PmcIdx::gp(1).unwrap());
    if let Err(e) = src.open(p0, &cycles()) {
        eprintln!("SKIP group_and_single_toggles_count: perf_event_open: {e}");
        return;
    }
    src.open(p1, &cycles()).unwrap();
    for _ in 0..2 {
        src.enable(p0);
        spin(10);
        src.disable(p0);
    }
    let alone = src.read(p0);
    assert!(alone > 10_000_000, "20 ms at 1 GHz counted alone: {alone}");
    assert_eq!(src.read(p1), 0, "never enabled");
    let syscalls = perf_sys::thread_syscalls();
    src.enable_many(p0.mask() | p1.mask());
    spin(20);
    src.disable_many(p0.mask() | p1.mask());
    assert_eq!(perf_sys::thread_syscalls() - syscalls, 3, "group enable, group disable, group read");
    let (a, b) = (src.read(p0), src.read(p1));
    assert!(a > alone + 10_000_000 && b > 10_000_000, "both counted as a group: {a} {b}");
    assert_eq!(perf_sys::thread_syscalls() - syscalls, 3, "stopped counts are read for free");
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
        let before = perf_sys::thread_syscalls();
        f(src);
        perf_sys::thread_syscalls() - before
    };
    src.notification_taken();
    let both = syscalls_of(&mut src, &|s| s.rearm_after_notification());
    assert!(both > 0);
    src.notification_taken();
    src.arm_overflow(p0, Some(1_000_000_000)); // p0 wrapped: the model re-arms it
    let after = syscalls_of(&mut src, &|s| s.rearm_after_notification());
    assert_eq!(after, both / 2, "only p1 is re-issued; p0's period is new already");
}
