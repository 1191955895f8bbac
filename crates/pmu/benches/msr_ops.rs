//! Model cost of the hot WRMSRs under each policy, with the mock backend (no syscalls: this
//! measures the model's own bookkeeping plus the calls it decides to make).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use pmu::{ArchEvent, EventSel, Initiator, MockSource, MsrIndex, Pmu, PmuConfig, Policy};
use std::hint::black_box;

const POLICIES: [(&str, Policy); 2] =
    [("reuse", Policy::Reuse { release_after_ns: 1_000_000 }), ("legacy", Policy::Legacy)];

fn sel() -> u64 {
    let (e, u) = ArchEvent::Instructions.select();
    u64::from(e) | u64::from(u) << 8 | EventSel::OS | EventSel::EN
}

fn programmed(policy: Policy) -> Pmu<MockSource> {
    let mut p = Pmu::new(PmuConfig { policy, ..PmuConfig::default() }, MockSource::new()).unwrap();
    for i in 0..4 {
        let _ = p.set_msr(MsrIndex::perfevtsel(i), sel(), Initiator::Guest);
    }
    p
}

/// Keeps the mock's call log from growing without bound during a run.
fn trim(p: &mut Pmu<MockSource>) {
    if p.backend().calls().len() > 4096 {
        p.backend_mut().take_calls();
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("eventsel_en_toggle");
    for (name, policy) in POLICIES {
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            let mut p = programmed(policy);
            let mut v = sel();
            b.iter(|| {
                v ^= EventSel::EN;
                let _ = black_box(p.set_msr(MsrIndex::perfevtsel(0), black_box(v), Initiator::Guest));
                trim(&mut p);
            });
        });
    }
    g.finish();

    let mut g = c.benchmark_group("eventsel_same_value");
    for (name, policy) in POLICIES {
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            let mut p = programmed(policy);
            b.iter(|| {
                let _ = black_box(p.set_msr(MsrIndex::perfevtsel(0), black_box(sel()), Initiator::Guest));
            });
        });
    }
    g.finish();

    let mut g = c.benchmark_group("global_ctrl_toggle_4");
    for (name, policy) in POLICIES {
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            let mut p = programmed(policy);
            let mut v = 0xFu64;
            b.iter(|| {
                v ^= 0xF;
                let _ = black_box(p.set_msr(MsrIndex::IA32_PERF_GLOBAL_CTRL, black_box(v), Initiator::Guest));
                trim(&mut p);
            });
        });
    }
    g.finish();

    let mut g = c.benchmark_group("rdmsr_pmc_running");
    for (name, policy) in POLICIES {
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            let mut p = programmed(policy);
            b.iter(|| {
                let _ = black_box(p.get_msr(MsrIndex::pmc(0), Initiator::Guest));
                trim(&mut p);
            });
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
