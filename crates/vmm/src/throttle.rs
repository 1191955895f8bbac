//! PMI throttling, in the spirit of perf's `perf_cpu_time_max_percent`: the VMM may spend at
//! most a given share of a vCPU's time handling overflow notifications. Each notification's
//! cost (from the exit it caused to the next entry) feeds a moving average; the shortest
//! overflow period is then the one at which that cost stays within the share, so a period
//! too short for the host to keep up with (a debugger attached, a slow host) stretches
//! instead of livelocking the guest.

/// Default share of vCPU time for overflow handling, percent (perf's default is 25).
pub const DEFAULT_MAX_PERCENT: u8 = 25;

/// The throttle of one vCPU.
#[derive(Debug, Clone, Copy)]
pub struct Throttle {
    max_percent: u64,
    /// Moving average of one notification's VMM cost, ns (0: none seen yet).
    cost_ns: u64,
}

impl Throttle {
    /// A throttle keeping handling within `max_percent` (1..=100) of vCPU time.
    pub fn new(max_percent: u8) -> Self {
        Throttle { max_percent: u64::from(max_percent.clamp(1, 100)), cost_ns: 0 }
    }

    /// A notification cost the VMM `ns`; returns the shortest period (ns of vCPU time) that
    /// keeps handling within the share: cost / period <= max_percent.
    pub fn note(&mut self, ns: u64) -> u64 {
        self.cost_ns = if self.cost_ns == 0 { ns } else { (7 * self.cost_ns + ns) / 8 };
        self.cost_ns * 100 / self.max_percent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_keeps_handling_within_its_share() {
        let mut t = Throttle::new(25);
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
        assert_eq!(Throttle::new(0).note(1_000), 100_000, "0% is taken as 1%");
        assert_eq!(Throttle::new(200).note(1_000), 1_000, "more than 100% is 100%");
    }
}
