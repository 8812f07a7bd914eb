//! The HTTP client behind `allot submit`, `queue`, `show`, `cancel`,
//! `accounts`, `budget`, `share`, `nodes`, `node`, `token` and `audit`, and
//! the plain-text rendering of their answers ([`render`]), escaped for a
//! terminal ([`terminal`]).
//!
//! The server URL and token come from the command line, then the
//! environment (`ALLOT_SERVER`, `ALLOT_TOKEN`), then the client config file
//! (`$ALLOT_CLIENT_CONFIG`, default `~/.config/allot/client.toml`, keys
//! `server` and `token`), then the default `http://127.0.0.1:8080`
//! ([`Setup`]); errors name which was used and how to set another
//! ([`ClientError`]).
//!
//! A submission carries a fresh `Idempotency-Key` and is retried with the
//! same key when its answer is lost (the connection breaks or times out
//! after the request was sent) or
//! the server is briefly unavailable (503, or 409 while the first try still
//! commits): a retry returns the workload the first try created, never a
//! second one.

pub mod columns;
mod config;
mod error;
pub mod render;
pub mod session;
pub mod terminal;

use reqwest::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::views::{
    AccountChange, AccountDecl, AccountEdits, AccountTreeImport, AccountView, AuditView, ErrorBody, LoginCreated,
    LoginInfo, MungeLogin, NodeView, SubmitRequest, TokenCreated, TokenRequest, TokenView, WorkloadDetail,
    WorkloadView,
};

pub use config::{ClientConfig, DEFAULT_SERVER, Origin, Setup};
pub use error::ClientError;
pub use reqwest::StatusCode;

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

/// A connection to one server.
#[derive(Clone, Debug)]
pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
    /// Where the server and token came from, for the errors.
    setup: Setup,
}

/// How long one request may take.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// How many times a request refused with 429 (API-1) is sent again.
const RETRIES_429: u32 = 5;
/// The longest wait before sending a refused request again.
const MAX_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// The wait a 429 asks for (`Retry-After` in seconds; 1 s when absent or
/// unreadable), at most [`MAX_RETRY_AFTER`].
fn retry_after(headers: &reqwest::header::HeaderMap) -> std::time::Duration {
    let secs = headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(1);
    std::time::Duration::from_secs(secs).min(MAX_RETRY_AFTER)
}

impl Client {
    /// A client of `server` (a URL with its scheme) with `token`.
    pub fn new(server: &str, token: Option<String>) -> Client {
        let setup = Setup::given(token.is_some());
        Client::with_setup(server, token, setup)
    }

    fn with_setup(server: &str, token: Option<String>, setup: Setup) -> Client {
        let http = reqwest::Client::builder().timeout(TIMEOUT).build().expect("tls backend");
        Client { base: server.trim_end_matches('/').to_string(), token, http, setup }
    }

    /// The server from `server` (`--server`), else the environment, else
    /// the config file, else the default; the token from the environment,
    /// else the config file ([`Setup::resolve`]).
    pub fn from_env(server: Option<&str>) -> Result<Client, ClientError> {
        let saved = |url: &str| Ok(session::load(url)?.map(|(s, p)| (s.token, p)));
        let (url, token, setup) = Setup::resolve(server, Some(&saved))?;
        Ok(Client::with_setup(&url, token, setup))
    }

    /// As [`Client::from_env`], sending no token (to sign in).
    pub fn anonymous(server: Option<&str>) -> Result<Client, ClientError> {
        let (url, _, setup) = Setup::resolve(server, None)?;
        Ok(Client::with_setup(&url, None, setup))
    }

    /// This client with `token` instead of its own.
    pub fn with_token(&self, token: String) -> Client {
        Client { token: Some(token), setup: Setup { token: Origin::Flag, ..self.setup.clone() }, ..self.clone() }
    }

    /// The server's URL.
    pub fn base(&self) -> &str {
        &self.base
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
        let (bytes, _) = self.send(req).await?;
        let text = if bytes.is_empty() { &b"null"[..] } else { &bytes[..] };
        serde_json::from_slice(text).map_err(|e| {
            let (base, origin) = (&self.base, &self.setup.server);
            ClientError::Config(format!(
                "{base} ({origin}) answered {url} with something that is not Allot's API ({e}): is it an allot server?"
            ))
        })
    }

    /// Sends `req`; the body and headers of a success, the API's error
    /// (with what to do about a token) otherwise.
    async fn send(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<(axum::body::Bytes, reqwest::header::HeaderMap), ClientError> {
        let transport = |cause: reqwest::Error| ClientError::Transport {
            url: self.base.clone(),
            origin: self.setup.server.clone(),
            why: error::why(&cause, TIMEOUT),
            hint: self.setup.unreachable_hint(),
            cause,
        };
        let mut req = req;
        let mut refused = 0;
        let resp = loop {
            let again = req.try_clone();
            let resp = req.send().await.map_err(transport)?;
            // API-1: over this principal's share, the server says when to
            // come back; a bounded number of times, each wait bounded.
            match again {
                Some(next) if resp.status() == StatusCode::TOO_MANY_REQUESTS && refused < RETRIES_429 => {
                    refused += 1;
                    tokio::time::sleep(retry_after(resp.headers())).await;
                    req = next;
                }
                _ => break resp,
            }
        };
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.map_err(transport)?;
        if !status.is_success() {
            let (mut error, field) = match serde_json::from_slice::<ErrorBody>(&bytes) {
                Ok(e) => (e.error, e.field),
                Err(_) => (String::from_utf8_lossy(&bytes).into_owned(), None),
            };
            let mut hint = None;
            if status == StatusCode::UNAUTHORIZED {
                match self.token {
                    None => error = self.setup.missing_token(),
                    Some(_) => hint = Some(self.setup.rejected_token()),
                }
            }
            return Err(ClientError::Api { status, error, field, hint });
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
        let (bytes, headers) = self.send(req).await?;
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

    pub async fn account(&self, path: &str) -> Result<AccountView, ClientError> {
        self.get(&format!("/v1/accounts/{path}")).await
    }

    /// `new_users`: the users the change names may be new here (FS-2,
    /// BUD-6: otherwise each must be known to the server).
    pub async fn change_account(
        &self,
        path: &str,
        change: &AccountChange,
        new_users: bool,
    ) -> Result<AccountView, ClientError> {
        self.call(Method::PATCH, &format!("/v1/accounts/{path}{}", new_users_query(new_users)), Some(change)).await
    }

    pub async fn create_account(&self, decl: &AccountDecl, new_users: bool) -> Result<AccountView, ClientError> {
        self.call(Method::POST, &format!("/v1/accounts{}", new_users_query(new_users)), Some(decl)).await
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

    /// Drains, undrains, fails or repairs a node, saying why (`reason`).
    pub async fn node_action(&self, name: &str, action: &str, reason: Option<&str>) -> Result<NodeView, ClientError> {
        let why = reason.map(|r| format!("?reason={}", encode(r))).unwrap_or_default();
        self.call::<(), _>(Method::POST, &format!("/v1/nodes/{}/{action}{why}", encode(name)), None).await
    }

    /// CFG-1: the server reads its config file again.
    pub async fn reload(&self) -> Result<crate::views::ReloadView, ClientError> {
        self.call::<(), _>(Method::POST, "/v1/admin/reload", None).await
    }

    pub async fn create_token(&self, req: &TokenRequest) -> Result<TokenCreated, ClientError> {
        self.call(Method::POST, "/v1/tokens", Some(req)).await
    }

    /// Tokens, without their secrets.
    pub async fn tokens(&self) -> Result<Vec<TokenView>, ClientError> {
        self.get("/v1/tokens").await
    }

    pub async fn revoke_token(&self, name: &str) -> Result<(), ClientError> {
        self.call::<(), _>(Method::DELETE, &format!("/v1/tokens/{}", encode(name)), None).await
    }

    /// How people sign in to this server (`GET /v1/login`).
    pub async fn login_info(&self) -> Result<LoginInfo, ClientError> {
        self.get("/v1/login").await
    }

    /// Signs in with a munge credential (`POST /v1/login/munge`).
    pub async fn login_munge(&self, credential: &str) -> Result<LoginCreated, ClientError> {
        self.call(Method::POST, "/v1/login/munge", Some(&MungeLogin { credential: credential.to_string() })).await
    }

    /// People's sessions: the caller's own (admins: everyone's).
    pub async fn sessions(&self) -> Result<Vec<crate::store::LoginRow>, ClientError> {
        self.get("/v1/sessions").await
    }

    /// Ends a session (`DELETE /v1/sessions/{id}`).
    pub async fn end_session(&self, id: &str) -> Result<(), ClientError> {
        self.call::<(), _>(Method::DELETE, &format!("/v1/sessions/{}", encode(id)), None).await
    }

    /// The audit log, newest first; `query` is e.g. `[("limit", "20")]`.
    pub async fn audit(&self, query: &[(&str, String)]) -> Result<Vec<AuditView>, ClientError> {
        self.get(&with_query("/v1/audit", query)).await
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

/// The query that says a request's users may be new here.
fn new_users_query(new_users: bool) -> &'static str {
    if new_users { "?new_users=true" } else { "" }
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

    /// API-1: a 429 is sent again after its `Retry-After`, a bounded
    /// number of times; then the refusal is the answer.
    #[tokio::test]
    async fn too_many_requests_is_retried_after_the_wait_it_asks_for() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let refusals = 2;
        let server = tokio::spawn(async move {
            let mut heads = Vec::new();
            loop {
                let (mut c, _) = listener.accept().await.expect("accept");
                heads.push(read_request(&mut c).await);
                let answer = if heads.len() <= refusals || heads.len() > refusals + 1 {
                    let body = r#"{"error":"too many requests from alice","field":null}"#;
                    format!(
                        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: 0\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                } else {
                    let body = "[]";
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                         connection: close\r\n\r\n{body}",
                        body.len()
                    )
                };
                c.write_all(answer.as_bytes()).await.expect("write");
                drop(c);
                if heads.len() == refusals + 1 + 1 + RETRIES_429 as usize {
                    return heads;
                }
            }
        });
        let client = Client::new(&format!("http://{addr}"), Some("t".into()));
        let nodes = client.nodes(&[]).await.expect("answered after two refusals");
        assert!(nodes.is_empty());
        // Refused every time: the last refusal is the answer.
        let e = client.nodes(&[]).await.unwrap_err();
        assert!(matches!(&e, ClientError::Api { status, .. } if *status == StatusCode::TOO_MANY_REQUESTS), "{e}");
        let heads = server.await.expect("server");
        assert_eq!(heads.len(), refusals + 1 + 1 + RETRIES_429 as usize, "3 tries, then 1 + {RETRIES_429}");
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
