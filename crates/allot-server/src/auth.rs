//! Bearer tokens, principals and roles.
//!
//! A token is `allot_` + 64 hex digits of OS randomness; the store keeps only
//! its SHA-256. A token names a principal with one role:
//! * `admin`: everything;
//! * `manager` of an account subtree (`scope`): sees the subtree, submits and
//!   cancels in it, and changes budgets and shares of accounts strictly
//!   inside it (not of the scope account itself, which its own manager or an
//!   admin sets);
//! * `researcher`: submits to and sees the projects granted to them (a grant
//!   covers the account's subtree), cancels only their own workloads;
//! * `metrics`: a scrape token: reads `/metrics` with every account's
//!   series and sees no account or workload anywhere else.
//!
//! A workload is owned by the token that submitted it, by the token's id
//! (random, made with the token), not by its name: a token created later
//! under a revoked token's name owns nothing of the old one's. Principals
//! see nothing outside their grants, and what they cannot see is answered
//! exactly like what does not exist.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use allot_trace::config::{Grantee, IdentityConfig};

use crate::identity::UnixUser;

use serde::{Deserialize, Serialize};

pub use crate::secret::{hash_token, new_token, new_token_id};
use crate::store::{LoginRow, Store, StoreError, TokenRow};

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Admin,
    Manager,
    Researcher,
    Metrics,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Admin, Role::Manager, Role::Researcher, Role::Metrics];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Manager => "manager",
            Role::Researcher => "researcher",
            Role::Metrics => "metrics",
        }
    }

    /// The role names, for messages: `admin, manager, researcher, metrics`.
    pub fn names() -> String {
        Role::ALL.map(Role::as_str).join(", ")
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// Who is calling: a person (a Unix user signed in, whose `[[grants]]`
/// made this) or a token (automation: a service principal).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Principal {
    pub name: String,
    /// The highest of its roles (a person's grants may give several).
    pub role: Role,
    /// The subtrees it manages (a manager token has one).
    pub scopes: Vec<String>,
    /// Projects granted to it as a researcher.
    pub projects: Vec<String>,
    /// What owns its workloads: a token's stable id, or `user:<name>` for
    /// a person (whichever session submitted them).
    #[serde(skip)]
    pub token_id: String,
    /// The Unix user its workloads run as (a person's own, or the service
    /// account a token was made for); `None`: a token with no Unix user.
    pub unix_user: Option<String>,
}

/// Whether `path` is `root` or lies below it.
pub fn within(path: &str, root: &str) -> bool {
    path == root || (path.len() > root.len() && path.starts_with(root) && path.as_bytes()[root.len()] == b'/')
}

impl Principal {
    /// Subtrees this principal sees (`None`: everything).
    pub fn visible_roots(&self) -> Option<Vec<String>> {
        match self.role {
            Role::Admin => None,
            _ => Some(self.scopes.iter().chain(&self.projects).cloned().collect()),
        }
    }

    pub fn can_see(&self, account: &str) -> bool {
        self.visible_roots().is_none_or(|roots| roots.iter().any(|r| within(account, r)))
    }

    pub fn can_submit(&self, account: &str) -> bool {
        self.role != Role::Metrics && self.can_see(account)
    }

    fn manages(&self, account: &str) -> bool {
        self.scopes.iter().any(|s| within(account, s))
    }

    /// Cancel: admins anything, managers inside their subtrees, researchers
    /// the workloads they own (`owner`: a token's id, or `user:<name>` for
    /// a person) in projects they still see.
    pub fn can_cancel(&self, account: &str, owner: Option<&str>) -> bool {
        match self.role {
            Role::Admin => true,
            Role::Metrics => false,
            Role::Manager | Role::Researcher => {
                self.manages(account)
                    || (owner == Some(self.token_id.as_str()) && self.projects.iter().any(|p| within(account, p)))
            }
        }
    }

    /// Per-account metric series: admins and scrape tokens.
    pub fn can_read_account_metrics(&self) -> bool {
        matches!(self.role, Role::Admin | Role::Metrics)
    }

    /// Budgets and shares: admins anywhere, managers strictly inside their
    /// subtrees.
    pub fn can_change(&self, account: &str) -> bool {
        match self.role {
            Role::Admin => true,
            Role::Manager => self.scopes.iter().any(|s| account != s && within(account, s)),
            Role::Researcher | Role::Metrics => false,
        }
    }

    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// `text` with every account path that exists (`exists`) but that this
    /// principal may not see replaced by `another account`: the policy's
    /// reasons name the accounts that rank ahead of a workload or preempt
    /// it. Ancestors of what it sees stay (they are in its own paths).
    pub fn redact(&self, text: &str, exists: impl Fn(&str) -> bool) -> String {
        let Some(roots) = self.visible_roots() else { return text.to_string() };
        let hidden = |p: &str| exists(p) && !self.can_see(p) && !roots.iter().any(|r| within(r, p));
        let is_path = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/');
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find(is_path) {
            out.push_str(&rest[..start]);
            let tail = &rest[start..];
            let end = tail.find(|c| !is_path(c)).unwrap_or(tail.len());
            let run = &tail[..end];
            // A path never ends in '.', a sentence may.
            let word = run.trim_end_matches('.');
            if !word.is_empty() && hidden(word) {
                out.push_str("another account");
                out.push_str(&run[word.len()..]);
            } else {
                out.push_str(run);
            }
            rest = &tail[end..];
        }
        out.push_str(rest);
        out
    }
}

/// Why a token could not be created.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("a token named {0:?} already exists")]
    NameTaken(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a new token grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenSpec {
    pub name: String,
    pub role: Role,
    pub scope: Option<String>,
    pub projects: Vec<String>,
    /// The Unix user its workloads run as (a service account); `None`: a
    /// token that cannot submit unless the server runs `--single-user`.
    pub unix_user: Option<String>,
    /// How long it lasts, seconds from its creation (`None`: until revoked).
    pub expires_in_s: Option<u64>,
}

impl TokenSpec {
    /// Checks the shape of the spec (names, scope only for managers, projects
    /// only for researchers); `account` answers an account that does not
    /// exist with what to say (its name and the valid ones).
    pub fn check(&self, account: impl Fn(&str) -> Result<(), String>) -> Result<(), (&'static str, String)> {
        let n = &self.name;
        if n.is_empty() || n.len() > 64 || !n.chars().all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c)) {
            return Err(("name", format!("invalid name {n:?}: use 1-64 letters, digits, '-', '_', '.' or '@'")));
        }
        match (self.role, &self.scope) {
            (Role::Manager, None) => return Err(("scope", "a manager token needs a scope (an account path)".into())),
            (Role::Manager, Some(s)) => account(s).map_err(|m| ("scope", m))?,
            (Role::Admin | Role::Researcher | Role::Metrics, Some(_)) => {
                return Err(("scope", "only manager tokens have a scope".into()));
            }
            _ => {}
        }
        if self.role != Role::Researcher && !self.projects.is_empty() {
            return Err(("projects", "only researcher tokens have projects".into()));
        }
        for p in &self.projects {
            account(p).map_err(|m| ("projects", m))?;
        }
        if let Some((i, p)) = self.projects.iter().enumerate().find(|(i, p)| self.projects[..*i].contains(p)) {
            return Err(("projects", format!("account {p:?} is granted twice (projects[{i}])")));
        }
        if let Some(u) = &self.unix_user {
            match UnixUser::by_name(u) {
                Ok(user) if user.uid == 0 => {
                    return Err(("user", format!("{u:?} is root: no token runs workloads as root")));
                }
                Ok(_) => {}
                Err(e) => return Err(("user", e.to_string())),
            }
        }
        if self.expires_in_s == Some(0) {
            return Err(("expires", "a token that expires at once is of no use: give a duration such as 90d".into()));
        }
        Ok(())
    }
}

/// Creates a token; returns the token text (shown once).
pub async fn create_token(store: &Store, spec: &TokenSpec, created_by: &str) -> Result<String, TokenError> {
    let token = new_token();
    let now = crate::clock::now();
    let row = TokenRow {
        id: new_token_id(),
        name: spec.name.clone(),
        hash: hash_token(&token),
        role: spec.role.as_str().to_string(),
        scope: spec.scope.clone(),
        created_t: now as i64,
        created_by: created_by.to_string(),
        unix_user: spec.unix_user.clone(),
        expires_t: spec.expires_in_s.map(|s| (now + s) as i64),
    };
    if !store.insert_token(&row, &spec.projects).await? {
        return Err(TokenError::NameTaken(spec.name.clone()));
    }
    Ok(token)
}

/// Resolves bearer tokens and people's sessions, caching hits for a short
/// while so every request does not read the store. Every cached principal
/// carries the generation it was made in: a change of tokens, grants or
/// the account tree ([`Authenticator::forget_all`]) is seen by the very
/// next request.
pub struct Authenticator {
    store: Store,
    /// Replaced by a config reload (CFG-1: `[[grants]]`).
    identity: std::sync::RwLock<Arc<IdentityConfig>>,
    cache: Mutex<HashMap<String, Cached>>,
    generation: AtomicU64,
}

struct Cached {
    principal: Principal,
    at: Instant,
    generation: u64,
    /// A session's or token's end (Unix seconds).
    expires_t: Option<i64>,
}

const CACHE_TTL: Duration = Duration::from_secs(30);

/// How many sessions a person may hold at once; opening one more ends the
/// oldest.
pub const MAX_SESSIONS_PER_PERSON: i64 = 32;

impl Authenticator {
    pub fn new(store: Store) -> Authenticator {
        Self::with_identity(store, IdentityConfig::default())
    }

    /// With `[identity]` and `[[grants]]`: people's sessions are resolved
    /// through them.
    pub fn with_identity(store: Store, identity: IdentityConfig) -> Authenticator {
        Authenticator {
            store,
            identity: std::sync::RwLock::new(Arc::new(identity)),
            cache: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
        }
    }

    /// `[identity]` and `[[grants]]` in force.
    pub fn identity(&self) -> Arc<IdentityConfig> {
        self.identity.read().expect("the identity config").clone()
    }

    /// New `[identity]` settings (a config reload, CFG-1: the grants);
    /// every cached principal is resolved again at its next request.
    pub fn set_identity(&self, identity: IdentityConfig) {
        *self.identity.write().expect("the identity config") = Arc::new(identity);
        self.forget_all();
    }

    pub async fn principal(&self, token: &str) -> Result<Option<Principal>, StoreError> {
        self.principal_by_hash(hash_token(token)).await
    }

    /// The principal of the token or session with this hash (a dashboard
    /// session keeps only the hash of the token it was opened with).
    pub async fn principal_by_hash(&self, hash: String) -> Result<Option<Principal>, StoreError> {
        let now = crate::clock::now() as i64;
        let generation = self.generation.load(Ordering::Acquire);
        if let Some(c) = self.cache.lock().expect("auth cache").get(&hash)
            && c.generation == generation
            && c.at.elapsed() < CACHE_TTL
            && c.expires_t.is_none_or(|e| now < e)
        {
            return Ok(Some(c.principal.clone()));
        }
        let found = match self.store.token_by_hash(&hash).await? {
            Some((row, projects)) => {
                if row.expires_t.is_some_and(|e| now >= e) {
                    return Ok(None);
                }
                let Some(role) = Role::parse(&row.role) else { return Ok(None) };
                let p = Principal {
                    name: row.name,
                    role,
                    scopes: row.scope.into_iter().collect(),
                    projects,
                    token_id: row.id,
                    unix_user: row.unix_user,
                };
                Some((p, row.expires_t))
            }
            None => match self.store.login_by_hash(&hash, now).await? {
                // Signed in by single sign-on: the groups its ID token gave.
                Some(login) if login.groups.is_some() => {
                    let groups = login.groups.as_deref().unwrap_or_default();
                    principal_of(&login.unix_user, groups, &self.identity()).map(|p| (p, Some(login.expires_t)))
                }
                Some(login) => self.person(&login.unix_user).map(|p| (p, Some(login.expires_t))),
                None => None,
            },
        };
        let Some((p, expires_t)) = found else { return Ok(None) };
        let cached = Cached { principal: p.clone(), at: Instant::now(), generation, expires_t };
        self.cache.lock().expect("auth cache").insert(hash, cached);
        Ok(Some(p))
    }

    /// Person `name`'s principal now: their Unix user as NSS answers and
    /// what `[[grants]]` give their groups (`None`: gone, or no grant).
    pub fn person(&self, name: &str) -> Option<Principal> {
        let user = UnixUser::by_name(name).ok()?;
        principal_of(&user.name, &user.group_names, &self.identity())
    }

    /// Opens a session for the person whose Unix user is `name` (signed in
    /// by `method` from `source`); `groups`: the group names single sign-on
    /// gave, which then decide their grants instead of the host's Unix
    /// groups. Returns its id, its token (shown once) and its end.
    pub async fn open_session(
        &self,
        name: &str,
        groups: Option<&[String]>,
        method: &str,
        source: &str,
    ) -> Result<(String, String, i64), StoreError> {
        let token = crate::secret::new_session_token();
        let now = crate::clock::now() as i64;
        let row = LoginRow {
            id: new_token_id(),
            hash: hash_token(&token),
            unix_user: name.to_string(),
            method: method.to_string(),
            source: source.to_string(),
            created_t: now,
            expires_t: now + self.identity().session_ttl_s as i64,
            groups: groups.map(<[String]>::to_vec),
        };
        self.store.insert_login(&row, MAX_SESSIONS_PER_PERSON).await?;
        Ok((row.id, token, row.expires_t))
    }

    /// How long a person's session lasts (`[identity] session_ttl`).
    pub fn session_ttl_s(&self) -> u64 {
        self.identity().session_ttl_s
    }

    /// Tokens, grants or accounts changed: no cached principal is used
    /// again.
    pub fn forget_all(&self) {
        let mut cache = self.cache.lock().expect("auth cache");
        self.generation.fetch_add(1, Ordering::AcqRel);
        cache.clear();
    }
}

/// The principal of the person whose Unix user is `name`, in the groups
/// named `groups` (the host's Unix groups, or those single sign-on gave),
/// under `[[grants]]`, or `None` when no grant names them or one of their
/// groups. Grants merge: any admin grant
/// makes an admin; manager grants give their subtrees, researcher grants
/// their projects (a person may manage one team and do research in
/// another); the role shown is the highest. A person owns the workloads
/// they submitted by any session (`user:<name>`).
pub fn principal_of(name: &str, groups: &[String], cfg: &IdentityConfig) -> Option<Principal> {
    let mine = cfg.grants.iter().filter(|g| match &g.to {
        Grantee::User(n) => n == name,
        Grantee::Group(n) => groups.contains(n),
    });
    let (mut admin, mut metrics) = (false, false);
    let (mut scopes, mut projects) = (Vec::<String>::new(), Vec::<String>::new());
    let mut any = false;
    for g in mine {
        any = true;
        match g.role.as_str() {
            "admin" => admin = true,
            "metrics" => metrics = true,
            "manager" => scopes.extend(g.accounts.iter().filter(|a| !scopes.contains(a)).cloned().collect::<Vec<_>>()),
            _ => projects.extend(g.accounts.iter().filter(|a| !projects.contains(a)).cloned().collect::<Vec<_>>()),
        }
    }
    if !any {
        return None;
    }
    let role = if admin {
        Role::Admin
    } else if !scopes.is_empty() {
        Role::Manager
    } else if !projects.is_empty() {
        Role::Researcher
    } else if metrics {
        Role::Metrics
    } else {
        return None;
    };
    if admin {
        (scopes, projects) = (Vec::new(), Vec::new());
    }
    Some(Principal {
        name: name.to_string(),
        role,
        scopes,
        projects,
        token_id: owner_of_person(name),
        unix_user: Some(name.to_string()),
    })
}

/// What owns a person's workloads, whichever session submitted them.
pub fn owner_of_person(name: &str) -> String {
    format!("user:{name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_trace::config::Grant;

    fn user(name: &str, groups: &[&str]) -> (String, Vec<String>) {
        (name.to_string(), groups.iter().map(|g| g.to_string()).collect())
    }

    fn principal_of(u: &(String, Vec<String>), cfg: &IdentityConfig) -> Option<Principal> {
        super::principal_of(&u.0, &u.1, cfg)
    }

    fn grant(to: Grantee, role: &str, accounts: &[&str]) -> Grant {
        Grant { to, role: role.into(), accounts: accounts.iter().map(|a| a.to_string()).collect() }
    }

    #[test]
    fn grants_merge_by_group_and_user() {
        let cfg = IdentityConfig {
            grants: vec![
                grant(Grantee::Group("nlp".into()), "researcher", &["org/nlp"]),
                grant(Grantee::Group("vision-leads".into()), "manager", &["org/vision"]),
                grant(Grantee::User("ops".into()), "admin", &[]),
                grant(Grantee::Group("mon".into()), "metrics", &[]),
            ],
            ..IdentityConfig::default()
        };
        let none = principal_of(&user("eve", &["eve", "staff"]), &cfg);
        assert_eq!(none, None, "a person in no granted group has no principal");
        let r = principal_of(&user("alice", &["alice", "nlp"]), &cfg).unwrap();
        assert_eq!(
            (r.role, r.projects.as_slice(), r.scopes.len()),
            (Role::Researcher, &["org/nlp".to_string()][..], 0)
        );
        assert_eq!((r.token_id.as_str(), r.unix_user.as_deref()), ("user:alice", Some("alice")));
        let m = principal_of(&user("carol", &["nlp", "vision-leads"]), &cfg).unwrap();
        assert_eq!(m.role, Role::Manager);
        assert!(m.can_see("org/nlp/x") && m.can_change("org/vision/y") && !m.can_change("org/nlp/x"));
        let a = principal_of(&user("ops", &["ops"]), &cfg).unwrap();
        assert!(a.is_admin());
        let s = principal_of(&user("prom", &["mon"]), &cfg).unwrap();
        assert_eq!(s.role, Role::Metrics);
    }

    fn p(role: Role, scope: Option<&str>, projects: &[&str]) -> Principal {
        Principal {
            name: "u".into(),
            role,
            scopes: scope.map(str::to_string).into_iter().collect(),
            projects: projects.iter().map(|s| s.to_string()).collect(),
            token_id: "t1".into(),
            unix_user: None,
        }
    }

    #[test]
    fn subtree_rules() {
        let admin = p(Role::Admin, None, &[]);
        let mgr = p(Role::Manager, Some("org/llm"), &[]);
        let res = p(Role::Researcher, None, &["org/llm/pre"]);
        let scrape = p(Role::Metrics, None, &[]);
        let cases = [
            ("admin sees all", admin.can_see("x"), true),
            ("manager sees scope", mgr.can_see("org/llm"), true),
            ("manager sees below", mgr.can_see("org/llm/pre"), true),
            ("manager not sibling prefix", mgr.can_see("org/llmx"), false),
            ("manager changes below", mgr.can_change("org/llm/pre"), true),
            ("manager not own scope", mgr.can_change("org/llm"), false),
            ("manager not outside", mgr.can_change("org/vision"), false),
            ("researcher sees project", res.can_see("org/llm/pre"), true),
            ("researcher not parent", res.can_see("org/llm"), false),
            ("researcher cancels own", res.can_cancel("org/llm/pre", Some("t1")), true),
            ("researcher not another token's", res.can_cancel("org/llm/pre", Some("t0")), false),
            ("researcher not unowned", res.can_cancel("org/llm/pre", None), false),
            ("researcher never changes", res.can_change("org/llm/pre"), false),
            ("scrape token sees no account", scrape.can_see("org/llm/pre"), false),
            ("scrape token cancels nothing", scrape.can_cancel("org/llm/pre", Some("t1")), false),
            ("scrape token reads account metrics", scrape.can_read_account_metrics(), true),
            ("admin reads account metrics", admin.can_read_account_metrics(), true),
            ("manager does not", mgr.can_read_account_metrics(), false),
            ("researcher does not", res.can_read_account_metrics(), false),
        ];
        for (name, got, want) in cases {
            assert_eq!(got, want, "case {name}");
        }
    }

    #[test]
    fn reasons_do_not_name_hidden_accounts() {
        let res = p(Role::Researcher, None, &["org/llm/pre"]);
        let exists = |a: &str| ["org", "org/llm", "org/llm/pre", "org/vision", "lab"].contains(&a);
        let cases = [
            (
                "sibling",
                "rank 2 behind org/vision (usage 0.5 vs 0.2); waiting",
                "rank 2 behind another account (usage 0.5 vs 0.2); waiting",
            ),
            ("top level", "behind lab.", "behind another account."),
            ("own and ancestors stay", "org/llm/pre in org/llm of org ranks", "org/llm/pre in org/llm of org ranks"),
            ("not an account", "labs run 12 s", "labs run 12 s"),
        ];
        for (name, text, want) in cases {
            assert_eq!(res.redact(text, exists), want, "case {name}");
        }
        assert_eq!(p(Role::Admin, None, &[]).redact("behind lab", exists), "behind lab", "admins see all");
    }

    #[test]
    fn token_specs() {
        let spec = |role, scope: Option<&str>, projects: &[&str]| TokenSpec {
            name: "t".into(),
            role,
            scope: scope.map(str::to_string),
            projects: projects.iter().map(|s| s.to_string()).collect(),
            unix_user: None,
            expires_in_s: None,
        };
        let cases = [
            ("researcher", spec(Role::Researcher, None, &["a", "b"]), None),
            ("duplicate project", spec(Role::Researcher, None, &["a", "b", "a"]), Some("projects")),
            ("metrics", spec(Role::Metrics, None, &[]), None),
            ("metrics with a scope", spec(Role::Metrics, Some("a"), &[]), Some("scope")),
            ("metrics with projects", spec(Role::Metrics, None, &["a"]), Some("projects")),
        ];
        for (name, s, want) in cases {
            assert_eq!(s.check(|_| Ok(())).err().map(|(f, _)| f), want, "case {name}");
        }
    }

    #[test]
    fn tokens_hash_stably_and_differ() {
        let a = new_token();
        assert!(a.starts_with("allot_") && a.len() == 6 + 64);
        assert_ne!(a, new_token());
        assert_eq!(hash_token("x"), "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881");
    }
}
