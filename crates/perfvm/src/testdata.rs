//! Synthetic record files for unit tests.

use crate::record::{RecordFile, Sample};
use serde_json::json;

/// A sample: (time_ns, vcpu, task, ip, callchain innermost caller first).
pub type SampleSpec<'a> = (u64, u32, u32, u64, &'a [u64]);

/// A profile row: (command, symbol, weight, callers outermost first).
pub type RowSpec<'a> = (&'a str, &'a str, u64, &'a [&'a str]);

/// A sampled `cycles` record of guest `ftest` (period 1000) with these samples and rows;
/// `rips` holds the samples' addresses and `callgraph` is set when a sample has a chain.
pub fn record(samples: &[SampleSpec], rows: &[RowSpec]) -> RecordFile {
    let rows: Vec<_> = rows
        .iter()
        .map(|(command, symbol, weight, callers)| {
            json!({"command": command, "object": "ftest", "symbol": symbol, "weight": weight, "callers": callers})
        })
        .collect();
    let sample_list: Vec<Sample> = samples
        .iter()
        .map(|&(time_ns, vcpu, task, ip, chain)| Sample {
            time_ns,
            vcpu,
            task,
            ip,
            period: 1000,
            callchain: chain.to_vec(),
        })
        .collect();
    let mut rips: Vec<(u64, u32, u64)> = Vec::new();
    for s in &sample_list {
        match rips.iter_mut().find(|r| r.0 == s.ip && r.1 == s.task) {
            Some(r) => r.2 += 1,
            None => rips.push((s.ip, s.task, 1)),
        }
    }
    let doc = json!({"format": "perfvm-record-1", "guest": "ftest", "elf": "/nonexistent/ftest.elf", "args": [],
                     "event": "cycles", "raw_event": 0x3c, "period": 1000, "backend": "test", "policy": "test",
                     "mode": "sampled", "samples": sample_list.len(), "samples_dropped": 0, "workload_ns": null,
                     "wall_ns": 1, "profile": {"rows": rows}, "rips": rips,
                     "sample_list": sample_list, "callgraph": samples.iter().any(|s| !s.4.is_empty())});
    serde_json::from_value(doc).expect("a valid record")
}

/// A one-sample record of the real ftest guest (qux, called from main) with its resolver
/// reading the guest's DWARF; None, with a SKIP line, where the guest is not built.
pub fn real_ftest(test: &str) -> Option<(RecordFile, crate::resolve::Resolver)> {
    let path = crate::guests::guest_dir().join("ftest.elf");
    let Ok(bytes) = std::fs::read(&path) else {
        eprintln!("SKIP {test}: no {}", path.display());
        return None;
    };
    let symbols = crate::symbols::Symbols::from_elf(&bytes);
    let (main, qux) = (symbols.address("main").unwrap(), symbols.address("qux").unwrap());
    let mut file = record(&[(0, 0, 0, qux + 4, &[main + 0x20])], &[("ftest", "qux", 1, &["main"])]);
    file.elf = path.display().to_string();
    let (r, warnings) = crate::resolve::Resolver::new(&file, true);
    assert!(warnings.is_empty(), "{warnings:?}");
    Some((file, r))
}
