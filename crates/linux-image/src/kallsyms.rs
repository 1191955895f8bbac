//! A Linux kernel's symbols from its kallsyms tables, for kernels whose ELF symbol table was
//! stripped (distributions ship them so: Debian's vmlinuz has section headers but no
//! `.symtab`, and its package's System.map is a placeholder). Every kernel built with
//! CONFIG_KALLSYMS carries the tables `/proc/kallsyms` is made from, in `.rodata`, as
//! `scripts/kallsyms.c` lays them out:
//!
//! ```text
//! kallsyms_offsets        s32 per symbol (base-relative addresses)
//! kallsyms_relative_base  u64 (the lowest kernel text address, _text)
//! kallsyms_num_syms       u32 (8-byte slot)
//! kallsyms_names          per symbol: a length (1 byte, or 2 as ULEB128 from 6.1), then
//!                         that many token indexes; the first token byte is the type
//! kallsyms_markers        u32 per 256 symbols: offset of each block in kallsyms_names
//! [kallsyms_seqs_of_names 3 bytes per symbol, 6.2+ and some 6.1 stable kernels]
//! kallsyms_token_table    256 NUL-terminated strings
//! kallsyms_token_index    u16 per token: its offset in the token table
//! ```
//!
//! (6.4 moved the addresses last; not handled here.) None of these symbols is itself in
//! the image, so they are found as marin-m/vmlinux-to-elf finds them: the token table by
//! the run of one-character tokens for the digits (a character used as itself keeps its
//! own code as token index, so "0".."9" are tokens 0x30..0x39, one after the other),
//! confirmed by the token index that follows it; `kallsyms_relative_base` by its value,
//! `_text`, followed by a symbol count whose names decode to within the tables; the
//! offsets before it. Every step is checked, and anything else is `None`.

use std::ops::Range;

/// A kernel symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSymbol {
    /// Its address (kernel virtual).
    pub addr: u64,
    /// `nm`'s type letter: `T`/`t` text, `D`/`d` data, `A` absolute (per-CPU), ...
    pub kind: char,
    /// Its name.
    pub name: String,
}

impl KernelSymbol {
    /// Whether it names code.
    pub fn is_text(&self) -> bool {
        matches!(self.kind, 'T' | 't' | 'W' | 'w')
    }
}

/// The symbols of the kernel ELF `data`, sorted by address: its `.symtab` where it has one,
/// else its kallsyms tables (found in `.rodata`, addresses from `.text`'s, which is `_text`).
pub fn of_elf(data: &[u8]) -> Option<Vec<KernelSymbol>> {
    let elf = goblin::elf::Elf::parse(data).ok()?;
    let section = |name: &str| elf.section_headers.iter().find(|s| elf.shdr_strtab.get_at(s.sh_name) == Some(name));
    if !elf.syms.is_empty() {
        let mut symbols: Vec<KernelSymbol> = elf
            .syms
            .iter()
            .filter(|s| s.st_value != 0 && (s.is_function() || s.st_type() == goblin::elf::sym::STT_NOTYPE))
            .filter_map(|s| {
                let name = elf.strtab.get_at(s.st_name)?;
                let kind = match (s.is_function(), s.st_bind() == goblin::elf::sym::STB_GLOBAL) {
                    (true, true) => 'T',
                    (true, false) => 't',
                    (false, _) => 'n',
                };
                Some(KernelSymbol { addr: s.st_value, kind, name: name.to_owned() })
            })
            .collect();
        symbols.sort_by_key(|s| s.addr);
        return Some(symbols);
    }
    let rodata = section(".rodata")?;
    let start = usize::try_from(rodata.sh_offset).ok()?;
    let end = start.checked_add(usize::try_from(rodata.sh_size).ok()?)?;
    recover(data, start..end, section(".text")?.sh_addr)
}

/// Most symbols a kernel is taken to have (6.1 distribution kernels have ~90,000; with
/// all modules built in, a few hundred thousand).
const MAX_SYMBOLS: u32 = 4_000_000;

/// The symbols of the kernel image `data` (its file bytes) whose read-only data lies at
/// file range `rodata` and whose text starts at virtual address `text`, sorted by address;
/// None where the tables are not found whole.
pub fn recover(data: &[u8], rodata: Range<usize>, text: u64) -> Option<Vec<KernelSymbol>> {
    let rodata = rodata.start.min(data.len())..rodata.end.min(data.len());
    let ro = &data[rodata];
    let tokens = find_token_table(ro)?;
    let (base_at, count) = find_relative_base(ro, text, &tokens)?;
    let names_at = base_at + 16;
    let offsets_at = base_at.checked_sub(offsets_table_len(count))?;
    let offsets: Vec<i32> = ro[offsets_at..offsets_at + 4 * count as usize]
        .chunks_exact(4)
        .map(|w| i32::from_le_bytes(w.try_into().expect("4 bytes")))
        .collect();
    // x86-64 keeps per-CPU symbols absolute (CONFIG_KALLSYMS_ABSOLUTE_PERCPU): their offsets
    // are >= 0 and the rest -1 - (addr - base); otherwise every offset is unsigned.
    let absolute_percpu = offsets.iter().any(|&o| o < 0);
    let address = |o: i32| match (absolute_percpu, o >= 0) {
        (true, true) => o as u64,
        (true, false) => text.wrapping_sub(1).wrapping_sub(i64::from(o) as u64),
        (false, _) => text.wrapping_add(u64::from(o as u32)),
    };
    let mut symbols = Vec::with_capacity(count as usize);
    let mut at = names_at;
    for &offset in &offsets {
        let (name, next) = tokens.expand(ro, at)?;
        at = next;
        let mut chars = name.chars();
        let kind = chars.next()?;
        symbols.push(KernelSymbol { addr: address(offset), kind, name: chars.collect() });
    }
    symbols.sort_by_key(|s| s.addr);
    Some(symbols)
}

/// Bytes from `kallsyms_offsets` to `kallsyms_relative_base`: both are 8-aligned, so an odd
/// symbol count leaves 4 bytes of padding after the offsets (Debian's 6.1.192 has 87,347
/// symbols: read without it, every name went to the next symbol's address).
fn offsets_table_len(count: u32) -> usize {
    (4 * count as usize).next_multiple_of(8)
}

/// The decompression table of kallsyms_names.
struct Tokens {
    /// Where the table starts in `.rodata`.
    start: usize,
    tokens: Vec<Vec<u8>>,
}

impl Tokens {
    /// The name encoded at `at`, and where the next one starts.
    fn expand(&self, ro: &[u8], at: usize) -> Option<(String, usize)> {
        let (len, at) = name_len(ro, at)?;
        let end = at.checked_add(len)?;
        if end > self.start {
            return None;
        }
        let bytes: Vec<u8> = ro[at..end].iter().flat_map(|&t| self.tokens[usize::from(t)].iter().copied()).collect();
        Some((String::from_utf8_lossy(&bytes).into_owned(), end))
    }
}

/// A name's length at `at`: one byte, or two (ULEB128) where the top bit is set.
fn name_len(ro: &[u8], at: usize) -> Option<(usize, usize)> {
    let first = *ro.get(at)?;
    if first & 0x80 == 0 {
        return Some((usize::from(first), at + 1));
    }
    let second = *ro.get(at + 1)?;
    Some((usize::from(first & 0x7f) | usize::from(second) << 7, at + 2))
}

/// The token table: found by its digit tokens, checked against the token index after it.
fn find_token_table(ro: &[u8]) -> Option<Tokens> {
    let digits: Vec<u8> = (b'0'..=b'9').flat_map(|c| [c, 0]).collect();
    let mut from = 0;
    while let Some(found) = find(&ro[from..], &digits) {
        let digit0 = from + found;
        from = digit0 + 1;
        if let Some(tokens) = token_table_around(ro, digit0) {
            return Some(tokens);
        }
    }
    None
}

/// The token table whose token 0x30 ("0") is at `digit0`, if the index confirms it.
fn token_table_around(ro: &[u8], digit0: usize) -> Option<Tokens> {
    // Back 0x30 NUL-terminated tokens to token 0.
    let mut start = digit0;
    for _ in 0..0x30 {
        let nul = start.checked_sub(1)?;
        start = ro[..nul].iter().rposition(|&b| b == 0).map_or(0, |p| p + 1);
    }
    let mut tokens = Vec::with_capacity(256);
    let mut offsets = Vec::with_capacity(256);
    let mut at = start;
    for _ in 0..256 {
        let len = ro.get(at..)?.iter().position(|&b| b == 0)?;
        offsets.push(u16::try_from(at - start).ok()?);
        tokens.push(ro[at..at + len].to_vec());
        at += len + 1;
    }
    // The index follows, aligned to 8 (4 on some builds).
    let confirmed = [8usize, 4].iter().any(|&align| {
        let index = at.next_multiple_of(align);
        ro.get(index..index + 512).is_some_and(|table| {
            table.chunks_exact(2).zip(&offsets).all(|(w, &o)| u16::from_le_bytes([w[0], w[1]]) == o)
        })
    });
    confirmed.then_some(Tokens { start, tokens })
}

/// `kallsyms_relative_base` (= `text`, 8-aligned) followed by a symbol count whose names
/// decode, within the tables, up to the markers: (its offset in `.rodata`, the count).
fn find_relative_base(ro: &[u8], text: u64, tokens: &Tokens) -> Option<(usize, u32)> {
    let needle = text.to_le_bytes();
    let mut from = 0;
    while let Some(found) = find(&ro[from..], &needle) {
        let at = from + found;
        from = at + 1;
        if !at.is_multiple_of(8) || at >= tokens.start {
            continue;
        }
        let count = u32::from_le_bytes(ro.get(at + 8..at + 12)?.try_into().ok()?);
        if count == 0 || count > MAX_SYMBOLS || offsets_table_len(count) > at {
            continue;
        }
        if names_fit(ro, at + 16, count, tokens) {
            return Some((at, count));
        }
    }
    None
}

/// Whether `count` names starting at `at` decode and leave room, before the token table,
/// for the markers they need.
fn names_fit(ro: &[u8], at: usize, count: u32, tokens: &Tokens) -> bool {
    let mut next = at;
    for _ in 0..count {
        match name_len(ro, next) {
            Some((len, body)) if body + len <= tokens.start => next = body + len,
            _ => return false,
        }
    }
    let markers = 4 * count.div_ceil(256) as usize;
    next + markers <= tokens.start && first_marker_is_zero(ro, next)
}

/// Markers start (8-aligned) after the names with block 0 at offset 0.
fn first_marker_is_zero(ro: &[u8], names_end: usize) -> bool {
    let at = names_end.next_multiple_of(8);
    ro.get(at..at + 4).is_some_and(|w| w == [0, 0, 0, 0])
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: u64 = 0xffff_ffff_8100_0000;

    /// `.rodata` holding kallsyms tables for `symbols` (type letter + name, address), laid
    /// out as scripts/kallsyms.c does with absolute per-CPU symbols; tokens are plain
    /// characters (each byte its own token).
    fn rodata(symbols: &[(&str, u64)]) -> Vec<u8> {
        let mut ro = vec![0xeeu8; 64]; // something before the tables
        for &(_, addr) in symbols {
            let offset = if addr < TEXT { addr as i32 } else { -1 - (addr - TEXT) as i32 };
            ro.extend_from_slice(&offset.to_le_bytes());
        }
        while !ro.len().is_multiple_of(8) {
            ro.push(0);
        }
        ro.extend_from_slice(&TEXT.to_le_bytes());
        ro.extend_from_slice(&(symbols.len() as u64).to_le_bytes());
        for &(name, _) in symbols {
            ro.push(name.len() as u8);
            ro.extend_from_slice(name.as_bytes());
        }
        while !ro.len().is_multiple_of(8) {
            ro.push(0);
        }
        ro.extend_from_slice(&0u32.to_le_bytes()); // one block of names: marker 0
        while !ro.len().is_multiple_of(8) {
            ro.push(0);
        }
        let start = ro.len();
        let mut offsets = Vec::new();
        for t in 0..=255u8 {
            offsets.push((ro.len() - start) as u16);
            // Token t is the character t; NUL cannot be a token's text, use "\x01" there.
            ro.push(if t == 0 { 1 } else { t });
            ro.push(0);
        }
        while !ro.len().is_multiple_of(8) {
            ro.push(0);
        }
        for o in offsets {
            ro.extend_from_slice(&o.to_le_bytes());
        }
        ro
    }

    #[test]
    fn recovers_names_kinds_and_addresses() {
        let ro = rodata(&[
            ("Afixed_percpu_data", 0),
            ("Tstartup_64", TEXT),
            ("tnative_read_pmc", TEXT + 0x736f0),
            ("Tx86_perf_event_update", TEXT + 0x73b0),
        ]);
        let symbols = recover(&ro, 0..ro.len(), TEXT).expect("tables found");
        let got: Vec<(u64, char, &str)> = symbols.iter().map(|s| (s.addr, s.kind, s.name.as_str())).collect();
        assert_eq!(
            got,
            vec![
                (0, 'A', "fixed_percpu_data"),
                (TEXT, 'T', "startup_64"),
                (TEXT + 0x73b0, 'T', "x86_perf_event_update"),
                (TEXT + 0x736f0, 't', "native_read_pmc"),
            ]
        );
        assert!(symbols[3].is_text() && !symbols[0].is_text());
    }

    #[test]
    fn an_odd_count_pads_the_offsets() {
        let ro = rodata(&[
            ("Tstartup_64", TEXT),
            ("tnative_read_pmc", TEXT + 0x736f0),
            ("tnative_read_msr", TEXT + 0x737c0),
        ]);
        let symbols = recover(&ro, 0..ro.len(), TEXT).expect("tables found");
        let got: Vec<(u64, &str)> = symbols.iter().map(|s| (s.addr, s.name.as_str())).collect();
        assert_eq!(
            got,
            vec![(TEXT, "startup_64"), (TEXT + 0x736f0, "native_read_pmc"), (TEXT + 0x737c0, "native_read_msr")]
        );
    }

    #[test]
    fn anything_else_is_none() {
        assert_eq!(recover(&[0u8; 4096], 0..4096, TEXT), None);
        let ro = rodata(&[("Tstartup_64", TEXT)]);
        assert_eq!(recover(&ro, 0..ro.len(), TEXT + 0x1000), None, "another _text: no base");
        let mut torn = ro.clone();
        let n = torn.len();
        torn[n - 2] ^= 0xff; // the token index no longer matches the table
        assert_eq!(recover(&torn, 0..n, TEXT), None);
    }

    #[test]
    fn a_real_kernels_symbols_when_one_is_at_hand() {
        // Debian's stock kernel, decompressed (guest/linux fetches it): optional here, the
        // Linux integration test covers it in CI.
        let Ok(path) = std::env::var("PERFVM_TEST_VMLINUX") else { return };
        let data = std::fs::read(path).unwrap();
        let elf = goblin::elf::Elf::parse(&data).unwrap();
        let rodata = elf.section_headers.iter().find(|s| elf.shdr_strtab.get_at(s.sh_name) == Some(".rodata")).unwrap();
        let text = elf.section_headers.iter().find(|s| elf.shdr_strtab.get_at(s.sh_name) == Some(".text")).unwrap();
        let range = rodata.sh_offset as usize..(rodata.sh_offset + rodata.sh_size) as usize;
        let symbols = recover(&data, range, text.sh_addr).expect("kallsyms found");
        assert!(symbols.len() > 10_000, "{}", symbols.len());
        assert!(symbols.iter().any(|s| s.name == "x86_perf_event_update" && s.is_text()));
        assert!(symbols.iter().any(|s| s.name == "startup_64" && s.addr == text.sh_addr));
        assert!(symbols.iter().any(|s| s.name == "_text" && s.addr == text.sh_addr), "names at their own addresses");
    }
}
