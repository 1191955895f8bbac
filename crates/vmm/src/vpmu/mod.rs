//! The vPMU of one vCPU, as the run loop sees it: MSR exits go to the PMU model, backend
//! overflows become PMIs through LVTPC, and in exact mode every single-step retires one
//! instruction into the exact backend. One straight path:
//! MSR exit -> pmu model -> backend -> overflow -> PMI into the guest.
//!
//! `VcpuPmu` owns the model and hands each job to one part: `accounting` (what it did and
//! cost), `step_control` (single-stepping), `pv_state` (the PV page) and `notifications`
//! (overflow signals and the PMI throttle).
//!
//! Beside it, the rest of the vPMU's VMM side: `pmi` (delivery through LVTPC), `throttle`
//! and `transition` (the PMI throttle and the exit cost it adds), `pv` (the paravirtual
//! page), `guest_tsc` (the TSC its publishes carry), `pebs` (software PEBS records),
//! `rdpmc_traps` (a guest kernel's RDPMC on hosts without an RDPMC exit), `stats` (what the
//! vPMU costs) and `report` (its part of `--stats`).

mod accounting;
pub mod guest_tsc;
mod notifications;
pub mod pebs;
mod planted;
pub mod pmi;
pub mod pv;
mod pv_state;
pub mod rdpmc_traps;
pub mod report;
pub mod stats;
mod step_control;
pub mod throttle;
pub mod transition;

use crate::backends::exact::stepping::Owed;
use crate::backends::Backend;
use crate::backends::VmmSource;
use crate::vstate::guest_debug::GuestDebug;
use accounting::Accounting;
pub use accounting::NmiSource;
use kvm_ioctls::{VcpuFd, VmFd};
use notifications::Notifications;
use pmi::PmiOutcome;
use pmu::{Initiator, MsrAccess, MsrIndex, Pmu, PmuStats};
use pv::PvStats;
use pv_state::PvState;
use rdpmc_traps::RdpmcTraps;
use stats::{OpStart, PmuOp, VpmuStats};
use std::collections::HashMap;
use std::sync::Arc;
use throttle::Throttle;
use vm_memory::GuestMemoryMmap;

/// CPU time of the calling thread.
pub(crate) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// How the builder sets up one vCPU's vPMU.
#[derive(Debug, Clone, Copy, Default)]
pub struct VpmuOptions {
    /// The guest is entered in long mode (else 32-bit mode): how stepping decodes.
    pub long_mode: bool,
    /// Native mode: the vCPU's VIF page.
    pub vif: Option<u64>,
    /// PMI throttling (perf backend).
    pub throttle: Option<Throttle>,
    /// Whether the VMM accepts PV pages (`--pv on`).
    pub pv_offered: bool,
    /// Whether the VMM offers to take the agent's samples itself (PV page version 5,
    /// `--pv-samples on`).
    pub pv_samples: bool,
    /// Exact backend: keep retired instructions per RIP (the reference profile).
    pub trace_rips: bool,
    /// Exact backend: step the whole run and count every retired instruction and branch.
    pub count_retired: bool,
    /// Exact backend: run blocks between branches where possible (`--exact-engine blocks`).
    pub blocks: bool,
    /// The host TSC's rate, kHz (`KVM_GET_TSC_KHZ`), which times the VMM's operations.
    pub tsc_khz: u64,
}

/// A vCPU's PMU plus the run-loop state around it.
#[derive(Debug)]
pub struct VcpuPmu {
    /// The PMU model over this vCPU's backend.
    pmu: Pmu<Backend>,
    account: Accounting,
    steps: step_control::StepControl,
    pv: PvState,
    notifications: Notifications,
}

impl VcpuPmu {
    /// Wrap `pmu` for one vCPU set up as `options` says.
    pub fn new(pmu: Pmu<Backend>, options: VpmuOptions) -> Self {
        let VpmuOptions {
            long_mode,
            vif,
            throttle,
            pv_offered,
            pv_samples,
            trace_rips,
            count_retired,
            blocks,
            tsc_khz,
        } = options;
        let tsc = pmu::tsc::TscRate::from_khz_or_1(tsc_khz);
        VcpuPmu {
            pmu,
            account: Accounting::new(tsc),
            steps: step_control::StepControl::new(long_mode, vif, trace_rips, count_retired, blocks),
            pv: PvState::new(pv_offered, pv_samples),
            notifications: Notifications::new(throttle),
        }
    }

    /// The PMU model.
    pub fn model(&self) -> &Pmu<Backend> {
        &self.pmu
    }

    /// What the VMM side did and what it cost.
    pub fn stats(&self) -> &VpmuStats {
        self.account.stats()
    }

    /// The PMU model's statistics.
    pub fn model_stats(&self) -> PmuStats {
        self.pmu.stats()
    }

    /// What became of the guest's PV page.
    pub fn pv_stats(&self) -> &PvStats {
        self.pv.stats()
    }

    /// The PMI throttle, if notifications are throttled.
    pub fn throttle(&self) -> Option<Throttle> {
        self.notifications.throttle()
    }

    /// The reference profile (exact backend with tracing): retired instructions per RIP.
    pub fn take_rip_profile(&mut self) -> Option<HashMap<u64, u64>> {
        self.steps.take_rip_profile()
    }

    /// Whether the backend single-steps from the first entry (as soon as a counter is
    /// programmed, which may be before it).
    pub fn steps_from_start(&self) -> bool {
        self.pmu.backend().wants_steps(true)
    }

    /// KVM_RUN returned: the guest ran, and counts moved.
    pub fn guest_ran(&mut self) {
        self.pmu.backend_mut().guest_ran();
    }

    /// The guest kernel's RDPMCs the VMM traps (`rdpmc_traps`).
    pub fn set_rdpmc_traps(&mut self, traps: Arc<RdpmcTraps>) {
        self.steps.set_rdpmc_traps(traps);
    }

    /// Guest RDPMC with ECX = `ecx` (one the VMM trapped).
    pub fn rdpmc(&mut self, ecx: u32) -> MsrAccess<u64> {
        self.steps.rdpmc(&mut self.pmu, self.account.stats_mut(), ecx)
    }

    /// Guest RDMSR of a PMU MSR.
    pub fn rdmsr(&mut self, index: u32) -> MsrAccess<u64> {
        let t = OpStart::now();
        let msr = self.pmu.decode(MsrIndex(index));
        let access = self.pmu.get_decoded(msr, Initiator::Guest);
        self.account.msr_exit(PmuOp::of_read(msr.reg()), t);
        access
    }

    /// Guest WRMSR of a PMU MSR. While the exact backend steps, the WRMSR retires before
    /// its write takes effect (docs/DESIGN.md), and is taken back if the write faults.
    pub fn wrmsr(&mut self, index: u32, value: u64) -> MsrAccess {
        let t = OpStart::now();
        let msr = self.pmu.decode(MsrIndex(index));
        let retired = self.steps.wrmsr_exit(&mut self.pmu, self.account.stats_mut());
        let access = self.pmu.set_decoded(msr, value, Initiator::Guest);
        if access.is_fault() {
            self.steps.wrmsr_faulted(&mut self.pmu, self.account.stats_mut(), retired);
        }
        self.account.msr_exit(PmuOp::of_write(msr.reg(), value), t);
        access
    }

    /// The loop issued a `KVM_NMI` that began at `started`.
    pub fn nmi_injected(&mut self, started: OpStart, source: NmiSource) {
        self.account.nmi_injected(started, source);
    }

    /// The loop queued the PMI's NMI in the next entry's events instead of a `KVM_NMI`.
    pub fn nmi_queued(&mut self) {
        self.account.nmi_queued();
    }

    /// The loop's `KVM_NMI` failed: a PMI's NMI is lost, not delivered.
    pub fn nmi_failed(&mut self, source: NmiSource) {
        self.account.nmi_failed(source);
    }

    /// The PMU request, before an entry: turn pending overflows into a PMI, follow the exact
    /// backend's stepping needs, and let the reuse policy release idle events. Free while
    /// idle. Returns what the PMI owes the guest: `Owed::Nmi` is for the caller's NMI step
    /// to inject; a PMI by vector is sent already.
    pub fn service(&mut self, vm: &VmFd, vcpu: &VcpuFd, mem: &GuestMemoryMmap, run_ns: u64) -> Owed {
        let mut owed = Owed::Nothing;
        let notified = self.notifications.take();
        let exact_overflow = self.pmu.backend_mut().take_overflow();
        if notified || exact_overflow || self.pmu.pmi_pending() || self.pmu.pebs_pending() {
            let t = OpStart::now();
            if notified {
                self.pmu.backend_mut().notification_taken();
            }
            let mut pmi = self.pmu.collect_overflows();
            // PEBS assists found by the fold: records into the guest's DS buffer (pebs.rs).
            let pebs = self.pmu.take_pebs_overflows();
            if pebs != 0 {
                pmi |= crate::vpmu::pebs::run_assists(&mut self.pmu, vcpu, mem, pebs);
            }
            if notified {
                self.pmu.backend_mut().after_notification();
            }
            self.pv.report_reloads(&mut self.pmu, vcpu, mem);
            if pmi {
                owed = self.raise_pmi(vm, vcpu, t);
                self.steps.pmi_raised(owed);
            } else {
                self.account.handled(t);
            }
        }
        // A guest RDMSR may also have found (and reloaded) a wrap.
        self.pv.report_reloads(&mut self.pmu, vcpu, mem);
        self.steps.follow(&self.pmu);
        if self.pmu.is_active() {
            self.pmu.tick(run_ns);
        }
        owed
    }

    /// The loop measured what the last notification cost the VMM (thread CPU time from its
    /// exit to the next entry): feed the throttle, which may raise the shortest period.
    pub fn note_notification_cost(&mut self, ns: u64) {
        if let Some(floor) = self.notifications.cost(ns) {
            self.pmu.backend_mut().set_period_floor(floor);
        }
    }

    /// Raise a PMI through LVTPC, begun at `started`: what it owes the guest. A PV guest
    /// that needs no LVTPC mask gets its NMI without the two LAPIC ioctls masking takes.
    fn raise_pmi(&mut self, vm: &VmFd, vcpu: &VcpuFd, started: OpStart) -> Owed {
        if self.pv.pmi_no_mask() {
            self.pv.unmasked_pmi();
            self.account.pmi_delivered(started, true);
            return Owed::Nmi;
        }
        // Intel's LAPIC masks LVTPC on a PMI; AMD's does not (KVM masks for Intel only).
        let mask = self.pmu.caps().vendor() == pmu::Vendor::Intel;
        match pmi::raise(vm, vcpu, mask) {
            Ok(PmiOutcome::Masked) => {
                self.account.pmi_masked(started);
                Owed::Nothing
            }
            Err(_) => {
                self.account.pmi_failed(started);
                Owed::Nothing
            }
            Ok(PmiOutcome::Nmi) => {
                self.account.pmi_delivered(started, true);
                Owed::Nmi
            }
            Ok(PmiOutcome::Fixed(_)) => {
                self.account.pmi_delivered(started, false);
                Owed::Interrupt
            }
        }
    }

    /// Last step before an entry: single-step as the exact backend needs, with an event window
    /// when an NMI was injected or a PMI raised for this entry (see `stepping`); a block
    /// instead of a step where the engine runs blocks and `blocks_ok` (no NMI due after so
    /// many instructions).
    pub fn before_entry(
        &mut self,
        vcpu: &VcpuFd,
        debug: &mut GuestDebug,
        mem: &GuestMemoryMmap,
        nmi_injected: bool,
        blocks_ok: bool,
    ) {
        let stats = self.account.stats_mut();
        self.steps.before_entry(&mut self.pmu, stats, vcpu, debug, mem, nmi_injected, blocks_ok);
    }

    /// The guest offers a PV page at `gpa` (0: unregister).
    pub fn pv_register(&mut self, vcpu: &VcpuFd, mem: &GuestMemoryMmap, gpa: u64) {
        self.pv.register(&mut self.pmu, vcpu, mem, gpa);
    }

    /// The doorbell: apply the page's batch in this one exit, then republish.
    pub fn pv_doorbell(&mut self, vcpu: &VcpuFd, mem: &GuestMemoryMmap) {
        let t = OpStart::now();
        if self.pv.doorbell(&mut self.pmu, vcpu, mem) {
            self.account.handled(t);
        }
    }

    /// Publish counter values for exitless reads (only with a v2 page).
    pub fn pv_publish(&mut self, vcpu: &VcpuFd, mem: &GuestMemoryMmap) {
        self.pv.publish(&mut self.pmu, vcpu, mem);
    }

    /// The registers the VMM's samples for the agent want KVM to sync out at every exit,
    /// when they become wanted: the loop sets them, then calls `sample_regs_synced`.
    pub(crate) fn sample_regs_wanted(&self) -> Option<pv_state::SampleRegs> {
        self.pv.sample_regs_wanted()
    }

    /// The loop set the registers `sample_regs_wanted` asked for before a KVM_RUN.
    pub fn sample_regs_synced(&mut self) {
        self.pv.sample_regs_synced();
    }

    /// The samples the VMM took for the guest's agent since the last call (PV page
    /// version 5), each with when it was taken; for the agent channel.
    pub fn take_agent_samples(&mut self) -> Vec<(std::time::Instant, crate::profiling::Sample)> {
        self.pv.take_samples()
    }

    /// Whether a PV page with published counters is registered.
    pub fn pv_publishing(&self) -> bool {
        self.pv.publishing()
    }

    /// Whether the exact backend may run blocks (`--exact-engine blocks` where it can).
    pub fn runs_blocks(&self) -> bool {
        self.steps.runs_blocks()
    }

    /// Where the block engine planted a port write at the running block's end, if it did.
    pub fn planted_end(&self) -> Option<u64> {
        self.steps.planted_end()
    }

    /// Whether a port write is planted on a watched handler's entry at `at` (`planted`).
    pub fn watch_planted(&self, at: u64) -> bool {
        self.steps.watch_planted(at)
    }

    /// The port write planted at `at` on a watched handler's entry stopped the guest: the
    /// vector it took; the bytes are put back.
    pub fn watch_trapped(&mut self, mem: &GuestMemoryMmap, at: u64) -> Option<u8> {
        self.steps.watch_trapped(mem, at)
    }

    /// Whether the exact backend is single-stepping the guest.
    pub fn is_stepping(&self) -> bool {
        self.steps.is_on()
    }

    /// A step ended at `pc` as `exit` says: retire what ran (see `backends::retire`).
    pub fn on_step(
        &mut self,
        vcpu: &VcpuFd,
        mem: &GuestMemoryMmap,
        pc: u64,
        exit: crate::backends::exact::stepping::StepExit,
    ) {
        self.steps.stepped(&mut self.pmu, self.account.stats_mut(), vcpu, mem, pc, exit);
    }

    /// An exit for a guest write (OUT, MMIO store): while stepping, it may have retired.
    pub fn on_write_exit(&mut self, vcpu: &VcpuFd, mem: &GuestMemoryMmap) {
        self.steps.write_exit(&mut self.pmu, self.account.stats_mut(), vcpu, mem);
    }

    /// The vCPU stops: fold running counters so the final counts are complete. Returns the
    /// counters the guest left counting, as the model holds them (what a run cut short
    /// before the guest's agent reported has of its counts), and what the VMM counted as
    /// retired itself (`VpmuOptions::count_retired`).
    pub fn finish(
        &mut self,
    ) -> (Vec<crate::profiling::counts::CounterView>, Option<crate::profiling::counts::Retired>) {
        let counters = crate::profiling::counts::counters(&mut self.pmu);
        self.pmu.sched_out();
        (counters, self.steps.retired())
    }
}
