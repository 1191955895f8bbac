//! A Linux guest on kvm_pvm, whose kernel code runs emulated: a dilated clock and the words
//! that make its boot cheaper.

/// What makes a boot cheaper where kernel code is emulated, added after perfvm's default
/// command line here only: a hardware host runs the kernel as a user would have it.
pub const EMULATED_CMDLINE: &str =
    "mitigations=off cryptomgr.notests random.trust_cpu=on audit=0 init_on_alloc=0 nosoftlockup";

/// How much faster than it runs a Linux guest is told its TSC runs (CPUID 0x15/0x16, or
/// `tsc_early_khz=`), so guest time passes this much slower than host time. This host
/// emulates kernel code at a few 10^5 instructions per second, thousands of times slower than
/// a CPU: at real time, HZ=250 timer ticks (a few thousand instructions each) would take most
/// of the emulator and the boot would crawl. Dilated, the guest sees fewer ticks per
/// instruction (docs/LINUX.md, "Time"); busy-wait delays last this much longer in host time.
///
/// At most [`MAX_TSC_SCALE`], and no more than Linux's TSC-deadline clockevent can hold: it
/// registers `tsc_khz * 125` Hz (the TSC / 8) as a u32, so a claimed TSC above 34.36 GHz wraps
/// and the tick comes early (128 x 2.5 GHz wrapped to 1.35 GHz: a tick every 17 ms of host
/// time instead of 0.5 s: a timer-interrupt storm; docs/LINUX.md, "Time").
pub fn tsc_scale(tsc_khz: u64) -> u64 {
    const DEADLINE_HZ_PER_KHZ: u64 = 1000 / 8;
    let max_claimed_khz = u64::from(u32::MAX) / DEADLINE_HZ_PER_KHZ;
    match max_claimed_khz.checked_div(tsc_khz) {
        Some(fits) => fits.clamp(1, MAX_TSC_SCALE),
        None => MAX_TSC_SCALE,
    }
}

/// The dilation wanted where the TSC is slow enough to allow it.
pub const MAX_TSC_SCALE: u64 = 128;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dilated_tsc_fits_linuxs_deadline_clockevent() {
        // Linux registers its TSC-deadline clockevent at tsc_khz * 125 Hz, a u32.
        let fits = |tsc_khz: u64| tsc_khz * tsc_scale(tsc_khz) * 125 <= u64::from(u32::MAX);
        assert_eq!(tsc_scale(2_499_998), 13, "a 2.5 GHz TSC: 13 x (14 x would wrap)");
        assert!(2_499_998 * 14 * 125 > u64::from(u32::MAX));
        for tsc_khz in [1_000, 100_000, 1_999_999, 2_445_000, 2_499_998, 3_700_000, 5_000_000] {
            assert!(fits(tsc_khz) || tsc_scale(tsc_khz) == 1, "{tsc_khz} kHz");
            assert!((1..=MAX_TSC_SCALE).contains(&tsc_scale(tsc_khz)));
        }
        assert_eq!(tsc_scale(100_000), MAX_TSC_SCALE, "a slow TSC gets the whole dilation");
        assert_eq!(tsc_scale(40_000_000), 1, "a TSC past 34 GHz is told as it is");
        assert_eq!(tsc_scale(0), MAX_TSC_SCALE, "unknown rate: the tables leave it out anyway");
    }
}
