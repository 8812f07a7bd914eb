//! Durations in config files and duration flags: `30s`, `10m`, `2h`, `7d`,
//! compounds such as `1d12h` (units in decreasing order, each at most once),
//! a decimal of one unit (`1.5h`) that comes to whole seconds, Slurm's clock
//! forms `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM` and `D-HH:MM:SS`, or a bare
//! integer number of seconds. See `docs/config.md`.

const UNITS: [(char, u64); 4] = [('d', 86_400), ('h', 3_600), ('m', 60), ('s', 1)];

/// A duration that cannot be read: the text as given and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", match kind {
    DurationErrorKind::Invalid => format!("invalid duration {input:?} (use e.g. 30s, 10m, 2h, 1.5h, 7d, HH:MM:SS or D-HH:MM:SS)"),
    DurationErrorKind::NotWhole => format!("duration {input:?} is not a whole number of seconds"),
    DurationErrorKind::TooLarge => format!("duration {input:?} is too large"),
})]
pub struct DurationError {
    pub input: String,
    pub kind: DurationErrorKind,
}

/// What is wrong with a duration.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DurationErrorKind {
    /// Not a number of seconds nor `<integer><unit>` parts in decreasing order.
    Invalid,
    /// More seconds than a `u64` holds.
    TooLarge,
    /// A decimal that comes to a fraction of a second (`0.5s`).
    NotWhole,
}

fn invalid(s: &str) -> DurationError {
    DurationError { input: s.to_string(), kind: DurationErrorKind::Invalid }
}

fn too_large(s: &str) -> DurationError {
    DurationError { input: s.to_string(), kind: DurationErrorKind::TooLarge }
}

/// Parses a duration into whole seconds.
///
/// Accepts a bare integer (seconds), one or more `<integer><unit>` parts
/// with units `d`, `h`, `m`, `s` in decreasing order (`1d12h`, `2h30m`), one
/// `<decimal><unit>` part that comes to whole seconds (`1.5h`), or Slurm's
/// `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS` (minutes and seconds
/// below 60, hours after a day below 24). Surrounding whitespace is ignored;
/// anything else is an error.
pub fn parse_duration(s: &str) -> Result<u64, DurationError> {
    let t = s.trim();
    if t.is_empty() {
        return Err(invalid(s));
    }
    if t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse().map_err(|_| too_large(s));
    }
    if t.contains([':', '-']) {
        return parse_clock(s, t);
    }
    if t.contains('.') {
        return parse_decimal(s, t);
    }
    let mut total: u64 = 0;
    let mut rest = t;
    // Index into UNITS of the smallest unit allowed next.
    let mut next_unit = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(invalid(s));
        }
        let (num, tail) = rest.split_at(digits);
        let mut chars = tail.chars();
        let unit = chars.next().ok_or_else(|| invalid(s))?;
        let pos = UNITS.iter().position(|(u, _)| *u == unit).ok_or_else(|| invalid(s))?;
        if pos < next_unit {
            return Err(invalid(s));
        }
        next_unit = pos + 1;
        let n: u64 = num.parse().map_err(|_| too_large(s))?;
        total = n.checked_mul(UNITS[pos].1).and_then(|v| total.checked_add(v)).ok_or_else(|| too_large(s))?;
        rest = chars.as_str();
    }
    Ok(total)
}

/// `<digits>` of at most `max` (when given).
fn field(s: &str, v: &str, max: Option<u64>) -> Result<u64, DurationError> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(s));
    }
    let n: u64 = v.parse().map_err(|_| too_large(s))?;
    if max.is_some_and(|m| n > m) {
        return Err(invalid(s));
    }
    Ok(n)
}

/// Slurm's time forms: `[D-]HH[:MM[:SS]]` with a day, `MM:SS` or
/// `HH:MM:SS` without.
fn parse_clock(s: &str, t: &str) -> Result<u64, DurationError> {
    let (days, clock) = match t.split_once('-') {
        Some((d, rest)) => (Some(field(s, d, None)?), rest),
        None => (None, t),
    };
    let parts: Vec<&str> = clock.split(':').collect();
    let (h, m, sec) = match (days.is_some(), parts.as_slice()) {
        (true, [h]) => (*h, "0", "0"),
        (true, [h, m]) => (*h, *m, "0"),
        (_, [h, m, sec]) => (*h, *m, *sec),
        (false, [m, sec]) => ("0", *m, *sec),
        _ => return Err(invalid(s)),
    };
    let h = field(s, h, days.map(|_| 23))?;
    let (m, sec) = (field(s, m, Some(59))?, field(s, sec, Some(59))?);
    let day_s = days.unwrap_or(0).checked_mul(86_400).ok_or_else(|| too_large(s))?;
    h.checked_mul(3_600).and_then(|v| v.checked_add(day_s)).map(|v| v + m * 60 + sec).ok_or_else(|| too_large(s))
}

/// `<integer>.<digits><unit>`, e.g. `1.5h`; it must come to whole seconds.
fn parse_decimal(s: &str, t: &str) -> Result<u64, DurationError> {
    let mut chars = t.chars();
    let unit = chars.next_back().ok_or_else(|| invalid(s))?;
    let size = UNITS.iter().find(|(u, _)| *u == unit).map(|(_, n)| *n).ok_or_else(|| invalid(s))?;
    let (whole, frac) = chars.as_str().split_once('.').ok_or_else(|| invalid(s))?;
    let (whole, digits) = (field(s, whole, None)?, field(s, frac, None)?);
    // Fractions past a second's resolution of a day are never whole.
    let scale = 10u64.checked_pow(frac.len() as u32).filter(|_| frac.len() <= 12).ok_or_else(|| invalid(s))?;
    let part = u128::from(digits) * u128::from(size);
    if part % u128::from(scale) != 0 {
        return Err(DurationError { input: s.to_string(), kind: DurationErrorKind::NotWhole });
    }
    let part = (part / u128::from(scale)) as u64;
    whole.checked_mul(size).and_then(|v| v.checked_add(part)).ok_or_else(|| too_large(s))
}

/// Formats seconds in the shortest form [`parse_duration`] reads back:
/// `0` → `"0s"`, `7200` → `"2h"`, `129600` → `"1d12h"`, `90` → `"1m30s"`.
pub fn format_duration(secs: u64) -> String {
    if secs == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    let mut rest = secs;
    for (unit, size) in UNITS {
        let n = rest / size;
        if n > 0 {
            out.push_str(&n.to_string());
            out.push(unit);
            rest -= n * size;
        }
    }
    out
}
