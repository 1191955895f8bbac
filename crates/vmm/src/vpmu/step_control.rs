//! Single-stepping for the exact backend (and `stat -a --backend exact`): when to step,
//! event windows for owed NMIs and PMIs, and where each retired instruction is counted.

use crate::backends::exact::decode::InsnClass;
use crate::backends::exact::retire::{Counting, Retirement};
use crate::backends::exact::stepping::{CodePages, Owed, StepExit, Stepper, VcpuStep};
use crate::backends::{Backend, VmmSource};
use crate::profiling::counts::Retired;
use crate::vpmu::rdpmc_traps::RdpmcTraps;
use crate::vpmu::stats::VpmuStats;
use crate::vstate::guest_debug::GuestDebug;
use crate::vstate::linear::PageWalk;
use crate::vstate::softint::FlagHome;
use kvm_ioctls::VcpuFd;
use pmu::{MsrAccess, Pmu, RdpmcIdx};
use std::collections::HashMap;
use std::sync::Arc;
use vm_memory::GuestMemoryMmap;

/// The stepping of one vCPU and where what it retires goes.
#[derive(Debug)]
pub(super) struct StepControl {
    stepper: Stepper,
    /// The PMU request raised a PMI (NMI or vector): stepping opens an event window for it.
    pmi_raised: Owed,
    /// The instruction the next single-step retires.
    retirement: Retirement,
    /// A guest WRMSR exit was handled; the WRMSR completes at the next entry.
    wrmsr_completing: bool,
    /// An NMI was injected while stepping and KVM may still hold it.
    nmi_waiting: bool,
    /// Guest-virtual page -> guest-physical page of code seen while stepping.
    code_pages: CodePages,
    /// The VMM's INT3s on the guest kernel's RDPMCs: stepping sees the RDPMC under them.
    rdpmc_traps: Arc<RdpmcTraps>,
    /// Native mode: this vCPU's VIF page, dropped while single-stepping (a native vCPU
    /// would take the #DB itself) and registered again afterwards.
    vif: Option<u64>,
    /// Exact mode with tracing: retired instructions per RIP (the reference profile).
    rip_profile: Option<HashMap<u64, u64>>,
    /// `stat -a` on the exact backend: the VMM steps the whole run and counts every
    /// retired instruction and branch itself.
    retired: Option<Retired>,
}

impl StepControl {
    pub(super) fn new(long_mode: bool, vif: Option<u64>, trace_rips: bool, count_retired: bool) -> Self {
        StepControl {
            stepper: Stepper::default(),
            pmi_raised: Owed::Nothing,
            retirement: Retirement::new(long_mode),
            wrmsr_completing: false,
            nmi_waiting: false,
            code_pages: CodePages::default(),
            rdpmc_traps: Arc::default(),
            vif,
            rip_profile: trace_rips.then(HashMap::new),
            retired: count_retired.then(Retired::default),
        }
    }

    pub(super) fn set_rdpmc_traps(&mut self, traps: Arc<RdpmcTraps>) {
        self.rdpmc_traps = traps;
    }

    pub(super) fn is_on(&self) -> bool {
        self.stepper.is_on()
    }

    pub(super) fn retired(&self) -> Option<Retired> {
        self.retired
    }

    pub(super) fn take_rip_profile(&mut self) -> Option<HashMap<u64, u64>> {
        self.rip_profile.take()
    }

    /// Step while a counter counts, and while one is programmed so that RDPMC (which KVM
    /// #GPs) can be emulated; always when the VMM counts retired instructions itself.
    pub(super) fn follow(&mut self, pmu: &Pmu<Backend>) {
        self.stepper.want(self.retired.is_some() || pmu.backend().wants_steps(pmu.any_programmed()));
    }

    /// The PMU request raised a PMI owed as `owed`.
    pub(super) fn pmi_raised(&mut self, owed: Owed) {
        self.pmi_raised = owed;
    }

    /// A guest WRMSR exit, before its write: while stepping the WRMSR retires now, before
    /// its write takes effect (docs/DESIGN.md). Returns the RIP it retired at, if it did,
    /// for `wrmsr_faulted`.
    pub(super) fn wrmsr_exit(&mut self, pmu: &mut Pmu<Backend>, stats: &mut VpmuStats) -> Option<u64> {
        let rip = if self.stepper.is_on() { self.retirement.retired_early() } else { None };
        if let Some(rip) = rip {
            self.counting(pmu, stats).retire_early(rip);
        }
        self.wrmsr_completing = true;
        rip
    }

    /// The write of a WRMSR that `wrmsr_exit` retired at `retired` faulted: it did not retire.
    pub(super) fn wrmsr_faulted(&mut self, pmu: &mut Pmu<Backend>, stats: &mut VpmuStats, retired: Option<u64>) {
        if let Some(rip) = retired {
            self.counting(pmu, stats).faulted(rip);
        }
    }

    /// Guest RDPMC with ECX = `ecx` (one the VMM trapped).
    pub(super) fn rdpmc(&mut self, pmu: &mut Pmu<Backend>, stats: &mut VpmuStats, ecx: u32) -> MsrAccess<u64> {
        self.counting(pmu, stats).rdpmc(ecx).into()
    }

    /// Last step before an entry: single-step as the counters need, with an event window
    /// when an NMI was injected or a PMI raised for this entry (see `stepping`).
    pub(super) fn before_entry(
        &mut self,
        pmu: &mut Pmu<Backend>,
        stats: &mut VpmuStats,
        vcpu: &VcpuFd,
        debug: &mut GuestDebug,
        mem: &GuestMemoryMmap,
        nmi_injected: bool,
    ) {
        let nmi = if nmi_injected { Owed::Nmi } else { Owed::Nothing };
        let mut owed = std::mem::take(&mut self.pmi_raised).max(nmi);
        // An NMI that KVM holds (NMIs blocked in another NMI's handler) would wait behind
        // BLOCKIRQ until stepping ends: windows open until KVM has delivered it.
        if owed == Owed::Nothing && self.nmi_waiting {
            self.nmi_waiting = crate::backends::exact::stepping::nmi_pending(vcpu);
            if self.nmi_waiting {
                owed = Owed::Nmi;
            }
        }
        self.nmi_waiting |= owed == Owed::Nmi && self.stepper.is_on();
        let wrmsr_completing = std::mem::take(&mut self.wrmsr_completing);
        if self.stepper.apply(vcpu, debug, mem, self.vif, owed) {
            self.code_pages.clear();
            if let Ok(regs) = vcpu.get_regs() {
                let (retirement, mut cpu, mut counting) = self.parts(pmu, stats, vcpu, mem);
                retirement.begin(&mut cpu, &mut counting, regs.rip, wrmsr_completing);
            }
        }
        // In user mode one instruction per entry, under an interrupt shadow (kvm_pvm runs
        // user code natively, where TF takes no trap); but an event owed now enters without
        // it, and its delivery leaves user mode before any user instruction runs natively.
        let user_native = crate::host::caps().emulates_kernel() && self.retirement.in_user_mode();
        if self.stepper.is_on() && user_native && owed == Owed::Nothing {
            crate::host::pvm::user_return::one_instruction(vcpu);
        }
        // Last: the instructions the VMM ran above moved RIP after the step was armed, and
        // the guest may have moved a handler since the last step (a gate it rewrote).
        if self.stepper.is_on() {
            let sregs = &vcpu.sync_regs().sregs;
            let watch =
                crate::backends::exact::handler_watch::entries(&mut PageWalk::of(mem, sregs.cr3, sregs.cr4), sregs);
            let _ = debug.before_step(vcpu, self.retirement.rip(), watch);
        }
    }

    /// A single-step exit at `pc`: retire what ran (see `backends::retire`). Where the CPU
    /// delivered an exception instead, stopping at its handler's entry (`handler_watch`),
    /// the faulting instruction retired nothing, the frame loses the VMM's TF, and the
    /// handler is stepped.
    pub(super) fn stepped(
        &mut self,
        pmu: &mut Pmu<Backend>,
        stats: &mut VpmuStats,
        vcpu: &VcpuFd,
        mem: &GuestMemoryMmap,
        pc: u64,
        exit: StepExit,
    ) {
        if !self.stepper.is_on() {
            return;
        }
        if let StepExit::Delivered { vector } = exit {
            if let Ok(regs) = vcpu.get_regs() {
                let sregs = &vcpu.sync_regs().sregs;
                let mut stack = PageWalk::of(mem, sregs.cr3, sregs.cr4);
                let _ = crate::backends::exact::handler_watch::clear_saved_tf(&mut stack, regs.rsp, vector);
            }
            let (retirement, mut cpu, mut counting) = self.parts(pmu, stats, vcpu, mem);
            retirement.delivered(&mut cpu, &mut counting, pc);
            return;
        }
        self.stepper.stepped();
        let (retirement, mut cpu, mut counting) = self.parts(pmu, stats, vcpu, mem);
        retirement.stepped(&mut cpu, &mut counting, pc);
    }

    /// An exit for a guest write (OUT, MMIO store): while stepping, it may have retired.
    pub(super) fn write_exit(
        &mut self,
        pmu: &mut Pmu<Backend>,
        stats: &mut VpmuStats,
        vcpu: &VcpuFd,
        mem: &GuestMemoryMmap,
    ) {
        if self.stepper.is_on() {
            let (retirement, mut cpu, mut counting) = self.parts(pmu, stats, vcpu, mem);
            retirement.write_exit(&mut cpu, &mut counting);
        }
    }

    /// The retirement rules, the vCPU as they see it, and where retired instructions go.
    fn parts<'a>(
        &'a mut self,
        pmu: &'a mut Pmu<Backend>,
        stats: &'a mut VpmuStats,
        vcpu: &'a VcpuFd,
        mem: &'a GuestMemoryMmap,
    ) -> (&'a mut Retirement, VcpuStep<'a>, StepCounting<'a>) {
        let home = match self.vif {
            Some(gpa) => FlagHome::Vif(gpa),
            None => FlagHome::Rflags,
        };
        let cpu = VcpuStep {
            vcpu,
            mem,
            code_pages: &mut self.code_pages,
            rdpmc_traps: &self.rdpmc_traps,
            home,
            rdpmc_regs: None,
        };
        let counting = StepCounting { pmu, stats, rip_profile: &mut self.rip_profile, retired: &mut self.retired };
        (&mut self.retirement, cpu, counting)
    }

    fn counting<'a>(&'a mut self, pmu: &'a mut Pmu<Backend>, stats: &'a mut VpmuStats) -> StepCounting<'a> {
        StepCounting { pmu, stats, rip_profile: &mut self.rip_profile, retired: &mut self.retired }
    }
}

/// Retired instructions into the exact backend, the statistics and the reference profile.
struct StepCounting<'a> {
    pmu: &'a mut Pmu<Backend>,
    stats: &'a mut VpmuStats,
    rip_profile: &'a mut Option<HashMap<u64, u64>>,
    retired: &'a mut Option<Retired>,
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
