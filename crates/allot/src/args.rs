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
