//! `allot login` and `allot logout`: a person proves their Unix identity
//! to a server (on its own host through its login socket, elsewhere with a
//! munge credential) and keeps the session it opens
//! (`client::session`); later commands to that server use it
//! (docs/security.md, *Signing in*).

use std::path::PathBuf;
use std::process::Stdio;

use allot_server::client::{Client, ClientError, StatusCode, session};
use allot_server::views::LoginCreated;
use anyhow::{Context, Result, bail};

use crate::cmd_client::ClientOpts;

#[derive(clap::Args)]
pub struct LoginArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// The munge daemon's socket, when not munge's default (passed to `munge --socket`).
    #[arg(long, value_name = "PATH")]
    munge_socket: Option<PathBuf>,
    /// Sign in with munge even on the server's own host (where its login socket is used by default).
    #[arg(long)]
    munge: bool,
}

#[derive(clap::Subcommand)]
pub enum SessionCommand {
    /// People's sessions (yours; admins: everyone's): id, user, how and from where opened, when it ends.
    List(LogoutArgs),
    /// End a session by its id (yours; admins: anyone's): it stops working at once.
    End(SessionEndArgs),
}

#[derive(clap::Args)]
pub struct SessionEndArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// The session's id, as `allot session list` shows it.
    id: String,
}

#[derive(clap::Args)]
pub struct LogoutArgs {
    #[command(flatten)]
    opts: ClientOpts,
}

/// The munge command: `$ALLOT_MUNGE`, else `munge` on `PATH`.
fn munge_program() -> String {
    std::env::var("ALLOT_MUNGE").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "munge".to_string())
}

/// A munge credential carrying `payload`, made as the caller.
async fn credential(payload: &str, socket: Option<&PathBuf>) -> Result<String> {
    let program = munge_program();
    let mut cmd = tokio::process::Command::new(&program);
    cmd.arg("--string").arg(payload);
    if let Some(s) = socket {
        cmd.arg("--socket").arg(s);
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let out = match cmd.output().await {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "cannot sign in: {program:?} is not installed on this host (Debian and Ubuntu: the munge package); \
             sign in from a host of the cluster, or ask an admin for a token"
        ),
        Err(e) => bail!("cannot sign in: cannot run {program:?}: {e}"),
    };
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
        bail!(
            "cannot sign in: {program} failed ({}): {why}; is munged running on this host{}?",
            out.status,
            socket.map(|s| format!(" with its socket at {}", s.display())).unwrap_or_default()
        );
    }
    let cred = String::from_utf8(out.stdout).context("munge wrote something that is not text")?;
    Ok(cred.trim().to_string())
}

/// Signs in on the server's own host: its login socket answers with a
/// session of the connecting user (the kernel's peer credentials).
async fn on_socket(socket: &std::path::Path) -> Result<LoginCreated> {
    use tokio::io::AsyncReadExt;
    let mut stream = tokio::net::UnixStream::connect(socket)
        .await
        .with_context(|| format!("cannot sign in: cannot connect to the login socket {}", socket.display()))?;
    let mut text = String::new();
    tokio::time::timeout(std::time::Duration::from_secs(15), stream.read_to_string(&mut text))
        .await
        .with_context(|| format!("cannot sign in: {} did not answer within 15 s", socket.display()))?
        .with_context(|| format!("cannot sign in: cannot read from {}", socket.display()))?;
    let v: serde_json::Value = serde_json::from_str(text.trim())
        .with_context(|| format!("cannot sign in: {} answered something that is not Allot's", socket.display()))?;
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        bail!("cannot sign in: {e}");
    }
    serde_json::from_value(v).with_context(|| format!("cannot sign in: an unexpected answer from {}", socket.display()))
}

pub async fn login(a: LoginArgs) -> Result<()> {
    let c = Client::anonymous(a.opts.server.as_deref())?;
    let info = c.login_info().await.context("cannot sign in")?;
    let local = info.socket.as_deref().map(PathBuf::from).filter(|p| !a.munge && p.exists());
    let created = match local {
        Some(socket) => on_socket(&socket).await?,
        None => {
            if !info.methods.iter().any(|m| m == "munge") {
                bail!(
                    "{} does not take munge sign-in ([identity] munge = false in its config): sign in on its \
                     host, or ask its admin for a token",
                    c.base()
                );
            }
            let cred = credential(&info.munge_payload, a.munge_socket.as_ref()).await?;
            c.login_munge(&cred).await.context("cannot sign in")?
        }
    };
    let saved = session::Saved {
        server: c.base().to_string(),
        id: created.id.clone(),
        token: created.token.clone(),
        user: created.user.clone(),
        expires_t: created.expires_t,
    };
    let path = session::save(&saved)?;
    if a.opts.json {
        let shown = serde_json::json!({
            "server": c.base(), "user": created.user, "role": created.role, "id": created.id,
            "expires_t": created.expires_t, "saved": path,
        });
        println!("{}", serde_json::to_string_pretty(&shown)?);
    } else {
        println!(
            "Signed in to {} as {} ({}) until {} UTC; the session is saved in {} (readable by you only).",
            c.base(),
            created.user,
            created.role,
            allot_core::calendar::format_instant(created.expires_t.max(0) as u64)
                .trim_end_matches('Z')
                .replacen('T', " ", 1),
            path.display()
        );
    }
    Ok(())
}

pub async fn logout(a: LogoutArgs) -> Result<()> {
    let c = Client::anonymous(a.opts.server.as_deref())?;
    let saved = match session::load(c.base()) {
        Ok(Some((s, _))) => Some(s),
        Ok(None) => None,
        // An unsafe file is not sent anywhere; it is removed below.
        Err(e) => {
            eprintln!("warning: {e}");
            None
        }
    };
    if let Some(s) = &saved {
        match c.with_token(s.token.clone()).end_session(&s.id).await {
            Ok(()) => {}
            // Already ended or expired on the server: nothing to end.
            Err(ClientError::Api { status, .. })
                if status == StatusCode::UNAUTHORIZED || status == StatusCode::NOT_FOUND => {}
            Err(e) => return Err(e).context("cannot end the session on the server (the saved session is kept)"),
        }
    }
    match (session::remove(c.base())?, saved) {
        (_, Some(s)) => println!("Signed out of {} ({}).", c.base(), s.user),
        (Some(p), None) => println!("Removed {}; there was no live session for {}.", p.display(), c.base()),
        (None, None) => println!("Not signed in to {}.", c.base()),
    }
    Ok(())
}

pub async fn session(c: SessionCommand) -> Result<()> {
    match c {
        SessionCommand::List(a) => {
            let list = crate::cmd_client::client(&a.opts)?.sessions().await.context("failed to list sessions")?;
            crate::cmd_client::output(a.opts.json, &list, |l| {
                let mut out = format!(
                    "{:<34} {:<16} {:<9} {:<24} {:<16} {}\n",
                    "ID", "USER", "HOW", "FROM", "OPENED (UTC)", "ENDS (UTC)"
                );
                for s in l {
                    out.push_str(&format!(
                        "{:<34} {:<16} {:<9} {:<24} {:<16} {}\n",
                        s.id,
                        s.unix_user,
                        s.method,
                        s.source,
                        crate::cmd_admin::utc(s.created_t),
                        crate::cmd_admin::utc(s.expires_t)
                    ));
                }
                out
            })
        }
        SessionCommand::End(a) => {
            crate::cmd_client::client(&a.opts)?.end_session(&a.id).await.context("failed to end the session")?;
            println!("Ended session {}.", a.id);
            Ok(())
        }
    }
}
