//! Signing in to the dashboard with single sign-on (`[identity.oidc]`;
//! docs/security.md, "Single sign-on"; the protocol is [`crate::oidc`]).
//!
//! * `GET /login/oidc?next=PATH` starts a sign-in: the browser gets a
//!   random id in the `allot_oidc` cookie (`HttpOnly`, `SameSite=Lax`: it
//!   must come back with the provider's redirect, a top-level navigation
//!   from another site) and is sent to the provider.
//! * `GET /login/oidc/callback?code&state` ends it: the id and state are
//!   checked, the code exchanged and the ID token verified; the person is
//!   their `user_claim` (a valid Unix login name; on a server that runs
//!   work as its submitters, a Unix user of this host at or above
//!   `min_uid`), their grants those of the groups in `groups_claim`. A
//!   person in no granted group is refused (403). Otherwise a person
//!   session is opened (its groups are the claim's) and a dashboard
//!   session on it, and the browser goes on to `next` (a local path only).
//!
//! Both go through the sign-in limit of their source; every callback is
//! audited (how: `oidc`), as are starts refused by the limit.

use std::collections::HashMap;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use maud::html;

use super::html;
use super::session::{COOKIE, SESSION_TTL, cookie, local_next, login_form, over_tls, set_cookie_with};
use crate::api::App;
use crate::auth::{Role, hash_token, new_token};
use crate::identity::{IdentityError, UnixUser};
use crate::oidc::SsoError;
use crate::signin::{self, Attempt, How, Source};
use crate::store::sessions::SessionRow;

/// The cookie holding a started sign-in's id.
pub const PENDING_COOKIE: &str = "allot_oidc";

pub fn routes() -> Router<App> {
    Router::new().route("/login/oidc", get(start)).route("/login/oidc/callback", get(callback))
}

/// A `Set-Cookie` of the pending sign-in's id (`Max-Age` 0: removed).
fn pending_cookie(value: &str, max_age: i64, secure: bool) -> HeaderValue {
    set_cookie_with(PENDING_COOKIE, value, max_age, secure, "Lax", "/login/oidc")
}

fn not_configured() -> Response {
    html::refusal(StatusCode::NOT_FOUND, "Not found", "Single sign-on is not set up on this server ([identity.oidc]).")
}

/// `GET /login/oidc`: sends the browser to the provider.
async fn start(
    State(app): State<App>,
    source: Source,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let Some(sso) = app.sso.clone() else { return not_configured() };
    let next = local_next(q.get("next").map(String::as_str));
    let now = crate::clock::now() as i64;
    let admitted = match app.limits.signin.admit(source) {
        Ok(a) => a,
        Err(limited) => return too_many(&app, source, now, limited, &next).await,
    };
    match sso.begin(next.clone()).await {
        Ok((id, url)) => {
            // Given back when the sign-in comes back and succeeds.
            let _ = admitted;
            let mut r = Redirect::to(&url).into_response();
            let secure = over_tls(&headers);
            r.headers_mut()
                .append(header::SET_COOKIE, pending_cookie(&id, crate::oidc::PENDING_TTL.as_secs() as i64, secure));
            r
        }
        Err(e) => {
            app.limits.signin.signed_in(admitted);
            let status = match e {
                SsoError::Busy | SsoError::Unreachable { .. } => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::BAD_GATEWAY,
            };
            tracing::warn!(error = %e, "dashboard: cannot start a single sign-on");
            login_form(&app, status, Some(&next), Some(&format!("Single sign-on is unavailable: {e}.")))
        }
    }
}

/// 429 on the sign-in page, audited when it is the first in a row.
async fn too_many(app: &App, source: Source, now: i64, limited: signin::Limited, next: &str) -> Response {
    if limited.first {
        let a = Attempt { who: None, how: How::Oidc, source, refused: Some(signin::TOO_MANY) };
        signin::audit(&app.store, now, &a).await;
    }
    let wait = limited.retry_after_s;
    let text = format!("Too many sign-in attempts from this address: try again in {wait} s.");
    let mut r = login_form(app, StatusCode::TOO_MANY_REQUESTS, Some(next), Some(&text));
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(wait));
    r
}

/// `GET /login/oidc/callback`: the provider's answer.
async fn callback(
    State(app): State<App>,
    source: Source,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let Some(sso) = app.sso.clone() else { return not_configured() };
    let now = crate::clock::now() as i64;
    let secure = over_tls(&headers);
    let admitted = match app.limits.signin.admit(source) {
        Ok(a) => a,
        Err(limited) => return too_many(&app, source, now, limited, "/").await,
    };
    let attempt = Attempt { who: None, how: How::Oidc, source, refused: None };
    // Refused: audited, shown on a page that also ends the pending cookie.
    let refuse = |who: Option<String>, status: StatusCode, why: String| {
        let app = app.clone();
        async move {
            signin::audit(&app.store, now, &Attempt { who: who.as_deref(), refused: Some(&why), ..attempt }).await;
            let mut r = refused_page(status, &why);
            r.headers_mut().append(header::SET_COOKIE, pending_cookie("", 0, secure));
            r
        }
    };
    let Some(id) = cookie(&headers, PENDING_COOKIE) else {
        return refuse(None, StatusCode::BAD_REQUEST, SsoError::UnknownState.to_string()).await;
    };
    if let Some(error) = q.get("error") {
        sso.abandon(&id);
        let desc = q.get("error_description").map(|d| format!(" ({d})")).unwrap_or_default();
        let why = SsoError::Refused(format!("{error}{desc}")).to_string();
        return refuse(None, StatusCode::FORBIDDEN, why.chars().take(300).collect()).await;
    }
    let (Some(code), Some(state)) = (q.get("code"), q.get("state")) else {
        sso.abandon(&id);
        return refuse(None, StatusCode::BAD_REQUEST, "the provider's answer has no code or state".into()).await;
    };
    let (person, next) = match sso.finish(&id, state, code).await {
        Ok(done) => done,
        Err(e @ SsoError::Unreachable { .. }) => {
            tracing::warn!(error = %e, "dashboard: single sign-on failed");
            app.limits.signin.signed_in(admitted);
            return refuse(None, StatusCode::SERVICE_UNAVAILABLE, e.to_string()).await;
        }
        Err(e) => {
            let status = match e {
                SsoError::UnknownState => StatusCode::BAD_REQUEST,
                SsoError::BadUser(_) | SsoError::BadGroups(_) | SsoError::NoUser(_) => StatusCode::FORBIDDEN,
                _ => StatusCode::UNAUTHORIZED,
            };
            return refuse(None, status, e.to_string()).await;
        }
    };
    let who = Some(person.name.clone());
    if let Err(why) = unix_user_allowed(&app, &person.name) {
        return refuse(who, StatusCode::FORBIDDEN, why).await;
    }
    let principal = crate::auth::principal_of(&person.name, &person.groups, &app.auth.identity());
    let Some(principal) = principal.filter(|p| p.role != Role::Metrics) else {
        let groups = if person.groups.is_empty() { "none".to_string() } else { person.groups.join(", ") };
        let why = format!(
            "{} is signed in at the identity provider, but neither they nor their groups ({groups}) are granted \
             anything on this dashboard ([[grants]]): ask an admin",
            person.name
        );
        return refuse(who, StatusCode::FORBIDDEN, why).await;
    };
    let opened = open_sessions(&app, &person, &source).await;
    let Ok(session_id) = opened else {
        app.limits.signin.signed_in(admitted);
        let mut r = refused_page(StatusCode::SERVICE_UNAVAILABLE, "The store cannot be written; retry shortly.");
        r.headers_mut().append(header::SET_COOKIE, pending_cookie("", 0, secure));
        return r;
    };
    app.limits.signin.signed_in(admitted);
    app.limits.signin.begun_attempt_signed_in(source);
    signin::audit(&app.store, now, &Attempt { who: who.as_deref(), ..attempt }).await;
    tracing::info!(user = %person.name, role = principal.role.as_str(), "dashboard: signed in with single sign-on");
    let mut r = onward(&next);
    r.headers_mut().append(header::SET_COOKIE, pending_cookie("", 0, secure));
    r.headers_mut().append(header::SET_COOKIE, super::session::set_cookie(COOKIE, &session_id, SESSION_TTL, secure));
    r
}

/// Whether the person named `name` may be signed in as that Unix user
/// (ID-1): never one below `[identity] min_uid`; on a server that runs
/// work as its submitters, only a Unix user of this host.
fn unix_user_allowed(app: &App, name: &str) -> Result<(), String> {
    match UnixUser::by_name(name) {
        Ok(u) => u.at_least(app.auth.identity().min_uid).map(|_| ()).map_err(|e| e.to_string()),
        Err(IdentityError::NoSuchUser(_)) if app.run.single_user => Ok(()),
        Err(e) => Err(format!("{e}: people sign in as the Unix user their workloads run as")),
    }
}

/// A person session for `person` with the claim's groups, then a
/// dashboard session on it; returns the dashboard session's id.
async fn open_sessions(app: &App, person: &crate::oidc::Person, source: &Source) -> Result<String, ()> {
    let store_failed = |e: crate::store::StoreError| tracing::warn!(error = %e, "dashboard: cannot record a session");
    let (_, token, expires_t) = app
        .auth
        .open_session(&person.name, Some(&person.groups), "oidc", &source.to_string())
        .await
        .map_err(store_failed)?;
    let now = crate::clock::now() as i64;
    let id = new_token();
    let row = SessionRow {
        hash: hash_token(&id),
        token_hash: hash_token(&token),
        csrf: hash_token(&new_token()),
        created_t: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(now * 1000, |d| d.as_millis() as i64),
        expires_t: (now + SESSION_TTL).min(expires_t),
    };
    app.store.insert_session(&row, signin::MAX_SESSIONS).await.map_err(store_failed)?;
    Ok(id)
}

/// Signed in: a page that goes on to `next` by itself. Not a redirect:
/// the browser came from the provider's site, and a redirect would carry
/// that navigation on without the new `SameSite=Strict` session cookie.
fn onward(next: &str) -> Response {
    let body = html! {
        h1 { "Signed in" }
        p { "Continuing to " a #onward href=(next) { (next) } "…" }
    };
    let mut r = html::bare("Signed in", body);
    let refresh = format!("0; url={next}");
    r.headers_mut().insert(header::REFRESH, HeaderValue::from_str(&refresh).expect("a local path is a valid header"));
    r
}

/// A refused sign-in: why, and a way to try again.
fn refused_page(status: StatusCode, why: &str) -> Response {
    let body = html! {
        h1 { "Not signed in" }
        p.flash.error role="alert" { "Refused: " (why) "." }
        p { a href="/login" { "Back to sign-in" } }
    };
    let mut r = html::bare("Not signed in", body);
    *r.status_mut() = status;
    r
}
