//! The VM options of the command line as a VM configuration: the PMU's settings, the
//! guest, its memory, vCPUs, identity and timeout, each checked with a one-line answer.

use crate::cli::{BackendArg, OnOff, OrderArg, PmuArgs, PolicyArg, VmArgs};
use crate::guests;
use crate::Failure;
use std::time::Duration;
use vmm::config::{BackendKind, PmuSettings};
use vmm::VmConfig;

/// The PMU options as VM settings.
pub fn pmu_settings(args: &PmuArgs) -> Result<Option<PmuSettings>, Failure> {
    if args.pmu == OnOff::Off {
        if args.pebs {
            return Err(Failure::usage("--pebs needs the virtual PMU (--pmu on)"));
        }
        return Ok(None);
    }
    if !(1..=pmu::MAX_GP_COUNTERS).contains(&args.counters) {
        return Err(Failure::usage(format!("--counters must be between 1 and {}", pmu::MAX_GP_COUNTERS)));
    }
    if !(args.release_after_ms >= 0.0 && args.release_after_ms.is_finite()) {
        return Err(Failure::usage("--release-after-ms must be a non-negative number"));
    }
    let policy = match args.policy {
        PolicyArg::Reuse => pmu::Policy::Reuse { release_after_ns: (args.release_after_ms * 1e6) as u64 },
        PolicyArg::Legacy => pmu::Policy::Legacy,
    };
    let backend = match args.backend {
        BackendArg::Perf => BackendKind::Perf,
        BackendArg::Exact => BackendKind::Exact,
    };
    let filter = match &args.pmu_filter {
        None => None,
        Some(path) => {
            let bytes = profile::bounded::read(path, MAX_FILTER_BYTES, "filter files")
                .map_err(|e| Failure::io("cannot read", &path.display().to_string(), &e))?;
            let text = String::from_utf8_lossy(&bytes);
            let filter = pmu::PmuEventFilter::parse(&text, pmu::FilterFormat::from_path(path))
                .map_err(|e| Failure::usage(format!("{}: {e}", path.display())))?;
            Some(filter)
        }
    };
    Ok(Some(PmuSettings {
        backend,
        policy,
        gp_counters: args.counters,
        max_host_events: args.max_host_events,
        trace_rips: false,
        pv: args.pv == OnOff::On,
        pv_samples: args.pv_samples == OnOff::On,
        filter,
        pebs: args.pebs,
        pmi_max_percent: args.pmi_max_percent,
        count_retired: false,
        exact_engine: args.exact_engine.into(),
    }))
}

/// The guest kit's perf agent (`stat`, `record`) drives both vendors' vPMUs (Intel's
/// architectural PMU, AMD's PerfMonV2): nothing to refuse under `--cpu-vendor`. Kept as the
/// one place to say so should a vendor lack an agent again.
pub fn check_agent_vendor(_args: &VmArgs) -> Result<(), Failure> {
    Ok(())
}

/// The largest `--pmu-filter` file read (a filter of every event and umask is ~1 MB).
pub const MAX_FILTER_BYTES: u64 = 1 << 20;

/// Turn the shared VM options into a VM configuration.
pub fn vm_config(args: &VmArgs, capture_console: bool) -> Result<VmConfig, Failure> {
    let timeout = match args.timeout {
        Some(t) if !(t > 0.0 && t.is_finite()) => {
            return Err(Failure::usage("--timeout must be a positive number of seconds"))
        }
        Some(t) => Some(Duration::from_secs_f64(t)),
        None => None,
    };
    if args.seccomp == crate::cli::OnOff::Off && vmm::confine::enabled() {
        vmm::confine::set_enabled(false);
        eprintln!("perfvm: warning: --seccomp off: the VMM runs without its seccomp filters (for debugging only)");
    }
    Ok(VmConfig {
        kernel: guests::resolve(&args.guest),
        kernel_arg0: args.guest.clone(),
        mem_mib: args.mem,
        vcpus: args.vcpus,
        cmdline: args.cmdline.clone(),
        initrd: args.initrd.clone(),
        timeout,
        capture_console,
        pmu: pmu_settings(&args.pmu)?,
        native: args.native.into(),
        cpu_vendor: args.cpu_vendor.map_or_else(|| vmm::host::caps().default_identity(), Into::into),
        request_order: match args.pmu.request_order {
            OrderArg::PmiFirst => vmm::vstate::requests::RequestOrder::PmiFirst,
            OrderArg::Legacy => vmm::vstate::requests::RequestOrder::Legacy,
        },
        nmi_interval: match args.pmu.nmi_every {
            Some(ms) if !(ms > 0.0 && ms.is_finite()) => {
                return Err(Failure::usage("--nmi-every must be a positive number of milliseconds"))
            }
            Some(ms) => Some(Duration::from_secs_f64(ms / 1000.0)),
            None => None,
        },
        ..Default::default()
    })
}
