//! The chart of each suite, drawn from the suite's JSON result.

use super::plot::Chart;
use serde_json::Value;

fn rows(v: &Value) -> Vec<&Value> {
    v["rows"].as_array().map(|r| r.iter().collect()).unwrap_or_default()
}

fn num(v: &Value) -> f64 {
    v.as_f64().or_else(|| v["median"].as_f64()).unwrap_or(f64::NAN)
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or("").to_owned()
}

/// Build the chart of `suite` from its JSON, if it has one.
pub fn chart_for(suite: &str, v: &Value) -> Option<Chart> {
    let r = rows(v);
    let pick = |label: &str, key: &str| (label.to_owned(), r.iter().map(|x| num(&x[key])).collect::<Vec<_>>());
    let cats = |key: &str| r.iter().map(|x| text(&x[key])).collect::<Vec<_>>();
    let chart = match suite {
        "pmu-ops" => Chart {
            title: "VMM time per guest PMU operation".into(),
            y_label: "ns (median of run means)".into(),
            categories: cats("operation"),
            series: vec![pick("legacy", "legacy_mean_ns"), pick("reuse", "reuse_mean_ns")],
        },
        "ctxsw" => Chart {
            title: "Guest context switch, 2 tasks".into(),
            y_label: "µs per switch".into(),
            categories: cats("configuration"),
            series: vec![
                pick("switch", "switch_us"),
                pick("sched-out", "sched_out_us"),
                pick("sched-in", "sched_in_us"),
            ],
        },
        "precision" => Chart {
            title: "Profile distance to the exact reference (ftest)".into(),
            y_label: "total variation distance".into(),
            categories: cats("profile").iter().map(|c| c.replace("record ", "")).collect(),
            series: vec![pick("TVD", "tvd")],
        },
        "transitions" => Chart {
            title: "Port-IO exit roundtrip seen from the guest".into(),
            y_label: "ns".into(),
            categories: cats("configuration"),
            series: vec![pick("roundtrip", "roundtrip_ns")],
        },
        "nmi-order" => Chart {
            title: "Cancelled entries per PMI".into(),
            y_label: "extra entries per PMI".into(),
            categories: cats("order"),
            series: vec![pick("per PMI", "per_pmi")],
        },
        "pv" => Chart {
            title: "Per-task counting across guest context switches".into(),
            y_label: "µs per switch".into(),
            categories: cats("workload"),
            series: vec![pick("MSRs", "msr_us_per_switch"), pick("PV page", "pv_us_per_switch")],
        },
        "scaling" => Chart {
            title: "VMM ns per GLOBAL_CTRL enable vs counters x vCPUs".into(),
            y_label: "ns".into(),
            categories: r.iter().map(|x| format!("{}x{}", x["counters"], x["vcpus"])).collect(),
            series: vec![pick("legacy", "legacy_ns"), pick("reuse", "reuse_ns")],
        },
        _ => return None,
    };
    (!chart.categories.is_empty()).then_some(chart)
}
