//! What the perf backend accounts for across a VM: the cap on open host events, and what
//! became of overflow notifications.

use crate::backends::perf_sys::{gettid, PerfEvent, PerfEventAttr};
use crate::vstate::kick;
use pmu::BackendError;
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

    /// One event's place in the budget, or None (counted as refused) at the cap.
    fn take(self: &Arc<Self>) -> Option<BudgetToken> {
        let taken = self.open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.limit).then_some(n + 1));
        match taken {
            Ok(n) => {
                self.peak.fetch_max(n + 1, Ordering::Relaxed);
                Some(BudgetToken(self.clone()))
            }
            Err(_) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
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

/// One open host event's place in its budget, given back when dropped.
#[derive(Debug)]
struct BudgetToken(Arc<EventBudget>);

impl Drop for BudgetToken {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A host event of the calling (vCPU) thread drawn from the VM's budget, its overflows
/// signalled to that thread; its place in the budget is given back when it closes.
#[derive(Debug)]
pub(crate) struct HostEvent {
    event: PerfEvent,
    _token: BudgetToken,
}

impl HostEvent {
    /// Open `attr` within `budget`.
    pub(crate) fn open(attr: &PerfEventAttr, budget: &Arc<EventBudget>) -> Result<HostEvent, BackendError> {
        let token = budget.take().ok_or(BackendError::LimitReached)?;
        let os = |e: std::io::Error| BackendError::Os(e.raw_os_error().unwrap_or(0));
        let event = PerfEvent::open(attr).map_err(os)?;
        event.signal_overflows_to(gettid(), kick::pmu_signal()).map_err(os)?;
        budget.created.fetch_add(1, Ordering::Relaxed);
        Ok(HostEvent { event, _token: token })
    }
}

impl std::ops::Deref for HostEvent {
    type Target = PerfEvent;
    fn deref(&self) -> &PerfEvent {
        &self.event
    }
}

/// A counter armed at count `at` to overflow `after` counts later (in event units).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Armed {
    /// The count when it was armed.
    pub at: u64,
    /// Counts from `at` to the overflow.
    pub after: u64,
}

impl Armed {
    /// Counts left to the overflow at count `now`; at least 1 (an overflow due is due now).
    pub(crate) fn remaining(self, now: u64) -> u64 {
        self.after.saturating_sub(now.saturating_sub(self.at)).max(1)
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
    /// A running counter `armed` is re-armed or stopped at `now`: every whole period (no shorter than `floor`) it ran past
    /// its first deadline is a notification that never came (the first may be in flight).
    pub(crate) fn count_lost(&mut self, armed: Armed, now: u64, floor: u64) {
        let period = armed.after.max(floor);
        self.lost += now.saturating_sub(armed.at).saturating_sub(period) / period;
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
