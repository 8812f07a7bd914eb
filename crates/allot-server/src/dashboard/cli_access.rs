//! The command line from a laptop (issue 29): where neither munge nor the
//! server's login socket reaches, a person signed in to the dashboard (by
//! single sign-on, or with any person's session) gets a session of their
//! own for `allot`, shown once. It is a person's session like `allot
//! login`'s: the same grants (the groups the dashboard session was opened
//! with), the same lifetime (`[identity] session_ttl`), listed by `GET
//! /v1/sessions` and ended by `DELETE /v1/sessions/{id}`, audited as a
//! sign-in (`how: dashboard`). A dashboard signed in with an API token has
//! no person behind it: it is told to use that token.

use std::collections::HashMap;

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::Response;
use axum::routing::get;
use axum::{Form, Router};
use maud::html;

use super::layout::{self, Nav, Page, csrf, when};
use super::session::Viewer;
use crate::api::App;
use crate::signin::{self, Attempt, How, Source};

pub fn routes() -> Router<App> {
    Router::new().route("/cli", get(page).post(create))
}

/// `GET /cli`: how the command line signs in, and the form that makes a
/// session for it.
async fn page(State(app): State<App>, v: Viewer) -> Response {
    let person = v.person(&app).await;
    let body = html! {
        h1 { "The command line" }
        p { "On a host of the cluster, " code { "allot login" } " proves who you are with munge (or, on the server's own host, its login socket): nothing to copy." }
        h2 { "From a laptop" }
        @match &person {
            Some(p) => {
                p { "Make a session of yours for " code { "allot" } ": it acts as " strong { (p.unix_user) } " with your grants now, ends "
                    (when(crate::clock::now() as i64 + app.auth.session_ttl_s() as i64)) ", and is shown once. "
                    "It is listed and ended like any session of yours (" code { "GET /v1/sessions" } ")." }
                form method="post" action="/cli" {
                    (csrf(&v))
                    button type="submit" { "Make a command-line session" }
                }
            }
            None => p.muted { "This dashboard is signed in with an API token, not as a person: use that token on the command line (" code { "ALLOT_TOKEN" } ")." }
        }
    };
    layout::page(&v, Page { title: "The command line".into(), nav: Nav::Work, body, refresh: None })
}

/// `POST /cli`: opens the session and shows its token once.
async fn create(
    State(app): State<App>,
    v: Viewer,
    source: Source,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if let Err(r) = v.check_csrf(form.get("csrf").map_or("", String::as_str)) {
        return r;
    }
    let Some(person) = v.person(&app).await else {
        return super::html::refusal(
            axum::http::StatusCode::FORBIDDEN,
            "Not a person's session",
            "This dashboard is signed in with an API token: use that token on the command line.",
        );
    };
    let opened = app
        .auth
        .open_session(&person.unix_user, person.groups.as_deref(), How::Dashboard.as_str(), &source.to_string())
        .await;
    let now = crate::clock::now() as i64;
    let (id, token, expires_t) = match opened {
        Ok(o) => o,
        Err(e) => return layout::api_error(&v, crate::api::ApiError::from(e)),
    };
    let a = Attempt { who: Some(&person.unix_user), how: How::Dashboard, source, refused: None };
    signin::audit(&app.store, now, &a).await;
    // This server as the browser reached it.
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("HOST:PORT");
    let server = format!("{}://{host}", if v.secure { "https" } else { "http" });
    let body = html! {
        h1 { "Your command-line session" }
        p role="status" { "Shown only this once: copy it now. It ends " (when(expires_t)) " (session " code { (id) } ")." }
        pre.token { "export ALLOT_SERVER=" (server) "\nexport ALLOT_TOKEN=" (token) }
        p { "Then " code { "allot queue" } " and every other command act as " strong { (person.unix_user) } ". End it sooner with "
            code { "DELETE /v1/sessions/" (id) } "." }
    };
    layout::page(&v, Page { title: "Your command-line session".into(), nav: Nav::Work, body, refresh: None })
}
