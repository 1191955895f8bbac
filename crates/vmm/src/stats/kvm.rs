//! KVM's own per-vCPU statistics through its binary stats interface (KVM_GET_STATS_FD,
//! Documentation/virt/kvm/api.rst 4.133): e.g. `insn_emulation` shows whether guest code
//! ran through the host's emulator or natively.

use kvm_ioctls::VcpuFd;
use std::collections::BTreeMap;
use std::fs::File;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;
use vm_memory::ByteValued;

/// _IO(KVMIO, 0xce).
const KVM_GET_STATS_FD: libc::c_ulong = 0xae << 8 | 0xce;
/// Unit bits of a descriptor's flags (KVM_STATS_UNIT_MASK): only plain counts are shown.
const UNIT_MASK: u32 = 0xf << 4;

/// `struct kvm_stats_header` (kvm_bindings' has no `ByteValued`).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
#[allow(dead_code)] // KVM's layout, every field in place; not all are read
struct StatsHeader {
    flags: u32,
    name_size: u32,
    num_desc: u32,
    id_offset: u32,
    desc_offset: u32,
    data_offset: u32,
}

/// `struct kvm_stats_desc` without its name (which follows it, `name_size` bytes).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
#[allow(dead_code)] // as StatsHeader
struct StatsDesc {
    flags: u32,
    exponent: i16,
    size: u16,
    offset: u32,
    bucket_size: u32,
}

const _: () = assert!(size_of::<StatsHeader>() == size_of::<kvm_bindings::kvm_stats_header>());
const _: () = assert!(size_of::<StatsDesc>() == size_of::<kvm_bindings::kvm_stats_desc>());
// SAFETY: repr(C) integers without padding (sizes asserted against KVM's): any bytes are valid.
unsafe impl ByteValued for StatsHeader {}
// SAFETY: as StatsHeader.
unsafe impl ByteValued for StatsDesc {}

/// A vCPU's open stats file and where its values are.
#[derive(Debug)]
pub struct KvmStatsFile {
    file: File,
    /// (name, offset in the file) of every single-value statistic.
    values: Vec<(String, u64)>,
}

impl KvmStatsFile {
    /// Open `vcpu`'s statistics; None if this KVM has no binary stats.
    pub fn open(vcpu: &VcpuFd) -> Option<Self> {
        // SAFETY: KVM_GET_STATS_FD takes no argument and returns a new fd or -1.
        let fd = unsafe { libc::ioctl(vcpu.as_raw_fd(), KVM_GET_STATS_FD as _, 0) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        let header: StatsHeader = read_pod(&file, 0)?;
        let desc_size = size_of::<StatsDesc>() + header.name_size as usize;
        let mut values = Vec::new();
        for i in 0..u64::from(header.num_desc) {
            let at = u64::from(header.desc_offset) + i * desc_size as u64;
            let desc: StatsDesc = read_pod(&file, at)?;
            if desc.size != 1 || desc.flags & UNIT_MASK != 0 {
                continue;
            }
            let mut name = vec![0u8; header.name_size as usize];
            file.read_exact_at(&mut name, at + size_of::<StatsDesc>() as u64).ok()?;
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            let name = String::from_utf8_lossy(&name[..end]).into_owned();
            values.push((name, u64::from(header.data_offset) + u64::from(desc.offset)));
        }
        Some(KvmStatsFile { file, values })
    }

    /// The non-zero statistics now, by name.
    pub fn read(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (name, offset) in &self.values {
            let mut v = [0u8; 8];
            if self.file.read_exact_at(&mut v, *offset).is_ok() && u64::from_le_bytes(v) != 0 {
                out.insert(name.clone(), u64::from_le_bytes(v));
            }
        }
        out
    }
}

/// Read a plain-old-data struct of KVM's ABI at `offset` (`ByteValued`: any bytes are a T).
fn read_pod<T: ByteValued + Default>(file: &File, offset: u64) -> Option<T> {
    let mut value = T::default();
    file.read_exact_at(value.as_mut_slice(), offset).ok()?;
    Some(value)
}
