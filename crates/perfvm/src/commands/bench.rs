//! `perfvm bench`: the bench is its own binary, `perfvm-bench` (crates/bench), so the
//! product does not link it; this runs it from beside the perfvm binary, as git and cargo
//! run their external subcommands.

use crate::Failure;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

/// The bench binary's name.
const BENCH: &str = "perfvm-bench";

/// Where the bench binary is: beside this one.
fn bench_binary() -> Result<PathBuf, Failure> {
    let exe = std::env::current_exe().map_err(|e| Failure::io("cannot find", "the perfvm binary", &e))?;
    Ok(exe.with_file_name(BENCH))
}

/// Replace this process with `perfvm-bench args...`; returns only on failure.
pub fn run(args: Vec<String>) -> Result<i32, Failure> {
    let bench = bench_binary()?;
    if !bench.exists() {
        return Err(Failure::usage(format!(
            "{BENCH} is not built beside perfvm ({}): cargo build --release -p {BENCH}",
            bench.display()
        )));
    }
    let e = std::process::Command::new(&bench).args(args).exec();
    Err(Failure::io("cannot run", &bench.display().to_string(), &e))
}
