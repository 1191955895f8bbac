//! libFuzzer target over the vPMU model: the input bytes, decoded with `arbitrary`, choose
//! a configuration and then operations, from the same generators and through the same
//! checked `Harness::step` as the deterministic fuzzer (`crates/pmu/tests/fuzz_ops.rs`).
//! Any broken invariant panics, which libFuzzer reports as a crash with the input saved.
#![no_main]

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/pmu/tests/fuzz_harness/mod.rs"]
mod fuzz_harness;
use fuzz_harness::{gen_config, Entropy, Harness};

/// Most operations one input may run (keeps each execution short).
const MAX_OPS: usize = 20_000;

/// Fuzzer bytes as entropy: small choices take one or two bytes, so mutations of a byte
/// change one decision instead of shifting all that follow by eight.
struct Bytes<'a, 'b>(&'b mut Unstructured<'a>);

impl Entropy for Bytes<'_, '_> {
    fn next_u64(&mut self) -> u64 {
        self.0.arbitrary::<u64>().unwrap_or(0)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0.int_in_range(0..=n - 1).unwrap_or(0)
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let mut e = Bytes(&mut u);
    let fc = gen_config(&mut e);
    let mut h = Harness::new(&fc).unwrap_or_else(|m| panic!("{m}"));
    let mut recent = Vec::new();
    for step in 0..MAX_OPS {
        if e.0.is_empty() {
            break;
        }
        let op = h.gen_op(&mut e);
        recent.push(op);
        if let Err(m) = h.step(op) {
            let tail = &recent[recent.len().saturating_sub(16)..];
            panic!("op {step} of {fc:?}: {m}\nlast ops (oldest first): {tail:#?}");
        }
    }
});
