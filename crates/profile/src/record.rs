//! The record file `perfvm record` writes (docs/RECORD.md): the raw samples, once, with what
//! resolving them needs (the guest ELF, the events, each with its period, task names) and
//! what the run lost on the way (dropped samples, lost and throttled notifications, a
//! cut-short run). Everything a view shows is derived from it ([`crate::Profile`]).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use thiserror::Error;

/// Format tag of the record files this crate writes.
pub const FORMAT: &str = "perfvm-record-3";

/// The previous format, of one event, read by converting it ([`crate::legacy`]).
pub const FORMAT_V2: &str = "perfvm-record-2";

/// The first format, read by converting it ([`crate::legacy`]).
pub const FORMAT_V1: &str = "perfvm-record-1";

/// Who took the samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// PMIs of the virtual PMU, taken by the guest kit's perf agent.
    Sampled,
    /// The VMM sampled every vCPU (`record -a`): any guest, no agent.
    Vcpus,
    /// The exact backend attributed every retired instruction: one entry per address, its
    /// period the instructions retired there.
    Reference,
}

impl Mode {
    /// The mode as the file and the report header name it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sampled => "sampled",
            Mode::Vcpus => "vcpus",
            Mode::Reference => "reference",
        }
    }
}

/// What became of the perf backend's overflow notifications during the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notifications {
    /// Notifications taken (a PMI each).
    #[serde(default)]
    pub taken: u64,
    /// Overflows whose notification never arrived: a period passed without a sample.
    #[serde(default)]
    pub lost: u64,
    /// Periods stretched beyond the programmed one to bound the VMM's overflow handling.
    #[serde(default)]
    pub throttled: u64,
}

/// One event the samples were taken of (perf's `perf_event_attr` of a record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampledEvent {
    /// Its name with its modifier (`cycles`, `instructions:k`).
    pub name: String,
    /// Its EVENTSEL\[15:0\] encoding.
    pub raw_event: u16,
    /// The programmed sampling period in event units (1 for the reference).
    pub period: u64,
    /// What it counted over the workload while on a counter, as the agent reports it.
    #[serde(default)]
    pub count: Option<u64>,
    /// Guest TSC ticks counting was on (0 where unknown).
    #[serde(default)]
    pub time_enabled: u64,
    /// Of them, the ticks the event was on a counter: less than `time_enabled` when it was
    /// multiplexed (0 where unknown).
    #[serde(default)]
    pub time_running: u64,
}

impl SampledEvent {
    /// An event sampled every `period`, with no count yet.
    pub fn new(name: impl Into<String>, raw_event: u16, period: u64) -> Self {
        SampledEvent { name: name.into(), raw_event, period, count: None, time_enabled: 0, time_running: 0 }
    }

    /// The share of the workload it was on a counter, when it was multiplexed (None when it
    /// ran all the time or the agent sent no times).
    pub fn running_share(&self) -> Option<f64> {
        (self.time_running > 0 && self.time_running < self.time_enabled)
            .then(|| self.time_running as f64 / self.time_enabled as f64)
    }
}

/// One sample.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Its event: an index in [`Record::events`].
    #[serde(default)]
    pub event: usize,
    /// Host ns since the VM was built (agent samples: the guest TSC placed through the
    /// agent's START mark; 0 where unknown).
    #[serde(default)]
    pub time_ns: u64,
    /// The vCPU it was taken on.
    #[serde(default)]
    pub vcpu: u32,
    /// The guest task (0: none known, the guest itself).
    #[serde(default)]
    pub task: u32,
    /// The interrupted instruction pointer.
    pub ip: u64,
    /// Events this sample stands for.
    pub period: u64,
    /// Return addresses, innermost caller first (empty without `-g`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callchain: Vec<u64>,
}

/// A record file. Documented in docs/RECORD.md.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// [`FORMAT`].
    pub format: String,
    /// The guest as named on the command line.
    pub guest: String,
    /// The guest ELF the samples' addresses belong to (symbols, source lines).
    pub elf: String,
    /// The workload's arguments.
    pub args: Vec<String>,
    /// The sampled events, in `-e` order (at least one; more than the counters were
    /// multiplexed).
    pub events: Vec<SampledEvent>,
    /// What counted.
    pub backend: String,
    /// The host-event policy.
    pub policy: String,
    /// Who took the samples.
    pub mode: Mode,
    /// The samples carry call chains (`-g`).
    #[serde(default)]
    pub callgraph: bool,
    /// How the call chains were unwound, as the report header says it (e.g. `dwarf: the
    /// VMM, with the guest ELF's .debug_frame`); absent without chains and in older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unwinding: Option<String>,
    /// Every sample, in the order taken (the reference: one per address).
    pub samples: Vec<Sample>,
    /// Guest task names by task id, as the agent named them.
    #[serde(default)]
    pub tasks: BTreeMap<u32, String>,
    /// Samples the guest could not buffer or the VMM did not keep (bounded storage).
    #[serde(default)]
    pub samples_dropped: u64,
    /// The perf backend's overflow notifications.
    #[serde(default)]
    pub notifications: Notifications,
    /// The run was cut short (SIGINT, SIGTERM, `--timeout`): the samples until then.
    #[serde(default)]
    pub partial: bool,
    /// Host time of the workload (the agent's START..END marks).
    #[serde(default)]
    pub workload_ns: Option<u64>,
    /// Host time of the whole VM run.
    #[serde(default)]
    pub wall_ns: u64,
    /// VM exits while the workload ran, its console output aside.
    #[serde(default)]
    pub exits: u64,
}

/// Why a record file cannot be read. Each message is one line.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a record file (or a damaged one).
    #[error("{path}: not a perfvm record file: {why}")]
    Malformed {
        /// The file.
        path: String,
        /// What is wrong, as the JSON parser says it.
        why: String,
    },
    /// A record format this perfvm does not read.
    #[error(
        "{path}: record format '{format}' is not supported (this perfvm reads {FORMAT} and converts {FORMAT_V2} and {FORMAT_V1})"
    )]
    Version {
        /// The file.
        path: String,
        /// Its format tag.
        format: String,
    },
    /// A file whose samples name events it does not have.
    #[error("{path}: not a perfvm record file: {why}")]
    Inconsistent {
        /// The file.
        path: String,
        /// What does not add up.
        why: String,
    },
    /// A `perfvm-record-1` file from before its samples were kept.
    #[error(
        "{path}: a {FORMAT_V1} file without its samples ('sample_list' or 'rips') cannot be converted: record it again"
    )]
    Unconvertible {
        /// The file.
        path: String,
    },
}

impl LoadError {
    /// The error is the file's content, not the file system's.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, LoadError::Read { .. })
    }
}

/// Only the format tag, read first to pick the parser.
#[derive(Deserialize)]
struct Tag {
    format: String,
}

impl Record {
    /// Read a record file of this format, or of the previous one converted.
    pub fn load(path: &Path) -> Result<Record, LoadError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read { path: shown.clone(), source })?;
        Record::from_json(&text, &shown)
    }

    /// Parse a record file's text (`path` names it in errors).
    pub fn from_json(text: &str, path: &str) -> Result<Record, LoadError> {
        let malformed = |e: serde_json::Error| LoadError::Malformed { path: path.to_owned(), why: e.to_string() };
        let tag: Tag = serde_json::from_str(text).map_err(malformed)?;
        let record: Record = match tag.format.as_str() {
            FORMAT => serde_json::from_str(text).map_err(malformed)?,
            FORMAT_V2 => {
                let old: serde_json::Value = serde_json::from_str(text).map_err(malformed)?;
                serde_json::from_value(crate::legacy::convert_v2(old)).map_err(malformed)?
            }
            FORMAT_V1 => {
                let old: crate::legacy::RecordV1 = serde_json::from_str(text).map_err(malformed)?;
                old.convert().ok_or_else(|| LoadError::Unconvertible { path: path.to_owned() })?
            }
            _ => return Err(LoadError::Version { path: path.to_owned(), format: tag.format }),
        };
        record.check().map_err(|why| LoadError::Inconsistent { path: path.to_owned(), why })?;
        Ok(record)
    }

    /// Every sample names one of the events, and there is one.
    fn check(&self) -> Result<(), String> {
        if self.events.is_empty() {
            return Err("no events".into());
        }
        match self.samples.iter().position(|s| s.event >= self.events.len()) {
            Some(i) => Err(format!("sample {i} names event {} of {}", self.samples[i].event, self.events.len())),
            None => Ok(()),
        }
    }

    /// The first event: the only one of a record of one event ([`Record::of_event`]).
    pub fn event(&self) -> &SampledEvent {
        &self.events[0]
    }

    /// The record of event `index` alone: its samples, and the rest as it is.
    pub fn of_event(&self, index: usize) -> Record {
        Record {
            format: self.format.clone(),
            guest: self.guest.clone(),
            elf: self.elf.clone(),
            args: self.args.clone(),
            events: vec![self.events[index].clone()],
            backend: self.backend.clone(),
            policy: self.policy.clone(),
            mode: self.mode,
            callgraph: self.callgraph,
            unwinding: self.unwinding.clone(),
            samples: self.samples_of(index).map(|s| Sample { event: 0, ..s.clone() }).collect(),
            tasks: self.tasks.clone(),
            samples_dropped: self.samples_dropped,
            notifications: self.notifications,
            partial: self.partial,
            workload_ns: self.workload_ns,
            wall_ns: self.wall_ns,
            exits: self.exits,
        }
    }

    /// The samples of event `index`.
    pub fn samples_of(&self, index: usize) -> impl Iterator<Item = &Sample> {
        self.samples.iter().filter(move |s| s.event == index)
    }

    /// The index of the event named `name` (with its modifier, as `-e` gave it).
    pub fn event_index(&self, name: &str) -> Option<usize> {
        self.events.iter().position(|e| e.name == name)
    }

    /// The file's text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a record serializes")
    }

    /// The samples perf's report counts: one per sample; for the reference, one per
    /// retired instruction (its entries hold an address's instructions as their period).
    pub fn sample_count(&self) -> u64 {
        match self.mode {
            Mode::Reference => self.event_total(),
            _ => self.samples.len() as u64,
        }
    }

    /// What perf's report calls the event count: the sum of the sample periods.
    pub fn event_total(&self) -> u64 {
        self.samples.iter().fold(0u64, |sum, s| sum.saturating_add(s.period))
    }

    /// The shared object of the samples: the guest's name, without its extension.
    pub fn dso(&self) -> String {
        Path::new(&self.guest).file_stem().and_then(|s| s.to_str()).unwrap_or("guest").to_owned()
    }

    /// The command of a guest task: the agent's name for it, the guest's name outside tasks.
    pub fn command(&self, task: u32) -> String {
        match self.tasks.get(&task) {
            Some(name) => name.clone(),
            None if task == 0 => self.dso(),
            None => unnamed_task(task),
        }
    }

    /// The command as the user ran it: guest and workload arguments.
    pub fn command_line(&self) -> String {
        std::iter::once(self.guest.as_str()).chain(self.args.iter().map(String::as_str)).collect::<Vec<_>>().join(" ")
    }

    /// Why far fewer samples of an event were captured than its count and period predict
    /// (under half): a line for each event where it was so.
    pub fn shortfalls(&self) -> Vec<String> {
        if self.mode != Mode::Sampled {
            return Vec::new();
        }
        let n = self.notifications;
        let shortfall = |(i, e): (usize, &SampledEvent)| {
            let due = e.count? / e.period.max(1);
            let samples = self.samples_of(i).count() as u64;
            (due >= 10 && samples * 2 < due).then(|| {
                format!(
                    "captured {samples} {} samples where its count and period predict about {due}: {} overflow notifications lost, {} periods throttled",
                    e.name, n.lost, n.throttled
                )
            })
        };
        self.events.iter().enumerate().filter_map(shortfall).collect()
    }

    /// VM exits of the workload per sample taken (None without samples, or not sampled by
    /// the agent).
    pub fn exits_per_sample(&self) -> Option<f64> {
        let samples = self.sample_count();
        (self.mode == Mode::Sampled && samples > 0).then(|| self.exits as f64 / samples as f64)
    }
}

/// What a task the agent never named is called.
pub fn unnamed_task(id: u32) -> String {
    format!("task-{id}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata;

    #[test]
    fn a_record_reads_back_as_written() {
        let file = testdata::record(&[(1, 0, 0, 0x110, &[0x321]), (2, 1, 3, 0x120, &[])]);
        let again = Record::from_json(&file.to_json(), "x.json").unwrap();
        assert_eq!(again, file);
        assert!(!file.to_json().contains("\"callchain\":[]"), "no empty chains stored");
        assert_eq!((again.sample_count(), again.event_total()), (2, 2000));
    }

    #[test]
    fn unknown_versions_and_junk_are_one_line_errors() {
        let e = Record::from_json(r#"{"format": "perfvm-record-9"}"#, "old.json").unwrap_err();
        assert_eq!(
            e.to_string(),
            "old.json: record format 'perfvm-record-9' is not supported (this perfvm reads perfvm-record-3 and converts perfvm-record-2 and perfvm-record-1)"
        );
        for junk in [
            "[1, 2]",
            "{\"x\": 1}",
            "",
            "{\"format\": \"perfvm-record-2\", \"samples\": 3}",
            "{\"format\": \"perfvm-record-3\"}",
        ] {
            let e = Record::from_json(junk, "j.json").unwrap_err();
            assert!(e.is_bad_input() && e.to_string().starts_with("j.json: not a perfvm record file"), "{e}");
            assert!(!e.to_string().contains('\n'), "{e}");
        }
        let e = Record::load(Path::new("/nonexistent/x.json")).unwrap_err();
        assert!(!e.is_bad_input() && e.to_string().starts_with("cannot read /nonexistent/x.json: "), "{e}");
    }

    #[test]
    fn samples_name_events_the_file_has() {
        let mut file = testdata::record(&[(0, 0, 0, 0x110, &[])]);
        file.samples[0].event = 1;
        let e = Record::from_json(&file.to_json(), "two.json").unwrap_err();
        assert_eq!(e.to_string(), "two.json: not a perfvm record file: sample 0 names event 1 of 1");
        file.events.clear();
        let e = Record::from_json(&file.to_json(), "none.json").unwrap_err();
        assert_eq!(e.to_string(), "none.json: not a perfvm record file: no events");
    }

    #[test]
    fn a_record_of_one_event_keeps_its_samples_and_counts_them_alone() {
        let mut file = testdata::record(&[(1, 0, 0, 0x110, &[]), (2, 0, 0, 0x120, &[]), (3, 0, 0, 0x130, &[])]);
        file.events.push(SampledEvent { count: Some(100_000), ..SampledEvent::new("instructions", 0xc0, 5000) });
        (file.samples[1].event, file.samples[1].period) = (1, 5000);
        let again = Record::from_json(&file.to_json(), "x.json").unwrap();
        assert_eq!(again, file, "the events and each sample's event are kept");
        let instructions = file.of_event(file.event_index("instructions").unwrap());
        assert_eq!(instructions.events, [file.events[1].clone()]);
        assert_eq!(instructions.samples.iter().map(|s| (s.event, s.ip)).collect::<Vec<_>>(), [(0, 0x120)]);
        assert_eq!((instructions.sample_count(), instructions.event_total()), (1, 5000));
        assert_eq!(file.of_event(0).samples.len(), 2);
        // 100,000 instructions at a period of 5,000 predict 20 samples; 1 came.
        assert_eq!(
            file.shortfalls(),
            ["captured 1 instructions samples where its count and period predict about 20: 0 overflow notifications lost, 0 periods throttled"]
        );
    }

    #[test]
    fn the_reference_counts_instructions_as_samples() {
        let mut file = testdata::record(&[(0, 0, 0, 0x104, &[]), (0, 0, 0, 0x108, &[])]);
        file.mode = Mode::Reference;
        file.samples[0].period = 5;
        file.samples[1].period = 2;
        assert_eq!((file.sample_count(), file.event_total()), (7, 7));
    }

    #[test]
    fn commands_name_tasks_as_the_agent_did() {
        let mut file = testdata::record(&[]);
        file.tasks = [(7, "worker".to_owned())].into();
        assert_eq!(file.command(0), "ftest");
        assert_eq!(file.command(7), "worker");
        assert_eq!(file.command(11), "task-11", "a task the agent never named");
        file.guest = "/some/where/callgraph.elf".into();
        assert_eq!(file.dso(), "callgraph");
    }
}
