//! VMM-side sampling of a vCPU (`record -a`, in the spirit of `perf kvm --guest record`): a
//! task-clock event on the vCPU thread fires every period of its CPU time; at the exit its
//! signal causes, the VMM takes the guest's instruction pointer from the registers KVM
//! copies out at every exit (KVM_CAP_SYNC_REGS: no ioctl per sample) and, for call graphs,
//! unwinds the guest's stack through its page tables: with the guest ELF's CFI
//! (`unwind.rs`) or by its frame pointers. Any guest, no agent.

use crate::backends::perf_sys::*;
use crate::profiling::unwind::{GuestUnwinder, UnwindCache};
use crate::profiling::{Sample, VMM_SAMPLE_EVENT};
use crate::vstate::kick;
use crate::vstate::linear::{LinearMemory, PageWalk};
use kvm_ioctls::{SyncReg, VcpuFd};
use pmu::tsc::{SamplePeriod, TscRate};
use std::sync::Arc;
use std::time::Instant;
use vm_memory::GuestMemoryMmap;

/// Deepest call chain walked.
pub const MAX_DEPTH: usize = 64;
/// A frame larger than this ends the walk: a frame pointer that far up is not one.
const MAX_FRAME: u64 = 1 << 20;
/// The kernel's shortest task-clock sampling period (10 us). The vPMU's own clock stays at
/// `MIN_CLOCK_PERIOD_NS` and above, as each of its notifications costs the guest a PMI; a
/// profiler's sample costs only the exit, so it may go down to the kernel's floor.
const KERNEL_MIN_CLOCK_PERIOD_NS: u64 = 10_000;

/// How the VMM unwinds a sampled vCPU's stack (`--call-graph`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallGraph {
    /// Follow the saved frame pointers.
    FramePointers,
    /// Unwind with the guest ELF's CFI (`.eh_frame` or `.debug_frame`), frame pointers where
    /// no FDE covers an address.
    Dwarf,
}

/// How the VMM samples every vCPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplingConfig {
    /// How often: cycles are vCPU thread time at the guest TSC's rate, as the vPMU's
    /// software clock counts them.
    pub period: SamplePeriod,
    /// Take a call chain with every sample, unwound so.
    pub callchain: Option<CallGraph>,
    /// Most samples kept per vCPU; more are counted as dropped.
    pub max_samples: usize,
}

/// What the samplers of a VM took.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    /// Every vCPU's samples, in time order per vCPU.
    pub taken: Vec<Sample>,
    /// Samples not kept (the bound was reached).
    pub dropped: u64,
}

/// The sampler of one vCPU thread.
#[derive(Debug)]
pub struct Sampler {
    clock: PerfEvent,
    config: SamplingConfig,
    /// The period in thread ns.
    period_ns: u64,
    vcpu: u32,
    epoch: Instant,
    /// Thread ns at which the next sample is due, for the SIGIO fallback (which does not
    /// say whose event fired).
    due: u64,
    samples: Samples,
    /// The guest image's CFI (`CallGraph::Dwarf`) and this thread's cache of its rules.
    unwinder: Option<(Arc<GuestUnwinder>, UnwindCache)>,
}

impl Sampler {
    /// Start sampling the calling thread, vCPU `vcpu` of `fd`, whose guest TSC runs at
    /// `tsc_khz`; times count from `epoch`. `unwinder`: the guest image's CFI, for
    /// `CallGraph::Dwarf` (without it, frame pointers).
    pub fn start(
        config: SamplingConfig,
        unwinder: Option<Arc<GuestUnwinder>>,
        tsc_khz: u64,
        vcpu: u32,
        fd: &mut VcpuFd,
        epoch: Instant,
    ) -> std::io::Result<Sampler> {
        let period_ns = config.period.ns(TscRate::from_khz(tsc_khz)).max(KERNEL_MIN_CLOCK_PERIOD_NS);
        let attr = PerfEventAttr {
            type_: PERF_TYPE_SOFTWARE,
            config: PERF_COUNT_SW_TASK_CLOCK,
            sample_period: period_ns,
            ..Default::default()
        };
        let clock = PerfEvent::open_untracked(&attr)?;
        clock.signal_overflows_to(gettid(), kick::sample_signal())?;
        fd.set_sync_valid_reg(SyncReg::Register);
        if config.callchain.is_some() {
            fd.set_sync_valid_reg(SyncReg::SystemRegister);
        }
        let unwinder = match config.callchain {
            Some(CallGraph::Dwarf) => unwinder.map(|u| (u, UnwindCache::default())),
            _ => None,
        };
        Ok(Sampler { clock, config, period_ns, vcpu, epoch, due: period_ns, samples: Samples::default(), unwinder })
    }

    /// KVM_RUN returned: take a sample if the clock said so.
    pub fn after_exit(&mut self, fd: &VcpuFd, mem: &GuestMemoryMmap) {
        let Some(certain) = kick::take_sample_signal() else { return };
        if !certain {
            // SIGIO: this clock's or another event's.
            let now = self.clock.read().unwrap_or(0);
            if now < self.due {
                return;
            }
            self.due = now;
        }
        self.due += self.period_ns;
        if self.samples.taken.len() >= self.config.max_samples {
            self.samples.dropped += 1;
            return;
        }
        let sync = fd.sync_regs();
        let callchain = match self.config.callchain {
            Some(_) => walk(&sync, mem, self.unwinder.as_mut()),
            None => Vec::new(),
        };
        self.samples.taken.push(Sample {
            time_ns: self.epoch.elapsed().as_nanos() as u64,
            vcpu: self.vcpu,
            task: 0,
            event: VMM_SAMPLE_EVENT,
            ip: sync.regs.rip,
            callchain,
        });
    }

    /// What it took.
    pub fn finish(self) -> Samples {
        self.samples
    }
}

/// The return addresses of the stack at the registers KVM synced out: unwound with the
/// guest's CFI where `unwinder` has it, else by frame pointers.
pub(crate) fn walk(
    sync: &kvm_bindings::kvm_sync_regs,
    mem: &GuestMemoryMmap,
    unwinder: Option<&mut (Arc<GuestUnwinder>, UnwindCache)>,
) -> Vec<u64> {
    let (s, r) = (&sync.sregs, &sync.regs);
    let long_mode = s.efer & crate::arch::x86_64::boot::EFER_LMA != 0;
    let paging = s.cr0 & crate::arch::x86_64::boot::CR0_PG != 0;
    let mut unwind = |m: &mut dyn LinearMemory| match unwinder {
        Some((u, cache)) => u.chain(cache, m, r.rip, r.rsp, r.rbp),
        None => frames(m, r.rbp, r.rsp),
    };
    match (paging, long_mode) {
        (false, _) => unwind(&mut crate::vstate::linear::Identity(mem)),
        (true, true) => unwind(&mut PageWalk::new(mem, s.cr3)),
        (true, false) => Vec::new(), // 32-bit paging: not walked
    }
}

/// Follow saved frame pointers from `rbp`: each frame holds the caller's frame pointer and
/// the return address above it. Stops at a null, misaligned, unmapped or non-increasing
/// frame pointer, one below the stack pointer, or after MAX_DEPTH frames.
pub fn frames(mem: &mut (impl LinearMemory + ?Sized), rbp: u64, rsp: u64) -> Vec<u64> {
    let mut chain = Vec::new();
    let mut fp = rbp;
    while chain.len() < MAX_DEPTH && fp != 0 && fp.is_multiple_of(8) && fp >= rsp {
        let (Some(next), Some(ret)) = (mem.read_u64(fp), mem.read_u64(fp.wrapping_add(8))) else { break };
        if ret == 0 {
            break;
        }
        chain.push(ret);
        if next <= fp || next - fp > MAX_FRAME {
            break;
        }
        fp = next;
    }
    chain
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vstate::linear::Words;
    use std::collections::HashMap;

    #[test]
    fn frames_follow_the_chain_and_stop_safely() {
        // heavy's frame at 0x1000 -> work's at 0x1040 -> cmain's at 0x1080 -> 0 (the end).
        let mut m = Words(HashMap::from([
            (0x1000, 0x1040),
            (0x1008, 0xaaa),
            (0x1040, 0x1080),
            (0x1048, 0xbbb),
            (0x1080, 0),
            (0x1088, 0xccc),
        ]));
        assert_eq!(frames(&mut m, 0x1000, 0xff0), [0xaaa, 0xbbb, 0xccc]);
        assert_eq!(frames(&mut m, 0x1000, 0x1008), Vec::<u64>::new(), "below the stack pointer");
        assert_eq!(frames(&mut m, 0x1001, 0), Vec::<u64>::new(), "misaligned");
        assert_eq!(frames(&mut m, 0x9000, 0), Vec::<u64>::new(), "unmapped");
        // A loop (a frame pointing at itself or below) ends the walk after one frame.
        let mut looped = Words(HashMap::from([(0x2000, 0x2000), (0x2008, 0x1), (0x3000, 0x2fc0), (0x3008, 0x2)]));
        assert_eq!(frames(&mut looped, 0x2000, 0), [0x1]);
        assert_eq!(frames(&mut looped, 0x3000, 0), [0x2]);
        // A chain longer than MAX_DEPTH is cut there.
        let deep = (0..200u64).flat_map(|i| [(0x10_0000 + i * 16, 0x10_0000 + (i + 1) * 16), (0x10_0008 + i * 16, 7)]);
        assert_eq!(frames(&mut Words(deep.collect()), 0x10_0000, 0).len(), MAX_DEPTH);
    }
}
