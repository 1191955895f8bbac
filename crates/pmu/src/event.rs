//! Architectural performance events (SDM Vol. 3B, "Pre-defined Architectural Performance
//! Events"; CPUID.0AH:EBX bit order).

use serde::{Deserialize, Serialize};

/// One of the seven pre-defined architectural events. The discriminant is its CPUID.0AH:EBX
/// bit (a set bit there means "not available").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ArchEvent {
    /// UnHalted Core Cycles, 0x3C/0x00.
    CoreCycles = 0,
    /// Instructions Retired, 0xC0/0x00.
    Instructions = 1,
    /// UnHalted Reference Cycles, 0x3C/0x01.
    RefCycles = 2,
    /// LLC Reference, 0x2E/0x4F.
    LlcReferences = 3,
    /// LLC Misses, 0x2E/0x41.
    LlcMisses = 4,
    /// Branch Instruction Retired, 0xC4/0x00.
    Branches = 5,
    /// Branch Misses Retired, 0xC5/0x00.
    BranchMisses = 6,
}

/// Event each fixed counter counts: FIXED_CTR0 instructions, 1 core cycles, 2 reference
/// cycles (SDM "Fixed-function Performance Counters"; KVM `fixed_pmc_events`).
pub const FIXED_EVENTS: [ArchEvent; 3] = [ArchEvent::Instructions, ArchEvent::CoreCycles, ArchEvent::RefCycles];

impl ArchEvent {
    /// All architectural events in CPUID bit order.
    pub const ALL: [ArchEvent; 7] = [
        ArchEvent::CoreCycles,
        ArchEvent::Instructions,
        ArchEvent::RefCycles,
        ArchEvent::LlcReferences,
        ArchEvent::LlcMisses,
        ArchEvent::Branches,
        ArchEvent::BranchMisses,
    ];

    /// Bit position in CPUID.0AH:EBX.
    pub const fn cpuid_bit(self) -> u32 {
        self as u32
    }

    /// `(event select, unit mask)` for IA32_PERFEVTSELx.
    pub const fn select(self) -> (u8, u8) {
        match self {
            ArchEvent::CoreCycles => (0x3C, 0x00),
            ArchEvent::Instructions => (0xC0, 0x00),
            ArchEvent::RefCycles => (0x3C, 0x01),
            ArchEvent::LlcReferences => (0x2E, 0x4F),
            ArchEvent::LlcMisses => (0x2E, 0x41),
            ArchEvent::Branches => (0xC4, 0x00),
            ArchEvent::BranchMisses => (0xC5, 0x00),
        }
    }

    /// The architectural event selected by `event`/`umask`, if any.
    pub fn from_select(event: u8, umask: u8) -> Option<ArchEvent> {
        ArchEvent::ALL.into_iter().find(|e| e.select() == (event, umask))
    }
}

/// A set of [`ArchEvent`]s (bit = CPUID bit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EventSet(u8);

impl EventSet {
    /// No event.
    pub const EMPTY: EventSet = EventSet(0);
    /// Every architectural event.
    pub const ALL: EventSet = EventSet(0x7F);

    /// The events for which `pred` holds.
    pub fn from_fn(mut pred: impl FnMut(ArchEvent) -> bool) -> EventSet {
        ArchEvent::ALL.into_iter().filter(|&e| pred(e)).fold(EventSet::EMPTY, EventSet::with)
    }

    /// This set plus `event`.
    pub const fn with(self, event: ArchEvent) -> EventSet {
        EventSet(self.0 | 1 << event.cpuid_bit())
    }

    /// This set minus `event`.
    pub const fn without(self, event: ArchEvent) -> EventSet {
        EventSet(self.0 & !(1 << event.cpuid_bit()))
    }

    /// Whether `event` is in the set.
    pub const fn contains(self, event: ArchEvent) -> bool {
        self.0 & 1 << event.cpuid_bit() != 0
    }

    /// Bits in CPUID order (bit i = event with `cpuid_bit() == i`).
    pub const fn bits(self) -> u8 {
        self.0
    }
}

impl FromIterator<ArchEvent> for EventSet {
    fn from_iter<I: IntoIterator<Item = ArchEvent>>(iter: I) -> Self {
        iter.into_iter().fold(EventSet::EMPTY, EventSet::with)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_table_matches_sdm() {
        let table = [
            (ArchEvent::CoreCycles, 0x3C, 0x00, 0),
            (ArchEvent::Instructions, 0xC0, 0x00, 1),
            (ArchEvent::RefCycles, 0x3C, 0x01, 2),
            (ArchEvent::LlcReferences, 0x2E, 0x4F, 3),
            (ArchEvent::LlcMisses, 0x2E, 0x41, 4),
            (ArchEvent::Branches, 0xC4, 0x00, 5),
            (ArchEvent::BranchMisses, 0xC5, 0x00, 6),
        ];
        for (ev, sel, umask, bit) in table {
            assert_eq!(ev.select(), (sel, umask), "{ev:?}");
            assert_eq!(ev.cpuid_bit(), bit, "{ev:?}");
            assert_eq!(ArchEvent::from_select(sel, umask), Some(ev), "{ev:?}");
        }
    }

    #[test]
    fn unknown_selects_are_not_architectural() {
        assert_eq!(ArchEvent::from_select(0x3C, 0x02), None);
        assert_eq!(ArchEvent::from_select(0x2E, 0x00), None);
        assert_eq!(ArchEvent::from_select(0x00, 0x03), None);
        assert_eq!(ArchEvent::from_select(0xFF, 0xFF), None);
    }

    #[test]
    fn fixed_events_follow_sdm_order() {
        assert_eq!(FIXED_EVENTS, [ArchEvent::Instructions, ArchEvent::CoreCycles, ArchEvent::RefCycles]);
    }

    #[test]
    fn event_set_ops() {
        let s: EventSet = [ArchEvent::CoreCycles, ArchEvent::LlcMisses].into_iter().collect();
        assert_eq!(s.bits(), 0b1_0001);
        assert!(s.contains(ArchEvent::LlcMisses));
        assert!(!s.contains(ArchEvent::Instructions));
        assert_eq!(s.without(ArchEvent::LlcMisses).bits(), 1);
        assert_eq!(EventSet::from_fn(|_| true), EventSet::ALL);
        assert_eq!(EventSet::from_fn(|_| false), EventSet::EMPTY);
    }
}
