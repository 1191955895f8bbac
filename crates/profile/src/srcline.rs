//! Source lines of guest addresses, from the DWARF line tables of the guest ELF (addr2line).

use goblin::elf::{section_header, Elf};
use std::path::Path;
use std::rc::Rc;

type Reader = gimli::EndianRcSlice<gimli::RunTimeEndian>;

/// What perf prints for an address without a source line.
pub const UNKNOWN: &str = "??:0";

/// The DWARF of one ELF, ready to map addresses to `file:line`.
pub struct SourceLines {
    context: addr2line::Context<Reader>,
}

impl std::fmt::Debug for SourceLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SourceLines")
    }
}

/// A source position: the file as DWARF names it (usually absolute) and its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The source file.
    pub file: String,
    /// Its line.
    pub line: u32,
}

impl Location {
    /// `file:line` with the file's base name, as `perf report --sort srcline` shows it.
    pub fn short(&self) -> String {
        let base = Path::new(&self.file).file_name().and_then(|n| n.to_str()).unwrap_or(&self.file);
        format!("{base}:{}", self.line)
    }
}

impl SourceLines {
    /// Read `path` and its DWARF; the error is one line saying why there are no source lines.
    pub fn load(path: &Path) -> Result<SourceLines, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        SourceLines::from_elf(&bytes).map_err(|why| format!("{}: {why}", path.display()))
    }

    /// The DWARF of an ELF image: an error if it is not an ELF, has no line tables, or
    /// keeps them compressed.
    pub fn from_elf(bytes: &[u8]) -> Result<SourceLines, String> {
        let elf = Elf::parse(bytes).map_err(|e| format!("not an ELF file ({e})"))?;
        let section = |name: &str| elf.section_headers.iter().find(|h| elf.shdr_strtab.get_at(h.sh_name) == Some(name));
        match section(".debug_line") {
            None => return Err("no DWARF line information (build the guest with -g)".into()),
            Some(h) if h.sh_flags & u64::from(section_header::SHF_COMPRESSED) != 0 => {
                return Err("compressed DWARF sections are not supported".into())
            }
            Some(_) => {}
        }
        let endian = if elf.little_endian { gimli::RunTimeEndian::Little } else { gimli::RunTimeEndian::Big };
        let load = |id: gimli::SectionId| -> Result<Reader, String> {
            let data: &[u8] = match section(id.name()) {
                Some(h) if h.sh_type != section_header::SHT_NOBITS => {
                    let start = usize::try_from(h.sh_offset).unwrap_or(usize::MAX);
                    let end = start.saturating_add(usize::try_from(h.sh_size).unwrap_or(usize::MAX));
                    bytes.get(start..end).ok_or_else(|| format!("section {} lies outside the file", id.name()))?
                }
                _ => &[],
            };
            Ok(gimli::EndianRcSlice::new(Rc::from(data), endian))
        };
        let dwarf = gimli::Dwarf::load(load)?;
        let context = addr2line::Context::from_dwarf(dwarf).map_err(|e| format!("unreadable DWARF: {e}"))?;
        Ok(SourceLines { context })
    }

    /// The source position of `addr`, where the line tables cover it.
    pub fn lookup(&self, addr: u64) -> Option<Location> {
        let loc = self.context.find_location(addr).ok()??;
        Some(Location { file: loc.file?.to_owned(), line: loc.line? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::Symbols;

    #[test]
    fn bad_images_say_why_without_panicking() {
        assert!(SourceLines::from_elf(b"not an elf").unwrap_err().contains("not an ELF"));
        let e = SourceLines::load(Path::new("/nonexistent/guest.elf")).unwrap_err();
        assert!(e.starts_with("cannot read /nonexistent/guest.elf"), "{e}");
    }

    #[test]
    fn short_is_base_name_and_line() {
        let loc = Location { file: "/work/guest/ftest.c".into(), line: 107 };
        assert_eq!(loc.short(), "ftest.c:107");
        assert_eq!(Location { file: "x.c".into(), line: 3 }.short(), "x.c:3");
    }

    #[test]
    fn a_real_guest_maps_its_functions_to_ftest_c() {
        let Some(bytes) = crate::testdata::ftest_elf("a_real_guest_maps_its_functions_to_ftest_c") else { return };
        let lines = SourceLines::from_elf(&bytes).expect("the guests are built with -g");
        let symbols = Symbols::from_elf(&bytes);
        for f in ["main", "foo", "bar", "qux"] {
            let start = symbols.address(f).unwrap_or_else(|| panic!("{f} not found"));
            let loc = lines.lookup(start).unwrap_or_else(|| panic!("{f} has no line"));
            assert!(loc.file.ends_with("ftest.c") && loc.line > 0, "{f}: {loc:?}");
        }
        assert_eq!(lines.lookup(0), None, "address 0 is not code");
    }
}
