//! Errors that stop an import. Bad *rows* never stop an import: they are
//! skipped and counted in the [`super::ImportSummary`]. What stops it is a
//! file that cannot be read at all, a missing column, or invalid options.

use std::path::{Path, PathBuf};

/// Why an import failed; messages read after "failed to import: …".
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: missing column {column:?} (header has: {header})")]
    MissingColumn { path: PathBuf, column: &'static str, header: String },
    #[error("{path}:{line}:{column}: invalid JSON")]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}:{line}: column {column:?}: {message}")]
    At { path: PathBuf, line: usize, column: String, message: String },
    #[error("{path}: {message}")]
    BadFile { path: PathBuf, message: String },
    #[error("invalid option: {0}")]
    BadOption(String),
    #[error("{path}: no row could be imported ({read} read, all skipped)")]
    NothingImported { path: PathBuf, read: u64 },
}

impl ImportError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        ImportError::Io { path: path.to_path_buf(), source }
    }

    pub(crate) fn at(path: &Path, line: usize, column: &str, message: impl Into<String>) -> Self {
        ImportError::At { path: path.to_path_buf(), line, column: column.to_string(), message: message.into() }
    }

    pub(crate) fn bad_file(path: &Path, message: impl Into<String>) -> Self {
        ImportError::BadFile { path: path.to_path_buf(), message: message.into() }
    }
}
