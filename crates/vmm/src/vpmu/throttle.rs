//! PMI throttling, in the spirit of perf's `perf_cpu_time_max_percent`: overflow handling
//! may take at most a given share of a vCPU's time. A notification costs the vCPU thread
//! the VMM's work (from the exit it caused to the next entry, measured each time, as a
//! moving average) plus the exit itself (the guest -> host -> guest roundtrip, which the
//! VMM cannot see from inside the run: `transition` measures it once per process). The
//! shortest overflow period is then the one at which that cost stays within the share, so
//! a period too short for the host to keep up with (a slow exit, a debugger attached)
//! stretches instead of livelocking the guest. The guest's own PMI handler is the guest's
//! to throttle, as Linux perf does in its NMI handler.

/// Default share of vCPU time for overflow handling, percent (perf's default is 25).
pub const DEFAULT_MAX_PERCENT: u8 = 25;

/// The throttle of one vCPU.
#[derive(Debug, Clone, Copy)]
pub struct Throttle {
    max_percent: u64,
    /// Thread CPU time of one exit roundtrip on this host in the vCPU's mode, ns.
    exit_ns: u64,
    /// Moving average of one notification's VMM cost, ns (0: none seen yet).
    cost_ns: u64,
}

impl Throttle {
    /// A throttle keeping handling within `max_percent` (1..=100) of vCPU time, where an
    /// exit roundtrip costs `exit_ns`.
    pub fn new(max_percent: u8, exit_ns: u64) -> Self {
        Throttle { max_percent: u64::from(max_percent.clamp(1, 100)), exit_ns, cost_ns: 0 }
    }

    /// The share of vCPU time overflow handling may take, percent.
    pub fn max_percent(&self) -> u8 {
        self.max_percent as u8
    }

    /// The exit roundtrip each notification is charged, ns.
    pub fn exit_ns(&self) -> u64 {
        self.exit_ns
    }

    /// A notification cost the VMM `ns`; returns the shortest period (ns of vCPU time) that
    /// keeps handling within the share: (exit + cost) / period <= max_percent.
    pub fn note(&mut self, ns: u64) -> u64 {
        self.cost_ns = if self.cost_ns == 0 { ns } else { (7 * self.cost_ns + ns) / 8 };
        (self.exit_ns + self.cost_ns) * 100 / self.max_percent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_keeps_handling_within_its_share() {
        let mut t = Throttle::new(25, 0);
        assert_eq!(t.note(10_000), 40_000, "10 us per notification: periods of 40 us or more");
        // A slower host (or a tracer) raises the floor gradually.
        let floor = t.note(1_000_000);
        assert!(floor > 40_000 && floor < 4_000_000, "{floor}");
        for _ in 0..100 {
            t.note(1_000_000);
        }
        assert!(t.note(1_000_000) >= 3_900_000);
    }

    #[test]
    fn share_is_clamped() {
        assert_eq!(Throttle::new(0, 0).note(1_000), 100_000, "0% is taken as 1%");
        assert_eq!(Throttle::new(200, 0).note(1_000), 1_000, "more than 100% is 100%");
    }

    #[test]
    fn the_exit_itself_counts() {
        // A 60 us exit (a native exit on some hosts) and 20 us of VMM work: at 25%, no
        // period under 320 us, where the VMM's work alone would allow 80 us.
        let mut t = Throttle::new(25, 60_000);
        assert_eq!(t.note(20_000), 320_000);
        assert_eq!(Throttle::new(25, 0).note(20_000), 80_000);
    }
}
