//! The model fuzzer's harness, shared by the deterministic fuzzer (`tests/fuzz_ops.rs`,
//! seeded PRNG) and the cargo-fuzz target (`fuzz/fuzz_targets/pmu_ops.rs`, libFuzzer bytes
//! decoded through `arbitrary`). Both draw configurations and operations from an
//! [`Entropy`] source with the same biased generators, and both run every operation
//! through [`Harness::step`], which checks the model against an independent shadow of the
//! guest-visible state after each operation:
//!
//! * no panic; a guest (or host) write faults exactly when the SDM/KVM rules say so, which
//!   includes every write with a reserved bit set; a read faults exactly for absent MSRs;
//! * every register reads back what the shadow holds; every counter read fits 48 bits;
//! * a counter changes value only by an explicit write, reset or restore, or by the counts
//!   the mock actually delivered to it (so a counter that is not counting never changes);
//!   a wrap past 2^48 sets its GLOBAL_STATUS bit and, with INT/PMI, owes exactly one PMI;
//! * GLOBAL_STATUS only ever holds bits of counters that exist, plus 62/63;
//! * a host event is enabled exactly when the guest registers, the filter, the backend's
//!   events and the schedule say the counter counts (unless its `open` failed), with the
//!   configuration the registers ask for; the filter never lets a denied event be opened;
//! * the mock sees no backend protocol violation.
#![allow(dead_code)]

use pmu::{
    ArchEvent, EventSel, FilterAction, FixedCtrl, Initiator, MockCall, MockSource, MsrAccess, MsrIndex, PmcIdx, Pmu,
    PmuConfig, PmuEventFilter, PmuState, Policy, RdpmcIdx, COUNTER_MASK, FIXED_EVENTS, PMC_SLOTS as SLOTS,
    STATE_FORMAT,
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

const OVF_BUF_COND_CHGD: u64 = 3 << 62;
/// IA32_MISC_ENABLE of a PMU without PEBS at reset: EMON, BTS and PEBS unavailable.
const MISC_RESET: u64 = 1 << 7 | 3 << 11;
const EVENTSEL_RESERVED: u64 = 0xFFFF_FFFF_0020_0000;

/// Every PMU MSR of the largest PMU, the MSRs just outside each range, and a few others.
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
];

/// `(event, umask)` pairs guests program and filters list: the architectural events and a
/// few that are not.
const EVENT_POOL: &[(u8, u8)] = &[
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

/// A random filter, biased toward lists that name events guests program.
pub fn gen_filter(e: &mut impl Entropy) -> PmuEventFilter {
    let n = e.below(6) as usize;
    let events = (0..n)
        .map(|_| if e.chance(85) { e.pick(EVENT_POOL) } else { (e.next_u64() as u8, e.next_u64() as u8) })
        .collect();
    let fixed_counter_bitmap = if e.chance(90) { e.below(8) as u32 } else { e.next_u64() as u32 };
    PmuEventFilter {
        action: if e.chance(50) { FilterAction::Allow } else { FilterAction::Deny },
        events,
        fixed_counter_bitmap,
    }
}

/// A random configuration: 1..8 GP counters, full-width writes on/off, reuse (various
/// slices) or legacy, with or without a filter, a backend counting a random set of events.
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
    let filter = if e.chance(50) { Some(gen_filter(e)) } else { None };
    FuzzConfig {
        config: PmuConfig {
            gp_counters: 1 + e.below(8) as u8,
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
    pub guest_faults: u64,
    pub host_rejects: u64,
    /// Advances that delivered counts to a counter.
    pub deliveries: u64,
    pub wraps: u64,
    pub pmis: u64,
    pub opens: u64,
    pub failed_opens: u64,
    pub denied_by_filter: u64,
    pub restores_rejected: u64,
}

impl Tally {
    pub fn add(&mut self, o: &Tally) {
        self.ops += o.ops;
        self.guest_faults += o.guest_faults;
        self.host_rejects += o.host_rejects;
        self.deliveries += o.deliveries;
        self.wraps += o.wraps;
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
    gp: u8,
    fixed: u8,
    fw: bool,
    supported: Vec<ArchEvent>,
    filter: Option<PmuEventFilter>,
    counters: [u64; SLOTS],
    eventsel: [u64; 8],
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
        let fixed = FIXED_EVENTS.iter().take_while(|&&ev| has(ev)).count() as u8;
        let gp = fc.config.gp_counters;
        let h = Harness {
            pmu,
            gp,
            fixed,
            fw: fc.config.full_width_writes,
            supported: fc.supported.clone(),
            filter: fc.config.filter.clone(),
            counters: [0; SLOTS],
            eventsel: [0; 8],
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
        ensure!(caps.gp_counters() == gp && caps.fixed_counters() == fixed, "caps {caps:?} for {fc:?}");
        Ok(h)
    }

    fn exists(&self, slot: usize) -> bool {
        if slot < 8 {
            slot < usize::from(self.gp)
        } else {
            slot - 8 < usize::from(self.fixed)
        }
    }

    fn counter_bits(&self) -> u64 {
        ((1u64 << self.gp) - 1) | ((1u64 << self.fixed) - 1) << 32
    }

    fn fctrl_reserved(&self) -> u64 {
        !(0..self.fixed).fold(0u64, |m, j| m | 0xB << (4 * j))
    }

    fn status_reserved(&self) -> u64 {
        !(self.counter_bits() | OVF_BUF_COND_CHGD)
    }

    /// Must a write of `v` to `msr` fault? `None`: the MSR exists and the write is legal.
    fn write_faults(&self, msr: u32, v: u64, host: bool) -> bool {
        let gp = |base: u32| msr >= base && msr < base + u32::from(self.gp);
        let fixed = msr >= 0x309 && msr < 0x309 + u32::from(self.fixed);
        if gp(0xC1) {
            false
        } else if gp(0x4C1) && self.fw {
            v & !COUNTER_MASK != 0
        } else if gp(0x186) {
            v & EVENTSEL_RESERVED != 0
        } else if fixed {
            false
        } else {
            match msr {
                0x38D => v & self.fctrl_reserved() != 0,
                0x38F => v & !self.counter_bits() != 0,
                0x390 => v & self.status_reserved() != 0,
                0x38E => !host || v & self.status_reserved() != 0,
                0x345 => !host || v != if self.fw { 1 << 13 } else { 0 },
                // KVM's rule: the guest may not flip BTS/PEBS_UNAVAIL; the host writes anything.
                0x1A0 => !host && (v ^ self.misc) & 3 << 11 != 0,
                _ => true,
            }
        }
    }

    fn read_faults(&self, msr: u32, host: bool) -> bool {
        let gp = |base: u32| msr >= base && msr < base + u32::from(self.gp);
        !(gp(0xC1)
            || (gp(0x4C1) && self.fw)
            || gp(0x186)
            || (msr >= 0x309 && msr < 0x309 + u32::from(self.fixed))
            || matches!(msr, 0x38D..=0x390 | 0x1A0)
            // PERF_CAPABILITIES exists for the guest only with PDCM (= FW_WRITE here).
            || (msr == 0x345 && (host || self.fw)))
    }

    /// The shadow's value of `msr` (which exists).
    fn shadow_read(&self, msr: u32) -> u64 {
        match msr {
            0xC1..=0xC8 => self.counters[(msr - 0xC1) as usize],
            0x4C1..=0x4C8 => self.counters[(msr - 0x4C1) as usize],
            0x186..=0x18D => self.eventsel[(msr - 0x186) as usize],
            0x309..=0x30B => self.counters[8 + (msr - 0x309) as usize],
            0x38D => self.fctrl,
            0x38E => self.status,
            0x38F => self.gctrl,
            0x390 => 0,
            0x1A0 => self.misc,
            0x345 => {
                if self.fw {
                    1 << 13
                } else {
                    0
                }
            }
            _ => unreachable!("{msr:#x}"),
        }
    }

    fn local_enable(&self, slot: usize) -> bool {
        if slot < 8 {
            self.eventsel[slot] & EventSel::EN != 0
        } else {
            FixedCtrl::of(self.fctrl, (slot - 8) as u8).enabled()
        }
    }

    fn filter_allows(&self, slot: usize) -> bool {
        match &self.filter {
            None => true,
            Some(f) if slot < 8 => {
                let s = EventSel(self.eventsel[slot]);
                f.allows_gp(s.event(), s.umask())
            }
            Some(f) => f.allows_fixed((slot - 8) as u8),
        }
    }

    /// Whether counter `slot` counts and with which host configuration, from the shadow.
    fn want(&self, slot: usize) -> Want {
        let bit = slot_bit(slot);
        let enabled = self.exists(slot) && self.gctrl >> bit & 1 == 1 && self.local_enable(slot);
        let config = if slot < 8 {
            let s = EventSel(self.eventsel[slot]);
            s.arch_event().filter(|ev| self.supported.contains(ev)).map(|event| pmu::HostEventConfig {
                event,
                usr: s.usr(),
                os: s.os(),
                edge: s.edge(),
                inv: s.inv(),
                cmask: s.cmask(),
                interrupt: s.int(),
            })
        } else {
            let j = (slot - 8) as u8;
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
        self.eventsel = [0; 8];
        self.fctrl = 0;
        self.gctrl = (1 << self.gp) - 1;
        self.status = 0;
        self.misc = MISC_RESET;
        self.pending = false;
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
            ]),
            // A valid value with one random bit flipped: often exactly one reserved bit.
            3 => self.valid_value(e, msr) ^ 1 << e.below(64),
            _ => self.valid_value(e, msr),
        }
    }

    fn valid_value(&self, e: &mut impl Entropy, msr: u32) -> u64 {
        match msr {
            0x186..=0x18D => {
                let (ev, um) = e.pick(EVENT_POOL);
                let mut v = u64::from(ev)
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
                v
            }
            0x38D => {
                let v = e.next_u64() & !self.fctrl_reserved();
                if e.chance(50) {
                    v | 0x111 & !self.fctrl_reserved()
                } else {
                    v
                }
            }
            0x38F => {
                if e.chance(50) {
                    self.counter_bits()
                } else {
                    e.next_u64() & self.counter_bits()
                }
            }
            0x38E | 0x390 => e.next_u64() & (self.counter_bits() | OVF_BUF_COND_CHGD),
            0x1A0 => self.misc ^ e.next_u64() & !(3 << 11),
            0x345 => {
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

    /// A random operation; `msr_only` leaves out the environment (for the MSR-heavy mix).
    pub fn gen_op(&self, e: &mut impl Entropy) -> Op {
        match e.below(100) {
            0..=39 => {
                let msr = e.pick(MSR_POOL);
                let value = self.gen_value(e, msr);
                Op::Write { msr, value, host: e.chance(10) }
            }
            40..=47 => {
                // Toggle an enable bit, as guests do around measured regions.
                let (msr, bit) = match e.below(3) {
                    0 => (0x186 + e.below(u64::from(self.gp)) as u32, EventSel::EN),
                    1 => (0x38F, 1 << e.below(u64::from(self.gp))),
                    _ => (0x38D, 3 << (4 * e.below(3))),
                };
                let value = self.shadow_read(msr) ^ bit;
                Op::Write { msr, value, host: false }
            }
            48..=55 => Op::Read { msr: e.pick(MSR_POOL), host: e.chance(10) },
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
        let mut s = PmuState {
            format: STATE_FORMAT,
            pmc: (0..gp).map(|_| e.next_u64() & COUNTER_MASK).collect(),
            eventsel: (0..gp).map(|i| self.valid_value(&mut e, 0x186 + i as u32)).collect(),
            fixed_ctr: (0..fixed).map(|_| e.next_u64() & COUNTER_MASK).collect(),
            fixed_ctr_ctrl: self.valid_value(&mut e, 0x38D),
            global_ctrl: self.valid_value(&mut e, 0x38F),
            global_status: self.valid_value(&mut e, 0x38E),
            pebs_enable: 0,
            ds_area: 0,
            misc_enable: e.chance(50).then(|| e.next_u64()),
        };
        match e.below(12) {
            0 => s.format += 1,
            1 => s.pmc.push(0),
            2 if fixed > 0 => s.fixed_ctr.pop().map_or((), drop),
            3 => s.pmc[e.below(gp as u64) as usize] |= 1 << (48 + e.below(16)),
            4 => s.eventsel[e.below(gp as u64) as usize] |= 1 << 21,
            5 => s.fixed_ctr_ctrl |= 1 << e.below(64),
            6 => s.global_ctrl |= 1 << e.below(64),
            7 => s.global_status |= 1 << e.below(64),
            _ => {}
        }
        s
    }

    fn state_valid(&self, s: &PmuState) -> Result<bool, ()> {
        if s.format != STATE_FORMAT
            || s.pmc.len() != usize::from(self.gp)
            || s.eventsel.len() != usize::from(self.gp)
            || s.fixed_ctr.len() != usize::from(self.fixed)
        {
            return Err(()); // refused before anything changes
        }
        Ok(s.pmc.iter().chain(&s.fixed_ctr).all(|&v| v <= COUNTER_MASK)
            && s.eventsel.iter().all(|&v| v & EVENTSEL_RESERVED == 0)
            && s.fixed_ctr_ctrl & self.fctrl_reserved() == 0
            && s.global_ctrl & !self.counter_bits() == 0
            && s.global_status & self.status_reserved() == 0)
    }

    fn load_shadow(&mut self, s: &PmuState) {
        self.reset_shadow();
        for (i, &v) in s.pmc.iter().enumerate() {
            self.counters[i] = v;
        }
        for (j, &v) in s.fixed_ctr.iter().enumerate() {
            self.counters[8 + j] = v;
        }
        self.eventsel[..s.eventsel.len()].copy_from_slice(&s.eventsel);
        self.fctrl = s.fixed_ctr_ctrl;
        self.gctrl = s.global_ctrl;
        self.status = s.global_status;
        self.misc = s.misc_enable.unwrap_or(MISC_RESET);
    }

    /// Applies `op` to the PMU and the shadow, then checks every invariant.
    pub fn step(&mut self, op: Op) -> Check {
        self.tally.ops += 1;
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
                let n = ecx & 0x3FFF_FFFF;
                let slot = if ecx & 1 << 30 != 0 {
                    (n < u32::from(self.fixed)).then_some(8 + n as usize)
                } else {
                    (n < u32::from(self.gp)).then_some(n as usize)
                };
                match (slot, r) {
                    (Some(s), MsrAccess::Ok(v)) => {
                        let want = if ecx & 1 << 31 != 0 { self.counters[s] & 0xFFFF_FFFF } else { self.counters[s] };
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
                    fixed_ctr: self.counters[8..8 + usize::from(self.fixed)].to_vec(),
                    fixed_ctr_ctrl: self.fctrl,
                    global_ctrl: self.gctrl,
                    global_status: self.status,
                    pebs_enable: 0,
                    ds_area: 0,
                    misc_enable: Some(self.misc),
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
                let f = seed.map(|s| gen_filter(&mut XorShift::new(s)));
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
        match msr {
            0xC1..=0xC8 => {
                self.counters[(msr - 0xC1) as usize] =
                    if host { v & COUNTER_MASK } else { (v as u32 as i32 as i64 as u64) & COUNTER_MASK }
            }
            0x4C1..=0x4C8 => self.counters[(msr - 0x4C1) as usize] = v,
            0x309..=0x30B => self.counters[8 + (msr - 0x309) as usize] = v & COUNTER_MASK,
            0x186..=0x18D => self.eventsel[(msr - 0x186) as usize] = v,
            0x38D => self.fctrl = v,
            0x38F => self.gctrl = v,
            0x38E => self.status = v,
            0x390 if !host => self.status &= !v,
            0x1A0 if host => self.misc = v,
            0x1A0 => self.misc = v & !(1 << 7) | self.misc & 1 << 7,
            _ => {}
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
            let msr = if s < 8 { 0xC1 + s as u32 } else { 0x309 + s as u32 - 8 };
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
                self.status |= 1 << slot_bit(s);
                if interrupt {
                    self.pending = true;
                }
            }
        }
        for (msr, shadow) in [(0x38E, self.status), (0x38F, self.gctrl), (0x38D, self.fctrl), (0x1A0, self.misc)] {
            let r = self.pmu.get_msr(MsrIndex(msr), Initiator::Host);
            ensure!(r == MsrAccess::Ok(shadow), "{msr:#x} = {r:?}, shadow {shadow:#x}");
        }
        ensure!(
            self.status & !(self.counter_bits() | OVF_BUF_COND_CHGD) == 0,
            "GLOBAL_STATUS {:#x} has bits of absent counters",
            self.status
        );
        for i in 0..usize::from(self.gp) {
            let r = self.pmu.get_msr(MsrIndex(0x186 + i as u32), Initiator::Host);
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
    if slot < 8 {
        slot as u32
    } else {
        32 + slot as u32 - 8
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
