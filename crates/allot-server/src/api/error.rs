//! API errors: a status and a JSON body `{"error": "...", "field": "..."}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::store::StoreError;
use crate::views::ErrorBody;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub error: String,
    pub field: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, error: impl Into<String>) -> ApiError {
        ApiError { status, error: error.into(), field: None }
    }

    pub fn bad_request(error: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, error)
    }

    /// 400 naming the field.
    pub fn field(field: impl Into<String>, error: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::BAD_REQUEST, error: error.into(), field: Some(field.into()) }
    }

    pub fn unauthorized(error: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, error)
    }

    pub fn forbidden(error: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, error)
    }

    pub fn not_found(error: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, error)
    }

    pub fn unavailable() -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the scheduler is not running (the server is shutting down)")
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        tracing::error!(error = %e, "store error");
        // An outage (down, busy, full, read-only, lease lost) is temporary: 503.
        let status =
            if e.is_unavailable() { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::INTERNAL_SERVER_ERROR };
        ApiError::new(status, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, Json(ErrorBody { error: self.error, field: self.field })).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            r.headers_mut().insert(axum::http::header::RETRY_AFTER, "1".parse().expect("valid header"));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(axum::http::header::WWW_AUTHENTICATE, "Bearer".parse().expect("valid header"));
        }
        r
    }
}
