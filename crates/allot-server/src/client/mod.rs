//! The HTTP client behind `allot submit`, `queue`, `show`, `cancel`,
//! `accounts`, `budget`, `share`, `nodes` and `node`, and the plain-text
//! rendering of their answers ([`render`]).
//!
//! The server URL and token come from the command line, then the
//! environment (`ALLOT_SERVER`, `ALLOT_TOKEN`), then the client config file
//! (`$ALLOT_CLIENT_CONFIG`, default `~/.config/allot/client.toml`, keys
//! `server` and `token`), then the default `http://127.0.0.1:8080`.
//!
//! A submission carries a fresh `Idempotency-Key` and is retried with the
//! same key when its answer is lost (the connection breaks or times out
//! after the request was sent) or
//! the server is briefly unavailable (503, or 409 while the first try still
//! commits): a retry returns the workload the first try created, never a
//! second one.

pub mod render;

use std::path::PathBuf;

use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::views::{
    AccountChange, AccountDecl, AccountEdits, AccountTreeImport, AccountView, ErrorBody, NodeView, SubmitRequest,
    TokenCreated, TokenRequest, WorkloadDetail, WorkloadView,
};

pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error.
    #[error("{status}: {error}{}", field.as_ref().map(|f| format!(" (field `{f}`)")).unwrap_or_default())]
    Api { status: StatusCode, error: String, field: Option<String> },
    #[error("cannot reach the server at {url}: {source}")]
    Transport { url: String, source: reqwest::Error },
    #[error("{0}")]
    Config(String),
}

impl ClientError {
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Worth the same request again: it was sent and its answer lost (a
    /// reset or timed-out connection, not one that never opened: then
    /// nothing was sent and the error is the user's to see at once), or the
    /// server said to come back (503) or is still committing the key's first
    /// try (409).
    fn is_transient(&self) -> bool {
        match self {
            ClientError::Transport { source, .. } => !source.is_connect() && !source.is_builder(),
            ClientError::Api { status, .. } => {
                *status == StatusCode::SERVICE_UNAVAILABLE || *status == StatusCode::CONFLICT
            }
            ClientError::Config(_) => false,
        }
    }
}

/// Tries of one submission, and the wait before the second (doubled each
/// time: 0.5 + 1 + 2 + 4 s at most).
const SUBMIT_TRIES: u32 = 5;
const SUBMIT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(500);

/// A fresh key: 128 bits of OS randomness, hex.
fn idempotency_key() -> String {
    use rand::RngCore;
    let mut b = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The client config file.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    pub server: Option<String>,
    pub token: Option<String>,
}

impl ClientConfig {
    pub fn path() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("ALLOT_CLIENT_CONFIG") {
            return Some(PathBuf::from(p));
        }
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config/allot/client.toml"))
    }

    /// Reads the file if it exists.
    pub fn load() -> Result<ClientConfig, ClientError> {
        let Some(p) = Self::path() else { return Ok(ClientConfig::default()) };
        match std::fs::read_to_string(&p) {
            Ok(text) => {
                toml::from_str(&text).map_err(|e| ClientError::Config(format!("{}: {}", p.display(), e.message())))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ClientConfig::default()),
            Err(e) => Err(ClientError::Config(format!("cannot read {}: {e}", p.display()))),
        }
    }
}

/// A connection to one server.
#[derive(Clone, Debug)]
pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    pub fn new(server: &str, token: Option<String>) -> Client {
        let http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(60)).build().expect("tls backend");
        Client { base: server.trim_end_matches('/').to_string(), token, http }
    }

    /// From explicit values, else the environment, else the config file.
    pub fn from_env(server: Option<&str>, token: Option<&str>) -> Result<Client, ClientError> {
        let file = ClientConfig::load()?;
        let server = server
            .map(str::to_string)
            .or_else(|| std::env::var("ALLOT_SERVER").ok())
            .or(file.server)
            .unwrap_or_else(|| DEFAULT_SERVER.to_string());
        let token = token.map(str::to_string).or_else(|| std::env::var("ALLOT_TOKEN").ok()).or(file.token);
        Ok(Client::new(&server, token))
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        self.call_with(method, path, body, &[]).await
    }

    async fn call_with<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        headers: &[(&str, &str)],
    ) -> Result<T, ClientError> {
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(method, &url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let (bytes, _) = self.send(req, &url).await?;
        let text = if bytes.is_empty() { &b"null"[..] } else { &bytes[..] };
        serde_json::from_slice(text).map_err(|e| ClientError::Config(format!("unexpected answer from {url}: {e}")))
    }

    /// Sends `req` (to `url`); the body and headers of a success, the
    /// API's error otherwise.
    async fn send(
        &self,
        req: reqwest::RequestBuilder,
        url: &str,
    ) -> Result<(axum::body::Bytes, reqwest::header::HeaderMap), ClientError> {
        let transport = |source| ClientError::Transport { url: url.to_string(), source };
        let resp = req.send().await.map_err(transport)?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.map_err(transport)?;
        if !status.is_success() {
            let (error, field) = match serde_json::from_slice::<ErrorBody>(&bytes) {
                Ok(e) => (e.error, e.field),
                Err(_) => (String::from_utf8_lossy(&bytes).into_owned(), None),
            };
            return Err(ClientError::Api { status, error, field });
        }
        Ok((bytes, headers))
    }

    /// A chunk of an attempt's log from `offset` (`GET /v1/workloads/{id}/log`):
    /// the bytes, the offset to ask from next, and whether the log is complete.
    pub async fn log_chunk(
        &self,
        id: &str,
        attempt: Option<i64>,
        offset: u64,
    ) -> Result<(Vec<u8>, u64, bool), ClientError> {
        let mut q = vec![("offset", offset.to_string())];
        if let Some(a) = attempt {
            q.push(("attempt", a.to_string()));
        }
        let url = format!("{}{}", self.base, with_query(&format!("/v1/workloads/{}/log", encode(id)), &q));
        let mut req = self.http.get(&url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let (bytes, headers) = self.send(req, &url).await?;
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let next = header("x-log-offset").and_then(|v| v.parse().ok()).unwrap_or(offset + bytes.len() as u64);
        Ok((bytes.to_vec(), next, header("x-log-done").is_some()))
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.call::<(), T>(Method::GET, path, None).await
    }

    /// Submits once, whatever happens to the answers: one key for every
    /// try (see the module docs).
    pub async fn submit(&self, req: &SubmitRequest) -> Result<WorkloadView, ClientError> {
        let key = idempotency_key();
        let mut backoff = SUBMIT_BACKOFF;
        for _ in 1..SUBMIT_TRIES {
            match self.call_with(Method::POST, "/v1/workloads", Some(req), &[("Idempotency-Key", &key)]).await {
                Err(e) if e.is_transient() => {
                    tracing::debug!(error = %e, "submission answer lost or server busy: retrying with the same key");
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
                done => return done,
            }
        }
        self.call_with(Method::POST, "/v1/workloads", Some(req), &[("Idempotency-Key", &key)]).await
    }

    /// Workloads; `query` is e.g. `[("state", "pending,running")]`.
    pub async fn workloads(&self, query: &[(&str, String)]) -> Result<Vec<WorkloadView>, ClientError> {
        self.get(&with_query("/v1/workloads", query)).await
    }

    pub async fn workload(&self, id: &str) -> Result<WorkloadDetail, ClientError> {
        self.get(&format!("/v1/workloads/{}", encode(id))).await
    }

    pub async fn cancel(&self, id: &str) -> Result<WorkloadView, ClientError> {
        self.call::<(), _>(Method::POST, &format!("/v1/workloads/{}/cancel", encode(id)), None).await
    }

    /// Cancels, holds or releases (`action`) the workloads `req` names:
    /// `POST /v1/workloads/{action}`.
    pub async fn bulk(
        &self,
        action: &str,
        req: &crate::views::BulkRequest,
    ) -> Result<Vec<crate::views::BulkResult>, ClientError> {
        self.call(Method::POST, &format!("/v1/workloads/{action}"), Some(req)).await
    }

    pub async fn accounts(&self) -> Result<Vec<AccountView>, ClientError> {
        self.get("/v1/accounts").await
    }

    pub async fn change_account(&self, path: &str, change: &AccountChange) -> Result<AccountView, ClientError> {
        self.call(Method::PATCH, &format!("/v1/accounts/{path}"), Some(change)).await
    }

    pub async fn create_account(&self, decl: &AccountDecl) -> Result<AccountView, ClientError> {
        self.call(Method::POST, "/v1/accounts", Some(decl)).await
    }

    pub async fn account_tree(&self) -> Result<AccountTreeImport, ClientError> {
        self.get("/v1/account-tree").await
    }

    pub async fn import_accounts(&self, req: &AccountTreeImport) -> Result<AccountEdits, ClientError> {
        self.call(Method::PUT, "/v1/account-tree", Some(req)).await
    }

    /// A budget period's statement; `query` is e.g. `[("period", "previous")]`.
    pub async fn budget_report(
        &self,
        query: &[(&str, String)],
    ) -> Result<allot_core::statement::Statement, ClientError> {
        self.get(&with_query("/v1/budget-report", query)).await
    }

    /// Nodes; `query` is e.g. `[("cluster", "c1")]`.
    pub async fn nodes(&self, query: &[(&str, String)]) -> Result<Vec<NodeView>, ClientError> {
        self.get(&with_query("/v1/nodes", query)).await
    }

    pub async fn node_action(&self, name: &str, action: &str) -> Result<NodeView, ClientError> {
        self.call::<(), _>(Method::POST, &format!("/v1/nodes/{}/{action}", encode(name)), None).await
    }

    pub async fn create_token(&self, req: &TokenRequest) -> Result<TokenCreated, ClientError> {
        self.call(Method::POST, "/v1/tokens", Some(req)).await
    }
}

/// `path` with `query` encoded after it.
fn with_query(path: &str, query: &[(&str, String)]) -> String {
    let q: Vec<String> = query.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
    if q.is_empty() { path.to_string() } else { format!("{path}?{}", q.join("&")) }
}

/// Percent-encodes a query or path value.
fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' | b',' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Reads one request (head and body) from `c`; returns its head.
    async fn read_request(c: &mut tokio::net::TcpStream) -> String {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = c.read(&mut chunk).await.expect("read");
            assert!(n > 0, "the client closed early");
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len = head
                    .lines()
                    .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(0);
                if body.len() >= len {
                    return head.to_string();
                }
            }
        }
    }

    fn key_of(head: &str) -> Option<String> {
        head.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("idempotency-key:").map(|v| v.trim().to_string()))
    }

    /// A lost answer, then "unavailable", then the workload: three tries
    /// with one key, one workload.
    #[tokio::test]
    async fn a_submission_whose_answer_is_lost_is_retried_with_the_same_key() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let mut keys = Vec::new();
            // 1: read the request, then close without an answer.
            let (mut c, _) = listener.accept().await.expect("accept");
            keys.push(key_of(&read_request(&mut c).await));
            drop(c);
            // 2: 503.
            let (mut c, _) = listener.accept().await.expect("accept");
            keys.push(key_of(&read_request(&mut c).await));
            let body = r#"{"error":"the store is unavailable","field":null}"#;
            let answer = format!(
                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            c.write_all(answer.as_bytes()).await.expect("write");
            drop(c);
            // 3: the workload.
            let (mut c, _) = listener.accept().await.expect("accept");
            keys.push(key_of(&read_request(&mut c).await));
            let body = r#"{"id":"7","name":null,"account":"org/a","user":"u","class":"batch","gpus":1,"nodes":0,
                "gpu_type":null,"command":["true"],"env":{},"expected_duration_s":60,"checkpoint_interval_s":0,
                "retries":0,"failures":0,"state":"pending","reason":null,"submit_t":1,"end_t":null,
                "cancel_requested":false}"#;
            let answer = format!(
                "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
            c.write_all(answer.as_bytes()).await.expect("write");
            keys
        });
        let client = Client::new(&format!("http://{addr}"), Some("t".into()));
        let req: SubmitRequest =
            serde_json::from_value(serde_json::json!({"account": "org/a", "gpus": 1, "command": ["true"]})).unwrap();
        let w = client.submit(&req).await.expect("submitted in the end");
        assert_eq!(w.id, "7");
        let keys = server.await.expect("server");
        assert_eq!(keys.len(), 3);
        assert!(keys[0].as_ref().is_some_and(|k| k.len() == 32), "a fresh key on the first try: {keys:?}");
        assert!(keys.iter().all(|k| k == &keys[0]), "every try carries the same key: {keys:?}");
    }

    #[tokio::test]
    async fn a_server_that_is_not_there_is_reported_at_once() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let client = Client::new(&format!("http://127.0.0.1:{port}"), None);
        let req: SubmitRequest =
            serde_json::from_value(serde_json::json!({"account": "org/a", "gpus": 1, "command": ["true"]})).unwrap();
        let e = client.submit(&req).await.unwrap_err();
        assert!(matches!(e, ClientError::Transport { .. }), "{e}");
        assert!(!e.is_transient(), "nothing was sent: reported, not retried");
    }
}
