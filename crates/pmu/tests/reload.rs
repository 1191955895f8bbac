//! Auto-reload (paravirtual sampling): reload at the wrap with the overshoot kept, the
//! overflow acknowledged by the model, the PMI still owed, SDM semantics without it.

mod common;
use common::*;

const PERIOD: u64 = 1000;

/// GP counter 0 sampling instructions every PERIOD, reloaded automatically.
fn sampling() -> Pmu<MockSource> {
    let mut p = pmu();
    p.set_auto_reload(gp(0), Some(PERIOD.wrapping_neg()));
    ok(&mut p, MsrIndex::a_pmc(0), PERIOD.wrapping_neg() & COUNTER_MASK);
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Instructions) | INT);
    p
}

#[test]
fn wrap_reloads_keeps_the_overshoot_and_acknowledges() {
    let mut p = sampling();
    assert!(p.auto_reload_active());
    p.backend_mut().advance(gp(0), PERIOD + 7);
    assert!(p.collect_overflows(), "the PMI is still owed");
    assert_eq!(val(&mut p, STATUS), 0, "acknowledged by the model");
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), (PERIOD.wrapping_neg() + 7) & COUNTER_MASK);
    assert_eq!((p.take_auto_reloaded(), p.take_auto_reloaded()), (1, 0));
    assert_eq!(p.auto_reloads(gp(0)), 1);
    // Re-armed for the rest of the next period.
    assert_eq!(p.backend().event(gp(0)).unwrap().overflow_at, Some(PERIOD + 7 + PERIOD - 7));
}

#[test]
fn a_read_that_finds_the_wrap_reloads_too() {
    let mut p = sampling();
    p.backend_mut().advance(gp(0), PERIOD + 3);
    // The RDMSR folds the counter: the reload happens in that same access, so the value
    // read and the reload count always agree.
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), (PERIOD.wrapping_neg() + 3) & COUNTER_MASK);
    assert_eq!(p.auto_reloads(gp(0)), 1);
    // Total events from the reload count and the raw value: reloads x period + (raw - start).
    let raw = val(&mut p, MsrIndex::pmc(0));
    let start = PERIOD.wrapping_neg() & COUNTER_MASK;
    assert_eq!(p.auto_reloads(gp(0)) * PERIOD + raw.wrapping_sub(start), PERIOD + 3);
}

#[test]
fn a_wrap_noticed_whole_periods_late_counts_every_period() {
    let mut p = sampling();
    p.backend_mut().advance(gp(0), 3 * PERIOD + 5);
    assert!(p.collect_overflows());
    assert_eq!(p.auto_reloads(gp(0)), 3);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), (PERIOD.wrapping_neg() + 5) & COUNTER_MASK);
}

#[test]
fn without_a_reload_value_the_sdm_rules_hold() {
    let mut p = sampling();
    p.set_auto_reload(gp(0), None);
    assert!(!p.auto_reload_active());
    p.backend_mut().advance(gp(0), PERIOD + 7);
    assert!(p.collect_overflows());
    assert_eq!(val(&mut p, STATUS), 1);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 7);
    assert_eq!(p.take_auto_reloaded(), 0);
}

#[test]
fn reset_forgets_reload_values_and_counts() {
    let mut p = sampling();
    p.backend_mut().advance(gp(0), PERIOD);
    p.collect_overflows();
    p.reset();
    assert!(!p.auto_reload_active());
    assert_eq!(p.auto_reloads(gp(0)), 0);
}

#[test]
fn counters_the_pmu_lacks_are_ignored() {
    let mut p = pmu(); // 4 GP counters
    p.set_auto_reload(gp(6), Some(5));
    assert!(!p.auto_reload_active());
}
