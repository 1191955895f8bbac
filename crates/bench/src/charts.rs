//! The chart of each suite, drawn from the suite's JSON result: one bar per series and
//! execution mode in each category (native bars lighter than emulated ones), with the
//! spread of the runs (a `Summary`'s min and max) as error bars.

use super::plot::{Bar, Chart};
use serde_json::Value;

fn rows(v: &Value) -> Vec<&Value> {
    v["rows"].as_array().map(|r| r.iter().collect()).unwrap_or_default()
}

/// A plain number, or a `Summary`: its median with its min and max.
fn bar(v: &Value) -> Bar {
    match v.as_f64() {
        Some(x) => Bar::exact(x),
        None => {
            let get = |key: &str| v[key].as_f64().unwrap_or(f64::NAN);
            Bar { value: get("median"), low: get("min"), high: get("max") }
        }
    }
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or("").to_owned()
}

/// A row's category (x-axis label).
type Category = fn(&Value) -> String;

/// The distinct values of `f` over the rows, in first-seen order.
fn distinct(rows: &[&Value], f: impl Fn(&Value) -> String) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for r in rows {
        let v = f(r);
        if !seen.contains(&v) {
            seen.push(v);
        }
    }
    seen
}

/// Build the chart of `suite` from its JSON, if it has one.
pub fn chart_for(suite: &str, v: &Value) -> Option<Chart> {
    // pmu-ops runs once per vendor: the chart shows the Intel vPMU's table.
    let v = if suite == "pmu-ops" { &v["intel"] } else { v };
    let r = rows(v);
    if suite == "rate" {
        // Host, native and emulated rates are orders of magnitude apart: a log axis.
        let chart = Chart {
            title: "Instruction rate of the same dec/jnz loop".into(),
            y_label: "instructions/s".into(),
            categories: distinct(&r, |x| text(&x["mode"])),
            series: vec![("rate".into(), r.iter().map(|x| bar(&x["instr_per_s"])).collect())],
            modes: 1,
        };
        return (!chart.categories.is_empty()).then_some(chart);
    }
    let (title, y_label, metrics, category): (&str, &str, &[(&str, &str)], Category) = match suite {
        "pmu-ops" => (
            "VMM time per guest PMU operation (Intel vPMU)",
            "ns (median of run means)",
            &[("legacy", "legacy_mean_ns"), ("reuse", "reuse_mean_ns")],
            |x| text(&x["operation"]),
        ),
        "ctxsw" => (
            "Guest context switch, 2 tasks",
            "µs per switch",
            &[("switch", "switch_us"), ("sched-out", "sched_out_us"), ("sched-in", "sched_in_us")],
            |x| text(&x["configuration"]),
        ),
        "precision" => {
            ("Profile distance to the exact reference (ftest)", "total variation distance", &[("TVD", "tvd")], |x| {
                text(&x["profile"]).replace("record ", "")
            })
        }
        "transitions" => ("Port-IO exit roundtrip seen from the guest", "ns", &[("roundtrip", "roundtrip_ns")], |x| {
            text(&x["configuration"])
        }),
        "nmi-order" => {
            ("Cancelled entries per PMI", "extra entries per PMI", &[("per PMI", "per_pmi")], |x| text(&x["order"]))
        }
        "pv" => (
            "Per-task counting across guest context switches",
            "µs per switch",
            &[
                ("MSRs", "msr_us_per_switch"),
                ("PV, publish per switch", "pv_publish_each_us_per_switch"),
                ("PV page", "pv_us_per_switch"),
            ],
            |x| text(&x["workload"]),
        ),
        "scaling" => (
            "VMM ns per GLOBAL_CTRL enable vs counters x vCPUs",
            "ns",
            &[("legacy", "legacy_ns"), ("reuse", "reuse_ns")],
            |x| format!("{}x{}", x["counters"], x["vcpus"]),
        ),
        _ => return None,
    };
    let categories = distinct(&r, category);
    let modes = distinct(&r, |x| text(&x["mode"]));
    let mut series = Vec::new();
    for (name, key) in metrics {
        for mode in &modes {
            let cell = |c: &String| r.iter().find(|x| category(x) == *c && text(&x["mode"]) == *mode);
            let values = categories.iter().map(|c| cell(c).map_or(Bar::exact(f64::NAN), |x| bar(&x[*key]))).collect();
            let name = if modes.len() > 1 { format!("{name}, {mode}") } else { name.to_string() };
            series.push((name, values));
        }
    }
    (!categories.is_empty()).then_some(Chart {
        title: title.into(),
        y_label: y_label.into(),
        categories,
        series,
        modes: modes.len().max(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_series_per_metric_and_mode() {
        let v = json!({"rows": [
            {"configuration": "vPMU off", "mode": "emulated", "roundtrip_ns": {"median": 9000.0, "min": 8900.0, "max": 9500.0}},
            {"configuration": "vPMU off", "mode": "native", "roundtrip_ns": {"median": 25000.0}},
            {"configuration": "vPMU on, idle", "mode": "emulated", "roundtrip_ns": 9100.0},
        ]});
        let c = chart_for("transitions", &v).unwrap();
        assert_eq!(c.categories, ["vPMU off", "vPMU on, idle"]);
        let spread = Bar { value: 9000.0, low: 8900.0, high: 9500.0 };
        assert_eq!(c.series[0], ("roundtrip, emulated".to_string(), vec![spread, Bar::exact(9100.0)]));
        assert_eq!(c.series[1].0, "roundtrip, native");
        assert!(c.series[1].1[1].value.is_nan());
        assert_eq!(c.modes, 2);
    }
}
