//! A person's sessions on this machine: `allot login` keeps the session a
//! server opened for them in `sessions/` beside the client config file
//! (`~/.config/allot/sessions/`, or beside `$ALLOT_CLIENT_CONFIG`), one
//! file per server, readable by its owner only; later commands to that
//! server use it while it lasts and no `ALLOT_TOKEN` is set
//! (docs/security.md, *Signing in*).
//!
//! A session file that others can read, that is a link, or that another
//! user owns is refused with what to do: a token someone else could have
//! read or planted is not used.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ClientConfig;
use super::ClientError;

/// A session as saved: the server it is for, its token and when it ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Saved {
    pub server: String,
    pub id: String,
    pub token: String,
    pub user: String,
    pub expires_t: i64,
}

/// The directory sessions are kept in: `sessions/` beside the client
/// config file; none without `$ALLOT_CLIENT_CONFIG` or `$HOME`.
pub fn dir() -> Option<PathBuf> {
    let config = ClientConfig::path()?;
    Some(config.parent().unwrap_or(Path::new(".")).join("sessions"))
}

/// The file of `server`'s session (a URL as `config::server_url`
/// makes it): its scheme, host, port and path, each character that is not
/// a letter, digit, `.` or `-` made `_`.
pub fn file_for(dir: &Path, server: &str) -> PathBuf {
    let key: String =
        server.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect();
    dir.join(format!("{key}.json"))
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// The saved session of `server` when there is one that has not ended
/// (an ended one is removed); an error when the file is not safe to use.
pub fn load(server: &str) -> Result<Option<(Saved, PathBuf)>, ClientError> {
    let Some(dir) = dir() else { return Ok(None) };
    load_in(&dir, server, now())
}

pub fn load_in(dir: &Path, server: &str, now: i64) -> Result<Option<(Saved, PathBuf)>, ClientError> {
    let path = file_for(dir, server);
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ClientError::Config(format!("cannot read the session file {}: {e}", path.display()))),
    };
    let me = nix::unistd::Uid::effective().as_raw();
    let unsafe_file = |why: &str| {
        ClientError::Config(format!(
            "the session file {} {why}: it is not used; remove it and sign in again with `allot login`",
            path.display()
        ))
    };
    if !meta.file_type().is_file() {
        return Err(unsafe_file("is not a plain file"));
    }
    if meta.uid() != me {
        return Err(unsafe_file(&format!("belongs to uid {}, not to you (uid {me})", meta.uid())));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(unsafe_file(&format!("can be read by others (mode {:o})", meta.mode() & 0o777)));
    }
    let text = std::fs::read_to_string(&path)
        .map_err(|e| ClientError::Config(format!("cannot read the session file {}: {e}", path.display())))?;
    let saved: Saved = serde_json::from_str(&text).map_err(|e| {
        ClientError::Config(format!(
            "the session file {} is not one `allot login` wrote ({e}): remove it and sign in again",
            path.display()
        ))
    })?;
    if saved.server != server {
        return Err(unsafe_file(&format!("is for {}, not {server}", saved.server)));
    }
    if saved.expires_t <= now {
        let _ = std::fs::remove_file(&path);
        return Ok(None);
    }
    Ok(Some((saved, path)))
}

/// Saves `s` as its server's session, readable by its owner only; the
/// file it is in.
pub fn save(s: &Saved) -> Result<PathBuf, ClientError> {
    let dir = dir().ok_or_else(|| {
        ClientError::Config("cannot save the session: neither ALLOT_CLIENT_CONFIG nor HOME is set".to_string())
    })?;
    save_in(&dir, s)
}

pub fn save_in(dir: &Path, s: &Saved) -> Result<PathBuf, ClientError> {
    let fail = |what: &str, p: &Path, e: std::io::Error| {
        ClientError::Config(format!("cannot save the session: cannot {what} {}: {e}", p.display()))
    };
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| fail("create", dir, e))?;
    let meta = std::fs::symlink_metadata(dir).map_err(|e| fail("read", dir, e))?;
    if !meta.is_dir() || meta.uid() != nix::unistd::Uid::effective().as_raw() {
        return Err(ClientError::Config(format!(
            "cannot save the session: {} is not a directory of yours",
            dir.display()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| fail("restrict", dir, e))?;
    }
    let path = file_for(dir, &s.server);
    let tmp = path.with_extension(format!("json.{}", std::process::id()));
    let text = serde_json::to_string_pretty(s).expect("a session serializes");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(|e| fail("create", &tmp, e))?;
    f.write_all(text.as_bytes()).and_then(|()| f.sync_all()).map_err(|e| fail("write", &tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| fail("rename into", &path, e))?;
    Ok(path)
}

/// Removes `server`'s saved session; whether there was one.
pub fn remove(server: &str) -> Result<Option<PathBuf>, ClientError> {
    let Some(dir) = dir() else { return Ok(None) };
    let path = file_for(&dir, server);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(Some(path)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ClientError::Config(format!("cannot remove the session file {}: {e}", path.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saved(server: &str, expires_t: i64) -> Saved {
        Saved { server: server.into(), id: "s1".into(), token: "allot_s_x".into(), user: "alice".into(), expires_t }
    }

    #[test]
    fn a_session_is_saved_for_its_server_only_its_owner_reads_and_it_ends() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sessions");
        let a = "http://127.0.0.1:8080";
        let p = save_in(&dir, &saved(a, 2_000)).unwrap();
        assert_eq!(p, dir.join("http___127.0.0.1_8080.json"));
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        assert_eq!(load_in(&dir, a, 1_000).unwrap().map(|(s, _)| s), Some(saved(a, 2_000)));
        assert_eq!(load_in(&dir, "http://127.0.0.1:8081", 1_000).unwrap(), None, "another server's");
        // Readable by others: refused, not used.
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = load_in(&dir, a, 1_000).unwrap_err().to_string();
        assert!(e.contains("can be read by others (mode 644)") && e.contains("allot login"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        // A link planted in its place: refused.
        std::fs::rename(&p, dir.join("real")).unwrap();
        std::os::unix::fs::symlink(dir.join("real"), &p).unwrap();
        let e = load_in(&dir, a, 1_000).unwrap_err().to_string();
        assert!(e.contains("is not a plain file"), "{e}");
        std::fs::remove_file(&p).unwrap();
        // Saved for another server under this one's name: refused.
        std::fs::write(&p, serde_json::to_string(&saved("http://evil:1", 2_000)).unwrap()).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(load_in(&dir, a, 1_000).unwrap_err().to_string().contains("is for http://evil:1"));
        // Ended: not used, and removed.
        save_in(&dir, &saved(a, 2_000)).unwrap();
        assert_eq!(load_in(&dir, a, 2_000).unwrap(), None);
        assert!(!p.exists());
    }
}
