//! The dashboard's stylesheet and script, embedded in the binary and
//! served with an ETag (revalidated, never fetched from elsewhere).

use std::sync::LazyLock;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::api::App;

pub const CSS: &str = include_str!("assets/dashboard.css");
pub const JS: &str = include_str!("assets/dashboard.js");
pub const CSS_URL: &str = "/assets/dashboard.css";
pub const JS_URL: &str = "/assets/dashboard.js";

static CSS_TAG: LazyLock<String> = LazyLock::new(|| etag(CSS));
static JS_TAG: LazyLock<String> = LazyLock::new(|| etag(JS));

fn etag(text: &str) -> String {
    format!("\"{}\"", &crate::auth::hash_token(text)[..16])
}

pub fn routes() -> Router<App> {
    Router::new()
        .route(CSS_URL, get(|h: HeaderMap| async move { asset(&h, CSS, &CSS_TAG, "text/css; charset=utf-8") }))
        .route(JS_URL, get(|h: HeaderMap| async move { asset(&h, JS, &JS_TAG, "text/javascript; charset=utf-8") }))
}

fn asset(h: &HeaderMap, body: &'static str, tag: &str, kind: &'static str) -> Response {
    let tag_value = HeaderValue::from_str(tag).expect("hex");
    let mut r = if h.get(header::IF_NONE_MATCH).is_some_and(|v| v.as_bytes() == tag.as_bytes()) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, HeaderValue::from_static(kind))], body).into_response()
    };
    r.headers_mut().insert(header::ETAG, tag_value);
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r.headers_mut().insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    r
}
