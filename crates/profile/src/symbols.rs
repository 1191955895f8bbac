//! Function symbols of the guest ELF: which function holds an address.

use goblin::elf::{sym, Elf};

/// Function symbols sorted by address.
#[derive(Debug, Default)]
pub struct Symbols {
    funcs: Vec<(u64, u64, String)>, // (start, size, name)
}

impl Symbols {
    /// Read the function symbols of an ELF (empty if it has none or cannot be parsed).
    pub fn from_elf(bytes: &[u8]) -> Symbols {
        let Ok(elf) = Elf::parse(bytes) else { return Symbols::default() };
        let mut funcs: Vec<(u64, u64, String)> = elf
            .syms
            .iter()
            .filter(|s| s.st_type() == sym::STT_FUNC && s.st_value != 0)
            .filter_map(|s| Some((s.st_value, s.st_size, elf.strtab.get_at(s.st_name)?.to_owned())))
            .collect();
        funcs.sort();
        funcs.dedup_by_key(|f| f.0);
        Symbols { funcs }
    }

    /// The function containing `addr` (a zero-size symbol covers up to the next one): its
    /// name and start.
    pub fn lookup(&self, addr: u64) -> Option<(&str, u64)> {
        let i = self.funcs.partition_point(|f| f.0 <= addr).checked_sub(1)?;
        let (start, size, name) = &self.funcs[i];
        let end = if *size > 0 { start.saturating_add(*size) } else { self.funcs.get(i + 1).map_or(u64::MAX, |f| f.0) };
        (addr < end).then_some((name.as_str(), *start))
    }

    /// Symbols from (start, size, name) triples.
    pub fn from_list(mut funcs: Vec<(u64, u64, String)>) -> Symbols {
        funcs.sort();
        funcs.dedup_by_key(|f| f.0);
        Symbols { funcs }
    }

    /// The start of the function `name`.
    pub fn address(&self, name: &str) -> Option<u64> {
        self.funcs.iter().find(|f| f.2 == name).map(|f| f.0)
    }

    /// No function symbols were read.
    pub fn is_empty(&self) -> bool {
        self.funcs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_by_range() {
        let s = Symbols { funcs: vec![(0x100, 0x10, "a".into()), (0x200, 0, "b".into()), (0x300, 0x8, "c".into())] };
        assert_eq!(s.lookup(0x100), Some(("a", 0x100)));
        assert_eq!(s.lookup(0x10f), Some(("a", 0x100)));
        assert_eq!(s.lookup(0x110), None);
        assert_eq!(s.lookup(0x2ff), Some(("b", 0x200)));
        assert_eq!(s.lookup(0x307), Some(("c", 0x300)));
        assert_eq!(s.lookup(0x308), None);
        assert_eq!(s.lookup(0x50), None);
    }

    #[test]
    fn reads_a_real_guest() {
        let Some(bytes) = crate::testdata::ftest_elf("reads_a_real_guest") else { return };
        let s = Symbols::from_elf(&bytes);
        assert!(!s.is_empty());
        for f in ["main", "foo", "bar", "qux", "random", "random_r"] {
            assert!(s.funcs.iter().any(|(_, _, n)| n == f), "{f} missing");
        }
    }
}
