//! Option values the command line reads itself: what is wrong with one.
//! Clap prints the message after "invalid value … for '--option'", and the
//! exit code is that of bad usage (docs/cli.md).

use allot_trace::duration::DurationError;

/// A bad option value.
#[derive(Debug, thiserror::Error)]
pub enum ArgError {
    /// A name that is not one of the known ones.
    #[error("unknown {what} {name:?} (known: {known})")]
    Unknown { what: &'static str, name: String, known: String },
    /// A value not of the expected form.
    #[error("expected {expected}, got {got:?}")]
    Expected { expected: &'static str, got: String },
    /// A number outside [0, 1].
    #[error("expected a value in [0, 1], got {0}")]
    NotAFraction(f64),
    #[error(transparent)]
    Duration(#[from] DurationError),
}

impl ArgError {
    pub fn unknown(what: &'static str, name: &str, known: &[&str]) -> ArgError {
        ArgError::Unknown { what, name: name.to_string(), known: known.join(", ") }
    }

    pub fn expected(expected: &'static str, got: &str) -> ArgError {
        ArgError::Expected { expected, got: got.to_string() }
    }
}

/// The value of `allot budget|share|impact set PATH VALUE`: `None` for
/// `default` (back to the config's). A budget is GPU-hours (NGH, normalised
/// by the GPU type's weight) per budget period: `10`, `10h`, `10NGH`,
/// `1.5`; a share or an impact is a weight without a unit.
pub fn account_value(field: allot_core::AccountField, s: &str) -> Result<Option<f64>, ArgError> {
    use allot_core::AccountField;
    if s == "default" {
        return Ok(None);
    }
    let (number, expected) = match field {
        AccountField::Budget => {
            let lower = s.trim().to_ascii_lowercase();
            let number = lower.strip_suffix("ngh").or_else(|| lower.strip_suffix('h')).unwrap_or(&lower).to_string();
            (number, "GPU-hours (NGH) per budget period, such as 10, 10h, 2.5NGH, or \"default\"")
        }
        AccountField::Share => (s.trim().to_string(), "a share: a weight such as 2 or 0.5 (no unit), or \"default\""),
        AccountField::Impact => {
            (s.trim().to_string(), "an impact: a weight such as 2 or 0.5 (no unit), or \"default\"")
        }
    };
    match number.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(Some(v)),
        _ => Err(ArgError::expected(expected, s)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_core::AccountField::{Budget, Impact, Share};

    #[test]
    fn account_values_with_their_units() {
        let cases = [
            ("budget, a number", Budget, "10", Ok(Some(10.0))),
            ("budget in hours", Budget, "10h", Ok(Some(10.0))),
            ("budget in NGH", Budget, "2.5NGH", Ok(Some(2.5))),
            ("budget in ngh, spaced", Budget, "2.5 ngh", Ok(Some(2.5))),
            ("default", Budget, "default", Ok(None)),
            ("share", Share, "0.5", Ok(Some(0.5))),
            ("impact", Impact, "2", Ok(Some(2.0))),
            (
                "budget in days",
                Budget,
                "10d",
                Err("expected GPU-hours (NGH) per budget period, such as 10, 10h, 2.5NGH, or \"default\", got \"10d\""),
            ),
            ("budget not finite", Budget, "inf", Err("expected GPU-hours (NGH)")),
            ("share with a unit", Share, "2h", Err("expected a share: a weight such as 2 or 0.5 (no unit)")),
            ("impact with a unit", Impact, "2x", Err("expected an impact: a weight")),
        ];
        for (name, field, given, want) in cases {
            match (account_value(field, given), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{name}"),
                (Err(e), Err(want)) => assert!(e.to_string().starts_with(want), "{name}: {e}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }
}
