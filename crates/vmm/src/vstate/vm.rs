//! Running a built VM to its end: vCPU threads, the NMI source, timeouts and signals, and
//! the report. `builder.rs` builds it.

use crate::config::VmConfig;
use crate::devices::{AgentData, Console};
use crate::error::VmError;
use crate::host::pvm::native::Execution;
use crate::stats::VmStats;
use crate::vpmu::report::PmuReport;
use crate::vstate::exit::VmEnd;
use crate::vstate::kick;
use crate::vstate::vcpu::{Shared, Vcpu};
use kvm_ioctls::{Kvm, VmFd};
use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};
use vm_memory::GuestMemoryMmap;

/// The result of a run.
#[derive(Debug)]
pub struct RunReport {
    /// Why the VM stopped.
    pub end: VmEnd,
    /// VM exits, vPMU and timing statistics, all vCPUs merged.
    pub stats: VmStats,
    /// The guest's serial console (its bytes when captured).
    pub console: Console,
    /// What the guest's perf agent sent.
    pub agent: AgentData,
    /// Exact backend with `trace_rips`: retired instructions per RIP, all vCPUs.
    pub rip_profile: std::collections::HashMap<u64, u64>,
    /// What the VMM's samplers took (`VmConfig::sampling`), every vCPU.
    pub samples: crate::profiling::sampler::Samples,
    /// The guest TSC's frequency, kHz (0: unknown): agent TSCs to time.
    pub tsc_khz: u64,
    /// What the VMM saw of the counts, per vCPU (`stat -a`, and a run cut short).
    pub vcpu_counts: Vec<crate::profiling::counts::VcpuCounts>,
}

/// A built VM, ready to run.
#[derive(Debug)]
pub struct Vm {
    pub(crate) _kvm: Kvm,
    pub(crate) _vm: Arc<VmFd>,
    pub(crate) _mem: GuestMemoryMmap,
    pub(crate) pmu_report: Option<PmuReport>,
    pub(crate) vcpus: Vec<Vcpu>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) ends: mpsc::Receiver<VmEnd>,
    pub(crate) console: Console,
    pub(crate) timeout: Option<Duration>,
    pub(crate) nmi_interval: Option<Duration>,
    /// The guest agent's workload is running (NMIs from the host NMI source only then).
    pub(crate) in_workload: Arc<AtomicBool>,
    pub(crate) execution: Execution,
    pub(crate) cpu: crate::arch::x86_64::identity::CpuReport,
    pub(crate) tsc_khz: u64,
    /// A Linux guest's whole command line (for `--stats`).
    pub(crate) kernel_cmdline: Option<String>,
}

/// How long the VMM waits for a vCPU thread to leave its loop once the VM has ended.
const STOP_GRACE: Duration = Duration::from_secs(2);

impl Vm {
    /// Build the VM (see `builder`).
    pub fn build(config: &VmConfig) -> Result<Vm, VmError> {
        crate::builder::build(config)
    }

    /// Wait for the first end (or the timeout), acting as the NMI source meanwhile.
    fn wait_for_end(
        &self,
        started: Instant,
        threads: &[thread::JoinHandle<crate::vstate::vcpu::VcpuResult>],
        nmi_target: Option<&AtomicBool>,
    ) -> VmEnd {
        let deadline = self.timeout.map(|t| started + t);
        // Look for SIGINT/SIGTERM this often while waiting.
        const SIGNAL_POLL: Duration = Duration::from_millis(50);
        loop {
            if let Some(signal) = kick::termination() {
                return VmEnd::Signal { signal };
            }
            let now = Instant::now();
            let until_deadline = deadline.map(|d| d.saturating_duration_since(now));
            let wait = match (self.nmi_interval, until_deadline) {
                (Some(i), Some(d)) => i.min(d),
                (Some(i), None) => i,
                (None, Some(d)) => d,
                (None, None) => SIGNAL_POLL,
            }
            .min(SIGNAL_POLL);
            match self.ends.recv_timeout(wait) {
                Ok(end) => return end,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return VmEnd::Failed { vcpu: 0, reason: "all vCPUs exited".into() }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if let (Some(t), Some(d)) = (self.timeout, deadline) {
                if Instant::now() >= d {
                    return VmEnd::timeout(t);
                }
            }
            // A guest without its IDT yet would die of an NMI, as on hardware: the source
            // fires only while the guest agent's workload runs.
            let nmi_due = self.nmi_interval.is_some_and(|i| i <= SIGNAL_POLL);
            if let (true, Some(target), true) = (nmi_due, nmi_target, self.in_workload.load(Ordering::Acquire)) {
                target.store(true, Ordering::Release);
                kick::kick(threads[0].as_pthread_t());
            }
        }
    }

    /// The report of a VM that did not start: the VMM could not be confined.
    fn refused(self, reason: String, started: Instant) -> RunReport {
        let stats = VmStats { wall_ns: started.elapsed().as_nanos() as u64, ..VmStats::default() };
        RunReport {
            end: VmEnd::Failed { vcpu: 0, reason },
            stats,
            console: self.console,
            agent: AgentData::default(),
            rip_profile: Default::default(),
            samples: Default::default(),
            tsc_khz: self.tsc_khz,
            vcpu_counts: Vec::new(),
        }
    }

    /// Run every vCPU on its own thread until the VM ends, then stop and join them all.
    pub fn run(mut self, started: Instant) -> RunReport {
        kick::install_handler();
        kick::catch_termination();
        // Before the guest's first instruction: the vCPU threads inherit this filter.
        if let Err(reason) = crate::confine::confine_thread(crate::confine::ThreadKind::Vmm) {
            return self.refused(reason.to_string(), started);
        }
        let mut threads = Vec::new();
        let nmi_target = self.vcpus.first().map(Vcpu::nmi_request);
        for vcpu in self.vcpus.drain(..) {
            let name = format!("vcpu{}", vcpu.index());
            let handle = thread::Builder::new().name(name).spawn(move || vcpu.run()).expect("spawning a vCPU thread");
            threads.push(handle);
        }
        let end = self.wait_for_end(started, &threads, nmi_target.as_deref());
        self.shared.stop.store(true, Ordering::SeqCst);
        // Kick until every thread has left KVM_RUN (a halted vCPU blocks there), for as long
        // as a stop may take: a thread still busy after that is left behind, so that a run
        // ends when told whatever a vCPU thread is stuck in.
        let kicked = Instant::now();
        while threads.iter().any(|t| !t.is_finished()) && kicked.elapsed() < STOP_GRACE {
            for t in threads.iter().filter(|t| !t.is_finished()) {
                kick::kick(t.as_pthread_t());
            }
            thread::sleep(Duration::from_millis(1));
        }
        let mut stats = VmStats::default();
        let mut pmu_report = self.pmu_report.take();
        let mut rip_profile = std::collections::HashMap::new();
        let mut samples = crate::profiling::sampler::Samples::default();
        let mut vcpu_counts = Vec::new();
        for t in threads {
            if !t.is_finished() {
                let name = t.thread().name().unwrap_or("a vCPU").to_owned();
                eprintln!("perfvm: {name} did not stop within {STOP_GRACE:?}: left behind, its statistics left out");
                continue;
            }
            let mut result = t.join().expect("vCPU thread panicked");
            vcpu_counts.push(std::mem::take(&mut result.counts));
            samples.taken.append(&mut result.samples.taken);
            samples.dropped += result.samples.dropped;
            stats.merge_vcpu(&result.stats);
            for (rip, n) in result.pmu.as_mut().and_then(|p| p.take_rip_profile()).unwrap_or_default() {
                *rip_profile.entry(rip).or_default() += n;
            }
            if let (Some(report), Some(pmu)) = (pmu_report.as_mut(), result.pmu.as_ref()) {
                report.add_vcpu(pmu);
            }
        }
        if let Some(report) = pmu_report.as_mut() {
            report.finish();
        }
        stats.pmu = pmu_report;
        stats.execution = Some(self.execution.clone());
        stats.cpu = Some(self.cpu.clone());
        stats.kernel_cmdline = self.kernel_cmdline.clone();
        stats.wall_ns = started.elapsed().as_nanos() as u64;
        stats.first_console_byte_ns = self.console.first_byte().map(|t| (t - started).as_nanos() as u64);
        let mut bus = self.shared.bus.lock().unwrap();
        stats.unclaimed_ports = bus.unclaimed.iter().map(|(p, n)| (format!("{p:#x}"), *n)).collect();
        stats.console_bytes_dropped = self.console.dropped();
        if matches!(end, VmEnd::Signal { .. } | VmEnd::Timeout { .. }) {
            if let Some(agent) = bus.agent.as_mut() {
                agent.drain_unsent_samples();
            }
        }
        let agent = bus.agent.as_mut().map(|a| std::mem::take(&mut a.data)).unwrap_or_default();
        drop(bus);
        samples.taken.sort_by_key(|s| s.time_ns);
        RunReport { end, stats, console: self.console, agent, rip_profile, samples, tsc_khz: self.tsc_khz, vcpu_counts }
    }
}
