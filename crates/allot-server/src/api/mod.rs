//! The JSON HTTP API under `/v1` (described by `/v1/openapi.json`) and
//! `/metrics`. Handlers authenticate, check and authorise, write
//! submissions to the store, and reach the scheduler task only by messages.

mod admin;
mod error;
pub mod openapi;
mod workloads;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::routing::{get, patch, post};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, oneshot};

pub use error::ApiError;

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
}

pub type App = Arc<AppState>;

/// The router.
pub fn router(app: App) -> Router {
    Router::new()
        .route("/v1/health", get(admin::health))
        .route("/v1/openapi.json", get(openapi::serve))
        .route("/v1/whoami", get(admin::whoami))
        .route("/v1/workloads", get(workloads::list).post(workloads::submit))
        .route("/v1/workloads/{id}", get(workloads::show))
        .route("/v1/workloads/{id}/cancel", post(workloads::cancel))
        .route("/v1/accounts", get(admin::accounts))
        .route("/v1/accounts/{*path}", patch(admin::change_account).get(admin::account))
        .route("/v1/nodes", get(admin::nodes))
        .route("/v1/nodes/{name}/{action}", post(admin::node_action))
        .route("/v1/tokens", get(admin::tokens).post(admin::create_token))
        .route("/v1/tokens/{name}", axum::routing::delete(admin::revoke_token))
        .route("/v1/audit", get(admin::audit))
        .route("/metrics", get(admin::metrics))
        .fallback(|| async { ApiError::not_found("no such endpoint (see /v1/openapi.json)") })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(app)
}

/// The authenticated caller.
pub struct Auth(pub Principal);

impl FromRequestParts<App> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Auth, ApiError> {
        let value = parts
            .headers
            .get(header::AUTHORIZATION)
            .ok_or_else(|| ApiError::unauthorized("missing bearer token: send `Authorization: Bearer <token>`"))?;
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ApiError::unauthorized("malformed Authorization header: expected `Bearer <token>`"))?;
        match app.auth.principal(token).await? {
            Some(p) => Ok(Auth(p)),
            None => Err(ApiError::unauthorized("unknown or revoked token")),
        }
    }
}

/// A JSON body whose errors name the field (400), read within the body
/// limit (also 400: a bad request like any other, and nothing is stored).
pub struct Body<T>(pub T);

impl<T: DeserializeOwned> FromRequest<App> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, app: &App) -> Result<Body<T>, ApiError> {
        let bytes = axum::body::Bytes::from_request(req, app).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::bad_request(format!("request body larger than the limit of {MAX_BODY_BYTES} bytes"))
            } else {
                ApiError::bad_request(format!("cannot read the request body: {e}"))
            }
        })?;
        parse_json(&bytes).map(Body)
    }
}

/// Parses JSON, naming the field of the first error.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let msg = inner.to_string();
        // An unknown key is named in the message, not in the path.
        let unknown = msg.strip_prefix("unknown field `").and_then(|r| r.split('`').next()).map(str::to_string);
        let field = match (unknown, path.as_str()) {
            (Some(k), ".") => Some(k),
            (_, ".") => None,
            (_, p) => Some(p.to_string()),
        };
        let what = if inner.is_syntax() || inner.is_eof() { "malformed json" } else { "invalid request" };
        ApiError { status: StatusCode::BAD_REQUEST, error: format!("{what}: {msg}"), field }
    })
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
            Refusal::Conflict(m) => ApiError::new(StatusCode::CONFLICT, m),
            Refusal::Invalid { field, message } => ApiError::field(field, message),
            Refusal::Unavailable(m) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, m),
        }
    }
}
