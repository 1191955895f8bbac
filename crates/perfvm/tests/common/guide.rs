//! docs/getting-started.md's commands, as its tests run them: every line of its ```sh
//! blocks, under the section (`## ` heading) it is in.

/// The guide's section that boots a stock Linux guest (run by the standard-KVM tier).
pub const LINUX_SECTION: &str = "A stock Linux guest";

/// One command of the guide and its section.
#[derive(Debug, Clone)]
pub struct GuideCommand {
    /// The `## ` heading it is under.
    pub section: String,
    /// The command line, its trailing comment dropped.
    pub line: String,
}

/// Every command of the guide, in order. The build lines (`cargo ...`, `export PATH=...`)
/// are the harness's to do: it runs the binaries cargo built, on its own PATH.
pub fn commands() -> Vec<GuideCommand> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/getting-started.md");
    let text = std::fs::read_to_string(path).expect("docs/getting-started.md");
    let (mut section, mut in_block, mut out) = (String::new(), false, Vec::new());
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            section = heading.trim().to_owned();
        } else if line.starts_with("```") {
            in_block = !in_block && line.trim() == "```sh";
        } else if in_block {
            let line = line.split("  # ").next().unwrap_or_default().trim();
            if !line.is_empty() && !line.starts_with("cargo ") && !line.starts_with("export PATH=") {
                out.push(GuideCommand { section: section.clone(), line: line.to_owned() });
            }
        }
    }
    out
}
