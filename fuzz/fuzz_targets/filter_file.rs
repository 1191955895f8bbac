//! libFuzzer target: `filter_file` in crates/perfvm/tests/parsers (the driver the deterministic
//! corpus run in tests/fuzz_corpus.rs feeds too). A panic is a crash, its input saved.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/perfvm/tests/parsers/mod.rs"]
mod parsers;

fuzz_target!(|data: &[u8]| parsers::filter_file(data));
