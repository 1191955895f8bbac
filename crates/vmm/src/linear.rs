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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_split() {
        assert_eq!(pages(0xFF8, 16).collect::<Vec<_>>(), vec![(0xFF8, 0, 8), (0x1000, 8, 8)]);
        assert_eq!(pages(0x1000, 8).collect::<Vec<_>>(), vec![(0x1000, 0, 8)]);
        assert_eq!(pages(0, 0).count(), 0);
    }
}
