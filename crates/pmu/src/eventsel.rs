//! Typed views of IA32_PERFEVTSELx and IA32_FIXED_CTR_CTRL fields (SDM Vol. 3B,
//! "IA32_PERFEVTSELx MSRs" and "Fixed-function Performance Counters").

use crate::event::ArchEvent;
use serde::{Deserialize, Serialize};

/// An IA32_PERFEVTSELx value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EventSel(pub u64);

impl EventSel {
    /// USR: count at CPL > 0.
    pub const USR: u64 = 1 << 16;
    /// OS: count at CPL 0.
    pub const OS: u64 = 1 << 17;
    /// E: edge detect.
    pub const EDGE: u64 = 1 << 18;
    /// PC: pin control (ignored, as KVM does).
    pub const PC: u64 = 1 << 19;
    /// INT: APIC interrupt (PMI) on overflow.
    pub const INT: u64 = 1 << 20;
    /// ANY: AnyThread; architectural only from version 3, reserved here.
    pub const ANY: u64 = 1 << 21;
    /// EN: local enable.
    pub const EN: u64 = 1 << 22;
    /// INV: invert CMASK comparison.
    pub const INV: u64 = 1 << 23;
    /// Reserved bits in version 2: 63:32 and ANY (KVM `reserved_bits = 0xffffffff00200000`).
    pub const RESERVED: u64 = 0xFFFF_FFFF_0020_0000;

    /// Event select, bits 7:0.
    pub const fn event(self) -> u8 {
        self.0 as u8
    }
    /// Unit mask, bits 15:8.
    pub const fn umask(self) -> u8 {
        (self.0 >> 8) as u8
    }
    /// Counter mask, bits 31:24.
    pub const fn cmask(self) -> u8 {
        (self.0 >> 24) as u8
    }
    /// USR bit.
    pub const fn usr(self) -> bool {
        self.0 & Self::USR != 0
    }
    /// OS bit.
    pub const fn os(self) -> bool {
        self.0 & Self::OS != 0
    }
    /// Edge-detect bit.
    pub const fn edge(self) -> bool {
        self.0 & Self::EDGE != 0
    }
    /// Pin-control bit.
    pub const fn pin_control(self) -> bool {
        self.0 & Self::PC != 0
    }
    /// INT bit.
    pub const fn int(self) -> bool {
        self.0 & Self::INT != 0
    }
    /// EN bit.
    pub const fn enabled(self) -> bool {
        self.0 & Self::EN != 0
    }
    /// INV bit.
    pub const fn inv(self) -> bool {
        self.0 & Self::INV != 0
    }
    /// The architectural event this selects, if it selects one.
    pub fn arch_event(self) -> Option<ArchEvent> {
        ArchEvent::from_select(self.event(), self.umask())
    }
}

/// One fixed counter's 4-bit field of IA32_FIXED_CTR_CTRL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FixedCtrl(pub u8);

impl FixedCtrl {
    /// Count at CPL 0.
    pub const OS: u8 = 1 << 0;
    /// Count at CPL > 0.
    pub const USR: u8 = 1 << 1;
    /// AnyThread: reserved in version 2.
    pub const ANY: u8 = 1 << 2;
    /// PMI on overflow.
    pub const PMI: u8 = 1 << 3;
    /// Bits each counter's field occupies.
    pub const BITS: u32 = 4;

    /// Field of fixed counter `j` in an IA32_FIXED_CTR_CTRL value.
    pub const fn of(msr: u64, j: u8) -> FixedCtrl {
        FixedCtrl((msr >> (j as u32 * Self::BITS)) as u8 & 0xF)
    }
    /// OS bit.
    pub const fn os(self) -> bool {
        self.0 & Self::OS != 0
    }
    /// USR bit.
    pub const fn usr(self) -> bool {
        self.0 & Self::USR != 0
    }
    /// PMI bit.
    pub const fn pmi(self) -> bool {
        self.0 & Self::PMI != 0
    }
    /// The counter is locally enabled: "writing 0 to both bits stops the counter" (SDM).
    pub const fn enabled(self) -> bool {
        self.0 & (Self::OS | Self::USR) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eventsel_fields() {
        let v = EventSel(
            0xA5 << 24 | 1 << 23 | 1 << 22 | 1 << 20 | 1 << 19 | 1 << 18 | 1 << 17 | 1 << 16 | 0x4F << 8 | 0x2E,
        );
        assert_eq!(v.event(), 0x2E);
        assert_eq!(v.umask(), 0x4F);
        assert_eq!(v.cmask(), 0xA5);
        assert!(v.usr() && v.os() && v.edge() && v.pin_control() && v.int() && v.enabled() && v.inv());
        assert_eq!(v.arch_event(), Some(ArchEvent::LlcReferences));
        let z = EventSel(0);
        assert!(!(z.usr() || z.os() || z.edge() || z.pin_control() || z.int() || z.enabled() || z.inv()));
        assert_eq!(z.arch_event(), None);
    }

    #[test]
    fn eventsel_reserved_mask_is_kvm_v2() {
        assert_eq!(EventSel::RESERVED, 0xffff_ffff_0020_0000);
        assert_eq!(EventSel::RESERVED & EventSel::ANY, EventSel::ANY);
        // Every defined field of a v2 EVENTSEL is outside the reserved mask.
        let defined = 0xFFFF_FFFF & !EventSel::ANY;
        assert_eq!(defined & EventSel::RESERVED, 0);
        assert_eq!(defined | EventSel::RESERVED, u64::MAX);
    }

    #[test]
    fn fixed_ctrl_fields() {
        let msr = 0xB3_u64 << 4 | 0x1; // ctr0: OS; ctr1: OS|USR; ctr2: OS|USR|PMI
        assert_eq!(FixedCtrl::of(msr, 0), FixedCtrl(1));
        assert!(FixedCtrl::of(msr, 0).os() && !FixedCtrl::of(msr, 0).usr());
        let f1 = FixedCtrl::of(msr, 1);
        assert!(f1.os() && f1.usr() && !f1.pmi() && f1.enabled());
        let f2 = FixedCtrl::of(msr, 2);
        assert_eq!(f2, FixedCtrl(0xB));
        assert!(f2.pmi());
        assert!(!FixedCtrl(FixedCtrl::PMI).enabled());
        assert!(FixedCtrl(FixedCtrl::USR).enabled());
    }
}
