//! Single-stepping for the exact backend (and `stat -a --backend exact`): when to step,
//! event windows for owed NMIs and PMIs, and where each retired instruction is counted.
//! With the block engine (`backends::exact::blocks`) an entry that would be a step with
//! interrupts blocked runs a block instead, where one can be planned.

use crate::backends::exact::blocks::{self, Block, EndBy, Regs};
use crate::backends::exact::decode::InsnClass;
use crate::backends::exact::retire::{Counting, Retirement};
use crate::backends::exact::stepping::{CodePages, Debug, Owed, StepExit, Stepper, VcpuStep};
use crate::backends::{Backend, VmmSource};
use crate::profiling::counts::Retired;
use crate::vpmu::planted::{Planted, WatchTraps};
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
    /// The block engine may run here (`--exact-engine blocks`, one vCPU, long mode, a host
    /// whose breakpoints stop the guest).
    block_engine: bool,
    /// The block the guest is running (until the exit at its end or at a handler).
    block: Option<Block>,
    /// The guest's code as the block engine decoded it.
    decoded: blocks::DecodeCache,
    /// Stops where a block was run ahead in vain (a tight loop that outran the limit), and
    /// how many more stops there step without trying again.
    in_vain: ahash::AHashMap<u64, u32>,
    /// How the guest stops at a block's end on this host.
    end_by: EndBy,
    /// The port write planted at the running block's end (`EndBy::Trap`).
    planted: Option<Planted>,
    /// ... and at the watched handlers' entries while stepping (`EndBy::Trap`).
    watch_traps: WatchTraps,
    /// Native mode: the VIF is registered while blocks run (`native_blocks`).
    vif_in_blocks: bool,
}

const EFER_LMA: u64 = 1 << 10;
/// A run ahead this long that found no block end marks its stop in vain (`in_vain`)...
const IN_VAIN_RUN: usize = 64;
/// ... for this many stops there: a loop that outran the limit once is stepped, and run
/// ahead again now and then, when its exit may have come within reach.
const IN_VAIN_SKIP: u32 = 256;
const RFLAGS_TF: u64 = 1 << 8;

/// Clear RFLAGS.TF before a block: an event window's handler returned through a frame
/// saved while stepped, and its IRET restored the step's TF, which the guest would take as
/// a #DB of its own once nothing single-steps it (stepping consumes it). A guest's own TF
/// is lost with it, as on hardware hosts (docs/DESIGN.md). False if it could not be done.
fn clear_trap_flag(vcpu: &VcpuFd) -> bool {
    let Ok(mut regs) = vcpu.get_regs() else { return false };
    regs.rflags &= !RFLAGS_TF;
    vcpu.set_regs(&regs).is_ok() && vcpu.get_regs().is_ok_and(|r| r.rflags & RFLAGS_TF == 0)
}

impl StepControl {
    pub(super) fn new(long_mode: bool, vif: Option<u64>, trace_rips: bool, count_retired: bool, blocks: bool) -> Self {
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
            block_engine: blocks && long_mode,
            block: None,
            decoded: blocks::DecodeCache::default(),
            in_vain: ahash::AHashMap::new(),
            end_by: EndBy::for_vcpu(vif.is_some()),
            planted: None,
            watch_traps: WatchTraps::default(),
            vif_in_blocks: false,
        }
    }

    pub(super) fn set_rdpmc_traps(&mut self, traps: Arc<RdpmcTraps>) {
        self.rdpmc_traps = traps;
    }

    pub(super) fn is_on(&self) -> bool {
        self.stepper.is_on()
    }

    pub(super) fn runs_blocks(&self) -> bool {
        self.block_engine
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
    /// when an NMI was injected or a PMI raised for this entry (see `stepping`); or run a
    /// block where the engine may (`blocks_ok`: no NMI falls due after so many instructions).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn before_entry(
        &mut self,
        pmu: &mut Pmu<Backend>,
        stats: &mut VpmuStats,
        vcpu: &VcpuFd,
        debug: &mut GuestDebug,
        mem: &GuestMemoryMmap,
        nmi_injected: bool,
        blocks_ok: bool,
    ) {
        if self.block.is_some() {
            // An exit from inside a block (a signal, an MMIO access): it runs on to its end
            // with interrupts blocked, and what is owed waits for that (an NMI injected now
            // is held by BLOCKIRQ; the window after the block lets it in).
            self.nmi_waiting |= nmi_injected;
            return;
        }
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
            let sregs = vcpu.sync_regs().sregs;
            let watch =
                crate::backends::exact::handler_watch::entries(&mut PageWalk::of(mem, sregs.cr3, sregs.cr4), &sregs);
            let blocks_ok = blocks_ok && owed == Owed::Nothing && !wrmsr_completing && !debug.has_breakpoint();
            let planned = if blocks_ok { self.plan_block(pmu, vcpu, mem, &sregs, watch) } else { None };
            // Where breakpoints do not stop the guest, port writes on the handlers do.
            let watched = match self.end_by {
                EndBy::Breakpoint => watch,
                EndBy::Trap => {
                    debug.plant_block_ends();
                    let end = planned.map(|(end, _)| end);
                    self.watch_traps.set(mem, &sregs, watch, self.retirement.rip(), end);
                    [None; 4]
                }
            };
            let _ = debug.before_step(vcpu, self.retirement.rip(), watched, planned.map(|(end, _)| end));
            if !debug.runs_block() {
                self.block = None;
            } else if planned.is_some_and(|(_, rflags)| rflags & RFLAGS_TF != 0) && !clear_trap_flag(vcpu) {
                // (Not run unstepped with TF: the guest would take the #DB.)
                self.block = None;
                let _ = debug.before_step(vcpu, self.retirement.rip(), watch, None);
            }
            if self.block.is_none() {
                self.unplant(mem);
            }
            self.native_blocks(vcpu);
        } else {
            self.vif_in_blocks = false; // (the stepper registered it again)
            self.watch_traps.clear(mem);
        }
    }

    /// Native mode: blocks run natively, at host speed (the VIF registered; their ends and
    /// the handlers are planted port writes, as kvm_pvm arms no breakpoint for a native
    /// vCPU), steps emulated (the VIF dropped: a native vCPU would take the #DB itself). The
    /// VIF changes only where a block follows a step or a step a block.
    fn native_blocks(&mut self, vcpu: &VcpuFd) {
        let Some(gpa) = self.vif else { return };
        let native = self.block.is_some();
        if native == self.vif_in_blocks {
            return;
        }
        let set = match native {
            true => crate::host::pvm::native::register_vif_unchecked(vcpu, gpa),
            false => crate::host::pvm::native::drop_vif(vcpu),
        };
        if set.is_ok() {
            self.vif_in_blocks = native;
        } else if !native {
            eprintln!("perfvm: exact backend: the VIF could not be dropped for stepping: {set:?}");
        }
    }

    /// A block from the instruction the next step would retire, where the engine may run
    /// one: at CPL 0 in long mode, interrupts blocked, nothing accounted for at RIP, no
    /// deadline or periodic window closer than two instructions. Returns its end and the
    /// RFLAGS it begins with.
    fn plan_block(
        &mut self,
        pmu: &Pmu<Backend>,
        vcpu: &VcpuFd,
        mem: &GuestMemoryMmap,
        sregs: &kvm_bindings::kvm_sregs,
        watch: [Option<u64>; 4],
    ) -> Option<(u64, u64)> {
        let kernel = sregs.cs.selector & 3 == 0 && sregs.cs.l == 1 && sregs.efer & EFER_LMA != 0;
        let ready = self.stepper.mode() == Debug::Blocked && self.retirement.idle();
        if !self.block_engine || !ready || !kernel || self.retirement.in_user_mode() {
            return None;
        }
        if let Some(left) = self.in_vain.get_mut(&self.retirement.rip()).filter(|left| **left > 0) {
            *left -= 1;
            return None;
        }
        let mut limit = pmu.backend().retirements_to_deadline().map_or(blocks::MAX_BLOCK, |n| n as usize);
        if self.vif.is_none() {
            limit = limit.min(self.stepper.until_window() as usize); // the timer's window
        }
        if limit < 2 {
            return None;
        }
        // The registers KVM synced out at this exit, unless the VMM moved RIP since (an
        // instruction it ran): then they are read.
        let synced = vcpu.sync_regs().regs;
        let regs = match synced.rip == self.retirement.rip() {
            true => synced,
            false => vcpu.get_regs().ok().filter(|r| r.rip == self.retirement.rip())?,
        };
        let avoid: Vec<u64> = watch.iter().flatten().copied().collect();
        let mut cpu = VcpuStep {
            vcpu,
            mem,
            code_pages: &mut self.code_pages,
            rdpmc_traps: &self.rdpmc_traps,
            home: FlagHome::Rflags,
            rdpmc_regs: None,
        };
        let block = match blocks::plan(&mut cpu, &mut self.decoded, &Regs::of(&regs, sregs), limit, &avoid, self.end_by)
        {
            Ok(block) => block,
            Err(miss) => {
                if miss.ran_ahead >= IN_VAIN_RUN {
                    self.in_vain.insert(regs.rip, IN_VAIN_SKIP);
                }
                return None;
            }
        };
        let end = block.end;
        if self.end_by == EndBy::Trap {
            self.planted = Some(Planted::new(mem, sregs, end)?);
        }
        self.block = Some(block);
        Some((end, regs.rflags))
    }

    /// Where the port write planted at the running block's end is (`EndBy::Trap`).
    pub(super) fn planted_end(&self) -> Option<u64> {
        self.planted.map(|p| p.at)
    }

    /// Whether a port write is planted on a watched handler's entry at `at`.
    pub(super) fn watch_planted(&self, at: u64) -> bool {
        self.watch_traps.planted_at(at).is_some()
    }

    /// The port write at `at` was planted on a watched handler's entry: the vector the
    /// guest took (its bytes are back).
    pub(super) fn watch_trapped(&mut self, mem: &GuestMemoryMmap, at: u64) -> Option<u8> {
        self.watch_traps.hit(mem, at)
    }

    /// Put back the bytes under the block end's planted port write.
    fn unplant(&mut self, mem: &GuestMemoryMmap) {
        if let Some(p) = self.planted.take() {
            p.remove(mem);
        }
    }

    /// The block `block` stopped at `pc` as `exit` says: at its end (every instruction
    /// retired), or at a watched handler (those before the faulting one retired). Stepping
    /// goes on from there by the ordinary rules.
    #[allow(clippy::too_many_arguments)]
    fn block_stopped(
        &mut self,
        pmu: &mut Pmu<Backend>,
        stats: &mut VpmuStats,
        vcpu: &VcpuFd,
        mem: &GuestMemoryMmap,
        pc: u64,
        exit: StepExit,
        block: Block,
    ) {
        self.unplant(mem);
        let ran = match exit {
            StepExit::Stepped if pc == block.end => {
                let r = vcpu.sync_regs().regs;
                if !block.as_run_ahead(&Regs::gprs(&r), r.rflags) {
                    if stats.blocks_mispredicted == 0 {
                        eprintln!("perfvm: exact block engine: the guest reached {pc:#x} with registers other than run ahead: counts may be off");
                    }
                    stats.blocks_mispredicted += 1;
                }
                Some(block.insns.len())
            }
            StepExit::Delivered { vector } => vcpu.get_regs().ok().and_then(|regs| {
                let sregs = &vcpu.sync_regs().sregs;
                let mut stack = PageWalk::of(mem, sregs.cr3, sregs.cr4);
                let faulting = crate::backends::exact::handler_watch::saved_rip(&mut stack, regs.rsp, vector)?;
                block.before(faulting)
            }),
            StepExit::Stepped => None,
        };
        stats.blocks += 1;
        if ran.is_none() {
            stats.blocks_lost += 1;
        }
        let ran = ran.unwrap_or(0);
        stats.block_insns += ran as u64;
        self.stepper.ran_block(ran as u32);
        let (retirement, mut cpu, mut counting) = self.parts(pmu, stats, vcpu, mem);
        for &(rip, class) in &block.insns[..ran] {
            counting.retire(rip, class, false);
        }
        match exit {
            StepExit::Delivered { .. } => retirement.delivered(&mut cpu, &mut counting, pc),
            StepExit::Stepped => retirement.resume(&mut cpu, &mut counting, pc),
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
        if let Some(block) = self.block.take() {
            self.block_stopped(pmu, stats, vcpu, mem, pc, exit, block);
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
        // (Inside a block the write's instruction retires with the block.)
        if self.stepper.is_on() && self.block.is_none() {
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
