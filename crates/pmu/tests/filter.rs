//! Event filter, mirroring Linux `tools/testing/selftests/kvm/x86/pmu_event_filter_test.c`:
//! allow/deny lists with and without the measured event, the fixed-counter bitmap under
//! both actions, GP lists not affecting fixed counters, and filtered counters still
//! behaving as registers (MSR reads and writes, no #GP) while never counting or raising a
//! PMI.

mod common;
use common::*;
use pmu::{FilterAction, PmuEventFilter};

/// The selftest measures branches retired (0xC4/0x00) over a known loop.
const BRANCHES: (u16, u8) = (0xC4, 0x00);
const INSNS: (u16, u8) = (0xC0, 0x00);
const LOOP: u64 = 42;

fn filtered(filter: Option<PmuEventFilter>) -> Pmu<MockSource> {
    filtered_with(filter, REUSE_1MS)
}

fn filtered_with(filter: Option<PmuEventFilter>, policy: Policy) -> Pmu<MockSource> {
    Pmu::new(PmuConfig { policy, filter, ..PmuConfig::default() }, MockSource::new()).unwrap()
}

/// Programs PMC0 for branches, lets `LOOP` branches happen, returns what PMC0 counted.
fn run_branches(p: &mut Pmu<MockSource>) -> u64 {
    ok(p, MsrIndex::pmc(0), 0);
    ok(p, MsrIndex::perfevtsel(0), sel(ArchEvent::Branches));
    ok(p, GCTRL, 1);
    p.backend_mut().advance(gp(0), LOOP);
    ok(p, GCTRL, 0);
    let v = val(p, MsrIndex::pmc(0));
    ok(p, MsrIndex::perfevtsel(0), 0);
    clean(p);
    v
}

/// Programs fixed counter `j`, lets `LOOP` events happen, returns what it counted.
fn run_fixed(p: &mut Pmu<MockSource>, j: u8) -> u64 {
    ok(p, MsrIndex::fixed_ctr(j), 0);
    ok(p, FCTRL, u64::from(FixedCtrl::OS) << (4 * j));
    ok(p, GCTRL, 1 << (32 + j));
    p.backend_mut().advance(fixed(j), LOOP);
    ok(p, GCTRL, 0);
    let v = val(p, MsrIndex::fixed_ctr(j));
    ok(p, FCTRL, 0);
    clean(p);
    v
}

/// A list like the selftest's base filter: many events, including branches.
fn base_events() -> Vec<(u16, u8)> {
    vec![(0x3C, 0x00), (0xC0, 0x00), (0x3C, 0x01), (0x2E, 0x4F), (0x2E, 0x41), BRANCHES, (0xC5, 0x00)]
}

fn without_branches() -> Vec<(u16, u8)> {
    base_events().into_iter().filter(|&e| e != BRANCHES).collect()
}

#[test]
fn without_filter() {
    assert_eq!(run_branches(&mut filtered(None)), LOOP);
}

#[test]
fn member_allow_list() {
    let mut p = filtered(Some(PmuEventFilter::allow(base_events(), 0)));
    assert_eq!(run_branches(&mut p), LOOP);
    assert_eq!(p.stats().filtered_programs, 0);
}

#[test]
fn member_deny_list() {
    let mut p = filtered(Some(PmuEventFilter::deny(base_events(), 0)));
    assert_eq!(run_branches(&mut p), 0);
    assert_eq!(p.backend().open_events(), 0);
    assert!(!p.backend().calls().iter().any(|c| matches!(c, MockCall::Open(..))), "no host event for a denied counter");
    assert!(p.stats().filtered_programs >= 1);
}

#[test]
fn not_member_allow_list() {
    let mut p = filtered(Some(PmuEventFilter::allow(without_branches(), 0)));
    assert_eq!(run_branches(&mut p), 0);
    assert_eq!(p.stats().events_created, 0);
    assert!(p.stats().filtered_programs >= 1);
}

#[test]
fn not_member_deny_list() {
    let mut p = filtered(Some(PmuEventFilter::deny(without_branches(), 0)));
    assert_eq!(run_branches(&mut p), LOOP);
}

#[test]
fn umask_is_part_of_the_key_other_bits_are_not() {
    // Deny 0x3C/0x00 (core cycles): reference cycles 0x3C/0x01 still count.
    let mut p = filtered(Some(PmuEventFilter::deny([(0x3C, 0x00)], 0)));
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::RefCycles));
    p.backend_mut().advance(gp(0), 5);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 5);
    // CMASK, INV, EDGE, INT, USR do not take the event out of the list.
    let cycles = sel(ArchEvent::CoreCycles);
    for extra in [1 << 24, EventSel::INV, EventSel::EDGE, INT, USR, EventSel::PC] {
        ok(&mut p, MsrIndex::perfevtsel(1), cycles | extra);
        assert!(!p.backend().is_open(gp(1)), "extra bits {extra:#x}");
    }
    clean(&p);
}

#[test]
fn fixed_counter_bitmap_allow_and_deny() {
    for action in [FilterAction::Allow, FilterAction::Deny] {
        for bitmap in 0..8u32 {
            for j in 0..3u8 {
                let f = PmuEventFilter { action, events: vec![], fixed_counter_bitmap: bitmap };
                let allowed = match action {
                    FilterAction::Allow => bitmap >> j & 1 == 1,
                    FilterAction::Deny => bitmap >> j & 1 == 0,
                };
                let mut p = filtered(Some(f));
                let got = run_fixed(&mut p, j);
                assert_eq!(got, if allowed { LOOP } else { 0 }, "{action:?} bitmap {bitmap:#b} fixed {j}");
            }
        }
    }
}

/// The selftest's "gp and fixed event filter": the event list (which names the fixed
/// counters' own events) does not change what the bitmap decides.
#[test]
fn gp_list_does_not_affect_fixed_counters() {
    for action in [FilterAction::Allow, FilterAction::Deny] {
        for bitmap in 0..8u32 {
            for j in 0..3u8 {
                let mut p =
                    filtered(Some(PmuEventFilter { action, events: base_events(), fixed_counter_bitmap: bitmap }));
                let allowed = (bitmap >> j & 1 == 1) == (action == FilterAction::Allow);
                assert_eq!(run_fixed(&mut p, j) == LOOP, allowed, "{action:?} {bitmap:#b} {j}");
            }
        }
    }
}

#[test]
fn fixed_bitmap_bits_of_absent_counters_are_ignored() {
    let mut p = filtered(Some(PmuEventFilter::deny([], 0xFFFF_FFF8)));
    for j in 0..3 {
        assert_eq!(run_fixed(&mut p, j), LOOP);
    }
}

#[test]
fn filtered_counters_still_read_and_write_without_gp() {
    let mut p = filtered(Some(PmuEventFilter::allow([], 0)));
    for i in 0..4 {
        ok(&mut p, MsrIndex::perfevtsel(i), sel(ArchEvent::Instructions));
        assert_eq!(val(&mut p, MsrIndex::perfevtsel(i)), sel(ArchEvent::Instructions));
        ok(&mut p, MsrIndex::pmc(i), 0x1234);
        assert_eq!(val(&mut p, MsrIndex::pmc(i)), 0x1234);
        ok(&mut p, MsrIndex::a_pmc(i), 0xFFFF_0000_0001);
        assert_eq!(val(&mut p, MsrIndex::pmc(i)), 0xFFFF_0000_0001);
        // Reserved bits still fault: the filter adds no rule of its own.
        assert!(wr(&mut p, MsrIndex::perfevtsel(i), 1 << 32).is_fault());
    }
    ok(&mut p, FCTRL, 0x333);
    assert_eq!(val(&mut p, FCTRL), 0x333);
    for j in 0..3 {
        ok(&mut p, MsrIndex::fixed_ctr(j), 77);
        assert_eq!(val(&mut p, MsrIndex::fixed_ctr(j)), 77);
    }
    ok(&mut p, GCTRL, 0xF | 7 << 32);
    assert_eq!(val(&mut p, GCTRL), 0xF | 7 << 32);
    p.backend_mut().advance_all(1000);
    for i in 0..4 {
        assert_eq!(val(&mut p, MsrIndex::pmc(i)), 0xFFFF_0000_0001);
    }
    for j in 0..3 {
        assert_eq!(val(&mut p, MsrIndex::fixed_ctr(j)), 77);
    }
    assert_eq!(p.stats().faults, 4);
    assert_eq!(p.backend().open_events(), 0);
    clean(&p);
}

#[test]
fn filtered_counter_never_overflows_or_raises_a_pmi() {
    let mut p = filtered(Some(PmuEventFilter::deny([INSNS], 0b1)));
    ok(&mut p, MsrIndex::a_pmc(0), COUNTER_MASK - 9);
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Instructions) | INT);
    ok(&mut p, MsrIndex::fixed_ctr(0), COUNTER_MASK - 9);
    ok(&mut p, FCTRL, u64::from(FixedCtrl::OS | FixedCtrl::PMI));
    ok(&mut p, GCTRL, 1 | 1 << 32);
    p.backend_mut().advance_all(100);
    assert!(!p.backend().overflow_due());
    assert!(!p.collect_overflows());
    assert!(!p.pmi_pending());
    assert_eq!(val(&mut p, STATUS), 0);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), COUNTER_MASK - 9);
    assert_eq!(p.stats().overflows, 0);
    clean(&p);
}

#[test]
fn set_event_filter_stops_and_restarts_running_counters() {
    let mut p = filtered(None);
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Branches));
    ok(&mut p, MsrIndex::perfevtsel(1), sel(ArchEvent::Instructions));
    ok(&mut p, FCTRL, 0x3);
    ok(&mut p, GCTRL, 0b11 | 1 << 32);
    p.backend_mut().advance_all(10);
    p.set_event_filter(Some(PmuEventFilter::deny([BRANCHES], 0b1)));
    assert!(!p.backend().is_enabled(gp(0)));
    assert!(p.backend().is_enabled(gp(1)));
    assert!(!p.backend().is_enabled(fixed(0)));
    assert_eq!(p.stats().filtered_programs, 2);
    p.backend_mut().advance_all(5);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 10, "kept its value, stopped");
    assert_eq!(val(&mut p, MsrIndex::pmc(1)), 15);
    assert_eq!(val(&mut p, MsrIndex::fixed_ctr(0)), 10);
    // Guest-visible registers are untouched by the filter change.
    assert_eq!(val(&mut p, GCTRL), 0b11 | 1 << 32);
    assert_eq!(val(&mut p, MsrIndex::perfevtsel(0)), sel(ArchEvent::Branches));
    // Reuse parks the stopped event and releases it after a slice.
    assert!(p.backend().is_open(gp(0)));
    p.tick(2_000_000);
    p.tick(4_000_000);
    assert!(!p.backend().is_open(gp(0)));
    p.set_event_filter(None);
    assert!(p.event_filter().is_none());
    p.backend_mut().advance_all(1);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 11);
    assert_eq!(val(&mut p, MsrIndex::fixed_ctr(0)), 11);
    clean(&p);
}

#[test]
fn legacy_closes_the_event_of_a_newly_denied_counter() {
    let mut p = filtered_with(None, Policy::Legacy);
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Branches));
    assert!(p.backend().is_open(gp(0)));
    p.set_event_filter(Some(PmuEventFilter::allow([], 0)));
    assert!(!p.backend().is_open(gp(0)));
    assert_eq!(p.backend().open_events(), 0);
    clean(&p);
}

#[test]
fn filter_from_file_text_reaches_the_pmu() {
    let f =
        PmuEventFilter::from_toml_str("action = \"allow\"\nfixed_counters = 0b010\nevents = [ { event = 0xc4 } ]\n")
            .unwrap();
    let mut p = filtered(Some(f.clone()));
    assert_eq!(p.event_filter(), Some(&f));
    assert_eq!(run_branches(&mut p), LOOP);
    assert_eq!(run_fixed(&mut p, 0), 0);
    assert_eq!(run_fixed(&mut p, 1), LOOP);
    assert_eq!(run_fixed(&mut p, 2), 0);
}

#[test]
fn save_restore_keeps_filtered_counters_stopped() {
    let mut p = filtered(Some(PmuEventFilter::deny([BRANCHES], 0)));
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Branches));
    ok(&mut p, MsrIndex::pmc(0), 99);
    let s = p.save();
    p.restore(&s).unwrap();
    assert_eq!(p.save(), s);
    p.backend_mut().advance_all(5);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 99);
    assert_eq!(p.backend().open_events(), 0);
    clean(&p);
}

#[test]
fn stats_add_sums_filtered_programs() {
    let mut a = filtered(Some(PmuEventFilter::allow([], 0)));
    run_branches(&mut a);
    let mut total = pmu::PmuStats::default();
    total.add(&a.stats());
    total.add(&a.stats());
    assert_eq!(total.filtered_programs, 2 * a.stats().filtered_programs);
    assert_eq!(total.faults, 0);
    assert_eq!(total.msr_writes.get(&0x186), Some(&(2 * a.stats().msr_writes[&0x186])));
}
