//! Reading record files and writing what the commands produce, with one-line failures.

use crate::atomic_file::Previous;
use crate::Failure;
use profile::{Record, Resolver};
use std::io::Write;
use std::path::Path;

/// Write `text` on stdout; a reader that stops early (`| head`) is not an error.
pub fn emit(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure::io("cannot write", "the output", &e)),
        _ => Ok(()),
    }
}

/// Write a whole file atomically (crate::atomic_file): an interrupted write never leaves a
/// torn file where the last good one was.
pub fn write_file(path: &str, bytes: &[u8]) -> Result<(), Failure> {
    replace_file(path, bytes, Previous::Discard)
}

/// `write_file`, keeping the file it replaces as `<path>.old` (`record`, as perf does).
pub fn write_file_keeping_old(path: &str, bytes: &[u8]) -> Result<(), Failure> {
    replace_file(path, bytes, Previous::KeepOld)
}

fn replace_file(path: &str, bytes: &[u8], previous: Previous) -> Result<(), Failure> {
    crate::atomic_file::replace(Path::new(path), bytes, previous).map_err(|e| Failure::io("cannot write", path, &e))
}

/// Fail before the work, not after it, where `path` cannot be written (an existing file
/// is left as it is).
pub fn check_writable(path: &str) -> Result<(), Failure> {
    let existed = Path::new(path).exists();
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| Failure::io("cannot write", path, &e))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Print resolver warnings, one line each.
pub fn warn_all(warnings: Vec<String>) {
    for w in warnings {
        eprintln!("perfvm: warning: {w}");
    }
}

/// The largest record file read (`record` writes at most 4M sample slots: a few hundred MB).
pub const MAX_RECORD_BYTES: u64 = 1 << 30;

/// Read a record file, of the event `event` names (`--event`) or all of its events, and the
/// resolver of the ELF it names (source lines when `lines`), warnings printed.
pub fn load(path: &str, event: Option<&str>, lines: bool) -> Result<(Record, Resolver), Failure> {
    let bytes = profile::bounded::read(Path::new(path), MAX_RECORD_BYTES, "record files")
        .map_err(|e| Failure::io("cannot read", path, &e))?;
    let mut record = Record::from_json(&String::from_utf8_lossy(&bytes), path)?;
    if let Some(name) = event {
        let index = record.event_index(name).ok_or_else(|| {
            let names: Vec<&str> = record.events.iter().map(|e| e.name.as_str()).collect();
            Failure::usage(format!("{path} has no event '{name}' (it has {})", names.join(", ")))
        })?;
        record = record.of_event(index);
    }
    let (resolver, warnings) = Resolver::load(Path::new(&record.elf), lines);
    warn_all(warnings);
    Ok((record, resolver))
}

/// The record of one event, for a view that shows one (a flamegraph, an export, a
/// comparison): the first of several, with a note naming it.
pub fn first_event(record: &Record, path: &str, view: &str) -> Record {
    if record.events.len() > 1 {
        eprintln!(
            "perfvm: note: {path} holds {} events: {view} shows the first, {} (--event NAME picks one)",
            record.events.len(),
            record.event().name
        );
    }
    record.of_event(0)
}
