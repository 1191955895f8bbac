//! Exceptions the VMM raises in the guest, through KVM's event injection: KVM delivers them
//! at the next entry through the guest's IDT, with its IST and error code, as for any
//! exception it re-injects.

use kvm_ioctls::VcpuFd;

/// #GP.
const VECTOR_GP: u8 = 13;

/// Raise #GP(0) at the vCPU's RIP (a fault).
pub fn inject_gp(vcpu: &VcpuFd) -> Result<(), kvm_ioctls::Error> {
    inject(vcpu, VECTOR_GP, Some(0))
}

fn inject(vcpu: &VcpuFd, vector: u8, error_code: Option<u32>) -> Result<(), kvm_ioctls::Error> {
    let mut events = vcpu.get_vcpu_events()?;
    events.exception.injected = 1;
    events.exception.nr = vector;
    events.exception.has_error_code = u8::from(error_code.is_some());
    events.exception.error_code = error_code.unwrap_or(0);
    events.flags = 0;
    vcpu.set_vcpu_events(&events)
}
