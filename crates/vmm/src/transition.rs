//! What one exit costs the vCPU thread on this host: the guest -> host -> guest roundtrip of
//! a KVM_RUN, in thread CPU time (the time the perf backend's software clock counts), per
//! execution mode. Hosts differ several-fold (a native port-IO exit is ~25 us on the AMD
//! hosts here and ~60 us on the Intel ones), and the VMM cannot see this time from the
//! exits of a real guest, where it is mixed with the guest's own: so it is measured once
//! per process and mode on a scratch VM whose guest only exits (`out` in a loop).
//!
//! The PMI throttle adds it to what each overflow notification costs the VMM, so that a
//! sampling period shorter than the host's exit cannot livelock a guest.

use crate::boot::{self, BootParams};
use crate::loader::BootProtocol;
use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::VcpuExit;
use std::sync::OnceLock;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

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

fn measure(native: bool) -> Result<u64, String> {
    if native {
        crate::native::host_support()?;
    }
    // Declared before the VM, so it is dropped after it.
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), PROBE_RAM)]).map_err(|e| e.to_string())?;
    let params = BootParams {
        mem_size: PROBE_RAM as u64,
        cmdline: String::new(),
        nr_vcpus: 1,
        tsc_khz: 0,
        vif_base: None,
        cpuid_entries: 0,
        stepped: false,
    };
    boot::write_boot_data(&mem, BootProtocol::Direct64, &params).map_err(|e| e.to_string())?;
    mem.write_slice(&EXIT_LOOP, GuestAddress(CODE_ADDR)).map_err(|e| e.to_string())?;

    let kvm = crate::kvm::open_kvm().map_err(|e| e.to_string())?;
    let vm = kvm.create_vm().map_err(|e| e.to_string())?;
    let host = mem.get_host_address(GuestAddress(0)).map_err(|e| e.to_string())?;
    let region = kvm_userspace_memory_region {
        slot: 0,
        guest_phys_addr: 0,
        memory_size: PROBE_RAM as u64,
        userspace_addr: host as u64,
        flags: 0,
    };
    // SAFETY: the region maps memory owned by `mem`, which outlives `vm`.
    unsafe { vm.set_user_memory_region(region) }.map_err(|e| e.to_string())?;
    let mut vcpu = vm.create_vcpu(0).map_err(|e| e.to_string())?;
    let mut sregs = vcpu.get_sregs().map_err(|e| e.to_string())?;
    boot::setup_sregs(&mut sregs, BootProtocol::Direct64);
    vcpu.set_sregs(&sregs).map_err(|e| e.to_string())?;
    vcpu.set_regs(&boot::entry_regs(BootProtocol::Direct64, CODE_ADDR, 0)).map_err(|e| e.to_string())?;
    if native {
        crate::native::register_vif(&vcpu, crate::native::vif_page(0))?;
    }
    let mut samples = Vec::with_capacity(MEASURED);
    for i in 0..WARMUP + MEASURED {
        let t0 = crate::vpmu::thread_cpu_ns();
        match vcpu.run() {
            Ok(VcpuExit::IoOut(0x81, _)) => {}
            Ok(other) => return Err(format!("the probe loop exited with {other:?}")),
            Err(e) => return Err(format!("KVM_RUN: {e}")),
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
        if let Some(reason) = crate::kvm::unavailable_reason() {
            return crate::kvm::skip_test(
                "an_exit_costs_microseconds_in_each_mode",
                &format!("needs /dev/kvm: {reason}"),
            );
        }
        let emulated = measure(false).expect("the emulated probe runs");
        // A syscall and a world switch: more than a microsecond, far less than a tick.
        assert!((1_000..2_000_000).contains(&emulated), "emulated roundtrip {emulated} ns");
        match crate::native::host_support() {
            Ok(()) => {
                let native = measure(true).expect("the native probe runs");
                assert!((1_000..2_000_000).contains(&native), "native roundtrip {native} ns");
            }
            Err(reason) => crate::kvm::skip_test("an_exit_costs_microseconds_in_each_mode (native)", &reason),
        }
        assert!(roundtrip_ns(false).is_some(), "cached per process");
    }
}
