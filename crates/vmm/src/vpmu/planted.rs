//! Port writes the exact backend plants in guest code where the host's breakpoints do not
//! stop the guest (`blocks::EndBy::Trap`; kvm_amd under QEMU 7.2 arms no nested DR7): the
//! two bytes at an address become `OUT RDPMC_TRAP_PORT, AL`, whose exit stands in for the
//! breakpoint. A block's end carries one while the block runs; while stepping, so do the
//! entries of the watched exception handlers (`handler_watch`), so that a delivery stops
//! there as a breakpoint would have stopped it.

use crate::backends::exact::handler_watch;
use crate::vpmu::rdpmc_traps::TrapForm;
use crate::vstate::linear::PageWalk;
use kvm_bindings::kvm_sregs;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Two bytes of guest code replaced by the port write.
#[derive(Debug, Clone, Copy)]
pub(super) struct Planted {
    /// The guest-virtual address planted at.
    pub at: u64,
    pa: u64,
    original: [u8; 2],
}

impl Planted {
    /// Plant at `at` (both bytes in one page), translated through the guest's page tables.
    pub fn new(mem: &GuestMemoryMmap, sregs: &kvm_sregs, at: u64) -> Option<Planted> {
        if at & 0xfff == 0xfff {
            return None;
        }
        let pa = PageWalk::of(mem, sregs.cr3, sregs.cr4).page(at)? | (at & 0xfff);
        let mut original = [0u8; 2];
        mem.read_slice(&mut original, GuestAddress(pa)).ok()?;
        mem.write_slice(&TrapForm::PortOut.bytes(), GuestAddress(pa)).ok()?;
        Some(Planted { at, pa, original })
    }

    /// Put the bytes back, unless the guest wrote over them since (its bytes stay).
    pub fn remove(self, mem: &GuestMemoryMmap) {
        let mut now = [0u8; 2];
        if mem.read_slice(&mut now, GuestAddress(self.pa)).is_ok() && now == TrapForm::PortOut.bytes() {
            let _ = mem.write_slice(&self.original, GuestAddress(self.pa));
        }
    }
}

/// The watched handlers' planted entries (`handler_watch::VECTORS` order).
#[derive(Debug, Default)]
pub(super) struct WatchTraps([Option<Planted>; 4]);

impl WatchTraps {
    /// Plant the entries of `handlers` but the ones at `rip` (where the coming step begins:
    /// it would stop before its first instruction) and `end` (a block's); remove the ones
    /// no longer wanted (a handler the guest moved).
    pub fn set(
        &mut self,
        mem: &GuestMemoryMmap,
        sregs: &kvm_sregs,
        handlers: [Option<u64>; 4],
        rip: u64,
        end: Option<u64>,
    ) {
        for (slot, handler) in self.0.iter_mut().zip(handlers) {
            let wanted = handler.filter(|&h| h != rip && Some(h) != end);
            if slot.map(|p| p.at) == wanted {
                continue;
            }
            if let Some(p) = slot.take() {
                p.remove(mem);
            }
            *slot = wanted.and_then(|h| Planted::new(mem, sregs, h));
        }
    }

    /// Remove every planted entry (stepping ended).
    pub fn clear(&mut self, mem: &GuestMemoryMmap) {
        for p in self.0.iter_mut().filter_map(Option::take) {
            p.remove(mem);
        }
    }

    /// Which watched handler's entry is planted at `at`, if one is.
    pub fn planted_at(&self, at: u64) -> Option<usize> {
        self.0.iter().position(|p| p.is_some_and(|p| p.at == at))
    }

    /// The port write at `at` was a planted handler entry's (the guest took that vector):
    /// its bytes go back, as the handler is stepped from its entry on. Its vector, if so.
    pub fn hit(&mut self, mem: &GuestMemoryMmap, at: u64) -> Option<u8> {
        let n = self.planted_at(at)?;
        self.0[n].take()?.remove(mem);
        Some(handler_watch::VECTORS[n])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2 MiB of RAM identity-mapped by one 2 MiB page (tables at 0x1000-0x3fff, CR3 0x1000),
    /// with code bytes 0x90.. at 0x10000.
    fn guest() -> (GuestMemoryMmap, kvm_sregs) {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x20_0000)]).unwrap();
        mem.write_obj(0x2000u64 | 1, GuestAddress(0x1000)).unwrap();
        mem.write_obj(0x3000u64 | 1, GuestAddress(0x2000)).unwrap();
        mem.write_obj(1u64 | 1 << 7, GuestAddress(0x3000)).unwrap();
        mem.write_slice(&(0x90..0xa0).collect::<Vec<u8>>(), GuestAddress(0x10000)).unwrap();
        (mem, kvm_sregs { cr3: 0x1000, ..Default::default() })
    }

    fn bytes(mem: &GuestMemoryMmap, at: u64) -> [u8; 2] {
        let mut b = [0u8; 2];
        mem.read_slice(&mut b, GuestAddress(at)).unwrap();
        b
    }

    #[test]
    fn handlers_are_planted_but_the_one_a_step_begins_at_and_put_back_when_hit() {
        let (mem, sregs) = guest();
        let mut traps = WatchTraps::default();
        let handlers = [Some(0x10000), Some(0x10004), None, Some(0x10008)];
        traps.set(&mem, &sregs, handlers, 0x10004, None);
        assert_eq!(bytes(&mem, 0x10000), TrapForm::PortOut.bytes());
        assert_eq!(bytes(&mem, 0x10004), [0x94, 0x95], "the step begins there");
        assert_eq!(bytes(&mem, 0x10008), TrapForm::PortOut.bytes());
        assert_eq!(traps.hit(&mem, 0x10008), Some(handler_watch::VECTORS[3]));
        assert_eq!(bytes(&mem, 0x10008), [0x98, 0x99]);
        assert_eq!(traps.hit(&mem, 0x10008), None, "once");
        traps.set(&mem, &sregs, handlers, 0x10008, None);
        assert_eq!(bytes(&mem, 0x10004), TrapForm::PortOut.bytes(), "stepped past its entry");
        traps.clear(&mem);
        assert_eq!(bytes(&mem, 0x10000), [0x90, 0x91]);
        assert_eq!(bytes(&mem, 0x10004), [0x94, 0x95]);
    }

    #[test]
    fn a_moved_handler_moves_its_trap_and_guest_writes_stay() {
        let (mem, sregs) = guest();
        let mut traps = WatchTraps::default();
        traps.set(&mem, &sregs, [Some(0x10000), None, None, None], 0, None);
        mem.write_slice(&[0xcc, 0xcc], GuestAddress(0x10000)).unwrap(); // the guest's own write
        traps.set(&mem, &sregs, [Some(0x1000a), None, None, None], 0, None);
        assert_eq!(bytes(&mem, 0x10000), [0xcc, 0xcc]);
        assert_eq!(bytes(&mem, 0x1000a), TrapForm::PortOut.bytes());
        traps.set(&mem, &sregs, [Some(0x1000a), None, None, None], 0, Some(0x1000a));
        assert_eq!(bytes(&mem, 0x1000a), [0x9a, 0x9b], "a block's end there");
        assert!(Planted::new(&mem, &sregs, 0x10fff).is_none(), "two bytes across pages");
        assert!(Planted::new(&mem, &sregs, 0x40_0000).is_none(), "unmapped");
    }
}
