//! The handlers of exceptions the CPU delivers while the exact backend steps. On hardware
//! hosts delivery clears TF, so a handler would run unstepped (uncounted) until its IRET,
//! and the frame it saved would hold the VMM's TF; kvm_pvm's emulator traps after the
//! handler's first instruction instead, where the faulting instruction is counted in its
//! place (`backends::retire`). So while stepping, execution breakpoints sit on the handlers
//! of the exceptions ordinary code takes (one debug register each): a hit is a delivery,
//! where the faulting instruction retired nothing; the VMM clears TF in the saved frame
//! and steps on in the handler. Both hosts stop there alike; where breakpoints do not stop
//! the guest (kvm_amd under QEMU 7.2), a port write planted on each entry does
//! (`vpmu::planted`).
//!
//! Not watched: other vectors (#AC, #MF, #XM, ...), 32-bit guests, and guests whose DR0 the
//! SYSCALL repair holds (Linux on kvm_pvm); those keep each host's own behaviour.

use crate::vstate::linear::LinearMemory;
use kvm_bindings::kvm_sregs;

/// The vectors watched, one debug register each: #PF, #GP, #UD, #DE.
pub const VECTORS: [u8; 4] = [14, 13, 6, 0];

const EFER_LMA: u64 = 1 << 10;
const RFLAGS_TF: u64 = 1 << 8;
/// The size of a 64-bit IDT gate.
const GATE: u64 = 16;

/// Where each watched vector's handler begins in a long-mode guest (None: no gate there).
pub fn entries(mem: &mut impl LinearMemory, sregs: &kvm_sregs) -> [Option<u64>; 4] {
    if sregs.efer & EFER_LMA == 0 {
        return [None; 4];
    }
    // Vectors 0-14 are one read, inside one page of an aligned IDT.
    let mut idt = [0u8; 15 * GATE as usize];
    let limit = u64::from(sregs.idt.limit);
    let readable = limit + 1 >= idt.len() as u64 && mem.read(sregs.idt.base, &mut idt).is_some();
    VECTORS.map(|vector| {
        let gate = &idt[usize::from(vector) * GATE as usize..][..GATE as usize];
        let present = gate[5] & 0x80 != 0;
        (readable && present).then(|| {
            u64::from(u16::from_le_bytes([gate[0], gate[1]]))
                | u64::from(u16::from_le_bytes([gate[6], gate[7]])) << 16
                | u64::from(u32::from_le_bytes([gate[8], gate[9], gate[10], gate[11]])) << 32
        })
    })
}

/// Whether the delivery of `vector` pushes an error code.
fn pushes_error_code(vector: u8) -> bool {
    matches!(vector, 8 | 10..=14 | 17 | 21 | 29 | 30)
}

/// The RIP the delivery of `vector` saved in the 64-bit frame at `rsp`: the faulting
/// instruction's, for a fault.
pub fn saved_rip(mem: &mut impl LinearMemory, rsp: u64, vector: u8) -> Option<u64> {
    mem.read_u64(rsp + 8 * u64::from(pushes_error_code(vector)))
}

/// Clear TF in the RFLAGS the delivery of `vector` saved in the 64-bit frame at `rsp`
/// (after the error code of the vectors that push one).
pub fn clear_saved_tf(mem: &mut impl LinearMemory, rsp: u64, vector: u8) -> Option<()> {
    let at = rsp + 8 * (u64::from(pushes_error_code(vector)) + 2);
    let rflags = mem.read_u64(at)?;
    if rflags & RFLAGS_TF != 0 {
        mem.write_u64(at, rflags & !RFLAGS_TF)?;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vstate::linear::Identity;
    use kvm_bindings::kvm_dtable;
    use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

    const IDT: u64 = 0x1000;

    fn gate(mem: &GuestMemoryMmap, vector: u64, handler: u64) {
        let mut g = [0u8; 16];
        g[0..2].copy_from_slice(&(handler as u16).to_le_bytes());
        g[2..4].copy_from_slice(&8u16.to_le_bytes());
        g[5] = 0x8e;
        g[6..8].copy_from_slice(&((handler >> 16) as u16).to_le_bytes());
        g[8..12].copy_from_slice(&((handler >> 32) as u32).to_le_bytes());
        mem.write_slice(&g, GuestAddress(IDT + vector * 16)).unwrap();
    }

    fn long_mode(limit: u16) -> kvm_sregs {
        kvm_sregs { efer: EFER_LMA, idt: kvm_dtable { base: IDT, limit, ..Default::default() }, ..Default::default() }
    }

    #[test]
    fn the_watched_handlers_come_from_their_gates() {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x4000)]).unwrap();
        gate(&mem, 14, 0xffff_ffff_8160_0a10);
        gate(&mem, 6, 0x40_2000);
        let e = entries(&mut Identity(&mem), &long_mode(0xfff));
        assert_eq!(e, [Some(0xffff_ffff_8160_0a10), None, Some(0x40_2000), None], "#GP and #DE not present");
        assert_eq!(entries(&mut Identity(&mem), &long_mode(14 * 16)), [None; 4], "an IDT too short");
        let legacy = kvm_sregs { efer: 0, ..long_mode(0xfff) };
        assert_eq!(entries(&mut Identity(&mem), &legacy), [None; 4], "32-bit guests are not watched");
    }

    #[test]
    fn tf_is_cleared_in_the_saved_rflags_past_any_error_code() {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x4000)]).unwrap();
        let rflags = |at: u64| mem.read_obj::<u64>(GuestAddress(at)).unwrap();
        // #PF: error code, RIP, CS, RFLAGS.
        mem.write_obj(0x346u64, GuestAddress(0x2018)).unwrap();
        clear_saved_tf(&mut Identity(&mem), 0x2000, 14).unwrap();
        mem.write_obj(0x40_1234u64, GuestAddress(0x2008)).unwrap();
        assert_eq!(saved_rip(&mut Identity(&mem), 0x2000, 14), Some(0x40_1234), "past the error code");
        assert_eq!(rflags(0x2018), 0x246);
        // #UD: RIP, CS, RFLAGS.
        mem.write_obj(0x10346u64, GuestAddress(0x3010)).unwrap();
        clear_saved_tf(&mut Identity(&mem), 0x3000, 6).unwrap();
        assert_eq!(rflags(0x3010), 0x10246);
    }
}
