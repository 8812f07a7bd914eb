//! Where the client's server URL and token come from, and what an error
//! says about them: which one was used, where it came from, and how to set
//! another (docs/cli.md, *Errors*).
//!
//! The server URL: `--server`, else `ALLOT_SERVER`, else `server` in the
//! client config file, else [`DEFAULT_SERVER`]; a bare `HOST:PORT` gets
//! `http://` (as curl does). The token: `ALLOT_TOKEN`, else `token` in the
//! client config file (`$ALLOT_CLIENT_CONFIG`, default
//! `~/.config/allot/client.toml`).

use std::fmt;
use std::path::PathBuf;

use super::ClientError;

pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

/// Finds the saved session of a server URL: its token and the file it is in.
pub type SavedToken<'a> = &'a dyn Fn(&str) -> Result<Option<(String, PathBuf)>, ClientError>;

/// The client config file.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    pub server: Option<String>,
    pub token: Option<String>,
}

impl ClientConfig {
    /// `$ALLOT_CLIENT_CONFIG`, else `~/.config/allot/client.toml`; none
    /// without either variable.
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

/// Where a value of the client's came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The command line (`--server`), or the caller of [`super::Client::new`].
    Flag,
    /// The environment (`ALLOT_SERVER`, `ALLOT_TOKEN`).
    Env,
    /// The client config file at this path.
    File(PathBuf),
    /// The session `allot login` saved in this file (a token only).
    Session(PathBuf),
    /// Not given anywhere: the default server, or no token.
    Default,
}

/// Where the client's server and token came from, and the config file it
/// consulted: what its errors name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setup {
    pub server: Origin,
    pub token: Origin,
    /// The client config file consulted (whether or not it exists).
    pub file: Option<PathBuf>,
}

impl Setup {
    /// Values given by the caller, no file consulted.
    pub fn given(token: bool) -> Setup {
        Setup { server: Origin::Flag, token: if token { Origin::Flag } else { Origin::Default }, file: None }
    }

    /// The server from `server` (the command line), the environment, the
    /// client config file and the default, in that order; the token from
    /// `ALLOT_TOKEN`, the session `saved(url)` finds for that server (the
    /// one `allot login` saved, with its file: [`super::session`]), the
    /// client config file, in that order. Without `saved`, no token (to
    /// sign in).
    pub fn resolve(
        server: Option<&str>,
        saved: Option<SavedToken<'_>>,
    ) -> Result<(String, Option<String>, Setup), ClientError> {
        let file = ClientConfig::load()?;
        let path = ClientConfig::path();
        let in_file = || Origin::File(path.clone().unwrap_or_default());
        let (url, server) = match (server, std::env::var("ALLOT_SERVER").ok().filter(|s| !s.is_empty()), file.server) {
            (Some(s), _, _) => (s.to_string(), Origin::Flag),
            (None, Some(s), _) => (s, Origin::Env),
            (None, None, Some(s)) => (s, in_file()),
            (None, None, None) => (DEFAULT_SERVER.to_string(), Origin::Default),
        };
        let url = server_url(&url, &server)?;
        let Some(saved) = saved else {
            return Ok((url, None, Setup { server, token: Origin::Default, file: path }));
        };
        let env = std::env::var("ALLOT_TOKEN").ok().filter(|t| !t.is_empty());
        let session = if env.is_none() { saved(&url)? } else { None };
        let (token, from) = match (env, session, file.token) {
            (Some(t), _, _) => (Some(t), Origin::Env),
            (None, Some((t, p)), _) => (Some(t), Origin::Session(p)),
            (None, None, Some(t)) => (Some(t), in_file()),
            (None, None, None) => (None, Origin::Default),
        };
        Ok((url, token, Setup { server, token: from, file: path }))
    }

    /// The config file as the hints name it.
    fn file_text(&self) -> String {
        match &self.file {
            Some(p) => p.display().to_string(),
            None => "the file ALLOT_CLIENT_CONFIG names".to_string(),
        }
    }

    /// After "cannot reach the server at URL (from …): why; ".
    pub fn unreachable_hint(&self) -> String {
        format!(
            "is `allot serve` running there? Set another server with --server URL, ALLOT_SERVER=URL or \
             server = \"URL\" in {}",
            self.file_text()
        )
    }

    /// The 401 answer when no token was sent.
    pub fn missing_token(&self) -> String {
        format!(
            "no token given: sign in with `allot login`, or set ALLOT_TOKEN, or token = \"…\" in {} (an admin \
             creates one with `allot token create`)",
            self.file_text()
        )
    }

    /// After a 401 answer when a token was sent.
    pub fn rejected_token(&self) -> String {
        let from = match &self.token {
            Origin::Env => "ALLOT_TOKEN".to_string(),
            Origin::File(p) => format!("token in {}", p.display()),
            Origin::Session(p) => {
                return format!(
                    "the session saved in {} was refused (ended or revoked): sign in again with `allot login`",
                    p.display()
                );
            }
            Origin::Flag | Origin::Default => "the token given".to_string(),
        };
        format!("the token came from {from}: set a valid one there; an admin creates one with `allot token create`")
    }
}

/// The server URL of `given` (from `origin`): `http://` added to a bare
/// `HOST:PORT`, no trailing `/`; an error naming the value, where it came
/// from and the form expected otherwise.
pub fn server_url(given: &str, origin: &Origin) -> Result<String, ClientError> {
    let bad = |why: String| {
        let at = match origin {
            Origin::Flag => format!("--server {given:?}"),
            Origin::Env => format!("ALLOT_SERVER={given:?}"),
            Origin::File(p) | Origin::Session(p) => format!("server = {given:?} in {}", p.display()),
            Origin::Default => format!("the default server {given:?}"),
        };
        ClientError::Config(format!("{at}: {why}; give the server as http://HOST:PORT"))
    };
    let url = if given.contains("://") { given.to_string() } else { format!("http://{given}") };
    let parsed = reqwest::Url::parse(&url).map_err(|e| bad(format!("not a URL ({e})")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad(format!("the scheme is {:?}, not http or https", parsed.scheme())));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(bad("a server URL has no query (?…) or fragment (#…)".to_string()));
    }
    Ok(url.trim_end_matches('/').to_string())
}

impl fmt::Display for Origin {
    /// As in "(from --server)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Flag => f.write_str("from --server"),
            Origin::Env => f.write_str("from ALLOT_SERVER"),
            Origin::File(p) | Origin::Session(p) => write!(f, "from {}", p.display()),
            Origin::Default => f.write_str("the default"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls_as_given_completed_or_refused() {
        let file = Origin::File(PathBuf::from("/h/client.toml"));
        let cases: [(&str, &str, &Origin, Result<&str, &str>); 8] = [
            ("http", "http://a:1", &Origin::Flag, Ok("http://a:1")),
            ("https, slash", "https://a/", &Origin::Flag, Ok("https://a")),
            ("bare host:port gets http", "localhost:8080", &Origin::Flag, Ok("http://localhost:8080")),
            ("bare ip", "127.0.0.1:9", &Origin::Env, Ok("http://127.0.0.1:9")),
            ("a base path", "http://a/allot/", &Origin::Flag, Ok("http://a/allot")),
            (
                "other scheme",
                "ftp://a",
                &Origin::Env,
                Err(
                    "ALLOT_SERVER=\"ftp://a\": the scheme is \"ftp\", not http or https; give the server as http://HOST:PORT",
                ),
            ),
            (
                "no host",
                "http://",
                &file,
                Err(
                    "server = \"http://\" in /h/client.toml: not a URL (empty host); give the server as http://HOST:PORT",
                ),
            ),
            (
                "a query",
                "http://a?x=1",
                &Origin::Flag,
                Err(
                    "--server \"http://a?x=1\": a server URL has no query (?…) or fragment (#…); give the server as http://HOST:PORT",
                ),
            ),
        ];
        for (name, given, origin, want) in cases {
            let got = server_url(given, origin).map_err(|e| e.to_string());
            assert_eq!(got.as_deref().map_err(String::as_str), want, "case {name}");
        }
    }

    #[test]
    fn hints_name_the_variable_the_file_and_the_command() {
        let file = Some(PathBuf::from("/h/.config/allot/client.toml"));
        let s = Setup { server: Origin::Default, token: Origin::Default, file: file.clone() };
        assert_eq!(
            s.missing_token(),
            "no token given: sign in with `allot login`, or set ALLOT_TOKEN, or token = \"…\" in \
             /h/.config/allot/client.toml (an admin creates one with `allot token create`)"
        );
        let env = Setup { token: Origin::Env, ..s.clone() };
        assert!(env.rejected_token().starts_with("the token came from ALLOT_TOKEN: "), "{}", env.rejected_token());
        let in_file = Setup { token: Origin::File(file.clone().unwrap()), ..s.clone() };
        assert!(in_file.rejected_token().starts_with("the token came from token in /h/.config/allot/client.toml"));
        assert!(s.unreachable_hint().ends_with("server = \"URL\" in /h/.config/allot/client.toml"));
        let nofile = Setup { file: None, ..s };
        assert!(nofile.missing_token().contains("in the file ALLOT_CLIENT_CONFIG names"), "{}", nofile.missing_token());
    }
}
