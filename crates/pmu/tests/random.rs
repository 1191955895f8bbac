//! Seeded random MSR traffic: never panics, reserved bits always fault, the backend
//! protocol is never breached, and both policies show the guest the same values.

mod common;
use common::*;
use pmu::{PmuCaps, PmuMsr};

/// xorshift64*: small, deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

/// What a write to an MSR may carry, as the SDM/KVM define it.
#[derive(Clone, Copy, Debug)]
enum Rule {
    /// The MSR does not exist in this PMU: every access faults.
    Absent,
    /// Exists, but this initiator may not write it.
    ReadOnly,
    /// Writable except for these reserved bits.
    Reserved(u64),
    /// Only this exact value is accepted (host confirming PERF_CAPABILITIES).
    Exact(u64),
}

fn rule(caps: &PmuCaps, msr: MsrIndex, host: bool) -> Rule {
    let has_gp = |i: u8| i < caps.gp_counters();
    match PmuMsr::decode(msr) {
        Some(PmuMsr::Pmc(i)) if has_gp(i) => Rule::Reserved(0),
        Some(PmuMsr::FullWidthPmc(i)) if has_gp(i) && caps.full_width_writes() => Rule::Reserved(!COUNTER_MASK),
        Some(PmuMsr::EventSel(i)) if has_gp(i) => Rule::Reserved(0xFFFF_FFFF_0020_0000),
        Some(PmuMsr::FixedCtr(j)) if j < caps.fixed_counters() => Rule::Reserved(0),
        Some(PmuMsr::FixedCtrCtrl) => Rule::Reserved(caps.fixed_ctr_ctrl_reserved()),
        Some(PmuMsr::GlobalCtrl) => Rule::Reserved(caps.global_ctrl_reserved()),
        Some(PmuMsr::GlobalOvfCtrl) => Rule::Reserved(caps.global_status_reserved()),
        Some(PmuMsr::GlobalStatus) if host => Rule::Reserved(caps.global_status_reserved()),
        Some(PmuMsr::PerfCapabilities) if host => Rule::Exact(caps.perf_capabilities()),
        Some(PmuMsr::PerfCapabilities) if !caps.has_perf_capabilities() => Rule::Absent,
        Some(PmuMsr::GlobalStatus | PmuMsr::PerfCapabilities) => Rule::ReadOnly,
        _ => Rule::Absent,
    }
}

fn random_msr(r: &mut Rng) -> MsrIndex {
    const POOL: &[u32] = &[
        0xC1, 0xC2, 0xC3, 0xC4, 0xC5, 0xC8, 0x186, 0x187, 0x188, 0x189, 0x18A, 0x309, 0x30A, 0x30B, 0x30C, 0x345,
        0x38D, 0x38E, 0x38F, 0x390, 0x4C1, 0x4C2, 0x4C4, 0x4C5, 0x391, 0x10,
    ];
    MsrIndex(POOL[r.below(POOL.len() as u64) as usize])
}

fn random_value(r: &mut Rng, caps: &PmuCaps, msr: MsrIndex) -> u64 {
    match r.below(6) {
        0 => r.next(),
        1 => 1 << r.below(64),
        2 => 0,
        // Mostly-valid values so counters actually get programmed.
        _ => match PmuMsr::decode(msr) {
            Some(PmuMsr::EventSel(_)) => {
                let ev = pmu::ArchEvent::ALL[r.below(7) as usize];
                let (e, u) = ev.select();
                let mut v = u64::from(e) | u64::from(u) << 8 | r.next() & (USR | OS | INT | EN | EventSel::PC);
                if r.chance(10) {
                    v |= r.below(4) << 24;
                }
                if r.chance(5) {
                    v = v & !0xFF | 0xD1; // not architectural
                }
                v
            }
            Some(PmuMsr::FixedCtrCtrl) => r.next() & !caps.fixed_ctr_ctrl_reserved(),
            Some(PmuMsr::GlobalCtrl | PmuMsr::GlobalOvfCtrl | PmuMsr::GlobalStatus) => r.next() & caps.counters(),
            _ => COUNTER_MASK - r.below(64),
        },
    }
}

fn guest_enabled(p: &mut Pmu<MockSource>) -> bool {
    let h = |p: &mut Pmu<MockSource>, m| p.get_msr(m, Initiator::Host).ok().unwrap();
    let gctrl = h(p, GCTRL);
    let fctrl = h(p, FCTRL);
    let caps = *p.caps();
    let gp_on = (0..caps.gp_counters()).any(|i| gctrl >> i & 1 == 1 && h(p, MsrIndex::perfevtsel(i)) & EN != 0);
    let fx_on = (0..caps.fixed_counters()).any(|j| gctrl >> (32 + j) & 1 == 1 && FixedCtrl::of(fctrl, j).enabled());
    gp_on || fx_on
}

fn check_invariants(p: &mut Pmu<MockSource>, ctx: &str) {
    assert!(p.backend().violations().is_empty(), "{ctx}: {:?}", p.backend().violations());
    let enabled = guest_enabled(p);
    assert_eq!(p.is_active(), enabled || p.backend().open_events() > 0, "{ctx}: is_active");
    if !p.is_scheduled_in() {
        for idx in p.caps().pmcs().collect::<Vec<_>>() {
            assert!(!p.backend().is_enabled(idx), "{ctx}: {idx:?} runs while scheduled out");
        }
    }
}

fn run(seed: u64, config: PmuConfig, source: MockSource, ops: usize) -> pmu::PmuStats {
    let mut r = Rng(seed | 1);
    let mut p = Pmu::new(config, source).unwrap();
    let caps = *p.caps();
    let mut now = 0u64;
    for step in 0..ops {
        let ctx = format!("seed {seed:#x} step {step}");
        match r.below(100) {
            0..=44 => {
                let msr = random_msr(&mut r);
                let v = random_value(&mut r, &caps, msr);
                let host = r.chance(10);
                let who = if host { Initiator::Host } else { Initiator::Guest };
                let res = p.set_msr(msr, v, who);
                let must_fault = match rule(&caps, msr, host) {
                    Rule::Absent | Rule::ReadOnly => true,
                    Rule::Reserved(mask) => v & mask != 0,
                    Rule::Exact(x) => v != x,
                };
                assert_eq!(res.is_fault(), must_fault, "{ctx}: {who:?} {:#x} <- {v:#x}", msr.0);
            }
            45..=52 => {
                // Toggle an enable, as guests do around measured regions.
                let (msr, bit) = match r.below(3) {
                    0 => (MsrIndex::perfevtsel(r.below(u64::from(caps.gp_counters())) as u8), EN),
                    1 => (GCTRL, 1 << r.below(u64::from(caps.gp_counters()))),
                    _ => (FCTRL, 3 << (4 * r.below(3))),
                };
                let cur = p.get_msr(msr, Initiator::Host).ok().unwrap();
                let res = p.set_msr(msr, cur ^ bit, Initiator::Guest);
                let must_fault = match rule(&caps, msr, false) {
                    Rule::Reserved(mask) => (cur ^ bit) & mask != 0,
                    _ => unreachable!(),
                };
                assert_eq!(res.is_fault(), must_fault, "{ctx}: toggle {:#x}", msr.0);
            }
            53..=59 => {
                let msr = random_msr(&mut r);
                let res = p.get_msr(msr, Initiator::Guest);
                assert_eq!(res.is_fault(), matches!(rule(&caps, msr, false), Rule::Absent), "{ctx}: read {:#x}", msr.0);
                if let (Some(PmuMsr::Pmc(_) | PmuMsr::FullWidthPmc(_) | PmuMsr::FixedCtr(_)), Some(v)) =
                    (PmuMsr::decode(msr), res.ok())
                {
                    assert!(v <= COUNTER_MASK, "{ctx}: counter read {v:#x}");
                }
            }
            60..=64 => {
                let ecx = (r.next() as u32) & (3 << 30 | 0xF);
                let _ = p.rdpmc(RdpmcIdx(ecx));
            }
            65..=79 => {
                let n = if r.chance(5) { 1 << 47 } else { r.below(1 << 20) };
                p.backend_mut().advance_all(n);
                if p.backend().overflow_due() {
                    let _ = p.collect_overflows();
                    assert!(!p.backend().overflow_due(), "{ctx}: collect re-arms");
                }
            }
            80..=86 => {
                now += r.below(600_000);
                p.tick(now);
            }
            87..=90 => p.sched_out(),
            91..=94 => p.sched_in(),
            95 => p.reset(),
            96 => {
                let s = p.save();
                p.restore(&s).unwrap();
                assert_eq!(p.save(), s, "{ctx}: restore roundtrip");
            }
            97 => {
                let fail = r.chance(50);
                p.backend_mut().set_fail_open(fail);
            }
            98 => p.backend_mut().set_cpl(if r.chance(50) { 0 } else { 3 }),
            _ => {
                let _ = p.collect_overflows();
            }
        }
        check_invariants(&mut p, &ctx);
    }
    p.stats()
}

#[test]
fn random_ops_never_panic_and_respect_the_rules() {
    let configs = [
        (PmuConfig::default(), MockSource::new()),
        (PmuConfig { policy: Policy::Legacy, ..PmuConfig::default() }, MockSource::new()),
        (
            PmuConfig {
                gp_counters: 8,
                full_width_writes: false,
                policy: Policy::Reuse { release_after_ns: 0 },
                filter: None,
                pebs: false,
                ..PmuConfig::default()
            },
            MockSource::new(),
        ),
        (
            PmuConfig { gp_counters: 1, ..PmuConfig::default() },
            MockSource::supporting(&[ArchEvent::Instructions, ArchEvent::LlcMisses]),
        ),
        (PmuConfig { gp_counters: 2, ..PmuConfig::default() }, MockSource::supporting(&[])),
    ];
    let mut total = pmu::PmuStats::default();
    for seed in 1..=40u64 {
        for (i, (config, source)) in configs.iter().enumerate() {
            let s = run(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i as u64, config.clone(), source.clone(), 400);
            total.events_created += s.events_created;
            total.events_reused += s.events_reused;
            total.events_lazily_released += s.events_lazily_released;
            total.open_failures += s.open_failures;
            total.overflows += s.overflows;
            total.pmis_requested += s.pmis_requested;
            total.faults += s.faults;
        }
    }
    // The traffic really exercises every path.
    for (name, n) in [
        ("created", total.events_created),
        ("reused", total.events_reused),
        ("lazily released", total.events_lazily_released),
        ("open failures", total.open_failures),
        ("overflows", total.overflows),
        ("PMIs", total.pmis_requested),
        ("faults", total.faults),
    ] {
        assert!(n > 10, "{name}: {n}");
    }
}

/// Reuse and Legacy differ only in host event churn: fed the same guest writes and the
/// same events, the guest sees the same counters, status and PMIs.
#[test]
fn policies_are_guest_indistinguishable() {
    for seed in 1..=60u64 {
        let mut r = Rng(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1);
        let mut a = pmu_with(Policy::Reuse { release_after_ns: 300_000 });
        let mut b = pmu_with(Policy::Legacy);
        let caps = *a.caps();
        let mut now = 0;
        for step in 0..300 {
            let ctx = format!("seed {seed} step {step}");
            match r.below(10) {
                0..=5 => {
                    let msr = random_msr(&mut r);
                    let v = random_value(&mut r, &caps, msr);
                    assert_eq!(wr(&mut a, msr, v), wr(&mut b, msr, v), "{ctx}");
                }
                6 | 7 => {
                    let n = if r.chance(10) { 1 << 47 } else { r.below(5000) };
                    a.backend_mut().advance_all(n);
                    b.backend_mut().advance_all(n);
                    assert_eq!(a.collect_overflows(), b.collect_overflows(), "{ctx}: PMI");
                }
                8 => {
                    now += r.below(200_000);
                    a.tick(now);
                    b.tick(now);
                }
                _ => {
                    if r.chance(50) {
                        a.sched_out();
                        b.sched_out();
                    } else {
                        a.sched_in();
                        b.sched_in();
                    }
                }
            }
            for m in (0..4).map(MsrIndex::pmc).chain((0..3).map(MsrIndex::fixed_ctr)).chain([STATUS, GCTRL, FCTRL]) {
                assert_eq!(rd(&mut a, m), rd(&mut b, m), "{ctx}: MSR {:#x}", m.0);
            }
        }
        clean(&a);
        clean(&b);
        assert!(a.stats().events_created <= b.stats().events_created, "seed {seed}");
    }
}
