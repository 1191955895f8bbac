//! Guest linear memory as the VMM sees it: through the vCPU's page tables, or through the
//! identity map (tests, and guests whose linear addresses are physical).

use kvm_ioctls::VcpuFd;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

const PAGE: u64 = 0x1000;

/// The guest's linear address space as the VMM reads and writes it.
pub trait LinearMemory {
    /// Fill `buf` from linear address `addr`; `None` if some byte is not mapped to RAM.
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Option<()>;
    /// Store `buf` at linear address `addr`; `None` if some byte is not mapped to RAM.
    fn write(&mut self, addr: u64, buf: &[u8]) -> Option<()>;

    /// The little-endian u64 at linear address `addr`.
    fn read_u64(&mut self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Some(u64::from_le_bytes(b))
    }

    /// Store `value` little-endian at linear address `addr`.
    fn write_u64(&mut self, addr: u64, value: u64) -> Option<()> {
        self.write(addr, &value.to_le_bytes())
    }
}

/// Split `[addr, addr + len)` into per-page pieces: (linear address, offset in the buffer, length).
pub(crate) fn pages(addr: u64, len: usize) -> impl Iterator<Item = (u64, usize, usize)> {
    let mut done = 0usize;
    std::iter::from_fn(move || {
        if done >= len {
            return None;
        }
        let va = addr.checked_add(done as u64)?;
        let n = ((PAGE - (va & (PAGE - 1))) as usize).min(len - done);
        let piece = (va, done, n);
        done += n;
        Some(piece)
    })
}

/// Guest linear memory through the vCPU's page tables (KVM_TRANSLATE), translations
/// cached for one batch of assists.
#[derive(Debug)]
pub struct VcpuLinear<'a> {
    vcpu: &'a VcpuFd,
    mem: &'a GuestMemoryMmap,
    cache: Vec<(u64, u64)>,
}

impl<'a> VcpuLinear<'a> {
    /// Linear memory of `vcpu` as it is now, backed by `mem`; nothing cached yet.
    pub fn new(vcpu: &'a VcpuFd, mem: &'a GuestMemoryMmap) -> Self {
        VcpuLinear { vcpu, mem, cache: Vec::new() }
    }

    fn phys(&mut self, va: u64) -> Option<u64> {
        let page = va & !(PAGE - 1);
        let pa = match self.cache.iter().find(|(v, _)| *v == page) {
            Some(&(_, pa)) => pa,
            None => {
                let t = self.vcpu.translate_gva(page).ok().filter(|t| t.valid != 0)?;
                let pa = t.physical_address & !(PAGE - 1);
                self.cache.push((page, pa));
                pa
            }
        };
        Some(pa | (va & (PAGE - 1)))
    }
}

impl LinearMemory for VcpuLinear<'_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Option<()> {
        for (va, off, n) in pages(addr, buf.len()) {
            let pa = self.phys(va)?;
            self.mem.read_slice(&mut buf[off..off + n], GuestAddress(pa)).ok()?;
        }
        Some(())
    }

    fn write(&mut self, addr: u64, buf: &[u8]) -> Option<()> {
        for (va, off, n) in pages(addr, buf.len()) {
            let pa = self.phys(va)?;
            self.mem.write_slice(&buf[off..off + n], GuestAddress(pa)).ok()?;
        }
        Some(())
    }
}

/// Guest linear memory through 4-level long-mode page tables at `cr3`, walked in guest
/// memory by the VMM (no vCPU ioctl): for reading a stopped vCPU's stack.
#[derive(Debug)]
pub struct PageWalk<'a> {
    mem: &'a GuestMemoryMmap,
    cr3: u64,
    /// 4, or 5 with CR4.LA57.
    levels: u32,
}

/// CR4.LA57: 5-level paging.
const CR4_LA57: u64 = 1 << 12;
/// Physical address bits of a page-table entry.
const ENTRY_ADDR: u64 = 0x000f_ffff_ffff_f000;

impl<'a> PageWalk<'a> {
    /// The address space whose top table CR3 names.
    pub fn new(mem: &'a GuestMemoryMmap, cr3: u64) -> Self {
        PageWalk { mem, cr3, levels: 4 }
    }

    /// The address space of a vCPU with these CR3 and CR4 (5 levels where CR4.LA57 is set).
    pub fn of(mem: &'a GuestMemoryMmap, cr3: u64, cr4: u64) -> Self {
        PageWalk { mem, cr3, levels: if cr4 & CR4_LA57 != 0 { 5 } else { 4 } }
    }

    /// The physical page of the page at `va`, if mapped.
    pub fn page(&self, va: u64) -> Option<u64> {
        self.phys(va & !(PAGE - 1))
    }

    /// The physical address of `va`, if mapped (4 KiB, 2 MiB and 1 GiB pages).
    fn phys(&self, va: u64) -> Option<u64> {
        self.walk(va).map(|w| w.access.pa)
    }

    /// `va` through every level to its page: where it goes, and what the levels allow.
    fn walk(&self, va: u64) -> Option<Walked> {
        let mut table = self.cr3 & ENTRY_ADDR;
        let mut walked = Walked { access: DataAccess { pa: 0, tables: [0; 5] }, writable: true, user: true };
        for (i, level) in (0..self.levels).rev().enumerate() {
            walked.access.tables[i] = table;
            let shift = 12 + 9 * level;
            let entry: u64 = self.mem.read_obj(GuestAddress(table + ((va >> shift) & 0x1ff) * 8)).ok()?;
            if entry & 1 == 0 {
                return None;
            }
            walked.writable &= entry & 2 != 0;
            walked.user &= entry & 4 != 0;
            // PS: a 1 GiB (PDPT) or 2 MiB (PD) page ends the walk.
            if level == 0 || (level <= 2 && entry & (1 << 7) != 0) {
                let offset = (1u64 << shift) - 1;
                walked.access.pa = (entry & ENTRY_ADDR & !offset) | (va & offset);
                return Some(walked);
            }
            table = entry & ENTRY_ADDR;
        }
        None
    }
}

/// A page walk's end: the access, and whether every level allows writes and user access.
struct Walked {
    access: DataAccess,
    writable: bool,
    user: bool,
}

/// CR0.WP: supervisor stores honour read-only pages.
const CR0_WP: u64 = 1 << 16;
/// CR4.SMAP: supervisor data accesses to user pages fault (RFLAGS.AC aside).
const CR4_SMAP: u64 = 1 << 21;

/// Where a CPL 0 data access goes: the guest-physical address and the page tables walked
/// to it (zero past the last level).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataAccess {
    /// The byte's guest-physical address.
    pub pa: u64,
    /// The physical pages of the tables walked, top first.
    pub tables: [u64; 5],
}

impl PageWalk<'_> {
    /// Where a CPL 0 data access to `va` goes (`write`: a store), None where it would
    /// fault: not present, a store to a read-only page under CR0.WP, a user page under
    /// CR4.SMAP (the caller sees that as a stop, whatever RFLAGS.AC says).
    pub fn data(&self, va: u64, write: bool, cr0: u64, cr4: u64) -> Option<DataAccess> {
        let w = self.walk(va)?;
        let denied = (write && !w.writable && cr0 & CR0_WP != 0) || (w.user && cr4 & CR4_SMAP != 0);
        (!denied).then_some(w.access)
    }
}

impl LinearMemory for PageWalk<'_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Option<()> {
        for (va, off, n) in pages(addr, buf.len()) {
            self.mem.read_slice(&mut buf[off..off + n], GuestAddress(self.phys(va)?)).ok()?;
        }
        Some(())
    }

    fn write(&mut self, addr: u64, buf: &[u8]) -> Option<()> {
        for (va, off, n) in pages(addr, buf.len()) {
            self.mem.write_slice(&buf[off..off + n], GuestAddress(self.phys(va)?)).ok()?;
        }
        Some(())
    }
}

/// Guest memory with linear == physical (the identity map every perfvm guest sets up).
#[derive(Debug)]
pub struct Identity<'a>(pub &'a GuestMemoryMmap);

impl LinearMemory for Identity<'_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Option<()> {
        self.0.read_slice(buf, GuestAddress(addr)).ok()
    }

    fn write(&mut self, addr: u64, buf: &[u8]) -> Option<()> {
        self.0.write_slice(buf, GuestAddress(addr)).ok()
    }
}

/// Linear memory as a map of u64 words, for stack-walk tests (read-only).
#[cfg(test)]
#[derive(Debug)]
pub struct Words(pub std::collections::HashMap<u64, u64>);

#[cfg(test)]
impl LinearMemory for Words {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Option<()> {
        buf.copy_from_slice(&self.0.get(&addr)?.to_le_bytes()[..buf.len()]);
        Some(())
    }
    fn write(&mut self, _: u64, _: &[u8]) -> Option<()> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_walk_follows_four_levels_and_large_pages() {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
        let entry = |table: u64, index: u64, value: u64| mem.write_obj(value, GuestAddress(table + index * 8)).unwrap();
        // va 0x7f80_8020_2123 = PML4[255] PDPT[2] PD[1] PT[2] + 0x123
        entry(0x1000, 255, 0x2000 | 1);
        entry(0x2000, 2, 0x3000 | 1);
        entry(0x3000, 1, 0x4000 | 1);
        entry(0x4000, 2, 0x9000 | 1);
        entry(0x3000, 3, 0x20_0000 | 1 | 1 << 7); // a 2 MiB page
        mem.write_obj(0xfeed_u64, GuestAddress(0x9123)).unwrap();
        mem.write_obj(0xbeef_u64, GuestAddress(0x20_0010)).unwrap();
        let mut walk = PageWalk::new(&mem, 0x1000);
        assert_eq!(walk.read_u64(0x7f80_8020_2123), Some(0xfeed));
        assert_eq!(walk.read_u64(0x7f80_8060_0010), Some(0xbeef));
        assert_eq!(walk.read_u64(0x7f80_8020_3000), None, "PT entry not present");
        assert_eq!(walk.read_u64(0x1000), None, "PML4 entry not present");
    }

    #[test]
    fn with_la57_the_walk_starts_one_level_higher() {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap();
        let entry = |table: u64, index: u64, value: u64| mem.write_obj(value, GuestAddress(table + index * 8)).unwrap();
        // va 0x0081_0000_0000_0000 = PML5[1] PML4[2] PDPT[0] PD[0] PT[0]
        let va = 1u64 << 48 | 2u64 << 39;
        entry(0x1000, 1, 0x2000 | 1);
        entry(0x2000, 2, 0x3000 | 1);
        entry(0x3000, 0, 0x4000 | 1);
        entry(0x4000, 0, 0x5000 | 1);
        entry(0x5000, 0, 0x8000 | 1);
        assert_eq!(PageWalk::of(&mem, 0x1000, CR4_LA57).page(va + 0x123), Some(0x8000));
        assert_eq!(PageWalk::of(&mem, 0x1000, 0).page(va), None, "four levels read another table");
    }

    #[test]
    fn page_split() {
        assert_eq!(pages(0xFF8, 16).collect::<Vec<_>>(), vec![(0xFF8, 0, 8), (0x1000, 8, 8)]);
        assert_eq!(pages(0x1000, 8).collect::<Vec<_>>(), vec![(0x1000, 0, 8)]);
        assert_eq!(pages(0, 0).count(), 0);
    }
}
