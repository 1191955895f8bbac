//! Reading the vCPU's task-clock without a system call. The clock is the thread's CPU
//! time; while the thread stays on its CPU, CPU time advances exactly as wall time does.
//! The kernel rewrites the event's control page (and bumps its sequence count) whenever
//! it schedules the thread back in, so an unchanged count since a read(2) means the thread
//! has run without a break since, and the clock is that read plus the TSC time since. A
//! changed count (or an old read) costs one read(2) to start over.
//!
//! The read(2)'s value is the clock at some instant inside the call: the TSC is taken on
//! both sides and the read is an anchor, at their midpoint, only if nothing else ran in
//! between: its bracket is within twice the fastest read seen (plus 1 us). (A TSC taken
//! after the call alone would leave whatever ran between, an interrupt or slow code,
//! uncounted: estimates fell up to 35 us short of their brackets in debug builds. A fixed
//! bound would refuse every read on a slow host: under QEMU TCG a read(2) takes longer
//! than 4 us, and every enable cost a system call.)
//!
//! (perf's own self-monitoring extrapolates the page's `time_running` with `cap_user_time`
//! and the TSC; this host's kernel leaves `cap_user_time` clear for task-clock events,
//! measured, so the page is used only as the "not rescheduled" witness.)

use crate::backends::perf_sys::{PerfEvent, UserPage};
use pmu::tsc::TscRate;

/// After this much TSC time a read(2) starts over anyway, bounding what the TSC rate's
/// rounding and interrupt time the clock accounts differently can add up to.
const MAX_AGE_NS: u64 = 10_000_000;

/// The slack over twice the fastest read's bracket that a read may take and anchor.
const BRACKET_SLACK_NS: u64 = 1_000;

/// The last read(2) and what the page said then.
#[derive(Debug, Clone, Copy)]
struct Anchor {
    seq: u32,
    tsc: u64,
    clock_ns: u64,
}

/// The clock's reads, mostly from the TSC.
#[derive(Debug)]
pub struct SelfRead {
    page: Option<UserPage>,
    anchor: Option<Anchor>,
    tsc: TscRate,
    /// Reads answered without a system call.
    pub from_tsc: u64,
    /// Reads that took a read(2).
    pub syscalls: u64,
    /// The narrowest bracket of a read(2) seen, TSC cycles: the call with nothing else.
    fastest: u64,
}

impl SelfRead {
    /// Reads of `clock` (on the calling thread) with the TSC at `tsc_khz`; without its
    /// control page every read is a read(2).
    pub fn new(clock: &PerfEvent, tsc_khz: u64) -> Self {
        let tsc = TscRate::from_khz_or_1(tsc_khz);
        SelfRead { page: clock.user_page().ok(), anchor: None, tsc, from_tsc: 0, syscalls: 0, fastest: u64::MAX }
    }

    /// The clock now, in ns, given the TSC `tsc`, known to have passed `floor` (0, or the
    /// deadline the kernel's timer just fired at): an estimate below `floor` by no more than
    /// its error is `floor`, not a few ns short of the deadline; one further below takes a
    /// read(2). None if the read(2) it needed failed.
    pub fn now_past(&mut self, clock: &PerfEvent, tsc: u64, floor: u64) -> Option<u64> {
        match self.estimate(tsc) {
            Some(ns) if ns >= floor => {
                self.from_tsc += 1;
                Some(ns)
            }
            Some(ns) if floor - ns <= self.max_bracket_ns() => {
                self.from_tsc += 1;
                Some(floor)
            }
            _ => self.read(clock),
        }
    }

    /// The anchor plus the TSC time since, while the thread has run unbroken since it.
    fn estimate(&self, tsc: u64) -> Option<u64> {
        let (page, a) = (self.page.as_ref()?, self.anchor?);
        let ns = self.tsc.cycles_to_ns(tsc.saturating_sub(a.tsc));
        (page.seq() == a.seq && ns < MAX_AGE_NS).then_some(a.clock_ns + ns)
    }

    /// Start over from a read(2), if the thread was not rescheduled during it and the
    /// read's instant is known closely enough.
    fn read(&mut self, clock: &PerfEvent) -> Option<u64> {
        self.syscalls += 1;
        let before = self.page.as_ref().map(UserPage::seq);
        let tsc_before = super::host_tsc();
        let clock_ns = clock.read().ok()?;
        let tsc_after = super::host_tsc();
        let seq = self.page.as_ref().map(UserPage::seq);
        let width = tsc_after.saturating_sub(tsc_before);
        self.fastest = self.fastest.min(width);
        self.anchor = match (before, seq) {
            (Some(b), Some(s)) if b == s && self.tsc.cycles_to_ns(width) <= self.max_bracket_ns() => {
                Some(Anchor { seq: s, tsc: tsc_before + width / 2, clock_ns })
            }
            _ => None,
        };
        Some(clock_ns)
    }

    /// The widest bracket a read may have and anchor, ns; an estimate is off by at most half
    /// of it (and the TSC rate's rounding).
    pub fn max_bracket_ns(&self) -> u64 {
        self.tsc.cycles_to_ns(self.fastest.saturating_mul(2)).saturating_add(BRACKET_SLACK_NS)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::backends::perf_sys::{PerfEventAttr, PERF_COUNT_SW_TASK_CLOCK, PERF_TYPE_SOFTWARE};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    /// The TSC rate, kHz, measured once against the monotonic clock.
    pub(crate) fn tsc_khz() -> u64 {
        static KHZ: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        *KHZ.get_or_init(|| {
            let (t0, c0) = (Instant::now(), crate::backends::host_tsc());
            std::thread::sleep(Duration::from_millis(50));
            let (ns, ticks) = (t0.elapsed().as_nanos() as u64, crate::backends::host_tsc() - c0);
            ticks * 1_000_000 / ns
        })
    }

    /// Over `reads` reads spaced by some work, each bracketed by two read(2)s: how far the
    /// largest estimate fell outside its bracket, how many reads were estimates, and the
    /// widest bracket the reader accepted.
    fn compare(reads: usize) -> Option<(u64, u64, u64)> {
        let attr = PerfEventAttr { type_: PERF_TYPE_SOFTWARE, config: PERF_COUNT_SW_TASK_CLOCK, ..Default::default() };
        let clock = match PerfEvent::open_untracked(&attr) {
            Ok(c) => c,
            Err(e) => {
                crate::vstate::kvm::skip_test("self_read", &format!("perf_event_open: {e}"));
                return None;
            }
        };
        let mut reader = SelfRead::new(&clock, tsc_khz());
        assert!(reader.page.is_some(), "the control page maps");
        let mut worst = 0;
        for i in 0..reads {
            let mut x = 0u64;
            for j in 0..(20_000 * (1 + i % 5)) as u64 {
                x = std::hint::black_box(x.wrapping_add(j));
            }
            let before = clock.read().unwrap();
            let estimate = reader.now_past(&clock, crate::backends::host_tsc(), 0).unwrap();
            let after = clock.read().unwrap();
            worst = worst.max(before.saturating_sub(estimate)).max(estimate.saturating_sub(after));
        }
        eprintln!(
            "self_read: estimates within {worst} ns of their read(2) brackets; {} of {reads} reads without a system call; anchors bracketed within {} ns",
            reader.from_tsc,
            reader.max_bracket_ns()
        );
        Some((worst, reader.from_tsc, reader.max_bracket_ns()))
    }

    #[test]
    fn estimates_equal_read_within_microseconds_and_avoid_the_syscall() {
        let Some((worst, from_tsc, bracket)) = compare(2000) else { return };
        assert!(
            worst <= bracket / 2 + 200 && worst < 5_000,
            "estimate off by {worst} ns (brackets up to {bracket} ns)"
        );
        assert!(from_tsc > 1000, "{from_tsc} of 2000 reads without a system call");
    }

    #[test]
    fn beside_two_cpu_hogs_too() {
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let hogs: Vec<_> = (0..2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let got = compare(2000);
        stop.store(true, Ordering::Relaxed);
        hogs.into_iter().for_each(|h| h.join().unwrap());
        let Some((worst, from_tsc, bracket)) = got else { return };
        // Rescheduled often, the reader starts over often, and is as right.
        assert!(
            worst <= bracket / 2 + 200 && worst < 5_000,
            "estimate off by {worst} ns (brackets up to {bracket} ns)"
        );
        assert!(from_tsc > 100, "{from_tsc} of 2000 reads without a system call");
    }

    /// A deadline the clock has passed: an estimate just short of it is the deadline, with
    /// no system call; one far short of it is not trusted (a read(2), which is exact).
    #[test]
    fn a_fired_deadline_floors_the_estimate_within_its_error() {
        let attr = PerfEventAttr { type_: PERF_TYPE_SOFTWARE, config: PERF_COUNT_SW_TASK_CLOCK, ..Default::default() };
        let Ok(clock) = PerfEvent::open_untracked(&attr) else {
            return crate::vstate::kvm::skip_test("self_read", "perf_event_open failed");
        };
        let mut reader = SelfRead::new(&clock, tsc_khz());
        let mut anchored = false;
        for _ in 0..100 {
            let first = reader.now_past(&clock, crate::backends::host_tsc(), 0).unwrap();
            let calls = reader.syscalls;
            let tsc = crate::backends::host_tsc();
            let Some(estimate) = reader.estimate(tsc) else { continue };
            assert!(estimate >= first);
            // Just past the estimate, within the error: the floor, from the TSC.
            let floor = estimate + reader.max_bracket_ns() / 2;
            let got = reader.now_past(&clock, tsc, floor);
            if reader.syscalls != calls {
                continue; // rescheduled in between: try again
            }
            assert_eq!(got, Some(floor));
            // Far past it: a read(2), whatever it says.
            let far = estimate + 10 * reader.max_bracket_ns() + 1_000_000;
            let exact = reader.now_past(&clock, crate::backends::host_tsc(), far).unwrap();
            assert_eq!(reader.syscalls, calls + 1, "a read(2)");
            assert!(exact < far, "the clock as it is: {exact} < {far}");
            anchored = true;
            break;
        }
        assert!(anchored, "an anchored read in 100 tries");
    }
}
