//! The HTTP client behind `allot submit`, `queue`, `show`, `cancel`,
//! `accounts`, `budget`, `share`, `nodes` and `node`, and the plain-text
//! rendering of their answers ([`render`]).
//!
//! The server URL and token come from the command line, then the
//! environment (`ALLOT_SERVER`, `ALLOT_TOKEN`), then the client config file
//! (`$ALLOT_CLIENT_CONFIG`, default `~/.config/allot/client.toml`, keys
//! `server` and `token`), then the default `http://127.0.0.1:8080`.

pub mod render;

use std::path::PathBuf;

use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::views::{
    AccountChange, AccountView, ErrorBody, NodeView, SubmitRequest, TokenCreated, TokenRequest, WorkloadDetail,
    WorkloadView,
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
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(method, &url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let transport = |source| ClientError::Transport { url: url.clone(), source };
        let resp = req.send().await.map_err(transport)?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(transport)?;
        if !status.is_success() {
            let (error, field) = match serde_json::from_slice::<ErrorBody>(&bytes) {
                Ok(e) => (e.error, e.field),
                Err(_) => (String::from_utf8_lossy(&bytes).into_owned(), None),
            };
            return Err(ClientError::Api { status, error, field });
        }
        let text = if bytes.is_empty() { &b"null"[..] } else { &bytes[..] };
        serde_json::from_slice(text).map_err(|e| ClientError::Config(format!("unexpected answer from {url}: {e}")))
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.call::<(), T>(Method::GET, path, None).await
    }

    pub async fn submit(&self, req: &SubmitRequest) -> Result<WorkloadView, ClientError> {
        self.call(Method::POST, "/v1/workloads", Some(req)).await
    }

    /// Workloads; `query` is e.g. `[("state", "pending,running")]`.
    pub async fn workloads(&self, query: &[(&str, String)]) -> Result<Vec<WorkloadView>, ClientError> {
        let q: Vec<String> = query.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
        let path = if q.is_empty() { "/v1/workloads".to_string() } else { format!("/v1/workloads?{}", q.join("&")) };
        self.get(&path).await
    }

    pub async fn workload(&self, id: &str) -> Result<WorkloadDetail, ClientError> {
        self.get(&format!("/v1/workloads/{}", encode(id))).await
    }

    pub async fn cancel(&self, id: &str) -> Result<WorkloadView, ClientError> {
        self.call::<(), _>(Method::POST, &format!("/v1/workloads/{}/cancel", encode(id)), None).await
    }

    pub async fn accounts(&self) -> Result<Vec<AccountView>, ClientError> {
        self.get("/v1/accounts").await
    }

    pub async fn change_account(&self, path: &str, change: &AccountChange) -> Result<AccountView, ClientError> {
        self.call(Method::PATCH, &format!("/v1/accounts/{path}"), Some(change)).await
    }

    pub async fn nodes(&self) -> Result<Vec<NodeView>, ClientError> {
        self.get("/v1/nodes").await
    }

    pub async fn node_action(&self, name: &str, action: &str) -> Result<NodeView, ClientError> {
        self.call::<(), _>(Method::POST, &format!("/v1/nodes/{}/{action}", encode(name)), None).await
    }

    pub async fn create_token(&self, req: &TokenRequest) -> Result<TokenCreated, ClientError> {
        self.call(Method::POST, "/v1/tokens", Some(req)).await
    }
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
