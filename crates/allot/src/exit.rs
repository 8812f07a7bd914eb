//! The exit codes of `allot`, decided in one place from the kinds of the
//! errors in a failure's chain (docs/cli.md has the table).
//!
//! The first error of the chain (outermost first) whose type says what
//! happened decides; an error without such a type is one the command found
//! in its arguments (bad usage), as clap's own are.

use std::error::Error;

use allot_server::ExportError;
use allot_server::ServerError;
use allot_server::auth::TokenError;
use allot_server::client::ClientError;
use allot_server::executor::slurm::SlurmErrorKind;
use allot_server::recovery::RecoveryError;
use allot_server::store::backup::BackupError;
use allot_server::store::{StoreError, StoreFailure};
use allot_trace::duration::DurationError;
use allot_trace::error::FormatError;

use crate::args::ArgError;

/// What `allot` exits with.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Code {
    /// The command did what it was asked.
    Ok = 0,
    /// The command failed while running: an output could not be written,
    /// the server stopped serving (lease lost, store replaced, a failed
    /// task), or the server answered with an internal error.
    Failed = 1,
    /// Bad usage or bad input: arguments and option values, the config,
    /// trace, events and client config files, a store url or a store that
    /// is not the data directory's. Clap's own errors exit 2 too.
    Usage = 2,
    /// The server cannot be reached or is unavailable (503), or the store
    /// cannot be reached or used now (down, busy, full, read-only).
    Unavailable = 3,
    /// Rejected: the request was understood and refused (400, 409, 422 and
    /// the other 4xx: an invalid field, a conflict, a policy's rejection, a
    /// token name taken), or another server holds the store.
    Rejected = 4,
    /// Authentication or permission (401, 403): no token, an unknown or
    /// revoked one, or a role or grant that does not allow it.
    Auth = 5,
    /// Not found (404): no such workload, account, node or token, or one
    /// the caller may not see.
    NotFound = 6,
}

impl Code {
    /// The code of a failure.
    pub fn of(e: &anyhow::Error) -> Code {
        e.chain().find_map(of_cause).unwrap_or(Code::Usage)
    }
}

/// The code an error of a known type says, if its type says one.
fn of_cause(e: &(dyn Error + 'static)) -> Option<Code> {
    if e.is::<FormatError>() || e.is::<ArgError>() || e.is::<DurationError>() {
        return Some(Code::Usage);
    }
    if let Some(e) = e.downcast_ref::<ClientError>() {
        return Some(client(e));
    }
    if e.is::<crate::cmd_client::PartlyRefused>() {
        return Some(Code::Rejected);
    }
    if let Some(e) = e.downcast_ref::<ServerError>() {
        return Some(server(e));
    }
    if let Some(e) = e.downcast_ref::<StoreError>() {
        return Some(store(e));
    }
    if let Some(e) = e.downcast_ref::<RecoveryError>() {
        return Some(match e {
            RecoveryError::Store(s) => store(s),
            RecoveryError::Accounts(_) => Code::Usage,
            RecoveryError::Journal(_) => Code::Failed,
        });
    }
    if let Some(e) = e.downcast_ref::<ExportError>() {
        return Some(match e {
            ExportError::Store(s) => store(s),
            ExportError::Write { .. } => Code::Failed,
        });
    }
    if let Some(e) = e.downcast_ref::<allot_server::journal::JournalError>() {
        use allot_server::journal::JournalError;
        return Some(match e {
            JournalError::Store(s) => store(s),
            JournalError::Replay(_) | JournalError::Differs { .. } => Code::Failed,
        });
    }
    if let Some(e) = e.downcast_ref::<BackupError>() {
        return Some(match e {
            BackupError::Url(_)
            | BackupError::Postgres { .. }
            | BackupError::Missing(_)
            | BackupError::NotAStore { .. }
            | BackupError::Newer { .. } => Code::Usage,
            BackupError::OutExists(_) | BackupError::TargetExists { .. } | BackupError::Served { .. } => Code::Rejected,
            BackupError::Store(s) => store(s),
            BackupError::Io { .. } => Code::Failed,
        });
    }
    if let Some(e) = e.downcast_ref::<TokenError>() {
        return Some(match e {
            TokenError::NameTaken(_) => Code::Rejected,
            TokenError::Invalid(_) => Code::Usage,
            TokenError::Store(s) => store(s),
        });
    }
    if e.is::<std::io::Error>() || e.is::<serde_json::Error>() {
        return Some(Code::Failed);
    }
    None
}

fn client(e: &ClientError) -> Code {
    match e {
        ClientError::Transport { .. } => Code::Unavailable,
        ClientError::Api { status, .. } => match status.as_u16() {
            503 => Code::Unavailable,
            401 | 403 => Code::Auth,
            404 => Code::NotFound,
            400..=499 => Code::Rejected,
            _ => Code::Failed,
        },
        ClientError::Config(_) => Code::Usage,
    }
}

fn server(e: &ServerError) -> Code {
    match e {
        ServerError::Config(_)
        | ServerError::Policy(..)
        | ServerError::Inventory(_)
        | ServerError::Edge(_)
        | ServerError::Containment(_)
        | ServerError::Executor(_)
        | ServerError::Sso(_) => Code::Usage,
        ServerError::Store(s) => store(s),
        ServerError::Recovery(RecoveryError::Store(s)) => store(s),
        ServerError::Recovery(RecoveryError::Accounts(_)) => Code::Usage,
        ServerError::Recovery(RecoveryError::Journal(_)) => Code::Failed,
        ServerError::Lock { .. } => Code::Unavailable,
        ServerError::Slurm(e) => slurm(&e.kind),
        ServerError::Held(_) => Code::Rejected,
        ServerError::Listen { .. }
        | ServerError::DataDir { .. }
        | ServerError::Http(_)
        | ServerError::Scheduler(_)
        | ServerError::Lease(_) => Code::Failed,
    }
}

/// Slurm at the start: its commands cannot run or fail (unavailable), or
/// the config does not match its partition (bad input).
fn slurm(kind: &SlurmErrorKind) -> Code {
    match kind {
        SlurmErrorKind::Spawn { .. } | SlurmErrorKind::Exit { .. } => Code::Unavailable,
        SlurmErrorKind::NoNodes { .. } | SlurmErrorKind::TooFewNodes { .. } | SlurmErrorKind::TooFewGpus { .. } => {
            Code::Usage
        }
        SlurmErrorKind::Output { .. } | SlurmErrorKind::Json(_) | SlurmErrorKind::Script { .. } => Code::Failed,
    }
}

/// A store failure: an outage is unavailability; a bad url, a store that
/// is not the one the data directory belongs to, or one a newer allot
/// migrated is bad input (the message says what to fix); a lost lease is
/// a stop.
fn store(e: &StoreError) -> Code {
    match &e.source {
        StoreFailure::Lost(_) | StoreFailure::Newer { .. } => Code::Usage,
        StoreFailure::Fenced(_) => Code::Failed,
        StoreFailure::Db(_) if e.is_unavailable() => Code::Unavailable,
        StoreFailure::Db(_) => Code::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_answer_of_the_server_has_its_code() {
        let cases = [
            ("invalid field", 400, Code::Rejected),
            ("no or bad token", 401, Code::Auth),
            ("role or grant", 403, Code::Auth),
            ("not found", 404, Code::NotFound),
            ("timed-out body", 408, Code::Rejected),
            ("conflict", 409, Code::Rejected),
            ("key reused", 422, Code::Rejected),
            ("internal", 500, Code::Failed),
            ("unavailable", 503, Code::Unavailable),
        ];
        for (name, status, want) in cases {
            let status = allot_server::client::StatusCode::from_u16(status).expect("a status");
            let e = ClientError::Api { status, error: name.into(), field: None, hint: None };
            assert_eq!(Code::of(&anyhow::Error::from(e).context("failed to do it")), want, "{name}");
        }
    }
}
