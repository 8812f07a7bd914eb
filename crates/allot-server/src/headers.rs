//! The security headers of every answer a browser may open: the dashboard's
//! pages and the raw log of `GET /v1/workloads/{id}/log` (what a workload
//! wrote, which must never run or be framed as a page of this site). One
//! place, below both the API and the dashboard.

use axum::http::{HeaderMap, HeaderValue, header};

/// Nothing from elsewhere, no framing, no sniffing of the content type, no
/// caching, no referrer sent to other sites. A `Cache-Control` already set
/// is kept.
pub fn security_headers(h: &mut HeaderMap) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // Not `no-referrer`: with it, browsers send `Origin: null` on the
    // dashboard's own form posts, which the origin check refuses.
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    h.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
}
