//! The kernel's returns to user mode, run by the VMM while the exact backend steps.
//!
//! This host emulates CPL 0 but runs CPL 3 natively, and a native vCPU takes no single-step
//! trap: after the emulator runs `IRETQ` or `SYSRETQ` into user mode, user code runs on
//! unstepped until it next enters the kernel, and its instructions go uncounted. So while
//! stepping the VMM runs these two instructions itself (SDM vol. 2, IRET and SYSRET; vol. 3,
//! 6.14.3) and the vCPU enters user mode under an STI interrupt shadow: a vCPU with an
//! interrupt shadow is never run natively, so the host emulates one instruction and traps.

use crate::vstate::linear::LinearMemory;
use kvm_bindings::{kvm_regs, kvm_segment, kvm_sregs, KVM_VCPUEVENT_VALID_SHADOW, KVM_X86_SHADOW_INT_STI};
use kvm_ioctls::VcpuFd;

/// RFLAGS bits SYSRET keeps from R11 (SDM: R11 & 3C7FD7H, then bit 1 set).
const SYSRET_RFLAGS: u64 = 0x3c_7fd7;
const RFLAGS_RF: u64 = 1 << 16;

/// The vCPU, in user mode, runs one instruction under the host's emulator at its coming
/// entry: an STI interrupt shadow keeps the host from running it natively. Returns false
/// when KVM refused the shadow.
pub fn one_instruction(vcpu: &VcpuFd) -> bool {
    let Ok(mut events) = vcpu.get_vcpu_events() else { return false };
    events.interrupt.shadow = KVM_X86_SHADOW_INT_STI as u8;
    events.flags = KVM_VCPUEVENT_VALID_SHADOW;
    vcpu.set_vcpu_events(&events).is_ok()
}

/// Whether a frame or selector names user mode (RPL 3).
pub fn is_user(selector: u64) -> bool {
    selector & 3 == 3
}

/// The segment `selector` names in the GDT at `sregs.gdt`, as a descriptor load makes it
/// (accessed bit set). `None` for a null, LDT or out-of-limit selector, or one not present.
pub fn gdt_segment(sregs: &kvm_sregs, mem: &mut impl LinearMemory, selector: u16) -> Option<kvm_segment> {
    let offset = u64::from(selector & !7);
    if offset == 0 || selector & 4 != 0 || offset + 7 > u64::from(sregs.gdt.limit) {
        return None;
    }
    let d = mem.read_u64(sregs.gdt.base + offset)?;
    let bits = |shift: u32, width: u32| ((d >> shift) & ((1 << width) - 1)) as u8;
    let g = bits(55, 1);
    let raw_limit = (d & 0xffff) as u32 | (((d >> 48) & 0xf) as u32) << 16;
    let segment = kvm_segment {
        base: (d >> 16) & 0xff_ffff | ((d >> 56) & 0xff) << 24,
        limit: if g == 1 { raw_limit << 12 | 0xfff } else { raw_limit },
        selector,
        type_: bits(40, 4) | 1,
        s: bits(44, 1),
        dpl: bits(45, 2),
        present: bits(47, 1),
        avl: bits(52, 1),
        l: bits(53, 1),
        db: bits(54, 1),
        g,
        ..Default::default()
    };
    (segment.present == 1).then_some(segment)
}

/// `IRETQ` from the kernel to user mode: the frame (RIP, CS, RFLAGS, RSP, SS) at `regs.rsp`
/// is popped and CS and SS are loaded from the GDT. `None` leaves the guest untouched.
pub fn iret(regs: &mut kvm_regs, sregs: &mut kvm_sregs, mem: &mut impl LinearMemory) -> Option<()> {
    let mut frame = [0u8; 40];
    mem.read(regs.rsp, &mut frame)?;
    let word = |i: usize| u64::from_le_bytes(frame[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    let [rip, cs, rflags, rsp, ss] = [0, 1, 2, 3, 4].map(word);
    if !is_user(cs) || !is_user(ss) {
        return None;
    }
    let code = gdt_segment(sregs, mem, cs as u16).filter(|s| s.dpl == 3 && s.type_ & 8 != 0)?;
    let stack = gdt_segment(sregs, mem, ss as u16).filter(|s| s.dpl == 3 && s.type_ & 0xa == 2)?;
    (sregs.cs, sregs.ss) = (code, stack);
    regs.rip = rip;
    regs.rsp = rsp;
    regs.rflags = (rflags & !RFLAGS_RF) | 2;
    Some(())
}

/// `SYSRETQ` (REX.W): to 64-bit user mode at RCX with RFLAGS from R11; CS and SS are the
/// fixed flat segments STAR's bits 63:48 select (+16 and +8, RPL 3).
pub fn sysretq(regs: &mut kvm_regs, sregs: &mut kvm_sregs, star: u64) {
    let base = ((star >> 48) & 0xfffc) as u16;
    let flat = kvm_segment { limit: 0xffff_ffff, present: 1, s: 1, g: 1, dpl: 3, ..Default::default() };
    sregs.cs = kvm_segment { selector: (base + 16) | 3, type_: 0xb, l: 1, ..flat };
    sregs.ss = kvm_segment { selector: (base + 8) | 3, type_: 0x3, db: 1, ..flat };
    regs.rip = regs.rcx;
    regs.rflags = (regs.r11 & SYSRET_RFLAGS) | 2;
}

/// `SYSCALL` from 64-bit user mode (SDM vol. 2): RCX the next RIP, R11 RFLAGS, RFLAGS
/// masked by FMASK (and RF), CS and SS the flat kernel segments STAR's bits 47:32 select,
/// RIP LSTAR. The VMM runs it while stepping on hardware hosts, where FMASK clears TF and
/// the kernel's entry would run unstepped. RFLAGS as KVM gives it has no stepping TF.
pub fn syscall(regs: &mut kvm_regs, sregs: &mut kvm_sregs, star: u64, lstar: u64, fmask: u64) {
    let base = ((star >> 32) & 0xfffc) as u16;
    let flat = kvm_segment { limit: 0xffff_ffff, present: 1, s: 1, g: 1, dpl: 0, ..Default::default() };
    sregs.cs = kvm_segment { selector: base, type_: 0xb, l: 1, ..flat };
    sregs.ss = kvm_segment { selector: base + 8, type_: 0x3, db: 1, ..flat };
    regs.rcx = regs.rip + 2;
    regs.r11 = regs.rflags;
    regs.rflags = (regs.rflags & !fmask & !RFLAGS_RF) | 2;
    regs.rip = lstar;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vstate::linear::Identity;
    use kvm_bindings::kvm_dtable;
    use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

    const GDT: u64 = 0x1000;
    /// Linux's GDT: kernel CS 0x10, kernel DS 0x18, user CS32 0x23, user DS 0x2b, user CS 0x33.
    const DESCRIPTORS: [u64; 7] = [
        0,
        0x00cf_9b00_0000_ffff,
        0x00af_9b00_0000_ffff,
        0x00cf_9300_0000_ffff,
        0x00cf_fb00_0000_ffff,
        0x00cf_f300_0000_ffff,
        0x00af_fb00_0000_ffff,
    ];

    fn setup() -> (GuestMemoryMmap, kvm_sregs) {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10000)]).unwrap();
        for (i, d) in DESCRIPTORS.iter().enumerate() {
            mem.write_obj(*d, GuestAddress(GDT + 8 * i as u64)).unwrap();
        }
        let gdt = kvm_dtable { base: GDT, limit: 8 * DESCRIPTORS.len() as u16 - 1, ..Default::default() };
        (mem, kvm_sregs { gdt, ..Default::default() })
    }

    #[test]
    fn descriptors_load_as_a_cpu_loads_them() {
        let (mem, sregs) = setup();
        let cs = gdt_segment(&sregs, &mut Identity(&mem), 0x33).unwrap();
        assert_eq!((cs.dpl, cs.l, cs.db, cs.type_, cs.limit, cs.base), (3, 1, 0, 0xb, 0xffff_ffff, 0));
        let ss = gdt_segment(&sregs, &mut Identity(&mem), 0x2b).unwrap();
        assert_eq!((ss.dpl, ss.l, ss.db, ss.type_), (3, 0, 1, 0x3));
        assert!(gdt_segment(&sregs, &mut Identity(&mem), 0x3b).is_none(), "beyond the limit");
        assert!(gdt_segment(&sregs, &mut Identity(&mem), 0).is_none(), "null");
    }

    #[test]
    fn iretq_to_user_mode_pops_the_frame_and_loads_user_segments() {
        let (mem, mut sregs) = setup();
        let frame = [0x40_1000u64, 0x33, 0x10246, 0x7fff_0000, 0x2b];
        for (i, v) in frame.iter().enumerate() {
            mem.write_obj(*v, GuestAddress(0x8000 + 8 * i as u64)).unwrap();
        }
        let mut regs = kvm_regs { rsp: 0x8000, ..Default::default() };
        iret(&mut regs, &mut sregs, &mut Identity(&mem)).unwrap();
        assert_eq!((regs.rip, regs.rsp, regs.rflags), (0x40_1000, 0x7fff_0000, 0x246), "RF cleared");
        assert_eq!((sregs.cs.selector, sregs.cs.dpl, sregs.ss.selector, sregs.ss.dpl), (0x33, 3, 0x2b, 3));
        mem.write_obj(0x10u64, GuestAddress(0x8008)).unwrap();
        assert!(iret(&mut regs, &mut sregs, &mut Identity(&mem)).is_none(), "a kernel frame is not ours");
    }

    #[test]
    fn sysretq_goes_to_rcx_with_r11s_flags() {
        let (_, mut sregs) = setup();
        // Linux: STAR = (__USER32_CS << 48) | (__KERNEL_CS << 32).
        let star = 0x0023_0010_0000_0000u64;
        let mut regs = kvm_regs { rcx: 0x40_1234, r11: 0x0030_0346, ..Default::default() };
        sysretq(&mut regs, &mut sregs, star);
        assert_eq!((regs.rip, regs.rflags), (0x40_1234, 0x0000_0346 | 0x0010_0000 | 0x0020_0000 | 2));
        assert_eq!((sregs.cs.selector, sregs.cs.l, sregs.ss.selector), (0x33, 1, 0x2b));
    }

    #[test]
    fn syscall_enters_lstar_with_the_return_in_rcx_and_r11() {
        let (_, mut sregs) = setup();
        let star = 0x0023_0010_0000_0000u64;
        // Linux's FMASK: TF, DF, IF, IOPL, AC, NT.
        let fmask = 0x4_7700;
        let mut regs = kvm_regs { rip: 0x40_1000, rflags: 0x246, ..Default::default() };
        syscall(&mut regs, &mut sregs, star, 0xffff_ffff_8160_0000, fmask);
        assert_eq!((regs.rip, regs.rcx, regs.r11), (0xffff_ffff_8160_0000, 0x40_1002, 0x246));
        assert_eq!(regs.rflags, 0x46, "IF cleared by FMASK");
        assert_eq!((sregs.cs.selector, sregs.cs.dpl, sregs.cs.l, sregs.ss.selector), (0x10, 0, 1, 0x18));
    }
}
