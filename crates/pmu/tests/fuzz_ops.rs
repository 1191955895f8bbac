//! Deterministic, bounded model fuzzer: seeded random operations (MSR reads/writes by
//! guest and host over every PMU MSR and the MSRs just outside the ranges, RDPMC, backend
//! counts, overflow collection, ticks, sched out/in, reset, save/restore, filter changes,
//! failing opens, CPL changes) over random configurations of both vendors (Intel, and AMD
//! at each of its levels), with every invariant of `fuzz_harness` checked after every
//! operation.
//!
//! `PERFVM_FUZZ_OPS` sets the number of operations (default 200000, a second or two in a
//! debug build); `PERFVM_FUZZ_SEED` the base seed (default 0x9e3779b97f4a7c15). The CI run:
//!
//! ```sh
//! PERFVM_FUZZ_OPS=10000000 cargo test --release -p pmu --test fuzz_ops -- --nocapture
//! ```
//!
//! A failure names its seed, the operation and the last 16 operations; rerun that seed
//! alone with `PERFVM_FUZZ_SEED=<seed> PERFVM_FUZZ_THREADS=1`.

mod fuzz_harness;
use fuzz_harness::{run_seed, Tally};
use std::time::Instant;

/// Operations per seed: each seed walks through many configurations.
const OPS_PER_SEED: u64 = 50_000;

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(s) => {
            let s = s.trim().replace('_', "");
            let parsed = match s.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => s.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("{name}={s:?} is not a number"))
        }
        Err(_) => default,
    }
}

#[test]
fn fuzz_model_ops() {
    let ops = env_u64("PERFVM_FUZZ_OPS", 200_000);
    let base = env_u64("PERFVM_FUZZ_SEED", 0x9E37_79B9_7F4A_7C15);
    let threads =
        env_u64("PERFVM_FUZZ_THREADS", std::thread::available_parallelism().map_or(1, |n| n.get() as u64)).clamp(1, 64);
    let seeds = ops.div_ceil(OPS_PER_SEED).max(1);
    let start = Instant::now();
    let total = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut tally = Tally::default();
                    for k in (t..seeds).step_by(threads as usize) {
                        let n = OPS_PER_SEED.min(ops - k * OPS_PER_SEED);
                        tally.add(&run_seed(base.wrapping_add(k), n));
                    }
                    tally
                })
            })
            .collect();
        let mut total = Tally::default();
        for w in workers {
            total.add(&w.join().expect("fuzz worker panicked"));
        }
        total
    });
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "fuzz_ops: {} ops in {secs:.1} s ({:.2} Mops/s) on {threads} threads, seeds {base:#x}..+{seeds}",
        total.ops,
        total.ops as f64 / secs / 1e6
    );
    eprintln!("fuzz_ops: {total:?}");
    assert_eq!(total.ops, ops);
    if ops >= 100_000 {
        // The traffic reaches every path it is meant to.
        for (name, n) in [
            ("guest faults", total.guest_faults),
            ("host rejects", total.host_rejects),
            ("deliveries", total.deliveries),
            ("wraps", total.wraps),
            ("AMD ops", total.amd_ops),
            ("AMD wraps", total.amd_wraps),
            ("PMIs", total.pmis),
            ("opens", total.opens),
            ("failed opens", total.failed_opens),
            ("filter denials", total.denied_by_filter),
            ("rejected restores", total.restores_rejected),
        ] {
            assert!(n > 10, "{name}: {n}");
        }
    }
}

/// Short runs from many seeds, so a small `cargo test` still sees many configurations.
#[test]
fn fuzz_many_seeds_briefly() {
    for seed in 0..64 {
        run_seed(seed, 500);
    }
}
