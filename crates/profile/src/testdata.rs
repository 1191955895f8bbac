//! Synthetic records, and the real ftest guest where it is built, for unit tests.

use crate::record::{Mode, Notifications, Record, Sample, SampledEvent, FORMAT};
use crate::resolve::Resolver;
use std::path::PathBuf;

/// A sample: (time_ns, vcpu, task, ip, callchain innermost caller first).
pub type SampleSpec<'a> = (u64, u32, u32, u64, &'a [u64]);

/// The functions of [`resolver`]: (name, start, size).
pub const FUNCTIONS: [(&str, u64, u64); 5] =
    [("qux", 0x100, 0x40), ("foo", 0x200, 0x40), ("main", 0x300, 0x80), ("bar", 0x400, 0x40), ("fib", 0x500, 0x40)];

/// A profile of [`record`]s' samples, each spec taken `n` times: (ip, chain, n).
pub fn profile(specs: &[(u64, &[u64], usize)]) -> crate::Profile {
    let samples: Vec<SampleSpec> =
        specs.iter().flat_map(|&(ip, chain, n)| std::iter::repeat_n((0, 0, 0, ip, chain), n)).collect();
    crate::Profile::build(&record(&samples), &resolver())
}

/// main calls foo (which runs qux: 5 samples) and bar (3); foo also runs itself (2).
pub fn main_foo_qux_bar() -> crate::Profile {
    profile(&[(0x110, &[0x215, 0x321], 5), (0x210, &[0x321], 2), (0x410, &[0x325], 3)])
}

/// A sampled `cycles` record of guest `ftest` (period 1000) with these samples, its ELF
/// missing; `callgraph` is set when a sample has a chain.
pub fn record(samples: &[SampleSpec]) -> Record {
    let samples: Vec<Sample> = samples
        .iter()
        .map(|&(time_ns, vcpu, task, ip, chain)| Sample {
            event: 0,
            time_ns,
            vcpu,
            task,
            ip,
            period: 1000,
            callchain: chain.to_vec(),
        })
        .collect();
    Record {
        format: FORMAT.into(),
        guest: "ftest".into(),
        elf: "/nonexistent/ftest.elf".into(),
        args: vec![],
        events: vec![SampledEvent::new("cycles", 0x3c, 1000)],
        backend: "test".into(),
        policy: "test".into(),
        mode: Mode::Sampled,
        callgraph: samples.iter().any(|s| !s.callchain.is_empty()),
        unwinding: None,
        samples,
        tasks: Default::default(),
        samples_dropped: 0,
        notifications: Notifications::default(),
        partial: false,
        workload_ns: None,
        wall_ns: 1,
        exits: 0,
    }
}

/// A resolver of [`FUNCTIONS`], without source lines.
pub fn resolver() -> Resolver {
    let elf = crate::testelf::with_functions(&FUNCTIONS);
    Resolver::from_elf(&elf, "test.elf", false).0
}

/// Where the guest kit's images are built.
fn guest_dir() -> PathBuf {
    std::env::var_os("PERFVM_GUEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../guest/build")))
}

/// The real ftest guest's ELF; None, with a SKIP line, where it is not built.
pub fn ftest_elf(test: &str) -> Option<Vec<u8>> {
    let path = guest_dir().join("ftest.elf");
    match std::fs::read(&path) {
        Ok(bytes) => Some(bytes),
        Err(_) => {
            eprintln!("SKIP {test}: no {} (cargo build builds the guest kit)", path.display());
            None
        }
    }
}

/// A one-sample record of the real ftest guest (qux, called from main) with its resolver
/// reading the guest's DWARF; None, with a SKIP line, where the guest is not built.
pub fn real_ftest(test: &str) -> Option<(Record, Resolver)> {
    let bytes = ftest_elf(test)?;
    let symbols = crate::symbols::Symbols::from_elf(&bytes);
    let (main, qux) = (symbols.address("main")?, symbols.address("qux")?);
    let returns_to = return_address(&bytes, main, qux).expect("main calls qux");
    let mut file = record(&[(0, 0, 0, qux + 4, &[returns_to])]);
    file.elf = guest_dir().join("ftest.elf").display().to_string();
    let (r, warnings) = Resolver::from_elf(&bytes, &file.elf, true);
    assert!(warnings.is_empty(), "{warnings:?}");
    Some((file, r))
}

/// Where a `call rel32` from the function at `caller` to `callee` returns: the first such
/// call in the caller's first 1 KiB (a fixed offset into main would fall on whatever the
/// compiler put there, such as an inlined helper from another file).
fn return_address(elf: &[u8], caller: u64, callee: u64) -> Option<u64> {
    let parsed = goblin::elf::Elf::parse(elf).ok()?;
    let segment = parsed.program_headers.iter().find(|p| p.p_vaddr <= caller && caller < p.p_vaddr + p.p_filesz)?;
    let start = (segment.p_offset + caller - segment.p_vaddr) as usize;
    let end = (segment.p_offset + segment.p_filesz) as usize;
    let code = elf.get(start..end.min(start + 1024))?;
    (0..code.len().saturating_sub(4)).find_map(|i| {
        let rel = i32::from_le_bytes(code.get(i + 1..i + 5)?.try_into().ok()?);
        let next = caller + i as u64 + 5;
        (code[i] == 0xe8 && next.wrapping_add_signed(rel.into()) == callee).then_some(next)
    })
}
