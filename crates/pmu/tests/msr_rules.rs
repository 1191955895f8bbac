//! Every MSR access rule against the SDM (architectural perfmon v2) and KVM.

mod common;
use common::*;

#[test]
fn reset_values() {
    let mut p = pmu();
    for i in 0..4 {
        assert_eq!(val(&mut p, MsrIndex::pmc(i)), 0);
        assert_eq!(val(&mut p, MsrIndex::perfevtsel(i)), 0);
        assert_eq!(val(&mut p, MsrIndex::a_pmc(i)), 0);
    }
    for j in 0..3 {
        assert_eq!(val(&mut p, MsrIndex::fixed_ctr(j)), 0);
    }
    assert_eq!(val(&mut p, FCTRL), 0);
    assert_eq!(val(&mut p, STATUS), 0);
    // SDM: GP enables set, fixed clear, for version-1 compatibility.
    assert_eq!(val(&mut p, GCTRL), 0xF);
    assert_eq!(val(&mut p, OVF), 0);
    assert_eq!(val(&mut p, PERF_CAP), 1 << 13);
    assert!(!p.is_active());
}

#[test]
fn reset_restores_reset_values_and_closes_events() {
    let mut p = pmu();
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Instructions));
    ok(&mut p, FCTRL, 0x333);
    ok(&mut p, GCTRL, 0x7_0000_0001);
    ok(&mut p, MsrIndex::pmc(1), 55);
    hwr(&mut p, STATUS, 1).ok().unwrap();
    assert!(p.backend().open_events() > 0);
    p.reset();
    assert_eq!(p.backend().open_events(), 0);
    assert_eq!(val(&mut p, MsrIndex::perfevtsel(0)), 0);
    assert_eq!(val(&mut p, MsrIndex::pmc(1)), 0);
    assert_eq!(val(&mut p, FCTRL), 0);
    assert_eq!(val(&mut p, STATUS), 0);
    assert_eq!(val(&mut p, GCTRL), 0xF);
    assert!(!p.is_active());
    clean(&p);
}

#[test]
fn eventsel_reserved_bits_fault() {
    let mut p = pmu();
    for bit in 0..64 {
        let v = 1u64 << bit;
        let reserved = bit >= 32 || bit == 21;
        for who in [Initiator::Guest, Initiator::Host] {
            let r = p.set_msr(MsrIndex::perfevtsel(1), v, who);
            assert_eq!(r.is_fault(), reserved, "bit {bit} {who:?}");
        }
    }
    // A faulting write leaves the register unchanged.
    ok(&mut p, MsrIndex::perfevtsel(1), 0x1234);
    assert!(wr(&mut p, MsrIndex::perfevtsel(1), 0x1234 | 1 << 40).is_fault());
    assert_eq!(val(&mut p, MsrIndex::perfevtsel(1)), 0x1234);
}

#[test]
fn eventsel_holds_every_defined_field() {
    let mut p = pmu();
    let v = 0xFFDF_FFFF; // all of 31:0 but ANY
    ok(&mut p, MsrIndex::perfevtsel(3), v);
    assert_eq!(val(&mut p, MsrIndex::perfevtsel(3)), v);
}

#[test]
fn fixed_ctr_ctrl_reserved_bits_fault() {
    let mut p = pmu();
    for bit in 0..64 {
        // Fields of FIXED_CTR0..2 are bits 11:0; ANY (bit 2 of each field) is reserved in v2.
        let reserved = bit >= 12 || bit % 4 == 2;
        assert_eq!(wr(&mut p, FCTRL, 1 << bit).is_fault(), reserved, "bit {bit}");
        assert_eq!(hwr(&mut p, FCTRL, 1 << bit).is_fault(), reserved, "host bit {bit}");
    }
    ok(&mut p, FCTRL, 0xBBB);
    assert_eq!(val(&mut p, FCTRL), 0xBBB);
}

#[test]
fn fixed_ctr_ctrl_fields_of_absent_counters_are_reserved() {
    let mut p = pmu_cfg(4, true, MockSource::supporting(&[ArchEvent::Instructions, ArchEvent::CoreCycles]));
    assert_eq!(p.caps().fixed_counters(), 2);
    ok(&mut p, FCTRL, 0xBB);
    for bit in 8..12 {
        assert!(wr(&mut p, FCTRL, 1 << bit).is_fault(), "bit {bit}");
    }
    let mut p = pmu_cfg(4, true, MockSource::supporting(&[ArchEvent::CoreCycles]));
    assert_eq!(p.caps().fixed_counters(), 0);
    ok(&mut p, FCTRL, 0);
    assert!(wr(&mut p, FCTRL, 1).is_fault());
}

#[test]
fn global_ctrl_reserved_bits_fault() {
    for gp_n in [1u8, 4, 8] {
        let mut p = pmu_cfg(gp_n, true, MockSource::new());
        for bit in 0..64u32 {
            let valid = bit < u32::from(gp_n) || (32..35).contains(&bit);
            assert_eq!(wr(&mut p, GCTRL, 1 << bit).is_fault(), !valid, "{gp_n} GP, bit {bit}");
        }
        let all = ((1u64 << gp_n) - 1) | (7 << 32);
        ok(&mut p, GCTRL, all);
        assert_eq!(val(&mut p, GCTRL), all);
    }
}

#[test]
fn global_status_is_read_only_to_the_guest() {
    let mut p = pmu();
    assert!(wr(&mut p, STATUS, 0).is_fault());
    assert!(wr(&mut p, STATUS, 1).is_fault());
    assert_eq!(p.stats().faults, 2);
    // The host may restore it, including OvfBuffer/CondChgd, but not reserved bits.
    assert!(hwr(&mut p, STATUS, 0xF | 7 << 32 | 3 << 62).is_ok());
    assert_eq!(val(&mut p, STATUS), 0xF | 7 << 32 | 3 << 62);
    for bit in 0..64u32 {
        let valid = bit < 4 || (32..35).contains(&bit) || bit >= 62;
        assert_eq!(hwr(&mut p, STATUS, 1 << bit).is_fault(), !valid, "bit {bit}");
    }
    assert_eq!(p.stats().faults, 2, "host refusals are not guest faults");
}

#[test]
fn ovf_ctrl_clears_status_and_reads_zero() {
    let mut p = pmu();
    hwr(&mut p, STATUS, 0b1011 | 1 << 33 | 1 << 63).ok().unwrap();
    ok(&mut p, OVF, 0b0010 | 1 << 33);
    assert_eq!(val(&mut p, STATUS), 0b1001 | 1 << 63);
    ok(&mut p, OVF, 1 << 63 | 1 << 62);
    assert_eq!(val(&mut p, STATUS), 0b1001);
    assert_eq!(val(&mut p, OVF), 0);
    // A host write (restore) is accepted but clears nothing (KVM).
    assert!(hwr(&mut p, OVF, 0b1001).is_ok());
    assert_eq!(val(&mut p, STATUS), 0b1001);
}

#[test]
fn ovf_ctrl_reserved_bits_fault() {
    let mut p = pmu();
    for bit in 0..64u32 {
        let valid = bit < 4 || (32..35).contains(&bit) || bit == 62 || bit == 63;
        assert_eq!(wr(&mut p, OVF, 1 << bit).is_fault(), !valid, "bit {bit}");
    }
}

#[test]
fn perf_capabilities_is_read_only() {
    let mut p = pmu();
    assert!(wr(&mut p, PERF_CAP, 1 << 13).is_fault());
    assert!(wr(&mut p, PERF_CAP, 0).is_fault());
    assert!(hwr(&mut p, PERF_CAP, 1 << 13).is_ok());
    assert!(hwr(&mut p, PERF_CAP, 0).is_fault());
    let mut p = pmu_cfg(4, false, MockSource::new());
    assert_eq!(p.get_msr(PERF_CAP, Initiator::Host), MsrAccess::Ok(0));
    assert!(hwr(&mut p, PERF_CAP, 0).is_ok());
}

/// Found while writing the hostile guest: with nothing to report, PERF_CAPABILITIES is 0,
/// the VMM leaves CPUID.1:ECX.PDCM clear, and then the MSR does not exist for the guest
/// (SDM; KVM `kvm_get_msr_common` #GPs without guest PDCM). It used to read 0.
#[test]
fn perf_capabilities_absent_for_the_guest_without_pdcm() {
    let mut p = pmu_cfg(4, false, MockSource::new());
    assert!(!p.caps().has_perf_capabilities());
    assert!(rd(&mut p, PERF_CAP).is_fault());
    assert!(wr(&mut p, PERF_CAP, 0).is_fault());
    let mut p = pmu();
    assert!(p.caps().has_perf_capabilities());
    assert_eq!(rd(&mut p, PERF_CAP), MsrAccess::Ok(1 << 13));
}

#[test]
fn legacy_pmc_write_sign_extends_from_bit_31() {
    let mut p = pmu();
    ok(&mut p, MsrIndex::pmc(0), 0x8000_0000);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 0xFFFF_8000_0000);
    assert_eq!(val(&mut p, MsrIndex::a_pmc(0)), 0xFFFF_8000_0000);
    ok(&mut p, MsrIndex::pmc(0), 0x7FFF_FFFF);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 0x7FFF_FFFF);
    // Upper operand bits are dropped, never a fault.
    ok(&mut p, MsrIndex::pmc(0), 0xDEAD_BEEF_0000_0010);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 0x10);
    ok(&mut p, MsrIndex::pmc(0), u64::MAX);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), COUNTER_MASK);
}

#[test]
fn host_legacy_pmc_write_is_not_sign_extended() {
    let mut p = pmu();
    hwr(&mut p, MsrIndex::pmc(2), 0x8000_0000).ok().unwrap();
    assert_eq!(val(&mut p, MsrIndex::pmc(2)), 0x8000_0000);
    hwr(&mut p, MsrIndex::pmc(2), 0x1234_5678_9ABC).ok().unwrap();
    assert_eq!(val(&mut p, MsrIndex::pmc(2)), 0x1234_5678_9ABC);
}

#[test]
fn full_width_write_takes_48_bits_and_faults_beyond() {
    let mut p = pmu();
    ok(&mut p, MsrIndex::a_pmc(1), 0x8000_0000);
    assert_eq!(val(&mut p, MsrIndex::pmc(1)), 0x8000_0000, "no sign extension");
    ok(&mut p, MsrIndex::a_pmc(1), COUNTER_MASK);
    assert_eq!(val(&mut p, MsrIndex::a_pmc(1)), COUNTER_MASK);
    for bit in 48..64 {
        assert!(wr(&mut p, MsrIndex::a_pmc(1), 1 << bit).is_fault(), "bit {bit}");
        assert!(hwr(&mut p, MsrIndex::a_pmc(1), 1 << bit).is_fault(), "host bit {bit}");
    }
    assert_eq!(val(&mut p, MsrIndex::pmc(1)), COUNTER_MASK, "faulting writes change nothing");
}

#[test]
fn full_width_aliases_fault_when_not_advertised() {
    let mut p = pmu_cfg(4, false, MockSource::new());
    for i in 0..8 {
        assert!(rd(&mut p, MsrIndex::a_pmc(i)).is_fault());
        assert!(wr(&mut p, MsrIndex::a_pmc(i), 0).is_fault());
    }
    assert!(!p.msr_ranges().iter().any(|r| r.contains(MsrIndex::a_pmc(0))));
}

#[test]
fn fixed_counter_writes_are_masked_to_width() {
    let mut p = pmu();
    ok(&mut p, MsrIndex::fixed_ctr(0), 0x8000_0000);
    assert_eq!(val(&mut p, MsrIndex::fixed_ctr(0)), 0x8000_0000, "no sign extension");
    ok(&mut p, MsrIndex::fixed_ctr(1), 0xFFFF_0000_0000_0042);
    assert_eq!(val(&mut p, MsrIndex::fixed_ctr(1)), 0x42);
    ok(&mut p, MsrIndex::fixed_ctr(2), u64::MAX);
    assert_eq!(val(&mut p, MsrIndex::fixed_ctr(2)), COUNTER_MASK);
}

#[test]
fn nonexistent_counters_fault() {
    let mut p = pmu();
    for msr in [MsrIndex::pmc(4), MsrIndex::pmc(7), MsrIndex::perfevtsel(4), MsrIndex::a_pmc(4), MsrIndex(0x30C)] {
        assert!(rd(&mut p, msr).is_fault(), "read {:#x}", msr.0);
        assert!(wr(&mut p, msr, 0).is_fault(), "write {:#x}", msr.0);
        assert!(hwr(&mut p, msr, 0).is_fault(), "host write {:#x}", msr.0);
    }
    // Not PMU MSRs at all.
    for msr in [0xC0, 0x185, 0x391, 0x1D9, 0x10] {
        assert!(rd(&mut p, MsrIndex(msr)).is_fault());
    }
    let mut p = pmu_cfg(2, true, MockSource::supporting(&[ArchEvent::Instructions]));
    assert!(rd(&mut p, MsrIndex::pmc(2)).is_fault());
    assert!(rd(&mut p, MsrIndex::fixed_ctr(0)).is_ok());
    assert!(rd(&mut p, MsrIndex::fixed_ctr(1)).is_fault());
    let mut p = pmu_cfg(8, true, MockSource::new());
    assert!(rd(&mut p, MsrIndex::pmc(7)).is_ok());
    assert!(wr(&mut p, MsrIndex::perfevtsel(7), sel(ArchEvent::CoreCycles)).is_ok());
}

#[test]
fn msr_ranges_cover_exactly_the_accessible_msrs() {
    for (gp_n, fw, src) in [
        (4, true, MockSource::new()),
        (8, false, MockSource::new()),
        (1, true, MockSource::supporting(&[ArchEvent::Instructions])),
        (3, false, MockSource::supporting(&[])),
    ] {
        let mut p = pmu_cfg(gp_n, fw, src);
        let ranges = p.msr_ranges();
        for n in 0..0x1000 {
            let routed = ranges.iter().any(|r| r.contains(MsrIndex(n)));
            let readable = p.get_msr(MsrIndex(n), Initiator::Host).is_ok();
            assert_eq!(routed, readable, "MSR {n:#x} ({gp_n} GP, fw {fw})");
            // The guest sees the same MSRs, except PERF_CAPABILITIES without PDCM: still
            // routed, so the model (not KVM) answers its #GP.
            let guest = rd(&mut p, MsrIndex(n)).is_ok();
            let pdcm_hidden = n == 0x345 && !p.caps().has_perf_capabilities();
            assert_eq!(guest, routed && !pdcm_hidden, "guest MSR {n:#x}");
        }
    }
}

#[test]
fn msr_access_stats_by_msr() {
    let mut p = pmu();
    ok(&mut p, GCTRL, 0);
    ok(&mut p, GCTRL, 1);
    let _ = rd(&mut p, MsrIndex::pmc(0));
    let _ = rd(&mut p, MsrIndex::pmc(5));
    let s = p.stats();
    assert_eq!(s.msr_writes.get(&0x38F), Some(&2));
    assert_eq!(s.msr_reads.get(&0xC1), Some(&1));
    assert_eq!(s.msr_reads.get(&0xC6), Some(&1));
    assert_eq!(s.faults, 1);
}

#[test]
fn cpuid_follows_backend() {
    let p = pmu();
    assert_eq!(p.caps().cpuid_0xa(), [0x0730_0402, 0, 0, 3 | 48 << 5]);
    let p = pmu_cfg(2, true, MockSource::supporting(&[ArchEvent::Instructions, ArchEvent::Branches]));
    assert_eq!(p.caps().cpuid_0xa(), [0x0730_0202, 0b101_1101, 0, 1 | 48 << 5]);
    let p = pmu_cfg(4, true, MockSource::supporting(&[ArchEvent::CoreCycles, ArchEvent::RefCycles]));
    assert_eq!(p.caps().cpuid_0xa()[3] & 0x1F, 0, "no instructions => no fixed counters");
    assert!(Pmu::new(PmuConfig { gp_counters: 9, ..PmuConfig::default() }, MockSource::new()).is_err());
    assert!(Pmu::new(PmuConfig { gp_counters: 0, ..PmuConfig::default() }, MockSource::new()).is_err());
}

#[test]
fn rdpmc_decoding_and_fast_reads() {
    let mut p = pmu();
    ok(&mut p, MsrIndex::a_pmc(2), 0x1234_8765_4321);
    ok(&mut p, MsrIndex::fixed_ctr(1), 0xABCD_0000_0001);
    assert_eq!(p.rdpmc(RdpmcIdx(2)), MsrAccess::Ok(0x1234_8765_4321));
    assert_eq!(p.rdpmc(RdpmcIdx(1 << 31 | 2)), MsrAccess::Ok(0x8765_4321));
    assert_eq!(p.rdpmc(RdpmcIdx(1 << 30 | 1)), MsrAccess::Ok(0xABCD_0000_0001));
    assert_eq!(p.rdpmc(RdpmcIdx(3 << 30 | 1)), MsrAccess::Ok(1));
    assert!(p.rdpmc(RdpmcIdx(4)).is_fault());
    assert!(p.rdpmc(RdpmcIdx(1 << 30 | 3)).is_fault());
    assert!(p.rdpmc(RdpmcIdx(1 << 16)).is_fault());
    let s = p.stats();
    assert_eq!((s.rdpmc, s.faults), (7, 3));
    let mut p = pmu_cfg(4, true, MockSource::supporting(&[]));
    assert!(p.rdpmc(RdpmcIdx(1 << 30)).is_fault(), "no fixed counters");
}
