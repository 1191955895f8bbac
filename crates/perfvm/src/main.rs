//! The `perfvm` command line.

mod agent_lines;
mod bench;
mod cli;
mod failure;
mod guest_symbols;
mod guests;
mod list;
mod output;
mod record;
mod report;
mod run;
mod script;
mod stat;
mod stat_vmm;
mod stats_text;

pub use failure::Failure;

use clap::Parser;
use std::time::Instant;

fn main() {
    let started = Instant::now();
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
    let result = match cli.command {
        cli::Command::Run(args) => run::run(args, started),
        cli::Command::Stat(args) => stat::run(args, started),
        cli::Command::Record(args) => record::run(args, started),
        cli::Command::Report(args) => report::run(args),
        cli::Command::Script(args) => script::run(args),
        cli::Command::Bench(args) => bench::run(args),
        cli::Command::List => list::run(),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(f) => {
            eprintln!("perfvm: {f}");
            std::process::exit(f.code());
        }
    }
}
