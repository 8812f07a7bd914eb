//! What can go wrong with a client call, said in one line that names the
//! fix: the server tried and how to set another, the token's source and how
//! to get one ([`super::config::Setup`]). `allot` maps each to an exit code
//! (docs/cli.md).

use std::error::Error;

use reqwest::StatusCode;

use super::config::Origin;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error; `hint` says what to do about it
    /// when the client knows more than the server (where the token came from).
    #[error(
        "{status}: {error}{}{}",
        field.as_ref().map(|f| format!(" (field `{f}`)")).unwrap_or_default(),
        hint.as_ref().map(|h| format!("; {h}")).unwrap_or_default()
    )]
    Api { status: StatusCode, error: String, field: Option<String>, hint: Option<String> },
    /// No answer: the connection could not be made or broke. `cause` is
    /// kept for the retry's decision, said in `why` (not a source: its
    /// chain repeats the URL).
    #[error("cannot reach the server at {url} ({origin}): {why}; {hint}")]
    Transport { url: String, origin: Origin, why: String, hint: String, cause: reqwest::Error },
    /// The client's own setup: the config file, the server URL, an answer
    /// that is not the API's.
    #[error("{0}")]
    Config(String),
}

impl ClientError {
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Worth the same request again: it was sent and its answer lost (a
    /// reset or timed-out connection, not one that never opened: then
    /// nothing was sent and the error is the user's to see at once), or the
    /// server said to come back (503) or is still committing the key's first
    /// try (409).
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            ClientError::Transport { cause, .. } => !cause.is_connect() && !cause.is_builder(),
            ClientError::Api { status, .. } => {
                *status == StatusCode::SERVICE_UNAVAILABLE || *status == StatusCode::CONFLICT
            }
            ClientError::Config(_) => false,
        }
    }
}

/// Why a request got no answer, in a few words: a timeout, or the
/// innermost cause (`connection refused`, a name that does not resolve)
/// without the OS error number.
pub(crate) fn why(e: &reqwest::Error, timeout: std::time::Duration) -> String {
    if e.is_timeout() {
        return format!("no answer within {} s", timeout.as_secs());
    }
    let mut inner: &dyn Error = e;
    while let Some(source) = inner.source() {
        inner = source;
    }
    let text = inner.to_string();
    let text = match text.find(" (os error ") {
        Some(i) => &text[..i],
        None => &text,
    };
    let mut chars = text.chars();
    chars.next().map(|c| c.to_lowercase().chain(chars).collect()).unwrap_or_default()
}
