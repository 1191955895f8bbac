//! Suite `transitions` (seed 001): the cheapest exit's roundtrip seen from the guest, and the
//! vCPU thread's syscalls per KVM_RUN, with the vPMU off, on but idle, and on and counting.

use super::stats::{fmt, Summary};
use super::{config, run_config};
use crate::Failure;
use serde_json::{json, Value};
use vmm::vm::PmuSettings;

pub fn run(reps: usize, _quick: bool) -> Result<(String, Value), Failure> {
    let pebs = PmuSettings { pebs: true, ..Default::default() };
    let configs: [(&str, Option<PmuSettings>, &str); 4] = [
        ("vPMU off", None, ""),
        ("vPMU on, idle", Some(PmuSettings::default()), ""),
        ("vPMU on, counting", Some(PmuSettings::default()), "count"),
        ("vPMU on, PEBS counting", Some(pebs), "count pebs"),
    ];
    let counting = vmm::syscount::unavailable_reason();
    let mut text = format!(
        "transitions — port-IO exit roundtrip seen from the guest (portio, median of 1001), {reps} runs each\n\n{:<22} {:>14} {:>20}\n",
        "configuration", "roundtrip", "syscalls per KVM_RUN"
    );
    let mut rows = Vec::new();
    for (label, pmu, cmdline) in configs {
        let (mut ns, mut per_run) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            let mut cfg = config("portio", cmdline, pmu.clone());
            cfg.count_syscalls = counting.is_none();
            let r = run_config(&cfg)?;
            // "portio: median <c> cycles, <ns> ns": the first line is the OUT roundtrip.
            let text = super::console(&r);
            let line = text.lines().find(|l| l.starts_with("portio: median")).unwrap_or("");
            ns.extend(line.split(", ").nth(1).and_then(|w| w.split(' ').next()).and_then(|n| n.parse::<f64>().ok()));
            if let Some(n) = r.stats.vcpu_syscalls {
                per_run.push(n as f64 / r.stats.entries.max(1) as f64);
            }
        }
        let (n, p) = (Summary::of(&ns), Summary::of(&per_run));
        text.push_str(&format!(
            "{:<22} {:>11} ns {:>20}\n",
            label,
            fmt(n.median),
            if p.n > 0 { format!("{:.4}", p.median) } else { "n/a".into() }
        ));
        rows.push(json!({"configuration": label, "roundtrip_ns": n, "syscalls_per_entry": p}));
    }
    if let Some(reason) = counting {
        text.push_str(&format!("(syscalls not counted: {reason})\n"));
    }
    Ok((text, json!({"rows": rows, "reps": reps})))
}
