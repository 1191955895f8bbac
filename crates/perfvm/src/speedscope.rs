//! Export a record file as a speedscope profile (https://www.speedscope.app): the "sampled"
//! profile type of its file format (https://www.speedscope.app/file-format-schema.json), one
//! profile per command, each sample a stack of frame indices, outermost first, weighted by
//! the events it stands for.

use crate::record::RecordFile;
use crate::resolve::Resolver;
use serde_json::{json, Value};
use std::collections::HashMap;

/// The `$schema` every speedscope file names.
pub const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

/// Frames shared by the profiles: one per function, with its file and line where the DWARF
/// has them.
#[derive(Debug, Default)]
struct Frames {
    index: HashMap<String, usize>,
    list: Vec<Value>,
}

impl Frames {
    fn of(&mut self, r: &Resolver, ip: u64) -> usize {
        let name = r.symbol(ip);
        if let Some(&i) = self.index.get(&name) {
            return i;
        }
        let mut frame = json!({ "name": name });
        if let Some(loc) = r.function_start(ip).and_then(|start| r.location(start)) {
            frame["file"] = json!(loc.file);
            frame["line"] = json!(loc.line);
        }
        self.index.insert(name, self.list.len());
        self.list.push(frame);
        self.list.len() - 1
    }
}

/// One command's samples.
#[derive(Debug, Default)]
struct Profile {
    samples: Vec<Vec<usize>>,
    weights: Vec<u64>,
}

/// The speedscope document of a record (`input` names it). Samples come from the record's
/// sample list in order; a record without one (the reference) gives one weighted sample per
/// address.
pub fn export(file: &RecordFile, r: &Resolver, input: &str) -> Value {
    let mut frames = Frames::default();
    let mut profiles: Vec<(String, Profile)> = Vec::new();
    let mut add = |command: String, stack: Vec<usize>, weight: u64| {
        let i = match profiles.iter().position(|(c, _)| *c == command) {
            Some(i) => i,
            None => {
                profiles.push((command, Profile::default()));
                profiles.len() - 1
            }
        };
        profiles[i].1.samples.push(stack);
        profiles[i].1.weights.push(weight);
    };
    if file.sample_list.is_empty() {
        for &(ip, task, weight) in &file.rips {
            add(r.command(task), vec![frames.of(r, ip)], weight.saturating_mul(file.period));
        }
    } else {
        for s in &file.sample_list {
            // The chain is innermost caller first: speedscope wants the outermost first.
            let mut stack: Vec<usize> = s.callchain.iter().rev().map(|&ret| frames.of(r, ret)).collect();
            stack.push(frames.of(r, s.ip));
            add(r.command(s.task), stack, s.period);
        }
    }
    profiles.sort_by_key(|(_, p)| std::cmp::Reverse(p.weights.iter().sum::<u64>()));
    let profiles: Vec<Value> = profiles
        .into_iter()
        .map(|(command, p)| {
            json!({
                "type": "sampled",
                "name": format!("{command}: {}", file.event),
                "unit": "none",
                "startValue": 0,
                "endValue": p.weights.iter().sum::<u64>(),
                "samples": p.samples,
                "weights": p.weights,
            })
        })
        .collect();
    json!({
        "$schema": SCHEMA,
        "name": format!("perfvm record of {} ({} samples of {}, {input})", file.guest, file.samples, file.event),
        "exporter": format!("perfvm {}", env!("CARGO_PKG_VERSION")),
        "activeProfileIndex": 0,
        "shared": { "frames": frames.list },
        "profiles": profiles,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::Symbols;
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

    fn resolver(file: &RecordFile) -> Resolver {
        let symbols = Symbols::from_list(vec![(0x100, 0x40, "qux".into()), (0x300, 0x80, "main".into())]);
        Resolver::from_parts(file, symbols, None)
    }

    #[test]
    fn sampled_profile_with_stacks_outermost_first() {
        let file = testdata::record(
            &[(1, 0, 0, 0x110, &[0x321]), (2, 0, 0, 0x120, &[0x321]), (3, 0, 0, 0x999, &[])],
            &[("ftest", "qux", 2, &["main"]), ("ftest", "[unknown]", 1, &[])],
        );
        let doc = export(&file, &resolver(&file), "x.json");
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
    fn a_record_without_a_sample_list_exports_its_addresses() {
        let mut file = testdata::record(&[], &[("ftest", "qux", 7, &[])]);
        file.rips = vec![(0x104, 0, 5), (0x108, 0, 2)];
        file.period = 1;
        let doc = export(&file, &resolver(&file), "ref.json");
        check_schema(&doc).unwrap();
        assert_eq!(doc["profiles"][0]["samples"], json!([[0], [0]]));
        assert_eq!(doc["profiles"][0]["weights"], json!([5, 2]));
        let empty = testdata::record(&[], &[]);
        let doc = export(&empty, &resolver(&empty), "empty.json");
        check_schema(&doc).unwrap();
        assert_eq!(doc["profiles"], json!([]));
    }

    #[test]
    fn the_schema_check_rejects_what_speedscope_would() {
        let file = testdata::record(&[(1, 0, 0, 0x110, &[])], &[("ftest", "qux", 1, &[])]);
        let good = export(&file, &resolver(&file), "x.json");
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
        let doc = export(&file, &r, "x.json");
        check_schema(&doc).unwrap();
        for f in doc["shared"]["frames"].as_array().unwrap() {
            assert!(f["file"].as_str().unwrap().ends_with("ftest.c") && f["line"].as_u64().unwrap() > 0, "{f}");
        }
    }
}
