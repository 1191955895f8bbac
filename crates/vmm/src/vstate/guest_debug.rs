//! The one owner of a vCPU's KVM guest-debug word. Three users set it: the exact backend's
//! single-stepping (`stepping`), the SYSCALL repair's execution breakpoint on the #PF
//! handler (`syscall_entry`, kvm_pvm) and the breakpoints on exception handlers while
//! stepping (`handler_watch`). `KVM_SET_GUEST_DEBUG` replaces the whole word, so each user
//! says only what it wants and the word written is always both wishes composed: stepping a
//! Linux guest keeps the breakpoint, and stepping over the breakpoint keeps BLOCKIRQ.
//! The block engine (`backends::exact::blocks`) runs to a block's end instead of stepping:
//! no single-step, interrupts blocked, the end in DR3 and the watched handlers in DR0-DR2
//! (or, where breakpoints do not stop the guest, port writes planted there: `vpmu::planted`).

use crate::backends::exact::stepping::Debug;
use kvm_bindings::{
    kvm_guest_debug, KVM_GUESTDBG_BLOCKIRQ, KVM_GUESTDBG_ENABLE, KVM_GUESTDBG_SINGLESTEP, KVM_GUESTDBG_USE_HW_BP,
};
use kvm_ioctls::VcpuFd;

/// DR7's local enable of breakpoint `n` on execution (R/Wn = 00, LENn = 00).
const fn dr7_local_exec(n: usize) -> u64 {
    1 << (2 * n)
}

/// The debug register that holds a block's end (the watch of #DE, which blocks never need:
/// DIV and IDIV are stepped).
pub const BLOCK_END_DR: usize = 3;

/// What the users of guest debug want, and what KVM was last given.
#[derive(Debug, Default)]
pub struct GuestDebug {
    /// The exact backend's stepping.
    step: Debug,
    /// The execution breakpoint (DR0), when one is set.
    breakpoint: Option<u64>,
    /// The breakpoint is off for one single-step (stepping over it: this host's emulator
    /// takes an execution breakpoint again whatever RFLAGS.RF says).
    stepping_over: bool,
    /// Every #DB exits to the VMM, also while nothing is stepped (`catch_stray_steps`).
    catching: bool,
    /// Exception handlers watched while stepping, in DR0-DR3 (`handler_watch`; never
    /// beside `breakpoint`, which is kvm_pvm's).
    watch: [Option<u64>; 4],
    /// Where the coming step begins: a watched handler there is off for it (it would
    /// trap before its first instruction again).
    at: u64,
    /// The coming entry runs a block to this address (no single-step; `BLOCK_END_DR`).
    run_to: Option<u64>,
    /// Blocks end at a port write the VMM plants, not at `BLOCK_END_DR` (hosts whose
    /// breakpoints do not stop the guest).
    planted_ends: bool,
    /// The word KVM holds (None: never set, i.e. off).
    applied: Option<(u32, [u64; 8])>,
}

impl GuestDebug {
    /// The stepping KVM was last given.
    pub fn step(&self) -> Debug {
        self.step
    }

    /// Whether the breakpoint is off for the single-step now running.
    pub fn stepping_over(&self) -> bool {
        self.stepping_over
    }

    /// Single-step as `step` says, keeping the breakpoint.
    pub fn set_step(&mut self, vcpu: &VcpuFd, step: Debug) -> Result<(), kvm_ioctls::Error> {
        self.update(vcpu, |d| (d.step, d.run_to) = (step, d.run_to.filter(|_| step == Debug::Blocked)))
    }

    /// Put the execution breakpoint on `address`.
    pub fn set_breakpoint(&mut self, vcpu: &VcpuFd, address: u64) -> Result<(), kvm_ioctls::Error> {
        self.update(vcpu, |d| (d.breakpoint, d.stepping_over) = (Some(address), false))
    }

    /// Before a step beginning at `rip`, with exception handlers `watch` watched: write the
    /// word if it changed, and on hosts whose CPU steps by TF (`HostCaps::steps_by_cpu_tf`)
    /// always: KVM sets TF for a step at the RIP the word was last written at, so a VMM
    /// that moved RIP since (an instruction it ran) re-arms the step there.
    /// `run_to`: the entry runs a block to that address instead of one step.
    pub fn before_step(
        &mut self,
        vcpu: &VcpuFd,
        rip: u64,
        watch: [Option<u64>; 4],
        run_to: Option<u64>,
    ) -> Result<(), kvm_ioctls::Error> {
        if self.step == Debug::Off && !self.stepping_over {
            return Ok(());
        }
        if crate::host::caps().steps_by_cpu_tf() {
            self.applied = None; // written whether it changed or not
        }
        let run_to = run_to.filter(|_| self.step == Debug::Blocked && self.breakpoint.is_none());
        let result = self.update(vcpu, |d| (d.at, d.watch, d.run_to) = (rip, watch, run_to));
        if result.is_err() {
            self.run_to = None;
        }
        result
    }

    /// Blocks end at a port write the VMM plants (`blocks::EndBy::Trap`): no breakpoint.
    pub fn plant_block_ends(&mut self) {
        self.planted_ends = true;
    }

    /// Whether the coming entry runs a block (set by `before_step`).
    pub fn runs_block(&self) -> bool {
        self.run_to.is_some()
    }

    /// Whether an execution breakpoint of the VMM's own (the SYSCALL repair's) is set.
    pub fn has_breakpoint(&self) -> bool {
        self.breakpoint.is_some()
    }

    /// The watched handler (`handler_watch::VECTORS` index) whose breakpoint a #DB with
    /// `dr6` hit, if any.
    pub fn watched_hit(&self, dr6: u64) -> Option<usize> {
        if self.breakpoint.is_some() {
            return None;
        }
        let end = self.run_to.map(|_| BLOCK_END_DR);
        (0..4).find(|&n| dr6 & (1 << n) != 0 && self.watch[n].is_some() && Some(n) != end)
    }

    /// Have every #DB exit to the VMM from now on (hardware hosts, once stepping may begin):
    /// a frame or a saved RFLAGS the guest pushed while stepped holds TF, and when it is
    /// restored after stepping ended the single-step trap is the VMM's to drop, not the
    /// guest's to take (KVM_GUESTDBG_USE_HW_BP with no breakpoint armed).
    pub fn catch_stray_steps(&mut self, vcpu: &VcpuFd) -> Result<(), kvm_ioctls::Error> {
        self.update(vcpu, |d| d.catching = true)
    }

    /// Step over the breakpoint: off for one single-step (`rearm` at its exit).
    pub fn step_over(&mut self, vcpu: &VcpuFd) -> Result<(), kvm_ioctls::Error> {
        self.update(vcpu, |d| d.stepping_over = true)
    }

    /// The step over the breakpoint is done: it is back.
    pub fn rearm(&mut self, vcpu: &VcpuFd) -> Result<(), kvm_ioctls::Error> {
        self.update(vcpu, |d| d.stepping_over = false)
    }

    /// Change the wishes; write the word if it changed. On failure the wishes stay as
    /// they were.
    fn update(&mut self, vcpu: &VcpuFd, change: impl FnOnce(&mut Self)) -> Result<(), kvm_ioctls::Error> {
        let before = (self.step, self.breakpoint, self.stepping_over);
        change(self);
        let word = self.word();
        let key = (word.control, word.arch.debugreg);
        if self.applied.unwrap_or_default() == key {
            return Ok(());
        }
        if let Err(e) = vcpu.set_guest_debug(&word) {
            (self.step, self.breakpoint, self.stepping_over) = before;
            return Err(e);
        }
        self.applied = Some(key);
        Ok(())
    }

    /// The guest-debug word for the wishes now held.
    fn word(&self) -> kvm_guest_debug {
        let mut dbg = kvm_guest_debug::default();
        let block = self.run_to.filter(|_| self.step == Debug::Blocked && self.breakpoint.is_none());
        let single_step = (self.step != Debug::Off && block.is_none()) || self.stepping_over;
        if single_step {
            dbg.control |= KVM_GUESTDBG_SINGLESTEP;
        }
        if self.step == Debug::Blocked {
            dbg.control |= KVM_GUESTDBG_BLOCKIRQ;
        }
        if let (Some(address), false) = (self.breakpoint, self.stepping_over) {
            dbg.control |= KVM_GUESTDBG_USE_HW_BP;
            dbg.arch.debugreg[0] = address;
            dbg.arch.debugreg[7] = dr7_local_exec(0);
        } else if self.breakpoint.is_none() && self.step != Debug::Off {
            for (n, &handler) in self.watch.iter().enumerate() {
                if let Some(address) = handler.filter(|&a| a != self.at && !(block.is_some() && n == BLOCK_END_DR)) {
                    dbg.control |= KVM_GUESTDBG_USE_HW_BP;
                    dbg.arch.debugreg[n] = address;
                    dbg.arch.debugreg[7] |= dr7_local_exec(n);
                }
            }
            if let Some(end) = block.filter(|_| !self.planted_ends) {
                dbg.control |= KVM_GUESTDBG_USE_HW_BP;
                dbg.arch.debugreg[BLOCK_END_DR] = end;
                dbg.arch.debugreg[7] |= dr7_local_exec(BLOCK_END_DR);
            }
        }
        if self.catching {
            dbg.control |= KVM_GUESTDBG_USE_HW_BP;
        }
        if dbg.control != 0 {
            dbg.control |= KVM_GUESTDBG_ENABLE;
        }
        dbg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(step: Debug, breakpoint: Option<u64>, stepping_over: bool) -> kvm_guest_debug {
        GuestDebug { step, breakpoint, stepping_over, ..Default::default() }.word()
    }

    #[test]
    fn nothing_wanted_is_off() {
        assert_eq!(word(Debug::Off, None, false).control, 0);
    }

    #[test]
    fn stepping_keeps_the_breakpoint() {
        let w = word(Debug::Blocked, Some(0xffff_ffff_8100_0000), false);
        let all = KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_SINGLESTEP | KVM_GUESTDBG_BLOCKIRQ | KVM_GUESTDBG_USE_HW_BP;
        assert_eq!(w.control, all);
        assert_eq!((w.arch.debugreg[0], w.arch.debugreg[7]), (0xffff_ffff_8100_0000, dr7_local_exec(0)));
        let window = word(Debug::Window, Some(0x1000), false);
        assert_eq!(window.control, all & !KVM_GUESTDBG_BLOCKIRQ, "the event window lets interrupts in");
    }

    #[test]
    fn stepping_over_the_breakpoint_single_steps_without_it() {
        let alone = word(Debug::Off, Some(0x1000), true);
        assert_eq!(alone.control, KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_SINGLESTEP);
        assert_eq!(alone.arch.debugreg[7], 0);
        let blocked = word(Debug::Blocked, Some(0x1000), true);
        assert_eq!(blocked.control, KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_SINGLESTEP | KVM_GUESTDBG_BLOCKIRQ);
    }

    #[test]
    fn catching_keeps_every_debug_exception_without_arming_a_breakpoint() {
        let d = GuestDebug { catching: true, ..Default::default() };
        let w = d.word();
        assert_eq!(w.control, KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_USE_HW_BP);
        assert_eq!(w.arch.debugreg[7], 0, "no breakpoint armed");
        let stepping = GuestDebug { catching: true, step: Debug::Blocked, ..Default::default() }.word();
        assert_ne!(stepping.control & KVM_GUESTDBG_SINGLESTEP, 0);
    }

    #[test]
    fn stepping_watches_the_handlers_but_not_the_one_it_begins_at() {
        let watch = [Some(0x9000), None, Some(0xa000), Some(0xb000)];
        let d = GuestDebug { step: Debug::Blocked, watch, at: 0xb000, ..Default::default() };
        let w = d.word();
        assert_ne!(w.control & KVM_GUESTDBG_USE_HW_BP, 0);
        assert_eq!(w.arch.debugreg[..4], [0x9000, 0, 0xa000, 0]);
        assert_eq!(w.arch.debugreg[7], dr7_local_exec(0) | dr7_local_exec(2));
        assert_eq!(d.watched_hit(1 << 2 | 1 << 14), Some(2));
        assert_eq!(d.watched_hit(1 << 14), None, "a single-step");
        let off = GuestDebug { watch, ..Default::default() }.word();
        assert_eq!(off.arch.debugreg[7], 0, "nothing watched while not stepping");
    }

    #[test]
    fn a_block_runs_to_its_end_in_dr3_with_interrupts_blocked_and_no_step() {
        let watch = [Some(0x9000), Some(0xa000), Some(0xb000), Some(0xc000)];
        let d = GuestDebug { step: Debug::Blocked, watch, at: 0x100, run_to: Some(0x180), ..Default::default() };
        let w = d.word();
        assert_eq!(w.control, KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_BLOCKIRQ | KVM_GUESTDBG_USE_HW_BP);
        assert_eq!(w.arch.debugreg[..4], [0x9000, 0xa000, 0xb000, 0x180], "#DE's watch gives way to the end");
        assert_eq!(w.arch.debugreg[7], 0b01010101);
        assert_eq!(d.watched_hit(1 << BLOCK_END_DR), None, "the end is no delivery");
        assert_eq!(d.watched_hit(1 << 1), Some(1));
        let window = GuestDebug { step: Debug::Window, run_to: Some(0x180), ..Default::default() }.word();
        assert_ne!(window.control & KVM_GUESTDBG_SINGLESTEP, 0, "no block in an event window");
    }

    #[test]
    fn the_breakpoint_alone() {
        let w = word(Debug::Off, Some(0x1000), false);
        assert_eq!(w.control, KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_USE_HW_BP);
    }
}
