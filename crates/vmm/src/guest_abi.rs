//! The guest ABIs' structs as C lays them out (guest/include/abi/perfvm_agent.h, perfvm_boot.h),
//! read and written whole through vm-memory's `ByteValued` instead of by hand offsets. The
//! sizes and offsets are asserted at compile time here, and against the C headers by
//! `tests/guest_abi.rs` (which builds a probe with the guest kit's compiler).
// The fields are the C headers' fields, documented there once.
#![allow(missing_docs)]

use std::mem::{offset_of, size_of};
use vm_memory::ByteValued;

/// PERFVM_AGENT_MAGIC: "PAGT", the first word of every agent message.
pub const AGENT_MAGIC: u32 = 0x5447_4150;

/// `enum perfvm_agent_msg_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum MsgType {
    /// `struct agent_counts`.
    Counts = 1,
    /// `struct agent_samples` (the original format).
    Samples = 2,
    /// `struct agent_mark`.
    Mark = 3,
    /// `struct agent_value`.
    Value = 4,
    /// `struct agent_task`.
    Task = 5,
    /// `struct agent_buffer`.
    Buffer = 6,
    /// `struct agent_samples2` (what the kit's agent sends).
    Samples2 = 7,
}

impl TryFrom<u16> for MsgType {
    type Error = u16;
    fn try_from(v: u16) -> Result<Self, u16> {
        Ok(match v {
            1 => MsgType::Counts,
            2 => MsgType::Samples,
            3 => MsgType::Mark,
            4 => MsgType::Value,
            5 => MsgType::Task,
            6 => MsgType::Buffer,
            7 => MsgType::Samples2,
            _ => return Err(v),
        })
    }
}

/// `enum agent_mark_kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u32)]
pub enum MarkKind {
    /// The workload starts.
    Start = 1,
    /// The workload ends.
    End = 2,
}

impl TryFrom<u32> for MarkKind {
    type Error = u32;
    fn try_from(v: u32) -> Result<Self, u32> {
        match v {
            1 => Ok(MarkKind::Start),
            2 => Ok(MarkKind::End),
            _ => Err(v),
        }
    }
}

/// `struct agent_msg_header`.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub struct AgentMsgHeader {
    pub magic: u32,
    pub r#type: u16,
    pub vcpu: u16,
    pub len: u32,
    pub reserved: u32,
}

/// `struct agent_count`, one event's final count; an entry of `entry_size` 0 is its first
/// `COUNT_V1_LEN` bytes (no times). perf scales `value * time_enabled / time_running`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[repr(C)]
pub struct AgentCount {
    pub event: u16,
    pub flags: u16,
    pub task: u32,
    pub value: u64,
    pub time_enabled: u64,
    pub time_running: u64,
}

/// The original `struct agent_count`: without the times.
pub const COUNT_V1_LEN: usize = offset_of!(AgentCount, time_enabled);

/// The head of `struct agent_counts`; the entries follow.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub struct AgentCounts {
    pub n: u32,
    pub entry_size: u32,
}

/// `struct agent_sample`.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub struct AgentSample {
    pub rip: u64,
    pub task: u32,
    pub event: u16,
    pub reserved: u16,
}

/// The head of `struct agent_samples` and `struct agent_samples2`; the records follow.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub struct AgentSamples {
    pub n: u32,
    pub dropped: u32,
}

/// `struct agent_sample2`; its `nr` call-chain words follow.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub struct AgentSample2 {
    pub rip: u64,
    pub tsc: u64,
    pub task: u32,
    pub event: u16,
    /// Call-chain words that follow (at most AGENT_CHAIN_MAX).
    pub nr: u8,
    /// The vCPU whose PMI took the sample (an older agent's 16-bit nr: its high byte, 0).
    pub vcpu: u8,
}

/// `struct agent_mark`.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub struct AgentMark {
    pub kind: u32,
    pub reserved: u32,
    pub tsc: u64,
}

/// `struct agent_value`.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct AgentValue {
    pub key: [u8; 48],
    pub value: u64,
}

impl Default for AgentValue {
    fn default() -> Self {
        AgentValue { key: [0; 48], value: 0 }
    }
}

/// `struct agent_buffer`; an 8-byte one (no type) means `MsgType::Samples`.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub struct AgentBuffer {
    pub samples_msg: u64,
    pub r#type: u32,
    pub reserved: u32,
}

/// `struct agent_task`.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub struct AgentTask {
    pub id: u32,
    pub name: [u8; 28],
}

/// `struct perfvm_boot_info`.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub struct BootInfo {
    pub magic: u32,
    pub version: u32,
    pub mem_size: u64,
    pub cmdline: u64,
    pub cmdline_len: u32,
    pub nr_vcpus: u32,
    pub tsc_khz: u64,
    pub flags: u32,
    pub reserved: u32,
    pub vif_base: u64,
    pub cpuid_table: u64,
    pub cpuid_entries: u32,
    pub reserved2: u32,
}

/// `struct perfvm_cpuid_entry`.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub struct CpuidEntry {
    pub leaf: u32,
    pub subleaf: u32,
    pub flags: u32,
    pub eax: u32,
    pub ebx: u32,
    pub ecx: u32,
    pub edx: u32,
    pub reserved: u32,
}

/// Marks each ABI struct `ByteValued`.
macro_rules! byte_valued {
    ($($t:ty),* $(,)?) => {$(
        // SAFETY: each is repr(C) of integers and byte arrays laid out without padding (the
        // sizes asserted below equal the sums of the fields): every byte pattern is a valid value.
        unsafe impl ByteValued for $t {}
    )*};
}

byte_valued!(
    AgentMsgHeader,
    AgentCount,
    AgentCounts,
    AgentSample,
    AgentSamples,
    AgentSample2,
    AgentMark,
    AgentValue,
    AgentBuffer,
    AgentTask,
    BootInfo,
    CpuidEntry,
);

/// (C name, Rust size, [(field, offset)]) of every struct above: what `tests/guest_abi.rs`
/// compares with the C compiler's `sizeof`/`offsetof`.
macro_rules! layouts {
    ($($c:literal => $t:ty { $($f:ident),* })*) => {
        /// Every guest ABI struct's C name, size and field offsets, as Rust lays them out.
        pub const LAYOUTS: &[(&str, usize, &[(&str, usize)])] = &[
            $(($c, size_of::<$t>(), &[$((stringify!($f), offset_of!($t, $f))),*])),*
        ];
    };
}

layouts! {
    "agent_msg_header" => AgentMsgHeader { magic, r#type, vcpu, len, reserved }
    "agent_count" => AgentCount { event, flags, task, value, time_enabled, time_running }
    "agent_counts" => AgentCounts { n, entry_size }
    "agent_sample" => AgentSample { rip, task, event, reserved }
    "agent_samples" => AgentSamples { n, dropped }
    "agent_samples2" => AgentSamples { n, dropped }
    "agent_sample2" => AgentSample2 { rip, tsc, task, event, nr, vcpu }
    "agent_mark" => AgentMark { kind, reserved, tsc }
    "agent_value" => AgentValue { key, value }
    "agent_buffer" => AgentBuffer { samples_msg, r#type, reserved }
    "agent_task" => AgentTask { id, name }
    "perfvm_boot_info" => BootInfo {
        magic, version, mem_size, cmdline, cmdline_len, nr_vcpus, tsc_khz, flags, reserved, vif_base,
        cpuid_table, cpuid_entries, reserved2
    }
    "perfvm_cpuid_entry" => CpuidEntry { leaf, subleaf, flags, eax, ebx, ecx, edx, reserved }
}

/// The headers' constants both sides use, by their C names (compared by `tests/guest_abi.rs`).
pub const CONSTANTS: &[(&str, u64)] = {
    use crate::arch::x86_64::layout::*;
    use crate::arch::x86_64::perfvm_leaf::{Backend, SIGNATURE, SIGNATURE_LEAF, VPMU_LEAF};
    &[
        ("PERFVM_AGENT_MAGIC", AGENT_MAGIC as u64),
        ("PERFVM_PORT_AGENT", crate::devices::AGENT_PORT as u64),
        ("PERFVM_AGENT_MAX_MSG", crate::devices::MAX_AGENT_MSG as u64),
        ("AGENT_CHAIN_MAX", crate::devices::MAX_CALLCHAIN as u64),
        ("PERFVM_BOOT_MAGIC", BOOT_MAGIC as u64),
        ("PERFVM_BOOT_VERSION", BOOT_VERSION as u64),
        ("PERFVM_BOOT_INFO_ADDR", BOOT_INFO_ADDR),
        ("PERFVM_CMDLINE_ADDR", CMDLINE_ADDR),
        ("PERFVM_CMDLINE_MAX", CMDLINE_MAX as u64),
        ("PERFVM_VIF_BASE", VIF_BASE),
        ("PERFVM_CPUID_TABLE", CPUID_TABLE_BASE),
        ("PERFVM_BOOT_F_NATIVE", BOOT_F_NATIVE as u64),
        ("PERFVM_BOOT_F_STEPPED", BOOT_F_STEPPED as u64),
        ("PERFVM_BOOT_F_HARDWARE", BOOT_F_HARDWARE as u64),
        ("PERFVM_BOOT_F_BLOCKS", BOOT_F_BLOCKS as u64),
        ("PERFVM_CPUID_SIGNATURE", SIGNATURE_LEAF as u64),
        ("PERFVM_CPUID_SIGNATURE_EBX", SIGNATURE[0] as u64),
        ("PERFVM_CPUID_SIGNATURE_ECX", SIGNATURE[1] as u64),
        ("PERFVM_CPUID_SIGNATURE_EDX", SIGNATURE[2] as u64),
        ("PERFVM_CPUID_VPMU", VPMU_LEAF as u64),
        ("PERFVM_BACKEND_NONE", Backend::None as u64),
        ("PERFVM_BACKEND_PERF", Backend::Perf as u64),
        ("PERFVM_BACKEND_EXACT", Backend::Exact as u64),
        ("PERFVM_PORT_PV_REGISTER", crate::vpmu::pv::REGISTER_PORT as u64),
        ("PERFVM_PORT_PV_DOORBELL", crate::vpmu::pv::DOORBELL_PORT as u64),
        ("PV_HOST_VERSION", crate::vpmu::pv::HOST_VERSION as u64),
        ("PV_COUNTERS", pmu::PMC_SLOTS as u64),
        ("sizeof(struct pv_page_v2)", crate::vpmu::pv::V2_SIZE as u64),
        ("sizeof(struct pv_sampling)", crate::vpmu::pv::sampling::SIZE as u64),
        ("sizeof(struct pv_vmm_sampling)", crate::vpmu::pv::vmm_samples::SIZE as u64),
        ("offsetof(struct pv_page_v5, vmm)", crate::vpmu::pv::V3_SIZE as u64),
    ]
};

// The layouts the C headers document, checked where the compiler can: no padding crept in.
const _: () = assert!(size_of::<AgentMsgHeader>() == 16);
const _: () = assert!(size_of::<AgentCount>() == 32 && COUNT_V1_LEN == 16);
const _: () = assert!(size_of::<AgentCounts>() == 8 && size_of::<AgentSamples>() == 8);
const _: () = assert!(size_of::<AgentSample>() == 16);
const _: () = assert!(
    size_of::<AgentSample2>() == 24 && offset_of!(AgentSample2, nr) == 22 && offset_of!(AgentSample2, vcpu) == 23
);
const _: () = assert!(size_of::<AgentMark>() == 16 && offset_of!(AgentMark, tsc) == 8);
const _: () = assert!(size_of::<AgentValue>() == 56 && offset_of!(AgentValue, value) == 48);
const _: () = assert!(size_of::<AgentBuffer>() == 16 && offset_of!(AgentBuffer, r#type) == 8);
const _: () = assert!(size_of::<AgentTask>() == 32 && offset_of!(AgentTask, name) == 4);
const _: () = assert!(size_of::<BootInfo>() == 72 && offset_of!(BootInfo, cpuid_entries) == 64);
const _: () = assert!(size_of::<CpuidEntry>() == 32);

/// `T` from `p[o..]`, or None where `p` is too short.
pub fn read<T: ByteValued + Default>(p: &[u8], o: usize) -> Option<T> {
    read_prefix(p, o, size_of::<T>())
}

/// `T` from its first `len` bytes at `p[o..]` (the rest zero): an older, shorter version of
/// the struct. None where `p` is too short or `len` longer than `T`.
pub fn read_prefix<T: ByteValued + Default>(p: &[u8], o: usize, len: usize) -> Option<T> {
    let bytes = p.get(o..o.checked_add(len)?)?;
    let mut t = T::default();
    t.as_mut_slice().get_mut(..len)?.copy_from_slice(bytes);
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_take_little_endian_bytes_at_any_alignment() {
        let mut p = vec![0xffu8; 3];
        p.extend_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
        p.extend_from_slice(&[0; 8]);
        p.extend_from_slice(&7u32.to_le_bytes());
        p.extend_from_slice(&0x3cu16.to_le_bytes());
        p.extend_from_slice(&[2, 1]);
        let s: AgentSample2 = read(&p, 3).unwrap();
        assert_eq!((s.rip, s.task, s.event, s.nr, s.vcpu), (0x1122_3344_5566_7788, 7, 0x3c, 2, 1));
        assert!(read::<AgentSample2>(&p, 4).is_none(), "one byte short");
        let v1: AgentCount = read_prefix(&p, 3, COUNT_V1_LEN).unwrap();
        assert_eq!((v1.event, v1.time_enabled), (0x7788, 0), "the times a v1 entry lacks are 0");
        assert!(read_prefix::<AgentMark>(&p, 0, 17).is_none(), "longer than the struct");
    }

    #[test]
    fn message_and_mark_kinds_round_trip() {
        for t in 1..=7u16 {
            assert_eq!(MsgType::try_from(t).map(|m| m as u16), Ok(t));
        }
        assert_eq!(MsgType::try_from(8), Err(8));
        assert_eq!(MarkKind::try_from(2), Ok(MarkKind::End));
        assert_eq!(MarkKind::try_from(0), Err(0));
    }
}
