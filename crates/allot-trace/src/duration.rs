//! Durations in config files: `30s`, `10m`, `2h`, `7d`, compounds such as
//! `1d12h` (units in decreasing order, each at most once), or a bare integer
//! number of seconds. See `docs/config.md`.

const UNITS: [(char, u64); 4] = [('d', 86_400), ('h', 3_600), ('m', 60), ('s', 1)];

/// A duration that cannot be read: the text as given and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", match kind {
    DurationErrorKind::Invalid => format!("invalid duration {input:?} (use e.g. 30s, 10m, 2h, 7d)"),
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
}

fn invalid(s: &str) -> DurationError {
    DurationError { input: s.to_string(), kind: DurationErrorKind::Invalid }
}

fn too_large(s: &str) -> DurationError {
    DurationError { input: s.to_string(), kind: DurationErrorKind::TooLarge }
}

/// Parses a duration into whole seconds.
///
/// Accepts a bare integer (seconds) or one or more `<integer><unit>` parts
/// with units `d`, `h`, `m`, `s` in decreasing order (`1d12h`, `2h30m`).
/// Surrounding whitespace is ignored; anything else is an error.
pub fn parse_duration(s: &str) -> Result<u64, DurationError> {
    let t = s.trim();
    if t.is_empty() {
        return Err(invalid(s));
    }
    if t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse().map_err(|_| too_large(s));
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
