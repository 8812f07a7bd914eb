//! Request limits and the error shape at the edge of the router:
//!
//! * [`shape_errors`]: every error answer is `{"error", "field"}`, also the
//!   ones axum and its extractors make in plain text or with no body (405
//!   with its `Allow` header, query-string rejections, …). The router
//!   applies these layers to each route and to the fallback;
//! * [`head_limits`]: a request target over [`MAX_URI_BYTES`] is 414, a head
//!   over [`MAX_HEADER_BYTES`] or [`MAX_HEADER_COUNT`] fields is 431;
//! * [`in_flight`]: at most `max_in_flight` requests run at once (the rest
//!   are shed with 503 and `Retry-After`), each within `request_timeout`
//!   (503 when it runs over).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use super::{ApiError, ErrorKind};

/// Longest request target (path and query).
pub const MAX_URI_BYTES: usize = 8 * 1024;
/// Largest sum of header names and values.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// Most header fields.
pub const MAX_HEADER_COUNT: usize = 100;
/// Plain-text error bodies longer than this are cut.
const MAX_TEXT_ERROR: usize = 4096;

/// The limits handlers and middleware read.
#[derive(Debug)]
pub struct Limits {
    pub body_timeout: Duration,
    pub request_timeout: Duration,
    pub max_in_flight: usize,
    in_flight: Arc<Semaphore>,
    /// Sign-in attempts per source and the sweep of expired sessions
    /// ([`crate::signin`]).
    pub signin: crate::signin::Guard,
    /// Each principal's rate and requests in progress (API-1, `[api]`).
    pub fair: super::fair::Fair,
}

impl Limits {
    pub fn new(body_timeout: Duration, request_timeout: Duration, max_in_flight: usize) -> Limits {
        Limits {
            body_timeout,
            request_timeout,
            max_in_flight,
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            signin: crate::signin::Guard::default(),
            fair: super::fair::Fair::new(allot_trace::config::ApiConfig::default()),
        }
    }

    /// These limits with each principal's of `[api]` (API-1).
    pub fn with_api(mut self, api: allot_trace::config::ApiConfig) -> Limits {
        self.fair = super::fair::Fair::new(api);
        self
    }
}

impl Default for Limits {
    fn default() -> Limits {
        let d = crate::listener::EdgeOptions::default();
        Limits::new(d.body_timeout, d.request_timeout, d.max_in_flight)
    }
}

/// Rewrites error answers that are not JSON into the documented shape (the
/// dashboard's HTML error pages are left as they are).
pub async fn shape_errors(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let resp = next.run(req).await;
    let status = resp.status();
    let is_shaped = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/html"));
    if !(status.is_client_error() || status.is_server_error()) || is_shaped {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let text = match axum::body::to_bytes(body, MAX_TEXT_ERROR * 4).await {
        Ok(b) => String::from_utf8_lossy(&b[..b.len().min(MAX_TEXT_ERROR)]).trim().to_string(),
        Err(_) => String::new(),
    };
    let error = match status {
        // The router adds the `Allow` header once this answer leaves.
        StatusCode::METHOD_NOT_ALLOWED => format!("method {method} is not allowed on {path} (see the Allow header)"),
        _ if text.is_empty() => status.canonical_reason().unwrap_or("error").to_lowercase(),
        _ => lowercase_first(&text),
    };
    // The status is kept when the API declares it, else named by its class
    // (a client error the API does not name is a 400).
    let kind = ErrorKind::from_status(status);
    parts.status = kind.status();
    let shaped = ApiError::new(kind, error).into_response();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let (_, body) = shaped.into_parts();
    Response::from_parts(parts, body)
}

fn lowercase_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

/// 414 and 431 in the JSON shape, below hyper's own (bare) limits.
pub async fn head_limits(req: Request, next: Next) -> Response {
    let target = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if target > MAX_URI_BYTES {
        return ApiError::new(
            ErrorKind::UriTooLong,
            format!("the request target is {target} bytes; the limit is {MAX_URI_BYTES}"),
        )
        .into_response();
    }
    let headers = req.headers();
    let bytes: usize = headers.iter().map(|(k, v)| k.as_str().len() + v.len()).sum();
    if headers.len() > MAX_HEADER_COUNT || bytes > MAX_HEADER_BYTES {
        return ApiError::new(ErrorKind::HeadersTooLarge,
            format!(
                "{} header fields of {bytes} bytes; the limits are {MAX_HEADER_COUNT} fields and {MAX_HEADER_BYTES} bytes",
                headers.len()
            ),
        )
        .into_response();
    }
    next.run(req).await
}

/// Sheds requests over the in-flight limit and bounds each one's time.
pub async fn in_flight(State(limits): State<Arc<Limits>>, req: Request<Body>, next: Next) -> Response {
    let Ok(_permit) = limits.in_flight.clone().try_acquire_owned() else {
        let mut r = ApiError::new(
            ErrorKind::Unavailable,
            format!("the server is handling its limit of {} requests; retry shortly", limits.max_in_flight),
        )
        .into_response();
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    };
    match tokio::time::timeout(limits.request_timeout, next.run(req)).await {
        Ok(r) => r,
        Err(_) => ApiError::new(
            ErrorKind::Unavailable,
            format!(
                "the request was not answered within {} s (a submission may still be committed: retry with the \
                 same Idempotency-Key)",
                limits.request_timeout.as_secs()
            ),
        )
        .into_response(),
    }
}
