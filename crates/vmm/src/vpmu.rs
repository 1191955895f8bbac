//! The vPMU of one vCPU, as the run loop sees it: MSR exits go to the PMU model, backend
//! overflows become PMIs through LVTPC, and in exact mode every single-step retires one
//! instruction into the exact backend. One straight path:
//! MSR exit -> pmu model -> backend -> overflow -> PMI into the guest.

use crate::backends::decode::InsnClass;
use crate::backends::retire::{Counting, Retirement};
pub use crate::backends::Backend;
use crate::backends::VmmSource;
use crate::kick;
use crate::pmi::{self, PmiOutcome};
use crate::pv;
use crate::rdpmc_traps::RdpmcTraps;
use crate::stepping::Owed;
pub use crate::vpmu_stats::{OpStart, OpTime, PmuOp, VpmuStats};
use kvm_ioctls::{VcpuFd, VmFd};
use pmu::{ArchEvent, Initiator, MsrIndex, PmcIdx, Pmu, PmuStats, RdpmcIdx};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use vm_memory::GuestMemoryMmap;

/// CPU time of the calling thread.
pub(crate) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Set to N to drop every Nth overflow notification (tests of lost-notification counting).
pub const DROP_ENV: &str = "PERFVM_DROP_NOTIFICATIONS";

/// A vCPU's PMU plus the run-loop state around it.
#[derive(Debug)]
pub struct VcpuPmu {
    /// The PMU model over this vCPU's backend.
    pub pmu: Pmu<Backend>,
    /// What the VMM side did and what it cost.
    pub stats: VpmuStats,
    stepper: crate::stepping::Stepper,
    /// `service` raised a PMI (NMI or vector): stepping opens an event window for it.
    pmi_raised: crate::stepping::Owed,
    /// The instruction the next single-step retires.
    retirement: Retirement,
    /// A guest WRMSR exit was handled; the WRMSR completes at the next entry.
    wrmsr_completing: bool,
    /// An NMI was injected while stepping and KVM may still hold it.
    nmi_waiting: bool,
    /// When the PMI now owed as an NMI began to be handled (accounted at its KVM_NMI).
    pmi_started: Option<OpStart>,
    /// Guest-virtual page -> guest-physical page of code seen while stepping.
    code_pages: crate::stepping::CodePages,
    /// The VMM's INT3s on the guest kernel's RDPMCs: stepping sees the RDPMC under them.
    rdpmc_traps: Arc<RdpmcTraps>,
    /// Exact mode with tracing: retired instructions per RIP (the reference profile).
    pub rip_profile: Option<HashMap<u64, u64>>,
    /// `stat -a` on the exact backend: the VMM steps the whole run and counts every
    /// retired instruction and branch itself.
    pub retired: Option<crate::vmm_counts::Retired>,
    /// The guest's paravirtual PMU page, once accepted.
    pv: Option<pv::PvPage>,
    /// What became of the guest's PV page.
    pub pv_stats: pv::PvStats,
    cpu_share: pv::CpuShare,
    created: Instant,
    /// Whether the VMM accepts PV pages (`--pv on`).
    pub pv_offered: bool,
    /// The guest's PV page asks for PMIs without the LVTPC mask (one KVM_NMI each).
    pmi_no_mask: bool,
    /// PMI throttling (perf backend).
    pub throttle: Option<crate::throttle::Throttle>,
    /// The last `service` took an overflow notification (its cost is measured by the loop).
    notified: bool,
    /// A PMI was raised and the guest has not enabled counters since: its next enable is
    /// its PMI handler's restart (`PmuOp::GlobalCtrlEnableAfterPmi`).
    pmi_since_enable: bool,
    /// The guest's TSC, for PV publishes.
    guest_tsc: crate::guest_tsc::GuestTsc,
    /// Drop every Nth notification (`PERFVM_DROP_NOTIFICATIONS`, tests of loss detection).
    drop_every: Option<u64>,
    signals: u64,
    /// Native mode: this vCPU's VIF page, dropped while single-stepping (a native vCPU
    /// would take the #DB itself) and registered again afterwards.
    pub vif: Option<u64>,
}

impl VcpuPmu {
    /// Wrap `pmu` for a guest entered in long mode (`long_mode`) or 32-bit mode; no PV page,
    /// throttle, VIF or profile until the builder sets them.
    pub fn new(pmu: Pmu<Backend>, long_mode: bool) -> Self {
        VcpuPmu {
            pmu,
            stats: VpmuStats::default(),
            stepper: Default::default(),
            pmi_raised: Default::default(),
            retirement: Retirement::new(long_mode),
            wrmsr_completing: false,
            nmi_waiting: false,
            pmi_started: None,
            code_pages: Default::default(),
            rdpmc_traps: Default::default(),
            rip_profile: None,
            retired: None,
            pv: None,
            pv_stats: pv::PvStats::default(),
            cpu_share: pv::CpuShare::default(),
            created: Instant::now(),
            pv_offered: true,
            pmi_no_mask: false,
            throttle: None,
            notified: false,
            pmi_since_enable: false,
            guest_tsc: Default::default(),
            drop_every: std::env::var(DROP_ENV).ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0),
            signals: 0,
            vif: None,
        }
    }

    /// KVM_RUN returned: the guest ran, and counts moved.
    pub fn guest_ran(&mut self) {
        self.pmu.backend_mut().guest_ran();
    }

    /// The guest kernel's RDPMCs the VMM traps (`rdpmc_traps`).
    pub fn set_rdpmc_traps(&mut self, traps: Arc<RdpmcTraps>) {
        self.rdpmc_traps = traps;
    }

    /// Guest RDPMC with ECX = `ecx` (one the VMM trapped): the value, or None for #GP.
    pub fn rdpmc(&mut self, ecx: u32) -> Option<u64> {
        self.counting().rdpmc(ecx)
    }

    /// Guest RDMSR of a PMU MSR: the value, or None for #GP.
    pub fn rdmsr(&mut self, index: u32) -> Option<u64> {
        let t = OpStart::now();
        let r = self.pmu.get_msr(MsrIndex(index), Initiator::Guest).ok();
        self.account(PmuOp::of_read(self.pmu.caps().decode_msr(MsrIndex(index))), t);
        r
    }

    /// Guest WRMSR of a PMU MSR: false for #GP.
    pub fn wrmsr(&mut self, index: u32, value: u64) -> bool {
        let t = OpStart::now();
        // Exact backend: the WRMSR retires before its write takes effect (docs/DESIGN.md).
        let rip = if self.stepper.is_on() { self.retirement.retired_early() } else { None };
        if let Some(rip) = rip {
            self.counting().retire_early(rip);
        }
        self.wrmsr_completing = true;
        let ok = self.pmu.set_msr(MsrIndex(index), value, Initiator::Guest).is_ok();
        if let (Some(rip), false) = (rip, ok) {
            self.counting().faulted(rip);
        }
        let mut op = PmuOp::of_write(self.pmu.caps().decode_msr(MsrIndex(index)), value);
        if op == PmuOp::GlobalCtrlEnable && std::mem::take(&mut self.pmi_since_enable) {
            op = PmuOp::GlobalCtrlEnableAfterPmi;
        }
        self.account(op, t);
        ok
    }

    /// The loop issued a `KVM_NMI` that began at `started`, for the PMI `service` raised or
    /// for another NMI.
    pub fn nmi_injected(&mut self, started: OpStart, for_pmi: bool) {
        self.stats.ops.entry(PmuOp::KvmNmi).or_default().add(started);
        if let Some(t) = self.pmi_started.take().filter(|_| for_pmi) {
            self.account(PmuOp::PmiDelivery, t);
        }
    }

    fn account(&mut self, op: PmuOp, started: OpStart) {
        if op != PmuOp::PmiDelivery {
            self.stats.msr_exits += 1;
        }
        self.stats.handle_ns += started.at.elapsed().as_nanos() as u64;
        self.stats.ops.entry(op).or_default().add(started);
    }

    /// The PMU request, before an entry: turn pending overflows into a PMI, follow the exact
    /// backend's stepping needs, and let the reuse policy release idle events. Free while
    /// idle. Returns true when the PMI is owed as an NMI (the caller's NMI step injects it).
    pub fn service(&mut self, vm: &VmFd, vcpu: &VcpuFd, mem: &GuestMemoryMmap, run_ns: u64) -> bool {
        let mut nmi = false;
        let signaled = kick::take_pmu_signal() && !self.drop_injected();
        self.notified = signaled;
        let exact_overflow = self.pmu.backend_mut().take_overflow();
        if signaled || exact_overflow || self.pmu.pmi_pending() || self.pmu.pebs_pending() {
            let t = OpStart::now();
            if signaled {
                self.pmu.backend_mut().notification_taken();
            }
            let mut pmi = self.pmu.collect_overflows();
            // PEBS assists found by the fold: records into the guest's DS buffer (pebs.rs).
            let pebs = self.pmu.take_pebs_overflows();
            if pebs != 0 {
                pmi |= crate::pebs::run_assists(&mut self.pmu, vcpu, mem, pebs);
            }
            if signaled {
                self.pmu.backend_mut().after_notification();
            }
            self.report_reloads(mem);
            if pmi {
                nmi = self.raise_pmi(vm, vcpu);
                match nmi {
                    true => self.pmi_started = Some(t), // ends with its KVM_NMI (`nmi_injected`)
                    false => self.account(PmuOp::PmiDelivery, t),
                }
            } else {
                self.stats.handle_ns += t.at.elapsed().as_nanos() as u64;
            }
        }
        // A guest RDMSR may also have found (and reloaded) a wrap.
        self.report_reloads(mem);
        // Stepping while a counter counts, and while one is programmed so that RDPMC (which
        // KVM #GPs) can be emulated.
        self.stepper.state.wanted = self.retired.is_some() || self.pmu.backend().wants_steps(self.pmu.any_programmed());
        if self.pmu.is_active() {
            self.pmu.tick(run_ns);
        }
        nmi
    }

    /// Whether this notification is one `PERFVM_DROP_NOTIFICATIONS` drops.
    fn drop_injected(&mut self) -> bool {
        let Some(every) = self.drop_every else { return false };
        self.signals += 1;
        self.signals.is_multiple_of(every)
    }

    /// The loop measured what the last notification cost the VMM (thread CPU time from its
    /// exit to the next entry): feed the throttle, which may raise the shortest period.
    pub fn note_notification_cost(&mut self, ns: u64) {
        if !std::mem::take(&mut self.notified) {
            return;
        }
        if let Some(throttle) = self.throttle.as_mut() {
            self.pmu.backend_mut().set_period_floor(throttle.note(ns));
        }
    }

    /// Tell the guest's PV page which counters the model reloaded.
    fn report_reloads(&mut self, mem: &GuestMemoryMmap) {
        let reloaded = self.pmu.take_auto_reloaded();
        if let (true, Some(page)) = (reloaded != 0, self.pv) {
            self.pv_stats.auto_reloads += u64::from(reloaded.count_ones());
            crate::pv_sampling::publish_reloads(mem, page, &self.pmu, reloaded);
        }
    }

    /// Raise a PMI through LVTPC; true if it is owed as an NMI. A PV guest that needs no
    /// LVTPC mask gets its NMI without the two LAPIC ioctls that masking takes.
    fn raise_pmi(&mut self, vm: &VmFd, vcpu: &VcpuFd) -> bool {
        if self.pmi_no_mask {
            self.stats.pmis_delivered += 1;
            self.pmi_since_enable = true;
            self.pv_stats.unmasked_pmis += 1;
            self.pmi_raised = Owed::Nmi;
            return true;
        }
        // Intel's LAPIC masks LVTPC on a PMI; AMD's does not (KVM masks for Intel only).
        let mask = self.pmu.caps().vendor() == pmu::Vendor::Intel;
        match pmi::raise(vm, vcpu, mask) {
            Ok(PmiOutcome::Masked) => {
                self.stats.pmis_masked += 1;
                false
            }
            // The LAPIC could not be read or written: the PMI is lost, not masked.
            Err(_) => {
                self.stats.pmi_ioctl_failures += 1;
                false
            }
            Ok(outcome) => {
                self.stats.pmis_delivered += 1;
                self.pmi_since_enable = true;
                let nmi = outcome == PmiOutcome::Nmi;
                self.pmi_raised = if nmi { Owed::Nmi } else { Owed::Interrupt };
                nmi
            }
        }
    }

    /// Last step before an entry: single-step as the exact backend needs, with an event window
    /// when an NMI was injected or a PMI raised for this entry (see `stepping`).
    pub fn before_entry(&mut self, vcpu: &VcpuFd, mem: &GuestMemoryMmap, nmi_injected: bool) {
        let nmi = if nmi_injected { Owed::Nmi } else { Owed::Nothing };
        let mut owed = std::mem::take(&mut self.pmi_raised).max(nmi);
        // An NMI that KVM holds (NMIs blocked in another NMI's handler) would wait behind
        // BLOCKIRQ until stepping ends: windows open until KVM has delivered it.
        if owed == Owed::Nothing && self.nmi_waiting {
            self.nmi_waiting = crate::stepping::nmi_pending(vcpu);
            if self.nmi_waiting {
                owed = Owed::Nmi;
            }
        }
        self.nmi_waiting |= owed == Owed::Nmi && self.stepper.is_on();
        let wrmsr_completing = std::mem::take(&mut self.wrmsr_completing);
        if self.stepper.apply(vcpu, mem, self.vif, owed) {
            self.code_pages.clear();
            if let Ok(regs) = vcpu.get_regs() {
                let (retirement, mut cpu, mut counting) = self.step_parts(vcpu, mem);
                retirement.begin(&mut cpu, &mut counting, regs.rip, wrmsr_completing);
            }
        }
    }

    /// The guest offers a PV page at `gpa` (0: unregister).
    pub fn pv_register(&mut self, vcpu: &VcpuFd, mem: &GuestMemoryMmap, gpa: u64) {
        self.forget_sampling();
        if gpa == 0 {
            self.pv = None;
            return;
        }
        match pv::register(mem, gpa, self.pv_offered, true) {
            Ok(page) => {
                self.pv_stats.registrations += 1;
                self.pv = Some(page);
                self.pmi_no_mask = crate::pv_sampling::configure(mem, page, &mut self.pmu);
                self.pv_publish(vcpu, mem);
            }
            Err(_) => {
                self.pv_stats.refusals += 1;
                self.pv = None;
            }
        }
    }

    /// A page goes away: its counters return to the SDM rules.
    fn forget_sampling(&mut self) {
        self.pmi_no_mask = false;
        for bit in 0..pmu::MAX_GP_COUNTERS {
            self.pmu.set_auto_reload(PmcIdx::gp(bit).expect("in range"), None);
        }
        for j in 0..pmu::MAX_FIXED_COUNTERS {
            self.pmu.set_auto_reload(PmcIdx::fixed(j).expect("in range"), None);
        }
    }

    /// The doorbell: apply the page's batch in this one exit, then republish.
    pub fn pv_doorbell(&mut self, vcpu: &VcpuFd, mem: &GuestMemoryMmap) {
        let Some(page) = self.pv else { return };
        let t = Instant::now();
        self.pv_stats.doorbells += 1;
        self.pmi_no_mask = crate::pv_sampling::configure(mem, page, &mut self.pmu);
        self.pv_stats.batched_writes += u64::from(pv::apply_batch(mem, page, &mut self.pmu));
        self.pv_publish(vcpu, mem);
        self.stats.handle_ns += t.elapsed().as_nanos() as u64;
    }

    /// Publish counter values for exitless reads (only with a v2 page).
    pub fn pv_publish(&mut self, vcpu: &VcpuFd, mem: &GuestMemoryMmap) {
        let Some(page) = self.pv.filter(|p| p.version >= 2) else { return };
        let backend = self.pmu.backend();
        let tsc_rate = pmu::EventSet::from_fn(|e| backend.counts_at_tsc_rate(e));
        let rate = |e: ArchEvent| match tsc_rate.contains(e) {
            true => pv::Extrapolation::TscRate,
            false => pv::Extrapolation::NeedsExit,
        };
        let (created, guest_tsc) = (self.created, &mut self.guest_tsc);
        let mut clocks = || (guest_tsc.read(vcpu), thread_cpu_ns(), created.elapsed().as_nanos() as u64);
        pv::publish(mem, page, &mut self.pmu, rate, &mut self.cpu_share, &mut clocks);
        self.pv_stats.publishes += 1;
    }

    /// Whether a PV page with published counters is registered.
    pub fn pv_publishing(&self) -> bool {
        self.pv.is_some_and(|p| p.version >= 2)
    }

    /// Whether the exact backend is single-stepping the guest.
    pub fn is_stepping(&self) -> bool {
        self.stepper.is_on()
    }

    /// A single-step completed at `pc`: retire what ran (see `backends::retire`).
    pub fn on_step(&mut self, vcpu: &VcpuFd, mem: &GuestMemoryMmap, pc: u64) {
        if !self.stepper.is_on() {
            return;
        }
        self.stepper.state.stepped();
        let (retirement, mut cpu, mut counting) = self.step_parts(vcpu, mem);
        retirement.stepped(&mut cpu, &mut counting, pc);
    }

    /// An exit for a guest write (OUT, MMIO store): while stepping, it may have retired.
    pub fn on_write_exit(&mut self, vcpu: &VcpuFd, mem: &GuestMemoryMmap) {
        if self.stepper.is_on() {
            let (retirement, mut cpu, mut counting) = self.step_parts(vcpu, mem);
            retirement.write_exit(&mut cpu, &mut counting);
        }
    }

    /// The retirement rules, the vCPU as they see it, and where retired instructions go.
    fn step_parts<'a>(
        &'a mut self,
        vcpu: &'a VcpuFd,
        mem: &'a GuestMemoryMmap,
    ) -> (&'a mut Retirement, crate::stepping::VcpuStep<'a>, StepCounting<'a>) {
        let home = match self.vif {
            Some(gpa) => crate::softint::FlagHome::Vif(gpa),
            None => crate::softint::FlagHome::Rflags,
        };
        let cpu = crate::stepping::VcpuStep {
            vcpu,
            mem,
            code_pages: &mut self.code_pages,
            rdpmc_traps: &self.rdpmc_traps,
            home,
        };
        let counting = StepCounting {
            pmu: &mut self.pmu,
            stats: &mut self.stats,
            rip_profile: &mut self.rip_profile,
            retired: &mut self.retired,
        };
        (&mut self.retirement, cpu, counting)
    }

    fn counting(&mut self) -> StepCounting<'_> {
        StepCounting {
            pmu: &mut self.pmu,
            stats: &mut self.stats,
            rip_profile: &mut self.rip_profile,
            retired: &mut self.retired,
        }
    }

    /// The vCPU stops: fold running counters so the final counts are complete. Returns the
    /// counters the guest left counting, as the model holds them (what a run cut short
    /// before the guest's agent reported has of its counts).
    pub fn finish(&mut self) -> Vec<crate::vmm_counts::CounterView> {
        let counters = crate::vmm_counts::counters(&mut self.pmu);
        self.pmu.sched_out();
        counters
    }

    /// The PMU model's statistics.
    pub fn model_stats(&self) -> PmuStats {
        self.pmu.stats()
    }
}

/// Retired instructions into the exact backend, the statistics and the reference profile.
struct StepCounting<'a> {
    pmu: &'a mut Pmu<Backend>,
    stats: &'a mut VpmuStats,
    rip_profile: &'a mut Option<HashMap<u64, u64>>,
    retired: &'a mut Option<crate::vmm_counts::Retired>,
}

impl StepCounting<'_> {
    /// Count `rip` in the reference profile (what retired while the counters counted) by `n`.
    fn profile(&mut self, rip: u64, n: i64) -> &mut Backend {
        let backend = self.pmu.backend_mut();
        if let (true, Some(profile)) = (backend.counts_by_steps(), self.rip_profile.as_mut()) {
            let c = profile.entry(rip).or_default();
            *c = c.saturating_add_signed(n);
        }
        backend
    }

    /// The WRMSR at `rip` retires as its exit is handled, before its write takes effect.
    fn retire_early(&mut self, rip: u64) {
        self.stats.steps += 1;
        if let Some(r) = self.retired.as_mut() {
            r.retire_early();
        }
        self.profile(rip, 1).retire_early();
    }

    /// The WRMSR retired early at `rip` faulted: it did not retire.
    fn faulted(&mut self, rip: u64) {
        self.stats.steps -= 1;
        if let Some(r) = self.retired.as_mut() {
            r.faulted();
        }
        self.profile(rip, -1).faulted();
    }
}

impl Counting for StepCounting<'_> {
    fn retire(&mut self, rip: u64, class: InsnClass, user: bool) {
        self.stats.steps += 1;
        if let Some(r) = self.retired.as_mut() {
            r.retire(class, user);
        }
        self.profile(rip, 1).retire(class, user);
    }

    fn rdpmc(&mut self, ecx: u32) -> Option<u64> {
        let value = self.pmu.rdpmc(RdpmcIdx(ecx)).ok()?;
        self.stats.rdpmc_emulated += 1;
        Some(value)
    }
}
