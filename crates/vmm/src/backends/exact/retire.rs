//! Which instructions retired, from single-step exits, by the rules of docs/DESIGN.md
//! ("Counting as hardware counts"). This host's stepping is not one exit per instruction:
//!
//! * a REP string instruction may exit once per batch of iterations with RIP unchanged: it
//!   retires once, when RIP moves on;
//! * no trap follows LFENCE/MFENCE/SFENCE, so the VMM retires them itself (RIP past them),
//!   nor SWAPGS, which the VMM runs;
//! * an instruction that exits to the VMM for a write (OUT, an MMIO store) has already
//!   advanced RIP at that exit and takes no trap afterwards: it retires at the exit;
//! * INT n is rejected by the host's emulator: the VMM delivers it (`softint`), so the
//!   handler is stepped too; no trap follows IRETQ, so the VMM runs it too; RDPMC #GPs
//!   inside KVM: the VMM emulates it;
//! * user mode runs natively on this host, where no step traps: the VMM runs IRETQ and
//!   SYSRETQ to user mode itself and the vCPU enters user mode one instruction at a time
//!   (`user_return`);
//! * an exception the host delivers while stepping traps after the handler's first
//!   instruction: the faulting instruction is counted in its place (the total is right;
//!   the class is the faulting one's, the privilege level the handler's). Where the
//!   handler is watched (`handler_watch`), the step stops at its entry instead, on every
//!   host: the faulting instruction retires nothing (`delivered`).
//!
//! Each instruction counts at the privilege level it began at (user mode for CPL > 0),
//! which for SYSCALL-class instructions, INT n and IRET is the level they leave. An
//! instruction of any other kind found to have changed the level faulted: what retired was
//! the handler's first instruction, at the handler's level.
//!
//! Everything the rules need from the vCPU is behind [`StepCpu`], so they are unit-tested
//! against a mock.

use super::decode::{decode, Insn, InsnClass, MAX_INSN_LEN};

/// What the rules need of the vCPU being stepped.
pub trait StepCpu {
    /// The bytes at guest-virtual `va` (zeros where unmapped).
    fn code(&mut self, va: u64) -> [u8; MAX_INSN_LEN];
    /// The current RIP.
    fn rip(&mut self) -> Option<u64>;
    /// Whether the vCPU is in user mode now (CPL > 0).
    fn user_mode(&mut self) -> bool;
    /// RIP += `len` (an instruction the VMM ran); the new RIP.
    fn skip(&mut self, len: u64) -> Option<u64>;
    /// The ECX of the RDPMC at RIP.
    fn rdpmc_ecx(&mut self) -> Option<u32>;
    /// Complete the RDPMC at RIP with `value` read for its ECX: EDX:EAX := `value`,
    /// RIP += `len`; the new RIP.
    fn rdpmc_done(&mut self, len: u64, value: u64) -> Option<u64>;
    /// Deliver INT `vector` (`len` bytes at RIP); the handler's RIP.
    fn soft_int(&mut self, vector: u8, len: u64) -> Option<u64>;
    /// IRETQ at RIP; the return RIP and whether it is in user mode.
    fn iret(&mut self) -> Option<(u64, bool)>;
    /// SYSRETQ at RIP; the return RIP (in user mode).
    fn sysretq(&mut self) -> Option<u64>;
    /// SYSCALL (64-bit) at RIP; the kernel's entry RIP, or None where the host runs it.
    fn syscall(&mut self) -> Option<u64>;
    /// SWAPGS (`len` bytes) at RIP; the new RIP.
    fn swapgs(&mut self, len: u64) -> Option<u64>;
}

/// Where retired instructions go, and what RDPMC reads.
pub trait Counting {
    /// The instruction of `class` at `rip` retired, in user mode (`user`) or the kernel.
    fn retire(&mut self, rip: u64, class: InsnClass, user: bool);
    /// What RDPMC with `ecx` reads, or None where it #GPs.
    fn rdpmc(&mut self, ecx: u32) -> Option<u64>;
}

/// The instruction the next single-step retires.
#[derive(Debug, Clone, Copy)]
pub struct Retirement {
    rip: u64,
    insn: Insn,
    /// The instruction at `rip` began in user mode.
    user: bool,
    /// RIP of an instruction the VMM has accounted for already: one retired early (a WRMSR
    /// whose exit it handled) or one it knows faults (an RDPMC the model #GPs). The step that
    /// completes it retires nothing.
    accounted: Option<u64>,
    long_mode: bool,
}

impl Retirement {
    /// Rules for a guest in long mode (`long_mode`) or 32-bit mode; nothing to retire yet.
    pub fn new(long_mode: bool) -> Self {
        Retirement { rip: 0, insn: Insn { class: InsnClass::Other, len: 0 }, user: false, accounted: None, long_mode }
    }

    /// Stepping begins at `pc`; `exited` says the instruction there already exited to the
    /// VMM (a WRMSR completing at this entry): it counts for no counter.
    pub fn begin(&mut self, cpu: &mut impl StepCpu, counting: &mut impl Counting, pc: u64, exited: bool) {
        self.accounted = exited.then_some(pc);
        self.start(cpu, counting, pc);
    }

    /// Stepping goes on (after a step or a write exit) at `pc`.
    fn start(&mut self, cpu: &mut impl StepCpu, counting: &mut impl Counting, pc: u64) {
        let mut pc = pc;
        // One look per entry; the returns to user mode the VMM runs say where they land.
        self.user = cpu.user_mode();
        loop {
            self.rip = pc;
            self.insn = decode(&cpu.code(pc), self.long_mode);
            let user = self.user;
            let ran = match self.insn.class {
                // The counter's value for its ECX, then the RDPMC completed with it; `None`
                // where the model says #GP: the guest runs the real instruction and faults.
                InsnClass::Rdpmc => cpu
                    .rdpmc_ecx()
                    .and_then(|ecx| counting.rdpmc(ecx))
                    .and_then(|value| cpu.rdpmc_done(self.insn.len, value)),
                InsnClass::Fence => cpu.skip(self.insn.len),
                InsnClass::Swapgs => cpu.swapgs(self.insn.len),
                InsnClass::SoftInt(vector) => cpu.soft_int(vector, self.insn.len),
                InsnClass::Iret => cpu.iret().map(|(rip, to_user)| {
                    self.user = to_user;
                    rip
                }),
                InsnClass::SysRetq => cpu.sysretq().inspect(|_| self.user = true),
                InsnClass::Syscall64 => cpu.syscall().inspect(|_| self.user = false),
                _ => None,
            };
            if ran.is_none() && self.insn.class == InsnClass::Rdpmc {
                self.accounted = Some(pc); // it faults: it does not retire
            }
            let Some(next) = ran else { return };
            counting.retire(pc, self.insn.class, user);
            pc = next;
        }
    }

    /// A single-step exit at `pc`.
    pub fn stepped(&mut self, cpu: &mut impl StepCpu, counting: &mut impl Counting, pc: u64) {
        let iteration = self.insn.class == InsnClass::RepString && pc == self.rip;
        // A step back where an instruction the VMM accounted for still stands retired nothing
        // (natively, the first entry after the VIF is dropped may trap before it completes).
        if self.accounted == Some(self.rip) && pc == self.rip {
            return;
        }
        let accounted = self.accounted.take() == Some(self.rip);
        if !iteration && !accounted {
            let user = self.retired_in_user_mode(cpu);
            counting.retire(self.rip, self.insn.class, user);
        }
        self.start(cpu, counting, pc);
    }

    /// The CPU delivered an exception whose handler begins at `pc` (`handler_watch`): the
    /// instruction being stepped faulted and retired nothing; stepping goes on in the handler.
    pub fn delivered(&mut self, cpu: &mut impl StepCpu, counting: &mut impl Counting, pc: u64) {
        self.accounted = None;
        self.start(cpu, counting, pc);
    }

    /// Where the coming step begins.
    pub fn rip(&self) -> u64 {
        self.rip
    }

    /// Whether the instruction at `rip` is still to retire by the ordinary rules: nothing
    /// about it was accounted for by the VMM (a block may begin there).
    pub fn idle(&self) -> bool {
        self.accounted.is_none()
    }

    /// A block ran to `pc` (its instructions retired by the block engine): what stands at
    /// `pc` retires by the ordinary rules, as after a step.
    pub fn resume(&mut self, cpu: &mut impl StepCpu, counting: &mut impl Counting, pc: u64) {
        self.accounted = None;
        self.start(cpu, counting, pc);
    }

    /// The privilege level the step that just ended retired its instruction at: the one
    /// it began at, unless it faulted into a handler at another level (module docs).
    fn retired_in_user_mode(&self, cpu: &mut impl StepCpu) -> bool {
        if self.insn.class.changes_privilege() {
            return self.user;
        }
        cpu.user_mode()
    }

    /// The instruction the next step retires is retired by the VMM now (a WRMSR, as its
    /// exit is handled); returns its RIP, or None if it was accounted for already (natively,
    /// the WRMSR whose exit started stepping exits once more when the VIF is dropped).
    pub fn retired_early(&mut self) -> Option<u64> {
        if self.accounted == Some(self.rip) {
            return None;
        }
        self.accounted = Some(self.rip);
        Some(self.rip)
    }

    /// Whether the instruction the next step retires begins in user mode.
    pub fn in_user_mode(&self) -> bool {
        self.user
    }

    /// An exit for a write (OUT, MMIO store): if RIP moved, the instruction retired.
    pub fn write_exit(&mut self, cpu: &mut impl StepCpu, counting: &mut impl Counting) {
        match cpu.rip() {
            Some(pc) if pc != self.rip => {
                counting.retire(self.rip, self.insn.class, self.user);
                self.start(cpu, counting, pc);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A program at fixed addresses; RIP moves as the mock says.
    #[derive(Default)]
    struct Mock {
        code: BTreeMap<u64, Vec<u8>>,
        rip: u64,
        handler: u64,
        stack: Vec<u64>,
        gp_on_rdpmc: bool,
        user: bool,
        /// The VMM runs SYSCALL (hardware hosts), entering the kernel at `handler`.
        runs_syscall: bool,
    }

    impl StepCpu for Mock {
        fn code(&mut self, va: u64) -> [u8; MAX_INSN_LEN] {
            let mut b = [0u8; MAX_INSN_LEN];
            if let Some(c) = self.code.get(&va) {
                b[..c.len()].copy_from_slice(c);
            }
            b
        }
        fn rip(&mut self) -> Option<u64> {
            Some(self.rip)
        }
        fn user_mode(&mut self) -> bool {
            self.user
        }
        fn skip(&mut self, len: u64) -> Option<u64> {
            self.rip += len;
            Some(self.rip)
        }
        fn rdpmc_ecx(&mut self) -> Option<u32> {
            Some(0)
        }
        fn rdpmc_done(&mut self, len: u64, _value: u64) -> Option<u64> {
            (!self.gp_on_rdpmc).then(|| self.skip(len))?
        }
        fn soft_int(&mut self, _vector: u8, len: u64) -> Option<u64> {
            self.stack.push(self.rip + len);
            self.rip = self.handler;
            Some(self.rip)
        }
        fn iret(&mut self) -> Option<(u64, bool)> {
            self.rip = self.stack.pop()?;
            Some((self.rip, self.user))
        }
        fn swapgs(&mut self, len: u64) -> Option<u64> {
            self.skip(len)
        }
        fn sysretq(&mut self) -> Option<u64> {
            self.user = true;
            self.rip = self.stack.pop()?;
            Some(self.rip)
        }
        fn syscall(&mut self) -> Option<u64> {
            if !self.runs_syscall {
                return None;
            }
            self.stack.push(self.rip + 2);
            (self.user, self.rip) = (false, self.handler);
            Some(self.rip)
        }
    }

    #[derive(Default)]
    struct Log {
        retired: Vec<(u64, InsnClass)>,
        /// The RIPs that retired in user mode.
        user: Vec<u64>,
        rdpmc_reads: usize,
    }

    impl Counting for Log {
        fn retire(&mut self, rip: u64, class: InsnClass, user: bool) {
            self.retired.push((rip, class));
            if user {
                self.user.push(rip);
            }
        }
        fn rdpmc(&mut self, _ecx: u32) -> Option<u64> {
            self.rdpmc_reads += 1;
            Some(42)
        }
    }

    /// Stepping begins at `pc` (where the vCPU is).
    fn begin(r: &mut Retirement, cpu: &mut Mock, log: &mut Log, pc: u64, exited: bool) {
        cpu.rip = pc;
        r.begin(cpu, log, pc, exited);
    }

    /// A step exit with the vCPU at `pc`.
    fn step(r: &mut Retirement, cpu: &mut Mock, log: &mut Log, pc: u64) {
        cpu.rip = pc;
        r.stepped(cpu, log, pc);
    }

    fn mock(program: &[(u64, &[u8])]) -> Mock {
        Mock { code: program.iter().map(|&(a, b)| (a, b.to_vec())).collect(), ..Default::default() }
    }

    const NOP: &[u8] = &[0x90];
    const MFENCE: &[u8] = &[0x0f, 0xae, 0xf0];
    const REP_MOVSB: &[u8] = &[0xf3, 0xa4];
    const OUT: &[u8] = &[0xe6, 0xe0];

    #[test]
    fn fences_are_run_by_the_vmm_and_retire_once_each() {
        let mut cpu = mock(&[(0x10, MFENCE), (0x13, MFENCE), (0x16, NOP)]);
        let (mut r, mut log) = (Retirement::new(true), Log::default());
        begin(&mut r, &mut cpu, &mut log, 0x10, false);
        assert_eq!(cpu.rip, 0x16, "both fences skipped");
        step(&mut r, &mut cpu, &mut log, 0x17);
        let rips: Vec<u64> = log.retired.iter().map(|x| x.0).collect();
        assert_eq!(rips, vec![0x10, 0x13, 0x16]);
    }

    #[test]
    fn a_rep_string_retires_once_whatever_its_iterations() {
        let mut cpu = mock(&[(0x20, REP_MOVSB), (0x22, NOP)]);
        let (mut r, mut log) = (Retirement::new(true), Log::default());
        begin(&mut r, &mut cpu, &mut log, 0x20, false);
        step(&mut r, &mut cpu, &mut log, 0x20);
        step(&mut r, &mut cpu, &mut log, 0x20);
        assert!(log.retired.is_empty(), "iterations are not instructions");
        step(&mut r, &mut cpu, &mut log, 0x22);
        assert_eq!(log.retired, vec![(0x20, InsnClass::RepString)]);
    }

    #[test]
    fn a_jump_to_itself_still_retires() {
        let mut cpu = mock(&[(0x30, &[0xeb, 0xfe])]);
        let (mut r, mut log) = (Retirement::new(true), Log::default());
        begin(&mut r, &mut cpu, &mut log, 0x30, false);
        step(&mut r, &mut cpu, &mut log, 0x30);
        assert_eq!(log.retired, vec![(0x30, InsnClass::Branch)]);
    }

    #[test]
    fn a_write_exit_retires_its_instruction_once() {
        let mut cpu = mock(&[(0x40, OUT), (0x42, NOP)]);
        let (mut r, mut log) = (Retirement::new(true), Log::default());
        begin(&mut r, &mut cpu, &mut log, 0x40, false);
        cpu.rip = 0x42; // the exit came with RIP already past the OUT
        r.write_exit(&mut cpu, &mut log);
        step(&mut r, &mut cpu, &mut log, 0x43); // no trap after the OUT: the next step is the NOP's
        assert_eq!(log.retired, vec![(0x40, InsnClass::Other), (0x42, InsnClass::Other)]);
        // A write exit before RIP moved: the step that follows retires it.
        let mut cpu = mock(&[(0x40, OUT), (0x42, NOP)]);
        let (mut r, mut log) = (Retirement::new(true), Log::default());
        begin(&mut r, &mut cpu, &mut log, 0x40, false);
        r.write_exit(&mut cpu, &mut log);
        step(&mut r, &mut cpu, &mut log, 0x42);
        assert_eq!(log.retired, vec![(0x40, InsnClass::Other)]);
    }

    #[test]
    fn int_n_is_delivered_and_its_handler_stepped() {
        let mut cpu = mock(&[(0x50, &[0xcd, 0xf1]), (0x52, NOP), (0x900, NOP), (0x901, &[0x48, 0xcf])]);
        cpu.handler = 0x900;
        let (mut r, mut log) = (Retirement::new(true), Log::default());
        begin(&mut r, &mut cpu, &mut log, 0x50, false);
        assert_eq!(cpu.rip, 0x900, "INT n delivered by the VMM");
        step(&mut r, &mut cpu, &mut log, 0x901); // the handler's NOP; IRETQ is run by the VMM too
        assert_eq!(cpu.rip, 0x52);
        step(&mut r, &mut cpu, &mut log, 0x53);
        let classes: Vec<InsnClass> = log.retired.iter().map(|x| x.1).collect();
        use InsnClass::*;
        assert_eq!(classes, vec![SoftInt(0xf1), Other, Iret, Other]);
    }

    #[test]
    fn rdpmc_reads_before_it_retires_and_a_fault_is_left_to_the_guest() {
        let mut cpu = mock(&[(0x60, &[0x0f, 0x33]), (0x62, NOP)]);
        let (mut r, mut log) = (Retirement::new(true), Log::default());
        begin(&mut r, &mut cpu, &mut log, 0x60, false);
        assert_eq!((cpu.rip, log.rdpmc_reads), (0x62, 1));
        assert_eq!(log.retired, vec![(0x60, InsnClass::Rdpmc)]);
        let mut cpu = mock(&[(0x60, &[0x0f, 0x33])]);
        cpu.gp_on_rdpmc = true;
        let (mut r, mut log) = (Retirement::new(true), Log::default());
        begin(&mut r, &mut cpu, &mut log, 0x60, false);
        assert_eq!(cpu.rip, 0x60, "the guest runs it and takes the #GP");
        step(&mut r, &mut cpu, &mut log, 0x700); // in the #GP handler
        assert!(log.retired.is_empty(), "a faulting instruction does not retire");
    }

    #[test]
    fn an_instruction_the_vmm_accounted_for_retires_nothing_more() {
        let mut cpu = mock(&[(0x80, &[0x0f, 0x30]), (0x82, NOP)]);
        let (mut r, mut log) = (Retirement::new(true), Log::default());
        begin(&mut r, &mut cpu, &mut log, 0x80, true); // a WRMSR whose exit started stepping
        assert_eq!(r.retired_early(), None, "its second exit is not a second retirement");
        step(&mut r, &mut cpu, &mut log, 0x80); // a trap before it completed: still accounted
        step(&mut r, &mut cpu, &mut log, 0x82);
        step(&mut r, &mut cpu, &mut log, 0x83);
        assert_eq!(log.retired, vec![(0x82, InsnClass::Other)]);
    }

    #[test]
    fn each_instruction_counts_at_its_privilege_level() {
        const SYSCALL: &[u8] = &[0x0f, 0x05];
        const SYSRET: &[u8] = &[0x48, 0x0f, 0x07];
        // User NOP, SYSCALL into the kernel's NOP, SYSRET back to a user NOP.
        let mut cpu = mock(&[(0x100, NOP), (0x101, SYSCALL), (0x900, NOP), (0x901, SYSRET), (0x103, NOP)]);
        cpu.user = true;
        let (mut r, mut log) = (Retirement::new(true), Log::default());
        begin(&mut r, &mut cpu, &mut log, 0x100, false);
        step(&mut r, &mut cpu, &mut log, 0x101);
        cpu.user = false;
        step(&mut r, &mut cpu, &mut log, 0x900); // SYSCALL retired: a user instruction
        step(&mut r, &mut cpu, &mut log, 0x901);
        cpu.user = true;
        step(&mut r, &mut cpu, &mut log, 0x103); // SYSRET retired: a kernel instruction
        step(&mut r, &mut cpu, &mut log, 0x104);
        assert_eq!(log.retired.len(), 5);
        assert_eq!(log.user, vec![0x100, 0x101, 0x103]);
    }

    #[test]
    fn a_syscall_the_vmm_runs_retires_in_user_mode_and_stepping_goes_on_in_the_kernel() {
        const SYSCALL: &[u8] = &[0x0f, 0x05];
        let mut cpu = mock(&[(0x100, SYSCALL), (0x900, NOP), (0x901, NOP)]);
        (cpu.user, cpu.runs_syscall, cpu.handler) = (true, true, 0x900);
        let (mut r, mut log) = (Retirement::new(true), Log::default());
        begin(&mut r, &mut cpu, &mut log, 0x100, false);
        assert_eq!(cpu.rip, 0x900, "the kernel's entry is stepped from its first instruction");
        step(&mut r, &mut cpu, &mut log, 0x901);
        assert_eq!(log.retired, vec![(0x100, InsnClass::Syscall64), (0x900, InsnClass::Other)]);
        assert_eq!(log.user, vec![0x100]);
    }

    #[test]
    fn a_delivered_fault_retires_nothing_and_its_handler_is_stepped() {
        let mut cpu = mock(&[(0x400, &[0x0f, 0x0b]), (0x700, &[0x90])]); // ud2; the #UD handler's nop
        let (mut r, mut log) = (Retirement::new(true), Log::default());
        begin(&mut r, &mut cpu, &mut log, 0x400, false);
        r.delivered(&mut cpu, &mut log, 0x700);
        assert!(log.retired.is_empty(), "the UD2 faulted");
        assert_eq!(r.rip(), 0x700);
        step(&mut r, &mut cpu, &mut log, 0x701);
        assert_eq!(log.retired.len(), 1, "the handler's NOP: {:?}", log.retired);
    }

    #[test]
    fn a_user_fault_retires_the_handlers_first_instruction_in_the_kernel() {
        // A user load faults; the host delivers #PF and traps after the handler's first
        // instruction: one kernel instruction retired, not a user one.
        let mut cpu = mock(&[(0x100, &[0x8b, 0x00]), (0xa00, NOP), (0xa01, NOP)]);
        cpu.user = true;
        let (mut r, mut log) = (Retirement::new(true), Log::default());
        begin(&mut r, &mut cpu, &mut log, 0x100, false);
        cpu.user = false;
        step(&mut r, &mut cpu, &mut log, 0xa01);
        step(&mut r, &mut cpu, &mut log, 0xa02);
        assert_eq!(log.retired.len(), 2);
        assert!(log.user.is_empty(), "{:?}", log.user);
    }
}
