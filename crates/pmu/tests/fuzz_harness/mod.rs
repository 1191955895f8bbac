//! The model fuzzer's harness, shared by the deterministic fuzzer (`tests/fuzz_ops.rs`,
//! seeded PRNG) and the cargo-fuzz target (`fuzz/fuzz_targets/pmu_ops.rs`, libFuzzer bytes
//! decoded through `arbitrary`). Both draw configurations and operations from an
//! [`Entropy`] source with the same biased generators, and both run every operation
//! through [`Harness::step`], which checks the model against an independent shadow of the
//! guest-visible state after each operation. Configurations cover both vendors: Intel
//! architectural perfmon v2 and AMD (legacy counters, PerfCtrExtCore, PerfMonV2); the
//! shadow decodes each vendor's MSRs itself ([`HReg`]).
//!
//! * no panic; a guest (or host) write faults exactly when the SDM/APM/KVM rules say so
//!   (Intel: every write with a reserved bit set; AMD: only absent MSRs, reserved bits are
//!   cleared instead); a read faults exactly for absent MSRs;
//! * every register reads back what the shadow holds; every counter read fits 48 bits;
//! * a counter changes value only by an explicit write, reset or restore, or by the counts
//!   the mock actually delivered to it (so a counter that is not counting never changes);
//!   a wrap past 2^48 sets its GLOBAL_STATUS bit (where the PMU has one) and, with INT/PMI,
//!   owes exactly one PMI;
//! * GLOBAL_STATUS only ever holds bits of counters that exist, plus 62/63 on Intel;
//! * a host event is enabled exactly when the guest registers, the filter, the backend's
//!   events and the schedule say the counter counts (unless its `open` failed), with the
//!   configuration the registers ask for (decoded in the vendor's event encoding); the
//!   filter never lets a denied event be opened;
//! * the mock sees no backend protocol violation.
#![allow(dead_code)]

use pmu::{
    AmdEventSel, AmdPerfMon, ArchEvent, EventSel, FilterAction, FixedCtrl, Initiator, MockCall, MockSource, MsrAccess,
    MsrIndex, PmcIdx, Pmu, PmuConfig, PmuEventFilter, PmuState, Policy, RdpmcIdx, Vendor, COUNTER_MASK, FIXED_EVENTS,
    PMC_SLOTS as SLOTS, STATE_FORMAT,
};

/// A source of random bits.
pub trait Entropy {
    /// 64 random bits.
    fn next_u64(&mut self) -> u64;
    /// Uniform-ish in `0..n` (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// True with probability `pct`%.
    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
    /// One element of `items`.
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

/// xorshift64*: small, deterministic, no dependency.
#[derive(Clone, Debug)]
pub struct XorShift(pub u64);

impl XorShift {
    pub fn new(seed: u64) -> Self {
        // Never zero; mix the seed so neighbouring seeds diverge at once.
        XorShift((seed ^ 0x9E37_79B9_7F4A_7C15).wrapping_mul(0xD1B5_4A32_D192_ED03) | 1)
    }
}

impl Entropy for XorShift {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Shadow slots of the GP counters (fixed counters follow).
const GP_SLOTS: usize = 8;
const OVF_BUF_COND_CHGD: u64 = 3 << 62;
/// IA32_MISC_ENABLE of a PMU without PEBS at reset: EMON, BTS and PEBS unavailable.
const MISC_RESET: u64 = 1 << 7 | 3 << 11;
/// Intel v2 EVENTSEL reserved bits: 63:32 and ANY (21).
const EVENTSEL_RESERVED: u64 = 0xFFFF_FFFF_0020_0000;
/// AMD PERF_CTL reserved bits for a guest: 19, 21, 63:36 (HostOnly/GuestOnly included).
const AMD_EVENTSEL_RESERVED: u64 = 0xFFFF_FFF0_0028_0000;

/// Every Intel PMU MSR of the largest PMU, the MSRs just outside each range, a few AMD PMU
/// MSRs (absent on Intel) and a few others.
pub const MSR_POOL: &[u32] = &[
    0xC0,
    0xC1,
    0xC2,
    0xC3,
    0xC4,
    0xC5,
    0xC6,
    0xC7,
    0xC8,
    0xC9, // IA32_PMCx
    0x185,
    0x186,
    0x187,
    0x188,
    0x189,
    0x18A,
    0x18B,
    0x18C,
    0x18D,
    0x18E, // EVENTSELx
    0x308,
    0x309,
    0x30A,
    0x30B,
    0x30C, // FIXED_CTRx
    0x344,
    0x345,
    0x346, // PERF_CAPABILITIES
    0x38C,
    0x38D,
    0x38E,
    0x38F,
    0x390,
    0x391, // FIXED_CTR_CTRL, GLOBAL_*
    0x4C0,
    0x4C1,
    0x4C2,
    0x4C3,
    0x4C4,
    0x4C5,
    0x4C6,
    0x4C7,
    0x4C8,
    0x4C9, // IA32_A_PMCx
    0x10,
    0x1A0,
    0x3F1,
    0xC000_0080,
    0xFFFF_FFFF,
    0xC001_0000,
    0xC001_0201,
    0xC000_0301, // AMD's
];

/// Every AMD PMU MSR of the largest PMU, the MSRs just outside each range, a few Intel PMU
/// MSRs (absent on AMD) and a few others.
pub const AMD_MSR_POOL: &[u32] = &[
    0xC000_FFFF,
    0xC001_0000,
    0xC001_0001,
    0xC001_0002,
    0xC001_0003, // PERF_CTL0-3
    0xC001_0004,
    0xC001_0005,
    0xC001_0006,
    0xC001_0007, // PERF_CTR0-3
    0xC001_0008,
    0xC001_01FF,
    0xC001_0200,
    0xC001_0201,
    0xC001_0202,
    0xC001_0203,
    0xC001_0204,
    0xC001_0205,
    0xC001_0206,
    0xC001_0207,
    0xC001_0208,
    0xC001_0209,
    0xC001_020A,
    0xC001_020B, // PerfCtrExtCore CTL/CTR pairs
    0xC001_020C,
    0xC000_02FF,
    0xC000_0300,
    0xC000_0301,
    0xC000_0302,
    0xC000_0303, // PerfMonV2 globals
    0xC000_0304,
    0xC1,
    0x186,
    0x309,
    0x38D,
    0x38E,
    0x38F,
    0x390,
    0x345,
    0x1A0, // Intel's
    0x10,
    0xC000_0080,
    0xFFFF_FFFF,
];

/// `(event, umask)` pairs Intel guests program and filters list: the architectural events
/// and a few that are not.
const EVENT_POOL: &[(u16, u8)] = &[
    (0x3C, 0x00),
    (0xC0, 0x00),
    (0x3C, 0x01),
    (0x2E, 0x4F),
    (0x2E, 0x41),
    (0xC4, 0x00),
    (0xC5, 0x00),
    (0xD1, 0x01),
    (0x00, 0x00),
    (0xC0, 0x01),
];

/// The same for AMD (12-bit event selects): Linux's generic events on Zen and family
/// 10h-16h, and a few that are not architectural (0x20 is 0x120 without bits 35:32).
const AMD_EVENT_POOL: &[(u16, u8)] = &[
    (0x076, 0x00),
    (0x0C0, 0x00),
    (0x120, 0x00),
    (0x060, 0xFF),
    (0x064, 0x09),
    (0x0C2, 0x00),
    (0x0C3, 0x00),
    (0x07D, 0x07),
    (0x07E, 0x07),
    (0x020, 0x00),
    (0x1C0, 0x00),
    (0x03C, 0x00),
    (0xFFF, 0xFF),
];

/// One operation on the PMU or its environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// RDMSR.
    Read {
        msr: u32,
        host: bool,
    },
    /// WRMSR.
    Write {
        msr: u32,
        value: u64,
        host: bool,
    },
    /// RDPMC.
    Rdpmc {
        ecx: u32,
    },
    /// Events happen: on one counter slot, or on all (`slot == None`).
    Advance {
        slot: Option<u8>,
        n: u64,
    },
    /// The backend signalled an overflow.
    Collect,
    /// vCPU run time advances by `dt` ns.
    Tick {
        dt: u64,
    },
    SchedOut,
    SchedIn,
    Reset,
    /// Save, restore the same snapshot.
    SaveRestore,
    /// Restore a snapshot generated from `seed` (valid or not).
    RestoreRandom {
        seed: u64,
    },
    /// Install a filter generated from `seed` (`None`: remove it).
    SetFilter {
        seed: Option<u64>,
    },
    SetFailOpen(bool),
    SetCpl(u8),
}

/// A PMU configuration with the mock's supported events.
#[derive(Clone, Debug)]
pub struct FuzzConfig {
    pub config: PmuConfig,
    pub supported: Vec<ArchEvent>,
}

fn event_pool(vendor: Vendor) -> &'static [(u16, u8)] {
    match vendor {
        Vendor::Intel => EVENT_POOL,
        Vendor::Amd => AMD_EVENT_POOL,
    }
}

/// A random filter, biased toward lists that name events `vendor`'s guests program.
pub fn gen_filter(e: &mut impl Entropy, vendor: Vendor) -> PmuEventFilter {
    let n = e.below(6) as usize;
    let events = (0..n)
        .map(|_| {
            if e.chance(85) {
                e.pick(event_pool(vendor))
            } else {
                ((e.next_u64() & 0xFFF) as u16, e.next_u64() as u8)
            }
        })
        .collect();
    let fixed_counter_bitmap = if e.chance(90) { e.below(8) as u32 } else { e.next_u64() as u32 };
    PmuEventFilter {
        action: if e.chance(50) { FilterAction::Allow } else { FilterAction::Deny },
        events,
        fixed_counter_bitmap,
    }
}

/// A random configuration: Intel (1..8 GP counters, full-width writes on/off) or AMD (4
/// legacy, 6 PerfCtrExtCore or 1..6 PerfMonV2 counters), reuse (various slices) or legacy,
/// with or without a filter, a backend counting a random set of events.
pub fn gen_config(e: &mut impl Entropy) -> FuzzConfig {
    let policy = match e.below(4) {
        0 => Policy::Legacy,
        1 => Policy::Reuse { release_after_ns: 0 },
        2 => Policy::Reuse { release_after_ns: e.below(2_000_000) },
        _ => Policy::default(),
    };
    let supported: Vec<ArchEvent> = if e.chance(60) {
        ArchEvent::ALL.to_vec()
    } else {
        ArchEvent::ALL.into_iter().filter(|_| e.chance(60)).collect()
    };
    let vendor = if e.chance(60) { Vendor::Intel } else { Vendor::Amd };
    let filter = if e.chance(50) { Some(gen_filter(e, vendor)) } else { None };
    let (amd_perfmon, gp_counters) = match vendor {
        Vendor::Intel => (AmdPerfMon::default(), 1 + e.below(8) as u8),
        Vendor::Amd => match e.below(4) {
            0 => (AmdPerfMon::Legacy, 4),
            1 => (AmdPerfMon::ExtCore, 6),
            _ => (AmdPerfMon::PerfMonV2, 1 + e.below(6) as u8),
        },
    };
    FuzzConfig {
        config: PmuConfig {
            vendor,
            amd_perfmon,
            gp_counters,
            // Ignored for AMD (its counters always take 48-bit writes).
            full_width_writes: e.chance(70),
            policy,
            filter,
            pebs: false,
        },
        supported,
    }
}

fn slot_of(idx: PmcIdx) -> usize {
    idx.slot()
}

fn idx_of(slot: usize) -> PmcIdx {
    PmcIdx::from_slot(slot).expect("slot in range")
}

/// How a counter MSR write becomes the value, as the shadow sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Intel IA32_PMCx: guest writes sign-extend bit 31, host writes are masked.
    Legacy,
    /// Intel IA32_A_PMCx: must fit 48 bits.
    FullWidth,
    /// Masked to 48 bits (Intel fixed counters, every AMD counter).
    Masked,
}

/// A register as the shadow decodes an MSR, independently of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HReg {
    Counter(usize, Rule),
    EventSel(usize),
    FixedCtrl,
    Status,
    Ctrl,
    StatusClr,
    StatusSet,
    PerfCap,
    Misc,
}

/// What the guest registers say about one counter, computed without the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Want {
    counts: bool,
    config: Option<pmu::HostEventConfig>,
}

/// Totals over a run, to show that the traffic reaches every path.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub ops: u64,
    /// Operations on AMD configurations.
    pub amd_ops: u64,
    pub guest_faults: u64,
    pub host_rejects: u64,
    /// Advances that delivered counts to a counter.
    pub deliveries: u64,
    pub wraps: u64,
    /// Wraps on AMD configurations.
    pub amd_wraps: u64,
    pub pmis: u64,
    pub opens: u64,
    pub failed_opens: u64,
    pub denied_by_filter: u64,
    pub restores_rejected: u64,
}

impl Tally {
    pub fn add(&mut self, o: &Tally) {
        self.ops += o.ops;
        self.amd_ops += o.amd_ops;
        self.guest_faults += o.guest_faults;
        self.host_rejects += o.host_rejects;
        self.deliveries += o.deliveries;
        self.wraps += o.wraps;
        self.amd_wraps += o.amd_wraps;
        self.pmis += o.pmis;
        self.opens += o.opens;
        self.failed_opens += o.failed_opens;
        self.denied_by_filter += o.denied_by_filter;
        self.restores_rejected += o.restores_rejected;
    }
}

/// A PMU over a mock, with the shadow state the checks compare it to.
pub struct Harness {
    pub pmu: Pmu<MockSource>,
    vendor: Vendor,
    perfmon: AmdPerfMon,
    gp: u8,
    fixed: u8,
    fw: bool,
    supported: Vec<ArchEvent>,
    filter: Option<PmuEventFilter>,
    counters: [u64; SLOTS],
    eventsel: [u64; GP_SLOTS],
    fctrl: u64,
    gctrl: u64,
    status: u64,
    misc: u64,
    pending: bool,
    scheduled_in: bool,
    fail_open: bool,
    /// Slots whose last `open` failed (no host event until a later successful one).
    open_failed: u16,
    now: u64,
    pub tally: Tally,
}

type Check = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

impl Harness {
    pub fn new(fc: &FuzzConfig) -> Result<Harness, String> {
        let pmu =
            Pmu::new(fc.config.clone(), MockSource::supporting(&fc.supported)).map_err(|e| format!("Pmu::new: {e}"))?;
        let has = |ev| fc.supported.contains(&ev);
        let vendor = fc.config.vendor;
        let fixed = match vendor {
            Vendor::Intel => FIXED_EVENTS.iter().take_while(|&&ev| has(ev)).count() as u8,
            Vendor::Amd => 0,
        };
        let gp = fc.config.gp_counters;
        let h = Harness {
            pmu,
            vendor,
            perfmon: fc.config.amd_perfmon,
            gp,
            fixed,
            fw: vendor == Vendor::Intel && fc.config.full_width_writes,
            supported: fc.supported.clone(),
            filter: fc.config.filter.clone(),
            counters: [0; SLOTS],
            eventsel: [0; GP_SLOTS],
            fctrl: 0,
            gctrl: (1 << gp) - 1,
            status: 0,
            misc: MISC_RESET,
            pending: false,
            scheduled_in: true,
            fail_open: false,
            open_failed: 0,
            now: 0,
            tally: Tally::default(),
        };
        let caps = h.pmu.caps();
        ensure!(
            caps.gp_counters() == gp && caps.fixed_counters() == fixed && caps.vendor() == vendor,
            "caps {caps:?} for {fc:?}"
        );
        Ok(h)
    }

    fn amd(&self) -> bool {
        self.vendor == Vendor::Amd
    }

    /// AMD with the interleaved counters.
    fn ext(&self) -> bool {
        self.amd() && self.perfmon >= AmdPerfMon::ExtCore
    }

    /// Whether GLOBAL_CTRL/STATUS exist (Intel; AMD with PerfMonV2).
    fn globals(&self) -> bool {
        !self.amd() || self.perfmon == AmdPerfMon::PerfMonV2
    }

    fn exists(&self, slot: usize) -> bool {
        if slot < GP_SLOTS {
            slot < usize::from(self.gp)
        } else {
            slot - GP_SLOTS < usize::from(self.fixed)
        }
    }

    fn counter_bits(&self) -> u64 {
        ((1u64 << self.gp) - 1) | ((1u64 << self.fixed) - 1) << 32
    }

    fn fctrl_reserved(&self) -> u64 {
        !(0..self.fixed).fold(0u64, |m, j| m | 0xB << (4 * j))
    }

    /// Bits GLOBAL_STATUS may hold.
    fn status_bits(&self) -> u64 {
        match self.vendor {
            Vendor::Intel => self.counter_bits() | OVF_BUF_COND_CHGD,
            Vendor::Amd => self.counter_bits(),
        }
    }

    fn status_reserved(&self) -> u64 {
        !self.status_bits()
    }

    fn eventsel_reserved(&self) -> u64 {
        match self.vendor {
            Vendor::Intel => EVENTSEL_RESERVED,
            Vendor::Amd => AMD_EVENTSEL_RESERVED,
        }
    }

    /// The register `msr` names in this PMU, decoded by the shadow from the SDM and APM.
    fn reg(&self, msr: u32) -> Option<HReg> {
        let gp = |base: u32| msr.checked_sub(base).map(|i| i as usize).filter(|&i| i < usize::from(self.gp));
        match self.vendor {
            Vendor::Intel => {
                if let Some(i) = gp(0xC1) {
                    return Some(HReg::Counter(i, Rule::Legacy));
                }
                if let Some(i) = gp(0x4C1).filter(|_| self.fw) {
                    return Some(HReg::Counter(i, Rule::FullWidth));
                }
                if let Some(i) = gp(0x186) {
                    return Some(HReg::EventSel(i));
                }
                if let Some(j) = msr.checked_sub(0x309).filter(|&j| j < u32::from(self.fixed)) {
                    return Some(HReg::Counter(GP_SLOTS + j as usize, Rule::Masked));
                }
                match msr {
                    0x38D => Some(HReg::FixedCtrl),
                    0x38E => Some(HReg::Status),
                    0x38F => Some(HReg::Ctrl),
                    0x390 => Some(HReg::StatusClr),
                    0x345 => Some(HReg::PerfCap),
                    0x1A0 => Some(HReg::Misc),
                    _ => None,
                }
            }
            Vendor::Amd => {
                let legacy = |base: u32| gp(base).filter(|&i| i < 4);
                if let Some(i) = legacy(0xC001_0000) {
                    return Some(HReg::EventSel(i));
                }
                if let Some(i) = legacy(0xC001_0004) {
                    return Some(HReg::Counter(i, Rule::Masked));
                }
                if self.ext() {
                    if let Some(o) = msr.checked_sub(0xC001_0200).filter(|&o| o < 2 * u32::from(self.gp)) {
                        let i = (o / 2) as usize;
                        return Some(if o % 2 == 0 { HReg::EventSel(i) } else { HReg::Counter(i, Rule::Masked) });
                    }
                }
                if !self.globals() {
                    return None;
                }
                match msr {
                    0xC000_0300 => Some(HReg::Status),
                    0xC000_0301 => Some(HReg::Ctrl),
                    0xC000_0302 => Some(HReg::StatusClr),
                    0xC000_0303 => Some(HReg::StatusSet),
                    _ => None,
                }
            }
        }
    }

    /// The MSR the checks read counter `slot` through.
    fn counter_msr(&self, slot: usize) -> u32 {
        match self.vendor {
            Vendor::Intel if slot < GP_SLOTS => 0xC1 + slot as u32,
            Vendor::Intel => 0x309 + (slot - GP_SLOTS) as u32,
            Vendor::Amd if self.ext() => 0xC001_0201 + 2 * slot as u32,
            Vendor::Amd => 0xC001_0004 + slot as u32,
        }
    }

    /// The MSR of GP counter `i`'s event selector.
    fn eventsel_msr(&self, i: usize) -> u32 {
        match self.vendor {
            Vendor::Intel => 0x186 + i as u32,
            Vendor::Amd if self.ext() => 0xC001_0200 + 2 * i as u32,
            Vendor::Amd => 0xC001_0000 + i as u32,
        }
    }

    fn reg_msr(&self, reg: HReg) -> Option<u32> {
        let m = match (self.vendor, reg) {
            (_, HReg::Counter(s, _)) => self.counter_msr(s),
            (_, HReg::EventSel(i)) => self.eventsel_msr(i),
            (Vendor::Intel, HReg::FixedCtrl) => 0x38D,
            (Vendor::Intel, HReg::Status) => 0x38E,
            (Vendor::Intel, HReg::Ctrl) => 0x38F,
            (Vendor::Intel, HReg::Misc) => 0x1A0,
            (Vendor::Amd, HReg::Status) if self.globals() => 0xC000_0300,
            (Vendor::Amd, HReg::Ctrl) if self.globals() => 0xC000_0301,
            _ => return None,
        };
        Some(m)
    }

    /// Must a write of `v` to `msr` fault?
    fn write_faults(&self, msr: u32, v: u64, host: bool) -> bool {
        let Some(reg) = self.reg(msr) else { return true };
        // AMD clears reserved bits and ignores guest writes to read-only registers.
        let strict = !self.amd();
        match reg {
            HReg::Counter(_, Rule::FullWidth) => v & !COUNTER_MASK != 0,
            HReg::Counter(..) => false,
            HReg::EventSel(_) => strict && v & self.eventsel_reserved() != 0,
            HReg::FixedCtrl => v & self.fctrl_reserved() != 0,
            HReg::Ctrl => strict && v & !self.counter_bits() != 0,
            HReg::StatusClr => strict && v & self.status_reserved() != 0,
            HReg::StatusSet => false,
            HReg::Status if host => v & self.status_reserved() != 0,
            HReg::Status => strict,
            HReg::PerfCap => !host || v != if self.fw { 1 << 13 } else { 0 },
            // KVM's rule: the guest may not flip BTS/PEBS_UNAVAIL; the host writes anything.
            HReg::Misc => !host && (v ^ self.misc) & 3 << 11 != 0,
        }
    }

    fn read_faults(&self, msr: u32, host: bool) -> bool {
        match self.reg(msr) {
            None => true,
            // PERF_CAPABILITIES exists for the guest only with PDCM (= FW_WRITE here).
            Some(HReg::PerfCap) => !host && !self.fw,
            Some(_) => false,
        }
    }

    /// The shadow's value of `msr` (which exists).
    fn shadow_read(&self, msr: u32) -> u64 {
        match self.reg(msr).unwrap_or_else(|| unreachable!("{msr:#x}")) {
            HReg::Counter(s, _) => self.counters[s],
            HReg::EventSel(i) => self.eventsel[i],
            HReg::FixedCtrl => self.fctrl,
            HReg::Status => self.status,
            HReg::Ctrl => self.gctrl,
            HReg::StatusClr | HReg::StatusSet => 0,
            HReg::Misc => self.misc,
            HReg::PerfCap => {
                if self.fw {
                    1 << 13
                } else {
                    0
                }
            }
        }
    }

    fn local_enable(&self, slot: usize) -> bool {
        if slot < GP_SLOTS {
            self.eventsel[slot] & EventSel::EN != 0
        } else {
            FixedCtrl::of(self.fctrl, (slot - GP_SLOTS) as u8).enabled()
        }
    }

    /// `(event select, unit mask)` of GP counter `slot`, in the vendor's encoding.
    fn event_key(&self, slot: usize) -> (u16, u8) {
        let v = self.eventsel[slot];
        match self.vendor {
            Vendor::Intel => (v as u8 as u16, (v >> 8) as u8),
            Vendor::Amd => ((v & 0xFF) as u16 | ((v >> 32 & 0xF) as u16) << 8, (v >> 8) as u8),
        }
    }

    fn filter_allows(&self, slot: usize) -> bool {
        match &self.filter {
            None => true,
            Some(f) if slot < GP_SLOTS => {
                let (event, umask) = self.event_key(slot);
                f.allows_gp(event, umask)
            }
            Some(f) => f.allows_fixed((slot - GP_SLOTS) as u8),
        }
    }

    /// Whether counter `slot` counts and with which host configuration, from the shadow.
    fn want(&self, slot: usize) -> Want {
        let bit = slot_bit(slot);
        let enabled = self.exists(slot) && self.gctrl >> bit & 1 == 1 && self.local_enable(slot);
        let config = if slot < GP_SLOTS {
            let s = EventSel(self.eventsel[slot]);
            let event = match self.vendor {
                Vendor::Intel => s.arch_event(),
                Vendor::Amd => AmdEventSel(self.eventsel[slot]).arch_event(),
            };
            event.filter(|ev| self.supported.contains(ev)).map(|event| pmu::HostEventConfig {
                event,
                usr: s.usr(),
                os: s.os(),
                edge: s.edge(),
                inv: s.inv(),
                cmask: s.cmask(),
                interrupt: s.int(),
            })
        } else {
            let j = (slot - GP_SLOTS) as u8;
            let c = FixedCtrl::of(self.fctrl, j);
            Some(pmu::HostEventConfig {
                event: FIXED_EVENTS[usize::from(j)],
                usr: c.usr(),
                os: c.os(),
                edge: false,
                inv: false,
                cmask: 0,
                interrupt: c.pmi(),
            })
        };
        let counts = enabled && self.filter_allows(slot) && config.is_some() && self.scheduled_in;
        Want { counts, config }
    }

    fn reset_shadow(&mut self) {
        self.counters = [0; SLOTS];
        self.eventsel = [0; GP_SLOTS];
        self.fctrl = 0;
        self.gctrl = (1 << self.gp) - 1;
        self.status = 0;
        self.misc = MISC_RESET;
        self.pending = false;
    }

    fn msr_pool(&self) -> &'static [u32] {
        match self.vendor {
            Vendor::Intel => MSR_POOL,
            Vendor::Amd => AMD_MSR_POOL,
        }
    }

    /// A random value for `msr`, biased toward interesting bit patterns and toward values
    /// that program counters for real.
    pub fn gen_value(&self, e: &mut impl Entropy, msr: u32) -> u64 {
        match e.below(10) {
            0 => e.next_u64(),
            1 => 1 << e.below(64),
            2 => e.pick(&[
                0,
                u64::MAX,
                COUNTER_MASK,
                COUNTER_MASK + 1,
                0x7FFF_FFFF,
                0x8000_0000,
                0xFFFF_FFFF,
                0x1_0000_0000,
                1 << 47,
                1 << 62,
                1 << 63,
                3 << 62,
                AmdEventSel::HOST_ONLY | 0x76 | EventSel::OS | EventSel::EN,
            ]),
            // A valid value with one random bit flipped: often exactly one reserved bit.
            3 => self.valid_value(e, msr) ^ 1 << e.below(64),
            _ => self.valid_value(e, msr),
        }
    }

    /// A programming of an event selector: a pooled event, usually enabled in ring 0.
    fn valid_eventsel(&self, e: &mut impl Entropy) -> u64 {
        let (ev, um) = e.pick(event_pool(self.vendor));
        let mut v = u64::from(ev & 0xFF)
            | u64::from(ev >> 8) << 32
            | u64::from(um) << 8
            | e.next_u64()
                & (EventSel::USR
                    | EventSel::OS
                    | EventSel::INT
                    | EventSel::EN
                    | EventSel::PC
                    | EventSel::EDGE
                    | EventSel::INV);
        if e.chance(70) {
            v |= EventSel::EN | EventSel::OS;
        }
        if e.chance(10) {
            v |= e.below(4) << 24;
        }
        if self.amd() {
            // PC (19) is reserved on AMD; Linux guests set HostOnly (41).
            v &= !EventSel::PC;
            if e.chance(10) {
                v |= AmdEventSel::HOST_ONLY;
            }
        }
        v
    }

    fn valid_value(&self, e: &mut impl Entropy, msr: u32) -> u64 {
        match self.reg(msr) {
            Some(HReg::EventSel(_)) => self.valid_eventsel(e),
            Some(HReg::FixedCtrl) => {
                let v = e.next_u64() & !self.fctrl_reserved();
                if e.chance(50) {
                    v | 0x111 & !self.fctrl_reserved()
                } else {
                    v
                }
            }
            Some(HReg::Ctrl) => {
                if e.chance(50) {
                    self.counter_bits()
                } else {
                    e.next_u64() & self.counter_bits()
                }
            }
            Some(HReg::Status | HReg::StatusClr | HReg::StatusSet) => e.next_u64() & self.status_bits(),
            Some(HReg::Misc) => self.misc ^ e.next_u64() & !(3 << 11),
            Some(HReg::PerfCap) => {
                if self.fw {
                    1 << 13
                } else {
                    0
                }
            }
            // Counters: near the top (overflow soon), small, or anywhere in 48 bits.
            _ => match e.below(3) {
                0 => COUNTER_MASK - e.below(64),
                1 => e.below(1 << 16),
                _ => e.next_u64() & COUNTER_MASK,
            },
        }
    }

    /// The MSR of GP counter `i`'s selector, or one of its aliases (AMD legacy MSRs).
    fn any_eventsel_msr(&self, e: &mut impl Entropy, i: usize) -> u32 {
        if self.ext() && i < 4 && e.chance(30) {
            0xC001_0000 + i as u32
        } else {
            self.eventsel_msr(i)
        }
    }

    /// A random operation.
    pub fn gen_op(&self, e: &mut impl Entropy) -> Op {
        match e.below(100) {
            0..=39 => {
                let msr = e.pick(self.msr_pool());
                let value = self.gen_value(e, msr);
                Op::Write { msr, value, host: e.chance(10) }
            }
            40..=47 => {
                // Toggle an enable bit, as guests do around measured regions.
                let what = if self.globals() { e.below(if self.amd() { 2 } else { 3 }) } else { 0 };
                let (msr, bit) = match what {
                    0 => {
                        let i = e.below(u64::from(self.gp)) as usize;
                        (self.any_eventsel_msr(e, i), EventSel::EN)
                    }
                    1 => (self.reg_msr(HReg::Ctrl).expect("globals"), 1 << e.below(u64::from(self.gp))),
                    _ => (0x38D, 3 << (4 * e.below(3))),
                };
                let value = self.shadow_read(msr) ^ bit;
                Op::Write { msr, value, host: false }
            }
            48..=55 => Op::Read { msr: e.pick(self.msr_pool()), host: e.chance(10) },
            56..=58 => {
                let ecx = match e.below(4) {
                    0 => e.next_u64() as u32,
                    1 => 1 << 30 | e.below(4) as u32,
                    _ => e.below(10) as u32,
                };
                Op::Rdpmc { ecx: ecx | if e.chance(20) { 1 << 31 } else { 0 } }
            }
            59..=74 => {
                let slot = if e.chance(50) { None } else { Some(e.below(SLOTS as u64) as u8) };
                let n = match e.below(10) {
                    0 => 1 << 47,
                    // Up to 2^50 (several wraps of a 48-bit counter) but no more: the
                    // mock's raw count is a u64, as perf's, and must not wrap in a run.
                    1 => e.next_u64() >> (14 + e.below(50)),
                    2 => {
                        // Exactly to the wrap of some counter, or one short/past.
                        let s = slot.map_or(e.below(SLOTS as u64) as usize, usize::from);
                        let to_wrap = COUNTER_MASK + 1 - self.counters[s];
                        to_wrap - 1 + e.below(3)
                    }
                    _ => e.below(1 << 12),
                };
                Op::Advance { slot, n }
            }
            75..=80 => Op::Collect,
            81..=85 => Op::Tick { dt: e.pick(&[0, 1, 100_000, 600_000, 1_000_000, 5_000_000]) },
            86 | 87 => Op::SchedOut,
            88..=91 => Op::SchedIn,
            92 => Op::Reset,
            93 | 94 => Op::SaveRestore,
            95 => Op::RestoreRandom { seed: e.next_u64() },
            96 => Op::SetFilter { seed: e.chance(70).then(|| e.next_u64()) },
            97 => Op::SetFailOpen(e.chance(15)),
            98 => Op::SetCpl(if e.chance(85) { 0 } else { 3 }),
            _ => Op::Collect,
        }
    }

    /// A snapshot generated from `seed`: mostly valid, sometimes with a bad value, shape or
    /// format.
    fn gen_state(&self, seed: u64) -> PmuState {
        let mut e = XorShift::new(seed);
        let gp = usize::from(self.gp);
        let fixed = usize::from(self.fixed);
        let amd = self.amd();
        let mut s = PmuState {
            format: STATE_FORMAT,
            pmc: (0..gp).map(|_| e.next_u64() & COUNTER_MASK).collect(),
            eventsel: (0..gp).map(|_| self.valid_eventsel(&mut e)).collect(),
            fixed_ctr: (0..fixed).map(|_| e.next_u64() & COUNTER_MASK).collect(),
            fixed_ctr_ctrl: if amd { 0 } else { self.valid_value(&mut e, 0x38D) },
            global_ctrl: if self.globals() { e.next_u64() & self.counter_bits() } else { (1 << self.gp) - 1 },
            global_status: if self.globals() { e.next_u64() & self.status_bits() } else { 0 },
            pebs_enable: 0,
            ds_area: 0,
            misc_enable: (!amd && e.chance(50)).then(|| e.next_u64()),
        };
        match e.below(14) {
            0 => s.format += 1,
            1 => s.pmc.push(0),
            2 if fixed > 0 => s.fixed_ctr.pop().map_or((), drop),
            3 => s.pmc[e.below(gp as u64) as usize] |= 1 << (48 + e.below(16)),
            4 => s.eventsel[e.below(gp as u64) as usize] |= 1 << 21,
            5 => s.fixed_ctr_ctrl |= 1 << e.below(64),
            6 => s.global_ctrl |= 1 << e.below(64),
            7 => s.global_status |= 1 << e.below(64),
            8 => s.misc_enable = Some(e.next_u64()),
            9 => s.pebs_enable = 1,
            _ => {}
        }
        s
    }

    /// `Err`: refused before anything changes; `Ok(valid)`: loaded, or refused after a reset.
    fn state_valid(&self, s: &PmuState) -> Result<bool, ()> {
        if s.format != STATE_FORMAT
            || s.pmc.len() != usize::from(self.gp)
            || s.eventsel.len() != usize::from(self.gp)
            || s.fixed_ctr.len() != usize::from(self.fixed)
        {
            return Err(()); // refused before anything changes
        }
        let counters_fit = s.pmc.iter().chain(&s.fixed_ctr).all(|&v| v <= COUNTER_MASK);
        let no_pebs = s.pebs_enable == 0 && s.ds_area == 0;
        Ok(match self.vendor {
            Vendor::Intel => {
                counters_fit
                    && no_pebs
                    && s.eventsel.iter().all(|&v| v & EVENTSEL_RESERVED == 0)
                    && s.fixed_ctr_ctrl & self.fctrl_reserved() == 0
                    && s.global_ctrl & !self.counter_bits() == 0
                    && s.global_status & self.status_reserved() == 0
            }
            // AMD clears reserved bits of event selectors and GLOBAL_CTRL; what it lacks
            // must hold its reset value.
            Vendor::Amd => {
                counters_fit
                    && no_pebs
                    && s.fixed_ctr_ctrl == 0
                    && s.misc_enable.is_none()
                    && if self.globals() {
                        s.global_status & self.status_reserved() == 0
                    } else {
                        s.global_ctrl == (1 << self.gp) - 1 && s.global_status == 0
                    }
            }
        })
    }

    fn load_shadow(&mut self, s: &PmuState) {
        self.reset_shadow();
        for (i, &v) in s.pmc.iter().enumerate() {
            self.counters[i] = v;
        }
        for (j, &v) in s.fixed_ctr.iter().enumerate() {
            self.counters[GP_SLOTS + j] = v;
        }
        let reserved = if self.amd() { AMD_EVENTSEL_RESERVED } else { 0 };
        for (i, &v) in s.eventsel.iter().enumerate() {
            self.eventsel[i] = v & !reserved;
        }
        self.fctrl = s.fixed_ctr_ctrl;
        self.gctrl = s.global_ctrl & self.counter_bits();
        self.status = s.global_status;
        self.misc = s.misc_enable.unwrap_or(MISC_RESET);
    }

    /// Applies `op` to the PMU and the shadow, then checks every invariant.
    pub fn step(&mut self, op: Op) -> Check {
        self.tally.ops += 1;
        if self.amd() {
            self.tally.amd_ops += 1;
        }
        let mut counted = [0u64; SLOTS];
        let who = |host: bool| {
            if host {
                Initiator::Host
            } else {
                Initiator::Guest
            }
        };
        match op {
            Op::Read { msr, host } => {
                let r = self.pmu.get_msr(MsrIndex(msr), who(host));
                ensure!(r.is_fault() == self.read_faults(msr, host), "read {msr:#x}: {r:?}");
                if let MsrAccess::Ok(v) = r {
                    ensure!(v == self.shadow_read(msr), "read {msr:#x} = {v:#x}, shadow {:#x}", self.shadow_read(msr));
                }
            }
            Op::Write { msr, value, host } => {
                let r = self.pmu.set_msr(MsrIndex(msr), value, who(host));
                let must = self.write_faults(msr, value, host);
                ensure!(
                    r.is_fault() == must,
                    "{} write {msr:#x} <- {value:#x}: {r:?}, expected fault: {must}",
                    if host { "host" } else { "guest" }
                );
                if r.is_fault() {
                    if host {
                        self.tally.host_rejects += 1;
                    } else {
                        self.tally.guest_faults += 1;
                    }
                } else {
                    self.apply_write(msr, value, host);
                }
            }
            Op::Rdpmc { ecx } => {
                let r = self.pmu.rdpmc(RdpmcIdx(ecx));
                // Intel: bit 31 fast (low 32 bits), bit 30 fixed; AMD: the counter number.
                let (slot, mask) = match self.vendor {
                    Vendor::Intel => {
                        let n = ecx & 0x3FFF_FFFF;
                        let slot = if ecx & 1 << 30 != 0 {
                            (n < u32::from(self.fixed)).then_some(GP_SLOTS + n as usize)
                        } else {
                            (n < u32::from(self.gp)).then_some(n as usize)
                        };
                        (slot, if ecx & 1 << 31 != 0 { 0xFFFF_FFFF } else { u64::MAX })
                    }
                    Vendor::Amd => ((ecx < u32::from(self.gp)).then_some(ecx as usize), u64::MAX),
                };
                match (slot, r) {
                    (Some(s), MsrAccess::Ok(v)) => {
                        let want = self.counters[s] & mask;
                        ensure!(v == want, "rdpmc {ecx:#x} = {v:#x}, shadow {want:#x}");
                    }
                    (None, MsrAccess::Fault) => {}
                    _ => return Err(format!("rdpmc {ecx:#x}: {r:?}")),
                }
            }
            Op::Advance { slot, n } => {
                let slots: Vec<usize> = match slot {
                    Some(s) => vec![usize::from(s) % SLOTS],
                    None => (0..SLOTS).collect(),
                };
                for s in slots {
                    let want = self.want(s);
                    let c = self.pmu.backend_mut().advance(idx_of(s), n);
                    // A counter that is not counting never receives counts.
                    ensure!(c == 0 || want.counts, "slot {s} counted {c} while not counting ({want:?})");
                    counted[s] = c;
                }
            }
            Op::Collect => {
                let pmi = self.pmu.collect_overflows();
                ensure!(pmi == self.pending, "collect_overflows = {pmi}, shadow pending {}", self.pending);
                self.pending = false;
                if pmi {
                    self.tally.pmis += 1;
                }
                ensure!(
                    !self.pmu.backend().overflow_due(),
                    "an enabled event is still past its overflow deadline after collect"
                );
            }
            Op::Tick { dt } => {
                self.now += dt;
                self.pmu.tick(self.now);
            }
            Op::SchedOut => {
                self.pmu.sched_out();
                self.scheduled_in = false;
            }
            Op::SchedIn => {
                self.pmu.sched_in();
                self.scheduled_in = true;
            }
            Op::Reset => {
                self.pmu.reset();
                self.reset_shadow();
            }
            Op::SaveRestore => {
                let s = self.pmu.save();
                let mine = PmuState {
                    format: STATE_FORMAT,
                    pmc: self.counters[..usize::from(self.gp)].to_vec(),
                    eventsel: self.eventsel[..usize::from(self.gp)].to_vec(),
                    fixed_ctr: self.counters[GP_SLOTS..GP_SLOTS + usize::from(self.fixed)].to_vec(),
                    fixed_ctr_ctrl: self.fctrl,
                    global_ctrl: self.gctrl,
                    global_status: self.status,
                    pebs_enable: 0,
                    ds_area: 0,
                    misc_enable: (!self.amd()).then_some(self.misc),
                };
                ensure!(s == mine, "save {s:?}, shadow {mine:?}");
                let r = self.pmu.restore(&s);
                ensure!(r.is_ok(), "restore of a fresh save: {r:?}");
                // Restore goes through reset: an owed PMI is dropped with it.
                self.pending = false;
            }
            Op::RestoreRandom { seed } => {
                let s = self.gen_state(seed);
                let r = self.pmu.restore(&s);
                match self.state_valid(&s) {
                    Err(()) => ensure!(r.is_err(), "restore of a misshapen {s:?}: {r:?}"),
                    Ok(true) => {
                        ensure!(r.is_ok(), "restore of valid {s:?}: {r:?}");
                        self.load_shadow(&s);
                    }
                    Ok(false) => {
                        ensure!(r.is_err(), "restore of invalid {s:?}: {r:?}");
                        self.reset_shadow();
                    }
                }
                if r.is_err() {
                    self.tally.restores_rejected += 1;
                }
            }
            Op::SetFilter { seed } => {
                let f = seed.map(|s| gen_filter(&mut XorShift::new(s), self.vendor));
                self.pmu.set_event_filter(f.clone());
                self.filter = f;
            }
            Op::SetFailOpen(fail) => {
                self.pmu.backend_mut().set_fail_open(fail);
                self.fail_open = fail;
            }
            Op::SetCpl(cpl) => self.pmu.backend_mut().set_cpl(cpl),
        }
        self.observe(&counted)
    }

    fn apply_write(&mut self, msr: u32, v: u64, host: bool) {
        let Some(reg) = self.reg(msr) else { return };
        match reg {
            HReg::Counter(s, Rule::Legacy) => {
                self.counters[s] = if host { v & COUNTER_MASK } else { (v as u32 as i32 as i64 as u64) & COUNTER_MASK }
            }
            HReg::Counter(s, Rule::FullWidth) => self.counters[s] = v,
            HReg::Counter(s, Rule::Masked) => self.counters[s] = v & COUNTER_MASK,
            HReg::EventSel(i) => {
                self.eventsel[i] = if self.amd() { v & !AMD_EVENTSEL_RESERVED } else { v };
            }
            HReg::FixedCtrl => self.fctrl = v,
            HReg::Ctrl => self.gctrl = v & self.counter_bits(),
            HReg::Status if host => self.status = v,
            // AMD: a guest write to the read-only status is ignored.
            HReg::Status => {}
            HReg::StatusClr if !host => self.status &= !v,
            HReg::StatusSet if !host => self.status |= v & self.status_bits(),
            HReg::StatusClr | HReg::StatusSet => {}
            HReg::Misc if host => self.misc = v,
            HReg::Misc => self.misc = v & !(1 << 7) | self.misc & 1 << 7,
            HReg::PerfCap => {}
        }
    }

    /// Reads everything back (folding every counter) and checks it against the shadow.
    fn observe(&mut self, counted: &[u64; SLOTS]) -> Check {
        // Counter values: shadow + what the mock delivered, wraps set status and owe PMIs.
        for (s, &delivered) in counted.iter().enumerate() {
            if !self.exists(s) {
                continue;
            }
            let interrupt = self.pmu.backend().event(idx_of(s)).is_some_and(|ev| ev.config.interrupt);
            let msr = self.counter_msr(s);
            let r = self.pmu.get_msr(MsrIndex(msr), Initiator::Host);
            let MsrAccess::Ok(v) = r else {
                return Err(format!("read of existing counter {msr:#x} faulted"));
            };
            ensure!(v <= COUNTER_MASK, "counter {msr:#x} = {v:#x} is wider than 48 bits");
            let sum = u128::from(self.counters[s]) + u128::from(delivered);
            let want = (sum & u128::from(COUNTER_MASK)) as u64;
            ensure!(
                v == want,
                "counter {msr:#x} = {v:#x}, expected {want:#x} (was {:#x}, counted {})",
                self.counters[s],
                delivered
            );
            self.counters[s] = v;
            self.tally.deliveries += u64::from(delivered > 0);
            if sum > u128::from(COUNTER_MASK) {
                self.tally.wraps += 1;
                if self.amd() {
                    self.tally.amd_wraps += 1;
                }
                // AMD without PerfMonV2 has no status register to record it in.
                if self.globals() {
                    self.status |= 1 << slot_bit(s);
                }
                if interrupt {
                    self.pending = true;
                }
            }
        }
        let globals = [(HReg::Status, self.status), (HReg::Ctrl, self.gctrl)];
        let intel_only = [(HReg::FixedCtrl, self.fctrl), (HReg::Misc, self.misc)];
        let amd = self.amd();
        for (reg, shadow) in globals.into_iter().chain(intel_only.into_iter().filter(|_| !amd)) {
            let Some(msr) = self.reg_msr(reg) else { continue };
            let r = self.pmu.get_msr(MsrIndex(msr), Initiator::Host);
            ensure!(r == MsrAccess::Ok(shadow), "{reg:?} {msr:#x} = {r:?}, shadow {shadow:#x}");
        }
        ensure!(self.status & !self.status_bits() == 0, "GLOBAL_STATUS {:#x} has bits of absent counters", self.status);
        for i in 0..usize::from(self.gp) {
            let msr = self.eventsel_msr(i);
            let r = self.pmu.get_msr(MsrIndex(msr), Initiator::Host);
            ensure!(r == MsrAccess::Ok(self.eventsel[i]), "EVENTSEL{i} = {r:?}, shadow {:#x}", self.eventsel[i]);
        }
        ensure!(
            self.pmu.pmi_pending() == self.pending,
            "pmi_pending {}, shadow {}",
            self.pmu.pmi_pending(),
            self.pending
        );

        // Backend calls: opens only of existing, filter-allowed counters.
        for call in self.pmu.backend_mut().take_calls() {
            if let MockCall::Open(idx, cfg) = call {
                let s = slot_of(idx);
                ensure!(self.exists(s), "open of absent counter {idx:?}");
                ensure!(self.filter_allows(s), "open of {idx:?} ({cfg:?}) denied by {:?}", self.filter);
                self.tally.opens += 1;
                if self.fail_open {
                    self.open_failed |= 1 << s;
                    self.tally.failed_opens += 1;
                } else {
                    self.open_failed &= !(1 << s);
                }
            }
        }
        let v = self.pmu.backend().violations();
        ensure!(v.is_empty(), "backend protocol violations: {v:?}");

        // Host events follow the guest registers exactly.
        let mut local = 0u64;
        for s in 0..SLOTS {
            if !self.exists(s) {
                continue;
            }
            if self.local_enable(s) {
                local |= 1 << slot_bit(s);
            }
            let want = self.want(s);
            let ev = self.pmu.backend().event(idx_of(s)).copied();
            let enabled = ev.is_some_and(|e| e.enabled);
            let failed = self.open_failed >> s & 1 == 1;
            ensure!(
                enabled == (want.counts && !failed),
                "slot {s}: host event {ev:?}, want {want:?}, open failed {failed}, filter {:?}",
                self.filter
            );
            if let Some(ev) = ev.filter(|e| e.enabled) {
                ensure!(Some(ev.config) == want.config, "slot {s}: host config {ev:?}, want {want:?}");
                // The backend is armed to signal exactly when the counter wraps (or has
                // already signalled a wrap that collect_overflows has not re-armed yet).
                let to_wrap = COUNTER_MASK + 1 - self.counters[s];
                let remaining = ev.overflow_at.map(|at| at.saturating_sub(ev.raw));
                ensure!(
                    remaining == Some(to_wrap) || remaining == Some(0),
                    "slot {s}: overflow armed {remaining:?} counts ahead, counter wraps in {to_wrap}"
                );
            }
            if want.config.is_some()
                && self.exists(s)
                && self.gctrl >> slot_bit(s) & 1 == 1
                && self.local_enable(s)
                && !self.filter_allows(s)
            {
                self.tally.denied_by_filter += 1;
            }
        }
        for s in 0..SLOTS {
            if !self.exists(s) {
                ensure!(self.pmu.backend().event(idx_of(s)).is_none(), "absent counter {s} has a host event");
            }
        }
        let active = self.gctrl & local != 0 || self.pmu.backend().open_events() > 0;
        ensure!(self.pmu.is_active() == active, "is_active {}, expected {active}", self.pmu.is_active());
        Ok(())
    }
}

fn slot_bit(slot: usize) -> u32 {
    if slot < GP_SLOTS {
        slot as u32
    } else {
        32 + (slot - GP_SLOTS) as u32
    }
}

/// Runs `ops` operations from `seed`, switching to a fresh random configuration every few
/// thousand. Panics with the seed, step and recent operations on the first failure.
pub fn run_seed(seed: u64, ops: u64) -> Tally {
    let mut e = XorShift::new(seed);
    let mut total = Tally::default();
    let mut done = 0;
    let mut recent: Vec<Op> = Vec::with_capacity(16);
    while done < ops {
        let fc = gen_config(&mut e);
        let mut h = Harness::new(&fc).unwrap_or_else(|m| panic!("seed {seed:#x}: {m}"));
        let len = (1 + e.below(5000)).min(ops - done);
        recent.clear();
        for step in 0..len {
            let op = h.gen_op(&mut e);
            if recent.len() == 16 {
                recent.remove(0);
            }
            recent.push(op);
            if let Err(m) = h.step(op) {
                panic!("seed {seed:#x}, op {} of config {fc:?}: {m}\nlast ops (oldest first): {recent:#?}", step);
            }
        }
        done += len;
        total.add(&h.tally);
    }
    total
}
