//! `perfvm run`: boot a guest, mirror its console, exit with its status.

use crate::cli::{BackendArg, OnOff, OrderArg, PmuArgs, PolicyArg, RunArgs, VmArgs};
use crate::guests;
use crate::Failure;
use serde_json::json;
use std::time::{Duration, Instant};
use vmm::config::{BackendKind, PmuSettings};
use vmm::{RunReport, Vm, VmConfig};

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
            let bytes = vmm::bounded::read(path, MAX_FILTER_BYTES, "filter files")
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

/// Turn the shared VM options into a VM configuration.
/// The largest `--pmu-filter` file read (a filter of every event and umask is ~1 MB).
pub const MAX_FILTER_BYTES: u64 = 1 << 20;

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

/// Why a VM could not be built, as the CLI reports it: the user's input or the host's
/// KVM (exit 2), or a failure of perfvm's setup (exit 1).
pub fn build_failure(e: vmm::VmError) -> Failure {
    use vmm::VmError::*;
    let mut msg = e.to_string();
    if matches!(&e, GuestFile { reason, .. } if reason == "no such file") {
        msg.push_str(&format!(" (built-in guests: {})", guests::builtin_guests().join(", ")));
    }
    match e {
        Ioctl { .. } | MemoryMap(_) | GuestMemory { .. } => Failure::failed(msg),
        _ => Failure::usage(msg),
    }
}

/// Build and run a VM.
pub fn boot(config: &VmConfig, started: Instant) -> Result<RunReport, Failure> {
    let vm = Vm::build(config).map_err(build_failure)?;
    Ok(vm.run(started))
}

/// `boot` a guest that runs under the perf agent: the agent's chatter goes to stderr while
/// it runs (where the console is not captured).
pub fn boot_under_agent(config: &VmConfig, started: Instant) -> Result<RunReport, Failure> {
    let _split = if config.capture_console { None } else { crate::agent_lines::AgentLinesToStderr::start() };
    boot(config, started)
}

/// One line on stderr when the exact backend changed the size of a kit workload run
/// natively with its default size: the kit's guests take their emulated size when
/// single-stepped (boot info `PERFVM_BOOT_F_STEPPED`), as their native one would take hours.
pub fn note_stepped_size(report: &RunReport, workload: &[String]) {
    let exact = report.stats.pmu.as_ref().is_some_and(|p| p.backend == BackendKind::Exact);
    let native = report.stats.execution.as_ref().is_some_and(|e| e.native);
    let kit = !report.agent.marks.is_empty();
    if exact && native && kit && workload.is_empty() {
        eprintln!(
            "perfvm: --backend exact single-steps: the guest kit's workloads take their emulated default size, \
             not the native one (ftest: 15000x smaller, hours stepped otherwise); give a size to choose it"
        );
    }
}

pub fn run(args: RunArgs, started: Instant) -> Result<i32, Failure> {
    let mut config = vm_config(&args.vm, args.json)?;
    config.count_syscalls = args.stats || args.json;
    let report = boot(&config, started)?;
    let code = report.end.exit_code();
    if args.json {
        let doc = json!({
            "guest": args.vm.guest,
            "end": report.end,
            "exit_code": code,
            "message": report.end.message(),
            "stats": report.stats,
            "console": String::from_utf8_lossy(&report.console.captured()),
        });
        crate::output::emit(&(serde_json::to_string_pretty(&doc).expect("JSON") + "\n"))?;
    } else {
        if let Some(msg) = report.end.message() {
            eprintln!("perfvm: {msg}");
        }
        if args.stats {
            eprint!("{}", crate::stats_text::vm_stats(&report.stats));
        }
    }
    Ok(code)
}
