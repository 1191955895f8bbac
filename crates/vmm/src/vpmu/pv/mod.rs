//! The paravirtual PMU page (guest/include/abi/perfvm_pv.h): version negotiation, batched
//! counter programming in one exit, and pvclock-style published counters that the guest
//! reads without an exit where the backend allows it. Version 3's paravirtual sampling is
//! `sampling`, version 5's samples taken by the VMM `vmm_samples`.

pub mod sampling;
pub mod vmm_samples;

use pmu::{CountSource, EventSet, Initiator, MsrIndex, PmcIdx, Pmu, PmuState};
use serde::Serialize;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Newest page version this VMM speaks; it also accepts every older one.
pub const HOST_VERSION: u32 = 5;
/// The guest writes its page's guest-physical address here (0 withdraws it).
pub const REGISTER_PORT: u16 = 0x504;
/// A write here applies the page's batch of MSR writes in this one exit.
pub const DOORBELL_PORT: u16 = 0x508;
const F_ACCEPTED: u32 = 1 << 0;
const F_EXITLESS_READS: u32 = 1 << 1;
/// Version 3: the sampling section is honoured (sampling.rs).
const F_AUTO_RELOAD: u32 = 1 << 2;
/// Version 5: the VMM takes the samples of reloaded counters (vmm_samples.rs).
const F_VMM_SAMPLES: u32 = 1 << 3;
const C_RUNNING: u32 = 1 << 0;
const C_NEEDS_EXIT: u32 = 1 << 1;
/// Version 4: a running counter's `tsc` is the TSC at which `base` was read (within a
/// read(2), ~1 us), not a later one: two publishes bracket exactly the ticks their
/// counts' difference was counted in.
const C_TSC_AT_READ: u32 = 1 << 2;
const BATCH_MAX: u32 = 32;
const V1_SIZE: u32 = 32 + 32 * 16;
const COUNTER_SIZE: u64 = 40;
/// Size of a version-2 page (the version-3 sampling section starts here).
pub const V2_SIZE: u32 = V1_SIZE + 11 * COUNTER_SIZE as u32;
/// Size of a version-3 (and 4) page (the version-5 section starts here).
pub const V3_SIZE: u32 = V2_SIZE + sampling::SIZE;
const V5_SIZE: u32 = V3_SIZE + vmm_samples::SIZE;
const COUNTERS_OFFSET: u64 = V1_SIZE as u64;
/// Fixed point of a rate of one count per TSC tick: the software clock never runs faster.
const FULL_RATE: u64 = 1 << RATE_SHIFT;
/// Rates are published as fixed point with 31 fraction bits (mult, shift = 31): rates of
/// 0 to 2 counts per TSC tick fit the page's 32-bit mult.
const RATE_SHIFT: u32 = 31;

/// Estimates the vCPU thread's share of wall time, i.e. the rate at which a thread-time
/// clock advances per TSC tick, from the thread CPU clock and the wall clock at each publish.
///
/// The bound is what can be promised, not what was seen: the host may preempt the thread
/// at any moment after a publish (and on a busy host it does, for milliseconds), and the
/// guest cannot tell (no steal time here). Since the last publish the clock advanced by
/// between none and all of the TSC ticks, so the estimate `rate` is off by at most
/// max(rate, 1 - rate) of the ticks: that, never less than half, is the published bound.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuShare {
    last: Option<(u64, u64)>, // (thread cpu ns, wall ns)
    /// Share, fixed point with RATE_SHIFT fraction bits (0: none observed yet).
    rate: u64,
}

impl CpuShare {
    /// Fold in the clocks now.
    pub fn observe(&mut self, cpu_ns: u64, wall_ns: u64) {
        if let Some((c0, w0)) = self.last {
            let (dc, dw) = (cpu_ns.saturating_sub(c0), wall_ns.saturating_sub(w0));
            // Short intervals say little: wait for a millisecond of wall time.
            if dw < 1_000_000 {
                return;
            }
            let observed = ((u128::from(dc.min(dw)) << RATE_SHIFT) / u128::from(dw)) as u64;
            self.rate = if self.rate == 0 { observed } else { (self.rate + observed) / 2 };
        }
        self.last = Some((cpu_ns, wall_ns));
    }

    /// The rate to publish (1.0 before any observation).
    pub fn mult(&self) -> u64 {
        if self.rate == 0 {
            FULL_RATE
        } else {
            self.rate.min(FULL_RATE)
        }
    }

    /// The bound to publish, in parts per million of the ticks since the publish.
    pub fn err_ppm(&self) -> u32 {
        let worst = self.mult().max(FULL_RATE - self.mult());
        ((u128::from(worst) * 1_000_000) >> RATE_SHIFT) as u32
    }
}

/// The page size a guest of `version` must declare.
pub fn expected_size(version: u32) -> Option<u32> {
    match version {
        1 => Some(V1_SIZE),
        2 => Some(V2_SIZE),
        // Version 4 changes what a running counter's `tsc` means (C_TSC_AT_READ), not the layout.
        3 | 4 => Some(V3_SIZE),
        5 => Some(V5_SIZE),
        _ => None,
    }
}

/// Why a page was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Refusal {
    /// The VMM runs with the PV page off (`--pv off`).
    Disabled,
    /// The address is not page-aligned.
    NotAligned,
    /// The page is not in guest RAM.
    OutsideMemory,
    /// The guest's version (given) is newer than [`HOST_VERSION`], or 0.
    NewerThanHost(u32),
    /// The declared size is not the version's.
    BadSize {
        /// The guest's version.
        version: u32,
        /// The size it declared.
        size: u32,
    },
}

/// A registered page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PvPage {
    /// Its guest-physical address.
    pub gpa: u64,
    /// The version the guest speaks.
    pub version: u32,
}

/// PV telemetry.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct PvStats {
    /// Pages accepted.
    pub registrations: u64,
    /// Pages refused.
    pub refusals: u64,
    /// Doorbell exits.
    pub doorbells: u64,
    /// MSR writes applied from batches.
    pub batched_writes: u64,
    /// Times the counters were published to the page.
    pub publishes: u64,
    /// Version 3: sampling counters reloaded at the wrap without a guest MSR access.
    pub auto_reloads: u64,
    /// Version 3: PMIs delivered as one KVM_NMI, LVTPC left unmasked as the guest asked.
    pub unmasked_pmis: u64,
    /// Version 5: samples the VMM took for the guest's agent, with no PMI.
    pub vmm_samples: u64,
}

impl PvStats {
    /// Add another vCPU's counts to these.
    pub fn merge(&mut self, o: &PvStats) {
        self.registrations += o.registrations;
        self.refusals += o.refusals;
        self.doorbells += o.doorbells;
        self.batched_writes += o.batched_writes;
        self.publishes += o.publishes;
        self.auto_reloads += o.auto_reloads;
        self.unmasked_pmis += o.unmasked_pmis;
        self.vmm_samples += o.vmm_samples;
    }
}

/// What the VMM offers a page beyond batched writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    /// Exitless reads (version 2 on).
    pub exitless_reads: bool,
    /// Samples taken by the VMM (version 5 on; `--pv-samples`).
    pub vmm_samples: bool,
}

/// Negotiate a page at `gpa`: answer host_version and flags in it; Ok if accepted. With
/// `offered` false the VMM refuses every page (the guest falls back to MSRs).
pub fn register(mem: &GuestMemoryMmap, gpa: u64, offered: bool, offer: Offer) -> Result<PvPage, Refusal> {
    if gpa & 0xfff != 0 {
        return Err(Refusal::NotAligned);
    }
    let guest_version: u32 = mem.read_obj(GuestAddress(gpa)).map_err(|_| Refusal::OutsideMemory)?;
    let size: u32 = mem.read_obj(GuestAddress(gpa + 8)).map_err(|_| Refusal::OutsideMemory)?;
    let _ = mem.write_obj(HOST_VERSION, GuestAddress(gpa + 4));
    let verdict = if !offered {
        Err(Refusal::Disabled)
    } else if guest_version > HOST_VERSION || guest_version == 0 {
        Err(Refusal::NewerThanHost(guest_version))
    } else if expected_size(guest_version) != Some(size) {
        Err(Refusal::BadSize { version: guest_version, size })
    } else {
        Ok(PvPage { gpa, version: guest_version })
    };
    let flags = match &verdict {
        Ok(p) => {
            let reads = if p.version >= 2 && offer.exitless_reads { F_EXITLESS_READS } else { 0 };
            let reload = if p.version >= 3 { F_AUTO_RELOAD } else { 0 };
            let samples = if p.version >= 5 && offer.vmm_samples { F_VMM_SAMPLES } else { 0 };
            F_ACCEPTED | reads | reload | samples
        }
        Err(_) => 0,
    };
    let _ = mem.write_obj(flags, GuestAddress(gpa + 12));
    verdict
}

/// Apply the batch as guest WRMSRs; stops at the first that would #GP. Returns writes done.
pub fn apply_batch<B: CountSource>(mem: &GuestMemoryMmap, page: PvPage, pmu: &mut Pmu<B>) -> u32 {
    let base = page.gpa;
    let count: u32 = mem.read_obj(GuestAddress(base + 16)).unwrap_or(0).min(BATCH_MAX);
    let mut done = 0;
    let mut fault = 0;
    for i in 0..count {
        let entry = base + 32 + u64::from(i) * 16;
        let msr: u32 = mem.read_obj(GuestAddress(entry)).unwrap_or(0);
        let value: u64 = mem.read_obj(GuestAddress(entry + 8)).unwrap_or(0);
        if pmu.set_msr(MsrIndex(msr), value, Initiator::Guest).is_fault() {
            fault = i + 1;
            break;
        }
        done += 1;
    }
    let _ = mem.write_obj(done, GuestAddress(base + 20));
    let _ = mem.write_obj(fault, GuestAddress(base + 24));
    done
}

/// The clocks a publish stamps its running counters with, read by the caller once
/// [`Publish::needs_clocks`] says they are wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clocks {
    /// The guest TSC to stamp.
    pub tsc: u64,
    /// Whether `tsc` is the instant the backend read the counts (the publish's `at_read`).
    pub stamped: bool,
    /// The vCPU thread's CPU time, ns.
    pub cpu_ns: u64,
    /// Wall time, ns.
    pub wall_ns: u64,
}

/// One publish of every counter's value under the seqlock, decided from the model before
/// any clock is read: the caller reads the clocks only if [`Publish::needs_clocks`] (a
/// guest TSC read may be a vCPU ioctl), then [`Publish::write`]s it.
#[derive(Debug)]
pub struct Publish {
    page: PvPage,
    /// Per page slot (GP 0-7, fixed 0-2), what to write; `None`: left untouched.
    slots: [Option<SlotPublish>; 11],
}

/// One counter of a publish.
#[derive(Debug, Clone, Copy)]
struct SlotPublish {
    flags: u32,
    value: u64,
    /// Stamped with the publish's clocks: running, or (version 4) stopped by a read in this exit.
    clocked: bool,
}

impl Publish {
    /// The publish of `pmu`'s counters at the values `state` holds (a snapshot, not MSR
    /// reads: the guest's `--stats` count only the reads it made), read by the backend at
    /// host TSC `at_read` where it knows; counters of `tsc_rate`'s events count one per
    /// guest TSC tick while they run, the others need an exit to be read. `None` for a
    /// page older than version 2, which has no counters.
    pub fn new<B: CountSource>(
        mem: &GuestMemoryMmap,
        page: PvPage,
        pmu: &Pmu<B>,
        state: &PmuState,
        tsc_rate: EventSet,
        at_read: Option<u64>,
    ) -> Option<Publish> {
        if page.version < 2 {
            return None;
        }
        let mut slots = [None; 11];
        for (slot, publish) in (0..11u32).zip(&mut slots) {
            let (idx, value) = match slot {
                0..8 => (PmcIdx::gp(slot as u8), state.pmc.get(slot as usize)),
                _ => (PmcIdx::fixed((slot - 8) as u8), state.fixed_ctr.get(slot as usize - 8)),
            };
            let (Some(idx), Some(&value)) = (idx, value) else { continue };
            // What counts is the model's to say (any vendor; a filtered counter counts
            // nothing); a clock cannot tell privilege levels apart, so only OS counting runs.
            let flags = match pmu.counting_config(idx).filter(|c| c.os).map(|c| tsc_rate.contains(c.event)) {
                None => 0,
                Some(true) => C_RUNNING,
                Some(false) => C_NEEDS_EXIT,
            };
            // Slots never programmed and never published stay untouched.
            let published: u64 = mem.read_obj(GuestAddress(slot_address(page, slot) + 8)).unwrap_or(0);
            if flags == 0 && value == 0 && published == 0 {
                continue;
            }
            // Version 4 stamps a stopped counter too when the counts were read in this exit
            // (a stop's own read): the instant it stopped, for the guest's bookkeeping.
            let stamp_stopped = flags == 0 && at_read.is_some() && page.version >= 4;
            *publish = Some(SlotPublish { flags, value, clocked: flags == C_RUNNING || stamp_stopped });
        }
        Some(Publish { page, slots })
    }

    /// Whether some counter is stamped with the clocks.
    pub fn needs_clocks(&self) -> bool {
        self.slots.iter().flatten().any(|s| s.clocked)
    }

    /// Write every counter to the page, stamped with `clocks` (read if
    /// [`Publish::needs_clocks`]), which also feed the thread's CPU `share`.
    pub fn write(&self, mem: &GuestMemoryMmap, share: &mut CpuShare, clocks: Option<Clocks>) {
        let page = self.page;
        let mut observed = false;
        for (slot, s) in (0..11u32).zip(&self.slots) {
            let Some(s) = s else { continue };
            let (now, stamped) = match clocks.filter(|_| s.clocked) {
                Some(c) => {
                    if !std::mem::replace(&mut observed, true) {
                        share.observe(c.cpu_ns, c.wall_ns);
                    }
                    (c.tsc, c.stamped)
                }
                None => (0, false),
            };
            let now = if s.flags == 0 && !stamped { 0 } else { now };
            let flags = if stamped && page.version >= 4 { s.flags | C_TSC_AT_READ } else { s.flags };
            let (mult, err_ppm) = (share.mult(), share.err_ppm());
            let at = slot_address(page, slot);
            let seq: u32 = mem.read_obj(GuestAddress(at)).unwrap_or(0);
            let _ = mem.write_obj(seq.wrapping_add(1) | 1, GuestAddress(at));
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            let _ = mem.write_obj(flags, GuestAddress(at + 4));
            let _ = mem.write_obj(s.value, GuestAddress(at + 8));
            let _ = mem.write_obj(now, GuestAddress(at + 16));
            let _ = mem.write_obj(mult.min(u64::from(u32::MAX)) as u32, GuestAddress(at + 24));
            let _ = mem.write_obj(RATE_SHIFT, GuestAddress(at + 28));
            let _ = mem.write_obj(err_ppm, GuestAddress(at + 32));
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            let _ = mem.write_obj((seq | 1).wrapping_add(1), GuestAddress(at));
        }
    }
}

/// Where page slot `slot`'s counter is.
fn slot_address(page: PvPage, slot: u32) -> u64 {
    page.gpa + COUNTERS_OFFSET + u64::from(slot) * COUNTER_SIZE
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmu::MsrAccess;
    use pmu::{ArchEvent, MockSource, PmuConfig};

    fn mem() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap()
    }

    fn offer(mem: &GuestMemoryMmap, gpa: u64, version: u32, size: u32) -> Result<PvPage, Refusal> {
        mem.write_obj(version, GuestAddress(gpa)).unwrap();
        mem.write_obj(size, GuestAddress(gpa + 8)).unwrap();
        register(mem, gpa, true, Offer { exitless_reads: true, vmm_samples: true })
    }

    fn flags(mem: &GuestMemoryMmap, gpa: u64) -> (u32, u32) {
        (mem.read_obj(GuestAddress(gpa + 4)).unwrap(), mem.read_obj(GuestAddress(gpa + 12)).unwrap())
    }

    /// A publish as a vCPU makes one, cycles counting at the TSC's rate and the rest needing
    /// an exit: the snapshot, the backend's read at `at_read`, and, only if the publish
    /// wants them, the guest TSC `clocks` gives for that read (no CPU time or wall time).
    fn publish(
        m: &GuestMemoryMmap,
        page: PvPage,
        pmu: &mut Pmu<MockSource>,
        at_read: Option<u64>,
        share: &mut CpuShare,
        clocks: impl Fn(Option<u64>) -> (u64, bool),
    ) {
        let state = pmu.save();
        let publish = Publish::new(m, page, pmu, &state, EventSet::EMPTY.with(ArchEvent::CoreCycles), at_read).unwrap();
        let clocks = publish.needs_clocks().then(|| {
            let (tsc, stamped) = clocks(at_read);
            Clocks { tsc, stamped, cpu_ns: 0, wall_ns: 0 }
        });
        publish.write(m, share, clocks);
    }

    #[test]
    fn version_negotiation() {
        let m = mem();
        assert_eq!(offer(&m, 0x1000, 2, V2_SIZE), Ok(PvPage { gpa: 0x1000, version: 2 }));
        assert_eq!(flags(&m, 0x1000), (HOST_VERSION, F_ACCEPTED | F_EXITLESS_READS));
        // An older guest on a newer host works, with the old feature set.
        assert_eq!(offer(&m, 0x2000, 1, V1_SIZE), Ok(PvPage { gpa: 0x2000, version: 1 }));
        assert_eq!(flags(&m, 0x2000), (HOST_VERSION, F_ACCEPTED));
        // A guest newer than the host is refused; it learns the host's version.
        assert_eq!(offer(&m, 0x3000, 6, 2048), Err(Refusal::NewerThanHost(6)));
        assert_eq!(flags(&m, 0x3000), (HOST_VERSION, 0));
        assert_eq!(offer(&m, 0x4000, 2, V1_SIZE), Err(Refusal::BadSize { version: 2, size: V1_SIZE }));
        assert_eq!(offer(&m, 0x4008, 2, V2_SIZE), Err(Refusal::NotAligned));
        assert_eq!(offer(&m, 0x5000, 0, V1_SIZE), Err(Refusal::NewerThanHost(0)));
        assert_eq!(offer(&m, 0x7000, 3, V3_SIZE), Ok(PvPage { gpa: 0x7000, version: 3 }));
        assert_eq!(flags(&m, 0x7000), (HOST_VERSION, F_ACCEPTED | F_EXITLESS_READS | F_AUTO_RELOAD));
        // Version 4 keeps version 3's layout.
        assert_eq!(offer(&m, 0x8000, 4, V3_SIZE), Ok(PvPage { gpa: 0x8000, version: 4 }));
        assert_eq!(flags(&m, 0x8000), (HOST_VERSION, F_ACCEPTED | F_EXITLESS_READS | F_AUTO_RELOAD));
        assert_eq!(offer(&m, 0x9000, 4, V2_SIZE), Err(Refusal::BadSize { version: 4, size: V2_SIZE }));
        // Version 5 adds the VMM's samples, unless the VMM runs with them off.
        assert_eq!(offer(&m, 0xa000, 5, V5_SIZE), Ok(PvPage { gpa: 0xa000, version: 5 }));
        assert_eq!(flags(&m, 0xa000), (HOST_VERSION, F_ACCEPTED | F_EXITLESS_READS | F_AUTO_RELOAD | F_VMM_SAMPLES));
        assert_eq!(offer(&m, 0xb000, 5, V3_SIZE), Err(Refusal::BadSize { version: 5, size: V3_SIZE }));
        let without = Offer { exitless_reads: true, vmm_samples: false };
        assert_eq!(register(&m, 0xa000, true, without), Ok(PvPage { gpa: 0xa000, version: 5 }));
        assert_eq!(flags(&m, 0xa000), (HOST_VERSION, F_ACCEPTED | F_EXITLESS_READS | F_AUTO_RELOAD));
        m.write_obj(2u32, GuestAddress(0x6000)).unwrap();
        m.write_obj(V2_SIZE, GuestAddress(0x6008)).unwrap();
        assert_eq!(
            register(&m, 0x6000, false, Offer { exitless_reads: true, vmm_samples: true }),
            Err(Refusal::Disabled)
        );
        assert_eq!(flags(&m, 0x6000), (HOST_VERSION, 0));
    }

    #[test]
    fn batch_applies_in_order_and_stops_at_a_fault() {
        let m = mem();
        let page = offer(&m, 0x1000, 2, V2_SIZE).unwrap();
        let mut pmu = Pmu::new(PmuConfig::default(), MockSource::new()).unwrap();
        let entries: [(u32, u64); 3] = [(0x186, 0x43003c), (0xc1, 0x1234), (0x186, 1 << 21)];
        for (i, (msr, value)) in entries.iter().enumerate() {
            m.write_obj(*msr, GuestAddress(0x1000 + 32 + i as u64 * 16)).unwrap();
            m.write_obj(*value, GuestAddress(0x1000 + 40 + i as u64 * 16)).unwrap();
        }
        m.write_obj(3u32, GuestAddress(0x1010)).unwrap();
        assert_eq!(apply_batch(&m, page, &mut pmu), 2);
        let (done, fault): (u32, u32) =
            (m.read_obj(GuestAddress(0x1014)).unwrap(), m.read_obj(GuestAddress(0x1018)).unwrap());
        assert_eq!((done, fault), (2, 3), "third entry sets the reserved ANY bit");
        assert_eq!(pmu.get_msr(MsrIndex(0x186), Initiator::Guest), MsrAccess::Ok(0x43003c));
        assert_eq!(pmu.get_msr(MsrIndex(0xc1), Initiator::Guest), MsrAccess::Ok(0x1234));
    }

    #[test]
    fn publish_marks_running_clocks_and_exit_only_counters() {
        let m = mem();
        let page = offer(&m, 0x1000, 2, V2_SIZE).unwrap();
        let mut pmu = Pmu::new(PmuConfig::default(), MockSource::new()).unwrap();
        pmu.set_msr(MsrIndex(0x186), 0x43003c, Initiator::Guest).ok(); // cycles, OS|EN
        pmu.set_msr(MsrIndex(0x187), 0x4300c0, Initiator::Guest).ok(); // instructions
        pmu.set_msr(MsrIndex(0xc1), 500, Initiator::Guest).ok();
        let mut share = CpuShare::default();
        let reads_before = pmu.stats().msr_reads;
        publish(&m, page, &mut pmu, None, &mut share, |_| (777, false));
        assert_eq!(pmu.stats().msr_reads, reads_before, "publishing is no guest MSR read");
        let at = |slot: u64, off: u64| GuestAddress(0x1000 + COUNTERS_OFFSET + slot * COUNTER_SIZE + off);
        let seq: u32 = m.read_obj(at(0, 0)).unwrap();
        assert_eq!(seq % 2, 0, "seqlock left even");
        assert!(seq > 0);
        assert_eq!(m.read_obj::<u32>(at(0, 4)).unwrap(), C_RUNNING);
        assert_eq!(m.read_obj::<u64>(at(0, 8)).unwrap(), 500);
        assert_eq!(m.read_obj::<u64>(at(0, 16)).unwrap(), 777);
        assert_eq!(m.read_obj::<u32>(at(1, 4)).unwrap(), C_NEEDS_EXIT);
        assert_eq!(m.read_obj::<u32>(at(2, 4)).unwrap(), 0, "an idle counter is not running");
        assert_eq!(m.read_obj::<u32>(at(0, 24)).unwrap(), 1 << 31, "no observation yet: rate 1.0");
        assert_eq!(m.read_obj::<u32>(at(0, 32)).unwrap(), 1_000_000, "and a bound of all the ticks since");
        assert_eq!(m.read_obj::<u32>(at(0, 28)).unwrap(), 31);
    }

    #[test]
    fn only_a_version_4_page_learns_that_its_stamp_is_the_read_instant() {
        let m = mem();
        let at = |gpa: u64, off: u64| GuestAddress(gpa + COUNTERS_OFFSET + off);
        for (gpa, version, size) in [(0x1000, 3, V3_SIZE), (0x2000, 4, V3_SIZE)] {
            let page = offer(&m, gpa, version, size).unwrap();
            let mut pmu = Pmu::new(PmuConfig::default(), MockSource::new()).unwrap();
            pmu.set_msr(MsrIndex(0x186), 0x43003c, Initiator::Guest).ok();
            pmu.set_msr(MsrIndex(0xc1), 500, Initiator::Guest).ok(); // (a slot left all 0 is not published)
            let mut share = CpuShare::default();
            // The backend read at host TSC 1234; the guest's TSC is the host's.
            let clocks = |at: Option<u64>| (at.unwrap_or(9999), at.is_some());
            publish(&m, page, &mut pmu, Some(1234), &mut share, clocks);
            assert_eq!(m.read_obj::<u64>(at(gpa, 16)).unwrap(), 1234, "v{version}: stamped at the read");
            let want = if version >= 4 { C_RUNNING | C_TSC_AT_READ } else { C_RUNNING };
            assert_eq!(m.read_obj::<u32>(at(gpa, 4)).unwrap(), want, "v{version}");
            // Without a read instant (another backend, a guest TSC of its own): a later stamp, no flag.
            publish(&m, page, &mut pmu, None, &mut share, clocks);
            assert_eq!(m.read_obj::<u64>(at(gpa, 16)).unwrap(), 9999);
            assert_eq!(m.read_obj::<u32>(at(gpa, 4)).unwrap(), C_RUNNING, "v{version}");
            // Stopped (GLOBAL_CTRL = 0 reads the counts): version 4 learns when it stopped.
            pmu.set_msr(MsrIndex(0x38f), 0, Initiator::Guest).ok();
            publish(&m, page, &mut pmu, Some(4321), &mut share, clocks);
            let (tsc, flags) = if version >= 4 { (4321, C_TSC_AT_READ) } else { (0, 0) };
            assert_eq!(m.read_obj::<u64>(at(gpa, 16)).unwrap(), tsc, "v{version}, stopped");
            assert_eq!(m.read_obj::<u32>(at(gpa, 4)).unwrap(), flags, "v{version}, stopped");
        }
    }

    #[test]
    fn share_follows_observations_and_bound_widens() {
        let mut s = CpuShare::default();
        s.observe(0, 0);
        s.observe(5_000_000, 10_000_000); // half the CPU (a preempted thread)
        assert_eq!(s.mult(), 1 << 30);
        assert_eq!(s.err_ppm(), 500_000, "half the ticks either way");
        s.observe(15_000_000, 20_000_000); // the whole CPU now
        assert_eq!(s.mult(), 3 << 29, "averaged: 0.75");
        assert_eq!(s.err_ppm(), 750_000, "it may have run none of the ticks since");
        s.observe(15_000_100, 20_000_200); // too short to say anything
        assert_eq!(s.last, Some((15_000_000, 20_000_000)));
    }
}
