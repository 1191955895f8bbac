//! Building a VM from a configuration and running it to its end. The one place that wires
//! KVM, memory, loader, devices and vCPU threads together.

use crate::backends::exact::ExactSource;
use crate::backends::perf::{EventBudget, PerfMode, PerfSource};
use crate::boot::{self, BootParams};
use crate::devices::{AgentData, AgentPort, Console, FwCfg, PioBus, SerialPort, DEFAULT_MAX_SAMPLES};
use crate::exit::VmEnd;
use crate::kick;
use crate::kvm::{open_kvm, KvmError};
use crate::layout::{MAX_MEM_MIB, MAX_VCPUS, MIN_MEM_MIB};
use crate::loader::{load_kernel, BootProtocol, KernelImage, LoadError};
use crate::native::{self, Execution, NativeMode};
use crate::pmu_report::PmuReport;
use crate::requests::RequestOrder;
use crate::stats::VmStats;
use crate::vcpu::{Shared, Vcpu};
use crate::vpmu::{Backend, VcpuPmu};
use kvm_bindings::{kvm_enable_cap, KVM_CAP_X86_USER_SPACE_MSR, KVM_MSR_EXIT_REASON_FILTER};
use kvm_bindings::{kvm_mp_state, kvm_userspace_memory_region, CpuId, KVM_MAX_CPUID_ENTRIES, KVM_MP_STATE_RUNNABLE};
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use kvm_ioctls::{MsrFilterDefaultAction, MsrFilterRange, MsrFilterRangeFlags};
use pmu::{Pmu, PmuConfig, Policy};
use serde::Serialize;
use std::os::unix::thread::JoinHandleExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use thiserror::Error;
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

/// Everything needed to build and run a VM.
#[derive(Debug, Clone)]
pub struct VmConfig {
    /// Path of the kernel ELF.
    pub kernel: PathBuf,
    /// The kernel's name as the user gave it: the first word of the guest command line.
    pub kernel_arg0: String,
    pub mem_mib: u64,
    pub vcpus: u32,
    pub cmdline: String,
    pub timeout: Option<Duration>,
    /// Keep console output in memory instead of printing it.
    pub capture_console: bool,
    /// The virtual PMU, or None for a VM without one (CPUID 0xA reports version 0).
    pub pmu: Option<PmuSettings>,
    /// Most samples kept from the guest's perf agent; more are dropped and counted.
    pub max_samples: usize,
    /// Order of the PMU and NMI requests before each entry.
    pub request_order: RequestOrder,
    /// Inject an NMI into vCPU 0 this often while the guest agent's workload runs (a host
    /// NMI source, for the request-order bench).
    pub nmi_interval: Option<Duration>,
    /// Count the vCPU threads' syscalls (raw_syscalls:sys_enter) for `--stats`.
    pub count_syscalls: bool,
    /// Whether the vCPUs run natively (`--native`).
    pub native: NativeMode,
    /// The CPU the guest is told it runs on (`identity.rs`).
    pub cpu_vendor: crate::identity::CpuVendor,
}

/// Which backend counts for the virtual counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// Host perf_event_open (hardware events, or a software clock without a host PMU).
    Perf,
    /// Single-stepping: exact instruction and branch counts.
    Exact,
}

/// How the virtual PMU is built.
#[derive(Debug, Clone)]
pub struct PmuSettings {
    pub backend: BackendKind,
    pub policy: Policy,
    pub gp_counters: u8,
    /// Most host events the whole VM may hold open; None = counters x vCPUs.
    pub max_host_events: Option<usize>,
    /// Exact backend: record every retired instruction's RIP (the reference profile).
    pub trace_rips: bool,
    /// Accept the guest's paravirtual PMU page.
    pub pv: bool,
    /// The event filter (KVM_SET_PMU_EVENT_FILTER semantics).
    pub filter: Option<pmu::PmuEventFilter>,
    /// Software PEBS: advertise it and write PEBS records into the guest's DS buffer.
    pub pebs: bool,
    /// Most share of vCPU time, percent, spent handling overflow notifications before
    /// periods are stretched (perf backend; 100: never throttle).
    pub pmi_max_percent: u8,
}

impl Default for PmuSettings {
    fn default() -> Self {
        PmuSettings {
            backend: BackendKind::Perf,
            policy: Policy::default(),
            gp_counters: 4,
            max_host_events: None,
            trace_rips: false,
            pv: true,
            filter: None,
            pebs: false,
            pmi_max_percent: crate::throttle::DEFAULT_MAX_PERCENT,
        }
    }
}

impl Default for VmConfig {
    fn default() -> Self {
        VmConfig {
            kernel: PathBuf::new(),
            kernel_arg0: String::new(),
            mem_mib: 256,
            vcpus: 1,
            cmdline: String::new(),
            timeout: None,
            capture_console: false,
            pmu: Some(PmuSettings::default()),
            max_samples: DEFAULT_MAX_SAMPLES,
            request_order: RequestOrder::default(),
            nmi_interval: None,
            count_syscalls: false,
            native: NativeMode::default(),
            cpu_vendor: Default::default(),
        }
    }
}

/// Why a VM could not be built. All are the user's input or the host, reported in one line.
#[derive(Debug, Error)]
pub enum VmError {
    #[error(transparent)]
    Kvm(#[from] KvmError),
    #[error("guest file {path}: {reason}")]
    GuestFile { path: String, reason: String },
    #[error("guest file {path}: {source}")]
    Load { path: String, source: LoadError },
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("VM setup failed: {0}")]
    Setup(String),
    #[error("virtual PMU: {0}")]
    Pmu(#[from] pmu::ConfigError),
    /// `--native on` where the guest or the host cannot run natively.
    #[error("{0}")]
    Native(String),
}

fn setup<E: std::fmt::Display>(what: &'static str) -> impl FnOnce(E) -> VmError {
    move |e| VmError::Setup(format!("{what}: {e}"))
}

/// The result of a run.
#[derive(Debug)]
pub struct RunReport {
    pub end: VmEnd,
    pub stats: VmStats,
    pub console: Console,
    /// What the guest's perf agent sent.
    pub agent: AgentData,
    /// Exact backend with `trace_rips`: retired instructions per RIP, all vCPUs.
    pub rip_profile: std::collections::HashMap<u64, u64>,
}

/// Check the configuration and the guest image without touching KVM.
pub fn prepare(config: &VmConfig) -> Result<(KernelImage, Vec<u8>), VmError> {
    if !(1..=MAX_VCPUS).contains(&config.vcpus) {
        return Err(VmError::Config(format!("--vcpus must be between 1 and {MAX_VCPUS}")));
    }
    if !(MIN_MEM_MIB..=MAX_MEM_MIB).contains(&config.mem_mib) {
        return Err(VmError::Config(format!("--mem must be between {MIN_MEM_MIB} and {MAX_MEM_MIB} MiB")));
    }
    let path = config.kernel.display().to_string();
    let bytes = std::fs::read(&config.kernel).map_err(|e| VmError::GuestFile {
        path: path.clone(),
        reason: match e.kind() {
            std::io::ErrorKind::NotFound => "no such file".into(),
            _ => e.to_string(),
        },
    })?;
    let image = load_kernel(&bytes, config.mem_mib << 20).map_err(|source| VmError::Load { path, source })?;
    Ok((image, bytes))
}

/// A built VM, ready to run.
#[derive(Debug)]
pub struct Vm {
    _kvm: Kvm,
    _vm: Arc<VmFd>,
    _mem: GuestMemoryMmap,
    pmu_report: Option<PmuReport>,
    vcpus: Vec<Vcpu>,
    shared: Arc<Shared>,
    ends: mpsc::Receiver<VmEnd>,
    console: Console,
    timeout: Option<Duration>,
    nmi_interval: Option<Duration>,
    /// The guest agent's workload is running (NMIs from the host NMI source only then).
    in_workload: Arc<AtomicBool>,
    execution: Execution,
    cpu: crate::identity::CpuReport,
}

impl Vm {
    /// Build the VM: KVM objects, memory, image, boot data, devices, vCPUs.
    pub fn build(config: &VmConfig) -> Result<Vm, VmError> {
        let (image, bytes) = prepare(config)?;
        let kvm = open_kvm()?;
        let execution = native::decide(config.native, &image).map_err(VmError::Native)?;
        let vm = kvm.create_vm().map_err(setup("KVM_CREATE_VM"))?;
        let mem_size = config.mem_mib << 20;
        let mem =
            GuestMemoryMmap::from_ranges(&[(GuestAddress(0), mem_size as usize)]).map_err(setup("guest memory"))?;
        for (slot, region) in mem.iter().enumerate() {
            let host = mem.get_host_address(region.start_addr()).map_err(setup("guest memory"))?;
            let region = kvm_userspace_memory_region {
                slot: slot as u32,
                guest_phys_addr: region.start_addr().0,
                memory_size: region.len(),
                userspace_addr: host as u64,
                flags: 0,
            };
            // SAFETY: the region maps memory owned by `mem`, which outlives the VM fd (both in Vm).
            unsafe { vm.set_user_memory_region(region) }.map_err(setup("KVM_SET_USER_MEMORY_REGION"))?;
        }
        vm.set_tss_address(0xfffb_d000).map_err(setup("KVM_SET_TSS_ADDR"))?;
        vm.create_irq_chip().map_err(setup("KVM_CREATE_IRQCHIP"))?;
        boot::load_image(&mem, &image, &bytes).map_err(setup("loading the kernel"))?;

        let cpuid = kvm.get_supported_cpuid(KVM_MAX_CPUID_ENTRIES).map_err(setup("KVM_GET_SUPPORTED_CPUID"))?;
        let mut fds = Vec::new();
        for index in 0..config.vcpus {
            fds.push(vm.create_vcpu(u64::from(index)).map_err(setup("KVM_CREATE_VCPU"))?);
        }
        let tsc_khz = fds[0].get_tsc_khz().map(u64::from).unwrap_or(0);
        let long_mode = image.protocol == BootProtocol::Direct64;
        let per_vcpu =
            config.pmu.as_ref().map_or(0, |s| usize::from(s.gp_counters) + usize::from(pmu::MAX_FIXED_COUNTERS));
        let budget = EventBudget::new(
            config.pmu.as_ref().and_then(|s| s.max_host_events).unwrap_or(per_vcpu * config.vcpus as usize),
        );
        // No vPMU for a vendor that has none yet: the guest sees no PMU at all.
        let pmu_settings = config.pmu.as_ref().filter(|_| config.cpu_vendor.has_vpmu());
        let mut pmus = match pmu_settings {
            Some(settings) => build_pmus(settings, config.vcpus, tsc_khz, long_mode, execution.native, &budget)?,
            None => Vec::new(),
        };
        route_msrs(&vm, pmus.first())?;
        let mut cpu = crate::identity::CpuReport {
            pmu: match (&config.pmu, pmus.first()) {
                (_, Some(p)) => format!("Intel architectural perfmon v{}", p.pmu.caps().cpuid_0xa()[0] & 0xff),
                (Some(_), None) => "none: there is no AMD vPMU yet (--cpu-vendor amd)".into(),
                (None, _) => "none (--pmu off)".into(),
            },
            ..Default::default()
        };
        let mut cpuid_entries = 0;
        for (index, fd) in fds.iter().enumerate() {
            let caps = pmus.get(index).map(|p| *p.pmu.caps());
            let vcpu_cpuid = setup_vcpu(fd, &cpuid, index as u32, &image, caps.as_ref(), config.cpu_vendor)?;
            cpu.vendor = crate::identity::vendor_string(vcpu_cpuid.as_slice());
            let table = crate::layout::CPUID_TABLE_BASE + index as u64 * 0x1000;
            cpuid_entries = crate::cpuid::write_table(&mem, table, &vcpu_cpuid).map_err(setup("writing the CPUID table"))?;
            if execution.native {
                native::register_vif(fd, native::vif_page(index as u32))
                    .map_err(|e| VmError::Setup(format!("registering the VIF page: {e}")))?;
            }
        }
        let pmu_report = pmus.first().map(|p| PmuReport::new(config.pmu.as_ref().unwrap(), p, budget.clone()));
        let cmdline = if config.cmdline.is_empty() {
            config.kernel_arg0.clone()
        } else {
            format!("{} {}", config.kernel_arg0, config.cmdline)
        };
        let vif_base = execution.native.then_some(crate::layout::VIF_BASE);
        let stepped = config.pmu.as_ref().is_some_and(|p| p.backend == BackendKind::Exact);
        let params = BootParams { mem_size, cmdline, nr_vcpus: config.vcpus, tsc_khz, vif_base, cpuid_entries, stepped };
        boot::write_boot_data(&mem, image.protocol, &params).map_err(setup("writing boot data"))?;

        let console = if config.capture_console { Console::capture() } else { Console::stdout() };
        let mut bus = PioBus::new(SerialPort::new(console.clone()), FwCfg::new(config.vcpus as u16, mem_size));
        let agent = AgentPort::new(mem.clone(), config.max_samples);
        let in_workload = agent.in_workload.clone();
        bus.agent = Some(agent);
        let (tx, ends) = mpsc::channel();
        let shared = Arc::new(Shared { bus: Mutex::new(bus), stop: AtomicBool::new(false), ends: Mutex::new(tx) });
        let vm = Arc::new(vm);
        let mut pmus = pmus.drain(..).map(Some).collect::<Vec<_>>();
        pmus.resize_with(fds.len(), || None);
        let vcpus = fds
            .into_iter()
            .zip(pmus)
            .enumerate()
            .map(|(i, (fd, pmu))| Vcpu {
                index: i as u32,
                fd,
                shared: shared.clone(),
                stats: Default::default(),
                vm: vm.clone(),
                mem: mem.clone(),
                pmu,
                order: config.request_order,
                nmi_request: Arc::new(AtomicBool::new(false)),
                count_syscalls: config.count_syscalls,
                nmi_due: None,
                native: execution.native,
                in_workload: in_workload.clone(),
            })
            .collect();
        Ok(Vm {
            _kvm: kvm,
            _vm: vm,
            _mem: mem,
            pmu_report,
            vcpus,
            shared,
            ends,
            console,
            timeout: config.timeout,
            nmi_interval: config.nmi_interval,
            in_workload,
            execution,
            cpu,
        })
    }

    /// Wait for the first end (or the timeout), acting as the NMI source meanwhile.
    fn wait_for_end(
        &self,
        started: Instant,
        threads: &[thread::JoinHandle<crate::vcpu::VcpuResult>],
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

    /// Run every vCPU on its own thread until the VM ends, then stop and join them all.
    pub fn run(mut self, started: Instant) -> RunReport {
        kick::install_handler();
        kick::catch_termination();
        let mut threads = Vec::new();
        let nmi_target = self.vcpus.first().map(|v| v.nmi_request.clone());
        for vcpu in self.vcpus.drain(..) {
            let name = format!("vcpu{}", vcpu.index);
            let handle = thread::Builder::new().name(name).spawn(move || vcpu.run()).expect("spawning a vCPU thread");
            threads.push(handle);
        }
        let end = self.wait_for_end(started, &threads, nmi_target.as_deref());
        self.shared.stop.store(true, Ordering::SeqCst);
        // Kick until every thread has left KVM_RUN (a halted vCPU blocks there).
        while threads.iter().any(|t| !t.is_finished()) {
            for t in threads.iter().filter(|t| !t.is_finished()) {
                kick::kick(t.as_pthread_t());
            }
            thread::sleep(Duration::from_millis(1));
        }
        let mut stats = VmStats::default();
        let mut pmu_report = self.pmu_report.take();
        let mut rip_profile = std::collections::HashMap::new();
        for t in threads {
            let mut result = t.join().expect("vCPU thread panicked");
            stats.merge_vcpu(&result.stats);
            for (rip, n) in result.pmu.as_mut().and_then(|p| p.rip_profile.take()).unwrap_or_default() {
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
        RunReport { end, stats, console: self.console, agent, rip_profile }
    }
}

/// One PMU per vCPU, sharing a per-VM cap on host events.
fn build_pmus(
    settings: &PmuSettings,
    vcpus: u32,
    tsc_khz: u64,
    long_mode: bool,
    native: bool,
    budget: &std::sync::Arc<EventBudget>,
) -> Result<Vec<VcpuPmu>, VmError> {
    // Probe the host PMU only for the backend that uses it.
    let mode = (settings.backend == BackendKind::Perf).then(|| PerfMode::detect(tsc_khz));
    let config = PmuConfig {
        gp_counters: settings.gp_counters,
        policy: settings.policy,
        filter: settings.filter.clone(),
        pebs: settings.pebs,
        ..Default::default()
    };
    (0..vcpus)
        .map(|index| {
            let backend = match settings.backend {
                BackendKind::Perf => Backend::Perf(PerfSource::new(mode.expect("probed for perf"), budget.clone())),
                BackendKind::Exact => Backend::Exact(ExactSource::new()),
            };
            let mut vpmu = VcpuPmu::new(Pmu::new(config.clone(), backend)?, long_mode);
            vpmu.vif = native.then(|| native::vif_page(index));
            let throttled = settings.backend == BackendKind::Perf && settings.pmi_max_percent < 100;
            vpmu.throttle = throttled.then(|| crate::throttle::Throttle::new(settings.pmi_max_percent));
            vpmu.pv_offered = settings.pv;
            if settings.trace_rips && settings.backend == BackendKind::Exact {
                vpmu.rip_profile = Some(Default::default());
            }
            Ok(vpmu)
        })
        .collect()
}

/// Send exactly the PMU's MSRs and the ones CPUID does not advertise to user space (KVM MSR
/// filter: a clear bit denies KVM's own handling, and with KVM_MSR_EXIT_REASON_FILTER a
/// denied access exits to us).
fn route_msrs(vm: &VmFd, pmu: Option<&VcpuPmu>) -> Result<(), VmError> {
    let mut cap = kvm_enable_cap { cap: KVM_CAP_X86_USER_SPACE_MSR, ..Default::default() };
    cap.args[0] = u64::from(KVM_MSR_EXIT_REASON_FILTER);
    vm.enable_cap(&cap).map_err(setup("KVM_CAP_X86_USER_SPACE_MSR"))?;
    let mut ranges: Vec<(u32, u32)> =
        pmu.map(|p| p.pmu.msr_ranges().iter().map(|r| (r.base.0, r.count)).collect()).unwrap_or_default();
    ranges.extend(crate::identity::UNADVERTISED_MSRS.iter().map(|&msr| (msr, 1)));
    let bitmaps: Vec<Vec<u8>> = ranges.iter().map(|(_, count)| vec![0u8; count.div_ceil(8) as usize]).collect();
    let filter: Vec<MsrFilterRange> = ranges
        .iter()
        .zip(&bitmaps)
        .map(|(&(base, msr_count), bitmap)| MsrFilterRange {
            flags: MsrFilterRangeFlags::READ | MsrFilterRangeFlags::WRITE,
            base,
            msr_count,
            bitmap,
        })
        .collect();
    vm.set_msr_filter(MsrFilterDefaultAction::ALLOW, &filter).map_err(setup("KVM_X86_SET_MSR_FILTER"))?;
    Ok(())
}

/// Give vCPU `index` its CPUID and entry state; returns the CPUID it got.
fn setup_vcpu(
    fd: &VcpuFd,
    supported: &CpuId,
    index: u32,
    image: &KernelImage,
    pmu: Option<&pmu::PmuCaps>,
    vendor: crate::identity::CpuVendor,
) -> Result<CpuId, VmError> {
    let cpuid = crate::cpuid::for_vcpu(supported, index, pmu, vendor);
    fd.set_cpuid2(&cpuid).map_err(setup("KVM_SET_CPUID2"))?;
    let mut sregs = fd.get_sregs().map_err(setup("KVM_GET_SREGS"))?;
    boot::setup_sregs(&mut sregs, image.protocol);
    fd.set_sregs(&sregs).map_err(setup("KVM_SET_SREGS"))?;
    fd.set_regs(&boot::entry_regs(image.protocol, image.entry, index)).map_err(setup("KVM_SET_REGS"))?;
    let fpu = kvm_bindings::kvm_fpu { fcw: 0x37f, mxcsr: 0x1f80, ..Default::default() };
    fd.set_fpu(&fpu).map_err(setup("KVM_SET_FPU"))?;
    // Direct boot starts every vCPU at the entry; multiboot APs wait for INIT/SIPI.
    if image.protocol == BootProtocol::Direct64 && index > 0 {
        fd.set_mp_state(kvm_mp_state { mp_state: KVM_MP_STATE_RUNNABLE }).map_err(setup("KVM_SET_MP_STATE"))?;
    }
    Ok(cpuid)
}
