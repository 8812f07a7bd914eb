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
}

impl Default for IdentityConfig {
    fn default() -> Self {
        IdentityConfig { min_uid: 1000, session_ttl_s: 12 * 3600, munge: true, munge_socket: None, grants: Vec::new() }
    }
}

/// Whether `name` can be a Unix user or group name (POSIX portable names,
/// as `useradd` takes them, plus a trailing `$`).
fn unix_name(name: &str) -> bool {
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
}
