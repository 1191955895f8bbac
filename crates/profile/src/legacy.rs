//! Reading older record files. `perfvm-record-2` held one event at the top level of the
//! file: it moves into the event list. `perfvm-record-1` files kept the samples three times
//! (symbolized profile rows, per-address weights, the sample list); the conversion keeps
//! the raw samples and drops what was derived from them, which is resolved again from the
//! ELF.

use crate::record::{Mode, Notifications, Record, Sample, SampledEvent, FORMAT};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The fields of a `perfvm-record-1` file the conversion needs.
#[derive(Debug, Deserialize)]
pub struct RecordV1 {
    guest: String,
    elf: String,
    args: Vec<String>,
    event: String,
    raw_event: u16,
    period: u64,
    backend: String,
    policy: String,
    mode: String,
    /// Samples taken (the reference: instructions retired).
    samples: u64,
    samples_dropped: u64,
    workload_ns: Option<u64>,
    wall_ns: u64,
    /// `(ip, task, samples)`: the reference's only record of its addresses.
    #[serde(default)]
    rips: Vec<(u64, u32, u64)>,
    #[serde(default)]
    sample_list: Vec<Sample>,
    #[serde(default)]
    callgraph: bool,
    #[serde(default)]
    tasks: BTreeMap<u32, String>,
    #[serde(default)]
    event_count: Option<u64>,
    #[serde(default)]
    notifications: Notifications,
    #[serde(default)]
    partial: bool,
    #[serde(default)]
    exits: u64,
}

impl RecordV1 {
    /// The same record in the current format; None where its samples were not kept.
    pub fn convert(self) -> Option<Record> {
        let mode = match self.mode.as_str() {
            "sampled" => Mode::Sampled,
            "vcpus" => Mode::Vcpus,
            "reference" => Mode::Reference,
            _ => return None,
        };
        let samples = if !self.sample_list.is_empty() {
            self.sample_list
        } else {
            // Each address's samples as one entry standing for all of them.
            let period = self.period.max(1);
            let entry = |&(ip, task, n): &(u64, u32, u64)| Sample {
                event: 0,
                time_ns: 0,
                vcpu: 0,
                task,
                ip,
                period: n.saturating_mul(period),
                callchain: Vec::new(),
            };
            self.rips.iter().map(entry).collect()
        };
        if samples.is_empty() && self.samples > 0 {
            return None;
        }
        Some(Record {
            format: FORMAT.into(),
            guest: self.guest,
            elf: self.elf,
            args: self.args,
            events: vec![SampledEvent {
                count: self.event_count,
                ..SampledEvent::new(self.event, self.raw_event, self.period)
            }],
            backend: self.backend,
            policy: self.policy,
            mode,
            callgraph: self.callgraph,
            unwinding: None,
            samples,
            tasks: self.tasks,
            samples_dropped: self.samples_dropped,
            notifications: self.notifications,
            partial: self.partial,
            workload_ns: self.workload_ns,
            wall_ns: self.wall_ns,
            exits: self.exits,
        })
    }
}

/// A `perfvm-record-2` document as the current format: its one event (`event`,
/// `raw_event`, `period`, `event_count`) becomes the event list, which its samples name by
/// default. Fields it lacks are left for the parser to report.
pub fn convert_v2(mut doc: Value) -> Value {
    if let Some(fields) = doc.as_object_mut() {
        let mut take = |key: &str| fields.remove(key).unwrap_or(Value::Null);
        let event = json!({"name": take("event"), "raw_event": take("raw_event"), "period": take("period"),
                           "count": take("event_count")});
        fields.insert("events".into(), json!([event]));
        fields.insert("format".into(), json!(FORMAT));
    }
    doc
}

#[cfg(test)]
mod tests {
    use crate::record::{LoadError, Mode, Record, SampledEvent};
    use serde_json::json;

    fn v1(mode: &str, samples: u64, rips: serde_json::Value, sample_list: serde_json::Value) -> String {
        json!({"format": "perfvm-record-1", "guest": "ftest", "elf": "/x/ftest.elf", "args": [], "event": "cycles",
               "raw_event": 0x3c, "period": 1000, "backend": "b", "policy": "p", "mode": mode,
               "samples": samples, "samples_dropped": 2, "workload_ns": null, "wall_ns": 1,
               "profile": {"rows": [{"command": "ftest", "object": "ftest", "symbol": "qux", "weight": samples}]},
               "rips": rips, "sample_list": sample_list, "notifications": {"taken": 3, "lost": 1, "throttled": 4}})
        .to_string()
    }

    #[test]
    fn a_sampled_v1_file_keeps_its_sample_list() {
        let list = json!([{"time_ns": 5, "vcpu": 1, "task": 0, "ip": 0x110, "period": 1000, "callchain": [0x321]}]);
        let r = Record::from_json(&v1("sampled", 1, json!([[0x110, 0, 1]]), list), "old.json").unwrap();
        assert_eq!(r.format, crate::FORMAT);
        assert_eq!((r.events.len(), r.event().name.as_str(), r.event().period), (1, "cycles", 1000));
        assert_eq!((r.mode, r.samples.len(), r.samples[0].callchain.clone()), (Mode::Sampled, 1, vec![0x321]));
        assert_eq!((r.samples_dropped, r.notifications.lost, r.notifications.throttled), (2, 1, 4));
    }

    #[test]
    fn a_v1_reference_becomes_one_entry_per_address() {
        let mut text = v1("reference", 7, json!([[0x104, 0, 5], [0x108, 0, 2]]), json!([]));
        text = text.replace("\"period\":1000", "\"period\":1");
        let r = Record::from_json(&text, "ref.json").unwrap();
        assert_eq!(r.mode, Mode::Reference);
        assert_eq!(r.samples.iter().map(|s| (s.ip, s.period)).collect::<Vec<_>>(), [(0x104, 5), (0x108, 2)]);
        assert_eq!(r.sample_count(), 7);
    }

    #[test]
    fn a_v2_file_becomes_a_record_of_its_one_event() {
        let v2 = json!({"format": "perfvm-record-2", "guest": "ftest", "elf": "/x/ftest.elf", "args": [],
                        "event": "instructions:k", "raw_event": 0xc0, "period": 5000, "backend": "b", "policy": "p",
                        "mode": "sampled", "event_count": 70_000,
                        "samples": [{"time_ns": 1, "vcpu": 0, "task": 0, "ip": 0x110, "period": 5000}]});
        let r = Record::from_json(&v2.to_string(), "v2.json").unwrap();
        assert_eq!(r.format, crate::FORMAT);
        let event = SampledEvent { count: Some(70_000), ..SampledEvent::new("instructions:k", 0xc0, 5000) };
        assert_eq!((r.events, r.samples[0].event), (vec![event], 0));
        let mut broken = v2;
        broken.as_object_mut().unwrap().remove("event");
        let e = Record::from_json(&broken.to_string(), "v2.json").unwrap_err();
        assert!(
            e.to_string().starts_with("v2.json: not a perfvm record file: ") && !e.to_string().contains('\n'),
            "{e}"
        );
    }

    #[test]
    fn a_v1_file_without_samples_is_refused_naming_its_version() {
        let e = Record::from_json(&v1("sampled", 4, json!([]), json!([])), "rows.json").unwrap_err();
        assert!(matches!(e, LoadError::Unconvertible { .. }), "{e}");
        assert!(e.to_string().contains("perfvm-record-1") && e.to_string().contains("record it again"), "{e}");
        let empty = Record::from_json(&v1("sampled", 0, json!([]), json!([])), "empty.json").unwrap();
        assert!(empty.samples.is_empty());
    }
}
