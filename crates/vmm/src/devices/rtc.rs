//! A CMOS/RTC stub at 0x70/0x71: the host's UTC time in BCD, 24-hour mode, never "update in
//! progress" (Linux spins on that bit while reading the clock at boot; a floating bus reads
//! it set forever), and 128 bytes of CMOS RAM for whatever else the guest writes.

/// Index port (bit 7: NMI disable, ignored).
pub const RTC_INDEX_PORT: u16 = 0x70;
/// Data port.
pub const RTC_DATA_PORT: u16 = 0x71;

const REG_A: u8 = 0x0a;
const REG_B: u8 = 0x0b;
const REG_C: u8 = 0x0c;
const REG_D: u8 = 0x0d;
const CENTURY: u8 = 0x32;
/// Register A: 32.768 kHz time base, 1024 Hz rate, UIP clear.
const REG_A_VALUE: u8 = 0x26;
/// Register B: 24-hour mode, BCD, no interrupts.
const REG_B_VALUE: u8 = 0x02;
/// Register D: valid RAM and time (the battery is fine).
const REG_D_VALUE: u8 = 0x80;

/// The RTC and CMOS RAM.
#[derive(Debug)]
pub struct Rtc {
    index: u8,
    ram: [u8; 128],
}

impl Default for Rtc {
    fn default() -> Self {
        Rtc { index: 0, ram: [0; 128] }
    }
}

fn bcd(v: i64) -> u8 {
    let v = v.rem_euclid(100) as u8;
    (v / 10) << 4 | (v % 10)
}

/// A UTC time broken down as the RTC shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    weekday: u32,
    hour: u32,
    minute: u32,
    second: u32,
}

impl Civil {
    /// `secs` since the Unix epoch, in the proleptic Gregorian calendar (Howard Hinnant's
    /// civil_from_days). Pure arithmetic: libc's gmtime_r reads /etc/localtime on its first
    /// call, which the vCPU thread's seccomp filter forbids.
    fn from_unix(secs: i64) -> Civil {
        let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        Civil {
            year,
            month,
            day,
            // 1970-01-01 was a Thursday (RTC weekday 5, Sunday = 1).
            weekday: ((days + 4).rem_euclid(7) + 1) as u32,
            hour: (rem / 3600) as u32,
            minute: (rem / 60 % 60) as u32,
            second: (rem % 60) as u32,
        }
    }

    /// The host's time now.
    fn now() -> Civil {
        let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Civil::from_unix(i64::try_from(secs).unwrap_or(0))
    }
}

impl Rtc {
    /// A guest IN from `port`.
    pub fn read(&mut self, port: u16) -> u8 {
        if port != RTC_DATA_PORT {
            return 0xff;
        }
        let time = |f: fn(&Civil) -> i64| bcd(f(&Civil::now()));
        match self.index {
            0x00 => time(|t| t.second.into()),
            0x02 => time(|t| t.minute.into()),
            0x04 => time(|t| t.hour.into()),
            0x06 => time(|t| t.weekday.into()),
            0x07 => time(|t| t.day.into()),
            0x08 => time(|t| t.month.into()),
            0x09 => time(|t| t.year),
            CENTURY => time(|t| t.year / 100),
            REG_A => REG_A_VALUE,
            REG_B => REG_B_VALUE,
            REG_C => 0,
            REG_D => REG_D_VALUE,
            i => self.ram[usize::from(i & 0x7f)],
        }
    }

    /// A guest OUT of `value` to `port`.
    pub fn write(&mut self, port: u16, value: u8) {
        match port {
            RTC_INDEX_PORT => self.index = value & 0x7f,
            _ => self.ram[usize::from(self.index)] = value,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(rtc: &mut Rtc, index: u8) -> u8 {
        rtc.write(RTC_INDEX_PORT, index | 0x80);
        rtc.read(RTC_DATA_PORT)
    }

    #[test]
    fn the_clock_is_never_updating_and_reads_as_bcd() {
        let mut rtc = Rtc::default();
        assert_eq!(reg(&mut rtc, REG_A) & 0x80, 0, "UIP clear");
        assert_eq!(reg(&mut rtc, REG_B) & 0x06, 0x02, "24 h, BCD");
        let year = reg(&mut rtc, 0x09);
        assert!(year >> 4 <= 9 && year & 0xf <= 9, "BCD year {year:#x}");
        assert_eq!(reg(&mut rtc, CENTURY), 0x20);
        let month = reg(&mut rtc, 0x08);
        assert!((0x01..=0x12).contains(&month), "{month:#x}");
        rtc.write(RTC_INDEX_PORT, 0x40);
        rtc.write(RTC_DATA_PORT, 0x5a);
        assert_eq!(reg(&mut rtc, 0x40), 0x5a, "CMOS RAM keeps what is written");
    }

    #[test]
    fn unix_time_breaks_down_as_the_calendar_does() {
        let civil =
            |year, month, day, weekday, hour, minute, second| Civil { year, month, day, weekday, hour, minute, second };
        assert_eq!(Civil::from_unix(0), civil(1970, 1, 1, 5, 0, 0, 0), "a Thursday");
        // 2000-02-29 23:59:59 UTC, a Tuesday: a leap day in a century divisible by 400.
        assert_eq!(Civil::from_unix(951_868_799), civil(2000, 2, 29, 3, 23, 59, 59));
        // 2026-11-26 18:32:14 UTC, a Thursday.
        assert_eq!(Civil::from_unix(1_795_717_934), civil(2026, 11, 26, 5, 18, 32, 14));
        // 2100-03-01 00:00:00 UTC: 2100 is not a leap year; a Monday.
        assert_eq!(Civil::from_unix(4_107_542_400), civil(2100, 3, 1, 2, 0, 0, 0));
    }
}
