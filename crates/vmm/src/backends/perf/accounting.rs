//! What the perf backend accounts for across a VM: the cap on open host events, and what
//! became of overflow notifications.

use serde::Serialize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A per-VM cap on open host events, shared by every vCPU's backend.
#[derive(Debug)]
pub struct EventBudget {
    limit: usize,
    open: AtomicUsize,
    /// Highest number open at once.
    pub peak: AtomicUsize,
    /// Opens refused because the cap was reached.
    pub refused: AtomicUsize,
    /// Host events created so far.
    pub created: AtomicUsize,
}

impl EventBudget {
    /// A budget of at most `limit` open host events, none open yet.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(EventBudget {
            limit,
            open: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            created: AtomicUsize::new(0),
        })
    }

    pub(crate) fn take(&self) -> bool {
        let taken = self.open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.limit).then_some(n + 1));
        match taken {
            Ok(n) => {
                self.peak.fetch_max(n + 1, Ordering::Relaxed);
                true
            }
            Err(_) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// A taken event was created.
    pub(crate) fn created(&self) {
        self.created.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn give_back(&self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }

    /// Host events open now.
    pub fn open_now(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Most host events that may be open at once.
    pub fn limit(&self) -> usize {
        self.limit
    }
}

/// What became of the software clock's overflow notifications.
#[derive(Debug, Default, Clone, Copy, Serialize, serde::Deserialize)]
pub struct NotificationStats {
    /// Notifications (signals) taken.
    pub taken: u64,
    /// Notifications that never arrived: a counter was found a whole period or more past its
    /// overflow point when it was re-armed.
    pub lost: u64,
    /// Periods stretched beyond what the guest programmed, to keep overflow handling within
    /// its share of vCPU time (`--pmi-max-percent`).
    pub throttled: u64,
}

impl NotificationStats {
    /// A running counter armed at count `armed_at` to overflow `after` counts later is
    /// re-armed or stopped at `now`: every whole period (no shorter than `floor`) it ran past
    /// its first deadline is a notification that never came (the first may be in flight).
    pub(crate) fn count_lost(&mut self, (armed_at, after): (u64, u64), now: u64, floor: u64) {
        let period = after.max(floor);
        self.lost += now.saturating_sub(armed_at).saturating_sub(period) / period;
    }

    /// A counter is armed `after` counts ahead: a distance under the throttled `floor` will
    /// be stretched.
    pub(crate) fn arming(&mut self, after: u64, floor: u64, throttling: bool) {
        if throttling && after < floor {
            self.throttled += 1;
        }
    }

    /// Add another vCPU's counts to these.
    pub fn merge(&mut self, other: &NotificationStats) {
        self.taken += other.taken;
        self.lost += other.lost;
        self.throttled += other.throttled;
    }
}
