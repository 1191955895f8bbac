//! The session layer (perf's util/session.c under its builtin-*.c): a guest booted for a
//! command, and what its run gives assembled into what the commands print and write:
//! records (`record`) and counts (`counts`). The commands parse flags and print.

pub mod agent_lines;
pub mod counts;
pub mod record;

use crate::guests;
use crate::Failure;
use std::time::Instant;
use vmm::config::BackendKind;
use vmm::{RunReport, Vm, VmConfig};

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
    let _split = if config.capture_console { None } else { agent_lines::AgentLinesToStderr::start() };
    boot(config, started)
}

/// One line on stderr when the exact backend changed the size of a kit workload run at full
/// speed (natively, or in hardware) with its default size: the kit's guests take their
/// emulated size when stepped (boot info `PERFVM_BOOT_F_STEPPED`), ten times it by blocks
/// (`PERFVM_BOOT_F_BLOCKS`), as their full-speed one would take hours.
pub fn note_stepped_size(config: &VmConfig, report: &RunReport, workload: &[String]) {
    let exact = report.stats.pmu.as_ref().is_some_and(|p| p.backend == BackendKind::Exact);
    let full_speed = report.stats.execution.as_ref().is_some_and(|e| e.full_speed());
    let kit = !report.agent.marks.is_empty();
    if !(exact && full_speed && kit && workload.is_empty()) {
        return;
    }
    let (how, size, ftest) = match config.pmu.as_ref().is_some_and(|p| p.runs_blocks(config.vcpus)) {
        true => ("counts by blocks", "ten times their emulated default size", "1500x smaller"),
        false => ("single-steps", "their emulated default size", "15000x smaller"),
    };
    eprintln!(
        "perfvm: --backend exact {how}: the guest kit's workloads take {size}, not the full-speed one \
         (ftest: {ftest}, hours counted otherwise); give a size to choose it"
    );
}
