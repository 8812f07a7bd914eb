//! Signing in on the server's own host by the kernel's word: `allot
//! serve` listens on a Unix socket, `<data-dir>/login.sock` (mode 0666 in
//! a directory of mode 0711), and whoever connects gets a session as the
//! Unix user the kernel says they are (`SO_PEERCRED`), exactly as munge's
//! would be: the same `[[grants]]`, session length, bound on sessions and
//! audit entry (docs/security.md, *Signing in*).
//!
//! The protocol is the connection itself: the server reads nothing and
//! writes one JSON line, the session ([`LoginCreated`]) or `{"error": …}`,
//! then closes. Nothing is guessed here (the kernel names the caller), so
//! attempts are not limited per source as network sign-ins are.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};

use crate::api::App;
use crate::identity::UnixUser;
use crate::signin::{self, Attempt, How, Source};
use crate::views::LoginCreated;

/// The socket of a server whose data directory is `data_dir`.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join("login.sock")
}

/// How long one connection may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Binds the socket at `path` (a stale one of a previous server is
/// replaced) for everyone to connect to.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => {
            return Err(std::io::Error::other(format!(
                "{} exists and is not a socket: remove it (allot serve makes its login socket there)",
                path.display()
            )));
        }
        Err(_) => {}
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    Ok(listener)
}

/// Answers every connection to `listener` while the API's state lives.
/// It holds that state only weakly: a server that shuts down drops its
/// API, whose channel ends the scheduler; a login socket must not keep it.
pub async fn serve(app: std::sync::Weak<crate::api::AppState>, listener: UnixListener) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let Some(app) = app.upgrade() else { return };
                tokio::spawn(async move {
                    if tokio::time::timeout(TIMEOUT, answer(&app, stream)).await.is_err() {
                        tracing::warn!("a login-socket connection took longer than {TIMEOUT:?}: closed");
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "the login socket could not accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn answer(app: &App, mut stream: UnixStream) {
    let reply = match stream.peer_cred() {
        Ok(cred) => sign_in(app, cred.uid()).await,
        Err(e) => Err(format!("cannot read the caller's credentials: {e}")),
    };
    let line = match reply {
        Ok(created) => serde_json::to_string(&created),
        Err(error) => serde_json::to_string(&serde_json::json!({ "error": error })),
    }
    .expect("a reply serializes");
    let _ = stream.write_all(format!("{line}\n").as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// A session for the Unix user `uid`, or why not (audited either way).
async fn sign_in(app: &App, uid: u32) -> Result<LoginCreated, String> {
    let now = crate::clock::now() as i64;
    let attempt = Attempt { who: None, how: How::PeerCred, source: Source(None), refused: None };
    let refuse = |who: Option<String>, why: String| async move {
        signin::audit(&app.store, now, &Attempt { who: who.as_deref(), refused: Some(&why), ..attempt }).await;
        why
    };
    let user = match UnixUser::by_uid(uid) {
        Ok(u) => u,
        Err(e) => return Err(refuse(Some(format!("uid {uid}")), e.to_string()).await),
    };
    let Some(who) = crate::auth::principal_of(&user.name, &user.group_names, &app.auth.identity()) else {
        let why = format!(
            "{} (uid {}) is in no Unix user or group this server grants anything ([[grants]]): ask an admin",
            user.name, user.uid
        );
        return Err(refuse(Some(user.name.clone()), why).await);
    };
    let (id, token, expires_t) = match app.auth.open_session(&user.name, None, "peercred", "local").await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot open a session");
            return Err(format!("cannot open a session: {e}"));
        }
    };
    signin::audit(&app.store, now, &Attempt { who: Some(&user.name), ..attempt }).await;
    tracing::info!(user = %user.name, uid, role = who.role.as_str(), "signed in on the login socket");
    Ok(LoginCreated { id, token, user: user.name, role: who.role.as_str().into(), expires_t })
}
