//! Names for a record's addresses and tasks: function symbols and source lines from the guest
//! ELF the record names, commands from the record's own profile.

use crate::record::RecordFile;
use crate::srcline::{self, Location, SourceLines};
use crate::symbols::Symbols;
use std::collections::HashMap;
use std::path::Path;

/// Symbolizes a record's samples.
#[derive(Debug, Default)]
pub struct Resolver {
    symbols: Symbols,
    lines: Option<SourceLines>,
    object: String,
    tasks: HashMap<u32, String>,
}

impl Resolver {
    /// Read the record's ELF (and its DWARF when `srclines`); the warnings, one line each,
    /// say what could not be read and how the output shows it.
    pub fn new(file: &RecordFile, srclines: bool) -> (Resolver, Vec<String>) {
        let mut warnings = Vec::new();
        let path = Path::new(&file.elf);
        let symbols = match std::fs::read(path) {
            Ok(bytes) => {
                let symbols = Symbols::from_elf(&bytes);
                if symbols.is_empty() {
                    warnings.push(format!("{} has no function symbols: addresses show as [unknown]", file.elf));
                }
                symbols
            }
            Err(e) => {
                warnings.push(format!("cannot read {}: {e}: addresses show as [unknown]", file.elf));
                Symbols::default()
            }
        };
        let lines = if srclines && !symbols.is_empty() {
            SourceLines::load(path).map_err(|why| warnings.push(format!("{why}: no source lines"))).ok()
        } else {
            if srclines && warnings.is_empty() {
                warnings.push(format!("no source lines without the symbols of {}", file.elf));
            }
            None
        };
        (Resolver::from_parts(file, symbols, lines), warnings)
    }

    /// A resolver over symbols and source lines already read.
    pub fn from_parts(file: &RecordFile, symbols: Symbols, lines: Option<SourceLines>) -> Resolver {
        let object = file.profile.rows.first().map(|r| r.object.clone()).unwrap_or_else(|| {
            Path::new(&file.guest).file_stem().and_then(|s| s.to_str()).unwrap_or("guest").to_owned()
        });
        let tasks = task_commands(file, &object);
        Resolver { symbols, lines, object, tasks }
    }

    /// The shared object: the guest's name, as record names it.
    pub fn object(&self) -> &str {
        &self.object
    }

    /// The function containing `ip`, or `[unknown]`.
    pub fn symbol(&self, ip: u64) -> String {
        self.symbols.name(ip)
    }

    /// `symbol+0xoffset`, as perf script prints an address, or `[unknown]`.
    pub fn symbol_offset(&self, ip: u64) -> String {
        match self.symbols.lookup_offset(ip) {
            Some((name, off)) => format!("{name}+{off:#x}"),
            None => "[unknown]".into(),
        }
    }

    /// Where the function containing `ip` starts.
    pub fn function_start(&self, ip: u64) -> Option<u64> {
        self.symbols.lookup_offset(ip).map(|(_, off)| ip - off)
    }

    /// The source position of `addr`.
    pub fn location(&self, addr: u64) -> Option<Location> {
        self.lines.as_ref()?.lookup(addr)
    }

    /// `file:line` of `addr`, or `??:0`.
    pub fn srcline(&self, addr: u64) -> String {
        self.location(addr).map_or_else(|| srcline::UNKNOWN.to_owned(), |l| l.short())
    }

    /// The command of a guest task: the guest's name outside tasks.
    pub fn command(&self, task: u32) -> String {
        match self.tasks.get(&task) {
            Some(name) => name.clone(),
            None if task == 0 => self.object.clone(),
            None => format!("task-{task}"),
        }
    }
}

/// Which command each task of the record ran as: its name from the agent, the guest's name
/// outside tasks.
fn task_commands(file: &RecordFile, object: &str) -> HashMap<u32, String> {
    let mut names: HashMap<u32, String> = file.tasks.iter().map(|(t, n)| (*t, n.clone())).collect();
    names.insert(0, object.to_owned());
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata;

    fn symbols() -> Symbols {
        Symbols::from_list(vec![(0x100, 0x40, "foo".into()), (0x200, 0x40, "bar".into())])
    }

    #[test]
    fn symbol_offsets_as_perf_script_prints_them() {
        let file = testdata::record(&[], &[]);
        let r = Resolver::from_parts(&file, symbols(), None);
        assert_eq!(r.symbol_offset(0x116), "foo+0x16");
        assert_eq!(r.symbol_offset(0x200), "bar+0x0");
        assert_eq!(r.symbol_offset(0x999), "[unknown]");
        assert_eq!(r.function_start(0x23f), Some(0x200));
        assert_eq!(r.srcline(0x116), "??:0", "no DWARF read");
        assert_eq!(r.object(), "ftest");
    }

    #[test]
    fn tasks_are_named_as_the_agent_named_them() {
        let mut file = testdata::record(&[], &[("ftest", "foo", 1, &[])]);
        file.tasks = [(7, "worker".to_owned())].into();
        let r = Resolver::from_parts(&file, symbols(), None);
        assert_eq!(r.command(0), "ftest");
        assert_eq!(r.command(7), "worker");
        assert_eq!(r.command(11), "task-11", "a task the agent never named");
    }

    #[test]
    fn a_missing_elf_is_one_warning_and_unknown_symbols() {
        let mut file = testdata::record(&[], &[]);
        file.elf = "/nonexistent/ftest.elf".into();
        let (r, warnings) = Resolver::new(&file, true);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with("cannot read /nonexistent/ftest.elf: "), "{warnings:?}");
        assert!(!warnings[0].contains('\n'));
        assert_eq!(r.symbol_offset(0x100), "[unknown]");
        assert_eq!(r.srcline(0x100), "??:0");
    }

    #[test]
    fn an_elf_without_dwarf_warns_when_lines_are_asked_for() {
        // An ELF with symbols but no .debug_line: strip one of the guests if objcopy exists.
        let guest = crate::guests::guest_dir().join("ftest.elf");
        let stripped = std::env::temp_dir().join(format!("perfvm-nodwarf-{}.elf", std::process::id()));
        let ok = std::process::Command::new("objcopy")
            .arg("--strip-debug")
            .arg(&guest)
            .arg(&stripped)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("SKIP an_elf_without_dwarf_warns_when_lines_are_asked_for: objcopy or {}", guest.display());
            return;
        }
        let mut file = testdata::record(&[], &[]);
        file.elf = stripped.display().to_string();
        let (r, warnings) = Resolver::new(&file, true);
        let _ = std::fs::remove_file(&stripped);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("no DWARF line information") && warnings[0].ends_with(": no source lines"),
            "{warnings:?}"
        );
        assert_eq!(r.srcline(0x100000), "??:0");
        assert_eq!(r.symbol_offset(0x100000), "_start+0x0", "symbols still read");
        let (_, warnings) = Resolver::new(&file, false);
        assert!(warnings.len() == 1 && warnings[0].starts_with("cannot read"), "the file is gone: {warnings:?}");
    }
}
