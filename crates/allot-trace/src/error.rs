//! The one error type for every input file: config, traces and node events.
//!
//! Rule (docs/style.md rule 13): bad input gets an error naming the file, the line and the
//! field — never a panic, never a silent default. [`FormatError`] renders as
//!
//! ```text
//! examples/trace.csv:12: field `gpus`: expected a non-negative integer, got "-3"
//! cluster.toml: key `contract.grace`: invalid duration "10q" (use e.g. 30s, 10m, 2h, 1.5h, 7d, HH:MM:SS or D-HH:MM:SS)
//! ```
//!
//! Config errors say `key` (a dotted TOML key), trace and event errors say
//! `field` (a column or JSON key). The underlying I/O, CSV or JSON error, if
//! any, is the [`std::error::Error::source`] and is not repeated in the message.

use std::fmt;
use std::path::Path;

/// Boxed underlying cause of a [`FormatError`].
pub type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Which kind of input file an error is about.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum FormatKind {
    /// The cluster + accounts + contract TOML.
    Config,
    /// A workload trace (CSV or JSON Lines).
    Trace,
    /// A node event file (CSV or JSON Lines).
    Events,
}

impl FormatKind {
    /// What a named location inside this kind of file is called.
    fn field_word(self) -> &'static str {
        match self {
            FormatKind::Config => "key",
            FormatKind::Trace | FormatKind::Events => "field",
        }
    }
}

/// A bad input file: where (file, line, field) and what is wrong.
#[derive(Debug, thiserror::Error)]
pub struct FormatError {
    pub kind: FormatKind,
    /// The file as the user named it.
    pub file: String,
    /// 1-based line; CSV: the physical line (the header is line 1).
    pub line: Option<u64>,
    /// Column / JSON key (traces, events) or dotted TOML key (config).
    pub field: Option<String>,
    /// What is wrong, lowercase.
    pub message: String,
    #[source]
    pub source: Option<Source>,
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": {} `{field}`", self.kind.field_word())?;
        }
        write!(f, ": {}", self.message)
    }
}

impl FormatError {
    /// An error about `file` as a whole; refine with [`Self::at_line`],
    /// [`Self::in_field`] and [`Self::caused_by`].
    pub fn new(kind: FormatKind, file: impl Into<String>, message: impl Into<String>) -> FormatError {
        FormatError { kind, file: file.into(), line: None, field: None, message: message.into(), source: None }
    }

    /// The file could not be opened or read.
    pub fn io(kind: FormatKind, path: &Path, err: std::io::Error) -> FormatError {
        FormatError::new(kind, path.display().to_string(), "cannot read the file").caused_by(err)
    }

    pub fn at_line(mut self, line: u64) -> FormatError {
        self.line = Some(line);
        self
    }

    pub fn in_field(mut self, field: impl Into<String>) -> FormatError {
        self.field = Some(field.into());
        self
    }

    pub fn caused_by(mut self, source: impl Into<Source>) -> FormatError {
        self.source = Some(source.into());
        self
    }
}

/// Maps a `csv` error to a [`FormatError`] at the line of the record it is
/// about (found by [`crate::lines::LineIndex`] when the reader reads
/// through one; the csv reader's own count is off with CRLF line ends).
pub(crate) fn from_csv<R: std::io::Read>(
    kind: FormatKind,
    file: &str,
    rdr: &mut csv::Reader<crate::lines::LineIndex<R>>,
    err: csv::Error,
) -> FormatError {
    let line = err.position().map(|p| crate::lines::record_line(rdr, p));
    let message = match err.kind() {
        csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
            format!("expected {expected_len} fields like the header, found {len}")
        }
        csv::ErrorKind::Utf8 { .. } => "invalid utf-8".to_string(),
        csv::ErrorKind::Io(_) => "cannot read the file".to_string(),
        _ => "malformed csv".to_string(),
    };
    let mut e = FormatError::new(kind, file, message).caused_by(err);
    e.line = line;
    e
}

/// Human form of a string value inside an error message: quoted, shortened.
pub(crate) fn quoted(s: &str) -> String {
    const MAX: usize = 60;
    if s.chars().count() <= MAX {
        format!("{s:?}")
    } else {
        let short: String = s.chars().take(MAX).collect();
        format!("{short:?}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_file_line_and_field() {
        let cases = [
            (
                "trace with line and field",
                FormatError::new(
                    FormatKind::Trace,
                    "examples/trace.csv",
                    "expected a non-negative integer, got \"-3\"",
                )
                .at_line(12)
                .in_field("gpus"),
                "examples/trace.csv:12: field `gpus`: expected a non-negative integer, got \"-3\"",
            ),
            (
                "config key without line",
                FormatError::new(FormatKind::Config, "cluster.toml", "bad").in_field("contract.grace"),
                "cluster.toml: key `contract.grace`: bad",
            ),
            ("whole file", FormatError::new(FormatKind::Events, "e.csv", "empty"), "e.csv: empty"),
        ];
        for (name, err, want) in cases {
            assert_eq!(err.to_string(), want, "case {name}");
        }
    }

    #[test]
    fn io_error_is_the_source() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = FormatError::io(FormatKind::Trace, Path::new("t.csv"), io);
        assert_eq!(e.to_string(), "t.csv: cannot read the file");
        assert_eq!(std::error::Error::source(&e).map(|s| s.to_string()), Some("gone".to_string()));
    }
}
