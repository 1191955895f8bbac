//! One software clock for every counter of a vCPU: the reuse policy's backend on a host
//! without a PMU. There every counter counts the same thing, the vCPU thread's time, so a
//! single `task-clock` event serves them all. It runs from the first counter's open until the
//! vCPU's vPMU goes; each counter is a stopwatch on it, and the event's sampling timer is
//! set for the nearest overflow of a running counter. The clock is read once per exit, so
//! starting or stopping any number of counters costs one read, and that read is no system
//! call while the thread has run unbroken since the last one (`self_read`: the TSC time
//! since it); a period changes only when that nearest overflow moved. Like perf.rs's events, the clock also counts the thread's time in the
//! VMM, and its overflows arrive as a signal to the vCPU thread.

use super::perf::accounting::{Armed, HostEvent};
use super::perf::period::{clock_counts, clock_supports, fires_just_after, lands, MIN_CLOCK_PERIOD_NS, NEVER};
use super::perf::{EventBudget, NotificationStats, PerfMode};
use super::perf_sys::*;
use super::{host_tsc, Stopwatch};
use pmu::tsc::TscRate;
use pmu::{ArchEvent, BackendError, CountSource, HostEventConfig, PmcIdx, PMC_SLOTS};
use std::sync::Arc;

#[derive(Debug, Default)]
struct ClockCounter {
    /// Clock ns counted while the counter runs.
    time: Stopwatch,
    /// Ref-cycles: the guest sees the TSC while the counter runs, as on hardware, not the
    /// thread's CPU time (a busy host shares that out); the clock still brings the overflow
    /// notification (late when the host is busy).
    tsc: Option<Stopwatch>,
    armed: Option<Armed>,
}

/// The clock's sampling timer, in clock ns.
#[derive(Debug, Clone, Copy)]
struct Timer {
    due: u64,
    period: u64,
}

impl Timer {
    /// The timer as it stands at `now`: the kernel starts a timer that fired over with the
    /// same period.
    fn at(mut self, now: u64) -> Timer {
        if self.due <= now {
            self.due += ((now - self.due) / self.period + 1) * self.period;
        }
        self
    }
}

/// The shared clock of one vCPU and the counters on it.
#[derive(Debug)]
pub struct ClockSource {
    mode: PerfMode,
    /// The TSC rate, kHz (the host's, which the guest TSC follows).
    tsc_khz: u64,
    budget: Arc<EventBudget>,
    /// Open from the first counter's open until the backend goes.
    clock: Option<HostEvent>,
    /// Reads of `clock`, from the TSC while the thread runs unbroken (`self_read`).
    reader: Option<SelfRead>,
    counters: [Option<ClockCounter>; PMC_SLOTS],
    /// Where the sampling timer fires next (None: never).
    timer: Option<Timer>,
    /// The clock as read since the guest last ran: everything the VMM does for one exit (a
    /// GLOBAL_CTRL write, a PMI's fold of every counter) sees one instant, as a group read
    /// would, for one read.
    this_exit: Option<u64>,
    /// The host TSC of that read (None: the read failed, the value is the last one).
    this_exit_tsc: Option<u64>,
    /// The last clock read (counts never go back).
    last: u64,
    /// The host TSC and clock of the last stamped read, which later reads are held to.
    stamp: Option<(u64, u64)>,
    /// While a notification is handled: the deadline its timer fired at, which the clock
    /// has passed.
    fired_due: Option<u64>,
    /// Shortest period now allowed (MIN_CLOCK_PERIOD_NS, or more when throttled).
    floor_ns: u64,
    /// Handling a notification: periods are set once, when it is done.
    in_notification: bool,
    /// The clock's read(2)s as of the last notification: one since means the thread was
    /// descheduled (the control page changed), and the kernel restarted its timer.
    reads_at_notification: u64,
    /// What became of this vCPU's overflow notifications.
    pub notifications: NotificationStats,
}

impl ClockSource {
    /// A clock turning thread ns into cycles at `tsc_khz`, drawing its host event from
    /// `budget`; nothing open yet.
    pub fn new(tsc_khz: u64, budget: Arc<EventBudget>) -> Self {
        ClockSource {
            mode: PerfMode::SoftwareClock { tsc_khz: tsc_khz.max(1) },
            tsc_khz: tsc_khz.max(1),
            budget,
            clock: None,
            reader: None,
            counters: std::array::from_fn(|_| None),
            timer: None,
            this_exit: None,
            this_exit_tsc: None,
            last: 0,
            stamp: None,
            fired_due: None,
            floor_ns: MIN_CLOCK_PERIOD_NS,
            in_notification: false,
            reads_at_notification: 0,
            notifications: NotificationStats::default(),
        }
    }

    /// What the host counts with.
    pub fn mode(&self) -> PerfMode {
        self.mode
    }

    /// Let no period be shorter than `ns` (PMI throttling; never below the static floor).
    pub fn set_period_floor(&mut self, ns: u64) {
        self.floor_ns = ns.max(MIN_CLOCK_PERIOD_NS);
    }

    /// The guest ran: the clock moved.
    pub fn guest_ran(&mut self) {
        self.this_exit = None;
    }

    /// The clock now, in ns: read once per exit, without a system call while the thread
    /// was not rescheduled.
    fn now(&mut self) -> u64 {
        if let Some(ns) = self.this_exit {
            return ns;
        }
        let tsc = host_tsc();
        let read = match (&self.clock, &mut self.reader) {
            (Some(clock), Some(reader)) => reader.now_past(clock, tsc, self.fired_due.unwrap_or(0)),
            _ => None,
        };
        // A read from the TSC is at `tsc` itself; a read(2) lands after it, within ~1 us or,
        // when an interrupt hits the call, longer.
        let held = read.map(|ns| self.held_to_tsc(ns, tsc));
        self.this_exit_tsc = held.filter(|&(ns, stamped)| stamped && ns >= self.last).map(|_| tsc);
        if let (Some(tsc), Some((ns, _))) = (self.this_exit_tsc, held) {
            self.stamp = Some((tsc, ns));
        }
        self.last = held.map_or(self.last, |(ns, _)| ns.max(self.last));
        self.this_exit = Some(self.last);
        self.last
    }

    /// Clock `ns` read at host TSC `tsc`, and whether it may be stamped with `tsc`. Thread
    /// time never passes faster than the TSC, so a read is held to the TSC time since the
    /// last stamped one: two stamped publishes never show more counts than ticks between
    /// them, which the guest's per-task bound rests on (docs/DESIGN.md, "Per-task counting
    /// with no exit per switch"). A timer's deadline, which the clock has passed, may go
    /// past that: such a read is not stamped.
    fn held_to_tsc(&self, ns: u64, tsc: u64) -> (u64, bool) {
        let Some((at, clock)) = self.stamp else { return (ns, true) };
        let limit = clock.saturating_add(TscRate::from_khz_or_1(self.tsc_khz).cycles_to_ns(tsc.saturating_sub(at)));
        match self.fired_due {
            _ if ns <= limit => (ns, true),
            Some(due) if due > limit => (ns, false),
            _ => (limit, true),
        }
    }

    /// The host TSC at which this exit's counts were read (None: not read in this exit,
    /// or the read held no new value).
    pub fn read_tsc(&self) -> Option<u64> {
        self.this_exit.and(self.this_exit_tsc)
    }

    fn counter(&mut self, pmc: PmcIdx) -> &mut ClockCounter {
        self.counters[pmc.slot()].as_mut().expect("model protocol: counter is open")
    }

    /// Counter `c`'s count in event units at clock `now` (what overflows follow).
    fn count(&self, c: &ClockCounter, now: u64) -> u64 {
        match &c.tsc {
            Some(t) => t.value(host_tsc()),
            None => self.mode.in_event_units(c.time.value(now)),
        }
    }

    /// The clock ns at which running counter `c` overflows, seen at clock `now`.
    fn deadline(&self, c: &ClockCounter, now: u64) -> Option<u64> {
        let armed = c.armed.filter(|_| c.time.running())?;
        Some(now + self.mode.to_host_units(armed.remaining(self.count(c, now)), self.floor_ns))
    }

    /// Point the sampling timer at the nearest overflow of a running counter, unless it
    /// already fires there. With none left, a timer is let be: it is put off at the
    /// notification it brings (`after_notification`), not at every stop.
    fn sync_timer(&mut self, now: u64) {
        let Some(wanted) = self.wanted(now) else { return };
        if let Some(t) = self.timer.map(|t| t.at(now)) {
            self.timer = Some(t);
            if lands(t.due, wanted, wanted - now) {
                return;
            }
        }
        self.set_timer(wanted, wanted - now);
    }

    /// Set the sampling timer to fire `period` from now, at clock `due`, and every `period`
    /// after (the kernel restarts it).
    fn set_timer(&mut self, due: u64, period: u64) {
        if let Some(clock) = &self.clock {
            clock.set_period(period).ok(); // a failure is counted by perf_sys (--stats)
        }
        self.timer = Some(Timer { due, period });
    }

    /// The nearest overflow of a running, armed counter at clock `now`.
    fn wanted(&self, now: u64) -> Option<u64> {
        self.counters.iter().flatten().filter_map(|c| self.deadline(c, now)).min()
    }

    /// Stop the sampling timer.
    fn stop_timer(&mut self) {
        if let Some(clock) = &self.clock {
            clock.set_period(NEVER).ok(); // a failure is counted by perf_sys (--stats)
        }
        self.timer = None;
    }

    /// Counter `pmc` is re-armed or stopped at clock `now`: if it ran, count the
    /// notifications it missed.
    fn count_lost(&mut self, pmc: PmcIdx, now: u64) {
        let floor = self.mode.in_event_units(self.floor_ns);
        let c = self.counters[pmc.slot()].as_ref().expect("model protocol: counter is open");
        if let (true, Some(armed)) = (c.time.running(), c.armed) {
            let count = self.count(c, now);
            self.notifications.count_lost(armed, count, floor);
        }
    }

    /// An overflow notification is about to be handled.
    pub fn notification_taken(&mut self) {
        self.notifications.taken += 1;
        // The kernel's clock just passed the timer's deadline: an estimate a few ns short
        // would leave the counter just before its overflow, a period late (`now_past`).
        self.this_exit = None;
        self.fired_due = self.timer.map(|t| t.due);
        self.in_notification = true;
    }

    /// A notification was handled: one period for whatever the model re-armed.
    pub fn after_notification(&mut self) {
        self.in_notification = false;
        let now = self.now();
        self.fired_due = None;
        let fired = self.timer.take();
        let Some(wanted) = self.wanted(now) else {
            if fired.is_some() {
                self.stop_timer(); // no running counter is armed any more
            }
            return;
        };
        // The kernel restarts the timer that fired with the same period: kept where it next
        // fires at the nearest overflow or just after it, as periodic sampling with a reload
        // has it, so a sample costs no system call. A timer due before the overflow would
        // find the counter just short of it and notice it a period late, every period: that
        // one is set afresh. So is the timer of a thread descheduled since the last
        // notification (the clock took a read(2)) and one whose notification came off the
        // grid kept here, as the kernel's phase may then not be the one assumed (it restarts
        // a descheduled thread's timer from what remained): before the timer's deadline (the
        // kernel's restart is already running: kept, the next overflow would be noticed a
        // period late, and the next), or over half a period after it, less whole periods (a
        // notification's own latency, the exit its signal causes, is ~50-100 us here).
        let on_grid = |t: &Timer| now >= t.due && (now - t.due) % t.period <= t.period / 2;
        let reads = self.reader.as_ref().map_or(0, |r| r.syscalls);
        let unbroken = std::mem::replace(&mut self.reads_at_notification, reads) == reads;
        let kept = fired.filter(|t| unbroken && on_grid(t)).map(|t| t.at(now));
        if let Some(t) = kept.filter(|t| fires_just_after(t.due, wanted, wanted - now)) {
            self.timer = Some(t);
            return;
        }
        // Afresh: with the spacing from the overflow that fired to the next one as the period,
        // the kernel's restarts land on the overflows to come, each as late as this handling
        // made the first; where that is too late, at the overflow itself.
        let spacing = fired.filter(|f| f.due <= now).map(|f| wanted - f.due);
        match spacing.filter(|&p| fires_just_after(now + p, wanted, wanted - now)) {
            Some(period) => self.set_timer(now + period, period),
            None => self.set_timer(wanted, wanted - now),
        }
    }
    /// Open the clock for the first counter.
    fn open_clock(&mut self) -> Result<(), BackendError> {
        let attr = PerfEventAttr {
            type_: PERF_TYPE_SOFTWARE,
            config: PERF_COUNT_SW_TASK_CLOCK,
            sample_period: NEVER,
            ..Default::default()
        };
        let clock = HostEvent::open(&attr, &self.budget)?;
        self.reader = Some(SelfRead::new(&clock, self.tsc_khz));
        self.clock = Some(clock);
        Ok(())
    }
}

impl CountSource for ClockSource {
    fn supports(&self, event: ArchEvent) -> bool {
        clock_supports(event)
    }

    fn open(&mut self, pmc: PmcIdx, config: &HostEventConfig) -> Result<(), BackendError> {
        if !clock_counts(config) {
            return Err(BackendError::Unsupported);
        }
        if self.clock.is_none() {
            self.open_clock()?;
        }
        let tsc = (config.event == ArchEvent::RefCycles).then(Stopwatch::default);
        self.counters[pmc.slot()] = Some(ClockCounter { tsc, ..Default::default() });
        Ok(())
    }

    /// The clock itself stays open for the next counter: re-opening it would cost six
    /// system calls (open, three fcntls, mmap, close), and a software clock holds no
    /// hardware counter that lazy release would free for someone else. (On a host with
    /// slow exits a perf-like guest's counters stay stopped for a millisecond between
    /// programming rounds, and were released and re-opened every round.) A timer left
    /// running is put off at the notification it brings.
    fn close(&mut self, pmc: PmcIdx) {
        self.counters[pmc.slot()] = None;
    }

    fn enable(&mut self, pmc: PmcIdx) {
        self.enable_many(pmc.mask());
    }

    fn disable(&mut self, pmc: PmcIdx) {
        self.disable_many(pmc.mask());
    }

    fn enable_many(&mut self, mask: u64) {
        let (now, tsc) = (self.now(), host_tsc());
        let mut armed = false;
        for pmc in PmcIdx::iter_mask(mask) {
            let c = self.counter(pmc);
            c.time.start(now);
            if let Some(t) = &mut c.tsc {
                t.start(tsc);
            }
            armed |= c.armed.is_some();
        }
        if armed {
            self.sync_timer(now);
        }
    }

    fn disable_many(&mut self, mask: u64) {
        let (now, tsc) = (self.now(), host_tsc());
        for pmc in PmcIdx::iter_mask(mask) {
            self.count_lost(pmc, now);
            let c = self.counter(pmc);
            c.time.stop(now);
            if let Some(t) = &mut c.tsc {
                t.stop(tsc);
            }
        }
    }

    fn read(&mut self, pmc: PmcIdx) -> u64 {
        let c = self.counter(pmc);
        let now = if c.tsc.is_none() && c.time.running() { self.now() } else { 0 };
        let c = self.counters[pmc.slot()].as_ref().expect("model protocol: counter is open");
        self.count(c, now)
    }

    fn arm_overflow(&mut self, pmc: PmcIdx, after: Option<u64>) {
        let Some(after) = after else {
            // A timer left for it is put off at the notification it brings.
            self.counter(pmc).armed = None;
            return;
        };
        let running = self.counter(pmc).time.running();
        let now = if running { self.now() } else { 0 };
        self.count_lost(pmc, now);
        let throttling = self.floor_ns > MIN_CLOCK_PERIOD_NS;
        self.notifications.arming(after, self.mode.in_event_units(self.floor_ns), throttling);
        let c = self.counters[pmc.slot()].as_ref().expect("model protocol: counter is open");
        let count = self.count(c, now);
        self.counter(pmc).armed = Some(Armed { at: count, after });
        if running && !self.in_notification {
            self.sync_timer(now);
        }
    }
}

mod self_read;
use self_read::SelfRead;

#[cfg(test)]
mod tests;
