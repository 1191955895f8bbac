//! Shared fixtures for the integration tests.
#![allow(dead_code, unused_imports)]

pub use pmu::{
    ArchEvent, EventSel, FixedCtrl, Initiator, MockCall, MockSource, MsrAccess, MsrIndex, PmcIdx, Pmu, PmuConfig,
    Policy, RdpmcIdx, COUNTER_MASK,
};

pub const EN: u64 = EventSel::EN;
pub const OS: u64 = EventSel::OS;
pub const USR: u64 = EventSel::USR;
pub const INT: u64 = EventSel::INT;

pub const STATUS: MsrIndex = MsrIndex::IA32_PERF_GLOBAL_STATUS;
pub const GCTRL: MsrIndex = MsrIndex::IA32_PERF_GLOBAL_CTRL;
pub const OVF: MsrIndex = MsrIndex::IA32_PERF_GLOBAL_OVF_CTRL;
pub const FCTRL: MsrIndex = MsrIndex::IA32_FIXED_CTR_CTRL;
pub const PERF_CAP: MsrIndex = MsrIndex::IA32_PERF_CAPABILITIES;

pub const REUSE_1MS: Policy = Policy::Reuse { release_after_ns: 1_000_000 };

pub fn gp(i: u8) -> PmcIdx {
    PmcIdx::gp(i).unwrap()
}

pub fn fixed(j: u8) -> PmcIdx {
    PmcIdx::fixed(j).unwrap()
}

/// EVENTSEL value selecting `ev`, ring 0, enabled.
pub fn sel(ev: ArchEvent) -> u64 {
    let (e, u) = ev.select();
    u64::from(e) | u64::from(u) << 8 | OS | EN
}

/// Default PMU: 4 GP, full-width writes, Reuse 1 ms, every event.
pub fn pmu() -> Pmu<MockSource> {
    Pmu::new(PmuConfig::default(), MockSource::new()).unwrap()
}

pub fn pmu_with(policy: Policy) -> Pmu<MockSource> {
    Pmu::new(PmuConfig { policy, ..PmuConfig::default() }, MockSource::new()).unwrap()
}

pub fn pmu_cfg(gp_counters: u8, full_width_writes: bool, source: MockSource) -> Pmu<MockSource> {
    Pmu::new(
        PmuConfig {
            gp_counters,
            full_width_writes,
            policy: REUSE_1MS,
            filter: None,
            pebs: false,
            ..PmuConfig::default()
        },
        source,
    )
    .unwrap()
}

pub fn wr(p: &mut Pmu<MockSource>, msr: MsrIndex, v: u64) -> MsrAccess {
    p.set_msr(msr, v, Initiator::Guest)
}

pub fn hwr(p: &mut Pmu<MockSource>, msr: MsrIndex, v: u64) -> MsrAccess {
    p.set_msr(msr, v, Initiator::Host)
}

pub fn rd(p: &mut Pmu<MockSource>, msr: MsrIndex) -> MsrAccess<u64> {
    p.get_msr(msr, Initiator::Guest)
}

/// Guest write that must succeed.
pub fn ok(p: &mut Pmu<MockSource>, msr: MsrIndex, v: u64) {
    assert_eq!(wr(p, msr, v), MsrAccess::Ok(()), "WRMSR {:#x} <- {v:#x}", msr.0);
}

/// Guest read that must succeed.
pub fn val(p: &mut Pmu<MockSource>, msr: MsrIndex) -> u64 {
    rd(p, msr).ok().unwrap_or_else(|| panic!("RDMSR {:#x} faulted", msr.0))
}

/// Asserts the mock saw no protocol breach.
pub fn clean(p: &Pmu<MockSource>) {
    assert!(p.backend().violations().is_empty(), "{:?}", p.backend().violations());
}

/// Calls since the last `take`.
pub fn take(p: &mut Pmu<MockSource>) -> Vec<MockCall> {
    p.backend_mut().take_calls()
}

/// Only the open/close/enable/disable calls (the policy-relevant ones).
pub fn lifecycle(calls: &[MockCall]) -> Vec<MockCall> {
    calls
        .iter()
        .copied()
        .filter(|c| matches!(c, MockCall::Open(..) | MockCall::Close(_) | MockCall::Enable(_) | MockCall::Disable(_)))
        .collect()
}
