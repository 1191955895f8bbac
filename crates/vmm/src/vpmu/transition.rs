//! What one exit costs the vCPU thread on this host: the guest -> host -> guest roundtrip of
//! a KVM_RUN, in thread CPU time (the time the perf backend's software clock counts), per
//! execution mode. Hosts differ several-fold (a native port-IO exit is ~25 us on the AMD
//! hosts here and ~60 us on the Intel ones), and the VMM cannot see this time from the
//! exits of a real guest, where it is mixed with the guest's own: so it is measured once
//! per process and mode on a scratch VM whose guest only exits (`out` in a loop).
//!
//! The PMI throttle adds it to what each overflow notification costs the VMM, so that a
//! sampling period shorter than the host's exit cannot livelock a guest.

use crate::arch::x86_64::boot::{self, BootParams};
use crate::loader::BootProtocol;
use crate::vstate::kvm::ScratchVm;
use kvm_ioctls::VcpuExit;
use std::sync::OnceLock;
use vm_memory::{Bytes, GuestAddress};

/// Scratch RAM: the boot area, the identity map's tables and the loop at 1 MiB.
const PROBE_RAM: usize = 2 << 20;
/// Where the loop runs.
const CODE_ADDR: u64 = 0x10_0000;
/// `1: out %al, $0x81; jmp 1b` (port 0x81: nothing in KVM claims it, so every OUT exits).
const EXIT_LOOP: [u8; 4] = [0xe6, 0x81, 0xeb, 0xfc];
/// Roundtrips not counted (the first entries fault the loop's pages in).
const WARMUP: usize = 8;
/// Roundtrips measured; the median is kept.
const MEASURED: usize = 31;

/// The thread CPU time of one exit roundtrip in this execution mode, ns; None where the
/// probe cannot run (no /dev/kvm, or native mode without host support).
pub fn roundtrip_ns(native: bool) -> Option<u64> {
    static EMULATED: OnceLock<Option<u64>> = OnceLock::new();
    static NATIVE: OnceLock<Option<u64>> = OnceLock::new();
    let cell = if native { &NATIVE } else { &EMULATED };
    *cell.get_or_init(|| measure(native).ok())
}

/// Why the roundtrip could not be measured.
#[derive(Debug, thiserror::Error)]
enum ProbeError {
    /// Native mode without host support.
    #[error(transparent)]
    NoNative(&'static crate::host::pvm::native::NativeError),
    /// The scratch VM could not be set up.
    #[error(transparent)]
    Scratch(#[from] crate::vstate::kvm::ScratchError),
    /// The loop or its boot data could not be written.
    #[error("writing the probe: {0}")]
    Memory(#[from] vm_memory::GuestMemoryError),
    /// Its registers could not be set.
    #[error("probe registers: {0}")]
    Registers(#[from] kvm_ioctls::Error),
    /// Its VIF page was refused.
    #[error("probe VIF page: {0}")]
    Vif(#[from] crate::host::pvm::native::VifError),
    /// KVM_RUN failed.
    #[error("KVM_RUN: {0}")]
    Run(kvm_ioctls::Error),
    /// The loop exited for another reason than its OUT (the exit, as KVM gave it).
    #[error("the probe loop exited with {0}")]
    Exit(String),
}

fn measure(native: bool) -> Result<u64, ProbeError> {
    if native {
        crate::host::pvm::native::host_support().map_err(ProbeError::NoNative)?;
    }
    let mut scratch = ScratchVm::new(PROBE_RAM)?;
    let params = BootParams {
        mem_size: PROBE_RAM as u64,
        cmdline: String::new(),
        nr_vcpus: 1,
        tsc_khz: 0,
        vif_base: None,
        cpuid_entries: 0,
        stepped: false,
        blocks: false,
        hardware: false,
    };
    boot::write_boot_data(&scratch.mem, BootProtocol::Direct64, &params)?;
    scratch.mem.write_slice(&EXIT_LOOP, GuestAddress(CODE_ADDR))?;
    let vcpu = &mut scratch.vcpu;
    let mut sregs = vcpu.get_sregs()?;
    boot::setup_sregs(&mut sregs, BootProtocol::Direct64);
    vcpu.set_sregs(&sregs)?;
    vcpu.set_regs(&boot::entry_regs(BootProtocol::Direct64, CODE_ADDR, 0))?;
    if native {
        crate::host::pvm::native::register_vif(vcpu, crate::host::pvm::native::vif_page(0))?;
    }
    let mut samples = Vec::with_capacity(MEASURED);
    for i in 0..WARMUP + MEASURED {
        let t0 = crate::vpmu::thread_cpu_ns();
        match vcpu.run() {
            Ok(VcpuExit::IoOut(0x81, _)) => {}
            Ok(other) => return Err(ProbeError::Exit(format!("{other:?}"))),
            Err(e) => return Err(ProbeError::Run(e)),
        }
        if i >= WARMUP {
            samples.push(crate::vpmu::thread_cpu_ns().saturating_sub(t0));
        }
    }
    samples.sort_unstable();
    Ok(samples[MEASURED / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_costs_microseconds_in_each_mode() {
        if let Some(reason) = crate::vstate::kvm::unavailable_reason() {
            return crate::vstate::kvm::skip_test(
                "an_exit_costs_microseconds_in_each_mode",
                &format!("needs /dev/kvm: {reason}"),
            );
        }
        let emulated = measure(false).expect("the emulated probe runs");
        // A syscall and a world switch: more than a microsecond, far less than a tick.
        assert!((1_000..2_000_000).contains(&emulated), "emulated roundtrip {emulated} ns");
        match crate::host::pvm::native::host_support() {
            Ok(()) => {
                let native = measure(true).expect("the native probe runs");
                assert!((1_000..2_000_000).contains(&native), "native roundtrip {native} ns");
            }
            Err(reason) => {
                crate::vstate::kvm::skip_test("an_exit_costs_microseconds_in_each_mode (native)", &reason.to_string())
            }
        }
        assert!(roundtrip_ns(false).is_some(), "cached per process");
    }
}
