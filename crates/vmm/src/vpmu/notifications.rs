//! Overflow notifications of one vCPU: taking them from the signal handler's flag, and
//! feeding their cost to the PMI throttle.

use crate::kick;
use crate::throttle::Throttle;

/// Set to N to drop every Nth overflow notification (tests of lost-notification counting;
/// only in builds with vmm's `test-hooks` feature, which perfvm's tests turn on).
#[cfg(feature = "test-hooks")]
pub const DROP_ENV: &str = "PERFVM_DROP_NOTIFICATIONS";

/// The notifications of one vCPU.
#[derive(Debug)]
pub(super) struct Notifications {
    /// PMI throttling (perf backend).
    throttle: Option<Throttle>,
    /// The last `take` found a notification (its cost is measured by the loop).
    taken: bool,
    #[cfg(feature = "test-hooks")]
    dropper: Dropper,
}

impl Notifications {
    pub(super) fn new(throttle: Option<Throttle>) -> Self {
        Notifications {
            throttle,
            taken: false,
            #[cfg(feature = "test-hooks")]
            dropper: Dropper::from_env(),
        }
    }

    pub(super) fn throttle(&self) -> Option<Throttle> {
        self.throttle
    }

    /// Whether an overflow notification arrived since the last call.
    pub(super) fn take(&mut self) -> bool {
        self.taken = kick::take_pmu_signal() && !self.dropped();
        self.taken
    }

    #[cfg(feature = "test-hooks")]
    fn dropped(&mut self) -> bool {
        self.dropper.drops_next()
    }

    #[cfg(not(feature = "test-hooks"))]
    fn dropped(&mut self) -> bool {
        false
    }

    /// The last notification taken cost the VMM `ns`: the shortest period the throttle
    /// allows now, if it throttles.
    pub(super) fn cost(&mut self, ns: u64) -> Option<u64> {
        if !std::mem::take(&mut self.taken) {
            return None;
        }
        self.throttle.as_mut().map(|t| t.note(ns))
    }
}

/// Drops every Nth notification (`DROP_ENV`).
#[cfg(feature = "test-hooks")]
#[derive(Debug)]
struct Dropper {
    every: Option<u64>,
    seen: u64,
}

#[cfg(feature = "test-hooks")]
impl Dropper {
    fn from_env() -> Self {
        let every = std::env::var(DROP_ENV).ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0);
        Dropper { every, seen: 0 }
    }

    fn drops_next(&mut self) -> bool {
        let Some(every) = self.every else { return false };
        self.seen += 1;
        self.seen.is_multiple_of(every)
    }
}
