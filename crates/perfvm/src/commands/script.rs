//! `perfvm script`: every sample of a record file as `perf script` prints them, or the
//! profile exported for a viewer (speedscope) or a fleet profiler (pprof). The text and the
//! exports are the profile library's; this parses the flags and writes.

use crate::cli::{ScriptArgs, ScriptFormat};
use crate::output::{emit, first_event, load, write_file};
use crate::Failure;
use profile::{pprof, script, speedscope, Mode, Profile};

/// `perfvm script`: 0 once the samples are printed or exported.
pub fn run(args: ScriptArgs) -> Result<i32, Failure> {
    if args.format == ScriptFormat::Pprof && args.output.is_none() {
        return Err(Failure::usage("--format pprof writes a binary file: give -o FILE"));
    }
    // Fail on the output before any work or warning.
    if let Some(path) = &args.output {
        crate::output::check_writable(path)?;
    }
    // The exports give each function the file and line where it starts, where the DWARF has them.
    let lines = args.srcline || args.format != ScriptFormat::Perf;
    let (record, resolver) = load(&args.input, args.event.as_deref(), lines)?;
    let bytes = match args.format {
        ScriptFormat::Perf if record.mode == Mode::Reference => {
            eprintln!(
                "perfvm: {} is a reference record (every retired instruction attributed, no individual samples): see perfvm report",
                args.input
            );
            return Ok(0);
        }
        ScriptFormat::Perf => {
            let options = script::Options { srcline: args.srcline, callchain: !args.hide_call_graph };
            script::render(&record, &Profile::build(&record, &resolver), options).into_bytes()
        }
        ScriptFormat::Speedscope => {
            let one = first_event(&record, &args.input, "the speedscope export");
            let doc = speedscope::export(&one, &Profile::build(&one, &resolver), &args.input);
            (serde_json::to_string(&doc).map_err(|e| Failure::failed(format!("speedscope export: {e}")))? + "\n")
                .into_bytes()
        }
        ScriptFormat::Pprof => {
            let one = first_event(&record, &args.input, "the pprof export");
            pprof::export(&one, &Profile::build(&one, &resolver))
        }
    };
    match &args.output {
        Some(path) => {
            write_file(path, &bytes)?;
            match args.format {
                ScriptFormat::Speedscope => eprintln!("perfvm: wrote {path} (open it at https://www.speedscope.app)"),
                ScriptFormat::Pprof => eprintln!("perfvm: wrote {path} (go tool pprof -top {path})"),
                ScriptFormat::Perf => {}
            }
        }
        None => emit(&String::from_utf8_lossy(&bytes))?,
    }
    Ok(0)
}
