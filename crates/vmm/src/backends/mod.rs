//! Counting backends behind the PMU model's `CountSource` trait.

pub mod decode;
pub mod exact;
pub mod perf;
pub mod perf_sys;
pub mod retire;
