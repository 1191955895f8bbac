//! Small ELF64 images with function symbols and nothing else, for tests that resolve
//! addresses without a guest built.

/// An x86-64 ELF executable whose symbol table holds `functions`: `(name, start, size)`.
pub fn with_functions(functions: &[(&str, u64, u64)]) -> Vec<u8> {
    let mut strtab = vec![0u8];
    let mut symtab = vec![0u8; 24];
    for &(name, start, size) in functions {
        let name_at = strtab.len() as u32;
        strtab.extend_from_slice(name.as_bytes());
        strtab.push(0);
        symtab.extend_from_slice(&name_at.to_le_bytes());
        symtab.push(0x12); // STB_GLOBAL, STT_FUNC
        symtab.push(0);
        symtab.extend_from_slice(&1u16.to_le_bytes()); // .text
        symtab.extend_from_slice(&start.to_le_bytes());
        symtab.extend_from_slice(&size.to_le_bytes());
    }
    let shstrtab = b"\0.text\0.symtab\0.strtab\0.shstrtab\0";
    let text_start = functions.iter().map(|f| f.1).min().unwrap_or(0);
    let text_end = functions.iter().map(|f| f.1 + f.2).max().unwrap_or(0);
    let symtab_at = 64u64;
    let strtab_at = symtab_at + symtab.len() as u64;
    let shstrtab_at = strtab_at + strtab.len() as u64;
    let headers_at = (shstrtab_at + shstrtab.len() as u64).next_multiple_of(8);
    let mut out = Vec::new();
    out.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    out.extend_from_slice(&62u16.to_le_bytes()); // EM_X86_64
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&text_start.to_le_bytes()); // entry
    out.extend_from_slice(&0u64.to_le_bytes()); // no program headers
    out.extend_from_slice(&headers_at.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    for half in [64u16, 56, 0, 64, 5, 4] {
        out.extend_from_slice(&half.to_le_bytes());
    }
    out.extend_from_slice(&symtab);
    out.extend_from_slice(&strtab);
    out.extend_from_slice(shstrtab);
    out.resize(headers_at as usize, 0);
    // (name, type, flags, addr, offset, size, link, info, align, entsize)
    type Header = (u32, u32, u64, u64, u64, u64, u32, u32, u64, u64);
    let sections: [Header; 5] = [
        (0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        (1, 8, 6, text_start, 0, text_end - text_start, 0, 0, 16, 0), // .text, NOBITS, AX
        (7, 2, 0, 0, symtab_at, symtab.len() as u64, 3, 1, 8, 24),
        (15, 3, 0, 0, strtab_at, strtab.len() as u64, 0, 0, 1, 0),
        (23, 3, 0, 0, shstrtab_at, shstrtab.len() as u64, 0, 0, 1, 0),
    ];
    for (name, kind, flags, addr, offset, size, link, info, align, entsize) in sections {
        out.extend_from_slice(&name.to_le_bytes());
        out.extend_from_slice(&kind.to_le_bytes());
        for v in [flags, addr, offset, size] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&link.to_le_bytes());
        out.extend_from_slice(&info.to_le_bytes());
        out.extend_from_slice(&align.to_le_bytes());
        out.extend_from_slice(&entsize.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn symbols_read_back() {
        let elf = super::with_functions(&[("qux", 0x100, 0x40), ("main", 0x300, 0x80)]);
        let symbols = crate::symbols::Symbols::from_elf(&elf);
        assert_eq!(symbols.lookup(0x13f), Some(("qux", 0x100)));
        assert_eq!(symbols.lookup(0x340), Some(("main", 0x300)));
        assert_eq!(symbols.lookup(0x200), None);
    }
}
