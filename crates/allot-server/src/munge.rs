//! munge credentials (docs/security.md): how a person on any host of the
//! cluster proves their Unix identity to the server, with the trust the
//! site's Slurm already has.
//!
//! The client encodes a credential whose payload names this server's store
//! ([`payload_for`]: `allot-login:<instance>`), so that a credential made
//! for one Allot is worth nothing to another, and posts it to
//! `POST /v1/login/munge`. The server decodes it with `unmunge` on its own
//! munged (which refuses a replayed, expired or rewound credential and one
//! made with another key), checks the payload, and trusts the uid the
//! credential carries. It also remembers every credential it took until
//! the credential's own expiry, and refuses it a second time, even where
//! several munged daemons would each accept it once.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::io::AsyncWriteExt;

/// What a decoded credential says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    pub uid: u32,
    pub gid: u32,
    /// When it was made and how long it lives (seconds).
    pub encode_t: i64,
    pub ttl_s: i64,
    pub payload: String,
}

/// Why a credential was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MungeError {
    #[error("the munge credential was refused: {0}")]
    Refused(String),
    #[error("the munge credential was already used (a credential signs in once): get a new one")]
    Replayed,
    #[error(
        "the munge credential was made for another server (its payload is {0:?}); use `allot login` against this one"
    )]
    Audience(String),
    #[error("munge sign-in is not available on this server: {0}")]
    Unavailable(String),
}

/// The payload a credential for the store `instance` carries.
pub fn payload_for(instance: &str) -> String {
    format!("allot-login:{instance}")
}

/// What `unmunge`'s exit status means (munge's `munge_err_t`).
fn refusal(code: i32) -> Option<&'static str> {
    Some(match code {
        8 => "it is not a munge credential (bad format)",
        9 => "it is not a munge credential (bad version)",
        10 => "it uses a cipher this server's munged does not know",
        11 => "it uses a MAC this server's munged does not know",
        12 => "it uses compression this server's munged does not know",
        13 => "its realm is not this server's",
        14 => "it does not decode with this server's munge key (it was made on a host of another munge realm)",
        15 => "it has expired (munge credentials live minutes): get a new one",
        16 => "it was made in the future (the clocks of the two hosts disagree)",
        17 => return None,
        18 => "this server may not decode it (it was made for another user only)",
        _ => return Some("munged could not decode it"),
    })
}

/// Decodes `credential` with `unmunge` on munged's `socket` (its default
/// without one).
pub async fn decode(credential: &str, socket: Option<&str>) -> Result<Credential, MungeError> {
    let cred = credential.trim();
    if !cred.starts_with("MUNGE:") || cred.len() > 8192 || cred.bytes().any(|b| b.is_ascii_whitespace()) {
        return Err(MungeError::Refused("it is not a munge credential (expected MUNGE:… from `munge`)".into()));
    }
    let mut cmd = tokio::process::Command::new(unmunge());
    cmd.args(["--numeric", "--keys=UID,GID,ENCODE_TIME,TTL", "--metadata=/dev/stderr", "--output=/dev/stdout"]);
    if let Some(s) = socket {
        cmd.arg(format!("--socket={s}"));
    }
    cmd.env_clear()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| MungeError::Unavailable(format!("cannot run {}: {e}", unmunge())))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(cred.as_bytes()).await;
    }
    let out = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait_with_output())
        .await
        .map_err(|_| MungeError::Unavailable("unmunge did not answer within 10 s".into()))?
        .map_err(|e| MungeError::Unavailable(format!("unmunge failed: {e}")))?;
    let meta = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => {}
        Some(17) => return Err(MungeError::Replayed),
        Some(code) if code == 1 || code == 6 || code == 7 => {
            // EMUNGE_SNAFU, EMUNGE_SOCKET, EMUNGE_TIMEOUT: munged itself.
            return Err(MungeError::Unavailable(format!("munged does not answer ({})", meta.trim())));
        }
        Some(code) => {
            let why = refusal(code).unwrap_or("munged could not decode it");
            return Err(MungeError::Refused(why.to_string()));
        }
        None => return Err(MungeError::Unavailable("unmunge was killed".into())),
    }
    parse(&meta, &String::from_utf8_lossy(&out.stdout))
        .ok_or_else(|| MungeError::Unavailable(format!("unexpected unmunge output: {}", meta.trim())))
}

/// `unmunge --numeric` metadata (`KEY: value` lines) and the payload.
fn parse(meta: &str, payload: &str) -> Option<Credential> {
    let field = |k: &str| meta.lines().find_map(|l| l.strip_prefix(k)?.strip_prefix(':').map(|v| v.trim().to_string()));
    Some(Credential {
        uid: field("UID")?.parse().ok()?,
        gid: field("GID")?.parse().ok()?,
        encode_t: field("ENCODE_TIME")?.parse().ok()?,
        ttl_s: field("TTL")?.parse().ok()?,
        payload: payload.to_string(),
    })
}

/// The `unmunge` program (`ALLOT_UNMUNGE` overrides, for a site that
/// installs munge elsewhere).
fn unmunge() -> String {
    std::env::var("ALLOT_UNMUNGE").unwrap_or_else(|_| "unmunge".into())
}

/// Credentials already taken, until their expiry: each signs in once.
#[derive(Default)]
pub struct Seen {
    until: Mutex<HashMap<String, i64>>,
}

impl Seen {
    /// Takes `credential` (its hash) unless it was taken before; forgets
    /// the expired ones on the way.
    pub fn take(&self, credential: &str, expires_t: i64, now: i64) -> Result<(), MungeError> {
        let key = crate::secret::hash_token(credential.trim());
        let mut m = self.until.lock().expect("munge credentials seen");
        m.retain(|_, &mut t| t > now);
        if m.insert(key, expires_t).is_some() {
            return Err(MungeError::Replayed);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_read() {
        let meta =
            "UID:              2001\nGID:              2001\nENCODE_TIME:      1796000000\nTTL:              300\n";
        let c = parse(meta, "allot-login:x").unwrap();
        assert_eq!(
            (c.uid, c.gid, c.encode_t, c.ttl_s, c.payload.as_str()),
            (2001, 2001, 1796000000, 300, "allot-login:x")
        );
        assert_eq!(parse("UID: x\n", ""), None);
    }

    #[test]
    fn a_credential_is_taken_once() {
        let s = Seen::default();
        assert_eq!(s.take("MUNGE:abc", 100, 10), Ok(()));
        assert_eq!(s.take("MUNGE:abc", 100, 20), Err(MungeError::Replayed));
        assert_eq!(s.take("MUNGE:abc", 200, 150), Ok(()), "forgotten once expired");
    }

    #[tokio::test]
    async fn what_is_not_a_credential_is_refused_before_munged() {
        let e = decode("hello", None).await.unwrap_err();
        assert!(matches!(e, MungeError::Refused(ref m) if m.contains("not a munge credential")), "{e}");
    }
}
