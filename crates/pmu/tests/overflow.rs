//! Overflow: GLOBAL_STATUS, OVF_CTRL, re-arming and the PMI request.

mod common;
use common::*;

/// GP counter 0 counting instructions from `start`, with `extra` EVENTSEL bits.
fn armed(start: u64, extra: u64) -> Pmu<MockSource> {
    let mut p = pmu();
    ok(&mut p, MsrIndex::a_pmc(0), start);
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Instructions) | extra);
    p
}

#[test]
fn arming_matches_counter_value() {
    let p = armed(COUNTER_MASK - 99, 0);
    assert_eq!(p.backend().event(gp(0)).unwrap().overflow_at, Some(100));
    let p = armed(0, 0);
    assert_eq!(p.backend().event(gp(0)).unwrap().overflow_at, Some(1 << 48));
}

#[test]
fn overflow_sets_status_and_requests_pmi_with_int() {
    let mut p = armed(COUNTER_MASK - 9, INT);
    p.backend_mut().advance(gp(0), 9);
    assert!(!p.backend().overflow_due());
    p.backend_mut().advance(gp(0), 1);
    assert!(p.backend().overflow_due());
    assert!(p.collect_overflows());
    assert_eq!(val(&mut p, STATUS), 1);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 0);
    // Re-armed for a full period from the wrapped value.
    assert_eq!(p.backend().event(gp(0)).unwrap().overflow_at, Some(10 + (1 << 48)));
    assert!(!p.backend().overflow_due());
    assert!(!p.collect_overflows(), "nothing new");
    let s = p.stats();
    assert_eq!((s.overflows, s.pmis_requested), (1, 1));
    clean(&p);
}

#[test]
fn overflow_without_int_sets_status_but_no_pmi() {
    let mut p = armed(COUNTER_MASK, 0);
    p.backend_mut().advance(gp(0), 3);
    assert!(!p.collect_overflows());
    assert_eq!(val(&mut p, STATUS), 1);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 2);
    assert_eq!(p.stats().pmis_requested, 0);
}

#[test]
fn fixed_overflow_uses_pmi_bit() {
    for (ctrl, pmi) in [(0x1u64, false), (0x9, true)] {
        let mut p = pmu();
        ok(&mut p, MsrIndex::fixed_ctr(2), COUNTER_MASK);
        ok(&mut p, FCTRL, ctrl << 8);
        ok(&mut p, GCTRL, 1 << 34);
        p.backend_mut().advance(fixed(2), 1);
        assert!(p.backend().overflow_due());
        assert_eq!(p.collect_overflows(), pmi, "ctrl {ctrl:#x}");
        assert_eq!(val(&mut p, STATUS), 1 << 34);
    }
}

#[test]
fn ovf_ctrl_clears_overflow_status() {
    let mut p = armed(COUNTER_MASK, INT);
    p.backend_mut().advance(gp(0), 1);
    assert!(p.collect_overflows());
    assert_eq!(val(&mut p, STATUS), 1);
    ok(&mut p, OVF, 1);
    assert_eq!(val(&mut p, STATUS), 0);
}

#[test]
fn overflow_seen_while_folding_is_not_lost() {
    // The guest disables the counter before the VMM got the backend's signal.
    let mut p = armed(COUNTER_MASK - 1, INT);
    p.backend_mut().advance(gp(0), 5);
    ok(&mut p, GCTRL, 0);
    assert_eq!(val(&mut p, STATUS), 1);
    assert!(p.pmi_pending());
    assert!(p.collect_overflows());
    assert!(!p.pmi_pending());
    // The stale deadline is replaced when counting resumes.
    take(&mut p);
    ok(&mut p, GCTRL, 1);
    assert_eq!(take(&mut p), vec![MockCall::Arm(gp(0), Some((1 << 48) - 3)), MockCall::Enable(gp(0))]);
}

#[test]
fn overflow_on_read_sets_status() {
    let mut p = armed(COUNTER_MASK, 0);
    p.backend_mut().advance(gp(0), 1);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 0);
    assert_eq!(val(&mut p, STATUS), 1);
}

#[test]
fn pmi_follows_int_of_the_config_counts_accrued_under() {
    // Counts that wrapped under INT=1 request a PMI even if INT is cleared afterwards.
    let mut p = armed(COUNTER_MASK, INT);
    p.backend_mut().advance(gp(0), 1);
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Instructions));
    assert!(p.collect_overflows());
}

#[test]
fn several_counters_overflow_together() {
    let mut p = pmu();
    for i in 0..4 {
        ok(&mut p, MsrIndex::a_pmc(i), COUNTER_MASK);
        ok(&mut p, MsrIndex::perfevtsel(i), sel(ArchEvent::CoreCycles) | if i == 2 { INT } else { 0 });
    }
    ok(&mut p, MsrIndex::fixed_ctr(1), COUNTER_MASK);
    ok(&mut p, FCTRL, 0x1 << 4);
    ok(&mut p, GCTRL, 0b0101 | 1 << 33);
    p.backend_mut().advance_all(1);
    assert!(p.collect_overflows());
    assert_eq!(val(&mut p, STATUS), 0b0101 | 1 << 33);
    assert_eq!(p.stats().overflows, 3);
}

#[test]
fn collect_without_running_counters_is_free() {
    let mut p = pmu();
    assert!(!p.collect_overflows());
    assert_eq!(p.stats().backend_calls.total(), 0);
}
