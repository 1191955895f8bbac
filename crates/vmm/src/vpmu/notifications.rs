//! Overflow notifications of one vCPU: taking them from the signal handler's flag, and
//! feeding their cost to the PMI throttle.

use crate::vpmu::throttle::Throttle;
use crate::vstate::kick;

/// The notifications of one vCPU.
#[derive(Debug)]
pub(super) struct Notifications {
    /// PMI throttling (perf backend).
    throttle: Option<Throttle>,
    /// The last `take` found a notification (its cost is measured by the loop).
    taken: bool,
}

impl Notifications {
    pub(super) fn new(throttle: Option<Throttle>) -> Self {
        Notifications { throttle, taken: false }
    }

    pub(super) fn throttle(&self) -> Option<Throttle> {
        self.throttle
    }

    /// Whether an overflow notification arrived since the last call.
    pub(super) fn take(&mut self) -> bool {
        self.taken = kick::take_pmu_signal();
        self.taken
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
