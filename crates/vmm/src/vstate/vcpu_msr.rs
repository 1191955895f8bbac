//! One guest MSR as KVM holds it (KVM_GET_MSRS / KVM_SET_MSRS of a single entry), for the
//! instructions and repairs the VMM runs in the guest's place.

use kvm_bindings::{kvm_msr_entry, Msrs};
use kvm_ioctls::VcpuFd;

/// The guest's MSR `index` (0 where KVM reads none).
pub fn read(vcpu: &VcpuFd, index: u32) -> Result<u64, kvm_ioctls::Error> {
    let mut msrs = Msrs::from_entries(&[kvm_msr_entry { index, ..Default::default() }]).expect("one MSR");
    vcpu.get_msrs(&mut msrs)?;
    Ok(msrs.as_slice()[0].data)
}

/// Write the guest's MSR `index`.
pub fn write(vcpu: &VcpuFd, index: u32, data: u64) -> Result<(), kvm_ioctls::Error> {
    let msrs = Msrs::from_entries(&[kvm_msr_entry { index, data, ..Default::default() }]).expect("one MSR");
    vcpu.set_msrs(&msrs).map(|_| ())
}
