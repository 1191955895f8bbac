//! The one resolver: a sampled address to its function and source line, from the guest ELF
//! a record names. Where an address is looked up depends on where it came from ([`Site`]):
//! the return-address rule lives here and nowhere else.

use crate::srcline::{Location, SourceLines};
use crate::symbols::Symbols;
use std::path::Path;

/// Where an address of a sample comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Site {
    /// The interrupted instruction: looked up where it is.
    Sampled,
    /// A return address of the call chain: it points just past its call, which may be the
    /// caller's last instruction (a call that never returns), so the caller and the call's
    /// line are looked up at the byte before it.
    Return,
}

impl Site {
    /// The address to look `addr` up at.
    pub fn lookup_address(self, addr: u64) -> u64 {
        match self {
            Site::Sampled => addr,
            Site::Return => addr.saturating_sub(1),
        }
    }
}

/// The largest guest image read for its symbols (a record file names it: it may name any
/// file; a distribution vmlinux with its DWARF is some hundreds of MB).
pub const MAX_GUEST_IMAGE_BYTES: u64 = 1 << 30;

/// User space of an x86-64 Linux guest: the lower canonical half.
const LINUX_USER_END: u64 = 0x0000_8000_0000_0000;

/// Symbols and source lines of one guest ELF.
#[derive(Debug, Default)]
pub struct Resolver {
    symbols: Symbols,
    lines: Option<SourceLines>,
}

impl Resolver {
    /// Read the guest image at `path` (and its DWARF when `lines`): an ELF, or a Linux
    /// kernel (bzImage or vmlinux); the warnings, one line each, say what could not be read
    /// and how the output shows it.
    pub fn load(path: &Path, lines: bool) -> (Resolver, Vec<String>) {
        match crate::bounded::read(path, MAX_GUEST_IMAGE_BYTES, "guest images read for symbols") {
            Ok(bytes) => Resolver::of_image(&bytes, &path.display().to_string(), lines),
            Err(e) => {
                (Resolver::default(), vec![format!("cannot read {}: {e}: addresses show as [unknown]", path.display())])
            }
        }
    }

    /// The resolver of a guest image already read (`name` names it in warnings): an ELF's
    /// symbols (and DWARF lines), or, for a Linux kernel whose ELF symbols were stripped
    /// (distribution kernels), the symbols its kallsyms tables name, with every user-space
    /// address as one `[user]` function: the kernel/user split of a Linux guest's profile.
    pub fn of_image(bytes: &[u8], name: &str, lines: bool) -> (Resolver, Vec<String>) {
        if !linux_image::is_linux(bytes) {
            return Resolver::from_elf(bytes, name, lines);
        }
        let elf = match linux_image::kernel_elf(bytes) {
            Ok(elf) => elf,
            Err(e) => return (Resolver::default(), vec![format!("{name}: {e}: addresses show as [unknown]")]),
        };
        let Some(kernel) = linux_image::kallsyms::of_elf(&elf) else {
            return (
                Resolver::default(),
                vec![format!("{name}: no symbols and no kallsyms tables: addresses show as [unknown]")],
            );
        };
        let mut funcs: Vec<(u64, u64, String)> =
            kernel.into_iter().filter(|s| s.is_text()).map(|s| (s.addr, 0, s.name)).collect();
        funcs.push((0, LINUX_USER_END, "[user]".to_owned()));
        (Resolver::from_parts(Symbols::from_list(funcs), None), Vec::new())
    }

    /// The resolver of an ELF image already read (`name` names it in warnings).
    pub fn from_elf(bytes: &[u8], name: &str, lines: bool) -> (Resolver, Vec<String>) {
        let mut warnings = Vec::new();
        let symbols = Symbols::from_elf(bytes);
        if symbols.is_empty() {
            warnings.push(format!("{name} has no function symbols: addresses show as [unknown]"));
        }
        let lines = if !lines || symbols.is_empty() {
            None
        } else {
            SourceLines::from_elf(bytes).map_err(|why| warnings.push(format!("{name}: {why}: no source lines"))).ok()
        };
        (Resolver { symbols, lines }, warnings)
    }

    /// A resolver over symbols and source lines already read.
    pub fn from_parts(symbols: Symbols, lines: Option<SourceLines>) -> Resolver {
        Resolver { symbols, lines }
    }

    /// The function holding the address `addr` from `site`: its name and start.
    pub fn function(&self, addr: u64, site: Site) -> Option<(&str, u64)> {
        self.symbols.lookup(site.lookup_address(addr))
    }

    /// The source line of `addr` from `site` (a return address: its call's line).
    pub fn location(&self, addr: u64, site: Site) -> Option<Location> {
        self.lines.as_ref()?.lookup(site.lookup_address(addr))
    }

    /// Where the function starting at `start` is defined.
    pub fn definition(&self, start: u64) -> Option<Location> {
        self.lines.as_ref()?.lookup(start)
    }

    /// Source lines were read.
    pub fn has_lines(&self) -> bool {
        self.lines.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testelf;

    fn resolver() -> Resolver {
        let elf = testelf::with_functions(&[("foo", 0x100, 0x40), ("bar", 0x140, 0x40)]);
        let (r, warnings) = Resolver::from_elf(&elf, "t.elf", false);
        assert!(warnings.is_empty(), "{warnings:?}");
        r
    }

    #[test]
    fn a_return_address_belongs_to_the_byte_before_it() {
        let r = resolver();
        // foo's last instruction is a call: its return address is bar's first byte.
        assert_eq!(r.function(0x140, Site::Sampled), Some(("bar", 0x140)));
        assert_eq!(r.function(0x140, Site::Return), Some(("foo", 0x100)));
        assert_eq!(r.function(0x999, Site::Sampled), None);
        assert_eq!(Site::Return.lookup_address(0), 0, "no wrap below 0");
    }

    #[test]
    fn a_missing_elf_is_one_warning_and_unknown_symbols() {
        let (r, warnings) = Resolver::load(Path::new("/nonexistent/ftest.elf"), true);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with("cannot read /nonexistent/ftest.elf: "), "{warnings:?}");
        assert!(!warnings[0].contains('\n'));
        assert_eq!(r.function(0x100, Site::Sampled), None);
        assert!(!r.has_lines());
    }

    #[test]
    fn an_elf_without_dwarf_warns_when_lines_are_asked_for() {
        let elf = testelf::with_functions(&[("foo", 0x100, 0x40)]);
        let (r, warnings) = Resolver::from_elf(&elf, "t.elf", true);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("no DWARF line information") && warnings[0].ends_with(": no source lines"),
            "{warnings:?}"
        );
        assert_eq!(r.location(0x100, Site::Sampled), None);
        assert_eq!(r.function(0x100, Site::Sampled), Some(("foo", 0x100)), "symbols still read");
        let (_, warnings) = Resolver::from_elf(b"junk", "junk.elf", true);
        assert_eq!(warnings, ["junk.elf has no function symbols: addresses show as [unknown]"]);
    }
}
