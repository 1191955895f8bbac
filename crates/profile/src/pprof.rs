//! Export a profile as pprof's `profile.proto`, gzipped, as `go tool pprof` reads it and
//! fleet profilers (Parca, Pyroscope, Cloud Profiler) ingest it. The messages are written
//! here with prost's derive (field numbers of google/pprof's `proto/profile.proto`), so the
//! build needs no protoc.
//!
//! Two sample types: `samples/count` and the event's own (`cycles/count`), the default;
//! one mapping per shared object (the guest ELF), symbolized here (`has_functions`), so
//! pprof does not look for the binary; a location per address, with its function and line
//! (a return address: its call's line); functions with the file and line where they start,
//! from the DWARF where it was read.

use crate::profile::Profile;
use crate::record::Record;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use prost::Message;
use std::collections::HashMap;
use std::io::{Read, Write};

/// `perftools.profiles.Profile`.
#[derive(Clone, PartialEq, Message)]
pub struct PprofProfile {
    /// What each value of a sample measures.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<PprofSample>,
    /// Address ranges of the binaries, the main one first.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// Addresses, with their lines.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Functions the lines name.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string, referred to by index; the first is "".
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// When the collection started, ns since the epoch (0: unknown).
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// How long it lasted.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// The kind of events between samples.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// Events between samples.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free text, as string indices.
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The sample type shown by default (a string index).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// `ValueType`: a type and a unit, as string indices.
#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    /// E.g. "cycles".
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// E.g. "count".
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `Sample`: a stack, leaf first, and its values.
#[derive(Clone, PartialEq, Message)]
pub struct PprofSample {
    /// Location ids, the leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per sample type.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels (the command).
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// `Label`: a key with a string or a number.
#[derive(Clone, PartialEq, Message)]
pub struct Label {
    /// The key (string index).
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// A string value (string index).
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// A numeric value.
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// The numeric value's unit (string index).
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// `Mapping`: a binary's address range.
#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    /// Nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// First address.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// Past the last address.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// File offset of the first address.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// The binary's path (string index).
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// Its build id (string index).
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Locations carry functions.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// Functions carry files.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// Lines carry numbers.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// Inlined frames are resolved.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// `Location`: an address and its lines.
#[derive(Clone, PartialEq, Message)]
pub struct Location {
    /// Nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The mapping holding it.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// The address.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Its lines, the innermost inlined function first.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    /// Several symbols share the address.
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// `Line`: a function and a line in it.
#[derive(Clone, PartialEq, Message)]
pub struct Line {
    /// The function's id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// The line (0: unknown).
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// `Function`.
#[derive(Clone, PartialEq, Message)]
pub struct Function {
    /// Nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Its name (string index).
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// Its name as the linker knows it (string index).
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// Its source file (string index).
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// Where it starts.
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// The string table being built.
#[derive(Default)]
struct Strings {
    index: HashMap<String, i64>,
    table: Vec<String>,
}

impl Strings {
    fn of(&mut self, s: &str) -> i64 {
        if self.table.is_empty() {
            self.table.push(String::new());
            self.index.insert(String::new(), 0);
        }
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        self.table.push(s.to_owned());
        self.index.insert(s.to_owned(), self.table.len() as i64 - 1);
        self.table.len() as i64 - 1
    }
}

/// A count as pprof's int64, saturating.
fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The pprof message of the profile of a record of one event ([`Record::of_event`] takes
/// one of several).
pub fn profile(record: &Record, p: &Profile) -> PprofProfile {
    let mut s = Strings::default();
    s.of("");
    let samples = ValueType { r#type: s.of("samples"), unit: s.of("count") };
    let event = record.event();
    let events = ValueType { r#type: s.of(&event.name), unit: s.of("count") };
    let (low, high) = p.frames.iter().fold((u64::MAX, 0), |(lo, hi), f| (lo.min(f.addr), hi.max(f.addr)));
    let has_lines = p.frames.iter().any(|f| f.location.is_some());
    let mapping = Mapping {
        id: 1,
        memory_start: if low == u64::MAX { 0 } else { low },
        memory_limit: high.saturating_add(1),
        file_offset: 0,
        filename: s.of(&p.elf),
        build_id: 0,
        has_functions: true,
        has_filenames: has_lines,
        has_line_numbers: has_lines,
        has_inline_frames: false,
    };
    let function = p
        .functions
        .iter()
        .enumerate()
        .map(|(i, f)| Function {
            id: i as u64 + 1,
            name: s.of(&f.name),
            system_name: s.of(&f.name),
            filename: f.definition.as_ref().map_or(0, |d| s.of(&d.file)),
            start_line: f.definition.as_ref().map_or(0, |d| i64::from(d.line)),
        })
        .collect();
    let location = p
        .frames
        .iter()
        .enumerate()
        .map(|(i, f)| Location {
            id: i as u64 + 1,
            mapping_id: mapping.id,
            address: f.addr,
            line: vec![Line {
                function_id: f.function as u64 + 1,
                line: f.location.as_ref().map_or(0, |l| i64::from(l.line)),
            }],
            is_folded: false,
        })
        .collect();
    let comm = s.of("comm");
    let sample = p
        .stacks
        .iter()
        .map(|st| PprofSample {
            location_id: st.frames.iter().rev().map(|&f| f as u64 + 1).collect(),
            value: vec![int(st.samples), int(st.weight)],
            label: vec![Label { key: comm, str: s.of(p.command(st.task)), num: 0, num_unit: 0 }],
        })
        .collect();
    let comment = vec![s.of(&format!(
        "perfvm record of '{}': {} mode, period {}, backend {}",
        record.command_line(),
        record.mode.name(),
        event.period,
        record.backend
    ))];
    PprofProfile {
        default_sample_type: events.r#type,
        period_type: Some(events.clone()),
        sample_type: vec![samples, events],
        sample,
        mapping: vec![mapping],
        location,
        function,
        time_nanos: 0,
        duration_nanos: int(record.workload_ns.unwrap_or(record.wall_ns)),
        period: int(event.period),
        comment,
        string_table: s.table,
    }
}

/// The gzipped `profile.proto` of a record's profile, as pprof files are stored.
pub fn export(record: &Record, p: &Profile) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&profile(record, p).encode_to_vec()).expect("writing to memory");
    gz.finish().expect("writing to memory")
}

/// Read a pprof file back (gzipped or not); the error is one line.
pub fn decode(bytes: &[u8]) -> Result<PprofProfile, String> {
    let mut raw = Vec::new();
    let bytes = if bytes.starts_with(&[0x1f, 0x8b]) {
        GzDecoder::new(bytes).read_to_end(&mut raw).map_err(|e| format!("not gzip: {e}"))?;
        &raw[..]
    } else {
        bytes
    };
    PprofProfile::decode(bytes).map_err(|e| format!("not a profile.proto: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata;

    #[test]
    fn samples_locations_and_functions_point_at_each_other() {
        let file = testdata::record(&[(0, 0, 0, 0x110, &[0x215, 0x321]), (0, 0, 0, 0x110, &[0x215, 0x321])]);
        let p = Profile::build(&file, &testdata::resolver());
        let pb = decode(&export(&file, &p)).unwrap();
        let s = |i: i64| pb.string_table[i as usize].as_str();
        assert_eq!(pb.string_table[0], "");
        let types: Vec<(&str, &str)> = pb.sample_type.iter().map(|t| (s(t.r#type), s(t.unit))).collect();
        assert_eq!(types, [("samples", "count"), ("cycles", "count")]);
        assert_eq!(s(pb.default_sample_type), "cycles");
        assert_eq!((pb.period, s(pb.period_type.as_ref().unwrap().r#type)), (1000, "cycles"));
        assert_eq!(pb.sample.len(), 1);
        assert_eq!(pb.sample[0].value, [2, 2000]);
        let names: Vec<&str> = pb.sample[0]
            .location_id
            .iter()
            .map(|&id| {
                let loc = &pb.location[id as usize - 1];
                assert_eq!((loc.id, loc.mapping_id), (id, 1));
                s(pb.function[loc.line[0].function_id as usize - 1].name)
            })
            .collect();
        assert_eq!(names, ["qux", "foo", "main"], "leaf first");
        assert_eq!(pb.mapping.len(), 1);
        assert_eq!(s(pb.mapping[0].filename), "/nonexistent/ftest.elf");
        assert!(pb.mapping[0].memory_start <= 0x110 && pb.mapping[0].memory_limit > 0x321);
        assert_eq!(s(pb.sample[0].label[0].key), "comm");
        assert!(decode(b"junk").is_err() && decode(&[0x1f, 0x8b, 0]).is_err());
    }

    #[test]
    fn real_guest_functions_carry_file_and_line() {
        let Some((file, r)) = testdata::real_ftest("real_guest_functions_carry_file_and_line") else { return };
        let pb = profile(&file, &Profile::build(&file, &r));
        let s = |i: i64| pb.string_table[i as usize].as_str();
        for f in &pb.function {
            assert!(s(f.filename).ends_with("ftest.c") && f.start_line > 0, "{}", s(f.name));
        }
        assert!(pb.location.iter().all(|l| l.line[0].line > 0));
        assert!(pb.mapping[0].has_line_numbers);
    }
}
