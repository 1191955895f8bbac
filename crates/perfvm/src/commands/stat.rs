//! `perfvm stat`: boot a guest whose perf agent counts the workload (`-r N`: N times), then
//! print what `perf stat` prints, from the profile library's model of the counts
//! (`profile::counts`: folding, scaling of multiplexed events, statuses, the table).

use crate::cli::StatArgs;
use crate::config::vm_config;
use crate::session::counts::{self, counts_of};
use crate::session::{boot_under_agent, note_stepped_size};
use crate::Failure;
use profile::agent::Order;
use profile::counts::{fold, line_json, Run, Table};
use profile::events;
use serde_json::json;
use std::time::Instant;
use vmm::config::BackendKind;
use vmm::RunReport;

/// `perfvm stat`: the (last) run's exit code, or why it could not count.
pub fn run(args: StatArgs, started: Instant) -> Result<i32, Failure> {
    let events = events::parse_list(&args.events.join(",")).map_err(Failure::usage)?;
    if args.repeat == 0 {
        return Err(Failure::usage("-r N must be at least 1"));
    }
    if args.all_cpus && args.per_task {
        return Err(Failure::usage("--per-task needs the guest's agent: drop -a"));
    }
    let mut config = vm_config(&args.vm, args.json)?;
    if args.all_cpus {
        // No agent: the workload's words as they are; the exact backend steps the whole run.
        config.cmdline = [args.args.join(" "), args.vm.cmdline.clone()]
            .iter()
            .filter(|s| !s.is_empty())
            .cloned()
            .collect::<Vec<_>>()
            .join(" ");
        if let Some(p) = config.pmu.as_mut() {
            p.count_retired = p.backend == BackendKind::Exact;
        }
    } else {
        let order = Order::Stat { events: events.clone(), per_task: args.per_task };
        config.cmdline = order.cmdline(config.cpu_vendor.pmu_vendor(), &args.args, &args.vm.cmdline);
    }
    let mut reports: Vec<RunReport> = Vec::new();
    let mut runs: Vec<Run> = Vec::new();
    let mut code = 0;
    for run in 0..args.repeat {
        let report = boot_under_agent(&config, if run == 0 { started } else { Instant::now() })?;
        code = report.end.exit_code();
        if let Some(msg) = report.end.message() {
            eprintln!("perfvm: {msg}");
        }
        if run == 0 {
            note_stepped_size(&config, &report, &args.args);
        }
        runs.push(counts_of(&report, args.all_cpus, &events, code)?);
        reports.push(report);
        if code != 0 {
            break; // the runs so far are the result
        }
    }
    let last = reports.last().expect("at least one run");
    let command = std::iter::once(args.vm.guest.clone()).chain(args.args.iter().cloned()).collect::<Vec<_>>().join(" ");
    let seconds: Vec<f64> = reports
        .iter()
        .map(|r| if args.all_cpus { None } else { r.agent.workload_ns() }.unwrap_or(r.stats.wall_ns) as f64 / 1e9)
        .collect();
    let pmu = last.stats.pmu.as_ref();
    let backend_kind = pmu.map(|p| p.backend);
    let offered = match args.all_cpus {
        true => Some(counts::whole_guest_events(backend_kind)),
        false => pmu.map(|p| p.available),
    };
    let mut lines = fold(&runs.iter().collect::<Vec<_>>(), offered);
    let clock = match args.all_cpus {
        true => backend_kind != Some(BackendKind::Exact),
        false => pmu.is_some_and(|p| p.backend_detail.contains("task-clock")),
    };
    let level_notes = counts::apply_levels(&mut lines, &events, clock);
    let backend = match (args.all_cpus, backend_kind) {
        (true, Some(BackendKind::Exact)) => {
            "every instruction retired, single-stepped; cycles = model clock, 1 per retired instruction".to_owned()
        }
        (true, _) => "cycles = the vCPU threads' CPU time x TSC".to_owned(),
        (false, _) => pmu.map(|p| p.backend_detail.clone()).unwrap_or_default(),
    };
    let table = Table {
        command: &command,
        lines: &lines,
        tasks: &last.agent.tasks,
        seconds: &seconds,
        model_clock: backend.contains("model clock"),
        exact_hint: match args.all_cpus {
            true => {
                (backend_kind != Some(BackendKind::Exact)).then(|| counts::whole_guest_events(Some(BackendKind::Exact)))
            }
            false => pmu.is_some_and(|p| p.backend == BackendKind::Perf).then(counts::exact_events),
        },
    };
    if args.json {
        let counts: Vec<_> = lines.iter().map(|l| line_json(l, &table)).collect();
        let doc = json!({"command": command, "runs": seconds.len(), "counts": counts,
                         "seconds": seconds.iter().sum::<f64>() / seconds.len() as f64, "seconds_per_run": seconds,
                         "backend": backend, "exit_code": code, "stats": last.stats,
                         "console": String::from_utf8_lossy(&last.console.captured())});
        crate::output::emit(&(serde_json::to_string_pretty(&doc).expect("JSON") + "\n"))?;
    } else {
        eprint!("{}", table.render());
        for note in &level_notes {
            eprintln!("{note}\n");
        }
        if args.all_cpus {
            eprintln!(" counted by the VMM (-a), no agent: {backend}\n");
        }
        if args.vm_stats {
            eprint!("{}", crate::stats_text::vm_stats(&last.stats));
        }
    }
    Ok(code)
}
