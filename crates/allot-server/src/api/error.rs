//! API errors: a kind (its status) and a JSON body `{"error": "...", "field": "..."}`.
//!
//! [`ErrorKind`] is the one list of the error statuses the API answers
//! with; the OpenAPI document declares each of them on every operation
//! ([`ApiErrors`]), and its test checks that it does.

use std::collections::BTreeMap;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder, header::HeaderBuilder};

use crate::store::StoreError;
use crate::views::ErrorBody;

/// Declares [`ErrorKind`], its statuses and the list of all of them in one place.
macro_rules! error_kinds {
    ($($(#[doc = $doc:literal])* $kind:ident = $status:ident,)*) => {
        /// What went wrong, as the status of the answer.
        #[derive(Copy, Clone, Debug, PartialEq, Eq)]
        pub enum ErrorKind {
            $($(#[doc = $doc])* $kind,)*
        }

        impl ErrorKind {
            /// Every kind, in the order of their statuses.
            pub const ALL: &'static [ErrorKind] = &[$(ErrorKind::$kind,)*];

            pub fn status(self) -> StatusCode {
                match self {
                    $(ErrorKind::$kind => StatusCode::$status,)*
                }
            }
        }
    };
}

error_kinds! {
    /// A malformed request: body, field, path or query parameter.
    BadRequest = BAD_REQUEST,
    /// No token, a malformed one, or one unknown or revoked.
    Unauthorized = UNAUTHORIZED,
    /// The caller's role or scope does not allow it.
    Forbidden = FORBIDDEN,
    /// No such endpoint, or a resource that does not exist or the caller may not see.
    NotFound = NOT_FOUND,
    /// The path exists, the method does not (see the `Allow` header).
    MethodNotAllowed = METHOD_NOT_ALLOWED,
    /// The request body did not arrive within the body timeout.
    RequestTimeout = REQUEST_TIMEOUT,
    /// The resource's state does not allow it (ended, name taken, key in progress).
    Conflict = CONFLICT,
    /// The request target is over the limit.
    UriTooLong = URI_TOO_LONG,
    /// The body is not sent as `application/json`.
    UnsupportedMediaType = UNSUPPORTED_MEDIA_TYPE,
    /// An idempotency key reused with another request.
    Unprocessable = UNPROCESSABLE_ENTITY,
    /// Too many sign-in attempts from the client's address (with `Retry-After`).
    TooManyRequests = TOO_MANY_REQUESTS,
    /// The request head is over the limits.
    HeadersTooLarge = REQUEST_HEADER_FIELDS_TOO_LARGE,
    /// A fault of the server.
    Internal = INTERNAL_SERVER_ERROR,
    /// Temporarily not served: shutting down, over the in-flight limit or
    /// the request timeout, the store unavailable (with `Retry-After`).
    Unavailable = SERVICE_UNAVAILABLE,
}

impl ErrorKind {
    /// The kind answered for `status`: a client error the API does not name
    /// is a bad request, any other failure an internal error.
    pub fn from_status(status: StatusCode) -> ErrorKind {
        match ErrorKind::ALL.iter().find(|k| k.status() == status) {
            Some(k) => *k,
            None if status.is_client_error() => ErrorKind::BadRequest,
            None => ErrorKind::Internal,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub kind: ErrorKind,
    pub error: String,
    pub field: Option<String>,
}

impl ApiError {
    pub fn new(kind: ErrorKind, error: impl Into<String>) -> ApiError {
        ApiError { kind, error: error.into(), field: None }
    }

    /// An error naming the field (or header) that was wrong.
    pub fn with_field(kind: ErrorKind, field: impl Into<String>, error: impl Into<String>) -> ApiError {
        ApiError { kind, error: error.into(), field: Some(field.into()) }
    }

    pub fn bad_request(error: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::BadRequest, error)
    }

    /// 400 naming the field.
    pub fn field(field: impl Into<String>, error: impl Into<String>) -> ApiError {
        ApiError::with_field(ErrorKind::BadRequest, field, error)
    }

    /// The error with its field named inside `outer` (`accounts[2].share`).
    pub fn within(mut self, outer: &str) -> ApiError {
        self.field = Some(match self.field {
            Some(f) => format!("{outer}.{f}"),
            None => outer.to_string(),
        });
        self
    }

    pub fn unauthorized(error: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Unauthorized, error)
    }

    pub fn forbidden(error: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Forbidden, error)
    }

    pub fn not_found(error: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::NotFound, error)
    }

    pub fn unavailable() -> ApiError {
        ApiError::new(ErrorKind::Unavailable, "the scheduler is not running (the server is shutting down)")
    }

    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        tracing::error!(error = %e, "store error");
        // An outage (down, busy, full, read-only, lease lost) is temporary: 503.
        let kind = if e.is_unavailable() { ErrorKind::Unavailable } else { ErrorKind::Internal };
        ApiError::new(kind, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut r = (status, Json(ErrorBody { error: self.error, field: self.field })).into_response();
        if self.kind == ErrorKind::Unavailable {
            r.headers_mut().insert(axum::http::header::RETRY_AFTER, "1".parse().expect("valid header"));
        }
        if self.kind == ErrorKind::Unauthorized {
            r.headers_mut().insert(axum::http::header::WWW_AUTHENTICATE, "Bearer".parse().expect("valid header"));
        }
        r
    }
}

/// The error answers of every operation in the OpenAPI document: one per
/// [`ErrorKind`], each an [`ErrorBody`].
pub struct ApiErrors;

impl utoipa::IntoResponses for ApiErrors {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        let string = || utoipa::openapi::schema::Object::with_type(utoipa::openapi::schema::Type::String);
        ErrorKind::ALL
            .iter()
            .map(|k| {
                let status = k.status();
                let content = ContentBuilder::new().schema(Some(Ref::from_schema_name("Error"))).build();
                let mut resp = ResponseBuilder::new()
                    .description(status.canonical_reason().unwrap_or("error").to_lowercase())
                    .content("application/json", content);
                if matches!(*k, ErrorKind::Unavailable | ErrorKind::TooManyRequests) {
                    resp = resp.header("Retry-After", HeaderBuilder::new().schema(string()).build());
                }
                if *k == ErrorKind::Unauthorized {
                    resp = resp.header("WWW-Authenticate", HeaderBuilder::new().schema(string()).build());
                }
                (status.as_str().to_string(), RefOr::T(resp.build()))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_maps_to_a_declared_kind() {
        for k in ErrorKind::ALL {
            assert_eq!(ErrorKind::from_status(k.status()), *k);
        }
        for code in 400..600 {
            let status = StatusCode::from_u16(code).expect("a status");
            let kind = ErrorKind::from_status(status);
            assert!(ErrorKind::ALL.contains(&kind), "{code}: {kind:?}");
            assert_eq!(kind.status().is_client_error(), status.is_client_error(), "{code}");
        }
    }
}
