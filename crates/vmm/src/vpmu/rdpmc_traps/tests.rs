use super::*;
use std::path::PathBuf;

fn symbol(addr: u64, kind: char) -> KernelSymbol {
    KernelSymbol { addr, kind, name: format!("s{addr:x}") }
}

#[test]
fn only_decoded_rdpmc_instructions_are_sites() {
    // mov eax, 0x330f (the bytes 0f 33 inside an immediate); rdpmc; ret
    let code = [0xb8, 0x0f, 0x33, 0x00, 0x00, 0x0f, 0x33, 0xc3];
    assert_eq!(rdpmc_in(&code, 0x1000), vec![0x1005]);
}

#[test]
fn functions_end_at_the_next_symbol_and_huge_gaps_are_skipped() {
    let symbols = [symbol(0x1000, 'T'), symbol(0x1000, 't'), symbol(0x1040, 'd'), symbol(0x2000, 't')];
    assert_eq!(extents(&symbols), vec![(0x1000, 0x1040)], "the last has no end");
    let far = [symbol(0x1000, 't'), symbol(0x1000 + MAX_FUNCTION + 1, 't')];
    assert!(extents(&far).is_empty());
}

#[test]
fn a_trap_is_ours_only_while_its_bytes_are_there_and_unpatching_restores_rdpmc() {
    let traps = RdpmcTraps { sites: BTreeMap::from([(0x1005, 0x5005)]), form: TrapForm::Int3 };
    assert!(traps.is_trap(0x1005, &[0xcc, 0x33, 0xc3]));
    assert!(!traps.is_trap(0x1005, &[0xcc, 0x90]), "the kernel wrote over it");
    assert!(!traps.is_trap(0x1006, &[0xcc, 0x33]), "not a site");
    let mut code = [0xb8, 0x0f, 0x33, 0x00, 0x00, 0xcc, 0x33, 0xc3];
    traps.unpatch(0x1000, &mut code);
    assert_eq!(code[5..7], RDPMC);
    let mut tail = [0x90, 0xcc];
    traps.unpatch(0x1004, &mut tail);
    assert_eq!(tail, [0x90, 0x0f], "a site at the end of what was read");
}

#[test]
fn a_port_trap_is_recognized_and_unpatched_whole() {
    let traps = RdpmcTraps { sites: BTreeMap::from([(0x1005, 0x5005)]), form: TrapForm::PortOut };
    assert!(traps.is_trap(0x1005, &[0xe6, RDPMC_TRAP_PORT as u8]));
    assert!(!traps.is_trap(0x1005, &[0xcc, 0x33]), "another form's bytes");
    let mut code = [0x90, 0x90, 0x90, 0x90, 0x90, 0xe6, RDPMC_TRAP_PORT as u8, 0xc3];
    traps.unpatch(0x1000, &mut code);
    assert_eq!(code[5..7], RDPMC);
}

/// The kit's conformance guest reads counters with RDPMC: every site found lies in one
/// of its functions, at 0f 33 in the file.
#[test]
fn finds_the_rdpmc_instructions_of_a_guest_with_symbols() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../guest/build/pmu_arch.elf");
    let Ok(elf) = std::fs::read(&path) else {
        return crate::vstate::kvm::skip_test(
            "rdpmc_traps",
            "guest/build/pmu_arch.elf not built (cargo build builds it)",
        );
    };
    let traps = RdpmcTraps::find(&elf, TrapForm::Int3);
    assert!(!traps.is_empty(), "pmu_arch executes RDPMC");
    let parsed = goblin::elf::Elf::parse(&elf).unwrap();
    for (&va, &pa) in &traps.sites {
        let text = parsed.program_headers.iter().find(|p| (p.p_vaddr..p.p_vaddr + p.p_filesz).contains(&va)).unwrap();
        let at = (text.p_offset + va - text.p_vaddr) as usize;
        assert_eq!(elf[at..at + 2], RDPMC, "{va:#x}");
        assert_eq!(pa - text.p_paddr, va - text.p_vaddr);
    }
    let names = linux_image::kallsyms::of_elf(&elf).unwrap();
    let function = |va: u64| names[names.partition_point(|s| s.addr <= va) - 1].name.clone();
    let mut functions: Vec<String> = traps.sites.keys().map(|&va| function(va)).collect();
    functions.dedup();
    assert!(functions.contains(&"rdpmc_safe".to_owned()), "{functions:?}");
}

/// A real kernel, where one is given (PERFVM_TEST_VMLINUX: a vmlinux or a bzImage):
/// its sites are in `native_read_pmc`.
#[test]
fn finds_the_sites_of_a_real_kernel() {
    let Ok(path) = std::env::var("PERFVM_TEST_VMLINUX") else { return };
    let (_, vmlinux) = crate::loader::load_guest(std::fs::read(path).unwrap(), None, 1 << 30).unwrap();
    let traps = RdpmcTraps::find(&vmlinux, TrapForm::Int3);
    let symbols = linux_image::kallsyms::of_elf(&vmlinux).unwrap();
    for &va in traps.sites.keys() {
        let at = symbols.partition_point(|s| s.addr <= va) - 1;
        eprintln!("RDPMC at {va:#x}: {}+{:#x}", symbols[at].name, va - symbols[at].addr);
    }
    assert!(!traps.is_empty());
}
