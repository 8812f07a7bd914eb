//! Accounts (tree, budgets, shares), nodes, tokens, the audit log, health
//! and metrics.
//!
//! An account the caller may not see is answered exactly like one that does
//! not exist (404, the same message); node listings show only the workloads
//! the caller may see; per-account metrics only to admins and scrape tokens.

use std::collections::HashMap;

use allot_core::NodeEventKind;
use allot_core::cluster::ClusterSet;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;

use allot_trace::bounds;

use super::{ApiError, ApiErrors, App, Auth, Body, ErrorKind, ask, cluster_filter};
use crate::auth::{Principal, Role, TokenError, TokenSpec, create_token as make_token};
use crate::scheduler::Msg;
use crate::views::{
    AccountChange, AccountDecl, AccountEdits, AccountTreeImport, AccountView, AuditView, NodeView, ReloadView,
    TokenCreated, TokenRequest, TokenView,
};
use allot_core::account::MAX_USERS;
use allot_core::{AccountEdit, AccountField};

#[utoipa::path(get, path = "/v1/health", summary = "liveness", responses((status = 200, description = "ok", body = Object), ApiErrors))]
pub async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok"}))
}

#[utoipa::path(get, path = "/v1/whoami", summary = "the caller's principal", description = "Roles: any.", security(("bearer" = [])), responses((status = 200, description = "success", body = Principal), ApiErrors))]
pub async fn whoami(Auth(who): Auth) -> Json<Principal> {
    Json(who)
}

fn require_admin(who: &Principal, what: &str) -> Result<(), ApiError> {
    if who.is_admin() {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!("only admins may {what}; {} is a {}", who.name, who.role.as_str())))
    }
}

/// `GET /v1/accounts`: the accounts the caller sees, in path order (a
/// parent precedes its children).
#[utoipa::path(get, path = "/v1/accounts", summary = "accounts the caller sees, parents first", description = "Roles: any (filtered).", security(("bearer" = [])), responses((status = 200, description = "success", body = Vec<AccountView>), ApiErrors))]
pub async fn accounts(State(app): State<App>, Auth(who): Auth) -> Result<Json<Vec<AccountView>>, ApiError> {
    let all = ask(&app, |reply| Msg::Accounts { reply }).await?;
    Ok(Json(all.into_iter().filter(|a| who.can_see(&a.path)).collect()))
}

/// `GET /v1/accounts/{path}`
#[utoipa::path(get, path = "/v1/accounts/{path}", summary = "one account", description = "Roles: whoever sees it.", security(("bearer" = [])), params(("path" = String, Path, description = "the account's path, e.g. org/llm")), responses((status = 200, description = "success", body = AccountView), ApiErrors))]
pub async fn account(
    State(app): State<App>,
    Auth(who): Auth,
    Path(path): Path<String>,
) -> Result<Json<AccountView>, ApiError> {
    visible_account(&app, &who, &path)?;
    let all = ask(&app, |reply| Msg::Accounts { reply }).await?;
    all.into_iter()
        .find(|a| a.path == path)
        .map(Json)
        .ok_or_else(|| ApiError::not_found(app.catalog.unknown_account(&who, &path)))
}

/// 404 for an account that does not exist or that `who` may not see.
fn visible_account(app: &App, who: &Principal, path: &str) -> Result<(), ApiError> {
    if app.catalog.visible_account(who, path) {
        Ok(())
    } else {
        Err(ApiError::not_found(app.catalog.unknown_account(who, path)))
    }
}

/// 403 unless `who` may change `path` (admins anywhere, managers strictly
/// inside their scope).
fn require_change(who: &Principal, path: &str) -> Result<(), ApiError> {
    if who.can_change(path) {
        return Ok(());
    }
    let why = match who.role {
        Role::Manager => {
            format!("a manager of {} may change only accounts below it", who.scopes.join(", "))
        }
        _ => format!("a {} may not change accounts", who.role.as_str()),
    };
    Err(ApiError::forbidden(format!("{} may not change {path:?}: {why}", who.name)))
}

/// A number of a request within its bounds (`field` names it).
fn check_number(field: &str, bound: bounds::FloatBound, v: Option<f64>) -> Result<(), ApiError> {
    match v {
        Some(v) => bound.check(v).map(|_| ()).map_err(|m| ApiError::field(field, m)),
        None => Ok(()),
    }
}

/// The bounds of a declaration's numbers.
/// An account path as every way of making one checks it
/// ([`allot_core::check_path`]), as a 400 naming `field`.
fn check_path(field: &str, path: &str) -> Result<(), ApiError> {
    allot_core::check_path(path).map_err(|e| ApiError::field(field, e.to_string()))
}

/// At most [`MAX_USERS`] users in one table of a request (`users`,
/// `user_budgets`): the bound of an account's tables, so that one request
/// cannot hold the scheduler task (issue 30, point 15).
fn check_users<V>(field: &str, table: &std::collections::BTreeMap<String, V>) -> Result<(), ApiError> {
    if table.len() > MAX_USERS {
        return Err(ApiError::field(
            field,
            format!("{} users in {field}, at most {MAX_USERS} per request and per account", table.len()),
        ));
    }
    Ok(())
}

/// `new_users=true` in a request's query: the users it names may be new
/// here ([`check_known_users`]).
fn new_users(q: &HashMap<String, String>) -> Result<bool, ApiError> {
    match q.get("new_users").map(String::as_str) {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(v) => Err(ApiError::field("new_users", format!("{v:?} is neither true nor false"))),
    }
}

/// FS-2, BUD-6: a share or budget is set only for a user known here — one
/// an account already names, a token's or a session's user, a workload's
/// submitter, or a Unix user of this host — unless the request says its
/// users are new (`new_users=true`: before a person's first sign-in). A
/// misspelt name would otherwise get a share that no one ever uses.
async fn check_known_users<'a>(
    app: &App,
    field: &str,
    names: impl Iterator<Item = &'a String>,
    new_users: bool,
) -> Result<(), ApiError> {
    if new_users {
        return Ok(());
    }
    let named: std::collections::BTreeSet<String> = {
        let t = app.catalog.template();
        t.accounts
            .ids()
            .flat_map(|id| {
                let a = t.accounts.account(id);
                a.users.keys().chain(a.user_budgets.keys()).cloned().collect::<Vec<_>>()
            })
            .collect()
    };
    for name in names {
        // A malformed name is the tree's to refuse, with its own words.
        if !allot_core::account::valid_user_name(name)
            || named.contains(name)
            || crate::identity::UnixUser::by_name(name).is_ok()
            || app.store.knows_user(name).await?
        {
            continue;
        }
        return Err(ApiError::field(
            format!("{field}.{name}"),
            format!(
                "no user {name} is known here: not a Unix user of this host, no token, session or workload is \
                 theirs, and no account names them; check the spelling, or say they are new (allot share set \
                 --new-user, or new_users=true) to set it before their first sign-in"
            ),
        ));
    }
    Ok(())
}

fn check_decl(d: &AccountDecl) -> Result<(), ApiError> {
    check_path("path", &d.path)?;
    check_users("users", &d.users)?;
    check_users("user_budgets", &d.user_budgets)?;
    check_number("budget_gpu_hours", bounds::BUDGET_GPU_HOURS, d.budget_gpu_hours)?;
    check_number("share", bounds::SHARE, d.share)?;
    check_number("impact", bounds::IMPACT, d.impact)?;
    for (u, v) in &d.users {
        check_number(&format!("users.{u}"), bounds::SHARE, Some(*v))?;
    }
    for (u, v) in &d.user_budgets {
        check_number(&format!("user_budgets.{u}"), bounds::BUDGET_GPU_HOURS, Some(*v))?;
    }
    Ok(())
}

async fn edit(
    app: &App,
    who: &Principal,
    edits: Vec<AccountEdit>,
    stop: bool,
    dry_run: bool,
) -> Result<AccountEdits, ApiError> {
    let by = who.name.clone();
    let done = ask(app, |reply| Msg::EditAccounts { edits, stop, dry_run, by, reply }).await??;
    if !dry_run {
        // A rename or a close changes what every grant covers: no request
        // is answered from a principal cached before it.
        app.auth.forget_all();
    }
    Ok(done)
}

/// `PATCH /v1/accounts/{path}`: budget, share, impact, users' shares,
/// close / reopen, rename — together, audited.
#[utoipa::path(patch, path = "/v1/accounts/{path}", summary = "change an account: budget_gpu_hours, share, impact, users, user_budgets, closed, rename_to (null: back to the config); audited", description = "Roles: admin; manager strictly inside the scope.", security(("bearer" = [])), params(("path" = String, Path, description = "the account's path, e.g. org/llm"), ("new_users" = Option<bool>, Query, description = "true: the users named may be new here (not yet a Unix user of this host, a token's or session's user, a workload's submitter or named by an account); default false")), request_body = AccountChange, responses((status = 200, description = "the account as it is now", body = AccountView), ApiErrors))]
pub async fn change_account(
    State(app): State<App>,
    Auth(who): Auth,
    Path(path): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    Body(change): Body<AccountChange>,
) -> Result<Json<AccountView>, ApiError> {
    visible_account(&app, &who, &path)?;
    require_change(&who, &path)?;
    check_users("users", &change.users)?;
    check_users("user_budgets", &change.user_budgets)?;
    let mut edits = Vec::new();
    for (field, v) in [
        (AccountField::Budget, change.budget_gpu_hours),
        (AccountField::Share, change.share),
        (AccountField::Impact, change.impact),
    ] {
        if let Some(value) = v {
            let bound = match field {
                AccountField::Budget => bounds::BUDGET_GPU_HOURS,
                AccountField::Share => bounds::SHARE,
                AccountField::Impact => bounds::IMPACT,
            };
            check_number(field.key(), bound, value)?;
            edits.push(AccountEdit::Set { path: path.clone(), field, value });
        }
    }
    for (user, share) in &change.users {
        check_number(&format!("users.{user}"), bounds::SHARE, *share)?;
        edits.push(AccountEdit::SetUser { path: path.clone(), user: user.clone(), share: *share });
    }
    for (user, budget) in &change.user_budgets {
        check_number(&format!("user_budgets.{user}"), bounds::BUDGET_GPU_HOURS, *budget)?;
        edits.push(AccountEdit::SetUserBudget { path: path.clone(), user: user.clone(), budget_gpu_hours: *budget });
    }
    match change.closed {
        Some(true) => edits.push(AccountEdit::Close { path: path.clone() }),
        Some(false) => edits.push(AccountEdit::Reopen { path: path.clone() }),
        None => {}
    }
    if change.stop && change.closed != Some(true) {
        return Err(ApiError::field("stop", "stop goes with closed: true (ACC-3)"));
    }
    let mut now_at = path.clone();
    if let Some(to) = &change.rename_to {
        check_path("rename_to", to)?;
        require_change(&who, to)?;
        edits.push(AccountEdit::Rename { path: path.clone(), to: to.clone() });
        now_at = to.clone();
    }
    if edits.is_empty() {
        return Err(ApiError::bad_request(
            "nothing to change: give budget_gpu_hours, share, impact, users, user_budgets, closed or rename_to",
        ));
    }
    let new_users = new_users(&q)?;
    // Only users given a value: `null` returns anyone to the default.
    let set = |m: &std::collections::BTreeMap<String, Option<f64>>| {
        m.iter().filter(|(_, v)| v.is_some()).map(|(k, _)| k.clone()).collect::<Vec<String>>()
    };
    check_known_users(&app, "users", set(&change.users).iter(), new_users).await?;
    check_known_users(&app, "user_budgets", set(&change.user_budgets).iter(), new_users).await?;
    let out = edit(&app, &who, edits, change.stop, false).await?;
    out.accounts
        .into_iter()
        .find(|a| a.path == now_at)
        .map(Json)
        .ok_or_else(|| ApiError::not_found(app.catalog.unknown_account(&who, &now_at)))
}

/// `POST /v1/accounts`: a new account (ACC-1), audited.
#[utoipa::path(post, path = "/v1/accounts", summary = "create an account (ACC-1); audited", description = "Roles: admin; manager strictly inside the scope.", security(("bearer" = [])), params(("new_users" = Option<bool>, Query, description = "true: the users named may be new here; default false")), request_body = AccountDecl, responses((status = 201, description = "created", body = AccountView), ApiErrors))]
pub async fn create_account(
    State(app): State<App>,
    Auth(who): Auth,
    Query(q): Query<HashMap<String, String>>,
    Body(decl): Body<AccountDecl>,
) -> Result<(StatusCode, Json<AccountView>), ApiError> {
    require_change(&who, &decl.path)?;
    check_decl(&decl)?;
    let new_users = new_users(&q)?;
    check_known_users(&app, "users", decl.users.keys(), new_users).await?;
    check_known_users(&app, "user_budgets", decl.user_budgets.keys(), new_users).await?;
    let spec =
        crate::accounts::spec_of(&decl, &app.catalog.cluster()).map_err(|m| ApiError::field("legacy_pools", m))?;
    let path = decl.path.clone();
    let out = edit(&app, &who, vec![AccountEdit::Create(spec)], false, false).await?;
    let view = out
        .accounts
        .into_iter()
        .find(|a| a.path == path)
        .ok_or_else(|| ApiError::not_found(app.catalog.unknown_account(&who, &path)))?;
    Ok((StatusCode::CREATED, Json(view)))
}

/// `GET /v1/account-tree`: the declarations of the accounts the caller
/// sees, as `allot accounts export` writes them.
#[utoipa::path(get, path = "/v1/account-tree", summary = "the account tree's declarations (export)", description = "Roles: any (filtered).", security(("bearer" = [])), responses((status = 200, description = "success", body = AccountTreeImport), ApiErrors))]
pub async fn account_tree(State(app): State<App>, Auth(who): Auth) -> Result<Json<AccountTreeImport>, ApiError> {
    let all = ask(&app, |reply| Msg::AccountDecls { reply }).await?;
    Ok(Json(AccountTreeImport { accounts: all.into_iter().filter(|a| who.can_see(&a.path)).collect(), dry_run: false }))
}

/// `PUT /v1/account-tree`: makes the tree the one given (an import):
/// creates, replaces and closes (accounts not listed are closed; their
/// work runs on, ACC-2), in one transaction; audited.
#[utoipa::path(put, path = "/v1/account-tree", summary = "import a whole account tree (creates, replaces, closes the unlisted); audited", description = "Roles: admin.", security(("bearer" = [])), request_body = AccountTreeImport, responses((status = 200, description = "what changed", body = AccountEdits), ApiErrors))]
pub async fn import_tree(
    State(app): State<App>,
    Auth(who): Auth,
    Body(req): Body<AccountTreeImport>,
) -> Result<Json<AccountEdits>, ApiError> {
    require_admin(&who, "import an account tree")?;
    if req.accounts.is_empty() {
        return Err(ApiError::field("accounts", "an import lists at least one account"));
    }
    let mut specs = Vec::with_capacity(req.accounts.len());
    for (i, d) in req.accounts.iter().enumerate() {
        check_decl(d).map_err(|e| e.within(&format!("accounts[{i}]")))?;
        specs.push(
            crate::accounts::spec_of(d, &app.catalog.cluster())
                .map_err(|m| ApiError::field(format!("accounts[{i}].legacy_pools"), m))?,
        );
    }
    let edits = ask(&app, |reply| Msg::ImportAccounts { specs, reply }).await?;
    Ok(Json(edit(&app, &who, edits, false, req.dry_run).await?))
}

/// `GET /v1/nodes`: every role sees the nodes, and on them the workloads
/// it may see.
#[utoipa::path(get, path = "/v1/nodes", summary = "nodes with health and free GPUs", description = "Roles: any.", security(("bearer" = [])), params(("cluster" = Option<String>, Query, description = "only the nodes of these clusters of the fleet, comma-separated")), responses((status = 200, description = "success", body = Vec<NodeView>), ApiErrors))]
pub async fn nodes(
    State(app): State<App>,
    Auth(who): Auth,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Vec<NodeView>>, ApiError> {
    let mut only = ClusterSet::ANY;
    for (k, v) in &q {
        match k.as_str() {
            "cluster" => only = cluster_filter(&app, v)?,
            other => return Err(ApiError::field(other, "unknown query parameter (use cluster)")),
        }
    }
    let mut nodes = ask(&app, |reply| Msg::Nodes { reply }).await?;
    // A node view names its cluster in a fleet of several; in a fleet of
    // one every node is of the one cluster a filter may name.
    let c = app.catalog.cluster();
    nodes.retain(|n| {
        n.cluster.as_deref().is_none_or(|name| c.cluster_by_name(name).is_some_and(|id| only.contains(id)))
    });
    for n in &mut nodes {
        n.retain_visible(|a| who.can_see(a));
    }
    Ok(Json(nodes))
}

/// `POST /v1/nodes/{name}/{drain|undrain|fail|repair}` (admins).
#[utoipa::path(post, path = "/v1/nodes/{name}/{action}", summary = "drain (preempt under the contract, then out of service), undrain, fail, repair", description = "Roles: admin.", security(("bearer" = [])), params(("name" = String, Path, description = "the node"), ("action" = String, Path, description = "drain, undrain, fail or repair"), ("reason" = Option<String>, Query, description = "why (drain, fail): one line, at most 256 bytes; shown with the node and kept in the audit log")), responses((status = 200, description = "success", body = NodeView), ApiErrors))]
pub async fn node_action(
    State(app): State<App>,
    Auth(who): Auth,
    Path((name, action)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<NodeView>, ApiError> {
    let kind = NodeEventKind::parse(&action)
        .filter(|k| NodeEventKind::OPERATOR.contains(k))
        .ok_or_else(|| ApiError::not_found(format!("unknown node action {action:?} (drain, undrain, fail, repair)")))?;
    require_admin(&who, "drain, undrain, fail or repair nodes")?;
    let mut reason = None;
    for (k, v) in q {
        match k.as_str() {
            "reason" => reason = Some(node_reason(&v)?),
            other => return Err(ApiError::field(other, "unknown query parameter (use reason)")),
        }
    }
    let by = who.name.clone();
    Ok(Json(ask(&app, |reply| Msg::Node { name, kind, by, reason, reply }).await??))
}

/// The most a node action's reason may hold.
const MAX_NODE_REASON: usize = 256;

/// A node action's `reason`: one line of printable text, at most
/// [`MAX_NODE_REASON`] bytes; empty is none.
fn node_reason(v: &str) -> Result<String, ApiError> {
    let v = v.trim();
    if v.is_empty() {
        return Err(ApiError::field("reason", "say why, or leave reason out"));
    }
    if v.len() > MAX_NODE_REASON {
        return Err(ApiError::field("reason", format!("at most {MAX_NODE_REASON} bytes, got {}", v.len())));
    }
    if v.chars().any(char::is_control) {
        return Err(ApiError::field("reason", "one line of text, without control characters"));
    }
    Ok(v.to_string())
}

/// `GET /v1/tokens` (admins): names, roles and scopes, never secrets.
#[utoipa::path(get, path = "/v1/tokens", summary = "tokens (never their secrets)", description = "Roles: admin.", security(("bearer" = [])), responses((status = 200, description = "success", body = Vec<TokenView>), ApiErrors))]
pub async fn tokens(State(app): State<App>, Auth(who): Auth) -> Result<Json<Vec<TokenView>>, ApiError> {
    require_admin(&who, "list tokens")?;
    let rows = app.store.tokens().await?;
    Ok(Json(
        rows.into_iter()
            .map(|(t, projects)| TokenView {
                name: t.name,
                role: t.role,
                scope: t.scope,
                projects,
                created_t: t.created_t,
                created_by: t.created_by,
                user: t.unix_user,
                expires_t: t.expires_t,
            })
            .collect(),
    ))
}

/// `POST /v1/tokens` (admins): the token text is in the answer only.
#[utoipa::path(post, path = "/v1/admin/reload", summary = "read the config file again and apply what changed (CFG-1); audited", description = "Roles: admin. All or nothing: a file that does not read (400, naming file, line and key) or a change that needs a restart (409, naming each key and why) changes nothing.", security(("bearer" = [])), responses((status = 200, description = "what changed", body = ReloadView), ApiErrors))]
pub async fn reload(State(app): State<App>, Auth(who): Auth) -> Result<Json<ReloadView>, ApiError> {
    use crate::api::reload::ReloadError;
    require_admin(&who, "reload the config")?;
    match app.reload.reload(&app, &who.name).await {
        Ok(r) => Ok(Json(ReloadView { file: app.reload.path().display().to_string(), changes: r.changes })),
        Err(e @ (ReloadError::Config(_) | ReloadError::Refused(crate::scheduler::Refusal::Invalid { .. }))) => {
            Err(ApiError::new(ErrorKind::BadRequest, e.to_string()))
        }
        Err(e @ ReloadError::Restart(_)) => Err(ApiError::new(ErrorKind::Conflict, e.to_string())),
        Err(ReloadError::Refused(r)) => Err(r.into()),
        Err(e @ ReloadError::Stopped) => Err(ApiError::new(ErrorKind::Unavailable, e.to_string())),
    }
}

#[utoipa::path(post, path = "/v1/tokens", summary = "create a token; its text is shown once", description = "Roles: admin.", security(("bearer" = [])), request_body = TokenRequest, responses((status = 201, description = "created", body = TokenCreated), ApiErrors))]
pub async fn create_token(
    State(app): State<App>,
    Auth(who): Auth,
    Body(req): Body<TokenRequest>,
) -> Result<(StatusCode, Json<TokenCreated>), ApiError> {
    require_admin(&who, "create tokens")?;
    let role = Role::parse(&req.role)
        .ok_or_else(|| ApiError::field("role", format!("unknown role {:?} ({})", req.role, Role::names())))?;
    let spec = TokenSpec {
        name: req.name,
        role,
        scope: req.scope,
        projects: req.projects,
        unix_user: req.user,
        expires_in_s: req.expires_in_s,
    };
    let account =
        |p: &str| if app.catalog.account_exists(p) { Ok(()) } else { Err(app.catalog.unknown_account(&who, p)) };
    spec.check(account).map_err(|(f, m)| ApiError::field(f, m))?;
    let token = make_token(&app.store, &spec, &who.name).await.map_err(|e| match e {
        TokenError::NameTaken(_) => ApiError::new(ErrorKind::Conflict, e.to_string()),
        TokenError::Invalid(m) => ApiError::bad_request(m),
        TokenError::Store(s) => s.into(),
    })?;
    Ok((StatusCode::CREATED, Json(TokenCreated { name: spec.name, role: role.as_str().into(), token })))
}

/// `DELETE /v1/tokens/{name}` (admins).
#[utoipa::path(delete, path = "/v1/tokens/{name}", summary = "revoke a token", description = "Roles: admin.", security(("bearer" = [])), params(("name" = String, Path, description = "the token's name")), responses((status = 204, description = "revoked"), ApiErrors))]
pub async fn revoke_token(
    State(app): State<App>,
    Auth(who): Auth,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    require_admin(&who, "revoke tokens")?;
    if !app.store.delete_token(&name, &who.name, crate::clock::now() as i64).await? {
        return Err(ApiError::not_found(format!("no token named {name:?}")));
    }
    app.auth.forget_all();
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v1/audit?limit=N` (admins): budget, share and token changes.
#[utoipa::path(get, path = "/v1/audit", summary = "budget, share and token changes: who, when, before, after", description = "Roles: admin.", security(("bearer" = [])), params(("limit" = Option<i64>, Query, description = "most entries, newest first (default 1000)")), responses((status = 200, description = "success", body = Vec<AuditView>), ApiErrors))]
pub async fn audit(
    State(app): State<App>,
    Auth(who): Auth,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Vec<AuditView>>, ApiError> {
    require_admin(&who, "read the audit log")?;
    let limit = match q.get("limit") {
        None => 1000,
        Some(v) => v
            .parse::<i64>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| ApiError::field("limit", "expected a positive integer"))?,
    };
    let parse = |s: Option<String>| s.map(|v| serde_json::from_str(&v).unwrap_or(serde_json::Value::String(v)));
    let rows = app.store.audit(limit).await?;
    Ok(Json(
        rows.into_iter()
            .map(|r| AuditView {
                t: r.t,
                principal: r.principal,
                action: r.action,
                target: r.target,
                before: parse(r.before),
                after: parse(r.after),
            })
            .collect(),
    ))
}

/// `GET /metrics`: Prometheus text exposition (any token); the series
/// labelled by account only for admins and scrape tokens.
#[utoipa::path(get, path = "/metrics", summary = "Prometheus text exposition (per-account series for admin and metrics tokens only)", description = "Roles: any.", security(("bearer" = [])), responses((status = 200, description = "metrics: OpenMetrics when the Accept header asks for it (Prometheus does), else the Prometheus text format 0.0.4", content((String = "text/plain"), (String = "application/openmetrics-text"))), ApiErrors))]
pub async fn metrics(State(app): State<App>, Auth(who): Auth, headers: HeaderMap) -> impl IntoResponse {
    app.metrics.probe(&app.store).await;
    let per_account = who.can_read_account_metrics();
    let open = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    if open {
        (
            [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
            app.metrics.encode(per_account),
        )
    } else {
        ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], app.metrics.encode_text(per_account))
    }
}
