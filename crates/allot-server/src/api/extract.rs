//! Extractors whose rejections are API errors naming what was wrong: the
//! JSON body (its media type, size, read time and fields), path parameters,
//! and the `Idempotency-Key` header.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;

use super::{ApiError, App, ErrorKind, MAX_BODY_BYTES};

/// A JSON body whose errors name the field (400), sent as
/// `application/json` (else 415) and read within the body limit (400) and
/// the body timeout (408).
pub struct Body<T>(pub T);

impl<T: DeserializeOwned> FromRequest<App> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, app: &App) -> Result<Body<T>, ApiError> {
        require_json(req.headers())?;
        let read = axum::body::Bytes::from_request(req, app);
        let bytes = match tokio::time::timeout(app.limits.body_timeout, read).await {
            Err(_) => {
                return Err(ApiError::new(
                    ErrorKind::RequestTimeout,
                    format!("the request body was not received within {} s", app.limits.body_timeout.as_secs()),
                ));
            }
            Ok(Err(e)) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                return Err(ApiError::bad_request(format!(
                    "request body larger than the limit of {MAX_BODY_BYTES} bytes"
                )));
            }
            Ok(Err(e)) => return Err(ApiError::bad_request(format!("cannot read the request body: {e}"))),
            Ok(Ok(b)) => b,
        };
        parse_json(&bytes).map(Body)
    }
}

/// 415 unless the body is declared `application/json` (parameters such as
/// `charset=utf-8` allowed).
pub fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let unsupported = |what: String| ApiError {
        kind: ErrorKind::UnsupportedMediaType,
        error: format!("{what}: the body must be sent as `Content-Type: application/json`"),
        field: Some("Content-Type".into()),
    };
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Err(unsupported("no Content-Type".into()));
    };
    let text = value.to_str().map_err(|_| unsupported("a Content-Type that is not text".into()))?;
    let essence = text.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(unsupported(format!("unsupported Content-Type {text:?}")))
    }
}

/// Parses one JSON value, naming the field of the first error; anything
/// but white space after the value is refused (`{"a":1} xyz`, `{}{}`), so
/// the body is read as exactly what was sent.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let value = parse_value(de)?;
    de.end().map_err(|e| {
        ApiError::bad_request(format!(
            "malformed json: trailing characters after the JSON value ({e}): send one JSON value"
        ))
    })?;
    Ok(value)
}

fn parse_value<T: DeserializeOwned>(
    de: &mut serde_json::Deserializer<serde_json::de::SliceRead<'_>>,
) -> Result<T, ApiError> {
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
        ApiError { kind: ErrorKind::BadRequest, error: format!("{what}: {msg}"), field }
    })
}

/// Path parameters; a parameter that does not decode is a 400 naming it.
pub struct Path<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Path<T>, ApiError> {
        use axum::extract::path::ErrorKind as PathError;
        use axum::extract::rejection::PathRejection;
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(Path(v)),
            Err(PathRejection::FailedToDeserializePathParams(e)) => {
                let field = match e.kind() {
                    PathError::InvalidUtf8InPathParam { key }
                    | PathError::ParseErrorAtKey { key, .. }
                    | PathError::DeserializeError { key, .. } => Some(key.clone()),
                    _ => None,
                };
                Err(ApiError { kind: ErrorKind::BadRequest, error: format!("bad path: {}", e.body_text()), field })
            }
            Err(e) => Err(ApiError::new(ErrorKind::from_status(e.status()), format!("bad path: {}", e.body_text()))),
        }
    }
}

/// `Idempotency-Key` on a submission: the same key from the same principal
/// returns the same workload (docs/server.md).
pub struct IdempotencyKey(pub Option<String>);

/// Longest key accepted.
pub const MAX_IDEMPOTENCY_KEY: usize = 255;

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<IdempotencyKey, ApiError> {
        let Some(v) = parts.headers.get("idempotency-key") else { return Ok(IdempotencyKey(None)) };
        let bad = |why: &str| ApiError::field("Idempotency-Key", why.to_string());
        let key = v.to_str().map_err(|_| bad("must be visible ASCII"))?.trim();
        if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY {
            return Err(bad(&format!("must be 1 to {MAX_IDEMPOTENCY_KEY} characters")));
        }
        if !key.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
            return Err(bad("must be visible ASCII"));
        }
        Ok(IdempotencyKey(Some(key.to_string())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct One {
        #[allow(dead_code, reason = "read by the parser only")]
        a: u32,
    }

    /// One JSON value and nothing after it but white space.
    #[test]
    fn trailing_characters_are_refused() {
        for ok in [&b"{\"a\":1}"[..], b"{\"a\":1}  \r\n\t", b" {\"a\":1}\n"] {
            assert!(parse_json::<One>(ok).is_ok(), "{}", String::from_utf8_lossy(ok));
        }
        for bad in [&b"{\"a\":1} xyz"[..], b"{\"a\":1}{}", b"{\"a\":1}\n{\"a\":2}", b"{\"a\":1},"] {
            let e = parse_json::<One>(bad).expect_err(&String::from_utf8_lossy(bad));
            assert_eq!(e.kind, ErrorKind::BadRequest);
            assert!(e.error.starts_with("malformed json: trailing characters after the JSON value"), "{}", e.error);
            assert_eq!(e.field, None);
        }
        let e = parse_json::<serde_json::Value>(b"{}{}").unwrap_err();
        assert!(e.error.contains("trailing characters"), "{}", e.error);
    }
}
