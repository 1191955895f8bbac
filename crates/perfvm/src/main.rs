//! The `perfvm` binary: confinement first, then the command line parsed and its command run.

use clap::Parser;
use perfvm::{cli, commands};
use std::time::Instant;

fn main() {
    let started = Instant::now();
    // Every thread inherits these (docs/SECURITY.md); the filters come per thread, later.
    vmm::confine::limit_core_dumps();
    if let Err(e) = vmm::confine::set_no_new_privs() {
        eprintln!("perfvm: {e}");
        std::process::exit(1);
    }
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help / --version.
            let _ = e.print();
            std::process::exit(0);
        }
        Err(e) => {
            let args: Vec<String> = std::env::args().collect();
            eprintln!("perfvm: {}", cli::error_line(&e.to_string(), &cli::help_command(&args)));
            std::process::exit(2);
        }
    };
    // report and script read files that may be hostile: confined as the VMM thread is.
    if matches!(cli.command, cli::Command::Report(_) | cli::Command::Script(_)) {
        if let Err(e) = vmm::confine::confine_thread(vmm::confine::ThreadKind::Vmm) {
            eprintln!("perfvm: {e}");
            std::process::exit(1);
        }
    }
    let result = match cli.command {
        cli::Command::Run(args) => commands::run::run(args, started),
        cli::Command::Stat(args) => commands::stat::run(args, started),
        cli::Command::Record(args) => commands::record::run(args, started),
        cli::Command::Report(args) => commands::report::run(args),
        cli::Command::Script(args) => commands::script::run(args),
        cli::Command::Bench { args } => commands::bench::run(args),
        cli::Command::List => commands::list::run(),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(f) => {
            eprintln!("perfvm: {f}");
            std::process::exit(f.code());
        }
    }
}
