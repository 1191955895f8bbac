//! The deterministic corpus run CI makes of every fuzz target (fuzz/README.md): valid seeds
//! for each parser, then fixed-seed mutations of them (bit flips, interesting integers,
//! truncations, splices, random bytes) and hostile shapes (deep nesting, huge counts),
//! each fed to the driver the cargo-fuzz target uses. Zero panics allowed.
//! PERFVM_FUZZ_CORPUS=N sets the mutants per seed (default 200).

mod common;
mod parsers;

use std::panic::{catch_unwind, AssertUnwindSafe};

/// xorshift64*: the same mutants on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INTERESTING: &[u64] = &[0, 1, 0x7f, 0x80, 0xff, 0x7fff, 0xffff, 0x1_0000, 0x7fff_ffff, 0xffff_ffff, u64::MAX];

/// One mutant of `seed`.
fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut d = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(d.len());
        match rng.below(6) {
            0 if !d.is_empty() => d[at] ^= 1 << rng.below(8),
            1 if d.len() >= 8 => {
                let v = INTERESTING[rng.below(INTERESTING.len())].to_le_bytes();
                let w = [1, 2, 4, 8][rng.below(4)].min(d.len() - at.min(d.len() - 8));
                let at = at.min(d.len() - w);
                d[at..at + w].copy_from_slice(&v[..w]);
            }
            2 => d.truncate(at),
            3 if !d.is_empty() => {
                let (from, len) = (rng.below(d.len()), rng.below(64));
                let chunk: Vec<u8> = d[from..(from + len).min(d.len())].to_vec();
                d.splice(at..at, chunk);
            }
            4 => {
                let noise: Vec<u8> = (0..rng.below(16)).map(|_| rng.next() as u8).collect();
                d.splice(at..at, noise);
            }
            _ => {
                if let Some(b) = d.get_mut(at) {
                    *b = rng.next() as u8;
                }
            }
        }
    }
    d
}

fn u32s(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Valid (or nearly) inputs for each driver, by the driver's name.
fn seeds(name: &str) -> Vec<Vec<u8>> {
    let nested = |open: &str, n: usize| open.repeat(n).into_bytes();
    match name {
        // kind byte, then the payload: counts, samples (one with a call chain), mark, value,
        // task, buffer, samples2.
        "agent_message" => vec![
            [&[1u8][..], &u32s(&[2, 0, 0x00c0, 0, 5, 0, 0x003c, 0, 7, 0])].concat(),
            [&[2u8][..], &u32s(&[2, 0, 0x1000, 0, 1, 0, 0x2000, 0, 2, 0])].concat(),
            [&[3u8][..], &u32s(&[1, 0, 1234, 0])].concat(),
            [&[4u8][..], &u32s(&[7, 0, 99, 0])].concat(),
            [&[5u8][..], &u32s(&[1, 0x6b736174, 0x0061])].concat(),
            [&[6u8][..], &u32s(&[0x3000, 0, 7])].concat(),
            [&[7u8][..], &u32s(&[1, 0, 0x1000, 0, 1, 0, 2, 3, 0x1010, 0, 0x1020, 0, 0x1030, 0])].concat(),
            [&[7u8][..], &u32s(&[u32::MAX, u32::MAX, u32::MAX, u32::MAX])].concat(),
        ],
        // version, host version, size, flags, batch count, done, fault, pad, then entries
        // (MSR, pad, value): EVENTSEL0, PMC0, GLOBAL_CTRL, and one that faults.
        "pv_page" => (1..=3)
            .map(|v| {
                let size = vmm::vpmu::pv::expected_size(v).unwrap_or(64);
                let head = u32s(&[v, 0, size, 0, 4, 0, 0, 0]);
                let entries = u32s(&[0x186, 0, 0x43_003c, 0, 0xc1, 0, 5, 0, 0x38f, 0, 1, 0, 0x999, 0, 1, 0]);
                [head, entries].concat()
            })
            .chain([u32s(&[3, 0, 4096, 0, u32::MAX, 0, 0, 0])])
            .collect(),
        "kernel_image" => {
            let mut images = vec![
                common::elf64(0x10_0000, &[(0x10_0000, 0x1000, 0x2000)]),
                vmm::loader::synthetic::elf64_code(&[0xf4]),
                vmm::loader::synthetic::bzimage(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
                vmm::loader::synthetic::bzimage(b"\x02\x21\x4c\x18\x10\x00\x00\x00hello"),
                common::elf64(0xffff_ffff_ffff_f000, &[(0xffff_ffff_ffff_f000, 0x2000, 0x2000)]),
            ];
            // The guest kit's real images, where built (64-bit ELF, multiboot).
            for guest in ["hello", "mbtest"] {
                if let Ok(bytes) = std::fs::read(vmm_guest(guest)) {
                    images.push(bytes);
                }
            }
            images
        }
        "record_file" => {
            let elf = common::symbol_elf();
            let path = common::record_file("corpus.json", &elf, &[(0x210, &[0x310, 0x120], 1000), (0x320, &[], 7)]);
            vec![
                std::fs::read(path).unwrap(),
                br#"{"format":"perfvm-record-1","guest":"g","elf":"e","samples":[{"ip":1,"count":2}]}"#.to_vec(),
                nested("[", 100_000),
                [b"{\"format\":\"perfvm-record-2\",\"samples\":".to_vec(), nested("[", 50_000)].concat(),
            ]
        }
        "filter_file" => vec![
            b"action = \"allow\"\nfixed_counters = 1\nevents = [ { event = 0xc4 }, { event = 0x3c, umask = 0 } ]\n"
                .to_vec(),
            b"{\"action\": \"deny\", \"events\": [ { \"event\": 192 } ] }".to_vec(),
            [b"action = \"allow\"\nevents = ".to_vec(), nested("[", 100_000)].concat(),
            nested("{\"a\":", 100_000),
            [b"x = ".to_vec(), nested("{a=", 100_000)].concat(),
        ],
        _ => unreachable!("driver {name}"),
    }
}

fn vmm_guest(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guest/build").join(name)
}

#[test]
fn every_parser_survives_its_corpus() {
    let per_seed: usize = std::env::var("PERFVM_FUZZ_CORPUS").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    let mut rng = Rng(0x5eed_f00d_cafe_d00d);
    // Quiet: a caught panic is reported below with its input, not as a backtrace per input.
    std::panic::set_hook(Box::new(|_| {}));
    let mut failures = Vec::new();
    for &(name, driver) in parsers::DRIVERS {
        let seeds = seeds(name);
        let mut inputs: Vec<Vec<u8>> = seeds.clone();
        inputs.push(Vec::new());
        inputs.extend((0..per_seed).map(|_| (0..rng.below(512)).map(|_| rng.next() as u8).collect()));
        for seed in &seeds {
            inputs.extend((0..per_seed).map(|_| mutate(&mut rng, seed)));
        }
        for input in &inputs {
            if catch_unwind(AssertUnwindSafe(|| driver(input))).is_err() {
                let head: Vec<String> = input.iter().take(48).map(|b| format!("{b:02x}")).collect();
                failures.push(format!("{name}: panicked on {} bytes: {}", input.len(), head.join("")));
            }
        }
        eprintln!("{name}: {} inputs", inputs.len());
    }
    let _ = std::panic::take_hook();
    assert!(failures.is_empty(), "{} panics:\n{}", failures.len(), failures.join("\n"));
}
