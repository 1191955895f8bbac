//! What a VM is built from: the configuration the CLI fills in.

use crate::devices::DEFAULT_MAX_SAMPLES;
use crate::host::pvm::native::NativeMode;
use crate::vstate::requests::RequestOrder;
use pmu::Policy;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// Everything needed to build and run a VM.
#[derive(Debug, Clone)]
pub struct VmConfig {
    /// Path of the kernel ELF.
    pub kernel: PathBuf,
    /// The kernel's name as the user gave it: the first word of the guest command line.
    pub kernel_arg0: String,
    /// Guest RAM, MiB (`layout::MIN_MEM_MIB..=layout::MAX_MEM_MIB`).
    pub mem_mib: u64,
    /// Number of vCPUs (1..=`layout::MAX_VCPUS`).
    pub vcpus: u32,
    /// The guest command line after `kernel_arg0` (empty: none); for a Linux kernel, the
    /// text after perfvm's default Linux command line.
    pub cmdline: String,
    /// The initial ramdisk of a Linux kernel (`--initrd`).
    pub initrd: Option<PathBuf>,
    /// Stop the guest after this long (`--timeout`); None runs until the guest ends.
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
    pub cpu_vendor: crate::arch::x86_64::identity::CpuVendor,
    /// Sample every vCPU from the VMM (`record -a`).
    pub sampling: Option<crate::profiling::sampler::SamplingConfig>,
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

/// How the exact backend finds what retired (`--exact-engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExactEngine {
    /// Single-step every instruction (the reference).
    Steps,
    /// Run the guest down the path the VMM runs ahead of it and retire each block's
    /// instructions together (`backends::exact::blocks`), stepping what a block cannot
    /// hold; counts identical.
    #[default]
    Blocks,
}

/// How the virtual PMU is built.
#[derive(Debug, Clone)]
pub struct PmuSettings {
    /// What counts for the virtual counters.
    pub backend: BackendKind,
    /// When host events are created and released (`--policy`).
    pub policy: Policy,
    /// General-purpose counters the guest sees (`--counters`).
    pub gp_counters: u8,
    /// Most host events the whole VM may hold open; None = counters x vCPUs.
    pub max_host_events: Option<usize>,
    /// Exact backend: record every retired instruction's RIP (the reference profile).
    pub trace_rips: bool,
    /// Accept the guest's paravirtual PMU page.
    pub pv: bool,
    /// Offer (PV page version 5) to take the agent's samples at the exits where its
    /// sampling counters wrap, with no PMI per sample (`--pv-samples`).
    pub pv_samples: bool,
    /// The event filter (KVM_SET_PMU_EVENT_FILTER semantics).
    pub filter: Option<pmu::PmuEventFilter>,
    /// Software PEBS: advertise it and write PEBS records into the guest's DS buffer.
    pub pebs: bool,
    /// Most share of vCPU time, percent, spent handling overflow notifications before
    /// periods are stretched (perf backend; 100: never throttle).
    pub pmi_max_percent: u8,
    /// Exact backend: step the whole run and count every retired instruction and branch
    /// in the VMM (`stat -a`), whatever the guest programs.
    pub count_retired: bool,
    /// Exact backend: single-step every instruction, or run blocks (`--exact-engine`).
    pub exact_engine: ExactEngine,
}

impl PmuSettings {
    /// Whether the exact backend (if it counts) runs blocks: on one vCPU only, as another
    /// vCPU may write the code a block runs.
    pub fn runs_blocks(&self, vcpus: u32) -> bool {
        self.exact_engine == ExactEngine::Blocks && vcpus == 1
    }
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
            pv_samples: true,
            filter: None,
            pebs: false,
            pmi_max_percent: crate::vpmu::throttle::DEFAULT_MAX_PERCENT,
            count_retired: false,
            exact_engine: ExactEngine::default(),
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
            initrd: None,
            timeout: None,
            capture_console: false,
            pmu: Some(PmuSettings::default()),
            max_samples: DEFAULT_MAX_SAMPLES,
            request_order: RequestOrder::default(),
            nmi_interval: None,
            count_syscalls: false,
            native: NativeMode::default(),
            cpu_vendor: crate::host::caps().default_identity(),
            sampling: None,
        }
    }
}
