//! `perfvm list`: the events the virtual PMU offers, as `perf list` shows a PMU's events:
//! names, raw encodings, and what each backend counts them with on this host.

use crate::Failure;
use pmu::{ArchEvent, CountSource};
use profile::events::{self, Event};
use vmm::backends::perf::{clock_supports, EventBudget, PerfMode, PerfSource, HARDWARE, SOFTWARE_CLOCK};

/// How the perf backend counts `event` on this host (`host_pmu`: a source of host
/// hardware events, which tries to open it), or "-". Without a host PMU, cycles are the
/// vCPU thread's time and ref-cycles follow the TSC.
fn perf_backend(host_pmu: Option<&PerfSource>, event: ArchEvent) -> &'static str {
    match host_pmu {
        Some(source) if source.supports(event) => "host PMU (guest mode)",
        None if clock_supports(event) && event == ArchEvent::RefCycles => "TSC",
        None if clock_supports(event) => "vCPU time x TSC",
        _ => "-",
    }
}

/// How the exact backend counts `event`: instructions and branches exactly, cycles as its
/// model clock, ref-cycles from the TSC.
fn exact_backend(event: Event) -> &'static str {
    match event.raw {
        _ if !events::architectural(event.raw).is_some_and(|e| crate::session::counts::exact_events().contains(e)) => {
            "-"
        }
        0x003c => "model clock (1 per insn)",
        0x013c => "TSC",
        _ => "exact",
    }
}

/// `perfvm list`: print the events and exit 0.
pub fn run() -> Result<i32, Failure> {
    // No VM runs here, so no TSC rate is stated: the clock's rate is each VM's to state.
    let host_pmu = PerfMode::host_pmu().then(|| PerfSource::new(PerfMode::Hardware, EventBudget::new(1)));
    let perf_mode = match host_pmu {
        Some(_) => HARDWARE.to_owned(),
        None => format!("{SOFTWARE_CLOCK}: cycles = vCPU thread time x the guest TSC rate, which each VM states"),
    };
    crate::output::emit(&render(|e| perf_backend(host_pmu.as_ref(), e), &perf_mode))?;
    Ok(0)
}

fn render(perf: impl Fn(ArchEvent) -> &'static str, perf_mode: &str) -> String {
    let mut out = String::from(
        "Events of the perfvm virtual PMU (Intel architectural perfmon v2; AMD PerfMonV2 with --cpu-vendor amd):\n\n",
    );
    out.push_str(&format!(
        "  {:<18} {:<6} {:<8} {:<24} {:<26} {}\n",
        "event", "raw", "AMD", "perf backend", "exact backend", "aliases"
    ));
    for (event, aliases) in events::named() {
        let arch = events::architectural(event.raw).expect("named events are architectural");
        let (amd_event, amd_umask) = arch.amd_select();
        let line = format!(
            "  {:<18} r{:04x}  {:<8} {:<24} {:<26} {}",
            event.name,
            event.raw,
            format!("r{amd_umask:02x}{amd_event:03x}"),
            perf(arch),
            exact_backend(event),
            aliases.join(", ")
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.push_str(&format!(
        "\n  perf backend here: {perf_mode}.\n  \
         -e also takes rUUEE (unit mask UU, event select EE); only the architectural encodings\n  \
         above are counted: stat shows any other as <not supported>. The AMD column is the same\n  \
         event's PERF_CTL encoding (unit mask, 12-bit event select) for guests of the AMD vPMU,\n  \
         which has no fixed counters.\n"
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_host_pmu_the_clock_counts_cycles_and_the_tsc_ref_cycles() {
        assert_eq!(perf_backend(None, ArchEvent::CoreCycles), "vCPU time x TSC");
        assert_eq!(perf_backend(None, ArchEvent::RefCycles), "TSC");
        assert_eq!(perf_backend(None, ArchEvent::Instructions), "-");
    }

    #[test]
    fn lists_every_event_with_its_raw_code_and_backends() {
        let out = render(|e| if e == ArchEvent::CoreCycles { "vCPU time x TSC" } else { "-" }, "a clock");
        let line = |name: &str| out.lines().find(|l| l.trim_start().starts_with(&format!("{name} "))).unwrap();
        assert!(line("instructions").contains("r00c0") && line("instructions").contains(" exact"), "{out}");
        assert!(line("cycles").contains("vCPU time x TSC") && line("cycles").contains("model clock"), "{out}");
        assert!(line("branches").ends_with("branch-instructions"), "{out}");
        assert!(line("cache-misses").contains("r412e"), "{out}");
        assert!(line("cycles").contains("r00076") && line("instructions").contains("r000c0"), "AMD codes: {out}");
        assert!(!line("cache-misses").contains("exact"), "{out}");
        let raw_code = |w: &str| w.len() == 5 && w.starts_with('r') && u16::from_str_radix(&w[1..], 16).is_ok();
        assert_eq!(out.lines().filter(|l| l.split_whitespace().any(raw_code)).count(), 7, "{out}");
    }
}
