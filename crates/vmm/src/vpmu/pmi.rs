//! Delivering a PMI the way the guest's LAPIC LVTPC register says, and masking LVTPC
//! afterwards as hardware does (SDM: "the mask flag of LVTPC is set when a PMI is generated").

use kvm_bindings::{kvm_lapic_state, kvm_msi};
use kvm_ioctls::{VcpuFd, VmFd};

/// LVT performance counter register offset in the APIC page.
pub const APIC_LVTPC: usize = 0x340;
const APIC_ID: usize = 0x20;
const LVT_MASKED: u32 = 1 << 16;
const DELIVERY_MODE_MASK: u32 = 7 << 8;
const DELIVERY_NMI: u32 = 4 << 8;
const DELIVERY_FIXED: u32 = 0;

/// What happened to a PMI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmiOutcome {
    /// LVTPC asks for an NMI: the caller injects it in its NMI step (request order matters).
    Nmi,
    /// Sent as a fixed interrupt with this vector.
    Fixed(u8),
    /// LVTPC is masked (or has a mode we do not deliver): nothing is sent, as on hardware.
    Masked,
}

fn reg(lapic: &kvm_lapic_state, offset: usize) -> u32 {
    let b = &lapic.regs[offset..offset + 4];
    u32::from_le_bytes([b[0] as u8, b[1] as u8, b[2] as u8, b[3] as u8])
}

fn set_reg(lapic: &mut kvm_lapic_state, offset: usize, value: u32) {
    for (i, byte) in value.to_le_bytes().iter().enumerate() {
        lapic.regs[offset + i] = *byte as _;
    }
}

/// Decide delivery from an LVTPC value (pure, for tests).
pub fn decode_lvtpc(lvtpc: u32) -> PmiOutcome {
    if lvtpc & LVT_MASKED != 0 {
        return PmiOutcome::Masked;
    }
    match lvtpc & DELIVERY_MODE_MASK {
        DELIVERY_NMI => PmiOutcome::Nmi,
        DELIVERY_FIXED if (lvtpc & 0xff) >= 16 => PmiOutcome::Fixed(lvtpc as u8),
        _ => PmiOutcome::Masked,
    }
}

/// Raise one PMI on `vcpu` (on the vCPU's own thread, between KVM_RUNs): mask LVTPC as
/// Intel's LAPIC does when `mask` (AMD's does not) and send a fixed-vector interrupt at
/// once; an NMI is left to the caller.
pub fn raise(vm: &VmFd, vcpu: &VcpuFd, mask: bool) -> std::io::Result<PmiOutcome> {
    let mut lapic = vcpu.get_lapic().map_err(std::io::Error::from)?;
    let lvtpc = reg(&lapic, APIC_LVTPC);
    let outcome = decode_lvtpc(lvtpc);
    match outcome {
        PmiOutcome::Masked => return Ok(outcome),
        PmiOutcome::Nmi => {}
        PmiOutcome::Fixed(vector) => {
            let apic_id = reg(&lapic, APIC_ID) >> 24;
            let msi = kvm_msi {
                address_lo: crate::arch::x86_64::layout::LAPIC_BASE as u32 | (apic_id << 12),
                data: u32::from(vector),
                ..Default::default()
            };
            vm.signal_msi(msi).map_err(std::io::Error::from)?;
            if !mask {
                return Ok(outcome);
            }
            // signal_msi changed IRR: read the state again before writing LVTPC back.
            lapic = vcpu.get_lapic().map_err(std::io::Error::from)?;
        }
    }
    if !mask {
        return Ok(outcome);
    }
    set_reg(&mut lapic, APIC_LVTPC, lvtpc | LVT_MASKED);
    vcpu.set_lapic(&lapic).map_err(std::io::Error::from)?;
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lvtpc_decoding() {
        assert_eq!(decode_lvtpc(0x400), PmiOutcome::Nmi);
        assert_eq!(decode_lvtpc(0x10400), PmiOutcome::Masked);
        assert_eq!(decode_lvtpc(0xf0), PmiOutcome::Fixed(0xf0));
        assert_eq!(decode_lvtpc(0x100f0), PmiOutcome::Masked);
        assert_eq!(decode_lvtpc(0x05), PmiOutcome::Masked, "vectors below 16 are illegal");
        assert_eq!(decode_lvtpc(0x200 | 0x30), PmiOutcome::Masked, "SMI mode is not delivered");
    }

    #[test]
    fn register_round_trip() {
        let mut lapic = kvm_lapic_state::default();
        set_reg(&mut lapic, APIC_LVTPC, 0x0001_04f0);
        assert_eq!(reg(&lapic, APIC_LVTPC), 0x0001_04f0);
    }
}
