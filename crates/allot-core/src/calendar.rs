//! Budget periods as a calendar (rule BUD-4; see `docs/budgets.md`).
//!
//! Periods are either fixed durations laid out from an anchor instant
//! (`anchor + k·length` for every integer `k`, so instants before the anchor
//! belong to periods too), or calendar months, each starting on the 1st at
//! 00:00 in a fixed UTC offset. Everything here is arithmetic on seconds since
//! the Unix epoch (the simulator's instant 0 is the epoch): no clock, no time
//! zone database.

use crate::Time;

const DAY: i64 = 86_400;

/// How budget periods are laid out in time.
#[derive(serde::Serialize, serde::Deserialize, Copy, Clone, Debug, PartialEq, Eq)]
pub enum Calendar {
    /// Periods of a fixed length starting at `anchor + k·length`.
    Fixed { anchor: Time },
    /// Calendar months starting on the 1st at 00:00 local time, where local
    /// time is UTC plus `utc_offset` seconds.
    Months { utc_offset: i32 },
}

impl Default for Calendar {
    fn default() -> Self {
        Calendar::Fixed { anchor: 0 }
    }
}

/// The budget periods: a calendar and, for [`Calendar::Fixed`], the length.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Periods {
    /// Length in seconds of a fixed period (0: one period for all time).
    /// Ignored for months.
    pub length: Time,
    pub calendar: Calendar,
}

impl Periods {
    /// The index of the period containing `t` (any integer; consecutive
    /// periods have consecutive indices).
    pub fn index(&self, t: Time) -> i64 {
        let t = t as i64;
        match self.calendar {
            Calendar::Fixed { .. } if self.length == 0 => 0,
            Calendar::Fixed { anchor } => (t - anchor as i64).div_euclid(self.length as i64),
            Calendar::Months { utc_offset } => {
                let (y, m, _) = civil_from_days((t + i64::from(utc_offset)).div_euclid(DAY));
                y * 12 + (m - 1)
            }
        }
    }

    /// The first instant of period `k` (0 when it would precede the epoch).
    pub fn start(&self, k: i64) -> Time {
        self.signed_start(k).max(0) as Time
    }

    /// The full length of period `k` in seconds, also for one that begins
    /// before the epoch (0 for the single period of length 0).
    pub fn length_of(&self, k: i64) -> Time {
        (self.signed_start(k + 1) - self.signed_start(k)) as Time
    }

    fn signed_start(&self, k: i64) -> i64 {
        match self.calendar {
            Calendar::Fixed { .. } if self.length == 0 => 0,
            Calendar::Fixed { anchor } => (anchor as i64).saturating_add(k.saturating_mul(self.length as i64)),
            Calendar::Months { utc_offset } => {
                days_from_civil(k.div_euclid(12), k.rem_euclid(12) + 1, 1) * DAY - i64::from(utc_offset)
            }
        }
    }

    /// `[start, end)` of the period containing `t`; `end` is `Time::MAX`
    /// for the single period of length 0.
    pub fn bounds(&self, t: Time) -> (Time, Time) {
        if matches!(self.calendar, Calendar::Fixed { .. }) && self.length == 0 {
            return (0, Time::MAX);
        }
        let k = self.index(t);
        (self.start(k), self.start(k + 1))
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (`m` in 1..=12).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date `(year, month 1..=12, day 1..=31)` of a day
/// number since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { yoe + era * 400 + 1 } else { yoe + era * 400 }, m, d)
}

/// Parses a UTC offset `"UTC"`, `"Z"`, `"+02:00"` or `"-05:30"` into seconds.
pub fn parse_utc_offset(s: &str) -> Result<i32, String> {
    if s == "UTC" || s == "Z" {
        return Ok(0);
    }
    let bad = || format!("invalid UTC offset {s:?}: expected \"UTC\" or \"+HH:MM\" / \"-HH:MM\"");
    let (sign, rest) = match s.as_bytes().first() {
        Some(b'+') => (1, &s[1..]),
        Some(b'-') => (-1, &s[1..]),
        _ => return Err(bad()),
    };
    let (h, m) = rest.split_once(':').ok_or_else(bad)?;
    if h.len() != 2 || m.len() != 2 {
        return Err(bad());
    }
    let h: i32 = h.parse().map_err(|_| bad())?;
    let m: i32 = m.parse().map_err(|_| bad())?;
    if h > 23 || m > 59 {
        return Err(bad());
    }
    Ok(sign * (h * 3600 + m * 60))
}

/// A UTC offset in seconds as [`parse_utc_offset`] reads it: `"+02:00"`.
pub fn format_utc_offset(s: i32) -> String {
    let sign = if s < 0 { '-' } else { '+' };
    let a = s.unsigned_abs();
    format!("{sign}{:02}:{:02}", a / 3600, a / 60 % 60)
}

/// Parses an RFC 3339 instant such as `"2026-01-05T00:00:00Z"` or
/// `"2026-01-05T09:00:00+02:00"` (no fractional seconds) into Unix seconds.
pub fn parse_instant(s: &str) -> Result<Time, String> {
    let bad = |why: &str| format!("invalid instant {s:?}: {why} (expected e.g. \"2026-01-05T00:00:00Z\")");
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !(b[10] == b'T' || b[10] == b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return Err(bad("not of the form YYYY-MM-DDTHH:MM:SS followed by Z or an offset"));
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, String> {
        let p = &s[r];
        if p.bytes().all(|c| c.is_ascii_digit()) {
            p.parse().map_err(|_| bad("not a number"))
        } else {
            Err(bad("not a number"))
        }
    };
    let (y, mo, d, h, mi, se) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) {
        return Err(bad("month out of range"));
    }
    let next = if mo == 12 { days_from_civil(y + 1, 1, 1) } else { days_from_civil(y, mo + 1, 1) };
    if d < 1 || d > next - days_from_civil(y, mo, 1) {
        return Err(bad("day out of range for the month"));
    }
    if h > 23 || mi > 59 || se > 59 {
        return Err(bad("time of day out of range"));
    }
    let offset = parse_utc_offset(&s[19..]).map_err(|_| bad("the zone must be Z or +HH:MM / -HH:MM"))?;
    let t = days_from_civil(y, mo, d) * DAY + h * 3600 + mi * 60 + se - i64::from(offset);
    Time::try_from(t).map_err(|_| bad("before 1970-01-01T00:00:00Z"))
}

/// `t` as RFC 3339 in UTC, e.g. `2026-01-05T00:00:00Z`.
pub fn format_instant(t: Time) -> String {
    let t = t as i64;
    let (y, m, d) = civil_from_days(t.div_euclid(DAY));
    let s = t.rem_euclid(DAY);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", s / 3600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_round_trip() {
        for z in (-800_000..800_000).step_by(97) {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z, "{y}-{m}-{d}");
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(days_from_civil(2000, 3, 1) - days_from_civil(2000, 2, 1), 29, "2000 is a leap year");
        assert_eq!(days_from_civil(1900, 3, 1) - days_from_civil(1900, 2, 1), 28, "1900 is not");
    }

    #[test]
    fn instants_parse_and_format() {
        for (s, t) in [
            ("1970-01-01T00:00:00Z", 0),
            ("2026-01-05T00:00:00Z", 1_767_571_200),
            ("2026-01-05T02:00:00+02:00", 1_767_571_200),
            ("2024-02-29T12:00:00Z", 1_709_208_000),
        ] {
            assert_eq!(parse_instant(s), Ok(t), "{s}");
        }
        assert_eq!(format_instant(1_767_571_200), "2026-01-05T00:00:00Z");
        for bad in [
            "2026-01-05",
            "2026-13-01T00:00:00Z",
            "2025-02-29T00:00:00Z",
            "2026-01-05T24:00:00Z",
            "2026-01-05T00:00:00",
            "1969-12-31T23:59:59Z",
            "2026-01-05T00:00:00+2:00",
        ] {
            assert!(parse_instant(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn utc_offsets() {
        assert_eq!(parse_utc_offset("UTC"), Ok(0));
        assert_eq!(parse_utc_offset("+05:30"), Ok(19_800));
        assert_eq!(parse_utc_offset("-08:00"), Ok(-28_800));
        for s in [0, 19_800, -28_800] {
            assert_eq!(parse_utc_offset(&format_utc_offset(s)), Ok(s));
        }
        for bad in ["Europe/Paris", "+5", "+24:00", "02:00"] {
            assert!(parse_utc_offset(bad).is_err(), "{bad}");
        }
    }
}
