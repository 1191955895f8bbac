//! Counter gating and the counting model, observed through guest MSRs.

mod common;
use common::*;

#[test]
fn gp_counts_only_with_en_and_global_ctrl() {
    let mut p = pmu();
    let sel0 = sel(ArchEvent::Instructions);
    // EN clear: nothing is opened, nothing counts.
    ok(&mut p, MsrIndex::perfevtsel(0), sel0 & !EN);
    assert!(!p.backend().is_open(gp(0)));
    assert_eq!(p.backend_mut().advance(gp(0), 10), 0);
    // EN set, GLOBAL_CTRL bit set at reset: counts.
    ok(&mut p, MsrIndex::perfevtsel(0), sel0);
    assert!(p.backend().is_enabled(gp(0)));
    p.backend_mut().advance(gp(0), 10);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 10);
    // GLOBAL_CTRL bit clear: stops.
    ok(&mut p, GCTRL, 0b1110);
    assert_eq!(p.backend_mut().advance(gp(0), 10), 0);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 10);
    ok(&mut p, GCTRL, 0b1111);
    p.backend_mut().advance(gp(0), 5);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 15);
    clean(&p);
}

#[test]
fn fixed_counts_only_with_os_or_usr_and_global_ctrl() {
    let mut p = pmu();
    // Fixed enables are clear at reset.
    ok(&mut p, FCTRL, 0x1);
    assert!(!p.backend().is_open(fixed(0)));
    ok(&mut p, GCTRL, 0xF | 1 << 32);
    assert!(p.backend().is_enabled(fixed(0)));
    p.backend_mut().advance(fixed(0), 7);
    assert_eq!(val(&mut p, MsrIndex::fixed_ctr(0)), 7);
    // PMI alone does not enable counting.
    ok(&mut p, FCTRL, 0x8);
    assert_eq!(p.backend_mut().advance(fixed(0), 7), 0);
    assert_eq!(val(&mut p, MsrIndex::fixed_ctr(0)), 7);
    assert!(p.is_active(), "event still open (reuse)");
    clean(&p);
}

#[test]
fn fixed_counters_count_their_fixed_events() {
    let mut p = pmu();
    ok(&mut p, FCTRL, 0x333);
    ok(&mut p, GCTRL, 7 << 32);
    let ev = |p: &Pmu<MockSource>, j| p.backend().event(fixed(j)).unwrap().config.event;
    assert_eq!(ev(&p, 0), ArchEvent::Instructions);
    assert_eq!(ev(&p, 1), ArchEvent::CoreCycles);
    assert_eq!(ev(&p, 2), ArchEvent::RefCycles);
}

#[test]
fn usr_only_counts_nothing_at_cpl0() {
    let mut p = pmu();
    ok(&mut p, MsrIndex::perfevtsel(1), sel(ArchEvent::CoreCycles) & !OS | USR);
    let cfg = p.backend().event(gp(1)).unwrap().config;
    assert!(cfg.usr && !cfg.os);
    p.backend_mut().advance(gp(1), 100);
    assert_eq!(val(&mut p, MsrIndex::pmc(1)), 0);
    p.backend_mut().set_cpl(3);
    p.backend_mut().advance(gp(1), 100);
    assert_eq!(val(&mut p, MsrIndex::pmc(1)), 100);
}

#[test]
fn host_config_carries_eventsel_fields() {
    let mut p = pmu();
    let v = 0x05 << 24 | EventSel::INV | EN | INT | EventSel::EDGE | USR | OS | 0x412E;
    ok(&mut p, MsrIndex::perfevtsel(2), v);
    let c = p.backend().event(gp(2)).unwrap().config;
    assert_eq!(c.event, ArchEvent::LlcMisses);
    assert!(c.usr && c.os && c.edge && c.inv && c.interrupt);
    assert_eq!(c.cmask, 5);
}

#[test]
fn unknown_or_unavailable_events_are_accepted_but_count_nothing() {
    let mut p = pmu_cfg(4, true, MockSource::supporting(&[ArchEvent::Instructions]));
    // Non-architectural event.
    ok(&mut p, MsrIndex::perfevtsel(0), 0x01D1 | OS | EN);
    // Architectural but not available from this backend.
    ok(&mut p, MsrIndex::perfevtsel(1), sel(ArchEvent::LlcMisses));
    assert_eq!(val(&mut p, MsrIndex::perfevtsel(0)), 0x01D1 | OS | EN);
    assert_eq!(p.backend().open_events(), 0);
    assert_eq!(p.backend().calls(), &[]);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 0);
    assert!(p.is_active(), "the guest enabled counters");
    // Switching to a supported event opens it.
    ok(&mut p, MsrIndex::perfevtsel(1), sel(ArchEvent::Instructions));
    assert!(p.backend().is_enabled(gp(1)));
}

#[test]
fn value_survives_disable_enable() {
    for policy in [REUSE_1MS, Policy::Legacy] {
        let mut p = pmu_with(policy);
        ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Branches));
        p.backend_mut().advance(gp(0), 100);
        ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Branches) & !EN);
        p.backend_mut().advance(gp(0), 1000);
        assert_eq!(val(&mut p, MsrIndex::pmc(0)), 100, "{policy:?}");
        ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Branches));
        p.backend_mut().advance(gp(0), 23);
        assert_eq!(val(&mut p, MsrIndex::pmc(0)), 123, "{policy:?}");
        // And across a config change (new host event, raw restarts at 0).
        ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::BranchMisses));
        p.backend_mut().advance(gp(0), 7);
        assert_eq!(val(&mut p, MsrIndex::pmc(0)), 130, "{policy:?}");
        clean(&p);
    }
}

#[test]
fn value_survives_sched_out_in() {
    for policy in [REUSE_1MS, Policy::Legacy] {
        let mut p = pmu_with(policy);
        ok(&mut p, MsrIndex::perfevtsel(3), sel(ArchEvent::CoreCycles));
        ok(&mut p, FCTRL, 0x2 << 4 | 0x1 << 4);
        ok(&mut p, GCTRL, 0xF | 1 << 33);
        p.backend_mut().advance_all(50);
        p.sched_out();
        assert!(!p.is_scheduled_in());
        assert!(!p.backend().is_enabled(gp(3)) && !p.backend().is_enabled(fixed(1)));
        assert!(p.backend().is_open(gp(3)), "sched_out keeps events open");
        p.backend_mut().advance_all(999);
        assert_eq!(val(&mut p, MsrIndex::pmc(3)), 50);
        assert_eq!(val(&mut p, MsrIndex::fixed_ctr(1)), 50);
        p.sched_out();
        p.sched_in();
        p.sched_in();
        assert!(p.backend().is_enabled(gp(3)) && p.backend().is_enabled(fixed(1)));
        p.backend_mut().advance_all(5);
        assert_eq!(val(&mut p, MsrIndex::pmc(3)), 55);
        assert_eq!(val(&mut p, MsrIndex::fixed_ctr(1)), 55);
        clean(&p);
    }
}

#[test]
fn sched_out_in_does_not_reopen_events() {
    let mut p = pmu();
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::CoreCycles));
    take(&mut p);
    p.sched_out();
    p.sched_in();
    let calls = lifecycle(&take(&mut p));
    assert_eq!(calls, vec![MockCall::Disable(gp(0)), MockCall::Enable(gp(0))]);
}

#[test]
fn write_to_running_counter_restarts_from_new_value() {
    let mut p = pmu();
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Instructions));
    p.backend_mut().advance(gp(0), 40);
    take(&mut p);
    ok(&mut p, MsrIndex::a_pmc(0), 1000);
    let calls = take(&mut p);
    assert_eq!(
        calls,
        vec![MockCall::Read(gp(0)), MockCall::Arm(gp(0), Some((1 << 48) - 1000))],
        "fold, then re-arm; no reopen"
    );
    p.backend_mut().advance(gp(0), 5);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 1005);
    clean(&p);
}

#[test]
fn write_to_stopped_counter_is_armed_on_start() {
    let mut p = pmu();
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Instructions));
    ok(&mut p, GCTRL, 0);
    take(&mut p);
    ok(&mut p, MsrIndex::pmc(0), 0xFFFF_FFF0); // -16
    assert_eq!(take(&mut p), vec![], "stopped: no backend call");
    ok(&mut p, GCTRL, 1);
    assert_eq!(take(&mut p), vec![MockCall::Arm(gp(0), Some(16)), MockCall::Enable(gp(0))]);
}

#[test]
fn enable_without_value_change_does_not_rearm() {
    let mut p = pmu();
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Instructions));
    ok(&mut p, GCTRL, 0);
    take(&mut p);
    ok(&mut p, GCTRL, 1);
    assert_eq!(take(&mut p), vec![MockCall::Enable(gp(0))], "deadline survives disable");
}

#[test]
fn counts_wider_than_48_bits_wrap() {
    let mut p = pmu();
    ok(&mut p, MsrIndex::a_pmc(0), COUNTER_MASK - 1);
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::Instructions));
    p.backend_mut().advance(gp(0), 3);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 1);
    assert_eq!(p.rdpmc(RdpmcIdx(0)), MsrAccess::Ok(1));
}

#[test]
fn rdpmc_reads_live_counts() {
    let mut p = pmu();
    ok(&mut p, FCTRL, 0x1);
    ok(&mut p, GCTRL, 1 << 32);
    p.backend_mut().advance(fixed(0), 0x1_0000_0005);
    assert_eq!(p.rdpmc(RdpmcIdx(1 << 30)), MsrAccess::Ok(0x1_0000_0005));
    assert_eq!(p.rdpmc(RdpmcIdx(1 << 31 | 1 << 30)), MsrAccess::Ok(5));
}

#[test]
fn is_active_tracks_enables_and_open_events() {
    let mut p = pmu_with(Policy::Legacy);
    assert!(!p.is_active());
    ok(&mut p, GCTRL, 0);
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::CoreCycles));
    assert!(!p.is_active(), "locally enabled but globally off");
    ok(&mut p, GCTRL, 1);
    assert!(p.is_active());
    ok(&mut p, GCTRL, 0);
    assert!(!p.is_active(), "legacy closes at once");
    let mut p = pmu();
    ok(&mut p, MsrIndex::perfevtsel(0), sel(ArchEvent::CoreCycles));
    ok(&mut p, GCTRL, 0);
    assert!(p.is_active(), "reuse keeps the idle event open");
    p.tick(1_000_000);
    assert!(!p.is_active());
}

#[test]
fn boxed_dyn_backend_works() {
    let backend: Box<dyn pmu::CountSource> = Box::new(MockSource::new());
    let mut p = Pmu::new(PmuConfig::default(), backend).unwrap();
    assert!(p.set_msr(MsrIndex::perfevtsel(0), sel(ArchEvent::Instructions), Initiator::Guest).is_ok());
    assert!(p.is_active());
}
