//! Counting backends behind the PMU model's `CountSource` trait.

pub mod decode;
pub mod exact;
pub mod perf;
pub mod perf_sys;
pub mod retire;

/// The host TSC, which the guest's TSC follows at the same rate.
pub fn host_tsc() -> u64 {
    // SAFETY: RDTSC has no memory effects; every x86-64 CPU has it.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Reference cycles as the TSC counts them while a counter runs.
#[derive(Debug, Default, Clone, Copy)]
pub struct TscCount {
    total: u64,
    since: Option<u64>,
}

impl TscCount {
    pub fn start(&mut self, now: u64) {
        self.since.get_or_insert(now);
    }

    pub fn stop(&mut self, now: u64) {
        self.total = self.value(now);
        self.since = None;
    }

    pub fn value(&self, now: u64) -> u64 {
        self.total + self.since.map_or(0, |s| now.saturating_sub(s))
    }
}

#[cfg(test)]
mod tests {
    use super::TscCount;

    #[test]
    fn a_tsc_count_runs_only_between_start_and_stop() {
        let mut t = TscCount::default();
        assert_eq!(t.value(100), 0);
        t.start(100);
        t.start(150); // already running: the first start holds
        assert_eq!(t.value(160), 60);
        t.stop(200);
        assert_eq!(t.value(1_000), 100, "stopped");
        t.start(1_000);
        assert_eq!(t.value(1_010), 110);
    }
}
