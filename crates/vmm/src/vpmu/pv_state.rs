//! The guest's paravirtual PMU page as one vCPU holds it: registration, the doorbell's
//! batches, publishes for exitless reads, PV sampling's reloads, and the samples the VMM
//! takes at them for a guest that asks (version 5).

use super::thread_cpu_ns;
use crate::backends::{Backend, VmmSource};
use crate::profiling::Sample;
use crate::vpmu::guest_tsc::GuestTsc;
use crate::vpmu::pv::vmm_samples::{self, VmmSampling};
use crate::vpmu::pv::{self, CpuShare, PvPage, PvStats};
use kvm_ioctls::VcpuFd;
use pmu::{PmcIdx, Pmu};
use std::time::Instant;
use vm_memory::GuestMemoryMmap;

/// One vCPU's PV page and what became of it.
#[derive(Debug)]
pub(super) struct PvState {
    /// Whether the VMM accepts PV pages (`--pv on`).
    offered: bool,
    /// The guest's page, once accepted.
    page: Option<PvPage>,
    stats: PvStats,
    /// The page asks for PMIs without the LVTPC mask (one KVM_NMI each).
    pmi_no_mask: bool,
    cpu_share: CpuShare,
    created: Instant,
    /// The guest's TSC, for publishes.
    guest_tsc: GuestTsc,
    /// Whether the VMM offers to take the agent's samples (`--pv-samples`).
    offer_samples: bool,
    /// The guest asked the VMM to take its samples (version 5), as it asked.
    vmm: Option<VmmSampling>,
    /// The registers the VMM's samples need: wanted (chains need the system registers too),
    /// and whether KVM has synced them out since (else the exit's are read by ioctl).
    regs: SampleRegs,
    /// Samples taken and not yet handed to the agent channel, with when.
    pending: Vec<(Instant, Sample)>,
}

/// The registers KVM syncs out at every exit for the VMM's samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SampleRegs {
    /// Wanted: the general registers (the IP).
    pub regs: bool,
    /// Wanted: the system registers too (CR3, for call chains).
    pub sregs: bool,
    /// KVM_RUN has run with what is wanted since it was last asked for.
    synced: bool,
}

impl PvState {
    pub(super) fn new(offered: bool, offer_samples: bool) -> Self {
        PvState {
            offer_samples,
            vmm: None,
            regs: SampleRegs::default(),
            pending: Vec::new(),
            offered,
            page: None,
            stats: PvStats::default(),
            pmi_no_mask: false,
            cpu_share: CpuShare::default(),
            created: Instant::now(),
            guest_tsc: GuestTsc::default(),
        }
    }

    pub(super) fn stats(&self) -> &PvStats {
        &self.stats
    }

    /// Whether the guest's page asks for PMIs without the LVTPC mask.
    pub(super) fn pmi_no_mask(&self) -> bool {
        self.pmi_no_mask
    }

    /// A PMI went to the guest as a bare NMI, as its page asked.
    pub(super) fn unmasked_pmi(&mut self) {
        self.stats.unmasked_pmis += 1;
    }

    /// The guest offers a page at `gpa` (0: unregister).
    pub(super) fn register(&mut self, pmu: &mut Pmu<Backend>, vcpu: &VcpuFd, mem: &GuestMemoryMmap, gpa: u64) {
        self.forget_sampling(pmu);
        self.page = None;
        if gpa == 0 {
            return;
        }
        let offer = pv::Offer { exitless_reads: true, vmm_samples: self.offer_samples };
        match pv::register(mem, gpa, self.offered, offer) {
            Ok(page) => {
                self.stats.registrations += 1;
                self.page = Some(page);
                self.configure(pmu, mem, page);
                self.publish(pmu, vcpu, mem);
            }
            Err(_) => self.stats.refusals += 1,
        }
    }

    /// Read the page's sampling settings: the reloads (version 3) and whether the VMM
    /// takes the samples (version 5, if offered).
    fn configure(&mut self, pmu: &mut Pmu<Backend>, mem: &GuestMemoryMmap, page: PvPage) {
        self.pmi_no_mask = crate::vpmu::pv::sampling::configure(mem, page, pmu);
        self.vmm = if self.offer_samples { vmm_samples::configure(mem, page) } else { None };
        if let Some(v) = self.vmm {
            let sregs = self.regs.sregs || v.chain;
            if !self.regs.regs || sregs != self.regs.sregs {
                self.regs = SampleRegs { regs: true, sregs, synced: false };
            }
        }
    }

    /// The registers the VMM's samples want synced out at every exit, once, when they
    /// become wanted (the loop sets them before the next KVM_RUN: `regs_synced`).
    pub(super) fn sample_regs_wanted(&self) -> Option<SampleRegs> {
        (self.regs.regs && !self.regs.synced).then_some(self.regs)
    }

    /// The loop set the wanted registers before a KVM_RUN: its exits have them.
    pub(super) fn sample_regs_synced(&mut self) {
        self.regs.synced = true;
    }

    /// The samples taken since the last call, with when each was taken.
    pub(super) fn take_samples(&mut self) -> Vec<(Instant, Sample)> {
        std::mem::take(&mut self.pending)
    }

    /// A page goes away: its counters return to the SDM rules.
    fn forget_sampling(&mut self, pmu: &mut Pmu<Backend>) {
        self.pmi_no_mask = false;
        self.vmm = None;
        for bit in 0..pmu::MAX_GP_COUNTERS {
            pmu.set_auto_reload(PmcIdx::gp(bit).expect("in range"), None);
        }
        for j in 0..pmu::MAX_FIXED_COUNTERS {
            pmu.set_auto_reload(PmcIdx::fixed(j).expect("in range"), None);
        }
    }

    /// The doorbell: apply the page's batch in this one exit, then republish. False
    /// without a page.
    pub(super) fn doorbell(&mut self, pmu: &mut Pmu<Backend>, vcpu: &VcpuFd, mem: &GuestMemoryMmap) -> bool {
        let Some(page) = self.page else { return false };
        self.stats.doorbells += 1;
        self.configure(pmu, mem, page);
        self.stats.batched_writes += u64::from(pv::apply_batch(mem, page, pmu));
        self.publish(pmu, vcpu, mem);
        true
    }

    /// Publish counter values for exitless reads (only with a v2 page).
    pub(super) fn publish(&mut self, pmu: &mut Pmu<Backend>, vcpu: &VcpuFd, mem: &GuestMemoryMmap) {
        let Some(page) = self.page.filter(|p| p.version >= 2) else { return };
        let state = pmu.save();
        // The instant the backend read the counts for that snapshot, where it knows it.
        let at_read = pmu.backend().read_tsc();
        let backend = pmu.backend();
        let tsc_rate = pmu::EventSet::from_fn(|e| backend.counts_at_tsc_rate(e));
        let Some(publish) = pv::Publish::new(mem, page, pmu, &state, tsc_rate, at_read) else { return };
        // Guest TSC, thread CPU time and wall time: read only if some counter runs.
        let clocks = match publish.needs_clocks() {
            true => {
                let (tsc, stamped) = self.guest_tsc.read_at(vcpu, at_read);
                let wall_ns = self.created.elapsed().as_nanos() as u64;
                Some(pv::Clocks { tsc, stamped, cpu_ns: thread_cpu_ns(), wall_ns })
            }
            false => None,
        };
        publish.write(mem, &mut self.cpu_share, clocks);
        self.stats.publishes += 1;
    }

    /// Whether a page with published counters is registered.
    pub(super) fn publishing(&self) -> bool {
        self.page.is_some_and(|p| p.version >= 2)
    }

    /// Tell the guest's page which counters the model reloaded; if the guest asked (version
    /// 5), take their samples at this exit first, as `record -a` does.
    pub(super) fn report_reloads(&mut self, pmu: &mut Pmu<Backend>, vcpu: &VcpuFd, mem: &GuestMemoryMmap) {
        let reloaded = pmu.take_auto_reloaded();
        let Some(page) = self.page.filter(|_| reloaded != 0) else { return };
        self.stats.auto_reloads += u64::from(reloaded.count_ones());
        let sampled = match self.vmm {
            Some(asked) => {
                let at = Instant::now();
                let (ip, chain) = self.exit_stack(vcpu, mem, asked.chain);
                let samples = vmm_samples::take(mem, page, &asked, reloaded, ip, &chain);
                self.stats.vmm_samples += samples.len() as u64;
                self.pending.extend(samples.into_iter().map(|s| (at, s)));
                reloaded
            }
            None => 0,
        };
        crate::vpmu::pv::sampling::publish_reloads(mem, page, pmu, reloaded, sampled);
    }

    /// The guest's IP at this exit and, with `chain`, its return addresses by the frame
    /// pointers: from the registers KVM synced out, or by ioctl at the one exit before they
    /// were (the doorbell that asked for them).
    fn exit_stack(&self, vcpu: &VcpuFd, mem: &GuestMemoryMmap, chain: bool) -> (u64, Vec<u64>) {
        let sync = if self.regs.synced && (self.regs.sregs || !chain) {
            vcpu.sync_regs()
        } else {
            let (Ok(regs), Ok(sregs)) = (vcpu.get_regs(), vcpu.get_sregs()) else { return (0, Vec::new()) };
            kvm_bindings::kvm_sync_regs { regs, sregs, ..Default::default() }
        };
        let callchain = if chain { crate::profiling::sampler::walk(&sync, mem, None) } else { Vec::new() };
        (sync.regs.rip, callchain)
    }
}
