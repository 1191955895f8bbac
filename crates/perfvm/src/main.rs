//! The `perfvm` command line.

mod agent_lines;
mod bench;
mod callgraph;
mod cli;
mod events;
mod format;
mod guests;
mod list;
mod profile;
mod record;
mod report;
mod resolve;
mod run;
mod script;
mod speedscope;
mod srcline;
mod stacks;
mod stat;
mod stats_text;
mod symbols;
#[cfg(test)]
mod testdata;

use clap::Parser;
use std::time::Instant;

/// A failure reported as one line on stderr with an exit code.
#[derive(Debug)]
pub struct Failure {
    /// The process exit code (2 for bad input).
    pub code: i32,
    /// The one line printed on stderr.
    pub message: String,
}

impl Failure {
    /// Bad input from the user (flags, guest file): exit code 2.
    pub fn usage(message: impl Into<String>) -> Self {
        Failure { code: 2, message: message.into() }
    }

    /// SIGINT or SIGTERM stopped the work: exit 130 or 143, as a shell reports it.
    pub fn interrupted(what: &str, signal: i32) -> Self {
        let name = if signal == libc::SIGINT { "SIGINT" } else { "SIGTERM" };
        Failure { code: 128 + signal, message: format!("{what} interrupted by {name}") }
    }
}

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
            eprintln!("perfvm: {}", f.message);
            std::process::exit(f.code);
        }
    }
}
