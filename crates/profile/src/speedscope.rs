//! Export a record file as a speedscope profile (https://www.speedscope.app): the "sampled"
//! profile type of its file format (https://www.speedscope.app/file-format-schema.json), one
//! profile per command, each sample a stack of frame indices, outermost first, weighted by
//! the events it stands for.

use crate::profile::Profile;
use crate::record::Record;
use serde_json::{json, Value};
use std::collections::HashMap;

/// The `$schema` every speedscope file names.
pub const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

/// One command's samples: stacks of frame indices and their weights.
#[derive(Debug, Default)]
struct Sampled {
    samples: Vec<Vec<usize>>,
    weights: Vec<u64>,
}

/// The speedscope document of a record of one event (`input` names it; [`Record::of_event`]
/// takes one of several), from its profile: the samples in
/// the order taken, each weighted by its period; frames are the profile's functions, with
/// the file and line where each is defined when the DWARF was read.
pub fn export(record: &Record, p: &Profile, input: &str) -> Value {
    // Speedscope frames are functions: the profile's function indices, renumbered as used.
    let mut frame_of: HashMap<usize, usize> = HashMap::new();
    let mut frames: Vec<Value> = Vec::new();
    let mut profiles: Vec<(String, Sampled)> = Vec::new();
    for (sample, &stack) in record.samples.iter().zip(&p.sample_stacks) {
        let stack = &p.stacks[stack];
        let indices: Vec<usize> = stack
            .frames
            .iter()
            .map(|&f| {
                let function = p.frames[f].function;
                *frame_of.entry(function).or_insert_with(|| {
                    let f = &p.functions[function];
                    let mut frame = json!({ "name": f.name });
                    if let Some(def) = &f.definition {
                        frame["file"] = json!(def.file);
                        frame["line"] = json!(def.line);
                    }
                    frames.push(frame);
                    frames.len() - 1
                })
            })
            .collect();
        let command = p.command(stack.task);
        let i = match profiles.iter().position(|(c, _)| c == command) {
            Some(i) => i,
            None => {
                profiles.push((command.to_owned(), Sampled::default()));
                profiles.len() - 1
            }
        };
        profiles[i].1.samples.push(indices);
        profiles[i].1.weights.push(sample.period);
    }
    profiles.sort_by_key(|(_, p)| std::cmp::Reverse(p.weights.iter().sum::<u64>()));
    let profiles: Vec<Value> = profiles
        .into_iter()
        .map(|(command, s)| {
            json!({
                "type": "sampled",
                "name": format!("{command}: {}", record.event().name),
                "unit": "none",
                "startValue": 0,
                "endValue": s.weights.iter().sum::<u64>(),
                "samples": s.samples,
                "weights": s.weights,
            })
        })
        .collect();
    json!({
        "$schema": SCHEMA,
        "name": format!("perfvm record of {} ({} samples of {}, {input})", record.guest, record.sample_count(), record.event().name),
        "exporter": format!("perfvm {}", env!("CARGO_PKG_VERSION")),
        "activeProfileIndex": 0,
        "shared": { "frames": frames },
        "profiles": profiles,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata;

    /// The required fields and types of speedscope's file-format-schema.json (FileFormat.File,
    /// FileFormat.Frame, FileFormat.SampledProfile), plus what the viewer relies on: frame
    /// indices in range, one weight per sample, endValue >= startValue.
    fn check_schema(doc: &Value) -> Result<(), String> {
        let obj = doc.as_object().ok_or("the file is not an object")?;
        for key in ["$schema", "profiles", "shared"] {
            obj.get(key).ok_or(format!("File lacks {key}"))?;
        }
        if doc["$schema"] != SCHEMA {
            return Err("$schema is not speedscope's".into());
        }
        if !doc["name"].is_string() || !doc["exporter"].is_string() || !doc["activeProfileIndex"].is_number() {
            return Err("name, exporter, activeProfileIndex: wrong types".into());
        }
        let frames = doc["shared"]["frames"].as_array().ok_or("shared.frames is not an array")?;
        for f in frames {
            if !f["name"].is_string() {
                return Err(format!("frame without a name: {f}"));
            }
            if f.get("file").is_some_and(|v| !v.is_string()) || f.get("line").is_some_and(|v| !v.is_number()) {
                return Err(format!("frame file/line of the wrong type: {f}"));
            }
        }
        let profiles = doc["profiles"].as_array().ok_or("profiles is not an array")?;
        for p in profiles {
            for key in ["endValue", "name", "samples", "startValue", "type", "unit", "weights"] {
                p.get(key).ok_or(format!("SampledProfile lacks {key}"))?;
            }
            let units = ["bytes", "microseconds", "milliseconds", "nanoseconds", "none", "seconds"];
            if p["type"] != "sampled" || !p["name"].is_string() || !units.contains(&p["unit"].as_str().unwrap_or("")) {
                return Err(format!("type, name or unit wrong: {p}"));
            }
            let (start, end) = (p["startValue"].as_f64(), p["endValue"].as_f64());
            if !matches!((start, end), (Some(s), Some(e)) if e >= s) {
                return Err("startValue/endValue".into());
            }
            let samples = p["samples"].as_array().ok_or("samples is not an array")?;
            let weights = p["weights"].as_array().ok_or("weights is not an array")?;
            if samples.len() != weights.len() || !weights.iter().all(Value::is_number) {
                return Err("one numeric weight per sample".into());
            }
            for s in samples {
                let stack = s.as_array().ok_or("a sample is not an array")?;
                if !stack.iter().all(|i| i.as_u64().is_some_and(|i| (i as usize) < frames.len())) {
                    return Err(format!("frame index out of range in {s}"));
                }
            }
        }
        Ok(())
    }

    fn export_of(file: &Record) -> Value {
        export(file, &Profile::build(file, &testdata::resolver()), "x.json")
    }

    #[test]
    fn sampled_profile_with_stacks_outermost_first() {
        let file = testdata::record(&[(1, 0, 0, 0x110, &[0x321]), (2, 0, 0, 0x120, &[0x321]), (3, 0, 0, 0x999, &[])]);
        let doc = export_of(&file);
        check_schema(&doc).unwrap();
        let names: Vec<&str> =
            doc["shared"]["frames"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["main", "qux", "[unknown]"]);
        let p = &doc["profiles"][0];
        assert_eq!(p["samples"], json!([[0, 1], [0, 1], [2]]));
        assert_eq!(p["weights"], json!([1000, 1000, 1000]));
        assert_eq!(p["endValue"], 3000);
        assert_eq!(p["name"], "ftest: cycles");
    }

    #[test]
    fn a_reference_exports_its_addresses_weighted_by_instructions() {
        let mut file = testdata::record(&[(0, 0, 0, 0x104, &[]), (0, 0, 0, 0x108, &[])]);
        file.mode = crate::Mode::Reference;
        (file.samples[0].period, file.samples[1].period) = (5, 2);
        let doc = export_of(&file);
        check_schema(&doc).unwrap();
        assert_eq!(doc["profiles"][0]["samples"], json!([[0], [0]]));
        assert_eq!(doc["profiles"][0]["weights"], json!([5, 2]));
        let doc = export_of(&testdata::record(&[]));
        check_schema(&doc).unwrap();
        assert_eq!(doc["profiles"], json!([]));
    }

    #[test]
    fn the_schema_check_rejects_what_speedscope_would() {
        let good = export_of(&testdata::record(&[(1, 0, 0, 0x110, &[])]));
        let mut bad = good.clone();
        bad["profiles"][0]["samples"] = json!([[5]]);
        assert!(check_schema(&bad).unwrap_err().contains("out of range"));
        let mut bad = good.clone();
        bad["profiles"][0].as_object_mut().unwrap().remove("unit");
        assert!(check_schema(&bad).unwrap_err().contains("lacks unit"));
        let mut bad = good;
        bad["profiles"][0]["weights"] = json!([]);
        assert!(check_schema(&bad).is_err());
    }

    #[test]
    fn real_guest_frames_carry_file_and_line() {
        let Some((file, r)) = testdata::real_ftest("real_guest_frames_carry_file_and_line") else { return };
        let doc = export(&file, &Profile::build(&file, &r), "x.json");
        check_schema(&doc).unwrap();
        for f in doc["shared"]["frames"].as_array().unwrap() {
            assert!(f["file"].as_str().unwrap().ends_with("ftest.c") && f["line"].as_u64().unwrap() > 0, "{f}");
        }
    }
}
