//! The perf agent channel (guest/include/abi/perfvm_agent.h): the guest writes the physical
//! address of a message with one 32-bit OUT to port 0x500; we copy the message out of guest
//! memory at once. Samples are kept up to a bound (a sample's call chain counts towards it
//! too); past it they are dropped and counted, so a guest cannot make the VMM grow without
//! limit.

use crate::guest_abi::{self as abi, read, read_prefix, MarkKind, MsgType};
use crate::profiling::Sample;
use pmu::tsc::TscRate;
use serde::Serialize;
use std::collections::BTreeMap;
use std::mem::size_of;
use std::time::Instant;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// The I/O port the guest writes message addresses to.
pub const AGENT_PORT: u16 = 0x500;
const MAGIC: u32 = abi::AGENT_MAGIC;
const HEADER_LEN: usize = size_of::<abi::AgentMsgHeader>();
/// Longest message payload taken (PERFVM_AGENT_MAX_MSG).
pub const MAX_AGENT_MSG: usize = 64 * 1024;
const MAX_MSG: usize = MAX_AGENT_MSG;
/// Default bound on stored sample slots: a sample takes one, plus one per call-chain entry
/// (48 bytes a sample, 8 an entry: at most ~200 MiB).
pub const DEFAULT_MAX_SAMPLES: usize = 4 << 20;
/// Longest call chain kept (`AGENT_CHAIN_MAX`); longer ones are cut.
pub const MAX_CALLCHAIN: usize = 32;

/// Counted on a fixed counter.
pub const COUNT_FIXED: u16 = 1 << 0;
/// The PMU does not advertise the event: `<not supported>`.
pub const COUNT_UNSUPPORTED: u16 = 1 << 1;

/// A workload phase mark: guest TSC and host time since the VM started.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Mark {
    /// The workload starts or ends.
    pub kind: MarkKind,
    /// The guest TSC at the mark.
    pub tsc: u64,
    /// When the mark arrived: host ns since the agent port was created (at VM build).
    pub host_ns: u64,
}

/// Everything the guest's agent sent.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AgentData {
    /// Every count received, in order.
    pub counts: Vec<abi::AgentCount>,
    /// Samples kept (at most the bound given to [`AgentPort::new`]).
    #[serde(skip)]
    pub samples: Vec<Sample>,
    /// Samples received, kept or not.
    pub samples_received: u64,
    /// Samples dropped by the VMM (bound reached).
    pub samples_dropped_vmm: u64,
    /// Samples the guest reported it could not buffer.
    pub samples_dropped_guest: u64,
    /// Workload phase marks, in order.
    pub marks: Vec<Mark>,
    /// Named values from guest-side benchmarks (e.g. `ctxsw.sched_in_cycles`).
    pub values: BTreeMap<String, u64>,
    /// Guest task names by task id.
    pub tasks: BTreeMap<u32, String>,
    /// Well-formed messages received.
    pub messages: u64,
    /// Messages rejected: bad magic, too long, truncated, unknown kind, outside memory.
    pub bad_messages: u64,
    /// Samples read from the guest's buffer after the run was stopped from outside.
    pub samples_drained: u64,
    /// Samples the VMM took for the agent at its counters' wraps (PV page version 5),
    /// counted in `samples_received` too.
    pub samples_by_vmm: u64,
    /// Slots the kept samples take (one each plus their call-chain entries).
    #[serde(skip)]
    sample_slots: usize,
}

impl AgentData {
    /// Host time between the workload's START and END marks.
    pub fn workload_ns(&self) -> Option<u64> {
        let start = self.marks.iter().find(|m| m.kind == MarkKind::Start)?;
        let end = self.marks.iter().rev().find(|m| m.kind == MarkKind::End)?;
        end.host_ns.checked_sub(start.host_ns)
    }
}

/// The device.
#[derive(Debug)]
pub struct AgentPort {
    mem: GuestMemoryMmap,
    started: Instant,
    /// The guest TSC's rate, to place samples in host time (None: unknown, times 0).
    tsc: Option<TscRate>,
    max_samples: usize,
    /// What the agent sent so far.
    pub data: AgentData,
    /// True between the workload's START and END marks (the host NMI source fires only then).
    pub in_workload: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Where the guest accumulates unsent samples (AGENT_MsgType::Buffer) and their message type.
    sample_buffer: Option<(u64, MsgType)>,
}

impl AgentPort {
    /// A port reading messages from `mem`, keeping at most `max_samples` sample slots (one
    /// per sample, plus one per call-chain entry); the guest TSC runs at `tsc_khz`.
    pub fn new(mem: GuestMemoryMmap, max_samples: usize, tsc_khz: u64) -> Self {
        AgentPort {
            mem,
            started: Instant::now(),
            tsc: TscRate::from_khz(tsc_khz),
            max_samples,
            data: AgentData::default(),
            in_workload: Default::default(),
            sample_buffer: None,
        }
    }

    /// An OUT to the port: `data` holds the message address.
    pub fn write(&mut self, data: &[u8]) {
        if self.receive(u64::from(super::le_u32(data))).is_none() {
            self.data.bad_messages += 1;
        }
    }

    /// The run was stopped from outside: take the samples the guest had not sent yet.
    pub fn drain_unsent_samples(&mut self) {
        let Some((addr, kind)) = self.sample_buffer.take() else { return };
        let payload = addr + HEADER_LEN as u64;
        let Ok(n) = self.mem.read_obj::<u32>(GuestAddress(payload)) else { return };
        // Variable-length records: read what the largest message could hold.
        let len = match kind {
            MsgType::Samples2 => MAX_MSG,
            _ => (size_of::<abi::AgentSamples>() + n as usize * size_of::<abi::AgentSample>()).min(MAX_MSG),
        };
        let mut bytes = vec![0u8; len];
        if self.mem.read_slice(&mut bytes, GuestAddress(payload)).is_ok() && self.parse(kind, &bytes).is_some() {
            self.data.samples_drained = u64::from(n);
        }
    }

    fn receive(&mut self, addr: u64) -> Option<()> {
        let header: abi::AgentMsgHeader = self.mem.read_obj(GuestAddress(addr)).ok()?;
        let len = header.len as usize;
        if header.magic != MAGIC || len > MAX_MSG {
            return None;
        }
        let kind = MsgType::try_from(header.r#type).ok()?;
        let mut payload = vec![0u8; len];
        self.mem.read_slice(&mut payload, GuestAddress(addr + HEADER_LEN as u64)).ok()?;
        self.parse(kind, &payload)?;
        self.data.messages += 1;
        Some(())
    }

    fn parse(&mut self, kind: MsgType, p: &[u8]) -> Option<()> {
        let text = |b: &[u8]| String::from_utf8_lossy(b.split(|&c| c == 0).next().unwrap_or(&[])).into_owned();
        match kind {
            MsgType::Counts => {
                let head: abi::AgentCounts = read(p, 0)?;
                // entry_size: 0 from agents that predate it (16-byte entries, no times).
                let stride = match head.entry_size as usize {
                    0 => abi::COUNT_V1_LEN,
                    s if (abi::COUNT_V1_LEN..=1024).contains(&s) && s % 8 == 0 => s,
                    _ => return None,
                };
                let len = stride.min(size_of::<abi::AgentCount>());
                for i in 0..head.n as usize {
                    let o = size_of::<abi::AgentCounts>() + i.checked_mul(stride)?;
                    self.data.counts.push(read_prefix(p, o, len)?);
                }
            }
            MsgType::Samples => {
                let head: abi::AgentSamples = read(p, 0)?;
                self.data.samples_dropped_guest += u64::from(head.dropped);
                for i in 0..head.n as usize {
                    let o = size_of::<abi::AgentSamples>() + i * size_of::<abi::AgentSample>();
                    let s: abi::AgentSample = read(p, o)?;
                    let sample =
                        Sample { time_ns: 0, vcpu: 0, task: s.task, event: s.event, ip: s.rip, callchain: Vec::new() };
                    self.keep(sample);
                }
            }
            MsgType::Samples2 => {
                let head: abi::AgentSamples = read(p, 0)?;
                self.data.samples_dropped_guest += u64::from(head.dropped);
                let mut o = size_of::<abi::AgentSamples>();
                for _ in 0..head.n {
                    let s: abi::AgentSample2 = read(p, o)?;
                    let nr = usize::from(s.nr);
                    let chain = o + size_of::<abi::AgentSample2>();
                    let words =
                        (0..nr.min(MAX_CALLCHAIN)).map(|k| read::<u64>(p, chain + 8 * k)).collect::<Option<_>>()?;
                    let sample = Sample {
                        time_ns: self.host_ns_at(s.tsc),
                        vcpu: u32::from(s.vcpu),
                        task: s.task,
                        event: s.event,
                        ip: s.rip,
                        callchain: words,
                    };
                    o = chain + 8 * nr;
                    self.keep(sample);
                }
            }
            MsgType::Mark => {
                let host_ns = self.started.elapsed().as_nanos() as u64;
                let m: abi::AgentMark = read(p, 0)?;
                let kind = MarkKind::try_from(m.kind).ok()?;
                self.in_workload.store(kind == MarkKind::Start, std::sync::atomic::Ordering::Release);
                self.data.marks.push(Mark { kind, tsc: m.tsc, host_ns });
            }
            MsgType::Value => {
                let v: abi::AgentValue = read(p, 0)?;
                self.data.values.insert(text(&v.key), v.value);
            }
            MsgType::Buffer => {
                // The message type of the buffer's samples; an 8-byte payload predates it.
                let b: abi::AgentBuffer = read_prefix(p, 0, p.len().min(size_of::<abi::AgentBuffer>()))?;
                let kind = match p.len() >= std::mem::offset_of!(abi::AgentBuffer, reserved) {
                    true => MsgType::try_from(u16::try_from(b.r#type).ok()?).ok()?,
                    false => MsgType::Samples,
                };
                if p.len() < size_of::<u64>() || !matches!(kind, MsgType::Samples | MsgType::Samples2) {
                    return None;
                }
                self.sample_buffer = Some((b.samples_msg, kind));
            }
            MsgType::Task => {
                let t: abi::AgentTask = read(p, 0)?;
                self.data.tasks.insert(t.id, text(&t.name));
            }
        }
        Some(())
    }

    /// Guest TSC `tsc` as host ns since the port was created, through the workload's START
    /// mark (which comes before its samples); 0 without a TSC, a mark or a rate.
    fn host_ns_at(&self, tsc: u64) -> u64 {
        let start = self.data.marks.iter().find(|m| m.kind == MarkKind::Start);
        match (start, self.tsc) {
            (Some(m), Some(rate)) if tsc != 0 => {
                let ns = i128::from(m.host_ns) + rate.delta_ns(i128::from(tsc) - i128::from(m.tsc));
                ns.clamp(0, i128::from(u64::MAX)) as u64
            }
            _ => 0,
        }
    }

    /// A sample the VMM took for the agent at `at` (PV page version 5: at the exit where a
    /// sampling counter wrapped, instead of a PMI): kept as the agent's own are, placed in
    /// host time by when it was taken.
    pub fn keep_vmm_sample(&mut self, at: Instant, mut sample: Sample) {
        sample.time_ns = at.saturating_duration_since(self.started).as_nanos() as u64;
        self.data.samples_by_vmm += 1;
        self.keep(sample);
    }

    /// Keep a received sample if the bound allows: one slot, plus one per chain entry.
    fn keep(&mut self, sample: Sample) {
        self.data.samples_received += 1;
        let slots = 1 + sample.callchain.len();
        if self.data.sample_slots + slots <= self.max_samples {
            self.data.sample_slots += slots;
            self.data.samples.push(sample);
        } else {
            self.data.samples_dropped_vmm += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: MsgType, payload: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&MAGIC.to_le_bytes());
        m.extend_from_slice(&(kind as u16).to_le_bytes());
        m.extend_from_slice(&0u16.to_le_bytes());
        m.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        m.extend_from_slice(&0u32.to_le_bytes());
        m.extend_from_slice(payload);
        m
    }

    /// A port whose guest TSC runs at 1 GHz: a cycle a ns.
    fn port(max_samples: usize) -> AgentPort {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
        AgentPort::new(mem, max_samples, 1_000_000)
    }

    /// Send the workload's START mark at guest TSC `tsc`; returns its host time.
    fn start_mark(port: &mut AgentPort, tsc: u64) -> u64 {
        let mut mark = 1u32.to_le_bytes().to_vec();
        mark.extend_from_slice(&0u32.to_le_bytes());
        mark.extend_from_slice(&tsc.to_le_bytes());
        send(port, 0x800, &message(MsgType::Mark, &mark));
        port.data.marks.last().unwrap().host_ns
    }

    fn send(port: &mut AgentPort, at: u64, msg: &[u8]) {
        port.mem.write_slice(msg, GuestAddress(at)).unwrap();
        port.write(&(at as u32).to_le_bytes());
    }

    #[test]
    fn counts_samples_values_tasks() {
        let mut p = port(10);
        let mut counts = vec![];
        counts.extend_from_slice(&1u32.to_le_bytes());
        counts.extend_from_slice(&0u32.to_le_bytes());
        counts.extend_from_slice(&0x00c0u16.to_le_bytes());
        counts.extend_from_slice(&COUNT_FIXED.to_le_bytes());
        counts.extend_from_slice(&0u32.to_le_bytes());
        counts.extend_from_slice(&12345u64.to_le_bytes());
        send(&mut p, 0x1000, &message(MsgType::Counts, &counts));
        assert_eq!(
            p.data.counts,
            vec![abi::AgentCount {
                event: 0xc0,
                flags: COUNT_FIXED,
                task: 0,
                value: 12345,
                time_enabled: 0,
                time_running: 0
            }]
        );

        let mut samples = vec![];
        samples.extend_from_slice(&2u32.to_le_bytes());
        samples.extend_from_slice(&3u32.to_le_bytes());
        for rip in [0x100000u64, 0x100010] {
            samples.extend_from_slice(&rip.to_le_bytes());
            samples.extend_from_slice(&7u32.to_le_bytes());
            samples.extend_from_slice(&0x3cu16.to_le_bytes());
            samples.extend_from_slice(&0u16.to_le_bytes());
        }
        send(&mut p, 0x2000, &message(MsgType::Samples, &samples));
        assert_eq!(p.data.samples.len(), 2);
        assert_eq!(
            p.data.samples[1],
            Sample { time_ns: 0, vcpu: 0, task: 7, event: 0x3c, ip: 0x100010, callchain: vec![] }
        );
        assert_eq!(p.data.samples_dropped_guest, 3);

        let mut value = vec![0u8; 56];
        value[..5].copy_from_slice(b"a.key");
        value[48..].copy_from_slice(&99u64.to_le_bytes());
        send(&mut p, 0x3000, &message(MsgType::Value, &value));
        assert_eq!(p.data.values.get("a.key"), Some(&99));

        let mut task = vec![0u8; 32];
        task[..4].copy_from_slice(&2u32.to_le_bytes());
        task[4..10].copy_from_slice(b"task-b");
        send(&mut p, 0x4000, &message(MsgType::Task, &task));
        assert_eq!(p.data.tasks.get(&2).map(String::as_str), Some("task-b"));
        assert_eq!((p.data.messages, p.data.bad_messages), (4, 0));
    }

    /// A `struct agent_sample2` record with its chain.
    fn sample2(rip: u64, tsc: u64, task: u32, event: u16, chain: &[u64]) -> Vec<u8> {
        sample2_on(rip, tsc, task, event, chain, 0)
    }

    fn sample2_on(rip: u64, tsc: u64, task: u32, event: u16, chain: &[u64], vcpu: u8) -> Vec<u8> {
        let mut r = vec![];
        r.extend_from_slice(&rip.to_le_bytes());
        r.extend_from_slice(&tsc.to_le_bytes());
        r.extend_from_slice(&task.to_le_bytes());
        r.extend_from_slice(&event.to_le_bytes());
        r.push(chain.len() as u8);
        r.push(vcpu);
        chain.iter().for_each(|w| r.extend_from_slice(&w.to_le_bytes()));
        r
    }

    fn samples2(records: &[Vec<u8>], dropped: u32) -> Vec<u8> {
        let mut p = vec![];
        p.extend_from_slice(&(records.len() as u32).to_le_bytes());
        p.extend_from_slice(&dropped.to_le_bytes());
        records.iter().for_each(|r| p.extend_from_slice(r));
        p
    }

    #[test]
    fn counts_with_times_and_larger_entries() {
        let mut p = port(10);
        let mut counts = vec![];
        counts.extend_from_slice(&2u32.to_le_bytes());
        counts.extend_from_slice(&40u32.to_le_bytes()); // a future entry: 8 bytes we do not know
        for (event, value, enabled, running) in [(0x3cu16, 500u64, 1000u64, 250u64), (0x13c, 700, 1000, 1000)] {
            counts.extend_from_slice(&event.to_le_bytes());
            counts.extend_from_slice(&0u16.to_le_bytes());
            counts.extend_from_slice(&0u32.to_le_bytes());
            for v in [value, enabled, running, 0xdead] {
                counts.extend_from_slice(&v.to_le_bytes());
            }
        }
        send(&mut p, 0x1000, &message(MsgType::Counts, &counts));
        let c = &p.data.counts;
        assert_eq!((c.len(), c[0].value, c[0].time_enabled, c[0].time_running), (2, 500, 1000, 250));
        assert_eq!((c[1].event, c[1].time_running), (0x13c, 1000));
        // An entry size that cannot be: rejected, not misread.
        let mut bad = counts.clone();
        bad[4..8].copy_from_slice(&12u32.to_le_bytes());
        send(&mut p, 0x2000, &message(MsgType::Counts, &bad));
        assert_eq!((p.data.counts.len(), p.data.bad_messages), (2, 1));
    }

    #[test]
    fn samples_with_time_and_call_chains() {
        let mut p = port(100);
        // The workload's START mark at guest TSC 700 places the samples' TSCs in host time.
        let start = start_mark(&mut p, 700);
        let records =
            [sample2(0x100000, 777, 3, 0x3c, &[0x100100, 0x100200]), sample2_on(0x100010, 778, 0, 0x3c, &[], 5)];
        send(&mut p, 0x1000, &message(MsgType::Samples2, &samples2(&records, 1)));
        let chain = vec![0x100100, 0x100200];
        assert_eq!(
            p.data.samples,
            vec![
                Sample { time_ns: start + 77, vcpu: 0, task: 3, event: 0x3c, ip: 0x100000, callchain: chain },
                Sample { time_ns: start + 78, vcpu: 5, task: 0, event: 0x3c, ip: 0x100010, callchain: vec![] },
            ]
        );
        assert_eq!((p.data.samples_dropped_guest, p.data.bad_messages), (1, 0));
        // A chain longer than the agent's bound is cut; the next record is still found.
        let long: Vec<u64> = (1..=40).collect();
        let records = [sample2(1, 2, 0, 0x3c, &long), sample2(3, 4, 0, 0x3c, &[9])];
        send(&mut p, 0x2000, &message(MsgType::Samples2, &samples2(&records, 0)));
        assert_eq!(p.data.samples[2].callchain.len(), MAX_CALLCHAIN);
        assert_eq!((p.data.samples[3].ip, &p.data.samples[3].callchain), (3, &vec![9]));
        // A record claiming a chain past the message's end: the message is bad.
        let mut truncated = samples2(&[sample2(5, 6, 0, 0x3c, &[1, 2])], 0);
        truncated.truncate(truncated.len() - 8);
        send(&mut p, 0x3000, &message(MsgType::Samples2, &truncated));
        assert_eq!((p.data.samples.len(), p.data.bad_messages), (4, 1));
    }

    #[test]
    fn call_chains_count_towards_the_sample_bound() {
        let mut p = port(6);
        let records =
            [sample2(1, 0, 0, 0x3c, &[1, 2, 3]), sample2(2, 0, 0, 0x3c, &[1, 2]), sample2(3, 0, 0, 0x3c, &[1])];
        send(&mut p, 0x1000, &message(MsgType::Samples2, &samples2(&records, 0)));
        // 4 slots, then 3 would make 7 > 6: dropped; then 2 fit.
        assert_eq!(p.data.samples.iter().map(|s| s.ip).collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!((p.data.samples_received, p.data.samples_dropped_vmm), (3, 1));
    }

    #[test]
    fn unsent_samples2_are_drained_by_the_buffer_type() {
        let mut p = port(10);
        let start = start_mark(&mut p, 50);
        let mut buffer = vec![0u8; HEADER_LEN];
        buffer.extend_from_slice(&samples2(&[sample2(0x4321, 55, 1, 0x3c, &[0x100100])], 0));
        p.mem.write_slice(&buffer, GuestAddress(0x8000)).unwrap();
        let mut announce = 0x8000u64.to_le_bytes().to_vec();
        announce.extend_from_slice(&(MsgType::Samples2 as u32).to_le_bytes());
        announce.extend_from_slice(&0u32.to_le_bytes());
        send(&mut p, 0x1000, &message(MsgType::Buffer, &announce));
        p.drain_unsent_samples();
        assert_eq!(p.data.samples.len(), 1);
        assert_eq!(
            (p.data.samples[0].ip, p.data.samples[0].time_ns, &p.data.samples[0].callchain),
            (0x4321, start + 5, &vec![0x100100])
        );
        // An unknown buffer type is refused.
        announce[8] = 9;
        send(&mut p, 0x2000, &message(MsgType::Buffer, &announce));
        assert_eq!(p.data.bad_messages, 1);
    }

    #[test]
    fn unsent_samples_are_drained_from_the_announced_buffer() {
        let mut p = port(10);
        let mut buffer = message(MsgType::Samples, &[]);
        let mut payload = vec![];
        payload.extend_from_slice(&1u32.to_le_bytes());
        payload.extend_from_slice(&0u32.to_le_bytes());
        payload.extend_from_slice(&0x1234u64.to_le_bytes());
        payload.extend_from_slice(&[0u8; 8]);
        buffer.truncate(HEADER_LEN);
        buffer.extend_from_slice(&payload);
        p.mem.write_slice(&buffer, GuestAddress(0x8000)).unwrap();
        send(&mut p, 0x1000, &message(MsgType::Buffer, &0x8000u64.to_le_bytes()));
        assert!(p.data.samples.is_empty());
        p.drain_unsent_samples();
        assert_eq!(p.data.samples.len(), 1);
        assert_eq!(p.data.samples[0].ip, 0x1234);
        assert_eq!(p.data.samples_drained, 1);
    }

    #[test]
    fn sample_storage_is_bounded() {
        let mut p = port(1);
        let mut samples = vec![];
        samples.extend_from_slice(&3u32.to_le_bytes());
        samples.extend_from_slice(&0u32.to_le_bytes());
        samples.extend(std::iter::repeat_n(0u8, 48));
        send(&mut p, 0x1000, &message(MsgType::Samples, &samples));
        assert_eq!((p.data.samples.len(), p.data.samples_dropped_vmm, p.data.samples_received), (1, 2, 3));
    }

    #[test]
    fn malformed_messages_are_counted_not_fatal() {
        let mut p = port(1);
        send(&mut p, 0x1000, &[0u8; 16]); // bad magic
        let mut huge = message(MsgType::Counts, &[]);
        huge[8..12].copy_from_slice(&(MAX_MSG as u32 + 1).to_le_bytes());
        send(&mut p, 0x2000, &huge);
        send(&mut p, 0x3000, &message(MsgType::Counts, &[5, 0, 0, 0, 0, 0, 0, 0])); // 5 entries, none there
        p.write(&0xffff_fff0u32.to_le_bytes()); // outside guest memory
        assert_eq!(p.data.bad_messages, 4);
    }
}
