//! Profiling from the VMM's side: sampling vCPUs (`sampler`, `record -a`) with call chains
//! unwound by the guest ELF's CFI (`unwind`), the counts the VMM knows by itself (`counts`,
//! `stat -a`), and a host program sampled by a cpu-clock perf event (`host_profile`, for
//! `bench precision`'s host run).

pub mod counts;
pub mod host_profile;
pub mod sampler;
pub mod unwind;
