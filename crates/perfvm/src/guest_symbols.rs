//! The resolver of a guest image: its ELF's symbols (and DWARF lines), or, for a Linux
//! kernel whose ELF symbols were stripped (distribution kernels), the symbols its kallsyms
//! tables name, with every user-space address as one `[user]` function: the kernel/user
//! split of a Linux guest's profile.

use profile::resolve::Resolver;
use profile::symbols::Symbols;
use std::path::Path;

/// User space of an x86-64 Linux guest: the lower canonical half.
const USER_END: u64 = 0x0000_8000_0000_0000;

/// The largest guest image read for its symbols (a record file names it: it may name any
/// file; a distribution vmlinux with its DWARF is some hundreds of MB).
pub const MAX_GUEST_ELF_BYTES: u64 = 1 << 30;

/// The resolver of the guest image at `path` (warnings: what could not be read).
pub fn load(path: &Path, lines: bool) -> (Resolver, Vec<String>) {
    match vmm::bounded::read(path, MAX_GUEST_ELF_BYTES, "guest images read for symbols") {
        Ok(bytes) => resolver(&bytes, &path.display().to_string(), lines),
        Err(e) => {
            (Resolver::default(), vec![format!("cannot read {}: {e}: addresses show as [unknown]", path.display())])
        }
    }
}

/// The resolver of the guest image `bytes` (`name` names it in warnings).
pub fn resolver(bytes: &[u8], name: &str, lines: bool) -> (Resolver, Vec<String>) {
    if !vmm::loader::linux::is_linux(bytes) {
        return Resolver::from_elf(bytes, name, lines);
    }
    let elf = match vmm::loader::linux::kernel_elf(bytes) {
        Ok(elf) => elf,
        Err(e) => return (Resolver::default(), vec![format!("{name}: {e}: addresses show as [unknown]")]),
    };
    let Some(kernel) = vmm::profiling::kallsyms::of_elf(&elf) else {
        return (
            Resolver::default(),
            vec![format!("{name}: no symbols and no kallsyms tables: addresses show as [unknown]")],
        );
    };
    let mut funcs: Vec<(u64, u64, String)> =
        kernel.into_iter().filter(|s| s.is_text()).map(|s| (s.addr, 0, s.name)).collect();
    funcs.push((0, USER_END, "[user]".to_owned()));
    (Resolver::from_parts(Symbols::from_list(funcs), None), Vec::new())
}
