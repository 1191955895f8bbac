//! Profiling from the VMM's side: the one sample type a VM gives ([`Sample`], whether the
//! guest's agent took it or the VMM), sampling vCPUs (`sampler`, `record -a`) with call chains
//! unwound by the guest ELF's CFI (`unwind`), the counts the VMM knows by itself (`counts`,
//! `stat -a`), and a host program sampled by a cpu-clock perf event (`host_profile`, for
//! `bench precision`'s host run).

pub mod counts;
pub mod host_profile;
pub mod sampler;
pub mod unwind;

use serde::Serialize;

/// The EVENTSEL code (`umask << 8 | event`) of the VMM's samples: cycles, as its clock
/// counts them (vCPU thread time at the guest TSC's rate).
pub const VMM_SAMPLE_EVENT: u16 = 0x003c;

/// One sample a VM gave: taken by the guest's perf agent in its PMI handler (the agent
/// channel, `devices::agent`), or by the VMM at an exit (`sampler`, `record -a`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sample {
    /// Host ns since the VM was built: the VMM's clock, or the agent's guest TSC placed
    /// through its START mark (0 where unknown: an agent that sends no TSC or no mark).
    pub time_ns: u64,
    /// The vCPU it was taken on (0 from an agent that sends the original samples).
    pub vcpu: u32,
    /// The guest task running then (0: none known, before tasks start or from the VMM).
    pub task: u32,
    /// The sampling counter's EVENTSEL\[15:0\] ([`VMM_SAMPLE_EVENT`] from the VMM).
    pub event: u16,
    /// The interrupted instruction pointer.
    pub ip: u64,
    /// Return addresses, innermost caller first (empty without call chains).
    pub callchain: Vec<u64>,
}
