//! The guest's paravirtual PMU page as one vCPU holds it: registration, the doorbell's
//! batches, publishes for exitless reads, and PV sampling's reloads.

use super::thread_cpu_ns;
use crate::backends::{Backend, VmmSource};
use crate::vpmu::guest_tsc::GuestTsc;
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
}

impl PvState {
    pub(super) fn new(offered: bool) -> Self {
        PvState {
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
        match pv::register(mem, gpa, self.offered, true) {
            Ok(page) => {
                self.stats.registrations += 1;
                self.page = Some(page);
                self.pmi_no_mask = crate::vpmu::pv::sampling::configure(mem, page, pmu);
                self.publish(pmu, vcpu, mem);
            }
            Err(_) => self.stats.refusals += 1,
        }
    }

    /// A page goes away: its counters return to the SDM rules.
    fn forget_sampling(&mut self, pmu: &mut Pmu<Backend>) {
        self.pmi_no_mask = false;
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
        self.pmi_no_mask = crate::vpmu::pv::sampling::configure(mem, page, pmu);
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

    /// Tell the guest's page which counters the model reloaded.
    pub(super) fn report_reloads(&mut self, pmu: &mut Pmu<Backend>, mem: &GuestMemoryMmap) {
        let reloaded = pmu.take_auto_reloaded();
        if let (true, Some(page)) = (reloaded != 0, self.page) {
            self.stats.auto_reloads += u64::from(reloaded.count_ones());
            crate::vpmu::pv::sampling::publish_reloads(mem, page, pmu, reloaded);
        }
    }
}
