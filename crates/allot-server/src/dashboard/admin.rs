//! Admin: API tokens (list, create, revoke) and the audit log, for admins
//! only — every read and change goes through the API's handlers
//! (`admin::tokens`, `create_token`, `revoke_token`, `audit`), so anyone
//! else gets the API's 403. A created token is shown once, on the answer
//! to the form that created it (`Cache-Control: no-store`); the store
//! keeps only its hash.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use maud::{Markup, html};
use serde::Deserialize;

use crate::api::{ApiError, App, Auth, Body, admin};
use crate::auth::Role;
use crate::views::{AuditView, TokenCreated, TokenRequest, TokenView};

use super::layout::{self, Nav, Page, csrf, when};
use super::session::{Flash, Viewer, after_change};

/// Audit entries shown at first, and added by each "more".
pub const AUDIT_PAGE: i64 = 50;
/// The most audit entries one page shows.
pub const AUDIT_MAX: i64 = 5000;

pub fn routes() -> Router<App> {
    Router::new()
        .route("/admin", get(show))
        .route("/admin/tokens", get(|| async { Redirect::to("/admin") }).post(create))
        .route("/admin/tokens/revoke", post(revoke))
}

#[derive(Clone, Debug, Default, Deserialize)]
struct AdminQuery {
    #[serde(default)]
    audit: Option<String>,
}

async fn show(State(app): State<App>, v: Viewer, Query(q): Query<AdminQuery>) -> Response {
    let limit = match q.audit.as_deref().filter(|s| !s.is_empty()) {
        None => AUDIT_PAGE,
        Some(s) => match s.parse::<i64>() {
            Ok(n) if n > 0 => n.min(AUDIT_MAX),
            _ => {
                return layout::error_page(
                    Some(&v),
                    StatusCode::BAD_REQUEST,
                    "Refused",
                    &format!("audit: expected a positive number of entries, got {s:?}"),
                );
            }
        },
    };
    match admin_body(&app, &v, limit, None).await {
        Ok(body) => layout::page(&v, Page { title: "Admin".into(), nav: Nav::Admin, body, refresh: Some(30) }),
        Err(e) => layout::api_error(&v, e),
    }
}

/// The page: a created token first (once), then tokens and the audit log.
async fn admin_body(app: &App, v: &Viewer, limit: i64, created: Option<&TokenCreated>) -> Result<Markup, ApiError> {
    let Json(tokens) = admin::tokens(State(app.clone()), Auth(v.who.clone())).await?;
    let audit_q = HashMap::from([("limit".to_string(), (limit + 1).to_string())]);
    let Json(mut audit) = admin::audit(State(app.clone()), Auth(v.who.clone()), Query(audit_q)).await?;
    let more = audit.len() as i64 > limit;
    audit.truncate(limit as usize);
    Ok(html! {
        h1 { "Admin" }
        @if let Some(c) = created { (created_token(c)) }
        h2 #tokens { "Tokens" }
        (token_table(v, &tokens))
        h3 #create { "Create a token" }
        (create_form(v))
        h2 #audit { "Audit log" }
        p.muted { "Budget, share, account and token changes: who, when, before and after; newest first. (Node actions are in the trace export's node events, History page.)" }
        (audit_table(&audit))
        @if more && limit < AUDIT_MAX {
            nav.pager aria-label="Audit log" {
                a href={ "/admin?audit=" ((limit + AUDIT_PAGE).min(AUDIT_MAX)) "#audit" } { "More entries" }
            }
        }
    })
}

fn created_token(c: &TokenCreated) -> Markup {
    html! {
        section.created-token aria-labelledby="created-heading" role="status" {
            h2 #created-heading { "Token " code { (c.name) } " created (" (c.role) ")" }
            p { strong { "Copy it now: it is shown this once and will not be shown again." }
                " The server keeps only its hash; a lost token is revoked and replaced." }
            label for="new-token" { "The new token" }
            input #new-token type="text" readonly value=(c.token) autocomplete="off" spellcheck="false" size="70";
            p.muted { "Its holder signs in here with it, or sets " code { "ALLOT_TOKEN" } " for the CLI." }
        }
    }
}

fn token_table(v: &Viewer, tokens: &[TokenView]) -> Markup {
    html! {
        @if tokens.is_empty() { p.muted { "No tokens." } } @else {
            div.table-wrap { table.tokens {
                caption.muted { (tokens.len()) " tokens (never their secrets)" }
                thead { tr {
                    th scope="col" { "Name" } th scope="col" { "Role" } th scope="col" { "Scope" }
                    th scope="col" { "Projects" } th scope="col" { "Created" } th scope="col" { "By" }
                    th scope="col" { "Revoke" }
                } }
                tbody { @for t in tokens { tr {
                    th scope="row" { (t.name) @if t.name == v.who.name { " " span.muted { "(you)" } } }
                    td { (t.role) }
                    td { @if let Some(s) = &t.scope { code { (s) } } }
                    td { @for (i, p) in t.projects.iter().enumerate() { @if i > 0 { ", " } code { (p) } } }
                    td { (when(t.created_t)) }
                    td { (t.created_by) }
                    td {
                        @let own = if t.name == v.who.name { " It is the token you are signed in with: this session ends too." } else { "" };
                        form.inline method="post" action="/admin/tokens/revoke"
                            data-confirm={ "Revoke token " (t.name) "? Whoever uses it is refused at once, and its dashboard sessions end." (own) } {
                            (csrf(v))
                            input type="hidden" name="name" value=(t.name);
                            button.danger type="submit" aria-label={ "Revoke " (t.name) } { "Revoke" }
                        }
                    }
                } } }
            } }
        }
    }
}

fn create_form(v: &Viewer) -> Markup {
    html! {
        form.stack method="post" action="/admin/tokens" {
            (csrf(v))
            label for="token-name" { "Name" }
            input #token-name type="text" name="name" required maxlength="64" pattern="[A-Za-z0-9._@-]+"
                aria-describedby="token-name-hint";
            p.hint #token-name-hint { "1 to 64 letters, digits, '-', '_', '.' or '@'; usually the person's or service's name." }
            label for="token-role" { "Role" }
            select #token-role name="role" aria-describedby="token-role-hint" {
                @for r in Role::ALL { option value=(r.as_str()) selected[r == Role::Researcher] { (r.as_str()) } }
            }
            p.hint #token-role-hint { "admin: everything; manager: an account subtree (scope); researcher: its projects; metrics: /metrics only." }
            label for="token-scope" { "Scope (managers)" }
            input #token-scope type="text" name="scope" placeholder="e.g. org/nlp";
            label for="token-projects" { "Projects (researchers)" }
            input #token-projects type="text" name="projects" placeholder="e.g. org/nlp/llm, org/nlp/mt" aria-describedby="token-projects-hint";
            p.hint #token-projects-hint { "Accounts separated by commas or spaces." }
            label for="token-user" { "Unix user (service account its work runs as)" }
            input #token-user type="text" name="user" placeholder="e.g. svc-eval";
            button type="submit" { "Create token" }
        }
    }
}

fn audit_table(rows: &[AuditView]) -> Markup {
    let json = |v: &Option<serde_json::Value>| v.as_ref().map(|v| v.to_string()).unwrap_or_default();
    html! {
        @if rows.is_empty() { p.muted { "Nothing audited yet." } } @else {
            div.table-wrap { table.audit {
                caption.muted { (rows.len()) " entries, newest first" }
                thead { tr {
                    th scope="col" { "When" } th scope="col" { "Who" } th scope="col" { "Action" }
                    th scope="col" { "Target" } th scope="col" { "Before" } th scope="col" { "After" }
                } }
                tbody { @for a in rows { tr {
                    td { (when(a.t)) } td { (a.principal) } td { code { (a.action) } } td { code { (a.target) } }
                    td.json { code { (json(&a.before)) } } td.json { code { (json(&a.after)) } }
                } } }
            } }
        }
    }
}

#[derive(Deserialize)]
struct CreateForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    role: String,
    #[serde(default)]
    scope: String,
    #[serde(default)]
    projects: String,
    /// The Unix user (service account) its workloads run as.
    #[serde(default)]
    user: String,
}

impl CreateForm {
    fn request(&self) -> TokenRequest {
        let scope = Some(self.scope.trim().to_string()).filter(|s| !s.is_empty());
        let projects =
            self.projects.split([',', ' ', '\n', '\t']).filter(|p| !p.is_empty()).map(String::from).collect();
        let user = Some(self.user.trim().to_string()).filter(|s| !s.is_empty());
        TokenRequest {
            name: self.name.trim().to_string(),
            role: self.role.trim().to_string(),
            scope,
            projects,
            user,
            expires_in_s: None,
        }
    }
}

/// `POST /admin/tokens`: creates the token through the API and answers
/// with the page showing it once (never a redirect: the token would have
/// to travel through a cookie or a URL).
async fn create(State(app): State<App>, v: Viewer, Form(f): Form<CreateForm>) -> Response {
    if let Err(r) = v.check_csrf(&f.csrf) {
        return r;
    }
    let created = match admin::create_token(State(app.clone()), Auth(v.who.clone()), Body(f.request())).await {
        Ok((_, Json(c))) => c,
        Err(e) if e.status() == StatusCode::FORBIDDEN => return layout::api_error(&v, e),
        Err(e) => {
            let text = match &e.field {
                Some(field) => format!("token not created: {} (field {field})", e.error),
                None => format!("token not created: {}", e.error),
            };
            return after_change(&v, "/admin#create", Flash { ok: false, text });
        }
    };
    tracing::info!(principal = %v.who.name, token = %created.name, "dashboard: token created");
    let body = match admin_body(&app, &v, AUDIT_PAGE, Some(&created)).await {
        Ok(b) => b,
        Err(e) => return layout::api_error(&v, e),
    };
    // No refresh: the page must not be fetched again (it would not show the token).
    let mut r = layout::page(&v, Page { title: "Token created".into(), nav: Nav::Admin, body, refresh: None });
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    *r.status_mut() = StatusCode::CREATED;
    r.into_response()
}

#[derive(Deserialize)]
struct RevokeForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    name: String,
}

/// `POST /admin/tokens/revoke`: through the API's `revoke_token`.
async fn revoke(State(app): State<App>, v: Viewer, Form(f): Form<RevokeForm>) -> Response {
    if let Err(r) = v.check_csrf(&f.csrf) {
        return r;
    }
    match admin::revoke_token(State(app), Auth(v.who.clone()), Path(f.name.clone())).await {
        Ok(_) => after_change(&v, "/admin#tokens", Flash { ok: true, text: format!("token {} is revoked", f.name) }),
        Err(e) if e.status() == StatusCode::FORBIDDEN => layout::api_error(&v, e),
        Err(e) => after_change(&v, "/admin#tokens", Flash { ok: false, text: e.error }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_becomes_the_api_request() {
        let f = CreateForm {
            csrf: String::new(),
            name: " ann ".into(),
            role: "researcher".into(),
            scope: "  ".into(),
            projects: "org/a, org/b\nlab/x".into(),
            user: " svc-a ".into(),
        };
        let r = f.request();
        assert_eq!((r.name.as_str(), r.role.as_str(), r.scope), ("ann", "researcher", None));
        assert_eq!(r.projects, ["org/a", "org/b", "lab/x"]);
        assert_eq!(r.user.as_deref(), Some("svc-a"));
    }
}
