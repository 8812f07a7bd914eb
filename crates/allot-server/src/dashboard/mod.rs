//! The web dashboard at `/` (docs/dashboard.md): server-rendered pages for
//! researchers, managers and operators, served by the same binary as the API.
//!
//! * **One authorisation.** A page reads through the API's own handlers
//!   (`crate::api`), called in-process with the signed-in principal, so it
//!   sees exactly what the API would answer that principal, and a change
//!   made from a page passes the API's checks and audit.
//! * **Sessions.** The API token is pasted once at `/login`; the browser
//!   then holds only a random session cookie (`HttpOnly`, `SameSite=Strict`,
//!   `Secure` behind TLS), whose SHA-256 the store keeps with the hash of the
//!   token (a revoked token ends its sessions) and an expiry. No token ever
//!   appears in a URL or a page.
//! * **CSRF.** Every change is a `POST` form carrying the session's CSRF
//!   token; a request from another origin is refused before it is read.
//! * **Live pages.** `assets/dashboard.js` refreshes `<main>` in place
//!   (`X-Allot-Partial`) while the tab is visible; pages read the store and
//!   the scheduler's snapshots, never holding the scheduler.
//! * Every asset is embedded in the binary; nothing is fetched from
//!   elsewhere at run time.

pub mod admin;
pub mod assets;
pub mod budgets;
pub mod cli_access;
pub mod fleet;
pub mod history;
pub mod html;
pub mod layout;
pub mod queue;
pub mod rules;
pub mod session;
pub mod sso;
pub mod work;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};

use crate::api::App;

pub use layout::{Page, page};
pub use session::Viewer;

/// The dashboard's routes (everything but `/v1` and `/metrics`).
pub fn routes() -> Router<App> {
    Router::new()
        .merge(session::routes())
        .merge(sso::routes())
        .merge(cli_access::routes())
        .merge(assets::routes())
        .merge(work::routes())
        .merge(budgets::routes())
        .merge(queue::routes())
        .merge(fleet::routes())
        .merge(history::routes())
        .merge(admin::routes())
        .merge(rules::routes())
}

/// A path nobody serves: the API's JSON 404 under `/v1` and `/metrics`,
/// the dashboard's HTML page elsewhere (with the navigation when signed in).
pub async fn fallback(State(app): State<App>, req: axum::extract::Request) -> Response {
    let path = req.uri().path();
    if path == "/v1" || path.starts_with("/v1/") || path == "/metrics" {
        return crate::api::no_such_endpoint().into_response();
    }
    let (parts, _) = req.into_parts();
    let viewer = Viewer::resolve(&app, &parts).await.ok().flatten();
    layout::error_page(
        viewer.as_ref(),
        axum::http::StatusCode::NOT_FOUND,
        "No such page",
        "There is no page at this address.",
    )
}
