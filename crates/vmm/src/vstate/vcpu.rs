//! One vCPU thread: the request step, KVM_RUN and its exit handled in one pass
//! (`dispatch::handle_exit`), repeat until the VM ends.

use crate::backends::exact::stepping::Owed;
use crate::backends::exact::stepping::StepExit;
use crate::devices::PioBus;
use crate::host::pvm::syscall_entry::{DebugExit, SyscallRepair};
use crate::stats::VcpuStats;
use crate::vpmu::{NmiSource, VcpuPmu};
use crate::vstate::dispatch::{failed, handle_exit, Emulation, ExitParts, ExitVcpu};
use crate::vstate::exit::VmEnd;
use crate::vstate::guest_debug::GuestDebug;
use crate::vstate::kick;
use crate::vstate::requests::RequestOrder;
use crate::vstate::softint::FlagHome;
use kvm_ioctls::{VcpuExit, VcpuFd, VmFd};
use pmu::MsrAccess;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use vm_memory::GuestMemoryMmap;

/// State every vCPU thread of a VM shares.
#[derive(Debug)]
pub struct Shared {
    /// The port-IO devices.
    pub bus: Mutex<PioBus>,
    /// Set once the VM has ended; every vCPU leaves its loop.
    pub stop: AtomicBool,
    /// Where ends of the VM go; the VM waits for the first.
    pub ends: Mutex<Sender<VmEnd>>,
}

impl Shared {
    /// Report an end of the VM and ask every vCPU to stop.
    pub fn end(&self, end: VmEnd) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.ends.lock().unwrap().send(end);
    }
}

/// What every vCPU of a VM is given alike (the builder fills it in once).
#[derive(Debug, Clone)]
pub(crate) struct VcpuCommon {
    /// What every vCPU of the VM shares at run time.
    pub shared: Arc<Shared>,
    /// The KVM VM (a PMI by LVTPC vector is sent through it as an MSI).
    pub vm: Arc<VmFd>,
    /// Guest memory.
    pub mem: GuestMemoryMmap,
    /// Order of the PMU and NMI requests before each entry.
    pub order: RequestOrder,
    /// Count each vCPU thread's syscalls for the statistics.
    pub count_syscalls: bool,
    /// The vCPUs run natively (their VIF pages are registered).
    pub native: bool,
    /// The guest agent's workload runs (its exits are counted apart).
    pub in_workload: Arc<AtomicBool>,
    /// Sample the vCPUs from the VMM (`record -a`), times counted from `epoch`.
    pub sampling: Option<crate::profiling::sampler::SamplingConfig>,
    /// The guest image's CFI, for samples' call chains (`--call-graph dwarf`).
    pub unwinder: Option<Arc<crate::profiling::unwind::GuestUnwinder>>,
    /// When the VM was built.
    pub epoch: Instant,
    /// The guest TSC's frequency, kHz (0: unknown).
    pub tsc_khz: u64,
    /// The VMM's INT3s on the guest kernel's RDPMCs (`rdpmc_traps`).
    pub rdpmc_traps: Arc<crate::vpmu::rdpmc_traps::RdpmcTraps>,
}

/// A vCPU and its loop.
#[derive(Debug)]
pub struct Vcpu {
    /// The vCPU's index (its APIC ID).
    index: u32,
    fd: VcpuFd,
    common: VcpuCommon,
    /// Its virtual PMU, when the VM has one.
    pmu: Option<VcpuPmu>,
    stats: VcpuStats,
    /// An NMI requested from outside the PMU (NMI port, NMI source thread).
    nmi_request: Arc<AtomicBool>,
    /// Retired instructions (single-stepping) after which a requested NMI is due.
    nmi_due: Option<u64>,
    /// A Linux guest's user-mode SYSCALL, completed by the VMM (`syscall_entry`).
    syscall_repair: SyscallRepair,
    /// KVM guest debug, which the exact backend's stepping and the repair share.
    guest_debug: GuestDebug,
    /// The vCPU's events KVM synced out at the last exit are current: it was a signal's
    /// (nothing dispatched, no event ioctl since), and KVM copies them out (a vPMU).
    events_current: bool,
    /// RIP of an emulation failure re-entered as text another vCPU changed (`complete_or_stop`),
    /// until an exit of another kind.
    refetched_at: Option<u64>,
    /// The VMM's sampler on this thread (`record -a`).
    sampler: Option<crate::profiling::sampler::Sampler>,
    /// The host TSC when KVM_RUN last returned.
    exited_at: u64,
    /// Thread CPU time when KVM_RUN last returned for a signal (an overflow notification
    /// is one): what handling it costs the VMM, in the same time the software clock counts.
    signal_exit_cpu_ns: Option<u64>,
}

/// What a vCPU thread hands back when the VM ends.
#[derive(Debug)]
pub struct VcpuResult {
    /// Its statistics.
    pub stats: VcpuStats,
    /// Its virtual PMU (telemetry, RIP profile), when it had one.
    pub pmu: Option<VcpuPmu>,
    /// What the VMM's sampler took.
    pub samples: crate::profiling::sampler::Samples,
    /// What the VMM saw of the counts (`stat -a`, and a run cut short).
    pub counts: crate::profiling::counts::VcpuCounts,
}

impl Vcpu {
    /// vCPU `index` of a VM, on KVM vCPU `fd`, with its virtual PMU if the VM has one.
    pub(crate) fn new(index: u32, fd: VcpuFd, pmu: Option<VcpuPmu>, common: VcpuCommon) -> Self {
        Vcpu {
            index,
            fd,
            common,
            pmu,
            stats: VcpuStats::default(),
            nmi_request: Arc::new(AtomicBool::new(false)),
            nmi_due: None,
            syscall_repair: SyscallRepair::default(),
            guest_debug: GuestDebug::default(),
            events_current: false,
            refetched_at: None,
            sampler: None,
            exited_at: 0,
            signal_exit_cpu_ns: None,
        }
    }

    /// The vCPU's index (its APIC ID).
    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    /// Where an NMI for this vCPU is requested from outside (the NMI source thread).
    pub(crate) fn nmi_request(&self) -> Arc<AtomicBool> {
        self.nmi_request.clone()
    }

    /// Run until the VM ends; returns this vCPU's statistics and PMU.
    pub fn run(mut self) -> VcpuResult {
        kick::register(self.fd.get_kvm_run());
        let syscalls =
            if self.common.count_syscalls { crate::stats::syscount::SyscallCounter::start().ok() } else { None };
        let kvm_stats = crate::stats::kvm::KvmStatsFile::open(&self.fd);
        self.sampler = self.start_sampler();
        // (A stepping backend wants steps whenever a counter is programmed: from the start.)
        if self.pmu.as_ref().is_some_and(VcpuPmu::steps_from_start) {
            // Each step retires at the privilege level in CS: have KVM copy it out.
            self.fd.set_sync_valid_reg(kvm_ioctls::SyncReg::SystemRegister);
            // The block engine plans from the registers at the stop: have KVM copy them out.
            if self.pmu.as_ref().is_some_and(VcpuPmu::runs_blocks) {
                self.fd.set_sync_valid_reg(kvm_ioctls::SyncReg::Register);
            }
            if crate::host::caps().steps_by_cpu_tf() {
                if let Err(e) = self.guest_debug.catch_stray_steps(&self.fd) {
                    self.common.shared.end(failed(&self, format!("KVM_SET_GUEST_DEBUG: {e}")));
                }
            }
        }
        // A PMI's NMI rides the next KVM_RUN in the synced events instead of a KVM_NMI
        // ioctl of its own (`nmi`): KVM copies the events out at every exit.
        if self.pmu.is_some() {
            self.fd.set_sync_valid_reg(kvm_ioctls::SyncReg::VcpuEvents);
        }
        // Confined after its setup (the statistics file, the syscall counter), before the
        // guest's first instruction on this vCPU.
        if let Err(reason) = crate::confine::confine_thread(crate::confine::ThreadKind::Vcpu) {
            self.common.shared.stop.store(true, Ordering::Release);
            self.common.shared.end(failed(&self, reason.to_string()));
        }
        // The loop times itself with the TSC: clock_gettime's vDSO and library pages would be
        // more lines to fetch on every exit.
        let tsc = self.tsc();
        let mut exits = crate::stats::ExitTally::default();
        while !self.common.shared.stop.load(Ordering::Acquire) {
            self.process_requests();
            self.deliver_agent_samples();
            if let (Some(pmu), Some(t0)) = (&mut self.pmu, self.signal_exit_cpu_ns.take()) {
                pmu.note_notification_cost(crate::vpmu::thread_cpu_ns().saturating_sub(t0));
            }
            self.sync_sample_regs();
            let (reason, emulation) = handle_exit(&mut self);
            // The registers KVM synced out at this exit are there until the next entry.
            self.sample();
            let handled = tsc.cycles_to_ns(crate::backends::host_tsc().saturating_sub(self.exited_at));
            exits.record(reason, handled, self.common.in_workload.load(Ordering::Relaxed));
            if let Emulation::End(end) = emulation {
                self.common.shared.end(end);
            }
        }
        exits.into_stats(&mut self.stats);
        self.stats.syscalls = syscalls.map(|c| c.read());
        self.stats.mode = crate::host::caps().execution_name(self.common.native);
        self.stats.kvm = kvm_stats.map(|s| s.read()).unwrap_or_default();
        kick::unregister();
        let mut counts = crate::profiling::counts::VcpuCounts {
            vcpu: self.index,
            thread_ns: crate::vpmu::thread_cpu_ns(),
            ..Default::default()
        };
        if let Some(pmu) = &mut self.pmu {
            (counts.counters, counts.retired) = pmu.finish();
        }
        let samples = self.sampler.take().map(|s| s.finish()).unwrap_or_default();
        VcpuResult { stats: self.stats, pmu: self.pmu, samples, counts }
    }

    /// The VMM's sampler on this thread, if the VM samples (a failure to start it is said
    /// once and the run goes on unsampled).
    fn start_sampler(&mut self) -> Option<crate::profiling::sampler::Sampler> {
        let config = self.common.sampling?;
        match crate::profiling::sampler::Sampler::start(
            config,
            self.common.unwinder.clone(),
            self.common.tsc_khz,
            self.index,
            &mut self.fd,
            self.common.epoch,
        ) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("perfvm: vCPU {}: cannot sample from the VMM: {e}", self.index);
                None
            }
        }
    }

    /// The host TSC's rate, which times the loop.
    fn tsc(&self) -> pmu::tsc::TscRate {
        pmu::tsc::TscRate::from_khz_or_1(self.common.tsc_khz)
    }

    /// The VMM's sample of this exit, if its sampling clock fired: the registers KVM synced
    /// out at the exit, so taken before any work that replaces them.
    fn sample(&mut self) {
        if let Some(s) = &mut self.sampler {
            s.after_exit(&self.fd, &self.common.mem);
        }
    }

    /// A step of the exact backend ended at `pc` as `exit` says; a requested NMI may fall due.
    fn stepped(&mut self, pc: u64, exit: StepExit) {
        if self.guest_debug.step() == crate::backends::exact::stepping::Debug::Off
            && crate::host::caps().steps_by_cpu_tf()
        {
            self.drop_stray_step();
            return;
        }
        if let StepExit::Delivered { .. } = exit {
            *self.stats.completed.entry("exception-entry").or_default() += 1;
        }
        if let Some(pmu) = &mut self.pmu {
            pmu.on_step(&self.fd, &self.common.mem, pc, exit);
            if self.nmi_due.is_some_and(|due| pmu.stats().steps >= due) {
                self.nmi_due = None;
                self.nmi_request.store(true, Ordering::Release);
            }
        }
    }

    /// A single-step trap while nothing is stepped: TF the guest saved while it was stepped
    /// (PUSHF, an exception's frame) came back after stepping ended. It is the VMM's: clear
    /// it, so the guest never sees a #DB of ours (a guest's own TF is taken for one too).
    fn drop_stray_step(&mut self) {
        const RFLAGS_TF: u64 = 1 << 8;
        if let Ok(mut regs) = self.fd.get_regs() {
            if regs.rflags & RFLAGS_TF != 0 {
                regs.rflags &= !RFLAGS_TF;
                let _ = self.fd.set_regs(&regs);
                *self.stats.completed.entry("stray-step").or_default() += 1;
            }
        }
    }

    /// The samples the VMM takes for the guest's agent (PV page version 5) want the
    /// registers at every exit: have KVM sync them out from this entry on.
    fn sync_sample_regs(&mut self) {
        let Some(pmu) = &mut self.pmu else { return };
        let Some(wanted) = pmu.sample_regs_wanted() else { return };
        if wanted.regs {
            self.fd.set_sync_valid_reg(kvm_ioctls::SyncReg::Register);
        }
        if wanted.sregs {
            self.fd.set_sync_valid_reg(kvm_ioctls::SyncReg::SystemRegister);
        }
        pmu.sample_regs_synced();
    }

    /// Hand the samples the VMM took for the guest's agent to the agent channel, where the
    /// agent's own samples go (and their bound holds).
    fn deliver_agent_samples(&mut self) {
        let Some(pmu) = &mut self.pmu else { return };
        let samples = pmu.take_agent_samples();
        if samples.is_empty() {
            return;
        }
        let mut bus = self.common.shared.bus.lock().unwrap();
        if let Some(agent) = bus.agent.as_mut() {
            for (at, mut sample) in samples {
                sample.vcpu = self.index;
                agent.keep_vmm_sample(at, sample);
            }
        }
    }

    /// The request step before an entry, in `self.common.order` (see `requests`).
    fn process_requests(&mut self) {
        let pmu_nmi = |v: &mut Self| match &mut v.pmu {
            Some(pmu) => pmu.service(&v.common.vm, &v.fd, &v.common.mem, v.stats.run_ns) == Owed::Nmi,
            None => false,
        };
        match self.common.order {
            RequestOrder::PmiFirst => {
                let pmi = pmu_nmi(self);
                let external = self.nmi_request.swap(false, Ordering::AcqRel);
                self.inject_nmis(pmi, external);
                self.step_control(external);
            }
            RequestOrder::Legacy => {
                let external = self.nmi_request.swap(false, Ordering::AcqRel);
                self.inject_nmis(false, external);
                if pmu_nmi(self) {
                    if external {
                        self.stats.requests.both_pending += 1;
                    }
                    // Found after the NMI step: the final check cancels this entry.
                    self.cancelled_entry();
                    self.inject_nmis(true, false);
                }
                self.step_control(external);
            }
        }
    }

    /// Single-stepping for the coming entry, once every event for it is injected.
    fn step_control(&mut self, external_nmi: bool) {
        if let Some(pmu) = &mut self.pmu {
            let blocks_ok = self.nmi_due.is_none();
            pmu.before_entry(&self.fd, &mut self.guest_debug, &self.common.mem, external_nmi, blocks_ok);
        }
    }

    fn inject_nmis(&mut self, pmi: bool, external: bool) {
        let r = &mut self.stats.requests;
        if pmi && external {
            r.both_pending += 1;
            r.pmi_injected_first += 1;
        }
        r.pmi_nmis += u64::from(pmi);
        r.external_nmis += u64::from(external);
        if pmi {
            // Alone, after a signal's exit, the PMI's NMI goes in with the next entry's
            // events; an external NMI's ioctl would be overwritten by them, so both use it.
            if external || !self.queue_nmi_in_events() {
                self.nmi(NmiSource::Pmi);
            }
        }
        if external {
            self.nmi(NmiSource::External);
        }
    }

    /// One `KVM_NMI`, timed: the floor of PMI delivery.
    fn nmi(&mut self, source: NmiSource) {
        let t = crate::vpmu::stats::OpStart::now();
        let injected = self.fd.nmi();
        match (&mut self.pmu, injected) {
            (Some(p), Ok(())) => p.nmi_injected(t, source),
            (Some(p), Err(_)) => p.nmi_failed(source),
            // Without a vPMU only the guest's NMI port asks for NMIs, and nothing counts them.
            (None, _) => {}
        }
    }

    /// Queue a PMI's NMI in the events KVM synced out at a signal's exit, for KVM_RUN to set
    /// on entry (KVM_SYNC_X86_EVENTS, as KVM_SET_VCPU_EVENTS would): no ioctl of its own.
    /// False where those events may be stale (another exit, or already queued), and while
    /// the exact backend single-steps (its event window asks KVM whether an NMI waits).
    fn queue_nmi_in_events(&mut self) -> bool {
        let stepping = self.pmu.as_ref().is_some_and(VcpuPmu::is_stepping);
        if !std::mem::take(&mut self.events_current) || stepping {
            return false;
        }
        let events = &mut self.fd.sync_regs_mut().events;
        events.nmi.pending = events.nmi.pending.saturating_add(1);
        events.flags |= kvm_bindings::KVM_VCPUEVENT_VALID_NMI_PENDING;
        self.fd.set_sync_dirty_reg(kvm_ioctls::SyncReg::VcpuEvents);
        if let Some(p) = &mut self.pmu {
            p.nmi_queued();
        }
        true
    }

    /// A KVM_RUN that returns before running a guest instruction.
    fn cancelled_entry(&mut self) {
        self.stats.requests.cancelled_entries += 1;
        self.stats.entries += 1;
        self.run_no_instruction();
    }

    /// One KVM_RUN with `immediate_exit` set: KVM finishes what the last exit left (an
    /// OUT's completion, injected events) and returns before any guest instruction.
    fn run_no_instruction(&mut self) {
        self.fd.set_kvm_immediate_exit(1);
        let _ = self.fd.run();
        self.fd.set_kvm_immediate_exit(0);
    }

    /// The host's emulator rejected an instruction: complete it here (`complete`) and go
    /// on, or end the run with the instruction in the message.
    fn complete_or_stop(&mut self) -> Option<VmEnd> {
        // SAFETY: the exit reason was KVM_EXIT_INTERNAL_ERROR, so `internal` is the live union member.
        let suberror = unsafe { self.fd.get_kvm_run().__bindgen_anon_1.internal.suberror };
        let insn = if suberror == kvm_bindings::KVM_INTERNAL_ERROR_EMULATION {
            if let Some(done) = self.trapped_rdpmc() {
                return done;
            }
            let home = match self.common.native {
                true => FlagHome::Vif(crate::host::pvm::native::vif_page(self.index)),
                false => FlagHome::Rflags,
            };
            match crate::host::pvm::complete::complete(&self.fd, &self.common.mem, home) {
                crate::host::pvm::complete::Completed::Done(kind) => {
                    *self.stats.completed.entry(kind).or_default() += 1;
                    return None;
                }
                // What stands at RIP now may not be what the emulator rejected: another vCPU
                // patched it in between (text_poke_bp puts an INT3 on a static key or an
                // alternative, then the new bytes). Run it once more as it is now; the same
                // failure twice at one RIP stands.
                crate::host::pvm::complete::Completed::Left(insn) => {
                    let rip = self.rip();
                    if self.refetched_at != Some(rip) {
                        self.refetched_at = Some(rip);
                        *self.stats.completed.entry("re-entered").or_default() += 1;
                        return None;
                    }
                    insn
                }
            }
        } else {
            None
        };
        Some(VmEnd::InternalError { vcpu: self.index, suberror, rip: self.rip(), insn })
    }
}

impl Vcpu {
    /// The trap at RIP is one of the VMM's RDPMC traps: run the RDPMC on the vPMU (EDX:EAX,
    /// RIP past the two bytes), or give the guest the #GP the model says. None: not a trap.
    fn trapped_rdpmc(&mut self) -> Option<Option<VmEnd>> {
        if self.common.rdpmc_traps.is_empty() {
            return None;
        }
        let regs = self.fd.get_regs().ok()?;
        self.run_trapped_rdpmc(regs)
    }

    /// The registers at this exit: as KVM synced them out where the block engine has it do so
    /// at every exit (no ioctl), else read.
    fn exit_regs(&self) -> Option<kvm_bindings::kvm_regs> {
        match self.pmu.as_ref().is_some_and(VcpuPmu::runs_blocks) {
            true => Some(self.fd.sync_regs().regs),
            false => self.fd.get_regs().ok(),
        }
    }

    /// The block engine's port write at a block's end (hosts whose breakpoints do not stop
    /// the guest): the block ran to it. The OUT is completed and undone (RIP back on the
    /// end, whose bytes the block's stop puts back), and the block retires.
    fn block_end_trapped(&mut self) -> Option<Option<VmEnd>> {
        let end = self.pmu.as_ref()?.planted_end()?;
        self.planted_out_at(|at| at == end)?;
        if let Err(end) = self.undo_planted_out(end, "block end") {
            return Some(Some(end));
        }
        self.stepped(end, StepExit::Stepped);
        Some(None)
    }

    /// The port write planted on a watched handler's entry while stepping (hosts whose
    /// breakpoints do not stop the guest): the CPU delivered that vector. The OUT is
    /// completed and undone (RIP back on the entry, its bytes put back), and stepping goes on
    /// in the handler as at a watch's breakpoint.
    fn watch_trapped(&mut self) -> Option<Option<VmEnd>> {
        // (Planted only while stepping: an RDPMC trap costs no register read for it.)
        let pmu = self.pmu.as_ref().filter(|pmu| pmu.is_stepping())?;
        let entry = self.planted_out_at(|at| pmu.watch_planted(at))?;
        // Completed first: a host without next-RIP decodes the OUT to step past it.
        if let Err(end) = self.undo_planted_out(entry, "handler entry") {
            return Some(Some(end));
        }
        let vector = self.pmu.as_mut()?.watch_trapped(&self.common.mem, entry)?;
        self.stepped(entry, StepExit::Delivered { vector });
        Some(None)
    }

    /// Where the port write this exit stopped at was planted, if `planted` says it was one
    /// of the VMM's: SVM and VMX exit with RIP on the OUT, kvm_pvm's emulator past it.
    fn planted_out_at(&self, planted: impl Fn(u64) -> bool) -> Option<u64> {
        let rip = self.exit_regs()?.rip;
        [rip, rip.wrapping_sub(2)].into_iter().find(|&at| planted(at))
    }

    /// Complete the OUT of a port write the VMM planted at `at` and put RIP back there, as
    /// if the guest had stopped before it.
    fn undo_planted_out(&mut self, at: u64, what: &str) -> Result<(), VmEnd> {
        self.run_no_instruction();
        let mut regs = match self.exit_regs() {
            Some(regs) if regs.rip == at.wrapping_add(2) => regs,
            Some(regs) => return Err(failed(self, format!("{what} at {at:#x}: RIP {:#x}", regs.rip))),
            None => return Err(failed(self, format!("{what}: KVM_GET_REGS failed"))),
        };
        regs.rip = at;
        if let Err(e) = self.fd.set_regs(&regs) {
            return Err(failed(self, format!("{what}: KVM_SET_REGS: {e}")));
        }
        // What the VMM reads of this exit (KVM_SYNC_X86_REGS) says so too.
        self.fd.sync_regs_mut().regs.rip = at;
        Ok(())
    }

    /// An `OUT` to the RDPMC trap's port (hardware hosts): KVM completes the OUT at the next
    /// KVM_RUN, stepping RIP past it, so an immediate-exit run completes it first; then it is
    /// an RDPMC at the trap's address. A write to the port from anywhere else is ignored.
    fn port_trapped_rdpmc(&mut self) -> Option<VmEnd> {
        let at = self.fd.get_regs().ok()?.rip;
        self.run_no_instruction();
        let mut regs = self.fd.get_regs().ok()?;
        if regs.rip != at.wrapping_add(2) {
            return None;
        }
        regs.rip = at;
        self.run_trapped_rdpmc(regs).flatten()
    }

    fn run_trapped_rdpmc(&mut self, mut regs: kvm_bindings::kvm_regs) -> Option<Option<VmEnd>> {
        let mut bytes = [0u8; 2];
        crate::vstate::linear::LinearMemory::read(
            &mut crate::vstate::linear::VcpuLinear::new(&self.fd, &self.common.mem),
            regs.rip,
            &mut bytes,
        )?;
        if !self.common.rdpmc_traps.is_trap(regs.rip, &bytes) {
            return None;
        }
        *self.stats.completed.entry("rdpmc").or_default() += 1;
        let value = self.pmu.as_mut().map_or(MsrAccess::Fault, |p| p.rdpmc(regs.rcx as u32));
        let done = match value {
            MsrAccess::Ok(value) => {
                regs.rax = value & 0xffff_ffff;
                regs.rdx = value >> 32;
                regs.rip += 2;
                self.fd.set_regs(&regs).map_err(|e| format!("RDPMC: KVM_SET_REGS: {e}"))
            }
            // (A fault: RIP stays on the trap.)
            MsrAccess::Fault => self
                .fd
                .set_regs(&regs)
                .and_then(|()| crate::vstate::inject::inject_gp(&self.fd))
                .map_err(|e| format!("RDPMC #GP: {e}")),
        };
        Some(done.err().map(|reason| failed(self, reason)))
    }
}

impl ExitVcpu for Vcpu {
    fn enter(&mut self) -> (Result<VcpuExit<'_>, kvm_ioctls::Error>, ExitParts<'_>) {
        let tsc = self.tsc();
        let entered = crate::backends::host_tsc();
        self.stats.entries += 1;
        let result = self.fd.run();
        self.exited_at = crate::backends::host_tsc();
        self.stats.run_ns += tsc.cycles_to_ns(self.exited_at.saturating_sub(entered));
        if let Some(pmu) = &mut self.pmu {
            pmu.guest_ran();
        }
        self.events_current = false;
        // A re-entered emulation failure is remembered only across emulation failures.
        if !matches!(result, Ok(VcpuExit::InternalError)) {
            self.refetched_at = None;
        }
        (result, ExitParts { bus: &self.common.shared.bus, pmu: self.pmu.as_mut() })
    }

    fn index(&self) -> u32 {
        self.index
    }

    fn rip(&self) -> u64 {
        self.fd.get_regs().map(|r| r.rip).unwrap_or(0)
    }

    fn mem(&self) -> &GuestMemoryMmap {
        &self.common.mem
    }

    fn interrupted(&mut self) {
        self.fd.set_kvm_immediate_exit(0);
        if self.pmu.is_some() {
            self.signal_exit_cpu_ns = Some(crate::vpmu::thread_cpu_ns());
            self.events_current = true;
        }
    }

    fn write_retired(&mut self) {
        if let Some(pmu) = &mut self.pmu {
            pmu.on_write_exit(&self.fd, &self.common.mem);
        }
    }

    fn nmi_requested(&mut self, after: u32) {
        match self.pmu.as_ref().filter(|p| p.is_stepping() && after > 0) {
            // The OUT itself has retired (at its exit): due after `after` more.
            Some(p) => self.nmi_due = Some(p.stats().steps + u64::from(after)),
            None => self.nmi_request.store(true, Ordering::Release),
        }
    }

    fn pv_register(&mut self, gpa: u64) {
        if let Some(pmu) = &mut self.pmu {
            pmu.pv_register(&self.fd, &self.common.mem, gpa);
        }
    }

    fn pv_doorbell(&mut self) {
        if let Some(pmu) = &mut self.pmu {
            pmu.pv_doorbell(&self.fd, &self.common.mem);
        }
    }

    fn pv_publish(&mut self) {
        if let Some(pmu) = &mut self.pmu {
            pmu.pv_publish(&self.fd, &self.common.mem);
        }
    }

    fn lstar_written(&mut self, entry: u64) {
        let (fd, debug, mem) = (&self.fd, &mut self.guest_debug, &self.common.mem);
        if let Err(e) = self.syscall_repair.lstar_written(fd, debug, mem, entry) {
            eprintln!("perfvm: vCPU {}: SYSCALL from user mode left to the host: {e}", self.index);
        }
    }

    fn debug_exit(&mut self, pc: u64, dr6: u64) -> Emulation {
        // Sampled first: the SYSCALL repair replaces the registers KVM synced out.
        self.sample();
        let (fd, debug, mem) = (&mut self.fd, &mut self.guest_debug, &self.common.mem);
        match self.syscall_repair.debug_exit(fd, debug, mem, pc) {
            Ok(DebugExit::Step) => {
                let exit = match self.guest_debug.watched_hit(dr6) {
                    Some(n) => StepExit::Delivered { vector: crate::backends::exact::handler_watch::VECTORS[n] },
                    None => StepExit::Stepped,
                };
                self.stepped(pc, exit);
            }
            Ok(DebugExit::Syscall) => {
                *self.stats.completed.entry("syscall").or_default() += 1;
                // The SYSCALL retired; stepping goes on at its entry.
                let entry = self.fd.sync_regs().regs.rip;
                self.stepped(entry, StepExit::Stepped);
            }
            Ok(DebugExit::Fault) => {}
            Err(e) => return Emulation::End(failed(self, e.to_string())),
        }
        Emulation::Handled
    }

    fn rdpmc_trap(&mut self) -> Emulation {
        // Sampled first: the KVM_RUN that completes the OUT replaces the synced registers.
        self.sample();
        if let Some(done) = self.block_end_trapped().or_else(|| self.watch_trapped()) {
            return done.into();
        }
        self.write_retired();
        self.port_trapped_rdpmc().into()
    }

    fn internal_error(&mut self) -> Emulation {
        self.complete_or_stop().into()
    }
}
