//! The JSON HTTP API under `/v1` (described by `/v1/openapi.json`) and
//! `/metrics`. Handlers authenticate, check and authorise, write
//! submissions to the store, and reach the scheduler task only by messages.

pub(crate) mod admin;
pub(crate) mod budgets;
pub(crate) mod conditions;
mod error;
pub mod extract;
pub mod fair;
pub(crate) mod image;
pub mod kubernetes;
pub mod limits;
pub(crate) mod login;
pub mod openapi;
pub mod reload;
pub(crate) mod workloads;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequestParts};
use axum::handler::Handler;
use axum::http::request::Parts;
use axum::http::{Method, header};
use axum::middleware::{from_fn, from_fn_with_state};
use axum::routing::{MethodFilter, MethodRouter, on};
use tokio::sync::{mpsc, oneshot};

pub use error::{ApiError, ApiErrors, ErrorKind};
pub use extract::{Body, parse_json};
pub use limits::Limits;

use allot_core::cluster::ClusterSet;

use crate::auth::{Authenticator, Principal};
use crate::metrics::Metrics;
use crate::scheduler::{Msg, Refusal};
use crate::store::Store;
use crate::submission::Catalog;

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// What every handler shares.
pub struct AppState {
    pub store: Store,
    pub auth: Authenticator,
    pub catalog: Arc<Catalog>,
    pub tx: mpsc::Sender<Msg>,
    pub metrics: Arc<Metrics>,
    pub limits: Arc<Limits>,
    /// The Kubernetes clusters' executors (K8S-12: a submission that names
    /// an image becomes a Job there).
    pub kube: Vec<Arc<crate::executor::kubernetes::KubeExecutor>>,
    /// Whose Unix identity workloads run as (ID-1).
    pub run: crate::identity::RunPolicy,
    /// The store's instance id: what a munge credential must be made for.
    pub instance: String,
    /// munge credentials already taken (each signs in once).
    pub seen: crate::munge::Seen,
    /// The login socket people on this host sign in at, if it is served.
    pub login_socket: Option<std::path::PathBuf>,
    /// Single sign-on for the dashboard (`[identity.oidc]`), if configured.
    pub sso: Option<Arc<crate::oidc::Sso>>,
    /// Reads the config again (CFG-1).
    pub reload: Arc<crate::api::reload::Reloader>,
}

pub type App = Arc<AppState>;

/// One route the router serves: its method, its path (axum's syntax) and
/// its handler.
pub struct Route {
    pub method: Method,
    pub path: &'static str,
    handler: MethodRouter<App>,
}

fn route<H: Handler<T, App>, T: 'static>(method: Method, path: &'static str, handler: H) -> Route {
    let filter = MethodFilter::try_from(method.clone()).expect("a method axum routes");
    Route { method, path, handler: on(filter, handler) }
}

/// Every route: the one table [`router`] is built from and the OpenAPI
/// document is checked against.
pub fn routes() -> Vec<Route> {
    vec![
        route(Method::GET, "/v1/health", admin::health),
        route(Method::GET, "/v1/openapi.json", openapi::serve),
        route(Method::GET, "/v1/whoami", admin::whoami),
        route(Method::GET, "/v1/login", login::info),
        route(Method::POST, "/v1/login/munge", login::munge),
        route(Method::GET, "/v1/sessions", login::sessions),
        route(Method::DELETE, "/v1/sessions/{id}", login::end_session),
        route(Method::GET, "/v1/workloads", workloads::list),
        route(Method::POST, "/v1/workloads", workloads::submit),
        route(Method::POST, "/v1/workloads/cancel", conditions::cancel_many),
        route(Method::POST, "/v1/workloads/hold", conditions::hold),
        route(Method::POST, "/v1/workloads/release", conditions::release),
        route(Method::GET, "/v1/workloads/{id}", workloads::show),
        route(Method::POST, "/v1/workloads/{id}/cancel", workloads::cancel),
        route(Method::POST, "/v1/workloads/{id}/hold", conditions::hold_one),
        route(Method::POST, "/v1/workloads/{id}/release", conditions::release_one),
        route(Method::POST, "/v1/workloads/{id}/checkpoint", workloads::checkpoint),
        route(Method::GET, "/v1/workloads/{id}/log", workloads::log),
        route(Method::GET, "/v1/accounts", admin::accounts),
        route(Method::POST, "/v1/accounts", admin::create_account),
        route(Method::GET, "/v1/account-tree", admin::account_tree),
        route(Method::PUT, "/v1/account-tree", admin::import_tree),
        route(Method::GET, "/v1/accounts/{*path}", admin::account),
        route(Method::PATCH, "/v1/accounts/{*path}", admin::change_account),
        route(Method::GET, "/v1/nodes", admin::nodes),
        route(Method::POST, "/v1/nodes/{name}/{action}", admin::node_action),
        route(Method::POST, "/v1/admin/reload", admin::reload),
        route(Method::GET, "/v1/tokens", admin::tokens),
        route(Method::POST, "/v1/tokens", admin::create_token),
        route(Method::DELETE, "/v1/tokens/{name}", admin::revoke_token),
        route(Method::GET, "/v1/audit", admin::audit),
        route(Method::GET, "/v1/budget-events", budgets::list),
        route(Method::GET, "/v1/budget-report", budgets::report),
        route(Method::GET, "/metrics", admin::metrics),
    ]
}

/// The router of [`routes`], `pages` (the dashboard's) and `fallback` (the
/// answer to paths nobody serves), inside the edge's limits (`limits`): the
/// error shape outermost, then the head limits, then the in-flight limit
/// and timeout.
pub fn router<H: Handler<T, App>, T: 'static>(app: App, pages: Router<App>, fallback: H) -> Router {
    let limits = app.limits.clone();
    let router = routes().into_iter().fold(Router::new(), |r, route| r.route(route.path, route.handler));
    router
        .merge(pages)
        .fallback(fallback)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(app.clone())
        .layer(from_fn_with_state(app, fair::fair_share))
        .layer(from_fn_with_state(limits, limits::in_flight))
        .layer(from_fn(limits::head_limits))
        .layer(from_fn(limits::shape_errors))
}

/// The answer to a path under `/v1` that no route serves.
pub fn no_such_endpoint() -> ApiError {
    ApiError::not_found("no such endpoint (see /v1/openapi.json)")
}

/// The authenticated caller.
pub struct Auth(pub Principal);

impl FromRequestParts<App> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Auth, ApiError> {
        let token = bearer(&parts.headers)?;
        // Found already by the fair-share layer (API-1) for this token.
        if let Some(p) = parts.extensions.remove::<Principal>() {
            return Ok(Auth(p));
        }
        match app.auth.principal(token).await? {
            Some(p) => Ok(Auth(p)),
            None => Err(ApiError::unauthorized("unknown or revoked token")),
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header.
pub(crate) fn bearer(headers: &axum::http::HeaderMap) -> Result<&str, ApiError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthorized("missing bearer token: send `Authorization: Bearer <token>`"))?;
    value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ApiError::unauthorized("malformed Authorization header: expected `Bearer <token>`"))
}

/// A `?cluster=` filter: the clusters of the fleet it names (commas
/// between), checked by the validator of submissions; an unknown one is a
/// 400 naming it and the fleet's clusters.
pub(crate) fn cluster_filter(app: &App, names: &str) -> Result<ClusterSet, ApiError> {
    let template = app.catalog.template();
    let v = allot_trace::workload::Validator::for_state(&template);
    v.clusters(names).map_err(|e| ApiError::field("cluster", e.kind.to_string()))
}

/// Sends a request to the scheduler task and waits for its answer.
pub(crate) async fn ask<T>(app: &App, make: impl FnOnce(oneshot::Sender<T>) -> Msg) -> Result<T, ApiError> {
    let (tx, rx) = oneshot::channel();
    app.tx.send(make(tx)).await.map_err(|_| ApiError::unavailable())?;
    rx.await.map_err(|_| ApiError::unavailable())
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> ApiError {
        match r {
            Refusal::NotFound(m) => ApiError::not_found(m),
            Refusal::Conflict(m) => ApiError::new(ErrorKind::Conflict, m),
            Refusal::Invalid { field, message } => ApiError::field(field, message),
            Refusal::Unavailable(m) => ApiError::new(ErrorKind::Unavailable, m),
            Refusal::Unauthorized(m) => ApiError::unauthorized(m),
            Refusal::Forbidden(m) => ApiError::forbidden(m),
        }
    }
}
