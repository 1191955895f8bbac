//! Single-step control for the exact backend: KVM guest debug, the VIF, and the windows in
//! which interrupts may enter while stepping.
//!
//! Stepping uses `KVM_GUESTDBG_BLOCKIRQ`: an interrupt or NMI delivered during a step saves
//! TF in its frame, and if stepping ends before that frame's IRET the guest later takes a
//! stray #DB. But BLOCKIRQ also holds back PMIs and timer interrupts for as long as the
//! counters count. So when an event is owed (a PMI, an NMI, or periodically for the timer),
//! one entry runs without BLOCKIRQ: the *event window*. The window closes at the next
//! single-step exit, which comes only after any handler entered in it has returned (the
//! handler runs with TF clear; its IRET restores TF and the next instruction traps). While a
//! window is open, stepping never ends: the frame's TF is consumed first.
//!
//! Native mode: the VIF is dropped while stepping, so the emulator takes interrupts by the
//! real RFLAGS.IF, which a VIF guest never sets (it keeps its flag in `vif.if_`), and it
//! does not clear `vif.if_` on delivery as the host does natively. A handler that looks at
//! its interrupt state (the kit's timer tick reschedules) would then see interrupts on and
//! let another one nest. So natively a window takes only what it was opened for: for a
//! PMI by vector RFLAGS.IF gets `vif.if_`, for an NMI it is cleared, and there is no
//! periodic window: the guest's timer waits while counters count (BLOCKIRQ). The block
//! engine registers the VIF again for the blocks it runs between steps (natively, at host
//! speed: `StepControl::native_blocks`).

use crate::backends::exact::decode::MAX_INSN_LEN;
use crate::backends::exact::retire::StepCpu;
use crate::vstate::guest_debug::GuestDebug;
use crate::vstate::linear::DataAccess;
use crate::vstate::softint::{FlagHome, Run};
use kvm_ioctls::VcpuFd;
use std::collections::HashMap;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

const RFLAGS_IF: u64 = 1 << 9;

/// Steps between windows opened for interrupts nobody told us about (the guest's timer):
/// ~3.5 ms of stepping at ~7 us per step, two ioctls each, 0.4% of the stepping cost.
pub const STEPS_PER_WINDOW: u32 = 512;

/// A step weighs as many instructions run in a block toward the periodic window (~7 us a
/// step against ~1 us an instruction emulated): the window comes after about the same
/// time either way, and blocks are not cut eight times as often.
const STEP_WEIGHT: u32 = 8;

/// The weight between windows.
const WINDOW_PERIOD: u32 = STEPS_PER_WINDOW * STEP_WEIGHT;

/// What is owed to the guest at the coming entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Owed {
    /// No event.
    #[default]
    Nothing,
    /// An NMI (injected with KVM_NMI).
    Nmi,
    /// A maskable interrupt (a PMI by LVTPC vector).
    Interrupt,
}

/// How a stepped entry ended (a #DB exit while stepping).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepExit {
    /// The single-step trap: one instruction ran.
    Stepped,
    /// The CPU delivered exception `vector`: the step stopped at its handler's entry, on
    /// the breakpoint there (`handler_watch`).
    Delivered {
        /// The exception's vector.
        vector: u8,
    },
}

/// What the next entry does about single-stepping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Debug {
    /// Not stepping.
    #[default]
    Off,
    /// Stepping, interrupts held back.
    Blocked,
    /// Stepping, interrupts may enter (the event window).
    Window,
}

/// Pure state machine of stepping and event windows (unit-tested); `Stepper` applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepState {
    /// The mode of the coming (or last) entry.
    pub debug: Debug,
    /// The counters want stepping.
    pub wanted: bool,
    /// Weight run since the last window: steps and block instructions (`STEP_WEIGHT`).
    since_window: u32,
}

impl Default for StepState {
    fn default() -> Self {
        StepState { debug: Debug::Off, wanted: false, since_window: 0 }
    }
}

impl StepState {
    /// The mode the next entry needs, given whether an event is owed to the guest now and
    /// whether windows also open periodically (for the guest's timer; not natively).
    pub fn next(&mut self, event_owed: bool, periodic: bool) -> Debug {
        match (self.debug, self.wanted) {
            (Debug::Off, false) => Debug::Off,
            // An open window keeps stepping until its single-step exit.
            (Debug::Window, _) => Debug::Window,
            (_, false) => Debug::Off,
            (_, true) if event_owed || (periodic && self.since_window >= WINDOW_PERIOD) => {
                self.since_window = 0;
                Debug::Window
            }
            (_, true) => Debug::Blocked,
        }
    }

    /// A single-step exit: any window's handlers have returned.
    pub fn stepped(&mut self) {
        self.stopped_after(STEP_WEIGHT);
    }

    /// A stop after a block of `n` instructions: as `stepped`, each instruction weighing
    /// one eighth of a step toward the periodic window.
    pub fn ran_block(&mut self, n: u32) {
        self.stopped_after(n);
    }

    fn stopped_after(&mut self, weight: u32) {
        self.since_window = self.since_window.saturating_add(weight);
        if self.debug == Debug::Window {
            self.debug = Debug::Blocked;
        }
    }
}

/// Applies `StepState` to a vCPU: its guest debug (`GuestDebug`, which keeps any breakpoint)
/// and, in native mode, the VIF (a native vCPU would take the #DB itself).
#[derive(Debug, Default)]
pub struct Stepper {
    /// What the stepping should be.
    state: StepState,
}

impl Stepper {
    /// Bring the vCPU to the mode the next entry needs. Returns true when stepping started.
    pub fn apply(
        &mut self,
        vcpu: &VcpuFd,
        debug: &mut GuestDebug,
        mem: &GuestMemoryMmap,
        vif: Option<u64>,
        owed: Owed,
    ) -> bool {
        let next = self.state.next(owed != Owed::Nothing, vif.is_none());
        let current = debug.step();
        if let (Debug::Window, false, Some(gpa)) = (next, current == Debug::Window, vif) {
            sync_interrupt_flag(vcpu, owed == Owed::Interrupt && crate::host::pvm::native::vif_interrupts_on(mem, gpa));
        }
        if next == current {
            self.state.debug = next;
            return false;
        }
        if let (Debug::Off, Some(_)) = (current, vif) {
            if crate::host::pvm::native::drop_vif(vcpu).is_err() {
                return false;
            }
        }
        if debug.set_step(vcpu, next).is_err() {
            return false;
        }
        if let (Debug::Off, Some(gpa)) = (next, vif) {
            // Without its VIF the vCPU stays emulated: correct, only slow.
            let _ = crate::host::pvm::native::register_vif(vcpu, gpa);
        }
        self.state.debug = next;
        current == Debug::Off
    }

    /// Whether the vCPU single-steps.
    pub fn is_on(&self) -> bool {
        self.state.debug != Debug::Off
    }

    /// Whether the counters want stepping (applied at the next `apply`).
    pub fn want(&mut self, wanted: bool) {
        self.state.wanted = wanted;
    }

    /// A single-step exit.
    pub fn stepped(&mut self) {
        self.state.stepped();
    }

    /// A block of `n` instructions ran to its end.
    pub fn ran_block(&mut self, n: u32) {
        self.state.ran_block(n);
    }

    /// The mode of the coming entry.
    pub fn mode(&self) -> Debug {
        self.state.debug
    }

    /// Instructions a block may run until the periodic window opens (where windows open
    /// periodically).
    pub fn until_window(&self) -> u32 {
        WINDOW_PERIOD.saturating_sub(self.state.since_window).max(1)
    }
}

/// Whether KVM still holds an NMI for the vCPU (pending or being injected).
pub fn nmi_pending(vcpu: &VcpuFd) -> bool {
    vcpu.get_vcpu_events().is_ok_and(|e| e.nmi.pending != 0 || e.nmi.injected != 0)
}

/// RFLAGS.IF := `on`, if it differs.
fn sync_interrupt_flag(vcpu: &VcpuFd, on: bool) {
    let Ok(mut regs) = vcpu.get_regs() else { return };
    if (regs.rflags & RFLAGS_IF != 0) != on {
        regs.rflags ^= RFLAGS_IF;
        let _ = vcpu.set_regs(&regs);
    }
}

/// Code pages seen while stepping: (CR3, guest-virtual page) -> guest-physical page (a
/// Linux guest's processes map the same user addresses to different pages).
pub type CodePages = HashMap<(u64, u64), u64>;

/// A stepped KVM vCPU as the retirement rules see it (`backends::retire`).
#[derive(Debug)]
pub struct VcpuStep<'a> {
    /// The vCPU being stepped.
    pub vcpu: &'a VcpuFd,
    /// Guest memory.
    pub mem: &'a GuestMemoryMmap,
    /// Code pages seen, kept while stepping.
    pub code_pages: &'a mut CodePages,
    /// The VMM's INT3s on RDPMCs: the code is read as the guest wrote it.
    pub rdpmc_traps: &'a crate::vpmu::rdpmc_traps::RdpmcTraps,
    /// Where the vCPU keeps its interrupt flag (for INT n and IRETQ).
    pub home: FlagHome,
    /// The registers `rdpmc_ecx` read, for `rdpmc_done` to write back (one KVM_GET_REGS
    /// per RDPMC); `None` outside an RDPMC.
    pub rdpmc_regs: Option<kvm_bindings::kvm_regs>,
}

impl VcpuStep<'_> {
    fn run(&mut self, what: Run) -> Option<crate::vstate::softint::Landing> {
        crate::vstate::softint::run_on(self.vcpu, self.mem, self.home, what)
    }

    fn translate(&mut self, page: u64) -> Option<u64> {
        // The registers KVM synced out at this exit (a stepping backend enables them).
        let key = (self.vcpu.sync_regs().sregs.cr3, page);
        if let Some(&pa) = self.code_pages.get(&key) {
            return Some(pa);
        }
        // KVM_TRANSLATE walks as a supervisor data read, which SMAP refuses on a user page
        // (hardware hosts pass SMAP through): the tables are walked here then.
        let pa = match self.vcpu.translate_gva(page).ok().filter(|t| t.valid != 0) {
            Some(t) => t.physical_address & !0xfff,
            None => {
                let sregs = &self.vcpu.sync_regs().sregs;
                crate::vstate::linear::PageWalk::of(self.mem, sregs.cr3, sregs.cr4).page(page)?
            }
        };
        self.code_pages.insert(key, pa);
        Some(pa)
    }
}

impl StepCpu for VcpuStep<'_> {
    /// A page at a time: one translation and one copy per page the bytes span.
    fn code(&mut self, va: u64) -> [u8; MAX_INSN_LEN] {
        let mut bytes = [0u8; MAX_INSN_LEN];
        let mut done = 0;
        while done < MAX_INSN_LEN {
            let at = va.wrapping_add(done as u64);
            let Some(page) = self.translate(at & !0xfff) else { break };
            let n = (0x1000 - (at & 0xfff) as usize).min(MAX_INSN_LEN - done);
            let chunk = &mut bytes[done..done + n];
            if self.mem.read_slice(chunk, GuestAddress(page | (at & 0xfff))).is_err() {
                // The end of guest memory: the bytes up to it.
                for (i, byte) in chunk.iter_mut().enumerate() {
                    match self.mem.read_obj::<u8>(GuestAddress(page | ((at & 0xfff) + i as u64))) {
                        Ok(b) => *byte = b,
                        Err(_) => break,
                    }
                }
                break;
            }
            done += n;
        }
        self.rdpmc_traps.unpatch(va, &mut bytes);
        bytes
    }

    fn rip(&mut self) -> Option<u64> {
        self.vcpu.get_regs().ok().map(|r| r.rip)
    }

    /// From the segment registers KVM copied out at this exit (`KVM_SYNC_X86_SREGS`, which
    /// the vCPU enables while it has a stepping backend): no ioctl per step.
    fn user_mode(&mut self) -> bool {
        self.vcpu.sync_regs().sregs.cs.selector & 3 != 0
    }

    fn skip(&mut self, len: u64) -> Option<u64> {
        let mut regs = self.vcpu.get_regs().ok()?;
        regs.rip += len;
        self.vcpu.set_regs(&regs).ok()?;
        Some(regs.rip)
    }

    fn rdpmc_ecx(&mut self) -> Option<u32> {
        let regs = self.vcpu.get_regs().ok()?;
        self.rdpmc_regs = Some(regs);
        Some(regs.rcx as u32)
    }

    fn rdpmc_done(&mut self, len: u64, value: u64) -> Option<u64> {
        let mut regs = match self.rdpmc_regs.take() {
            Some(regs) => regs,
            None => self.vcpu.get_regs().ok()?,
        };
        regs.rax = value & 0xffff_ffff;
        regs.rdx = value >> 32;
        regs.rip += len;
        self.vcpu.set_regs(&regs).ok()?;
        Some(regs.rip)
    }

    fn soft_int(&mut self, vector: u8, len: u64) -> Option<u64> {
        self.run(Run::Int { vector, len }).map(|l| l.rip)
    }

    fn iret(&mut self) -> Option<(u64, bool)> {
        self.run(Run::Iret).map(|l| (l.rip, l.user))
    }

    fn sysretq(&mut self) -> Option<u64> {
        self.run(Run::Sysret).map(|l| l.rip)
    }

    fn swapgs(&mut self, len: u64) -> Option<u64> {
        self.run(Run::Swapgs { len }).map(|l| l.rip)
    }

    /// Where the host steps SYSCALL into the kernel (kvm_pvm), it is left to the host.
    fn syscall(&mut self) -> Option<u64> {
        if !crate::host::caps().steps_by_cpu_tf() {
            return None;
        }
        self.run(Run::Syscall).map(|l| l.rip)
    }
}

/// What the block engine reads of a stopped vCPU: its code as stepping reads it, and data
/// through the guest's page tables as a CPL 0 access would (`PageWalk::data`).
impl crate::backends::exact::blocks::BlockCpu for VcpuStep<'_> {
    fn code(&mut self, va: u64) -> [u8; MAX_INSN_LEN] {
        StepCpu::code(self, va)
    }

    fn data(&mut self, va: u64, write: bool) -> Option<DataAccess> {
        let sregs = &self.vcpu.sync_regs().sregs;
        let walk = crate::vstate::linear::PageWalk::of(self.mem, sregs.cr3, sregs.cr4);
        let access = walk.data(va, write, sregs.cr0, sregs.cr4)?;
        // (RAM, not MMIO: a store run ahead is never written, so its page is probed here.)
        self.mem.read_slice(&mut [0u8], GuestAddress(access.pa)).ok().map(|_| access)
    }

    fn read_phys(&mut self, pa: u64, buf: &mut [u8]) -> Option<()> {
        self.mem.read_slice(buf, GuestAddress(pa)).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stepping() -> StepState {
        let mut s = StepState { wanted: true, ..Default::default() };
        s.debug = s.next(false, true);
        s
    }

    #[test]
    fn steps_with_interrupts_blocked() {
        assert_eq!(stepping().debug, Debug::Blocked);
        assert_eq!(StepState::default().next(true, true), Debug::Off, "no window without stepping");
    }

    #[test]
    fn an_owed_event_opens_a_window_until_the_next_step() {
        let mut s = stepping();
        s.debug = s.next(true, true);
        assert_eq!(s.debug, Debug::Window);
        assert_eq!(s.next(false, true), Debug::Window, "still open before the step exit");
        s.stepped();
        assert_eq!(s.next(false, true), Debug::Blocked);
    }

    #[test]
    fn stepping_does_not_end_inside_a_window() {
        let mut s = stepping();
        s.debug = s.next(true, true);
        s.wanted = false;
        assert_eq!(s.next(false, true), Debug::Window, "a handler's frame may still hold TF");
        s.stepped();
        s.debug = s.next(false, true);
        assert_eq!(s.debug, Debug::Off);
    }

    #[test]
    fn the_timer_gets_a_window_every_so_many_steps() {
        let mut s = stepping();
        for _ in 0..STEPS_PER_WINDOW - 1 {
            s.stepped();
            s.debug = s.next(false, true);
            assert_eq!(s.debug, Debug::Blocked);
        }
        s.stepped();
        let mut native = s;
        assert_eq!(s.next(false, true), Debug::Window);
        assert_eq!(native.next(false, false), Debug::Blocked, "natively the timer waits");
    }

    #[test]
    fn a_block_instruction_weighs_an_eighth_of_a_step_toward_the_window() {
        let mut s = stepping();
        s.ran_block(WINDOW_PERIOD - STEP_WEIGHT);
        s.stepped();
        assert_eq!(s.next(false, true), Debug::Window);
        let mut s = stepping();
        s.ran_block(STEPS_PER_WINDOW);
        assert_eq!(s.next(false, true), Debug::Blocked, "as many block instructions as steps: no window yet");
    }
}
