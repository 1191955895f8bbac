//! Software PEBS in the model: the PEBS MSRs' rules, PERF_CAPABILITIES, and when an assist
//! is armed, triggered, written or skipped.

mod common;
use common::*;
use pmu::{PmuState, GLOBAL_STATUS_OVF_BUFFER, PEBS_RECORD_FORMAT};

const MISC: MsrIndex = MsrIndex::IA32_MISC_ENABLE;
const PEBS: MsrIndex = MsrIndex::IA32_PEBS_ENABLE;
const DS: MsrIndex = MsrIndex::IA32_DS_AREA;

/// 4 GP counters, full-width writes, PEBS.
fn pebs_pmu() -> Pmu<MockSource> {
    Pmu::new(PmuConfig { pebs: true, ..PmuConfig::default() }, MockSource::new()).unwrap()
}

/// PMC0 counting instructions from `start` with PEBS on it (and `extra` EVENTSEL bits).
fn pebs_counter(start: u64, extra: u64) -> Pmu<MockSource> {
    let mut p = pebs_pmu();
    ok(&mut p, PEBS, 1);
    ok(&mut p, MsrIndex::a_pmc(0), start);
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Instructions) | extra);
    p
}

fn overflow_at(p: &Pmu<MockSource>, idx: PmcIdx) -> Option<u64> {
    p.backend().event(idx).unwrap().overflow_at
}

#[test]
fn pebs_msrs_absent_without_pebs() {
    let mut p = pmu();
    for msr in [PEBS, DS] {
        assert!(rd(&mut p, msr).is_fault(), "{:#x}", msr.0);
        assert!(wr(&mut p, msr, 0).is_fault(), "{:#x}", msr.0);
        assert!(hwr(&mut p, msr, 0).is_fault(), "{:#x}", msr.0);
        assert!(!p.msr_ranges().iter().any(|r| r.contains(msr)));
    }
    assert_eq!(val(&mut p, PERF_CAP), 1 << 13, "no PEBS bits");
    assert_eq!(p.pebs_effective(), 0);
    // MISC_ENABLE exists in every PMU and says PEBS is unavailable; RO as with PEBS.
    assert!(p.msr_ranges().iter().any(|r| r.contains(MISC)));
    assert_eq!(val(&mut p, MISC), 0x1880);
    assert!(wr(&mut p, MISC, 0x880).is_fault(), "PEBS_UNAVAIL is RO");
    ok(&mut p, MISC, 0x1801);
    assert_eq!(val(&mut p, MISC), 0x1881);
}

#[test]
fn perf_capabilities_advertise_format_1_trap_like_with_registers() {
    let mut p = pebs_pmu();
    let caps = val(&mut p, PERF_CAP);
    assert_eq!(caps >> 8 & 0xF, u64::from(PEBS_RECORD_FORMAT));
    assert_eq!(PEBS_RECORD_FORMAT, 1);
    assert_ne!(caps & 1 << 6, 0, "PEBS_TRAP");
    assert_ne!(caps & 1 << 7, 0, "PEBS_ARCH_REG");
    assert_eq!(caps & 1 << 14, 0, "no PEBS baseline");
    assert!(wr(&mut p, PERF_CAP, caps).is_fault(), "read-only");
    // Without full-width writes PERF_CAPABILITIES still exists (PDCM) for PEBS.
    let mut p = Pmu::new(PmuConfig { pebs: true, full_width_writes: false, ..PmuConfig::default() }, MockSource::new())
        .unwrap();
    assert_eq!(val(&mut p, PERF_CAP), 0x1C0);
    let ranges = p.msr_ranges();
    for msr in [MISC, PEBS, DS] {
        assert!(ranges.iter().any(|r| r.contains(msr)), "{:#x} routed", msr.0);
    }
}

#[test]
fn pebs_enable_one_bit_per_gp_counter() {
    let mut p = pebs_pmu();
    assert_eq!(val(&mut p, PEBS), 0);
    ok(&mut p, PEBS, 0xF);
    assert_eq!(val(&mut p, PEBS), 0xF);
    for bit in [4, 8, 31, 32, 35, 62, 63] {
        assert!(wr(&mut p, PEBS, 1 << bit).is_fault(), "bit {bit}");
        assert!(hwr(&mut p, PEBS, 1 << bit).is_fault(), "host, bit {bit}");
    }
    assert_eq!(val(&mut p, PEBS), 0xF, "a faulting write changes nothing");
    let mut p = Pmu::new(PmuConfig { pebs: true, gp_counters: 8, ..PmuConfig::default() }, MockSource::new()).unwrap();
    ok(&mut p, PEBS, 0xFF);
    assert!(wr(&mut p, PEBS, 0x100).is_fault());
    clean(&p);
}

#[test]
fn ds_area_must_be_canonical() {
    let mut p = pebs_pmu();
    assert_eq!(val(&mut p, DS), 0);
    ok(&mut p, DS, 0x20_0000);
    assert_eq!(val(&mut p, DS), 0x20_0000);
    ok(&mut p, DS, 0xFFFF_8000_0000_1000);
    ok(&mut p, DS, 0x0000_7FFF_FFFF_F000);
    for bad in [0x0000_8000_0000_0000u64, 0xFFFF_7FFF_FFFF_F000, 1 << 63] {
        assert!(wr(&mut p, DS, bad).is_fault(), "{bad:#x}");
        assert!(hwr(&mut p, DS, bad).is_fault(), "host {bad:#x}");
    }
    assert_eq!(val(&mut p, DS), 0x0000_7FFF_FFFF_F000);
    assert_eq!(p.ds_area(), 0x0000_7FFF_FFFF_F000);
}

#[test]
fn misc_enable_as_kvm_with_pebs_available() {
    let mut p = pebs_pmu();
    // EMON (7) and BTS_UNAVAIL (11) set, PEBS_UNAVAIL (12) clear.
    assert_eq!(val(&mut p, MISC), 0x880);
    assert!(wr(&mut p, MISC, 0x880 | 1 << 12).is_fault(), "PEBS_UNAVAIL is RO");
    assert!(wr(&mut p, MISC, 0x080).is_fault(), "BTS_UNAVAIL is RO");
    // EMON: writes ignored, no fault.
    ok(&mut p, MISC, 0x800);
    assert_eq!(val(&mut p, MISC), 0x880);
    // Other bits are kept as written (KVM checks none), e.g. fast strings (0).
    ok(&mut p, MISC, 0x881);
    assert_eq!(val(&mut p, MISC), 0x881);
    ok(&mut p, MISC, 0x880 | 1 << 22);
    assert_eq!(val(&mut p, MISC), 0x880 | 1 << 22);
    // The host may write anything (restore).
    assert_eq!(hwr(&mut p, MISC, 0x1000), MsrAccess::Ok(()));
    assert_eq!(val(&mut p, MISC), 0x1000);
    p.reset();
    assert_eq!(val(&mut p, MISC), 0x880);
}

#[test]
fn pebs_effective_needs_en_and_global_ctrl() {
    let mut p = pebs_pmu();
    ok(&mut p, GCTRL, 0);
    ok(&mut p, PEBS, 0b11);
    assert_eq!(p.pebs_effective(), 0);
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Instructions));
    assert_eq!(p.pebs_effective(), 0, "EN without GLOBAL_CTRL");
    ok(&mut p, GCTRL, 0b10);
    assert_eq!(p.pebs_effective(), 0, "GLOBAL_CTRL of another counter");
    ok(&mut p, GCTRL, 0b11);
    assert_eq!(p.pebs_effective(), 0b01, "PMC1 has no EN");
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Instructions) & !EN);
    assert_eq!(p.pebs_effective(), 0, "GLOBAL_CTRL without EN");
}

#[test]
fn pebs_without_en_or_global_ctrl_never_assists() {
    for (evtsel_en, gctrl) in [(false, 1), (true, 0)] {
        let mut p = pebs_pmu();
        ok(&mut p, PEBS, 1);
        ok(&mut p, GCTRL, gctrl);
        ok(&mut p, MsrIndex::a_pmc(0), COUNTER_MASK - 1);
        let s = sel(ArchEvent::Instructions) | INT;
        ok(&mut p, MsrIndex::perfevtsel(0), if evtsel_en { s } else { s & !EN });
        assert_eq!(p.backend_mut().advance(gp(0), 100), 0, "not counting");
        assert!(!p.collect_overflows());
        assert!(!p.pebs_pending());
        assert_eq!(p.take_pebs_overflows(), 0);
        assert_eq!(val(&mut p, STATUS), 0);
    }
}

#[test]
fn overflow_arms_and_the_next_event_triggers_the_assist() {
    let mut p = pebs_counter(COUNTER_MASK - 2, INT);
    assert_eq!(p.pebs_effective(), 1);
    assert_eq!(overflow_at(&p, gp(0)), Some(3));
    p.backend_mut().advance(gp(0), 3);
    assert!(p.backend().overflow_due());
    // The wrap arms PEBS: status bit set, no PMI despite INT, no assist yet.
    assert!(!p.collect_overflows(), "a PEBS counter raises no counter PMI");
    assert_eq!(p.global_status(), 1);
    assert!(!p.pebs_pending());
    // Armed: notified at the very next event.
    assert_eq!(overflow_at(&p, gp(0)), Some(4));
    assert!(!p.backend().overflow_due());
    p.backend_mut().advance(gp(0), 1);
    assert!(p.backend().overflow_due());
    assert!(!p.collect_overflows());
    assert!(p.pebs_pending());
    assert_eq!(p.take_pebs_overflows(), 1);
    assert!(!p.pebs_pending());
    assert_eq!(p.take_pebs_overflows(), 0, "reported once");
    // The VMM wrote the record: status bit cleared, reloaded from the reset value.
    p.pebs_record_written(gp(0), (-5i64) as u64);
    assert_eq!(val(&mut p, STATUS), 0);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), COUNTER_MASK - 4);
    assert_eq!(overflow_at(&p, gp(0)), Some(4 + 5));
    // Next period: 5 events to the wrap, one more to the trigger.
    p.backend_mut().advance(gp(0), 5);
    assert!(!p.collect_overflows());
    assert_eq!(p.take_pebs_overflows(), 0);
    p.backend_mut().advance(gp(0), 1);
    assert!(!p.collect_overflows());
    assert_eq!(p.take_pebs_overflows(), 1);
    let s = p.stats();
    assert_eq!((s.overflows, s.pmis_requested, s.pebs_records), (2, 0, 1));
    clean(&p);
}

#[test]
fn a_late_notification_triggers_at_once() {
    // A coarse backend notices the wrap only after more events: the trigger happened too.
    let mut p = pebs_counter(COUNTER_MASK - 2, 0);
    p.backend_mut().advance(gp(0), 50);
    assert!(!p.collect_overflows());
    assert_eq!(p.take_pebs_overflows(), 1);
    assert_eq!(p.global_status(), 1);
    // Re-armed for a full period from where it is, in case the assist is skipped.
    assert_eq!(overflow_at(&p, gp(0)), Some(50 + (1 << 48) - 47));
}

#[test]
fn a_skipped_assist_leaves_status_and_counter() {
    let mut p = pebs_counter(COUNTER_MASK, 0);
    p.backend_mut().advance(gp(0), 2);
    p.collect_overflows();
    assert_eq!(p.take_pebs_overflows(), 1);
    p.pebs_record_dropped(gp(0));
    assert_eq!(val(&mut p, STATUS), 1, "status stays");
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 1, "no reload");
    p.backend_mut().advance(gp(0), 10);
    assert!(!p.collect_overflows());
    assert_eq!(p.take_pebs_overflows(), 0, "no new assist before the next wrap");
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 11);
    let s = p.stats();
    assert_eq!((s.pebs_records, s.pebs_dropped), (0, 1));
}

#[test]
fn buffer_interrupt_sets_ovf_buffer() {
    let mut p = pebs_pmu();
    p.pebs_buffer_interrupt();
    assert_eq!(val(&mut p, STATUS), GLOBAL_STATUS_OVF_BUFFER);
    ok(&mut p, OVF, GLOBAL_STATUS_OVF_BUFFER);
    assert_eq!(val(&mut p, STATUS), 0);
    let s = p.stats();
    assert_eq!((s.pebs_interrupts, s.pmis_requested), (1, 1));
}

#[test]
fn ordinary_overflow_when_pebs_is_off_for_that_counter() {
    // PEBS on PMC1 only: PMC0 overflows the ordinary way.
    let mut p = pebs_pmu();
    ok(&mut p, PEBS, 0b10);
    ok(&mut p, MsrIndex::a_pmc(0), COUNTER_MASK);
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Instructions) | INT);
    p.backend_mut().advance(gp(0), 1);
    assert!(p.collect_overflows(), "ordinary PMI");
    assert_eq!(p.take_pebs_overflows(), 0);
    p.backend_mut().advance(gp(0), 1);
    p.collect_overflows();
    assert_eq!(p.take_pebs_overflows(), 0, "never armed");
}

#[test]
fn overflow_seen_when_disabling_is_still_a_pebs_overflow() {
    let mut p = pebs_counter(COUNTER_MASK - 2, INT);
    p.backend_mut().advance(gp(0), 3);
    // The guest stops the counter before the VMM saw the notification: the counts
    // accrued while PEBS was in effect.
    ok(&mut p, GCTRL, 0);
    assert_eq!(p.pebs_effective(), 0);
    assert!(!p.collect_overflows(), "no counter PMI");
    assert_eq!(val(&mut p, STATUS), 1);
    // Counting again: the first event triggers the armed assist.
    ok(&mut p, GCTRL, 1);
    p.backend_mut().advance(gp(0), 1);
    assert!(!p.collect_overflows());
    assert_eq!(p.take_pebs_overflows(), 1);
    clean(&p);
}

#[test]
fn pebs_enable_writes_fold_first() {
    // A wrap that accrued with PEBS off is an ordinary overflow even if PEBS is turned on
    // before the VMM noticed it.
    let mut p = pebs_pmu();
    ok(&mut p, MsrIndex::a_pmc(0), COUNTER_MASK);
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Instructions) | INT);
    p.backend_mut().advance(gp(0), 1);
    ok(&mut p, PEBS, 1);
    assert!(p.collect_overflows(), "ordinary PMI for the earlier wrap");
    assert_eq!(p.take_pebs_overflows(), 0);
    // And the other way round: clearing PEBS disarms an armed assist.
    let mut p = pebs_counter(COUNTER_MASK, 0);
    p.backend_mut().advance(gp(0), 1);
    p.collect_overflows();
    assert_eq!(overflow_at(&p, gp(0)), Some(2), "armed");
    ok(&mut p, PEBS, 0);
    assert_eq!(overflow_at(&p, gp(0)), Some(1 + (1 << 48)), "back to the wrap");
    p.backend_mut().advance(gp(0), 1);
    assert!(!p.collect_overflows());
    assert_eq!(p.take_pebs_overflows(), 0);
    clean(&p);
}

#[test]
fn writing_an_armed_counter_disarms_it() {
    let mut p = pebs_counter(COUNTER_MASK, 0);
    p.backend_mut().advance(gp(0), 1);
    p.collect_overflows();
    ok(&mut p, MsrIndex::a_pmc(0), COUNTER_MASK - 9);
    assert_eq!(overflow_at(&p, gp(0)), Some(1 + 10));
    p.backend_mut().advance(gp(0), 1);
    p.collect_overflows();
    assert_eq!(p.take_pebs_overflows(), 0);
}

#[test]
fn several_counters_assist_in_one_collect() {
    let mut p = pebs_pmu();
    ok(&mut p, PEBS, 0b101);
    for i in 0..3 {
        ok(&mut p, MsrIndex::a_pmc(i), COUNTER_MASK);
        ok(&mut p, MsrIndex::perfevtsel(i), sel(ArchEvent::Instructions));
    }
    p.backend_mut().advance_all(2);
    p.collect_overflows();
    assert_eq!(p.take_pebs_overflows(), 0b101);
    assert_eq!(p.global_status(), 0b111, "PMC1's ordinary overflow too");
    p.pebs_record_written(gp(0), 0);
    assert_eq!(p.global_status(), 0b110);
}

#[test]
fn save_restore_and_reset_cover_the_pebs_registers() {
    let mut p = pebs_pmu();
    ok(&mut p, PEBS, 0b11);
    ok(&mut p, DS, 0x30_0000);
    ok(&mut p, MISC, 0x881);
    let s = p.save();
    assert_eq!((s.pebs_enable, s.ds_area, s.misc_enable), (0b11, 0x30_0000, Some(0x881)));
    p.reset();
    assert_eq!((val(&mut p, PEBS), val(&mut p, DS), val(&mut p, MISC)), (0, 0, 0x880));
    p.restore(&s).unwrap();
    assert_eq!(p.save(), s);
    // A PMU without PEBS refuses a snapshot that uses it, and saves none.
    let mut q = pmu();
    assert!(q.restore(&s).is_err());
    let plain = q.save();
    assert_eq!((plain.pebs_enable, plain.ds_area, plain.misc_enable), (0, 0, Some(0x1880)));
    // An old snapshot (no PEBS fields) restores into a PEBS PMU with them at reset.
    let json = serde_json::to_value(&plain).unwrap();
    let mut obj = json.as_object().unwrap().clone();
    for k in ["pebs_enable", "ds_area", "misc_enable"] {
        obj.remove(k);
    }
    let old: PmuState = serde_json::from_value(obj.into()).unwrap();
    p.restore(&old).unwrap();
    assert_eq!(val(&mut p, MISC), 0x880);
    assert_eq!(val(&mut p, PEBS), 0);
}
