//! Host event policies: reuse + lazy release vs legacy (old KVM).

mod common;
use common::*;

const SEL: fn(ArchEvent) -> u64 = sel;

#[test]
fn reuse_same_eventsel_rewrite_makes_no_backend_call() {
    let mut p = pmu();
    let v = SEL(ArchEvent::Instructions);
    ok(&mut p, MsrIndex::perfevtsel(0), v);
    let before = p.stats().backend_calls;
    take(&mut p);
    for _ in 0..10 {
        ok(&mut p, MsrIndex::perfevtsel(0), v);
        ok(&mut p, GCTRL, 0xF);
        ok(&mut p, FCTRL, 0);
    }
    assert_eq!(take(&mut p), vec![]);
    assert_eq!(p.stats().backend_calls, before);
}

#[test]
fn reuse_en_toggle_is_enable_disable_not_open() {
    let mut p = pmu();
    let v = SEL(ArchEvent::Instructions);
    ok(&mut p, MsrIndex::perfevtsel(0), v);
    assert_eq!(p.stats().events_created, 1);
    take(&mut p);
    for _ in 0..3 {
        ok(&mut p, MsrIndex::perfevtsel(0), v & !EN);
        ok(&mut p, MsrIndex::perfevtsel(0), v);
    }
    let calls = lifecycle(&take(&mut p));
    assert_eq!(calls, [MockCall::Disable(gp(0)), MockCall::Enable(gp(0))].repeat(3));
    let s = p.stats();
    assert_eq!((s.events_created, s.events_reused, s.events_closed), (1, 3, 0));
    clean(&p);
}

#[test]
fn reuse_global_ctrl_toggle_is_enable_disable() {
    let mut p = pmu();
    ok(&mut p, MsrIndex::perfevtsel(0), SEL(ArchEvent::Instructions));
    ok(&mut p, MsrIndex::perfevtsel(1), SEL(ArchEvent::CoreCycles));
    ok(&mut p, FCTRL, 0x3);
    ok(&mut p, GCTRL, 0b11 | 1 << 32);
    take(&mut p);
    ok(&mut p, GCTRL, 0);
    ok(&mut p, GCTRL, 0b11 | 1 << 32);
    let calls = lifecycle(&take(&mut p));
    assert!(calls.iter().all(|c| matches!(c, MockCall::Enable(_) | MockCall::Disable(_))), "{calls:?}");
    assert_eq!(calls.len(), 6);
    // Flipping one bit touches one counter.
    ok(&mut p, GCTRL, 0b10 | 1 << 32);
    assert_eq!(lifecycle(&take(&mut p)), vec![MockCall::Disable(gp(0))]);
}

#[test]
fn reuse_fixed_ctrl_toggle_is_enable_disable() {
    let mut p = pmu();
    ok(&mut p, GCTRL, 7 << 32);
    ok(&mut p, FCTRL, 0x333);
    take(&mut p);
    ok(&mut p, FCTRL, 0x303);
    ok(&mut p, FCTRL, 0x333);
    assert_eq!(lifecycle(&take(&mut p)), vec![MockCall::Disable(fixed(1)), MockCall::Enable(fixed(1))]);
}

#[test]
fn reuse_config_change_closes_and_reopens() {
    let changes = [
        SEL(ArchEvent::Branches),                      // event
        SEL(ArchEvent::Instructions) | USR,            // usr
        SEL(ArchEvent::Instructions) & !OS | USR,      // os
        SEL(ArchEvent::Instructions) | EventSel::EDGE, // edge
        SEL(ArchEvent::Instructions) | EventSel::INV,  // inv
        SEL(ArchEvent::Instructions) | 1 << 24,        // cmask
        SEL(ArchEvent::Instructions) | INT,            // int
    ];
    for v in changes {
        let mut p = pmu();
        ok(&mut p, MsrIndex::perfevtsel(0), SEL(ArchEvent::Instructions));
        take(&mut p);
        ok(&mut p, MsrIndex::perfevtsel(0), v);
        let calls = lifecycle(&take(&mut p));
        assert!(
            matches!(calls.as_slice(), [MockCall::Close(a), MockCall::Open(b, _), MockCall::Enable(c)] if *a == gp(0) && *b == gp(0) && *c == gp(0)),
            "{v:#x}: {calls:?}"
        );
        clean(&p);
    }
}

#[test]
fn reuse_pin_control_is_not_a_config_change() {
    let mut p = pmu();
    ok(&mut p, MsrIndex::perfevtsel(0), SEL(ArchEvent::Instructions));
    take(&mut p);
    ok(&mut p, MsrIndex::perfevtsel(0), SEL(ArchEvent::Instructions) | EventSel::PC);
    assert_eq!(take(&mut p), vec![]);
}

#[test]
fn reuse_fixed_config_change_reopens() {
    let mut p = pmu();
    ok(&mut p, GCTRL, 1 << 32);
    ok(&mut p, FCTRL, 0x1);
    take(&mut p);
    ok(&mut p, FCTRL, 0x9);
    let calls = lifecycle(&take(&mut p));
    assert!(matches!(calls.as_slice(), [MockCall::Close(_), MockCall::Open(_, c), MockCall::Enable(_)] if c.interrupt));
}

#[test]
fn reuse_lazy_release_after_the_slice_and_not_before() {
    let mut p = pmu();
    p.tick(5_000);
    ok(&mut p, MsrIndex::perfevtsel(0), SEL(ArchEvent::Instructions));
    ok(&mut p, MsrIndex::perfevtsel(0), SEL(ArchEvent::Instructions) & !EN);
    assert!(p.backend().is_open(gp(0)));
    p.tick(5_000 + 999_999);
    assert!(p.backend().is_open(gp(0)), "not before the slice");
    assert_eq!(p.stats().events_lazily_released, 0);
    p.tick(5_000 + 1_000_000);
    assert!(!p.backend().is_open(gp(0)), "released after the slice");
    let s = p.stats();
    assert_eq!((s.events_lazily_released, s.events_closed), (1, 1));
    assert!(!p.is_active());
    // Re-enabling after release creates a new event and keeps the value.
    p.backend_mut().take_calls();
    ok(&mut p, MsrIndex::perfevtsel(0), SEL(ArchEvent::Instructions));
    assert!(matches!(lifecycle(&take(&mut p)).as_slice(), [MockCall::Open(..), MockCall::Enable(_)]));
    clean(&p);
}

#[test]
fn reuse_counting_events_are_never_released() {
    let mut p = pmu();
    ok(&mut p, MsrIndex::perfevtsel(0), SEL(ArchEvent::Instructions));
    p.tick(1_000_000_000);
    assert!(p.backend().is_enabled(gp(0)));
    // Nor are events merely scheduled out.
    p.sched_out();
    p.tick(2_000_000_000);
    assert!(p.backend().is_open(gp(0)));
}

#[test]
fn reuse_re_enable_resets_the_idle_clock() {
    let mut p = pmu();
    ok(&mut p, MsrIndex::perfevtsel(0), SEL(ArchEvent::Instructions));
    ok(&mut p, GCTRL, 0);
    p.tick(900_000);
    ok(&mut p, GCTRL, 1);
    ok(&mut p, GCTRL, 0);
    p.tick(1_000_000);
    assert!(p.backend().is_open(gp(0)), "idle only since 900us");
    p.tick(1_900_000);
    assert!(!p.backend().is_open(gp(0)));
}

#[test]
fn reuse_release_slice_is_configurable() {
    let mut p = pmu_with(Policy::Reuse { release_after_ns: 0 });
    ok(&mut p, MsrIndex::perfevtsel(0), SEL(ArchEvent::Instructions));
    ok(&mut p, GCTRL, 0);
    p.tick(0);
    assert!(!p.backend().is_open(gp(0)));
}

#[test]
fn reuse_idle_event_replaced_on_reenable_with_new_config() {
    let mut p = pmu();
    ok(&mut p, MsrIndex::perfevtsel(0), SEL(ArchEvent::Instructions));
    ok(&mut p, MsrIndex::perfevtsel(0), SEL(ArchEvent::Branches) & !EN);
    take(&mut p);
    ok(&mut p, MsrIndex::perfevtsel(0), SEL(ArchEvent::Branches));
    assert!(matches!(
        lifecycle(&take(&mut p)).as_slice(),
        [MockCall::Close(_), MockCall::Open(..), MockCall::Enable(_)]
    ));
    clean(&p);
}

#[test]
fn legacy_every_changing_write_recreates() {
    let mut p = pmu_with(Policy::Legacy);
    let v = SEL(ArchEvent::Instructions);
    ok(&mut p, MsrIndex::perfevtsel(0), v);
    take(&mut p);
    // Toggling EN: close on disable, create on enable.
    ok(&mut p, MsrIndex::perfevtsel(0), v & !EN);
    assert_eq!(lifecycle(&take(&mut p)), vec![MockCall::Close(gp(0))]);
    ok(&mut p, MsrIndex::perfevtsel(0), v);
    assert!(matches!(lifecycle(&take(&mut p)).as_slice(), [MockCall::Open(..), MockCall::Enable(_)]));
    // A change that leaves the host config alike still recreates (PC bit).
    ok(&mut p, MsrIndex::perfevtsel(0), v | EventSel::PC);
    assert!(matches!(
        lifecycle(&take(&mut p)).as_slice(),
        [MockCall::Close(_), MockCall::Open(..), MockCall::Enable(_)]
    ));
    // Same value: old KVM returned early too.
    ok(&mut p, MsrIndex::perfevtsel(0), v | EventSel::PC);
    assert_eq!(take(&mut p), vec![]);
    let s = p.stats();
    assert_eq!((s.events_created, s.events_reused, s.events_closed), (3, 0, 2));
    clean(&p);
}

#[test]
fn legacy_global_ctrl_recreates_flipped_counters_only() {
    let mut p = pmu_with(Policy::Legacy);
    ok(&mut p, MsrIndex::perfevtsel(0), SEL(ArchEvent::Instructions));
    ok(&mut p, MsrIndex::perfevtsel(1), SEL(ArchEvent::CoreCycles));
    take(&mut p);
    ok(&mut p, GCTRL, 0b1101);
    assert_eq!(lifecycle(&take(&mut p)), vec![MockCall::Close(gp(1))]);
    ok(&mut p, GCTRL, 0b1111);
    assert!(matches!(lifecycle(&take(&mut p)).as_slice(), [MockCall::Open(i, _), MockCall::Enable(_)] if *i == gp(1)));
    // Bits for counters with EN clear flip without any backend call.
    ok(&mut p, GCTRL, 0b0011);
    assert_eq!(take(&mut p), vec![]);
}

#[test]
fn legacy_fixed_ctrl_recreates_changed_fields_only() {
    let mut p = pmu_with(Policy::Legacy);
    ok(&mut p, GCTRL, 7 << 32);
    ok(&mut p, FCTRL, 0x111);
    take(&mut p);
    ok(&mut p, FCTRL, 0x131);
    let calls = lifecycle(&take(&mut p));
    assert!(
        matches!(calls.as_slice(), [MockCall::Close(a), MockCall::Open(b, _), MockCall::Enable(_)] if *a == fixed(1) && *b == fixed(1)),
        "{calls:?}"
    );
}

#[test]
fn legacy_never_keeps_idle_events_and_tick_does_nothing() {
    let mut p = pmu_with(Policy::Legacy);
    ok(&mut p, MsrIndex::perfevtsel(0), SEL(ArchEvent::Instructions));
    ok(&mut p, GCTRL, 0);
    assert_eq!(p.backend().open_events(), 0);
    p.tick(u64::MAX);
    assert_eq!(p.stats().events_lazily_released, 0);
}

#[test]
fn policies_agree_on_guest_visible_values() {
    let mut a = pmu_with(REUSE_1MS);
    let mut b = pmu_with(Policy::Legacy);
    let script: &[(MsrIndex, u64)] = &[
        (MsrIndex::perfevtsel(0), SEL(ArchEvent::Instructions)),
        (GCTRL, 0b1),
        (MsrIndex::perfevtsel(0), SEL(ArchEvent::Instructions) & !EN),
        (MsrIndex::perfevtsel(0), SEL(ArchEvent::Instructions)),
        (FCTRL, 0x3),
        (GCTRL, 0b1 | 1 << 32),
        (MsrIndex::pmc(0), 100),
        (MsrIndex::perfevtsel(0), SEL(ArchEvent::Branches)),
        (GCTRL, 1 << 32),
        (GCTRL, 0b1 | 1 << 32),
    ];
    for &(msr, v) in script {
        ok(&mut a, msr, v);
        ok(&mut b, msr, v);
        a.backend_mut().advance_all(17);
        b.backend_mut().advance_all(17);
        for m in [MsrIndex::pmc(0), MsrIndex::fixed_ctr(0), STATUS] {
            assert_eq!(val(&mut a, m), val(&mut b, m), "after {:#x} <- {v:#x}, {:#x}", msr.0, m.0);
        }
    }
    assert!(a.stats().events_created < b.stats().events_created);
    clean(&a);
    clean(&b);
}

#[test]
fn failed_open_counts_nothing_and_is_retried() {
    let mut p = pmu();
    p.backend_mut().set_fail_open(true);
    ok(&mut p, MsrIndex::perfevtsel(0), SEL(ArchEvent::Instructions));
    assert_eq!(p.stats().open_failures, 1);
    assert!(!p.backend().is_open(gp(0)));
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 0);
    assert!(p.is_active());
    p.backend_mut().set_fail_open(false);
    p.sched_out();
    p.sched_in();
    assert!(p.backend().is_enabled(gp(0)), "retried at sched_in");
    p.backend_mut().advance(gp(0), 3);
    assert_eq!(val(&mut p, MsrIndex::pmc(0)), 3);
    clean(&p);
}

#[test]
fn failed_open_retried_on_next_write() {
    let mut p = pmu();
    p.backend_mut().set_fail_open(true);
    ok(&mut p, MsrIndex::perfevtsel(0), SEL(ArchEvent::Instructions));
    p.backend_mut().set_fail_open(false);
    ok(&mut p, MsrIndex::perfevtsel(0), SEL(ArchEvent::Instructions) | INT);
    assert!(p.backend().is_enabled(gp(0)));
}

#[test]
fn stats_serialize() {
    let mut p = pmu();
    ok(&mut p, MsrIndex::perfevtsel(0), SEL(ArchEvent::Instructions));
    let json = serde_json::to_value(p.stats()).unwrap();
    assert_eq!(json["events_created"], 1);
    assert_eq!(json["backend_calls"]["open"], 1);
    assert_eq!(json["msr_writes"]["390"], 1);
}

/// A MockSource that also records the batch calls a GLOBAL_CTRL write makes.
#[derive(Default)]
struct Batches {
    inner: MockSource,
    batches: Vec<(&'static str, u64)>,
}

impl pmu::CountSource for Batches {
    fn supports(&self, event: ArchEvent) -> bool {
        self.inner.supports(event)
    }
    fn open(&mut self, pmc: PmcIdx, config: &pmu::HostEventConfig) -> Result<(), pmu::BackendError> {
        self.inner.open(pmc, config)
    }
    fn close(&mut self, pmc: PmcIdx) {
        self.inner.close(pmc)
    }
    fn enable(&mut self, pmc: PmcIdx) {
        self.batches.push(("enable", pmc.mask()));
        self.inner.enable(pmc)
    }
    fn disable(&mut self, pmc: PmcIdx) {
        self.batches.push(("disable", pmc.mask()));
        self.inner.disable(pmc)
    }
    fn read(&mut self, pmc: PmcIdx) -> u64 {
        self.inner.read(pmc)
    }
    fn arm_overflow(&mut self, pmc: PmcIdx, after: Option<u64>) {
        self.inner.arm_overflow(pmc, after)
    }
    fn enable_many(&mut self, mask: u64) {
        self.batches.push(("enable_many", mask));
        self.inner.enable_many(mask)
    }
    fn disable_many(&mut self, mask: u64) {
        self.batches.push(("disable_many", mask));
        self.inner.disable_many(mask)
    }
}

/// The backend calls of GLOBAL_CTRL 0 -> 0xf -> 0 with four programmed counters.
fn global_ctrl_batches(policy: Policy) -> Vec<(&'static str, u64)> {
    let mut p = Pmu::new(PmuConfig { policy, ..PmuConfig::default() }, Batches::default()).unwrap();
    assert!(p.set_msr(GCTRL, 0, Initiator::Guest).is_ok());
    for i in 0..4 {
        assert!(p.set_msr(MsrIndex::perfevtsel(i), sel(ArchEvent::CoreCycles), Initiator::Guest).is_ok());
    }
    p.backend_mut().batches.clear();
    assert!(p.set_msr(GCTRL, 0xf, Initiator::Guest).is_ok());
    assert!(p.set_msr(GCTRL, 0, Initiator::Guest).is_ok());
    std::mem::take(&mut p.backend_mut().batches)
}

#[test]
fn reuse_global_ctrl_write_is_one_backend_call_whatever_the_counters() {
    assert_eq!(global_ctrl_batches(REUSE_1MS), [("enable_many", 0xf), ("disable_many", 0xf)]);
}

#[test]
fn legacy_global_ctrl_write_stays_one_counter_at_a_time() {
    let batches = global_ctrl_batches(Policy::Legacy);
    assert!(batches.iter().all(|&(_, mask)| mask.count_ones() == 1), "{batches:?}");
    assert_eq!(batches.iter().filter(|(what, _)| what.starts_with("enable")).count(), 4, "{batches:?}");
}
