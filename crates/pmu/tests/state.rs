//! Save/restore.

mod common;
use common::*;
use pmu::{PmuState, RestoreError, STATE_FORMAT};

fn busy() -> Pmu<MockSource> {
    let mut p = pmu();
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Instructions) | INT);
    ok(&mut p, MsrIndex::perfevtsel(2), sel(ArchEvent::Branches) & !EN);
    ok(&mut p, MsrIndex::a_pmc(2), 0xFFFF_0000_0000);
    ok(&mut p, FCTRL, 0x0B3);
    ok(&mut p, GCTRL, 0b0101 | 3 << 32);
    hwr(&mut p, STATUS, 1 << 63 | 1 << 1).ok().unwrap();
    p.backend_mut().advance_all(1234);
    p
}

#[test]
fn save_restore_roundtrip_through_json() {
    let mut a = busy();
    let s = a.save();
    assert_eq!(s.format, STATE_FORMAT);
    assert_eq!(s.pmc, vec![1234, 0, 0xFFFF_0000_0000, 0]);
    assert_eq!(s.fixed_ctr, vec![1234, 1234, 0]);
    let json = serde_json::to_string(&s).unwrap();
    let back: PmuState = serde_json::from_str(&json).unwrap();
    assert_eq!(back, s);

    let mut b = pmu();
    b.restore(&back).unwrap();
    assert_eq!(b.save(), s);
    // The restored PMU counts where the old one did.
    assert!(b.backend().is_enabled(gp(0)) && b.backend().is_enabled(fixed(0)) && b.backend().is_enabled(fixed(1)));
    assert!(!b.backend().is_open(gp(2)));
    b.backend_mut().advance(gp(0), 6);
    assert_eq!(val(&mut b, MsrIndex::pmc(0)), 1240);
    assert_eq!(val(&mut b, STATUS), 1 << 63 | 1 << 1);
    // The overflow deadline follows the restored value.
    assert_eq!(b.backend().event(gp(0)).unwrap().overflow_at, Some((1 << 48) - 1234));
    clean(&b);
}

#[test]
fn restore_into_legacy_policy() {
    let mut a = busy();
    let s = a.save();
    let mut b = pmu_with(Policy::Legacy);
    b.restore(&s).unwrap();
    assert_eq!(b.save(), s);
    clean(&b);
}

#[test]
fn restore_replaces_previous_state() {
    let mut a = busy();
    let s = pmu().save();
    a.restore(&s).unwrap();
    assert_eq!(a.save(), s);
    assert_eq!(a.backend().open_events(), 0);
    assert!(!a.is_active());
}

#[test]
fn restore_rejects_bad_snapshots() {
    let mut p = busy();
    let good = p.save();

    let mut s = good.clone();
    s.format = 99;
    assert_eq!(p.restore(&s), Err(RestoreError::Format(99)));

    let mut s = good.clone();
    s.pmc.push(0);
    assert!(matches!(p.restore(&s), Err(RestoreError::Shape { .. })));

    let mut s = good.clone();
    s.fixed_ctr.pop();
    assert!(matches!(p.restore(&s), Err(RestoreError::Shape { .. })));
    // Found while writing the fuzzer's oracle: format and shape errors are refused before
    // the reset, so the PMU is untouched (the docs said "left reset").
    assert_eq!(p.save(), good, "untouched by format/shape errors");

    let mut s = good.clone();
    s.eventsel[1] = 1 << 21;
    assert_eq!(p.restore(&s), Err(RestoreError::Rejected { msr: 0x187, value: 1 << 21 }));
    assert_eq!(p.save(), pmu().save(), "left reset on error");

    let mut s = good.clone();
    s.pmc[3] = 1 << 48;
    assert_eq!(p.restore(&s), Err(RestoreError::Rejected { msr: 0xC4, value: 1 << 48 }));

    let mut s = good.clone();
    s.global_ctrl = 1 << 10;
    assert!(matches!(p.restore(&s), Err(RestoreError::Rejected { msr: 0x38F, .. })));

    let mut s = good;
    s.global_status = 1 << 40;
    assert!(matches!(p.restore(&s), Err(RestoreError::Rejected { msr: 0x38E, .. })));
    clean(&p);
}

#[test]
fn restore_error_messages() {
    assert_eq!(RestoreError::Format(3).to_string(), "Unsupported snapshot format 3");
    assert_eq!(
        RestoreError::Rejected { msr: 0x38F, value: 0x400 }.to_string(),
        "Snapshot value 0x400 rejected by MSR 0x38f"
    );
}
