//! Single sign-on with the organisation's OpenID Connect provider
//! (`[identity.oidc]`; docs/security.md, "Single sign-on").
//!
//! The dashboard is the relying party of an authorization code flow with
//! PKCE ([`Sso::begin`], [`Sso::finish`]):
//! * **Discovery** of the provider (`<issuer>/.well-known/openid-configuration`
//!   and its keys) is tried at start and, while it fails, again at each
//!   sign-in; it is renewed after [`REDISCOVER_AFTER`] (the provider's
//!   keys rotate).
//! * **Pending sign-ins.** Each start makes a PKCE verifier, a CSRF state
//!   and a nonce, kept here (never in the browser) under a random id the
//!   browser holds in a cookie: at most [`MAX_PENDING`] at once, each for
//!   [`PENDING_TTL`], and taken once.
//! * **The person.** The ID token is verified (signature, issuer,
//!   audience, expiry, nonce); its `user_claim` names the Unix user and its
//!   `groups_claim` the groups `[[grants]]` are matched against.
//!
//! The HTTP side (cookies, pages, the sign-in limit and audit) is the
//! dashboard's: `crate::dashboard::sso`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use allot_trace::config::{OIDC_SECRET_ENV, OidcConfig};
use openidconnect::core::{
    CoreAuthDisplay, CoreAuthPrompt, CoreAuthenticationFlow, CoreErrorResponseType, CoreGenderClaim, CoreJsonWebKey,
    CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm, CoreProviderMetadata, CoreRevocableToken,
    CoreRevocationErrorResponse, CoreTokenIntrospectionResponse, CoreTokenType,
};
use openidconnect::{
    AdditionalClaims, AuthorizationCode, Client, ClientId, ClientSecret, CsrfToken, EmptyExtraTokenFields,
    EndpointMaybeSet, EndpointNotSet, EndpointSet, IdTokenClaims, IdTokenFields, IssuerUrl, Nonce, PkceCodeChallenge,
    PkceCodeVerifier, RedirectUrl, Scope, StandardErrorResponse, StandardTokenResponse, TokenResponse,
};
use serde::{Deserialize, Serialize};

/// Sign-ins under way at most (started, not yet come back).
pub const MAX_PENDING: usize = 10_000;
/// How long a started sign-in may take at the provider.
pub const PENDING_TTL: Duration = Duration::from_secs(600);
/// How long a discovery is used before it is made again.
pub const REDISCOVER_AFTER: Duration = Duration::from_secs(3600);
/// Group names one ID token may give at most.
pub const MAX_GROUPS: usize = 1000;
/// How long one request to the provider may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// The ID token's claims beyond the standard ones (the groups claim, and a
/// user claim that is not a standard one).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Claims {
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

impl AdditionalClaims for Claims {}

type Fields = IdTokenFields<
    Claims,
    EmptyExtraTokenFields,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;
type Tokens = StandardTokenResponse<Fields, CoreTokenType>;
type OidcClient = Client<
    Claims,
    CoreAuthDisplay,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJsonWebKey,
    CoreAuthPrompt,
    StandardErrorResponse<CoreErrorResponseType>,
    Tokens,
    CoreTokenIntrospectionResponse,
    CoreRevocableToken,
    CoreRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// Why a single sign-on could not be had; read after "failed to sign in:".
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SsoError {
    #[error("the identity provider at {issuer} cannot be reached: {why}")]
    Unreachable { issuer: String, why: String },
    #[error("too many sign-ins are under way ({MAX_PENDING}): try again in a few minutes")]
    Busy,
    #[error("this sign-in was not started in this browser, was used already, or took longer than 10 minutes")]
    UnknownState,
    #[error("the identity provider refused: {0}")]
    Refused(String),
    #[error("the identity provider did not take the code: {0}")]
    Exchange(String),
    #[error("the identity provider sent no ID token")]
    NoIdToken,
    #[error("the ID token is not valid: {0}")]
    IdToken(String),
    #[error("the ID token has no {0:?} claim (the Unix user name, [identity.oidc] user_claim)")]
    NoUser(String),
    #[error("{0:?} (the ID token's user claim) is not a valid Unix login name")]
    BadUser(String),
    #[error("the ID token's {0:?} claim is not a list of group names ([identity.oidc] groups_claim)")]
    BadGroups(String),
}

/// Whom the provider signed in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Person {
    /// The Unix user name (`user_claim`).
    pub name: String,
    /// The group names (`groups_claim`), as the ID token gave them.
    pub groups: Vec<String>,
}

/// A sign-in started and not yet back.
struct Pending {
    state: String,
    verifier: String,
    nonce: String,
    next: String,
    at: Instant,
}

/// The relying party: the provider's discovery, the pending sign-ins.
pub struct Sso {
    cfg: OidcConfig,
    secret: String,
    http: reqwest::Client,
    client: tokio::sync::Mutex<Option<(OidcClient, Instant)>>,
    pending: Mutex<HashMap<String, Pending>>,
}

impl Sso {
    /// The relying party of `cfg`, its client secret read from
    /// `client_secret_file` or the environment ([`OIDC_SECRET_ENV`]).
    /// Nothing is asked of the provider yet ([`Sso::discover`]).
    pub fn new(cfg: &OidcConfig) -> Result<Sso, String> {
        let secret = match &cfg.client_secret_file {
            Some(f) => std::fs::read_to_string(f)
                .map_err(|e| format!("cannot read [identity.oidc] client_secret_file {f}: {e}"))?
                .trim()
                .to_string(),
            None => std::env::var(OIDC_SECRET_ENV).map_err(|_| {
                format!(
                    "[identity.oidc] has no client_secret_file and {OIDC_SECRET_ENV} is not set: give the client \
                     secret the provider registered for Allot one way or the other"
                )
            })?,
        };
        if secret.is_empty() {
            return Err("the [identity.oidc] client secret is empty".to_string());
        }
        let http = reqwest::Client::builder()
            // The provider's redirects are never followed (SSRF).
            .redirect(reqwest::redirect::Policy::none())
            .timeout(HTTP_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
        Ok(Sso {
            cfg: cfg.clone(),
            secret,
            http,
            client: tokio::sync::Mutex::new(None),
            pending: Mutex::new(HashMap::new()),
        })
    }

    pub fn issuer(&self) -> &str {
        &self.cfg.issuer
    }

    /// Discovers the provider unless a discovery younger than
    /// [`REDISCOVER_AFTER`] is at hand; a failed renewal keeps the old one.
    pub async fn discover(&self) -> Result<OidcClient, SsoError> {
        let mut held = self.client.lock().await;
        if let Some((c, at)) = held.as_ref()
            && at.elapsed() < REDISCOVER_AFTER
        {
            return Ok(c.clone());
        }
        let unreachable = |why: String| SsoError::Unreachable { issuer: self.cfg.issuer.clone(), why };
        let found = async {
            let issuer = IssuerUrl::new(self.cfg.issuer.clone()).map_err(|e| unreachable(e.to_string()))?;
            let meta = CoreProviderMetadata::discover_async(issuer, &self.http)
                .await
                .map_err(|e| unreachable(error_chain(&e)))?;
            let redirect = RedirectUrl::new(self.cfg.redirect_url.clone()).map_err(|e| unreachable(e.to_string()))?;
            Ok(OidcClient::from_provider_metadata(
                meta,
                ClientId::new(self.cfg.client_id.clone()),
                Some(ClientSecret::new(self.secret.clone())),
            )
            .set_redirect_uri(redirect))
        }
        .await;
        match (found, held.as_ref()) {
            (Ok(c), _) => {
                tracing::info!(issuer = %self.cfg.issuer, "single sign-on: discovered the identity provider");
                *held = Some((c.clone(), Instant::now()));
                Ok(c)
            }
            (Err(e), Some((old, _))) => {
                tracing::warn!(error = %e, "single sign-on: renewing the discovery failed; the last one is kept");
                Ok(old.clone())
            }
            (Err(e), None) => {
                tracing::warn!(error = %e, "single sign-on: discovery failed; tried again at the next sign-in");
                Err(e)
            }
        }
    }

    /// Starts a sign-in that is to end at `next`: returns the id the
    /// browser keeps (its cookie) and the provider's URL to send it to.
    pub async fn begin(&self, next: String) -> Result<(String, String), SsoError> {
        let client = self.discover().await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut req = client
            .authorize_url(CoreAuthenticationFlow::AuthorizationCode, CsrfToken::new_random, Nonce::new_random)
            .add_scope(Scope::new("profile".to_string()))
            .set_pkce_challenge(challenge);
        for s in &self.cfg.scopes {
            req = req.add_scope(Scope::new(s.clone()));
        }
        let (url, state, nonce) = req.url();
        let id = crate::secret::new_token();
        let p = Pending {
            state: state.secret().clone(),
            verifier: verifier.secret().clone(),
            nonce: nonce.secret().clone(),
            next,
            at: Instant::now(),
        };
        self.hold(crate::secret::hash_token(&id), p)?;
        Ok((id, url.to_string()))
    }

    /// Keeps `p` under `key` unless [`MAX_PENDING`] live ones are kept.
    fn hold(&self, key: String, p: Pending) -> Result<(), SsoError> {
        let mut pending = self.pending.lock().expect("pending sign-ins");
        if pending.len() >= MAX_PENDING {
            pending.retain(|_, p| p.at.elapsed() < PENDING_TTL);
        }
        if pending.len() >= MAX_PENDING {
            return Err(SsoError::Busy);
        }
        pending.insert(key, p);
        Ok(())
    }

    /// Takes the pending sign-in of browser id `id` if `state` is its own
    /// and it has not expired; returns it and where it is to end.
    fn take(&self, id: &str, state: &str) -> Result<Pending, SsoError> {
        let p = self.pending.lock().expect("pending sign-ins").remove(&crate::secret::hash_token(id));
        let p = p.ok_or(SsoError::UnknownState)?;
        if p.at.elapsed() >= PENDING_TTL || !crate::secret::same(p.state.as_bytes(), state.as_bytes()) {
            return Err(SsoError::UnknownState);
        }
        Ok(p)
    }

    /// Forgets the pending sign-in of browser id `id` (the provider
    /// refused it); returns where it was to end.
    pub fn abandon(&self, id: &str) -> Option<String> {
        self.pending.lock().expect("pending sign-ins").remove(&crate::secret::hash_token(id)).map(|p| p.next)
    }

    /// Ends the sign-in of browser id `id`: checks `state`, exchanges
    /// `code` (with the PKCE verifier) and verifies the ID token. Returns
    /// the person and where the sign-in is to end.
    pub async fn finish(&self, id: &str, state: &str, code: &str) -> Result<(Person, String), SsoError> {
        let p = self.take(id, state)?;
        let client = self.discover().await?;
        let tokens = client
            .exchange_code(AuthorizationCode::new(code.to_string()))
            .map_err(|e| SsoError::Exchange(e.to_string()))?
            .set_pkce_verifier(PkceCodeVerifier::new(p.verifier))
            .request_async(&self.http)
            .await
            .map_err(|e| SsoError::Exchange(error_chain(&e)))?;
        let id_token = tokens.id_token().ok_or(SsoError::NoIdToken)?;
        let claims = id_token
            .claims(&client.id_token_verifier(), &Nonce::new(p.nonce))
            .map_err(|e| SsoError::IdToken(e.to_string()))?;
        Ok((person(claims, &self.cfg.user_claim, &self.cfg.groups_claim)?, p.next))
    }
}

/// The person of verified `claims`: the Unix user name of `user_claim`, the
/// group names of `groups_claim` (none when absent).
fn person(
    claims: &IdTokenClaims<Claims, CoreGenderClaim>,
    user_claim: &str,
    groups_claim: &str,
) -> Result<Person, SsoError> {
    let other = &claims.additional_claims().other;
    let name = match user_claim {
        "sub" => Some(claims.subject().to_string()),
        "preferred_username" => claims.preferred_username().map(|u| u.to_string()),
        "email" => claims.email().map(|e| e.to_string()),
        "nickname" => claims.nickname().and_then(|n| n.get(None)).map(|n| n.to_string()),
        "name" => claims.name().and_then(|n| n.get(None)).map(|n| n.to_string()),
        other_claim => other.get(other_claim).and_then(|v| v.as_str()).map(str::to_string),
    };
    let name = name.ok_or_else(|| SsoError::NoUser(user_claim.to_string()))?;
    Ok(Person { name: unix_login(&name)?, groups: groups(other.get(groups_claim), groups_claim)? })
}

/// `name` if it is a valid Unix login name.
fn unix_login(name: &str) -> Result<String, SsoError> {
    if allot_trace::config::unix_name(name) && !name.ends_with('$') && name.len() <= 32 {
        Ok(name.to_string())
    } else {
        Err(SsoError::BadUser(name.chars().take(80).collect()))
    }
}

/// The group names of a groups claim: a list of strings (or one string);
/// none when it is absent.
fn groups(v: Option<&serde_json::Value>, claim: &str) -> Result<Vec<String>, SsoError> {
    let bad = || SsoError::BadGroups(claim.to_string());
    let names: Vec<String> = match v {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(serde_json::Value::String(s)) => vec![s.clone()],
        Some(serde_json::Value::Array(a)) => {
            a.iter().map(|g| g.as_str().map(str::to_string).ok_or_else(bad)).collect::<Result<_, _>>()?
        }
        Some(_) => return Err(bad()),
    };
    if names.len() > MAX_GROUPS || names.iter().any(|g| g.is_empty() || g.len() > 256) {
        return Err(bad());
    }
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for g in names {
        if !out.contains(&g) {
            out.push(g);
        }
    }
    Ok(out)
}

/// An error and its sources, one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sso() -> Sso {
        let cfg = OidcConfig {
            issuer: "http://127.0.0.1:1".into(),
            client_id: "allot".into(),
            client_secret_file: None,
            redirect_url: "http://127.0.0.1:2/login/oidc/callback".into(),
            user_claim: "preferred_username".into(),
            groups_claim: "groups".into(),
            scopes: vec![],
        };
        Sso {
            cfg,
            secret: "s".into(),
            http: reqwest::Client::new(),
            client: tokio::sync::Mutex::new(None),
            pending: Mutex::new(HashMap::new()),
        }
    }

    fn pending(state: &str, at: Instant) -> Pending {
        Pending { state: state.into(), verifier: "v".into(), nonce: "n".into(), next: "/x".into(), at }
    }

    #[test]
    fn a_pending_sign_in_is_taken_once_with_its_own_state_in_time() {
        let s = sso();
        let key = |id: &str| crate::secret::hash_token(id);
        s.hold(key("a"), pending("st", Instant::now())).unwrap();
        assert_eq!(s.take("a", "other").err(), Some(SsoError::UnknownState), "another state");
        s.hold(key("a"), pending("st", Instant::now())).unwrap();
        assert_eq!(s.take("a", "st").unwrap().next, "/x");
        assert_eq!(s.take("a", "st").err(), Some(SsoError::UnknownState), "taken once");
        assert_eq!(s.take("b", "st").err(), Some(SsoError::UnknownState), "another browser");
        if let Some(old) = Instant::now().checked_sub(PENDING_TTL) {
            s.hold(key("c"), pending("st", old)).unwrap();
            assert_eq!(s.take("c", "st").err(), Some(SsoError::UnknownState), "expired");
        }
    }

    #[test]
    fn pending_sign_ins_are_bounded() {
        let s = sso();
        for i in 0..MAX_PENDING {
            s.hold(format!("k{i}"), pending("st", Instant::now())).unwrap();
        }
        assert_eq!(s.hold("one more".into(), pending("st", Instant::now())).err(), Some(SsoError::Busy));
        if let Some(old) = Instant::now().checked_sub(PENDING_TTL) {
            s.pending.lock().unwrap().values_mut().take(10).for_each(|p| p.at = old);
            assert!(s.hold("one more".into(), pending("st", Instant::now())).is_ok(), "the expired make room");
        }
    }

    #[test]
    fn groups_claims_are_lists_of_names() {
        let cases = [
            ("absent", None, Ok(vec![])),
            ("list", Some(json!(["ml", "ops", "ml"])), Ok(vec!["ml".to_string(), "ops".to_string()])),
            ("one name", Some(json!("ml")), Ok(vec!["ml".to_string()])),
            ("numbers", Some(json!([1, 2])), Err(SsoError::BadGroups("groups".into()))),
            ("an object", Some(json!({"a": 1})), Err(SsoError::BadGroups("groups".into()))),
            ("an empty name", Some(json!([""])), Err(SsoError::BadGroups("groups".into()))),
        ];
        for (name, v, want) in cases {
            assert_eq!(groups(v.as_ref(), "groups"), want, "case {name}");
        }
    }

    #[test]
    fn only_unix_logins_are_people() {
        for ok in ["ada", "a.b-c_d", "_svc", "u1000"] {
            assert_eq!(unix_login(ok), Ok(ok.to_string()), "{ok}");
        }
        for bad in ["", "ada@example.org", "../root", "a b", "x$", "-rf", &"a".repeat(33)] {
            assert!(matches!(unix_login(bad), Err(SsoError::BadUser(_))), "{bad:?}");
        }
    }
}
