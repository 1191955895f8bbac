//! `perfvm report`: the overhead table of a record file, a flamegraph, or two profiles side
//! by side with their total variation distance.

use crate::cli::ReportArgs;
use crate::profile::tvd;
use crate::record::RecordFile;
use crate::Failure;
use std::path::Path;

pub fn run(args: ReportArgs) -> Result<i32, Failure> {
    if let Some(files) = &args.compare {
        let a = RecordFile::load(Path::new(&files[0])).map_err(Failure::usage)?;
        let b = RecordFile::load(Path::new(&files[1])).map_err(Failure::usage)?;
        print!("{}", compare(&a, &files[0], &b, &files[1]));
        return Ok(0);
    }
    let file = RecordFile::load(Path::new(&args.input)).map_err(Failure::usage)?;
    print!("{}", header(&file));
    print!("{}", file.profile.render(&file.event, file.samples));
    if let Some(svg) = &args.flamegraph {
        let folded = file.profile.folded();
        let mut options = inferno::flamegraph::Options::default();
        options.title = format!("perfvm: {} ({} samples of {})", command(&file), file.samples, file.event);
        let out = std::fs::File::create(svg).map_err(|e| Failure::usage(format!("cannot write {svg}: {e}")))?;
        inferno::flamegraph::from_lines(&mut options, folded.lines(), std::io::BufWriter::new(out))
            .map_err(|e| Failure::usage(format!("flamegraph: {e}")))?;
        eprintln!("perfvm: wrote flamegraph {svg}");
    }
    Ok(0)
}

/// The command as the user ran it: guest and workload arguments.
fn command(f: &RecordFile) -> String {
    std::iter::once(f.guest.as_str()).chain(f.args.iter().map(String::as_str)).collect::<Vec<_>>().join(" ")
}

fn header(f: &RecordFile) -> String {
    format!(
        "# perfvm record of '{}': {} mode, period {}, {}\n# backend: {}\n# policy: {}\n#\n",
        command(f),
        f.mode,
        f.period,
        if f.samples_dropped > 0 {
            format!("{} samples dropped", f.samples_dropped)
        } else {
            "no samples dropped".into()
        },
        f.backend,
        f.policy
    )
}

/// Two profiles' per-symbol shares side by side, and their TVD.
pub fn compare(a: &RecordFile, name_a: &str, b: &RecordFile, name_b: &str) -> String {
    let (sa, sb) = (a.profile.shares(), b.profile.shares());
    let mut symbols: Vec<&String> = sa.keys().chain(sb.keys()).collect();
    symbols.sort();
    symbols.dedup();
    symbols.sort_by(|x, y| sa.get(*y).unwrap_or(&0.0).total_cmp(sa.get(*x).unwrap_or(&0.0)));
    let mut out = format!(
        "# A: {name_a} ({} {} samples, {})\n# B: {name_b} ({} {} samples, {})\n#\n",
        a.samples, a.event, a.mode, b.samples, b.event, b.mode
    );
    out.push_str(&format!("# {:<24} {:>9} {:>9} {:>9}\n", "Symbol", "A", "B", "B-A"));
    for s in symbols {
        let (x, y) = (sa.get(s).copied().unwrap_or(0.0), sb.get(s).copied().unwrap_or(0.0));
        out.push_str(&format!("  {:<24} {:>8.2}% {:>8.2}% {:>+8.2}%\n", s, 100.0 * x, 100.0 * y, 100.0 * (y - x)));
    }
    out.push_str(&format!("#\n# total variation distance: {:.4}\n", tvd(&a.profile, &b.profile)));
    out
}
