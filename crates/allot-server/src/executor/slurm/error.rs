//! Errors of the Slurm commands the executor runs and of mapping the
//! config onto the partition: a [`SlurmError`] says what failed, its
//! [`SlurmErrorKind`] why.

use std::path::PathBuf;
use std::process::ExitStatus;

/// What the executor failed to do, and why.
#[derive(Debug, thiserror::Error)]
#[error("failed to {action}")]
pub struct SlurmError {
    /// What it was doing ("list the partition's nodes", …).
    pub action: String,
    #[source]
    pub kind: SlurmErrorKind,
}

/// Why a Slurm command or the node mapping failed.
#[derive(Debug, thiserror::Error)]
pub enum SlurmErrorKind {
    #[error("cannot run {command} (is Slurm installed?)")]
    Spawn {
        command: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{command} exited with {status}: {stderr}")]
    Exit { command: &'static str, status: ExitStatus, stderr: String },
    #[error("{command} printed {line:?}, expected {expected}")]
    Output { command: &'static str, line: String, expected: &'static str },
    #[error("squeue --json printed what Allot cannot read")]
    Json(#[source] serde_json::Error),
    #[error("sinfo lists no nodes{}", partition.as_ref().map(|p| format!(" in partition {p}")).unwrap_or_default())]
    NoNodes { partition: Option<String> },
    #[error("the config declares {config} nodes but Slurm has {slurm} ({names})")]
    TooFewNodes { config: usize, slurm: usize, names: String },
    #[error("config node {node} ({gpus} GPUs) maps to Slurm node {slurm_node}, which has {slurm_gpus} GPUs")]
    TooFewGpus { node: String, gpus: u32, slurm_node: String, slurm_gpus: u32 },
    #[error("cannot {what} {}", path.display())]
    Script {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl SlurmError {
    pub fn new(action: impl Into<String>, kind: SlurmErrorKind) -> SlurmError {
        SlurmError { action: action.into(), kind }
    }

    /// `command`'s failure to start or its non-zero exit, while doing `action`.
    pub(super) fn command(
        action: impl Into<String>,
        command: &'static str,
        out: std::io::Result<std::process::Output>,
    ) -> Result<std::process::Output, SlurmError> {
        let kind = match out {
            Err(source) => SlurmErrorKind::Spawn { command, source },
            Ok(o) if o.status.success() => return Ok(o),
            Ok(o) => SlurmErrorKind::Exit {
                command,
                status: o.status,
                stderr: String::from_utf8_lossy(&o.stderr).trim().to_string(),
            },
        };
        Err(SlurmError::new(action, kind))
    }
}
