//! Every AMD MSR access rule against the APM (Vol. 2, "Performance Monitoring Counters")
//! and KVM (`svm/pmu.c`, `kvm_pmu_set_msr`): the legacy counters, PerfCtrExtCore,
//! PerfMonV2, the event selector, RDPMC, CPUID, counting, overflow, filter and snapshots.

mod common;
use common::*;
use pmu::{
    AmdEventSel, AmdPerfMon, ConfigError, PmuEventFilter, PmuReg, PmuState, RestoreError, Vendor,
    LEAF_8000_0001_ECX_PERFCTR_CORE,
};

const CTL0: u32 = 0xC001_0000;
const CTR0: u32 = 0xC001_0004;
const EXT0: u32 = 0xC001_0200;
const G_STATUS: MsrIndex = MsrIndex::AMD_PERF_GLOBAL_STATUS;
const G_CTL: MsrIndex = MsrIndex::AMD_PERF_GLOBAL_CTL;
const G_CLR: MsrIndex = MsrIndex::AMD_PERF_GLOBAL_STATUS_CLR;
const G_SET: MsrIndex = MsrIndex::AMD_PERF_GLOBAL_STATUS_SET;

fn amd_cfg(perfmon: AmdPerfMon, gp_counters: u8) -> PmuConfig {
    PmuConfig { vendor: Vendor::Amd, amd_perfmon: perfmon, gp_counters, policy: REUSE_1MS, ..PmuConfig::default() }
}

fn amd_with(perfmon: AmdPerfMon, gp: u8, source: MockSource) -> Pmu<MockSource> {
    Pmu::new(amd_cfg(perfmon, gp), source).unwrap()
}

/// PerfMonV2 with six counters, every event: a Zen 4 core.
fn zen4() -> Pmu<MockSource> {
    amd_with(AmdPerfMon::PerfMonV2, 6, MockSource::new())
}

/// PerfCtrExtCore without PerfMonV2: a Zen 2 core (the VMM's AMD identity).
fn zen2() -> Pmu<MockSource> {
    amd_with(AmdPerfMon::ExtCore, 6, MockSource::new())
}

/// The four legacy counters only: a K8 core.
fn k8() -> Pmu<MockSource> {
    amd_with(AmdPerfMon::Legacy, 4, MockSource::new())
}

fn ctl(i: u8) -> MsrIndex {
    MsrIndex::amd_ext_perf_ctl(i)
}

fn ctr(i: u8) -> MsrIndex {
    MsrIndex::amd_ext_perf_ctr(i)
}

/// PERF_CTL value selecting `ev` in AMD's encoding, ring 0, enabled.
fn amd_sel(ev: ArchEvent) -> u64 {
    let (e, u) = ev.amd_select();
    AmdEventSel::encode(e, u) | OS | EN
}

#[test]
fn msr_numbers_match_linux() {
    assert_eq!(MsrIndex::amd_perf_ctl(0).0, CTL0);
    assert_eq!(MsrIndex::amd_perf_ctr(0).0, CTR0);
    assert_eq!(ctl(0).0, EXT0);
    assert_eq!(ctr(5).0, 0xC001_020B);
    assert_eq!([G_STATUS.0, G_CTL.0, G_CLR.0, G_SET.0], [0xC000_0300, 0xC000_0301, 0xC000_0302, 0xC000_0303]);
}

#[test]
fn reset_values() {
    let mut p = zen4();
    for i in 0..6 {
        assert_eq!(val(&mut p, ctl(i)), 0);
        assert_eq!(val(&mut p, ctr(i)), 0);
    }
    assert_eq!(val(&mut p, G_STATUS), 0);
    // Every GP enable set at reset, as KVM does for both vendors.
    assert_eq!(val(&mut p, G_CTL), 0x3F);
    assert_eq!(val(&mut p, G_CLR), 0);
    assert_eq!(val(&mut p, G_SET), 0);
    assert!(!p.is_active());
    assert_eq!(p.caps().vendor(), Vendor::Amd);
    assert_eq!((p.caps().gp_counters(), p.caps().fixed_counters(), p.caps().version()), (6, 0, 2));
}

#[test]
fn legacy_msrs_alias_counters_0_to_3() {
    for mut p in [zen4(), zen2()] {
        ok(&mut p, ctl(2), amd_sel(ArchEvent::Instructions) & !EN);
        assert_eq!(val(&mut p, MsrIndex::amd_perf_ctl(2)), amd_sel(ArchEvent::Instructions) & !EN);
        ok(&mut p, MsrIndex::amd_perf_ctr(3), 0x1234);
        assert_eq!(val(&mut p, ctr(3)), 0x1234);
        ok(&mut p, MsrIndex::amd_perf_ctl(0), 0x76);
        assert_eq!(val(&mut p, ctl(0)), 0x76);
        // Counters 4 and 5 have interleaved MSRs only: 0xC0010004 is PERF_CTR0, and past
        // PERF_CTR3 there is nothing.
        assert_eq!(val(&mut p, MsrIndex(CTL0 + 4)), val(&mut p, ctr(0)));
        assert!(rd(&mut p, MsrIndex(CTR0 + 4)).is_fault(), "0xC0010008 is nothing");
        assert!(rd(&mut p, ctl(5)).is_ok());
    }
}

#[test]
fn eventsel_reserved_bits_are_cleared_not_faulted() {
    let mut p = zen4();
    for bit in 0..64 {
        let v = 1u64 << bit;
        let reserved = bit == 19 || bit == 21 || bit >= 36;
        for who in [Initiator::Guest, Initiator::Host] {
            // AMD never #GPs a PERF_CTL write (KVM clears reserved bits; EPYC parts do not
            // fault either).
            assert_eq!(p.set_msr(ctl(1), v, who), MsrAccess::Ok(()), "bit {bit} {who:?}");
            let back = if reserved { 0 } else { v };
            assert_eq!(val(&mut p, ctl(1)), back, "bit {bit} {who:?}");
        }
    }
    assert_eq!(p.stats().faults, 0);
}

#[test]
fn eventsel_holds_every_defined_field() {
    let mut p = zen4();
    // Event 11:8 (35:32), CMASK, INV, EN, INT, EDGE, OS, USR, unit mask, event 7:0.
    let v = 0xF_FFD7_FFFF;
    ok(&mut p, ctl(3), v);
    assert_eq!(val(&mut p, ctl(3)), v);
    assert_eq!(p.caps().eventsel_reserved(), AmdEventSel::RESERVED);
}

/// A Linux guest's `amd_pmu_disable_event` writes HostOnly (bit 41) when perf asked to
/// exclude the guest; KVM commit 9b026073db2f: a #GP there broke such guests.
#[test]
fn host_only_from_a_linux_guest_is_cleared_and_counts() {
    let mut p = zen4();
    let linux = 0x0000_0200_0013_0076 | EN; // HostOnly | INT | OS | USR | cycles
    ok(&mut p, ctl(0), linux);
    assert_eq!(val(&mut p, ctl(0)), linux & !AmdEventSel::HOST_ONLY);
    p.backend_mut().advance(gp(0), 7);
    assert_eq!(val(&mut p, ctr(0)), 7);
    clean(&p);
}

#[test]
fn counter_writes_take_48_bits_for_guest_and_host() {
    let mut p = zen4();
    ok(&mut p, ctr(1), 0x8000_0000);
    assert_eq!(val(&mut p, ctr(1)), 0x8000_0000, "no sign extension");
    ok(&mut p, ctr(1), u64::MAX);
    assert_eq!(val(&mut p, ctr(1)), COUNTER_MASK);
    ok(&mut p, MsrIndex::amd_perf_ctr(1), 0xDEAD_0000_0000_0042);
    assert_eq!(val(&mut p, ctr(1)), 0x0000_0000_0042);
    hwr(&mut p, ctr(2), 0xFFFF_1234_5678_9ABC).ok().unwrap();
    assert_eq!(val(&mut p, ctr(2)), 0x1234_5678_9ABC);
}

#[test]
fn global_ctl_reserved_bits_are_ignored() {
    for n in [1u8, 4, 6] {
        let mut p = amd_with(AmdPerfMon::PerfMonV2, n, MockSource::new());
        let all = (1u64 << n) - 1;
        for bit in 0..64u32 {
            ok(&mut p, G_CTL, 1 << bit);
            let want = if bit < u32::from(n) { 1 << bit } else { 0 };
            assert_eq!(val(&mut p, G_CTL), want, "{n} counters, bit {bit}");
        }
        ok(&mut p, G_CTL, u64::MAX);
        assert_eq!(val(&mut p, G_CTL), all);
    }
}

#[test]
fn global_status_is_read_only_to_the_guest_and_writes_are_ignored() {
    let mut p = zen4();
    hwr(&mut p, G_STATUS, 0b10_0101).ok().unwrap();
    // AMD ignores the write instead of faulting (KVM: "Per PPR, Read-only MSR").
    ok(&mut p, G_STATUS, 0);
    ok(&mut p, G_STATUS, u64::MAX);
    assert_eq!(val(&mut p, G_STATUS), 0b10_0101);
    // The host restores it, but never with bits of absent counters.
    for bit in 0..64u32 {
        assert_eq!(hwr(&mut p, G_STATUS, 1 << bit).is_fault(), bit >= 6, "bit {bit}");
    }
    assert_eq!(p.stats().faults, 0);
}

#[test]
fn status_clr_and_set() {
    let mut p = zen4();
    ok(&mut p, G_SET, 0b1_0011 | 1 << 40 | 1 << 62);
    assert_eq!(val(&mut p, G_STATUS), 0b1_0011, "only counter bits are set");
    ok(&mut p, G_CLR, 0b0001 | 1 << 63);
    assert_eq!(val(&mut p, G_STATUS), 0b1_0010);
    ok(&mut p, G_CLR, u64::MAX);
    assert_eq!(val(&mut p, G_STATUS), 0);
    assert_eq!((val(&mut p, G_CLR), val(&mut p, G_SET)), (0, 0), "write-only: read as 0");
    // Host writes are accepted and do nothing (restore sets the status directly).
    hwr(&mut p, G_SET, 0b11).ok().unwrap();
    assert_eq!(val(&mut p, G_STATUS), 0);
    hwr(&mut p, G_STATUS, 0b11).ok().unwrap();
    hwr(&mut p, G_CLR, 0b11).ok().unwrap();
    assert_eq!(val(&mut p, G_STATUS), 0b11);
    // Setting a status bit is no overflow: no PMI.
    assert!(!p.pmi_pending());
}

#[test]
fn nonexistent_msrs_fault_per_level() {
    let absent_globals = [G_STATUS, G_CTL, G_CLR, G_SET];
    let mut p = k8();
    for msr in absent_globals.into_iter().chain([ctl(0), ctr(0), ctl(5)]) {
        assert!(rd(&mut p, msr).is_fault(), "legacy: {:#x}", msr.0);
        assert!(wr(&mut p, msr, 0).is_fault(), "legacy: {:#x}", msr.0);
        assert!(hwr(&mut p, msr, 0).is_fault(), "legacy: {:#x}", msr.0);
    }
    assert!(rd(&mut p, MsrIndex::amd_perf_ctr(3)).is_ok());
    let mut p = zen2();
    for msr in absent_globals {
        assert!(rd(&mut p, msr).is_fault(), "ExtCore: {:#x}", msr.0);
        assert!(wr(&mut p, msr, 0).is_fault(), "ExtCore: {:#x}", msr.0);
    }
    let mut p = amd_with(AmdPerfMon::PerfMonV2, 2, MockSource::new());
    for msr in [ctl(2), ctr(2), ctl(5), MsrIndex::amd_perf_ctl(2), MsrIndex::amd_perf_ctr(3), MsrIndex(0xC001_020C)] {
        assert!(rd(&mut p, msr).is_fault(), "2 counters: {:#x}", msr.0);
        assert!(wr(&mut p, msr, 0).is_fault(), "2 counters: {:#x}", msr.0);
    }
    // Intel's MSRs are not AMD's.
    let mut p = zen4();
    for msr in [0xC1, 0x186, 0x309, 0x345, 0x38D, 0x38E, 0x38F, 0x390, 0x1A0, 0x3F1, 0x4C1, 0x600] {
        assert!(rd(&mut p, MsrIndex(msr)).is_fault(), "{msr:#x}");
        assert!(hwr(&mut p, MsrIndex(msr), 0).is_fault(), "{msr:#x}");
    }
    // Nor AMD's Intel's.
    let mut p = pmu();
    for msr in [ctl(0), ctr(0), MsrIndex::amd_perf_ctl(0), G_CTL, G_STATUS] {
        assert!(rd(&mut p, msr).is_fault(), "Intel: {:#x}", msr.0);
    }
}

#[test]
fn msr_ranges_cover_exactly_the_accessible_msrs() {
    for (perfmon, gp_n) in [
        (AmdPerfMon::Legacy, 4),
        (AmdPerfMon::ExtCore, 6),
        (AmdPerfMon::PerfMonV2, 6),
        (AmdPerfMon::PerfMonV2, 3),
        (AmdPerfMon::PerfMonV2, 1),
    ] {
        let mut p = amd_with(perfmon, gp_n, MockSource::new());
        let ranges = p.msr_ranges();
        for n in (0..0x1000).chain(0xC000_0000..0xC000_1000).chain(0xC001_0000..0xC001_1000) {
            let routed = ranges.iter().any(|r| r.contains(MsrIndex(n)));
            let readable = p.get_msr(MsrIndex(n), Initiator::Host).is_ok();
            assert_eq!(routed, readable, "MSR {n:#x} ({perfmon:?}, {gp_n} counters)");
            assert_eq!(rd(&mut p, MsrIndex(n)).is_ok(), routed, "guest MSR {n:#x}");
            assert_eq!(p.caps().decode_msr(MsrIndex(n)).is_some(), routed, "decode {n:#x}");
        }
    }
}

#[test]
fn decode_is_vendor_neutral() {
    let p = zen4();
    assert_eq!(p.caps().decode_msr(G_CTL), Some(PmuReg::GlobalCtrl));
    assert_eq!(p.caps().decode_msr(G_CLR), Some(PmuReg::GlobalStatusClear));
    assert_eq!(p.caps().decode_msr(G_SET), Some(PmuReg::GlobalStatusSet));
    assert_eq!(p.caps().decode_msr(ctl(4)), Some(PmuReg::EventSel(gp(4))));
    let intel = pmu();
    assert_eq!(intel.caps().decode_msr(MsrIndex::IA32_PERF_GLOBAL_CTRL), Some(PmuReg::GlobalCtrl));
    assert_eq!(intel.caps().decode_msr(MsrIndex::IA32_PERF_GLOBAL_OVF_CTRL), Some(PmuReg::GlobalStatusClear));
}

#[test]
fn amd_event_codes_count_their_architectural_events() {
    let mut p = zen4();
    let events = [
        ArchEvent::CoreCycles,
        ArchEvent::Instructions,
        ArchEvent::RefCycles,
        ArchEvent::LlcReferences,
        ArchEvent::LlcMisses,
        ArchEvent::Branches,
    ];
    for (i, ev) in (0u8..).zip(events) {
        ok(&mut p, ctl(i), amd_sel(ev));
        let host = p.backend().event(gp(i)).unwrap_or_else(|| panic!("{ev:?} has a host event"));
        assert_eq!(host.config.event, ev);
        assert!(host.enabled && host.config.os && !host.config.usr);
    }
    p.backend_mut().advance_all(100);
    for i in 0..6 {
        assert_eq!(val(&mut p, ctr(i)), 100);
    }
    clean(&p);
}

#[test]
fn events_without_an_equivalent_count_nothing() {
    let mut p = zen4();
    // Intel's cycles and branches encodings, PMCx020 (0x120 without bits 35:32), a unit
    // mask the table does not list.
    for (i, sel) in [0x3C, 0xC4, 0x20, 0x01_C0].into_iter().enumerate() {
        ok(&mut p, ctl(i as u8), sel | OS | EN);
        assert_eq!(val(&mut p, ctl(i as u8)), sel | OS | EN, "accepted");
        assert!(!p.backend().is_open(gp(i as u8)), "{sel:#x} opens nothing");
    }
    p.backend_mut().advance_all(50);
    assert_eq!(val(&mut p, ctr(0)), 0);
    // An event the backend cannot count honestly counts nothing either.
    let mut p = amd_with(AmdPerfMon::PerfMonV2, 6, MockSource::supporting(&[ArchEvent::Instructions]));
    ok(&mut p, ctl(0), amd_sel(ArchEvent::CoreCycles));
    assert!(!p.backend().is_open(gp(0)));
    ok(&mut p, ctl(1), amd_sel(ArchEvent::Instructions));
    assert!(p.backend().is_enabled(gp(1)));
    clean(&p);
}

#[test]
fn legacy_counters_count_on_en_alone() {
    let mut p = k8();
    assert_eq!(p.caps().global_ctrl_reset(), 0xF);
    ok(&mut p, MsrIndex::amd_perf_ctl(3), amd_sel(ArchEvent::Branches));
    assert!(p.backend().is_enabled(gp(3)));
    assert!(p.is_active());
    p.backend_mut().advance(gp(3), 9);
    assert_eq!(val(&mut p, MsrIndex::amd_perf_ctr(3)), 9);
    ok(&mut p, MsrIndex::amd_perf_ctl(3), amd_sel(ArchEvent::Branches) & !EN);
    assert!(!p.backend().is_enabled(gp(3)));
    p.backend_mut().advance(gp(3), 9);
    assert_eq!(val(&mut p, MsrIndex::amd_perf_ctr(3)), 9);
    clean(&p);
}

#[test]
fn global_ctl_gates_counting_with_perfmon_v2() {
    let mut p = zen4();
    ok(&mut p, G_CTL, 0);
    ok(&mut p, ctl(4), amd_sel(ArchEvent::Instructions));
    assert!(!p.backend().is_enabled(gp(4)));
    ok(&mut p, G_CTL, 1 << 4);
    assert!(p.backend().is_enabled(gp(4)));
    p.backend_mut().advance(gp(4), 5);
    ok(&mut p, G_CTL, 0);
    p.backend_mut().advance(gp(4), 5);
    assert_eq!(val(&mut p, ctr(4)), 5);
    clean(&p);
}

#[test]
fn overflow_sets_global_status_and_requests_a_pmi() {
    let mut p = zen4();
    ok(&mut p, ctr(5), COUNTER_MASK - 9);
    ok(&mut p, ctl(5), amd_sel(ArchEvent::Instructions) | INT);
    assert_eq!(p.backend().event(gp(5)).unwrap().overflow_at, Some(10), "armed at the wrap");
    p.backend_mut().advance(gp(5), 12);
    assert!(p.backend().overflow_due());
    assert!(p.collect_overflows(), "INT asks for a PMI");
    assert_eq!(val(&mut p, G_STATUS), 1 << 5);
    assert_eq!(val(&mut p, ctr(5)), 2);
    ok(&mut p, G_CLR, 1 << 5);
    assert_eq!(val(&mut p, G_STATUS), 0);
    assert!(!p.collect_overflows());
    clean(&p);
}

#[test]
fn legacy_overflow_requests_a_pmi_without_a_status_register() {
    let mut p = k8();
    ok(&mut p, MsrIndex::amd_perf_ctr(0), COUNTER_MASK);
    ok(&mut p, MsrIndex::amd_perf_ctl(0), amd_sel(ArchEvent::CoreCycles) | INT);
    p.backend_mut().advance(gp(0), 1);
    assert!(p.collect_overflows());
    assert_eq!(val(&mut p, MsrIndex::amd_perf_ctr(0)), 0);
    assert_eq!(p.global_status(), 0, "nowhere to record it: the guest reads the counter");
    assert_eq!(p.save().global_status, 0);
    clean(&p);
}

#[test]
fn rdpmc_numbers_counters_0_to_5() {
    let mut p = zen4();
    ok(&mut p, ctr(5), 0x1234_8765_4321);
    ok(&mut p, MsrIndex::amd_perf_ctr(0), 0xFFFF_0000_0001);
    assert_eq!(p.rdpmc(RdpmcIdx(5)), MsrAccess::Ok(0x1234_8765_4321), "all 48 bits");
    assert_eq!(p.rdpmc(RdpmcIdx(0)), MsrAccess::Ok(0xFFFF_0000_0001));
    // No fast or fixed forms: those ECX values name no counter.
    for ecx in [6, 1 << 31 | 5, 1 << 30, 1 << 30 | 1, 0x100, u32::MAX] {
        assert!(p.rdpmc(RdpmcIdx(ecx)).is_fault(), "{ecx:#x}");
    }
    let s = p.stats();
    assert_eq!((s.rdpmc, s.faults), (8, 6));
    let mut p = k8();
    assert!(p.rdpmc(RdpmcIdx(3)).is_ok());
    assert!(p.rdpmc(RdpmcIdx(4)).is_fault());
}

#[test]
fn cpuid_leaves_per_level() {
    let leaf = |p: &Pmu<MockSource>, f: u32| p.caps().cpuid_leaf(f).unwrap().value;
    let p = zen4();
    assert_eq!(leaf(&p, 0x8000_0022), [1, 6, 0, 0], "PerfMonV2, six core counters");
    assert_eq!(leaf(&p, 0x8000_0001)[2], LEAF_8000_0001_ECX_PERFCTR_CORE);
    assert_eq!(p.caps().cpuid_0xa(), [0; 4]);
    assert_eq!(leaf(&p, 1), [0; 4], "no PDCM, DS, DTES64");
    let p = amd_with(AmdPerfMon::PerfMonV2, 3, MockSource::new());
    assert_eq!(leaf(&p, 0x8000_0022), [1, 3, 0, 0]);
    let p = zen2();
    assert_eq!(leaf(&p, 0x8000_0022), [0; 4]);
    assert_eq!(leaf(&p, 0x8000_0001), [0, 0, 1 << 23, 0]);
    let p = k8();
    assert_eq!(leaf(&p, 0x8000_0001), [0; 4]);
    // An Intel PMU clears AMD's bits.
    let p = pmu();
    assert_eq!(leaf(&p, 0x8000_0001), [0; 4]);
    assert_eq!(leaf(&p, 0x8000_0022), [0; 4]);
    // Applying the bits to a host's leaf keeps the host's other bits.
    let mut regs = [0, 0, u32::MAX, 0];
    zen2().caps().cpuid_leaf(0x8000_0001).unwrap().apply(&mut regs);
    assert_eq!(regs[2], u32::MAX);
    pmu().caps().cpuid_leaf(0x8000_0001).unwrap().apply(&mut regs);
    assert_eq!(regs[2], !(1 << 23));
}

#[test]
fn config_errors() {
    let err = |c: PmuConfig| Pmu::new(c, MockSource::new()).unwrap_err();
    assert_eq!(err(amd_cfg(AmdPerfMon::Legacy, 6)), ConfigError::AmdGpCounters { perfmon: AmdPerfMon::Legacy, gp: 6 });
    assert_eq!(
        err(amd_cfg(AmdPerfMon::ExtCore, 4)),
        ConfigError::AmdGpCounters { perfmon: AmdPerfMon::ExtCore, gp: 4 }
    );
    assert!(matches!(err(amd_cfg(AmdPerfMon::PerfMonV2, 7)), ConfigError::AmdGpCounters { gp: 7, .. }));
    assert!(matches!(err(amd_cfg(AmdPerfMon::PerfMonV2, 0)), ConfigError::AmdGpCounters { gp: 0, .. }));
    assert_eq!(err(PmuConfig { pebs: true, ..amd_cfg(AmdPerfMon::PerfMonV2, 6) }), ConfigError::Pebs(Vendor::Amd));
    assert_eq!(
        ConfigError::AmdGpCounters { perfmon: AmdPerfMon::ExtCore, gp: 4 }.to_string(),
        "Unsupported number of AMD general-purpose counters: 4 (PerfCtrExtCore has exactly 6)"
    );
    // The default AMD config is valid: PerfMonV2 with 4 counters.
    let p = Pmu::new(PmuConfig { vendor: Vendor::Amd, ..PmuConfig::default() }, MockSource::new()).unwrap();
    assert_eq!(p.caps().amd_perfmon(), Some(AmdPerfMon::PerfMonV2));
    assert_eq!(p.caps().cpuid_leaf(0x8000_0022).unwrap().value, [1, 4, 0, 0]);
    assert!(!p.caps().full_width_writes(), "full_width_writes is Intel's");
}

#[test]
fn filter_keys_on_twelve_bit_event_selects() {
    let refc = ArchEvent::RefCycles.amd_select();
    assert_eq!(refc, (0x120, 0));
    let mut p = Pmu::new(
        PmuConfig { filter: Some(PmuEventFilter::deny([refc], 0)), ..amd_cfg(AmdPerfMon::PerfMonV2, 6) },
        MockSource::new(),
    )
    .unwrap();
    ok(&mut p, ctl(0), amd_sel(ArchEvent::RefCycles));
    assert!(!p.backend().is_open(gp(0)), "0x120 denied");
    ok(&mut p, ctl(1), AmdEventSel::encode(0x20, 0) | OS | EN);
    assert!(!p.backend().is_open(gp(1)), "0x20 is not architectural");
    assert_eq!(p.stats().filtered_programs, 1);
    // Intel's code for cycles does not name AMD's cycles.
    p.set_event_filter(Some(PmuEventFilter::deny([(0x3C, 0)], 0)));
    ok(&mut p, ctl(2), amd_sel(ArchEvent::CoreCycles));
    assert!(p.backend().is_enabled(gp(2)));
    assert!(p.backend().is_enabled(gp(0)), "the new filter lets 0x120 count");
    // From a file: `vendor = "amd"` allows 12-bit event selects.
    let f = PmuEventFilter::from_toml_str("action = \"allow\"\nvendor = \"amd\"\nevents = [ { event = 0x120 } ]\n")
        .unwrap();
    p.set_event_filter(Some(f));
    assert!(p.backend().is_enabled(gp(0)));
    assert!(!p.backend().is_enabled(gp(2)), "cycles are not in the allow list");
    clean(&p);
}

fn busy_zen4() -> Pmu<MockSource> {
    let mut p = zen4();
    ok(&mut p, ctl(0), amd_sel(ArchEvent::Instructions) | INT);
    ok(&mut p, ctl(5), AmdEventSel::encode(0x1C0, 3) | USR);
    ok(&mut p, ctr(5), 0xFFFF_0000_0000);
    ok(&mut p, G_CTL, 0b10_0001);
    hwr(&mut p, G_STATUS, 0b100).ok().unwrap();
    p.backend_mut().advance_all(77);
    p
}

#[test]
fn save_restore_roundtrip() {
    let mut a = busy_zen4();
    let s = a.save();
    assert_eq!(s.pmc, vec![77, 0, 0, 0, 0, 0xFFFF_0000_0000]);
    assert_eq!(s.eventsel[5], AmdEventSel::encode(0x1C0, 3) | USR);
    assert!(s.fixed_ctr.is_empty() && s.fixed_ctr_ctrl == 0);
    assert_eq!((s.global_ctrl, s.global_status), (0b10_0001, 0b100));
    assert_eq!(s.misc_enable, None, "AMD has no IA32_MISC_ENABLE");
    let json = serde_json::to_string(&s).unwrap();
    let back: PmuState = serde_json::from_str(&json).unwrap();
    let mut b = zen4();
    b.restore(&back).unwrap();
    assert_eq!(b.save(), s);
    assert!(b.backend().is_enabled(gp(0)));
    b.backend_mut().advance(gp(0), 3);
    assert_eq!(val(&mut b, ctr(0)), 80);
    // Armed at the restore, when the counter held 77.
    assert_eq!(b.backend().event(gp(0)).unwrap().overflow_at, Some((1 << 48) - 77));
    clean(&b);

    let mut a = k8();
    ok(&mut a, MsrIndex::amd_perf_ctl(1), amd_sel(ArchEvent::Branches));
    a.backend_mut().advance(gp(1), 5);
    let s = a.save();
    assert_eq!((s.global_ctrl, s.global_status), (0xF, 0));
    let mut b = k8();
    b.restore(&s).unwrap();
    assert_eq!(b.save(), s);
    assert!(b.backend().is_enabled(gp(1)));
    clean(&b);
}

#[test]
fn restore_refuses_what_the_pmu_lacks() {
    let good = busy_zen4().save();
    let mut p = zen4();
    let mut s = good.clone();
    s.fixed_ctr_ctrl = 0xB;
    assert_eq!(p.restore(&s), Err(RestoreError::Absent { register: PmuReg::FixedCtrCtrl, value: 0xB }));
    let mut s = good.clone();
    s.misc_enable = Some(0x80);
    assert!(matches!(p.restore(&s), Err(RestoreError::Absent { register: PmuReg::MiscEnable, .. })));
    let mut s = good.clone();
    s.global_status = 1 << 6;
    assert_eq!(p.restore(&s), Err(RestoreError::Rejected { msr: 0xC000_0300, value: 1 << 6 }));
    let mut s = good.clone();
    s.pmc[2] = 1 << 48;
    assert_eq!(p.restore(&s), Err(RestoreError::Rejected { msr: 0xC001_0205, value: 1 << 48 }));
    // Reserved bits of the selectors are cleared, as for a guest write.
    let mut s = good.clone();
    s.eventsel[1] = 1 << 41 | 0x76;
    p.restore(&s).unwrap();
    assert_eq!(val(&mut p, ctl(1)), 0x76);
    // Without PerfMonV2 there is no status nor global control to restore: the snapshot
    // must hold their reset values, and a refused snapshot never starts a counter.
    let mut a = k8();
    ok(&mut a, MsrIndex::amd_perf_ctl(0), amd_sel(ArchEvent::Instructions));
    let mut s = a.save();
    s.global_ctrl = 0x1;
    let mut b = k8();
    assert_eq!(b.restore(&s), Err(RestoreError::Absent { register: PmuReg::GlobalCtrl, value: 1 }));
    s.global_ctrl = 0xF;
    s.global_status = 1;
    assert!(matches!(b.restore(&s), Err(RestoreError::Rejected { msr: 0xC000_0300, .. })));
    assert_eq!(b.stats().events_created, 0, "nothing started");
    assert!(!b.is_active());
    // An Intel snapshot does not fit an AMD PMU.
    assert!(matches!(zen4().restore(&pmu().save()), Err(RestoreError::Shape { .. })));
    clean(&b);
}

#[test]
fn idle_amd_pmu_is_inactive() {
    let mut p = zen4();
    ok(&mut p, ctl(0), amd_sel(ArchEvent::Instructions) & !EN);
    ok(&mut p, ctr(0), 5);
    assert!(!p.is_active());
    assert!(!p.any_programmed());
    assert_eq!(p.backend().calls().len(), 0, "no backend call while nothing counts");
}
