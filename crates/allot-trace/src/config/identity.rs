//! `[identity]` and `[[grants]]` (docs/config.md, docs/security.md): who
//! the people of `allot serve` are and what their Unix groups grant them.
//!
//! A person is a Unix user, proven by munge (or a session opened with it);
//! what they may do comes from the grants that name them or one of their
//! groups, as Slurm's associations do: onboarding a researcher is a group
//! membership, not a token handed out by hand.

use serde::Deserialize;
use toml::Spanned;

use super::{Ctx, Secs};
use crate::error::FormatError;

/// The roles a grant may give (the server's `Role` names).
pub const GRANT_ROLES: [&str; 4] = ["admin", "manager", "researcher", "metrics"];

/// `[identity]` as read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIdentity {
    min_uid: Option<Spanned<i64>>,
    session_ttl: Option<Spanned<Secs>>,
    munge: Option<bool>,
    munge_socket: Option<Spanned<String>>,
    oidc: Option<Spanned<RawOidc>>,
}

/// `[identity.oidc]` as read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOidc {
    issuer: Option<Spanned<String>>,
    client_id: Option<Spanned<String>>,
    client_secret_file: Option<Spanned<String>>,
    redirect_url: Option<Spanned<String>>,
    user_claim: Option<Spanned<String>>,
    groups_claim: Option<Spanned<String>>,
    #[serde(default)]
    scopes: Vec<Spanned<String>>,
}

/// One `[[grants]]` entry as read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGrant {
    group: Option<Spanned<String>>,
    user: Option<Spanned<String>>,
    role: Spanned<String>,
    #[serde(default)]
    accounts: Vec<Spanned<String>>,
}

/// Who a grant names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Grantee {
    /// Every member of this Unix group (primary or supplementary).
    Group(String),
    /// This Unix user.
    User(String),
}

/// One `[[grants]]` entry: `role` over `accounts` (a manager's subtrees, a
/// researcher's projects; none for admin and metrics).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub to: Grantee,
    pub role: String,
    pub accounts: Vec<String>,
}

/// `[identity]` and `[[grants]]` of `allot serve`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentityConfig {
    /// Workloads never run as a Unix user whose uid is below this (root is
    /// 0; system accounts are below 1000 on Debian).
    pub min_uid: u32,
    /// How long a session opened by `allot login` lasts, seconds.
    pub session_ttl_s: u64,
    /// Whether people may sign in with a munge credential.
    pub munge: bool,
    /// munged's socket (`None`: munge's default).
    pub munge_socket: Option<String>,
    pub grants: Vec<Grant>,
    /// Single sign-on for the dashboard (`[identity.oidc]`); `None`: off.
    pub oidc: Option<OidcConfig>,
}

impl Default for IdentityConfig {
    fn default() -> Self {
        IdentityConfig {
            min_uid: 1000,
            session_ttl_s: 12 * 3600,
            munge: true,
            munge_socket: None,
            grants: Vec::new(),
            oidc: None,
        }
    }
}

/// The path the dashboard answers an OpenID Connect provider at.
pub const OIDC_CALLBACK_PATH: &str = "/login/oidc/callback";
/// The environment variable a client secret is read from when
/// `[identity.oidc]` names no `client_secret_file`.
pub const OIDC_SECRET_ENV: &str = "ALLOT_OIDC_CLIENT_SECRET";

/// `[identity.oidc]`: the dashboard signs people in with the
/// organisation's OpenID Connect provider (authorization code + PKCE).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OidcConfig {
    /// The provider's issuer URL (discovery is at
    /// `<issuer>/.well-known/openid-configuration`).
    pub issuer: String,
    pub client_id: String,
    /// A file holding the client secret (absolute path); `None`: the
    /// secret is in the environment, [`OIDC_SECRET_ENV`].
    pub client_secret_file: Option<String>,
    /// The dashboard's public callback URL, ending in
    /// [`OIDC_CALLBACK_PATH`], as registered with the provider.
    pub redirect_url: String,
    /// The ID token claim holding the Unix user name (default
    /// `preferred_username`).
    pub user_claim: String,
    /// The ID token claim holding the person's group names, matched
    /// against `[[grants]] group` (default `groups`).
    pub groups_claim: String,
    /// Scopes asked for besides `openid` and `profile`.
    pub scopes: Vec<String>,
}

/// Whether `url` is an `https://` URL, or `http://` to this host's
/// loopback (for a provider or dashboard on the same machine); `Err`:
/// what is wrong.
fn web_url(url: &str) -> Result<(), String> {
    let rest = if let Some(r) = url.strip_prefix("https://") {
        r
    } else if let Some(r) = url.strip_prefix("http://") {
        let host = r.split(['/', '?', '#']).next().unwrap_or("");
        let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
        let name = if host.starts_with('[') {
            host.split(']').next().map(|h| format!("{h}]")).unwrap_or_default()
        } else {
            host.split(':').next().unwrap_or("").to_string()
        };
        if !matches!(name.as_str(), "127.0.0.1" | "localhost" | "[::1]") {
            return Err(format!("{url:?} is plain HTTP to another host: use https://"));
        }
        r
    } else {
        return Err(format!("{url:?} is not an http(s) URL"));
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty() || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{url:?} is not a valid URL"));
    }
    if rest.contains('#') {
        return Err(format!("{url:?} has a fragment (#…): remove it"));
    }
    Ok(())
}

/// `[identity.oidc]`, checked; errors name the key and its line.
fn build_oidc(ctx: &Ctx<'_>, raw: &Spanned<RawOidc>) -> Result<OidcConfig, FormatError> {
    let key = |k: &str| format!("identity.oidc.{k}");
    let need =
        |v: &Option<Spanned<String>>, k: &str, what: &str| -> Result<(String, std::ops::Range<usize>), FormatError> {
            match v {
                Some(s) if !s.get_ref().trim().is_empty() => Ok((s.get_ref().clone(), s.span())),
                Some(s) => Err(ctx.err(key(k), Some(s.span()), format!("{k} is empty: give {what}"))),
                None => Err(ctx.err(key(k), Some(raw.span()), format!("[identity.oidc] needs {k}: {what}"))),
            }
        };
    let r = raw.get_ref();
    let (issuer, span) = need(&r.issuer, "issuer", "the provider's issuer URL")?;
    web_url(&issuer).map_err(|m| ctx.err(key("issuer"), Some(span), m))?;
    let issuer = issuer.trim_end_matches('/').to_string();
    let (client_id, _) = need(&r.client_id, "client_id", "the client id the provider registered for Allot")?;
    let (redirect_url, span) =
        need(&r.redirect_url, "redirect_url", "the dashboard's public URL of /login/oidc/callback")?;
    web_url(&redirect_url).map_err(|m| ctx.err(key("redirect_url"), Some(span.clone()), m))?;
    if !redirect_url.ends_with(OIDC_CALLBACK_PATH) {
        let m = format!("redirect_url {redirect_url:?} must end in {OIDC_CALLBACK_PATH} (the dashboard's callback)");
        return Err(ctx.err(key("redirect_url"), Some(span), m));
    }
    let client_secret_file = match &r.client_secret_file {
        Some(f) if !f.get_ref().starts_with('/') => {
            let m = format!("client_secret_file must be an absolute path, got {:?}", f.get_ref());
            return Err(ctx.err(key("client_secret_file"), Some(f.span()), m));
        }
        f => f.as_ref().map(|f| f.get_ref().clone()),
    };
    let claim = |v: &Option<Spanned<String>>, k: &str, default: &str| -> Result<String, FormatError> {
        match v {
            None => Ok(default.to_string()),
            Some(c) if claim_name(c.get_ref()) => Ok(c.get_ref().clone()),
            Some(c) => {
                let m = format!("{:?} is not a claim name (letters, digits, '_', '-', '.', ':', '/')", c.get_ref());
                Err(ctx.err(key(k), Some(c.span()), m))
            }
        }
    };
    let user_claim = claim(&r.user_claim, "user_claim", "preferred_username")?;
    let groups_claim = claim(&r.groups_claim, "groups_claim", "groups")?;
    let mut scopes = Vec::new();
    for (i, s) in r.scopes.iter().enumerate() {
        let v = s.get_ref();
        if v.is_empty() || !v.chars().all(|c| c.is_ascii_graphic() && c != '"' && c != '\\') {
            let m = format!("{v:?} is not a scope (visible ASCII, no spaces)");
            return Err(ctx.err(format!("identity.oidc.scopes[{i}]"), Some(s.span()), m));
        }
        if !matches!(v.as_str(), "openid" | "profile") && !scopes.contains(v) {
            scopes.push(v.clone());
        }
    }
    Ok(OidcConfig { issuer, client_id, client_secret_file, redirect_url, user_claim, groups_claim, scopes })
}

/// Whether `c` can name a claim.
fn claim_name(c: &str) -> bool {
    !c.is_empty() && c.len() <= 128 && c.chars().all(|c| c.is_ascii_alphanumeric() || "_-.:/".contains(c))
}

/// Whether `name` can be a Unix user or group name (POSIX portable names,
/// as `useradd` takes them, plus a trailing `$`).
pub fn unix_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter().enumerate().all(|(i, &c)| {
            c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.') || (c == b'$' && i == b.len() - 1)
        })
}

/// `[identity]` and `[[grants]]`: names, roles and bounds checked; every
/// account a grant names exists in the config (`exists`). Errors name the
/// key and its line.
pub(super) fn build_identity(
    ctx: &Ctx<'_>,
    raw: Option<&RawIdentity>,
    grants: &[RawGrant],
    exists: impl Fn(&str) -> bool,
) -> Result<IdentityConfig, FormatError> {
    let mut c = IdentityConfig::default();
    if let Some(raw) = raw {
        if let Some(v) = &raw.min_uid {
            c.min_uid = u32::try_from(*v.get_ref()).ok().filter(|&u| u > 0).ok_or_else(|| {
                let m = format!(
                    "min_uid {} is not a uid from 1 to {} (root, uid 0, never runs workloads)",
                    v.get_ref(),
                    u32::MAX
                );
                ctx.err("identity.min_uid", Some(v.span()), m)
            })?;
        }
        if let Some(t) = &raw.session_ttl {
            let s = t.get_ref().0;
            if !(60..=30 * 86_400).contains(&s) {
                let m = format!("session_ttl {s} s is outside 1m..30d");
                return Err(ctx.err("identity.session_ttl", Some(t.span()), m));
            }
            c.session_ttl_s = s;
        }
        if let Some(m) = raw.munge {
            c.munge = m;
        }
        if let Some(s) = &raw.munge_socket {
            if !s.get_ref().starts_with('/') {
                let m = format!("munge_socket must be an absolute path, got {:?}", s.get_ref());
                return Err(ctx.err("identity.munge_socket", Some(s.span()), m));
            }
            c.munge_socket = Some(s.get_ref().clone());
        }
        if let Some(o) = &raw.oidc {
            c.oidc = Some(build_oidc(ctx, o)?);
        }
    }
    for (i, g) in grants.iter().enumerate() {
        let key = |k: &str| format!("grants[{i}].{k}");
        let to = match (&g.group, &g.user) {
            (Some(n), None) | (None, Some(n)) if !unix_name(n.get_ref()) => {
                let which = if g.group.is_some() { "group" } else { "user" };
                let m = format!("{:?} is not a Unix {which} name", n.get_ref());
                return Err(ctx.err(key(which), Some(n.span()), m));
            }
            (Some(n), None) => Grantee::Group(n.get_ref().clone()),
            (None, Some(n)) => Grantee::User(n.get_ref().clone()),
            (Some(n), Some(_)) => {
                return Err(ctx.err(key("user"), Some(n.span()), "a grant names a group or a user, not both"));
            }
            (None, None) => {
                let m = "a grant names who it is for: group = \"…\" (a Unix group) or user = \"…\" (a Unix user)";
                return Err(ctx.err(key("group"), Some(g.role.span()), m));
            }
        };
        let role = g.role.get_ref();
        if !GRANT_ROLES.contains(&role.as_str()) {
            let m = format!("unknown role {role:?} (known: {})", GRANT_ROLES.join(", "));
            return Err(ctx.err(key("role"), Some(g.role.span()), m));
        }
        let scoped = matches!(role.as_str(), "manager" | "researcher");
        match (scoped, g.accounts.first()) {
            (true, None) => {
                let m = format!("a {role} grant names the accounts it covers: accounts = [\"org/team\"]");
                return Err(ctx.err(key("accounts"), Some(g.role.span()), m));
            }
            (false, Some(a)) => {
                let m = format!(
                    "{} {role} grant covers every account: remove accounts",
                    if role == "admin" { "an" } else { "a" }
                );
                return Err(ctx.err(key("accounts"), Some(a.span()), m));
            }
            _ => {}
        }
        for (j, a) in g.accounts.iter().enumerate() {
            if !exists(a.get_ref()) {
                let m = format!("account {:?} is not in the config's [[accounts]]", a.get_ref());
                return Err(ctx.err(format!("grants[{i}].accounts[{j}]"), Some(a.span()), m));
            }
        }
        c.grants.push(Grant {
            to,
            role: role.clone(),
            accounts: g.accounts.iter().map(|a| a.get_ref().clone()).collect(),
        });
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use crate::config::parse_config;

    const BASE: &str = r#"
[cluster]
name = "c"
[[cluster.pools]]
name = "p"
gpu = "H100"
nodes = 1
gpus_per_node = 4
[[accounts]]
path = "org/nlp"
[[accounts]]
path = "org/vision"
"#;

    fn err(extra: &str) -> String {
        parse_config(&format!("{BASE}{extra}"), "c.toml").expect_err(extra).to_string()
    }

    #[test]
    fn grants_and_identity_are_read() {
        let c = parse_config(
            &format!(
                "{BASE}[identity]\nmin_uid = 500\nsession_ttl = \"1h\"\nmunge_socket = \"/run/m.sock\"\n\
                 [[grants]]\ngroup = \"nlp\"\nrole = \"researcher\"\naccounts = [\"org/nlp\"]\n\
                 [[grants]]\nuser = \"ann\"\nrole = \"admin\"\n"
            ),
            "c.toml",
        )
        .unwrap();
        let id = &c.identity;
        assert_eq!((id.min_uid, id.session_ttl_s, id.munge), (500, 3600, true));
        assert_eq!(id.munge_socket.as_deref(), Some("/run/m.sock"));
        assert_eq!(id.grants.len(), 2);
        assert_eq!(id.grants[0].to, super::Grantee::Group("nlp".into()));
        assert_eq!(id.grants[1].to, super::Grantee::User("ann".into()));
        assert_eq!(parse_config(BASE, "c.toml").unwrap().identity, super::IdentityConfig::default());
    }

    #[test]
    fn bad_grants_name_their_key() {
        let cases = [
            ("[[grants]]\nrole = \"admin\"\n", "grants[0].group", "names who it is for"),
            ("[[grants]]\ngroup = \"a b\"\nrole = \"admin\"\n", "grants[0].group", "not a Unix group name"),
            ("[[grants]]\ngroup = \"g\"\nuser = \"u\"\nrole = \"admin\"\n", "grants[0].user", "not both"),
            ("[[grants]]\ngroup = \"g\"\nrole = \"boss\"\n", "grants[0].role", "unknown role \"boss\""),
            ("[[grants]]\ngroup = \"g\"\nrole = \"researcher\"\n", "grants[0].accounts", "names the accounts"),
            (
                "[[grants]]\ngroup = \"g\"\nrole = \"admin\"\naccounts = [\"org/nlp\"]\n",
                "grants[0].accounts",
                "every account",
            ),
            (
                "[[grants]]\ngroup = \"g\"\nrole = \"manager\"\naccounts = [\"org/nlp\", \"org/x\"]\n",
                "grants[0].accounts[1]",
                "\"org/x\" is not in the config",
            ),
            ("[identity]\nmin_uid = 0\n", "identity.min_uid", "root, uid 0"),
            ("[identity]\nsession_ttl = \"10s\"\n", "identity.session_ttl", "outside 1m..30d"),
            ("[identity]\nmunge_socket = \"run/m\"\n", "identity.munge_socket", "absolute path"),
            ("[identity]\nmungo = true\n", "identity.mungo", "unknown key `mungo`"),
        ];
        for (extra, key, what) in cases {
            let e = err(extra);
            assert!(e.contains(key) && e.contains(what), "{extra}: {e}");
        }
    }

    const OIDC: &str = "[identity.oidc]\nissuer = \"https://sso.example.org/realms/lab/\"\nclient_id = \"allot\"\n\
                        redirect_url = \"https://allot.example.org/login/oidc/callback\"\n";

    #[test]
    fn oidc_is_read_with_its_defaults() {
        let c = parse_config(&format!("{BASE}{OIDC}"), "c.toml").unwrap();
        let o = c.identity.oidc.expect("[identity.oidc]");
        assert_eq!(o.issuer, "https://sso.example.org/realms/lab", "the trailing / goes");
        assert_eq!((o.client_id.as_str(), o.client_secret_file.as_deref()), ("allot", None));
        assert_eq!((o.user_claim.as_str(), o.groups_claim.as_str()), ("preferred_username", "groups"));
        assert!(o.scopes.is_empty());
        let c = parse_config(
            &format!(
                "{BASE}{OIDC}client_secret_file = \"/etc/allot/oidc\"\nuser_claim = \"uid\"\n\
                 groups_claim = \"roles\"\nscopes = [\"email\", \"openid\", \"groups\", \"email\"]\n"
            ),
            "c.toml",
        )
        .unwrap();
        let o = c.identity.oidc.unwrap();
        assert_eq!(o.client_secret_file.as_deref(), Some("/etc/allot/oidc"));
        assert_eq!((o.user_claim.as_str(), o.groups_claim.as_str()), ("uid", "roles"));
        assert_eq!(o.scopes, ["email", "groups"], "openid is always asked for; duplicates go");
        let local = "[identity.oidc]\nissuer = \"http://127.0.0.1:9400\"\nclient_id = \"a\"\n\
                     redirect_url = \"http://localhost:8080/login/oidc/callback\"\n";
        assert!(parse_config(&format!("{BASE}{local}"), "c.toml").is_ok(), "plain HTTP on loopback");
    }

    #[test]
    fn bad_oidc_names_its_key_and_line() {
        let with = |k: &str, v: &str| {
            let mut lines: Vec<String> = OIDC.lines().filter(|l| !l.starts_with(k)).map(str::to_string).collect();
            if !v.is_empty() {
                lines.push(format!("{k} = {v}"));
            }
            format!("{}\n", lines.join("\n"))
        };
        let cases = [
            (with("issuer", ""), "identity.oidc.issuer", "needs issuer"),
            (with("issuer", "\"sso.example.org\""), "identity.oidc.issuer", "not an http(s) URL"),
            (with("issuer", "\"http://sso.example.org\""), "identity.oidc.issuer", "plain HTTP to another host"),
            (with("client_id", ""), "identity.oidc.client_id", "needs client_id"),
            (with("client_id", "\" \""), "identity.oidc.client_id", "client_id is empty"),
            (with("redirect_url", ""), "identity.oidc.redirect_url", "needs redirect_url"),
            (
                with("redirect_url", "\"https://allot.example.org/callback\""),
                "identity.oidc.redirect_url",
                "must end in /login/oidc/callback",
            ),
            (with("client_secret_file", "\"secret\""), "identity.oidc.client_secret_file", "absolute path"),
            (with("user_claim", "\"a b\""), "identity.oidc.user_claim", "not a claim name"),
            (with("groups_claim", "\"\""), "identity.oidc.groups_claim", "not a claim name"),
            (with("scopes", "[\"a b\"]"), "identity.oidc.scopes[0]", "not a scope"),
            (with("client_secret", "\"x\""), "identity.oidc", "unknown key `client_secret`"),
        ];
        for (extra, key, what) in cases {
            let e = err(&extra);
            assert!(e.contains(key) && e.contains(what), "{extra}: {e}");
            assert!(e.starts_with("c.toml:") && e.as_bytes()[7].is_ascii_digit(), "names the line: {e}");
        }
    }
}
