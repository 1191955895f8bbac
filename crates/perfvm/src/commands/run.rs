//! `perfvm run`: boot a guest, mirror its console, exit with its status.

use crate::cli::RunArgs;
use crate::config::vm_config;
use crate::session::boot;
use crate::Failure;
use serde_json::json;
use std::time::Instant;

/// `perfvm run`: the guest's exit status.
pub fn run(args: RunArgs, started: Instant) -> Result<i32, Failure> {
    let mut config = vm_config(&args.vm, args.json)?;
    config.count_syscalls = args.stats || args.json;
    let report = boot(&config, started)?;
    let code = report.end.exit_code();
    if args.json {
        let doc = json!({
            "guest": args.vm.guest,
            "end": report.end,
            "exit_code": code,
            "message": report.end.message(),
            "stats": report.stats,
            "console": String::from_utf8_lossy(&report.console.captured()),
        });
        crate::output::emit(&(serde_json::to_string_pretty(&doc).expect("JSON") + "\n"))?;
    } else {
        if let Some(msg) = report.end.message() {
            eprintln!("perfvm: {msg}");
        }
        if args.stats {
            eprint!("{}", crate::stats_text::vm_stats(&report.stats));
        }
    }
    Ok(code)
}
