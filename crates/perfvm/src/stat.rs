//! `perfvm stat`: boot a guest whose perf agent counts the workload (`-r N`: N times), then
//! print what `perf stat` prints, from the profile library's model of the counts
//! (`profile::counts`: folding, scaling of multiplexed events, statuses, the table).

use crate::cli::StatArgs;
use crate::run::{boot_under_agent, vm_config};
use crate::Failure;
use pmu::{CountSource, EventSet};
use profile::agent::Order;
use profile::counts::{fold, line_json, Count, Run, Table};
use profile::events;
use serde_json::json;
use std::time::Instant;
use vmm::devices::{AgentData, COUNT_UNSUPPORTED};
use vmm::vm::BackendKind;
use vmm::RunReport;

/// The events the exact backend counts.
pub fn exact_events() -> EventSet {
    let exact = vmm::backends::exact::ExactSource::new();
    EventSet::from_fn(|e| exact.supports(e))
}

/// What the agent sent, as the counting model takes it.
fn run_of(agent: &AgentData) -> Run {
    let count = |c: &vmm::devices::CountRecord| Count {
        event: c.event,
        unsupported: c.flags & COUNT_UNSUPPORTED != 0,
        task: c.task,
        value: c.value,
        time_enabled: c.time_enabled,
        time_running: c.time_running,
    };
    Run { counts: agent.counts.iter().map(count).collect(), tasks: agent.tasks.clone() }
}

pub fn run(args: StatArgs, started: Instant) -> Result<i32, Failure> {
    let events = events::parse_list(&args.events.join(",")).map_err(Failure::usage)?;
    if args.repeat == 0 {
        return Err(Failure::usage("-r N must be at least 1"));
    }
    let mut config = vm_config(&args.vm, args.json)?;
    let order = Order::Stat { events, per_task: args.per_task };
    config.cmdline = order.cmdline(config.cpu_vendor.pmu_vendor(), &args.args, &args.vm.cmdline);
    let mut reports: Vec<RunReport> = Vec::new();
    let mut code = 0;
    for run in 0..args.repeat {
        let report = boot_under_agent(&config, if run == 0 { started } else { Instant::now() })?;
        code = report.end.exit_code();
        if let Some(msg) = report.end.message() {
            eprintln!("perfvm: {msg}");
        }
        let sent_counts = report.agent.counts.iter().any(|c| c.task == 0);
        if !sent_counts {
            return Err(Failure::Status {
                code: if code == 0 { 1 } else { code },
                message: "the guest sent no counts (is it built with the guest kit's perf agent?)".into(),
            });
        }
        reports.push(report);
        if code != 0 {
            break; // the runs so far are the result
        }
    }
    let last = reports.last().expect("at least one run");
    let command = std::iter::once(args.vm.guest.clone()).chain(args.args.iter().cloned()).collect::<Vec<_>>().join(" ");
    let seconds: Vec<f64> =
        reports.iter().map(|r| r.agent.workload_ns().unwrap_or(r.stats.wall_ns) as f64 / 1e9).collect();
    let pmu = last.stats.pmu.as_ref();
    let runs: Vec<Run> = reports.iter().map(|r| run_of(&r.agent)).collect();
    let lines = fold(&runs.iter().collect::<Vec<_>>(), pmu.map(|p| p.available));
    let backend = pmu.map(|p| p.backend_detail.clone()).unwrap_or_default();
    let table = Table {
        command: &command,
        lines: &lines,
        tasks: &last.agent.tasks,
        seconds: &seconds,
        model_clock: backend.contains("model clock"),
        exact_hint: pmu.is_some_and(|p| p.backend == BackendKind::Perf).then(exact_events),
    };
    if args.json {
        let counts: Vec<_> = lines.iter().map(|l| line_json(l, &table)).collect();
        let doc = json!({"command": command, "runs": seconds.len(), "counts": counts,
                         "seconds": seconds.iter().sum::<f64>() / seconds.len() as f64, "seconds_per_run": seconds,
                         "backend": backend, "exit_code": code, "stats": last.stats,
                         "console": String::from_utf8_lossy(&last.console.captured())});
        println!("{}", serde_json::to_string_pretty(&doc).expect("JSON"));
    } else {
        eprint!("{}", table.render());
        if args.vm_stats {
            eprint!("{}", crate::stats_text::vm_stats(&last.stats));
        }
    }
    Ok(code)
}
