//! The guest's TSC as the VMM stamps PV publishes with it. KVM_GET_MSRS of IA32_TSC is a
//! vCPU ioctl (~7 us on this host, most of a doorbell's VMM time); on this host's kvm_pvm
//! the guest's TSC is the host's own (a native guest's RDTSC runs on the host CPU with no
//! offset, and the emulator follows it), so once a read through KVM lands between two host
//! RDTSCs the VMM's RDTSC serves. Checked again every `RECHECK` reads, should a guest write
//! its TSC; a guest TSC that is not the host's is read through KVM every time.

use crate::backends::host_tsc;
use kvm_ioctls::VcpuFd;

/// IA32_TSC (SDM vol. 4, table 2-2).
const MSR_IA32_TSC: u32 = 0x10;

/// Reads between two checks through KVM.
const RECHECK: u64 = 1024;

/// Where the guest's TSC is read.
#[derive(Debug, Default)]
pub struct GuestTsc {
    /// The last check through KVM found the host's TSC (None: not checked yet).
    host: Option<bool>,
    reads: u64,
}

impl GuestTsc {
    /// The guest's TSC at host TSC `at` where it is the host's (true), else now (false).
    pub fn read_at(&mut self, vcpu: &VcpuFd, at: Option<u64>) -> (u64, bool) {
        self.reads += 1;
        if self.host == Some(true) && !self.reads.is_multiple_of(RECHECK) {
            return at.map_or((host_tsc(), false), |at| (at, true));
        }
        let before = host_tsc();
        let guest = through_kvm(vcpu);
        self.host = Some(is_host_tsc(before, guest, host_tsc()));
        (guest, false)
    }
}

/// Whether a guest TSC read between host TSCs `before` and `after` is the host's TSC.
fn is_host_tsc(before: u64, guest: u64, after: u64) -> bool {
    (before..=after).contains(&guest)
}

/// KVM_GET_MSRS of IA32_TSC (0 if it fails).
fn through_kvm(vcpu: &VcpuFd) -> u64 {
    crate::vstate::vcpu_msr::read(vcpu, MSR_IA32_TSC).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_read_inside_its_bracket_is_the_hosts() {
        assert!(is_host_tsc(100, 100, 200));
        assert!(is_host_tsc(100, 150, 200));
        assert!(!is_host_tsc(100, 99, 200), "a guest TSC behind the host's (an offset)");
        assert!(!is_host_tsc(100, 201, 200), "ahead");
        assert!(!is_host_tsc(100, 0, 200), "a failed read");
    }
}
