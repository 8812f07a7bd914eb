//! The administration commands: `allot token list|create|revoke`, `allot
//! audit` and `allot node drain|undrain|fail|repair`, through the API
//! (docs/server.md, *CLI client*), except `allot token create --db URL`,
//! which writes the token straight into the store: how the first admin
//! token is made, before any server runs or any token exists.

use std::path::PathBuf;

use allot_core::AccountId;
use allot_server::auth::{Role, TokenSpec, create_token};
use allot_server::client::ClientError;
use allot_server::store::Store;
use allot_server::views::{AuditView, TokenRequest, TokenView};
use anyhow::{Context, Result};

use crate::args::ArgError;
use crate::cmd_client::{ClientOpts, client, output};

fn parse_role(s: &str) -> Result<Role, ArgError> {
    Role::parse(s).ok_or_else(|| ArgError::unknown("role", s, &Role::ALL.map(Role::as_str)))
}

#[derive(clap::Subcommand)]
pub enum TokenCommand {
    /// List the tokens: name, role, scope or projects, who created them and when (never their text; admins).
    List(TokenListArgs),
    /// Create a token and print it once: through the server (admins), or with --db straight into the store
    /// (no server needed: the first admin token).
    Create(TokenCreateArgs),
    /// Revoke a token: it stops working at once (admins).
    Revoke(TokenRevokeArgs),
}

#[derive(clap::Args)]
pub struct TokenListArgs {
    #[command(flatten)]
    opts: ClientOpts,
}

#[derive(clap::Args)]
pub struct TokenCreateArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// admin, manager (with --scope), researcher (with --project) or metrics (a scrape token for /metrics).
    #[arg(long, value_parser = parse_role)]
    role: Role,
    /// The principal's name, unique: 1-64 letters, digits, '-', '_', '.' or '@'.
    #[arg(long)]
    name: String,
    /// The account subtree a manager manages (a path such as org/llm).
    #[arg(long, value_name = "PATH")]
    scope: Option<String>,
    /// An account granted to a researcher, with its subtree (repeatable).
    #[arg(long = "project", value_name = "PATH")]
    projects: Vec<String>,
    /// The Unix user its workloads run as: the service account it acts for (a token without one cannot submit
    /// unless the server runs --single-user; people sign in as themselves with `allot login`).
    #[arg(long, value_name = "LOGIN")]
    user: Option<String>,
    /// It stops working after this long (e.g. 90d, 12h); default: until revoked.
    #[arg(long, value_name = "DURATION", value_parser = parse_expiry)]
    expires: Option<u64>,
    /// Write the token straight into this store (as given to `allot serve --db`, e.g. sqlite://allot.db)
    /// instead of asking the server: how the first admin token is made.
    #[arg(long, value_name = "URL", conflicts_with = "server")]
    db: Option<String>,
    /// With --db: the config (TOML) whose accounts --scope and --project must name.
    #[arg(long, value_name = "FILE", requires = "db")]
    config: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct TokenRevokeArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// The token's name, as `allot token list` shows it.
    name: String,
}

#[derive(clap::Args)]
pub struct AuditArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// The most entries to show, newest first (a count; the server's default: 1000).
    #[arg(long, value_name = "N")]
    limit: Option<u32>,
}

#[derive(clap::Subcommand)]
pub enum NodeCommand {
    /// Preempt the node's workloads under the contract, then take it out of service.
    Drain(NodeArgs),
    /// Return a drained node to service.
    Undrain(NodeArgs),
    /// Mark the node failed: its workloads are killed at once (grace 0) and requeued; it stays out of
    /// service until repaired (admins).
    Fail(NodeArgs),
    /// Return a failed node to service (admins).
    Repair(NodeArgs),
}

#[derive(clap::Args)]
pub struct NodeArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// The node's name, as `allot nodes` lists it.
    name: String,
    /// Why (as Slurm's `reason=`): shown by `allot nodes` while the node is out of service, and
    /// kept in the audit log.
    #[arg(long, short = 'r', value_name = "TEXT")]
    reason: Option<String>,
}

#[derive(clap::Subcommand)]
pub enum AdminCommand {
    /// Read the server's config file again and apply what changed (as SIGHUP does): accounts, shares,
    /// budgets, the contract, alerts, API limits, grants. All or nothing: a change that needs a restart
    /// (clusters, pools, executors, budget periods) is refused with the reason, and nothing changes.
    Reload(ReloadArgs),
}

#[derive(clap::Args)]
pub struct ReloadArgs {
    #[command(flatten)]
    opts: ClientOpts,
}

pub fn run_admin(c: AdminCommand) -> Result<()> {
    match c {
        AdminCommand::Reload(a) => {
            let r = runtime()?
                .block_on(async { client(&a.opts)?.reload().await.context("failed to reload the server's config") })?;
            output(a.opts.json, &r, |r| {
                if r.changes.is_empty() {
                    format!("{}: unchanged; nothing to apply\n", r.file)
                } else {
                    let mut out =
                        format!("{}: {} applied\n", r.file, allot_core::words::count(r.changes.len() as u64, "change"));
                    for c in &r.changes {
                        out.push_str(&format!("  {c}\n"));
                    }
                    out
                }
            })
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().context("failed to start the runtime")
}

pub fn run_token(c: TokenCommand) -> Result<()> {
    let rt = runtime()?;
    match c {
        TokenCommand::List(a) => {
            let list = rt.block_on(async { client(&a.opts)?.tokens().await.context("failed to list tokens") })?;
            output(a.opts.json, &list, |l| tokens(l))
        }
        TokenCommand::Create(a) => match a.db.clone() {
            Some(db) => rt.block_on(create_in_store(a, &db)),
            None => rt.block_on(create_through_server(a)),
        },
        TokenCommand::Revoke(a) => {
            rt.block_on(async {
                client(&a.opts)?.revoke_token(&a.name).await.with_context(|| format!("failed to revoke {:?}", a.name))
            })?;
            eprintln!("revoked token {:?}", a.name);
            Ok(())
        }
    }
}

fn spec_of(a: &TokenCreateArgs) -> TokenSpec {
    TokenSpec {
        name: a.name.clone(),
        role: a.role,
        scope: a.scope.clone(),
        projects: a.projects.clone(),
        unix_user: a.user.clone(),
        expires_in_s: a.expires,
    }
}

/// `--expires`: a duration as the config writes them (`90d`, `12h`).
fn parse_expiry(s: &str) -> Result<u64, String> {
    allot_trace::duration::parse_duration(s).map_err(|e| e.to_string())
}

/// The option of a field of a token's spec, as the errors name it.
fn flag(field: &str) -> &str {
    match field {
        "projects" => "project",
        f => f,
    }
}

/// `allot token create --db URL`: checked against `--config` if given.
async fn create_in_store(a: TokenCreateArgs, db: &str) -> Result<()> {
    let spec = spec_of(&a);
    let accounts = match &a.config {
        Some(p) => Some((p, allot_trace::config::load_config(p)?.accounts)),
        None => None,
    };
    let account = |name: &str| match &accounts {
        Some((file, tree)) if tree.get(name).is_none_or(|id| id == AccountId::ROOT) => {
            let known: Vec<&str> = tree.ids_by_path().map(|id| tree.account(id).path.as_str()).collect();
            let list = allot_trace::choices::list(name, &known);
            Err(format!("unknown account {name:?} (accounts of {}: {list})", file.display()))
        }
        _ => Ok(()),
    };
    if let Err((field, msg)) = spec.check(account) {
        anyhow::bail!("--{}: {msg}", flag(field));
    }
    let store = Store::open(db).await?;
    let token = create_token(&store, &spec, "allot token create").await;
    store.close().await;
    println!("{}", token?);
    eprintln!("created {} token {:?}; it is shown only this once", spec.role.as_str(), spec.name);
    Ok(())
}

/// `allot token create` through `POST /v1/tokens`: a field the server
/// blames is named as its option.
async fn create_through_server(a: TokenCreateArgs) -> Result<()> {
    let spec = spec_of(&a);
    let req = TokenRequest {
        name: spec.name.clone(),
        role: spec.role.as_str().to_string(),
        scope: spec.scope,
        projects: spec.projects,
        user: spec.unix_user,
        expires_in_s: spec.expires_in_s,
    };
    let created = client(&a.opts)?
        .create_token(&req)
        .await
        .map_err(|e| match e {
            ClientError::Api { status, error, field: Some(f), hint } => {
                ClientError::Api { status, error: format!("--{}: {error}", flag(&f)), field: None, hint }
            }
            e => e,
        })
        .with_context(|| format!("failed to create token {:?}", a.name))?;
    output(a.opts.json, &created, |c| format!("{}\n", c.token))?;
    eprintln!("created {} token {:?}; it is shown only this once", created.role, created.name);
    Ok(())
}

pub fn run_audit(a: AuditArgs) -> Result<()> {
    let q: Vec<(&str, String)> = a.limit.map(|n| ("limit", n.to_string())).into_iter().collect();
    let entries =
        runtime()?.block_on(async { client(&a.opts)?.audit(&q).await.context("failed to read the audit log") })?;
    output(a.opts.json, &entries, |e| audit(e))
}

pub fn run_node(n: NodeCommand) -> Result<()> {
    let (a, action) = match n {
        NodeCommand::Drain(a) => (a, "drain"),
        NodeCommand::Undrain(a) => (a, "undrain"),
        NodeCommand::Fail(a) => (a, "fail"),
        NodeCommand::Repair(a) => (a, "repair"),
    };
    let v = runtime()?.block_on(async {
        client(&a.opts)?
            .node_action(&a.name, action, a.reason.as_deref())
            .await
            .with_context(|| format!("failed to {action} node {}", a.name))
    })?;
    output(a.opts.json, &v, |v| match &v.reason {
        Some(r) => format!("{} {} ({r})\n", v.name, v.health),
        None => format!("{} {}\n", v.name, v.health),
    })
}

/// `YYYY-MM-DD HH:MM` (UTC) of Unix seconds.
pub(crate) fn utc(t: i64) -> String {
    let iso = allot_core::calendar::format_instant(t.max(0) as u64);
    format!("{} {}", &iso[..10], &iso[11..16])
}

/// `allot token list`: a row per token.
fn tokens(list: &[TokenView]) -> String {
    let mut rows = vec![["NAME", "ROLE", "SCOPE/PROJECTS", "CREATED (UTC)", "BY"].map(String::from).to_vec()];
    for t in list {
        let grants = t.scope.clone().unwrap_or_else(|| t.projects.join(","));
        let grants = if grants.is_empty() { "-".to_string() } else { grants };
        rows.push(vec![t.name.clone(), t.role.clone(), grants, utc(t.created_t), t.created_by.clone()]);
    }
    allot_server::client::render::aligned(&rows, &[])
}

/// `allot audit`: a row per entry, newest first, before → after.
fn audit(list: &[AuditView]) -> String {
    let mut rows = vec![["TIME (UTC)", "WHO", "ACTION", "TARGET", "BEFORE → AFTER"].map(String::from).to_vec()];
    for e in list {
        let change = match (&e.before, &e.after) {
            (None, None) => "-".to_string(),
            (b, a) => format!("{} → {}", audit_value(b), audit_value(a)),
        };
        rows.push(vec![utc(e.t), e.principal.clone(), e.action.clone(), e.target.clone(), change]);
    }
    allot_server::client::render::aligned(&rows, &[])
}

/// An audit entry's before or after as people read it: `key=value` pairs
/// of an object (nulls left out), a plain string or number as itself.
fn audit_value(v: &Option<serde_json::Value>) -> String {
    use serde_json::Value;
    match v {
        None | Some(Value::Null) => "-".into(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(m)) => {
            let pairs: Vec<String> = m
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| match v {
                    Value::String(s) => format!("{k}={s}"),
                    v => format!("{k}={v}"),
                })
                .collect();
            if pairs.is_empty() { "-".into() } else { pairs.join(" ") }
        }
        Some(v) => v.to_string(),
    }
}
