//! The backend as the model sees it: every call counted for [`crate::PmuStats`].

use crate::backend::{CountSource, HostEventConfig};
use crate::error::BackendError;
use crate::pmc::PmcIdx;
use crate::stats::BackendCalls;

/// A [`CountSource`] with a tally of the calls made to it.
#[derive(Debug)]
pub(crate) struct HostDriver<B> {
    pub backend: B,
    pub calls: BackendCalls,
}

impl<B: CountSource> HostDriver<B> {
    pub fn new(backend: B) -> Self {
        HostDriver { backend, calls: BackendCalls::default() }
    }
    pub fn open(&mut self, pmc: PmcIdx, config: &HostEventConfig) -> Result<(), BackendError> {
        self.calls.open += 1;
        self.backend.open(pmc, config)
    }
    pub fn close(&mut self, pmc: PmcIdx) {
        self.calls.close += 1;
        self.backend.close(pmc)
    }
    pub fn read(&mut self, pmc: PmcIdx) -> u64 {
        self.calls.read += 1;
        self.backend.read(pmc)
    }
    pub fn enable_many(&mut self, mask: u64) {
        self.calls.enable += u64::from(mask.count_ones());
        self.backend.enable_many(mask)
    }
    pub fn disable_many(&mut self, mask: u64) {
        self.calls.disable += u64::from(mask.count_ones());
        self.backend.disable_many(mask)
    }
    pub fn arm_overflow(&mut self, pmc: PmcIdx, after: Option<u64>) {
        self.calls.arm_overflow += 1;
        self.backend.arm_overflow(pmc, after)
    }
}
