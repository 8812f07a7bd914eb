//! CFG-1: the config file read again while the server runs (`SIGHUP`,
//! `systemctl reload allot`, `allot admin reload`, `POST /v1/admin/reload`).
//!
//! What changes live, and how:
//!
//! * `[[accounts]]`: the edits that turn the accounts the config declared
//!   before into those it declares now (creations, replacements, closings:
//!   `AccountBook::diff`) are applied to the live tree through the same
//!   path as the API's edits (ACC-1: checked by the book, stored and
//!   audited in one transaction, an engine input). Edits made through the
//!   API to accounts the file did not change are kept: the store is the
//!   truth (docs/accounts.md), the file's changes are edits to it;
//! * `[contract]`: an engine input ([`allot_core::engine::Input::Contract`],
//!   CFG-1), journaled like every input, so a replay sees it at its
//!   instant;
//! * `[alerts]` (the webhook is started again), `[telemetry]
//!   idle_threshold`, `[api]` (API-1's rates start afresh), `[identity]`'s
//!   grants, `munge`, `munge_socket` and `session_ttl` (every cached
//!   principal is resolved again).
//!
//! What cannot change live is refused with the reason, and then **nothing**
//! is applied: the clusters, pools and nodes (`[cluster]`, `[[clusters]]`;
//! nodes that appear join live by MNT-5), the executors, `[identity]
//! min_uid` and `[identity.oidc]`, `[telemetry] interval`, and the budget
//! periods (`Contract::restart_only`). The listen address, the store and
//! the policy are command-line options, not the file's: they change at a
//! restart. A file that does not read is refused with the loader's error
//! (file, line, key). Every applied change is logged and audited
//! (`action` `reload`, or the account edit's own action).

use std::path::PathBuf;

use allot_core::AccountBook;
use allot_trace::config::{Config, IdentityConfig};
use tokio::sync::{Mutex, oneshot};

use super::AppState;
use crate::scheduler::{Msg, Refusal, ReloadPlan as Plan};

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file does not read (the loader's error names file, line, key).
    #[error("nothing was reloaded: {0}")]
    Config(#[from] allot_trace::error::FormatError),
    /// Some change needs a restart.
    #[error("nothing was reloaded: {}", restart_words(.0))]
    Restart(Vec<(String, String)>),
    /// The scheduler refused (an account edit the tree does not take, the
    /// store unavailable).
    #[error("nothing was reloaded: {}", refusal_words(.0))]
    Refused(Refusal),
    #[error("nothing was reloaded: the scheduler has stopped")]
    Stopped,
}

fn restart_words(keys: &[(String, String)]) -> String {
    let list: Vec<String> = keys.iter().map(|(k, why)| format!("{k} changed ({why})")).collect();
    format!("{}. Undo these changes and reload again, or restart the server to apply the whole file", list.join("; "))
}

fn refusal_words(r: &Refusal) -> String {
    match r {
        Refusal::Invalid { field, message } => format!("[[accounts]]: {message} (field `{field}`)"),
        Refusal::NotFound(m)
        | Refusal::Conflict(m)
        | Refusal::Unavailable(m)
        | Refusal::Unauthorized(m)
        | Refusal::Forbidden(m) => m.clone(),
    }
}

/// A reload done: one line per change (empty: the file is unchanged).
#[derive(Debug, Default)]
pub struct Reloaded {
    pub changes: Vec<String>,
}

/// Reads the config again and applies what changed; one reload at a time.
pub struct Reloader {
    path: PathBuf,
    /// The config as last loaded (before executors filled in nodes).
    current: Mutex<Config>,
}

impl Reloader {
    pub fn new(path: PathBuf, loaded: Config) -> Reloader {
        Reloader { path, current: Mutex::new(loaded) }
    }

    /// The config file it reads.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Reads the file and applies its changes (CFG-1), all or nothing;
    /// the outcome is counted in the metrics.
    pub async fn reload(&self, app: &AppState, by: &str) -> Result<Reloaded, ReloadError> {
        let r = self.apply(app, by).await;
        if let Err(e) = &r {
            tracing::warn!(principal = by, rule = "CFG-1", "config reload refused: {e}");
        }
        app.metrics.config_reload(match &r {
            Ok(done) if done.changes.is_empty() => "unchanged",
            Ok(_) => "applied",
            Err(_) => "refused",
        });
        r
    }

    async fn apply(&self, app: &AppState, by: &str) -> Result<Reloaded, ReloadError> {
        let mut current = self.current.lock().await;
        let new = allot_trace::config::load_config(&self.path)?;
        let restart = restart_only(&current, &new);
        if !restart.is_empty() {
            return Err(ReloadError::Restart(restart));
        }
        let mut changes = Vec::new();
        let alerts = if new.alerts == current.alerts {
            None
        } else {
            let target = crate::webhook::Target::from_config(&new.alerts).map_err(|e| {
                allot_trace::error::FormatError::new(allot_trace::error::FormatKind::Config, new.path.clone(), e)
                    .in_field("alerts.webhook_url")
            })?;
            Some(target)
        };
        let plan = Plan {
            edits: AccountBook::seed(&current.accounts).diff(new.accounts.declared()),
            seed: new.accounts.declared().to_vec(),
            contract: (new.contract != current.contract).then_some(new.contract),
            alerts,
            telemetry: (new.telemetry != current.telemetry).then_some(new.telemetry),
        };
        let contract_lines = differences("contract", &current.contract, &new.contract);
        let alerts_lines = differences("alerts", &alerts_json(&current.alerts), &alerts_json(&new.alerts));
        let telemetry_lines =
            differences("telemetry.idle_threshold", &current.telemetry.idle_threshold, &new.telemetry.idle_threshold);
        let api_lines = differences("api", &api_json(&current.api), &api_json(&new.api));
        let identity_lines = differences("identity", &identity_json(&current.identity), &identity_json(&new.identity));
        let seed_changed = current.accounts.declared() != new.accounts.declared();
        if plan.edits.is_empty()
            && !seed_changed
            && plan.contract.is_none()
            && plan.alerts.is_none()
            && plan.telemetry.is_none()
            && api_lines.is_empty()
            && identity_lines.is_empty()
        {
            *current = new;
            tracing::info!(principal = by, "config reload: the file is unchanged");
            return Ok(Reloaded::default());
        }
        let (reply, answer) = oneshot::channel();
        app.tx
            .send(Msg::Reload { plan: Box::new(plan), by: by.to_string(), reply })
            .await
            .map_err(|_| ReloadError::Stopped)?;
        let accounts = answer.await.map_err(|_| ReloadError::Stopped)?.map_err(ReloadError::Refused)?;
        changes.extend(accounts);
        if !api_lines.is_empty() {
            app.limits.fair.reconfigure(new.api);
        }
        if !identity_lines.is_empty() {
            app.auth.set_identity(new.identity.clone());
        }
        let now = crate::clock::now() as i64;
        for (target, lines) in [
            ("contract", contract_lines),
            ("alerts", alerts_lines),
            ("telemetry", telemetry_lines),
            ("api", api_lines),
            ("identity", identity_lines),
        ] {
            if lines.is_empty() {
                continue;
            }
            let after = serde_json::json!({ "file": self.path.display().to_string(), "changes": lines });
            // Applied already: a store that fails now loses the entry, not
            // the change (the log below keeps it).
            if let Err(e) = app.store.insert_audit(now, by, "reload", target, &after).await {
                tracing::warn!(error = %e, target, "config reload applied; its audit entry could not be written");
            }
            changes.extend(lines);
        }
        for c in &changes {
            tracing::info!(principal = by, rule = "CFG-1", "config reload: {c}");
        }
        *current = new;
        Ok(Reloaded { changes })
    }
}

/// The keys that changed and cannot change live, each with why.
fn restart_only(old: &Config, new: &Config) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut need = |key: &str, why: &str| out.push((key.to_string(), why.to_string()));
    if old.cluster != new.cluster {
        need(
            "cluster",
            "the fleet's clusters, pools and nodes are set at start; a node that appears joins its pool live (MNT-5)",
        );
    }
    if old.executors != new.executors {
        need("clusters.executor", "each cluster's executor is built at start");
    }
    if old.identity.min_uid != new.identity.min_uid {
        need("identity.min_uid", "the executors check it on every launch since start");
    }
    if old.identity.oidc != new.identity.oidc {
        need("identity.oidc", "single sign-on is set up at start");
    }
    if old.telemetry.interval_s != new.telemetry.interval_s {
        need("telemetry.interval", "the executors' GPU sampling is started at start");
    }
    for key in old.contract.restart_only(&new.contract) {
        need(
            key,
            "the budget periods lay out the ledger's usage; a restart charges the history again under new periods (CFG-1)",
        );
    }
    out
}

/// `prefix.key: old -> new` for each leaf that differs between the JSON
/// forms of `old` and `new`.
fn differences<T: serde::Serialize>(prefix: &str, old: &T, new: &T) -> Vec<String> {
    let (a, b) = (serde_json::json!(old), serde_json::json!(new));
    let mut out = Vec::new();
    diff_values(prefix, &a, &b, &mut out);
    out
}

fn diff_values(at: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let none = Value::Null;
                diff_values(&format!("{at}.{k}"), x.get(k).unwrap_or(&none), y.get(k).unwrap_or(&none), out);
            }
        }
        _ if a != b => out.push(format!("{at}: {a} -> {b}")),
        _ => {}
    }
}

fn api_json(a: &allot_trace::config::ApiConfig) -> serde_json::Value {
    serde_json::json!({
        "requests_per_second": a.requests_per_second,
        "burst": a.burst,
        "max_in_flight": a.max_in_flight,
    })
}

/// The live part of `[identity]` (min_uid and oidc are refused above).
fn identity_json(i: &IdentityConfig) -> serde_json::Value {
    use allot_trace::config::Grantee;
    let grants: Vec<String> = i
        .grants
        .iter()
        .map(|g| {
            let to = match &g.to {
                Grantee::Group(x) => format!("group {x}"),
                Grantee::User(x) => format!("user {x}"),
            };
            format!("{to}: {} of [{}]", g.role, g.accounts.join(", "))
        })
        .collect();
    serde_json::json!({
        "munge": i.munge,
        "munge_socket": i.munge_socket,
        "session_ttl_s": i.session_ttl_s,
        "grants": grants,
    })
}

fn alerts_json(a: &allot_trace::config::AlertsConfig) -> serde_json::Value {
    serde_json::json!({ "webhook_url": a.webhook_url, "webhook_timeout_s": a.webhook_timeout_s })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_each_leaf_that_changed() {
        let a = serde_json::json!({"grace": 300, "min_slice": {"batch": 3600, "interactive": 0}});
        let b = serde_json::json!({"grace": 60, "min_slice": {"batch": 1800, "interactive": 0}});
        assert_eq!(
            differences("contract", &a, &b),
            ["contract.grace: 300 -> 60", "contract.min_slice.batch: 3600 -> 1800"]
        );
        assert!(differences("contract", &a, &a).is_empty());
    }
}
