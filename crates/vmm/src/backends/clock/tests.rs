//! The shared clock on a real task-clock event: counts, syscalls per operation, periods.

use super::*;
use crate::backends::perf::tests::cycles;
use crate::backends::perf_sys;

/// Run for `ms` of this thread's CPU time (what task-clock counts), however busy the host,
/// as a guest would between two exits.
fn spin(src: &mut ClockSource, ms: u64) {
    spin_ns(src, ms * 1_000_000);
}

fn spin_ns(src: &mut ClockSource, ns: u64) {
    let t = crate::vpmu::thread_cpu_ns();
    while crate::vpmu::thread_cpu_ns() - t < ns {
        std::hint::spin_loop();
    }
    src.guest_ran();
}

/// Run until the clock, as the source reads it, reaches `ns` (not thread time: on a host
/// that is itself a VM, time stolen from it passes for the clock read without a system call).
fn spin_until(src: &mut ClockSource, ns: u64) {
    while {
        src.guest_ran();
        src.now() < ns
    } {
        spin_ns(src, 10_000);
    }
}

/// Perf syscalls `f` makes on this thread.
fn syscalls_of(src: &mut ClockSource, f: impl FnOnce(&mut ClockSource)) -> u64 {
    let before = perf_sys::thread_syscalls();
    f(src);
    perf_sys::thread_syscalls() - before
}

/// A clock whose cycles are ns (1 GHz), read through the host TSC at the host's real rate:
/// counts and periods compare without rounding, and reads without a system call hold.
fn one_ghz_clock(budget: Arc<EventBudget>) -> ClockSource {
    let host = ClockSource::new(super::self_read::tests::tsc_khz(), budget);
    ClockSource { mode: PerfMode::SoftwareClock { tsc_khz: 1_000_000 }, ..host }
}

/// Four counters open on one clock (1 GHz: a count is a ns), or None with a SKIP line.
fn four_counters(name: &str) -> Option<(ClockSource, Arc<EventBudget>, u64)> {
    let budget = EventBudget::new(1);
    let mut src = one_ghz_clock(budget.clone());
    let mask = (0..4).fold(0, |m, i| m | PmcIdx::gp(i).unwrap().mask());
    for pmc in PmcIdx::iter_mask(mask) {
        if let Err(e) = src.open(pmc, &cycles()) {
            crate::vstate::kvm::skip_test(name, &format!("perf_event_open: {e:?}"));
            return None;
        }
    }
    Some((src, budget, mask))
}

#[test]
fn counters_share_one_event_and_toggle_for_one_read() {
    let Some((mut src, budget, mask)) = four_counters("counters_share_one_event_and_toggle_for_one_read") else {
        return;
    };
    assert_eq!(budget.open_now(), 1, "four counters, one host event");
    let (p0, p1) = (PmcIdx::gp(0).unwrap(), PmcIdx::gp(1).unwrap());
    for _ in 0..2 {
        src.enable(p0);
        spin(&mut src, 10);
        src.disable(p0);
    }
    let alone = src.read(p0);
    assert!(alone > 10_000_000, "20 ms at 1 GHz counted alone: {alone}");
    assert_eq!(src.read(p1), 0, "never enabled");
    spin(&mut src, 1);
    // One clock read at most (none while the thread ran unbroken: `self_read`).
    assert!(syscalls_of(&mut src, |s| s.enable_many(mask)) <= 1, "one clock read starts four counters");
    spin(&mut src, 20);
    assert!(syscalls_of(&mut src, |s| s.disable_many(mask)) <= 1, "and stops them");
    let (a, b) = (src.read(p0), src.read(p1));
    assert!(a > alone + 10_000_000 && b > 10_000_000, "both counted: {a} {b}");
    assert_eq!(a - alone, b, "started and stopped at one instant");
    assert_eq!(
        syscalls_of(&mut src, |s| {
            s.read(p0);
        }),
        0,
        "stopped counts are read for free"
    );
    for pmc in PmcIdx::iter_mask(mask) {
        src.close(pmc);
    }
    assert_eq!(budget.open_now(), 1, "the clock outlives its counters");
    let reopen = syscalls_of(&mut src, |s| s.open(p0, &cycles()).unwrap());
    assert_eq!(reopen, 0, "a counter opens on the clock for free");
    drop(src);
    assert_eq!(budget.open_now(), 0, "the backend's end closes the clock");
}

#[test]
fn the_timer_follows_the_nearest_overflow_only_when_it_moves() {
    let Some((mut src, _, mask)) = four_counters("the_timer_follows_the_nearest_overflow_only_when_it_moves") else {
        return;
    };
    let (p0, p1) = (PmcIdx::gp(0).unwrap(), PmcIdx::gp(1).unwrap());
    src.arm_overflow(p0, Some(1_000_000_000));
    src.arm_overflow(p1, Some(2_000_000_000));
    let enable = syscalls_of(&mut src, |s| s.enable_many(mask));
    assert!((1..=2).contains(&enable), "a read at most, and a period for the nearest: {enable}");
    let due = src.timer.expect("armed").due;
    spin(&mut src, 2);
    assert!(
        syscalls_of(&mut src, |s| s.arm_overflow(p1, Some(3_000_000_000))) <= 1,
        "a later overflow: a read at most"
    );
    assert_eq!(src.timer.unwrap().due, due, "the nearest did not move");
    spin(&mut src, 2);
    src.arm_overflow(p1, Some(1_000_000));
    assert!(src.timer.unwrap().due < due, "a nearer overflow moves the timer");
    src.disable_many(mask);
    assert!(src.timer.is_some(), "a stop leaves the timer: the notification it brings puts it off");
    src.notification_taken();
    src.after_notification();
    assert!(src.timer.is_none(), "nothing runs armed: off");
}

/// Counters the model re-arms while a notification is handled get one period, at the end;
/// periodic sampling (re-armed at the wrap for the same period) keeps the timer the kernel
/// restarts, so such a notification costs no period (and no read while the thread ran
/// unbroken).
#[test]
fn a_notification_sets_one_period_at_most() {
    let Some((mut src, _, mask)) = four_counters("a_notification_sets_one_period_at_most") else {
        return;
    };
    // The timer fires here: its signal must find the VMM's handler, as on a vCPU thread.
    crate::vstate::kick::install_handler();
    src.enable_many(mask);
    for pmc in PmcIdx::iter_mask(mask) {
        src.arm_overflow(pmc, Some(1_000_000_000));
    }
    spin(&mut src, 1);
    // Sampling every 400 us of thread time: short enough that a busy host (two CPU hogs
    // beside the test binary's threads) lets a period's spin run without a break.
    const PERIOD: u64 = 400_000;
    src.notification_taken();
    let rearm = syscalls_of(&mut src, |s| {
        for pmc in PmcIdx::iter_mask(mask) {
            s.arm_overflow(pmc, Some(PERIOD));
        }
        s.after_notification();
    });
    assert!(rearm <= 2, "a read at most, one period: {rearm}");
    // The timer fires; the model reloads at the last wrap, for a period again: the kernel's
    // restarted timer is kept, for no system call. A try in which the thread was
    // descheduled (the clock took a read(2)) must set it afresh instead; tries go on until
    // one ran unbroken.
    let reload_at_the_wrap = |s: &mut ClockSource, fired: Timer| {
        let since_wrap = (s.now() - fired.due) % fired.period;
        for pmc in PmcIdx::iter_mask(mask) {
            s.arm_overflow(pmc, Some(fired.period - since_wrap));
        }
        s.after_notification();
    };
    let mut kept = false;
    for _ in 0..32 {
        let fired = src.timer.expect("armed");
        let reads = src.reader.as_ref().unwrap().syscalls;
        spin_until(&mut src, fired.due + PERIOD / 8);
        src.notification_taken();
        let mut restarted = fired;
        let calls = syscalls_of(&mut src, |s| {
            restarted = fired.at(s.now());
            reload_at_the_wrap(s, fired);
        });
        if src.reader.as_ref().unwrap().syscalls == reads {
            assert_eq!(calls, 0, "ran unbroken: no read, no period");
            assert_eq!(src.timer.unwrap().due, restarted.due, "the kernel's restarted timer, kept");
            kept = true;
            break;
        }
        assert!((1..=2).contains(&calls), "descheduled: a period set afresh (and a read): {calls}");
    }
    assert!(kept, "32 tries, each descheduled");
    // A notification 5/8 of a period past the kept timer's next deadline: off its grid, the
    // kernel's phase is not the one assumed, set afresh.
    let next = src.timer.unwrap().due;
    spin_until(&mut src, next + PERIOD * 5 / 8);
    let fired = src.timer.expect("armed");
    src.notification_taken();
    let off_grid = syscalls_of(&mut src, |s| reload_at_the_wrap(s, fired));
    assert!((1..=2).contains(&off_grid), "a period (and a read at most): {off_grid}");
    // Re-armed nearer than the restarted timer: set afresh, for the nearer overflow.
    src.notification_taken();
    let mut armed_at = 0;
    let nearer = PERIOD / 2;
    let calls = syscalls_of(&mut src, |s| {
        armed_at = s.now();
        for pmc in PmcIdx::iter_mask(mask) {
            s.arm_overflow(pmc, Some(nearer));
        }
        s.after_notification();
    });
    assert!((1..=2).contains(&calls), "a period (and a read at most): {calls}");
    let due = src.timer.unwrap().due - armed_at;
    assert!((nearer..=nearer + nearer / 16).contains(&due), "at the nearer overflow or just after: {due}");
}

#[test]
fn the_clock_counts_only_what_a_clock_can() {
    let mut src = ClockSource::new(1_000_000, EventBudget::new(1));
    let p0 = PmcIdx::gp(0).unwrap();
    assert!(!src.supports(ArchEvent::Instructions));
    for cfg in [HostEventConfig { cmask: 1, ..cycles() }, HostEventConfig { os: false, usr: true, ..cycles() }] {
        assert_eq!(src.open(p0, &cfg), Err(BackendError::Unsupported), "{cfg:?}");
    }
    let budget = EventBudget::new(0);
    let mut capped = ClockSource::new(1_000_000, budget.clone());
    assert_eq!(capped.open(p0, &cycles()), Err(BackendError::LimitReached));
    assert_eq!(budget.refused.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[test]
fn a_read_is_held_to_the_tsc_time_since_the_last_stamp() {
    // 1 GHz: a TSC tick is a ns.
    let mut src = ClockSource::new(1_000_000, EventBudget::new(1));
    assert_eq!(src.held_to_tsc(7_000, 100), (7_000, true), "nothing stamped yet: as read");
    src.stamp = Some((1_000, 500));
    assert_eq!(src.held_to_tsc(900, 1_400), (900, true), "within the 400 ticks since");
    assert_eq!(src.held_to_tsc(950, 1_400), (900, true), "a read(2) that landed late is held");
    src.fired_due = Some(800);
    assert_eq!(src.held_to_tsc(950, 1_400), (900, true), "a deadline below the hold");
    src.fired_due = Some(940);
    assert_eq!(src.held_to_tsc(950, 1_400), (950, false), "past a deadline: as read, not stamped");
}
