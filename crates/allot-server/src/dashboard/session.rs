//! Signing in and out, the session cookie, the signed-in viewer and CSRF.
//!
//! A session is opened by pasting an API token at `/login`. The browser
//! gets a random session id in an `HttpOnly`, `SameSite=Strict` cookie
//! (`Secure` when the request came over TLS through a proxy that says so
//! with `X-Forwarded-Proto: https` or `Forwarded: proto=https`); the store
//! keeps the id's SHA-256, the token's hash, a CSRF token and the expiry
//! ([`SESSION_TTL`]). Each request resolves the session to the token's
//! principal again, so a revoked token signs its sessions out at once.
//!
//! Sign-in goes through [`crate::signin`]: refused attempts are limited
//! per source address (429 with `Retry-After`), every attempt is audited,
//! and one token holds at most [`crate::signin::MAX_SESSIONS`] sessions
//! (the oldest ends). `next` is followed only to a path of this site
//! (`local_next`).
//!
//! Changes are `POST` forms: [`Viewer::check_csrf`] compares the form's
//! `csrf` field with the session's, and a request whose `Origin` (or
//! `Sec-Fetch-Site`) says another site sent it is refused before anything
//! is read.

use std::collections::HashMap;

use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use maud::html;
use serde::Deserialize;

use crate::api::App;
use crate::auth::{Principal, Role, hash_token, new_token};
use crate::signin::{self, Attempt, How, Source};
use crate::store::sessions::SessionRow;

use super::html;

/// The session cookie's name.
pub const COOKIE: &str = "allot_session";
/// A one-shot message for the next page (set after a change, read once).
pub const FLASH: &str = "allot_flash";
/// How long a session lasts after sign-in.
pub const SESSION_TTL: i64 = 12 * 3600;
/// The header with which the dashboard's script asks for `<main>` only.
pub const PARTIAL: &str = "x-allot-partial";

/// Whoever is signed in, on this request.
#[derive(Clone, Debug)]
pub struct Viewer {
    pub who: Principal,
    /// The session's CSRF token (put in every form).
    pub csrf: String,
    session_hash: String,
    /// Only `<main>` is wanted (an in-place refresh).
    pub partial: bool,
    /// The cookie is to be `Secure` (the request came over TLS).
    pub secure: bool,
    /// The one-shot message of the change before this page, if any.
    pub flash: Option<Flash>,
    /// The path and query of this request.
    pub here: String,
}

/// A message about the last change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flash {
    pub ok: bool,
    pub text: String,
}

impl Viewer {
    /// The person behind this dashboard session: the session of theirs it
    /// was opened on (single sign-on, or a person's session), or `None`
    /// when it was opened with an API token.
    pub async fn person(&self, app: &App) -> Option<crate::store::LoginRow> {
        let now = crate::clock::now() as i64;
        let session = app.store.session(&self.session_hash, now).await.ok()??;
        app.store.login_by_hash(&session.token_hash, now).await.ok()?
    }

    /// Refuses (403) unless `csrf` is this session's token.
    #[allow(clippy::result_large_err, reason = "the refusal is the handler's answer, returned at once")]
    pub fn check_csrf(&self, csrf: &str) -> Result<(), Response> {
        if constant_time_eq(csrf.as_bytes(), self.csrf.as_bytes()) {
            Ok(())
        } else {
            Err(html::refusal(
                StatusCode::FORBIDDEN,
                "Refused",
                "The form was not sent by this session (CSRF check failed). Reload the page and try again.",
            ))
        }
    }

    /// The viewer of a request, if it carries a live session.
    pub async fn resolve(app: &App, parts: &Parts) -> Result<Option<Viewer>, Response> {
        let Some(id) = cookie(&parts.headers, COOKIE) else { return Ok(None) };
        let hash = hash_token(&id);
        let now = crate::clock::now() as i64;
        let unavailable = |e: crate::store::StoreError| {
            tracing::warn!(error = %e, "dashboard: cannot read the session");
            html::refusal(StatusCode::SERVICE_UNAVAILABLE, "Unavailable", "The store cannot be read; retry shortly.")
        };
        // Expired sessions go also while nobody signs in (cheap: at most
        // every few minutes, signin::SWEEP_EVERY_S).
        if app.limits.signin.sweep_due(now)
            && let Err(e) = app.store.sweep_sessions(now).await
        {
            tracing::warn!(error = %e, "dashboard: cannot remove expired sessions");
        }
        let Some(s) = app.store.session(&hash, now).await.map_err(unavailable)? else { return Ok(None) };
        let Some(who) = app.auth.principal_by_hash(s.token_hash).await.map_err(unavailable)? else {
            return Ok(None);
        };
        let flash = cookie(&parts.headers, FLASH).and_then(|v| decode_flash(&v));
        Ok(Some(Viewer {
            who,
            csrf: s.csrf,
            session_hash: hash,
            partial: parts.headers.contains_key(PARTIAL),
            secure: over_tls(&parts.headers),
            flash,
            here: parts.uri.path_and_query().map_or_else(|| "/".to_string(), |p| p.as_str().to_string()),
        }))
    }
}

impl FromRequestParts<App> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Viewer, Response> {
        if parts.method != Method::GET && parts.method != Method::HEAD {
            same_origin(&parts.headers)?;
        }
        match Viewer::resolve(app, parts).await? {
            Some(v) => Ok(v),
            None if parts.method == Method::GET && !parts.headers.contains_key(PARTIAL) => {
                let here = parts.uri.path_and_query().map_or("/", |p| p.as_str());
                let next = if here == "/" { String::new() } else { format!("?next={}", urlencode(here)) };
                Err(Redirect::to(&format!("/login{next}")).into_response())
            }
            None => {
                Err(html::refusal(StatusCode::UNAUTHORIZED, "Signed out", "Your session has ended. Sign in again."))
            }
        }
    }
}

/// 403 for a change sent from another site: `Sec-Fetch-Site: cross-site`
/// or an `Origin` whose host is not this request's `Host`.
#[allow(clippy::result_large_err, reason = "the refusal is the handler's answer, returned at once")]
fn same_origin(headers: &HeaderMap) -> Result<(), Response> {
    let refuse =
        || Err(html::refusal(StatusCode::FORBIDDEN, "Refused", "A change may only be sent from this dashboard."));
    if headers.get("sec-fetch-site").is_some_and(|v| v.as_bytes() == b"cross-site") {
        return refuse();
    }
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else { return Ok(()) };
    let origin_host = origin.split_once("://").map_or(origin, |(_, h)| h);
    let host = headers
        .get("x-forwarded-host")
        .or_else(|| headers.get(header::HOST))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if origin == "null" || !origin_host.eq_ignore_ascii_case(host) { refuse() } else { Ok(()) }
}

/// Whether the request reached the proxy in front of Allot over TLS.
pub(super) fn over_tls(headers: &HeaderMap) -> bool {
    let forwarded_https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').next().unwrap_or("").trim().eq_ignore_ascii_case("https"));
    let forwarded = headers
        .get(header::FORWARDED)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split([';', ',']).any(|kv| kv.trim().eq_ignore_ascii_case("proto=https")));
    forwarded_https || forwarded
}

/// A cookie's value.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// A `Set-Cookie` value with the dashboard's attributes.
pub(super) fn set_cookie(name: &str, value: &str, max_age: i64, secure: bool) -> HeaderValue {
    set_cookie_with(name, value, max_age, secure, "Strict", "/")
}

/// A `Set-Cookie` value, `HttpOnly`, with this `SameSite` and `Path`.
pub(super) fn set_cookie_with(
    name: &str,
    value: &str,
    max_age: i64,
    secure: bool,
    same_site: &str,
    path: &str,
) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{name}={value}; Path={path}; HttpOnly; SameSite={same_site}; Max-Age={max_age}{secure}"
    ))
    .expect("a cookie of visible ASCII")
}

/// A redirect after a change (303), with `flash` for the next page.
pub fn after_change(v: &Viewer, to: &str, flash: Flash) -> Response {
    let mut r = Redirect::to(to).into_response();
    r.headers_mut().append(header::SET_COOKIE, set_cookie(FLASH, &encode_flash(&flash), 60, v.secure));
    r
}

/// Removes the flash cookie once a page has shown it.
pub fn clear_flash(v: &Viewer, r: &mut Response) {
    if v.flash.is_some() && !v.partial {
        r.headers_mut().append(header::SET_COOKIE, set_cookie(FLASH, "", 0, v.secure));
    }
}

/// Hex of `ok|text` (a cookie value of safe characters), cut to 1,000 bytes.
fn encode_flash(f: &Flash) -> String {
    let mut text = f.text.clone();
    while text.len() > 1000 {
        text.pop();
    }
    let raw = format!("{}{}", if f.ok { '1' } else { '0' }, text);
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_flash(v: &str) -> Option<Flash> {
    if !v.len().is_multiple_of(2) || v.is_empty() {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..v.len()).step_by(2).map(|i| u8::from_str_radix(&v[i..i + 2], 16).ok()).collect();
    let s = String::from_utf8(bytes?).ok()?;
    let (ok, text) = s.split_at(1);
    Some(Flash { ok: ok == "1", text: text.to_string() })
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Percent-encodes a path for a `next` parameter.
pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Where to go after sign-in: a path of this site, else `/`.
///
/// Browsers drop tab, CR and LF from a URL and read `\` as `/`, so
/// `/\t/evil.example/` is `//evil.example/` to them: another site. A path
/// is kept only when it begins with exactly one `/` (also once those
/// characters are dropped) and holds no control character and no
/// backslash. What is kept is percent-encoded past ASCII, so it is always a
/// valid `Location`.
pub(super) fn local_next(next: Option<&str>) -> String {
    let Some(n) = next else { return "/".to_string() };
    let seen: String = n.chars().filter(|c| !matches!(c, '\t' | '\r' | '\n')).collect();
    let local = n.starts_with('/') && !seen.starts_with("//") && !n.chars().any(|c| c.is_control() || c == '\\');
    if !local {
        return "/".to_string();
    }
    n.bytes().map(|b| if b.is_ascii() { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

pub fn routes() -> Router<App> {
    Router::new().route("/login", get(login_page).post(login)).route("/logout", post(logout))
}

async fn login_page(State(app): State<App>, Query(q): Query<HashMap<String, String>>) -> Response {
    login_form(&app, StatusCode::OK, q.get("next").map(String::as_str), None)
}

/// The sign-in page: a "Sign in with SSO" link when single sign-on is set
/// up (`[identity.oidc]`), and the form to paste an API token.
pub(super) fn login_form(app: &App, status: StatusCode, next: Option<&str>, error: Option<&str>) -> Response {
    let next = local_next(next);
    let sso = app.sso.is_some().then(|| format!("/login/oidc?next={}", urlencode(&next)));
    let body = html! {
        h1 { "Sign in to Allot" }
        @if let Some(e) = error { p.flash.error role="alert" { (e) } }
        @if let Some(href) = &sso {
            p.sso { a.button #sso href=(href) { "Sign in with SSO" } }
            p.hint { "Or with an API token:" }
        }
        form.login method="post" action="/login" {
            input type="hidden" name="next" value=(next);
            label for="token" { "API token" }
            p.hint id="token-hint" { "Paste the token you were given (" code { "allot token create" } " makes one). It is sent once, over this form, and never stored in the browser: the browser keeps a session cookie instead." }
            input #token type="password" name="token" autocomplete="off" required aria-describedby="token-hint" autofocus;
            button type="submit" { "Sign in" }
        }
    };
    let mut r = html::bare("Sign in", body);
    *r.status_mut() = status;
    r
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
    #[serde(default)]
    next: Option<String>,
}

/// `POST /login`: the token's principal gets a session, within the
/// sign-in limit of its source, audited ([`crate::signin`]).
async fn login(State(app): State<App>, source: Source, headers: HeaderMap, Form(f): Form<LoginForm>) -> Response {
    if let Err(r) = same_origin(&headers) {
        return r;
    }
    let now = crate::clock::now() as i64;
    let next = f.next.as_deref();
    let attempt = |who: Option<&'static str>| Attempt { who, how: How::Token, source, refused: None };
    let admitted = match app.limits.signin.admit(source) {
        Ok(a) => a,
        Err(limited) => {
            if limited.first {
                signin::audit(&app.store, now, &Attempt { refused: Some(signin::TOO_MANY), ..attempt(None) }).await;
            }
            let wait = limited.retry_after_s;
            let text = format!("Too many sign-in attempts from this address: try again in {wait} s.");
            let mut r = login_form(&app, StatusCode::TOO_MANY_REQUESTS, next, Some(&text));
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(wait));
            return r;
        }
    };
    let who = match app.auth.principal(f.token.trim()).await {
        Ok(Some(p)) => p,
        Ok(None) => {
            let why = "unknown or revoked token";
            signin::audit(&app.store, now, &Attempt { refused: Some(why), ..attempt(None) }).await;
            return login_form(&app, StatusCode::UNAUTHORIZED, next, Some("Unknown or revoked token."));
        }
        Err(e) => {
            tracing::warn!(error = %e, "dashboard: cannot check a token");
            app.limits.signin.signed_in(admitted);
            return login_form(
                &app,
                StatusCode::SERVICE_UNAVAILABLE,
                next,
                Some("The store cannot be read; retry shortly."),
            );
        }
    };
    let audited = |refused: Option<&'static str>| {
        let (app, name) = (app.clone(), who.name.clone());
        async move { signin::audit(&app.store, now, &Attempt { who: Some(&name), refused, ..attempt(None) }).await }
    };
    if who.role == Role::Metrics {
        audited(Some("a metrics token may not sign in")).await;
        return login_form(
            &app,
            StatusCode::FORBIDDEN,
            next,
            Some("A metrics token reads /metrics only; sign in with a researcher, manager or admin token."),
        );
    }
    let id = new_token();
    let row = SessionRow {
        hash: hash_token(&id),
        token_hash: hash_token(f.token.trim()),
        csrf: hash_token(&new_token()),
        created_t: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(now * 1000, |d| d.as_millis() as i64),
        expires_t: now + SESSION_TTL,
    };
    match app.store.insert_session(&row, signin::MAX_SESSIONS).await {
        Ok(ended) if ended > 0 => {
            tracing::info!(principal = %who.name, ended, "dashboard: the oldest sessions of the token ended");
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(error = %e, "dashboard: cannot record a session");
            app.limits.signin.signed_in(admitted);
            return login_form(
                &app,
                StatusCode::SERVICE_UNAVAILABLE,
                next,
                Some("The store cannot be written; retry shortly."),
            );
        }
    }
    app.limits.signin.signed_in(admitted);
    audited(None).await;
    let mut r = Redirect::to(&local_next(next)).into_response();
    r.headers_mut().append(header::SET_COOKIE, set_cookie(COOKIE, &id, SESSION_TTL, over_tls(&headers)));
    r
}

#[derive(Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

async fn logout(State(app): State<App>, v: Viewer, Form(f): Form<CsrfForm>) -> Response {
    if let Err(r) = v.check_csrf(&f.csrf) {
        return r;
    }
    if let Err(e) = app.store.delete_session(&v.session_hash).await {
        tracing::warn!(error = %e, "dashboard: cannot end a session");
    }
    let mut r = Redirect::to("/login").into_response();
    r.headers_mut().append(header::SET_COOKIE, set_cookie(COOKIE, "", 0, v.secure));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_is_a_local_path_only() {
        assert_eq!(local_next(Some("/workloads/7")), "/workloads/7");
        assert_eq!(local_next(Some("/queue?state=pending&x=1")), "/queue?state=pending&x=1");
        let bad = [
            "//evil.example/",
            "https://evil.example/",
            "/\\evil",
            "workloads",
            "",
            // Browsers drop tab, CR and LF from a URL: these are `//evil.example/`.
            "/\t/evil.example/",
            "/\r/evil.example/",
            "/\n/evil.example/",
            "/\r\n/evil.example/",
            // Any other control character, and a backslash anywhere.
            "/workloads/\u{1}",
            "/a\u{7f}b",
            "/a\u{9b}b",
            "/a\\b",
        ];
        for bad in bad {
            assert_eq!(local_next(Some(bad)), "/", "{bad:?}");
        }
        assert_eq!(local_next(None), "/");
        // What is kept is always a valid Location: other characters are
        // percent-encoded.
        assert_eq!(local_next(Some("/workloads/é")), "/workloads/%C3%A9");
        for n in ["/workloads/é", "/a b", "/x?q=\"y\""] {
            assert!(HeaderValue::from_str(&local_next(Some(n))).is_ok(), "{n:?}");
        }
    }

    #[test]
    fn flash_survives_its_cookie() {
        let f = Flash { ok: false, text: "BUD-1: budget must be ≥ 0; \"quoted\"".into() };
        assert_eq!(decode_flash(&encode_flash(&f)), Some(f));
        assert_eq!(decode_flash("zz"), None);
    }

    #[test]
    fn cross_site_changes_are_refused() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("allot.lab:8080"));
        assert!(same_origin(&h).is_ok(), "no Origin: a same-site form in an older browser");
        h.insert(header::ORIGIN, HeaderValue::from_static("http://allot.lab:8080"));
        assert!(same_origin(&h).is_ok());
        h.insert(header::ORIGIN, HeaderValue::from_static("http://evil.example"));
        assert!(same_origin(&h).is_err());
        h.insert(header::ORIGIN, HeaderValue::from_static("http://allot.lab:8080"));
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(same_origin(&h).is_err());
    }
}
