//! The guest TSC's rate: the one place where cycles, nanoseconds and sampling frequencies
//! are converted into each other (the software clock's periods, the VMM's sampler, agent
//! sample times, measurements). A running VM states its rate (the vCPUs' `KVM_GET_TSC_KHZ`,
//! in its run report): nothing needs a throwaway VM to learn it.

use serde::Serialize;

/// A TSC rate in kHz (never 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TscRate {
    khz: u64,
}

/// How often to sample: every so many events, or so many times per second of cycles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplePeriod {
    /// A sample every this many events (`-c`).
    Count(u64),
    /// This many samples per second of guest cycles (`-F`).
    Hz(u64),
}

impl SamplePeriod {
    /// The period in nanoseconds of TSC time (a rate unknown, a cycle is taken for a ns).
    pub fn ns(self, tsc: Option<TscRate>) -> u64 {
        match (self, tsc) {
            (SamplePeriod::Hz(hz), _) => 1_000_000_000 / hz.max(1),
            (SamplePeriod::Count(n), Some(tsc)) => tsc.cycles_to_ns(n),
            (SamplePeriod::Count(n), None) => n,
        }
    }
}

impl TscRate {
    /// The rate of a TSC running at `khz`; None for 0 (unknown).
    pub fn from_khz(khz: u64) -> Option<TscRate> {
        (khz > 0).then_some(TscRate { khz })
    }

    /// The rate of a TSC running at `khz`, 0 (unknown) taken as 1 kHz: for the VMM's own
    /// timing, which needs some rate.
    pub fn from_khz_or_1(khz: u64) -> TscRate {
        TscRate { khz: khz.max(1) }
    }

    /// The rate in kHz.
    pub fn khz(self) -> u64 {
        self.khz
    }

    /// Nanoseconds of `cycles`, rounded down.
    pub fn cycles_to_ns(self, cycles: u64) -> u64 {
        self.scale(cycles, 1_000_000, self.khz, false)
    }

    /// Nanoseconds of `cycles`, rounded up.
    pub fn cycles_to_ns_ceil(self, cycles: u64) -> u64 {
        self.scale(cycles, 1_000_000, self.khz, true)
    }

    /// A signed TSC difference in nanoseconds.
    pub fn delta_ns(self, cycles: i128) -> i128 {
        cycles * 1_000_000 / i128::from(self.khz)
    }

    /// Seconds of `cycles`, for measurements.
    pub fn seconds(self, cycles: f64) -> f64 {
        cycles / (self.khz as f64 * 1000.0)
    }

    /// Microseconds of `cycles`, for measurements.
    pub fn cycles_to_us(self, cycles: f64) -> f64 {
        cycles * 1000.0 / self.khz as f64
    }

    /// Cycles in `ns` nanoseconds, rounded down.
    pub fn ns_to_cycles(self, ns: u64) -> u64 {
        self.scale(ns, self.khz, 1_000_000, false)
    }

    /// `x * mul / div`, rounded down or `up`, saturated, in 64-bit arithmetic where it can
    /// be (x = q * div + r, so x * mul / div = q * mul + r * mul / div): the VMM converts on
    /// every exit, and a 128-bit division is a slow library call.
    fn scale(self, x: u64, mul: u64, div: u64, up: bool) -> u64 {
        let (q, r) = (x / div, x % div);
        match r.checked_mul(mul) {
            Some(rm) => {
                let frac = if up { rm.div_ceil(div) } else { rm / div };
                q.saturating_mul(mul).saturating_add(frac)
            }
            None => {
                let p = u128::from(x) * u128::from(mul);
                let v = if up { p.div_ceil(u128::from(div)) } else { p / u128::from(div) };
                v.min(u128::from(u64::MAX)) as u64
            }
        }
    }

    /// The period in cycles of a sampling frequency (at least 1).
    pub fn cycles_per_sample(self, hz: u64) -> u64 {
        (self.khz.saturating_mul(1000) / hz.max(1)).max(1)
    }

    /// The period in events `period` means at this rate (a frequency: in cycles).
    pub fn cycles_of(self, period: SamplePeriod) -> u64 {
        match period {
            SamplePeriod::Count(n) => n,
            SamplePeriod::Hz(hz) => self.cycles_per_sample(hz),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_round_as_documented() {
        let tsc = TscRate::from_khz(2_000_000).unwrap(); // 2 GHz
        assert_eq!(tsc.cycles_to_ns(3), 1);
        assert_eq!(tsc.cycles_to_ns_ceil(3), 2);
        assert_eq!(tsc.ns_to_cycles(1_000), 2_000);
        assert_eq!(tsc.delta_ns(-4_000), -2_000);
        assert_eq!(tsc.cycles_per_sample(1000), 2_000_000);
        assert_eq!(tsc.cycles_of(SamplePeriod::Hz(2000)), 1_000_000);
        assert_eq!(tsc.cycles_of(SamplePeriod::Count(7)), 7);
        assert!((tsc.cycles_to_us(4_000.0) - 2.0).abs() < 1e-12);
        assert!((tsc.seconds(3e9) - 1.5).abs() < 1e-12);
        assert_eq!(TscRate::from_khz(0), None);
        assert_eq!(TscRate::from_khz_or_1(0), TscRate::from_khz(1).unwrap());
        assert_eq!(TscRate::from_khz_or_1(7), TscRate::from_khz(7).unwrap());
        assert_eq!(tsc.cycles_to_ns(u64::MAX), u64::MAX / 2, "no overflow");
        assert_eq!(TscRate::from_khz(1).unwrap().cycles_to_ns(u64::MAX), u64::MAX, "saturates");
        assert_eq!(TscRate::from_khz(1).unwrap().cycles_per_sample(u64::MAX), 1);
        assert_eq!(SamplePeriod::Hz(1000).ns(None), 1_000_000);
        assert_eq!(SamplePeriod::Count(4_000).ns(Some(tsc)), 2_000);
    }

    #[test]
    fn the_64_bit_paths_agree_with_128_bit_arithmetic() {
        let wide = |x: u64, mul: u64, div: u64, up: bool| {
            let p = u128::from(x) * u128::from(mul);
            let q = if up { p.div_ceil(u128::from(div)) } else { p / u128::from(div) };
            q.min(u128::from(u64::MAX)) as u64
        };
        for khz in [1, 999_983, 2_499_998, 3_000_000, u64::MAX / 3] {
            let tsc = TscRate::from_khz(khz).unwrap();
            let edge = u64::MAX / 1_000_000;
            let ns_edge = u64::MAX / khz;
            let mut seed = khz;
            let random = std::iter::repeat_with(move || {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                seed >> (seed % 64)
            });
            let edges = [0, 1, 7, 1_000_003, edge - 1, edge, edge + 1, ns_edge, ns_edge.saturating_add(1), u64::MAX];
            for x in edges.into_iter().chain(random.take(1000)) {
                assert_eq!(tsc.cycles_to_ns(x), wide(x, 1_000_000, khz, false), "{x} cycles at {khz}");
                assert_eq!(tsc.cycles_to_ns_ceil(x), wide(x, 1_000_000, khz, true), "{x} cycles at {khz}");
                assert_eq!(tsc.ns_to_cycles(x), wide(x, khz, 1_000_000, false), "{x} ns at {khz}");
            }
        }
    }
}
