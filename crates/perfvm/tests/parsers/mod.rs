//! One driver per parser a guest or a file reaches: bytes in, no panic out. Shared by the
//! cargo-fuzz targets (fuzz/fuzz_targets/*.rs include this file) and the deterministic
//! corpus run in the test suite (tests/fuzz_corpus.rs).
#![allow(dead_code)]

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Guest memory for the drivers: small, so that addresses in the input often fall outside.
fn memory() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).expect("1 MiB of guest memory")
}

/// The perf agent's channel: byte 0 picks a message kind (1-7 are the real ones), the rest
/// is its payload behind a well-formed header; the whole input is also sent raw, header
/// and all, as a guest could write it.
pub fn agent_message(data: &[u8]) {
    let mem = memory();
    let mut port = vmm::devices::AgentPort::new(mem.clone(), 1024, 1_000_000);
    let kind = u16::from(data.first().copied().unwrap_or(0) % 9);
    let payload = data.get(1..).unwrap_or(&[]);
    let mut message = Vec::with_capacity(16 + payload.len());
    message.extend_from_slice(&0x5447_4150u32.to_le_bytes()); // the channel's magic
    message.extend_from_slice(&kind.to_le_bytes());
    message.extend_from_slice(&0u16.to_le_bytes());
    message.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    message.extend_from_slice(&0u32.to_le_bytes());
    message.extend_from_slice(payload);
    for (at, bytes) in [(0x1000u64, &message[..]), (0x80000, data)] {
        let n = bytes.len().min((1 << 20) - at as usize);
        let _ = mem.write_slice(&bytes[..n], GuestAddress(at));
        port.write(&(at as u32).to_le_bytes());
    }
    // An address near the end of memory: the message runs off it.
    port.write(&((1u32 << 20) - 8).to_le_bytes());
    port.drain_unsent_samples();
}

/// The paravirtual page: the input is the page's contents (version, size, batch of MSR
/// writes); registered, then its batch applied to a vPMU and the counters published.
pub fn pv_page(data: &[u8]) {
    let mem = memory();
    let gpa = 0x2000;
    let _ = mem.write_slice(&data[..data.len().min(4096)], GuestAddress(gpa));
    let offer = vmm::vpmu::pv::Offer { exitless_reads: true, vmm_samples: true };
    let Ok(page) = vmm::vpmu::pv::register(&mem, gpa, true, offer) else { return };
    let mut pmu = pmu::Pmu::new(pmu::PmuConfig::default(), pmu::MockSource::new()).expect("default vPMU");
    vmm::vpmu::pv::apply_batch(&mem, page, &mut pmu);
    let mut share = vmm::vpmu::pv::CpuShare::default();
    let state = pmu.save();
    // The backend read at host TSC 1_500 (a version-4 page gets the stamp).
    let Some(publish) = vmm::vpmu::pv::Publish::new(&mem, page, &pmu, &state, pmu::EventSet::ALL, Some(1_500)) else {
        return;
    };
    let clocks = vmm::vpmu::pv::Clocks { tsc: 1_500, stamped: true, cpu_ns: 2_000, wall_ns: 3_000 };
    publish.write(&mem, &mut share, publish.needs_clocks().then_some(clocks));
    // Version 5: the VMM's samples as the page asks for them, of every counter.
    if let Some(asked) = vmm::vpmu::pv::vmm_samples::configure(&mem, page) {
        let _ = vmm::vpmu::pv::vmm_samples::take(&mem, page, &asked, u64::MAX, 0x10_0000, &[1, 2, 3]);
    }
}

/// Guest images: perfvm's ELF64 and multiboot guests, a Linux bzImage or vmlinux, each
/// with and without the input as its initrd too, in 64 MiB of guest memory.
pub fn kernel_image(data: &[u8]) {
    let _ = vmm::loader::load_guest(data.to_vec(), None, 64 << 20);
    let _ = vmm::loader::load_guest(data.to_vec(), Some(data.to_vec()), 64 << 20);
}

/// A record file as `report` and `script` read it, then the profile built from it.
pub fn record_file(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(record) = profile::Record::from_json(&text, "fuzz.json") else { return };
    let (resolver, _) = profile::Resolver::from_elf(&[], "fuzz.elf", false);
    let built = profile::Profile::build(&record, &resolver);
    let _ = built.folded();
    let _ = (record.sample_count(), record.shortfalls(), record.exits_per_sample());
}

/// A `--pmu-filter` file, as TOML and as JSON.
pub fn filter_file(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = pmu::PmuEventFilter::parse(&text, pmu::FilterFormat::Toml);
    let _ = pmu::PmuEventFilter::parse(&text, pmu::FilterFormat::Json);
}

/// A parser's driver: it feeds one input to the parser.
pub type Driver = fn(&[u8]);

/// Every driver by name (the fuzz targets' names).
pub const DRIVERS: &[(&str, Driver)] = &[
    ("agent_message", agent_message),
    ("pv_page", pv_page),
    ("kernel_image", kernel_image),
    ("record_file", record_file),
    ("filter_file", filter_file),
];
