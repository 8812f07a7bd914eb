//! The configuration file (docs/design.md §4): cluster pools, GPU types, the
//! account tree and the `[contract]` knobs, as TOML.
//!
//! Every table denies unknown keys (docs/style.md rule 15); only `[cluster]` with its pools
//! and `[[accounts]]` are required. Defaults are documented in
//! `docs/config.md`. Errors name the file, the line (from the TOML span where
//! there is one) and the dotted key, e.g.
//! ``cluster.toml:14: key `cluster.pools[1].name`: …``.
//!
//! A configuration made in memory (a generator's [`ConfigOut`]) goes through
//! the same checks without being written and read as TOML ([`config_from`]);
//! its errors name the key only.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::Path;

use allot_core::cluster::PoolPlacement;
use allot_core::{AccountSpec, AccountTree, AccountTreeError, Cluster, Contract, GpuType, GpuTypeId, PoolId, PoolSpec};
use serde::Deserialize;
use toml::Spanned;

use crate::bounds::{self, FloatBound, IntBound};
use crate::duration::parse_duration;
use crate::error::{FormatError, FormatKind};
use crate::write::{ConfigOut, write_config_toml};

mod api;
mod identity;
mod slurm;
mod telemetry;
pub use api::ApiConfig;
pub use identity::{
    GRANT_ROLES, Grant, Grantee, IdentityConfig, OIDC_CALLBACK_PATH, OIDC_SECRET_ENV, OidcConfig, unix_name,
};
pub use telemetry::TelemetryConfig;

/// A loaded configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// The fleet: every cluster of the config, pools in config order.
    pub cluster: Cluster,
    /// Each cluster's executor settings for `allot serve`, by
    /// [`allot_core::cluster::ClusterId`] (`None`: not given; the command
    /// line decides).
    pub executors: Vec<Option<ExecutorConfig>>,
    pub accounts: AccountTree,
    pub contract: Contract,
    /// `[alerts]`: where `allot serve` posts budget threshold events.
    pub alerts: AlertsConfig,
    /// `[telemetry]`: how `allot serve` samples the GPUs of running attempts.
    pub telemetry: TelemetryConfig,
    /// `[api]`: each principal's fair share of `allot serve`'s API (API-1).
    pub api: ApiConfig,
    /// `[identity]` and `[[grants]]`: people as Unix users and what their
    /// groups grant (docs/security.md).
    pub identity: IdentityConfig,
    /// `[provenance] assumed`: what the writer of the config (an importer,
    /// the generator) assumed where its source says nothing; reports list
    /// them before their results.
    pub assumed: Vec<String>,
    /// The file it was read from, as given.
    pub path: String,
    /// The raw TOML (reports print it).
    pub text: String,
}

/// How `allot serve` runs one cluster's workloads (`[clusters.executor]`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutorConfig {
    /// `local`, `slurm` or `none`.
    pub kind: String,
    /// Slurm: the partition of the cluster's nodes.
    pub partition: Option<String>,
    /// Slurm: the `slurm.conf` of a separate Slurm cluster (`SLURM_CONF`).
    pub slurm_conf: Option<String>,
    /// Slurm: more `sbatch` options for every job.
    #[serde(default)]
    pub sbatch_args: Vec<String>,
    /// Kubernetes: the API server's URL (`https://…`). Never inferred from
    /// a kubeconfig or the environment.
    pub url: Option<String>,
    /// Kubernetes: the CA certificate (PEM) the API server's certificate is
    /// checked against.
    pub ca_file: Option<String>,
    /// Kubernetes: a file holding Allot's bearer token (re-read when it
    /// changes, as a projected service-account token does).
    pub token_file: Option<String>,
    /// Kubernetes: the label selector of the Nodes that are this cluster's
    /// (e.g. `nvidia.com/gpu.present=true`); absent: every Node.
    pub node_selector: Option<String>,
    /// Kubernetes: the label selector of the managed Jobs this server runs
    /// (default `allot.dev/managed=true`; add a label to run several
    /// Allots on one cluster, each its own Jobs).
    pub job_selector: Option<String>,
    /// Kubernetes: the extended resource that counts GPUs (default
    /// `nvidia.com/gpu`).
    pub gpu_resource: Option<String>,
    /// Kubernetes: the Node label naming the GPU product (default
    /// `nvidia.com/gpu.product`).
    pub product_label: Option<String>,
    /// Kubernetes: the Node label naming its rack or topology block
    /// (optional; logged with the node's inventory).
    pub topology_label: Option<String>,
    /// Kubernetes: the `schedulerName` Allot's pods carry (default `allot`):
    /// kube-scheduler leaves them to Allot, which binds each itself.
    pub scheduler_name: Option<String>,
    /// Kubernetes: the accounts each namespace's Jobs may charge (an
    /// account and everything below it).
    #[serde(default)]
    pub namespaces: std::collections::BTreeMap<String, Vec<String>>,
    /// Kubernetes: the accounts each user (as the API server authenticated
    /// the Job's creator) may charge, in any namespace.
    #[serde(default)]
    pub users: std::collections::BTreeMap<String, Vec<String>>,
    /// Kubernetes (K8S-12): the images the Jobs Allot makes of submissions
    /// may run, per namespace of `namespaces`: an image as written, or a
    /// prefix ending in `*` (`registry.example.org/team/*`); `["*"]`: any.
    /// A namespace not listed takes no image submissions.
    #[serde(default)]
    pub images: std::collections::BTreeMap<String, Vec<String>>,
}

impl ExecutorConfig {
    /// Whether any Kubernetes key is set.
    fn has_kubernetes_keys(&self) -> bool {
        self.url.is_some()
            || self.ca_file.is_some()
            || self.token_file.is_some()
            || self.node_selector.is_some()
            || self.job_selector.is_some()
            || self.gpu_resource.is_some()
            || self.product_label.is_some()
            || self.topology_label.is_some()
            || self.scheduler_name.is_some()
            || !self.namespaces.is_empty()
            || !self.users.is_empty()
            || !self.images.is_empty()
    }
}

/// `[alerts]` (docs/config.md): the budget-alert webhook of `allot serve`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertsConfig {
    /// `http://` or `https://` URL each budget threshold event is POSTed
    /// to as JSON; `None`: no webhook.
    pub webhook_url: Option<String>,
    /// How long one delivery attempt may take, seconds (default 10).
    pub webhook_timeout_s: u64,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        AlertsConfig { webhook_url: None, webhook_timeout_s: 10 }
    }
}

/// Executor kinds a config may name.
pub const EXECUTOR_KINDS: [&str; 4] = ["local", "slurm", "kubernetes", "none"];

/// Reads and validates a config file.
pub fn load_config(path: &Path) -> Result<Config, FormatError> {
    let text = std::fs::read_to_string(path).map_err(|e| FormatError::io(FormatKind::Config, path, e))?;
    parse_config(&text, &path.display().to_string())
}

/// Parses and validates config text; `file` names it in errors.
pub fn parse_config(text: &str, file: &str) -> Result<Config, FormatError> {
    let ctx = Ctx { text, file, located: true };
    let raw: RawConfig = toml::from_str(text).map_err(|e| ctx.toml_error(&e))?;
    build_config(&ctx, &raw, text.to_string())
}

/// Checks a configuration made in memory as [`parse_config`] checks a file;
/// `file` names it in errors. Its text (what reports print) is the TOML
/// [`write_config_toml`] writes for it.
pub fn config_from(out: &ConfigOut, file: &str) -> Result<Config, FormatError> {
    let ctx = Ctx { text: "", file, located: false };
    let mut seen = BTreeMap::new();
    for (name, w) in &out.gpu_types {
        if seen.insert(name.clone(), Spanned::new(0..0, *w)).is_some() {
            return Err(ctx.err(format!("gpu_types.{name}"), None, "gpu type is declared twice"));
        }
    }
    let mut toml = Vec::new();
    write_config_toml(&mut toml, out).expect("writing to memory does not fail");
    let text = String::from_utf8(toml).expect("the config writer writes UTF-8");
    build_config(&ctx, &raw_of(out, seen), text)
}

fn build_config(ctx: &Ctx<'_>, raw: &RawConfig, text: String) -> Result<Config, FormatError> {
    let (cluster, executors) = build_fleet(ctx, raw)?;
    let accounts = build_accounts(ctx, &raw.accounts, &cluster)?;
    let mut contract = build_contract(ctx, &raw.contract)?;
    contract.slurm = slurm::build_slurm(ctx, raw.slurm.as_ref(), &cluster)?;
    let alerts = build_alerts(ctx, raw.alerts.as_ref())?;
    let telemetry = telemetry::build_telemetry(ctx, raw.telemetry.as_ref())?;
    let api = api::build_api(ctx, raw.api.as_ref())?;
    let identity = identity::build_identity(ctx, raw.identity.as_ref(), &raw.grants, |p| accounts.get(p).is_some())?;
    let path = ctx.file.to_string();
    let assumed = raw.provenance.as_ref().map(|p| p.assumed.clone()).unwrap_or_default();
    Ok(Config { cluster, executors, accounts, contract, alerts, telemetry, api, identity, assumed, path, text })
}

/// The raw form of a configuration made in memory, as the TOML reader would
/// give it (no spans: nothing was read).
fn raw_of(out: &ConfigOut, gpu_types: BTreeMap<String, Spanned<f64>>) -> RawConfig {
    fn at<T>(v: T) -> Spanned<T> {
        Spanned::new(0..0, v)
    }
    let c = &out.contract;
    let pool = |p: &crate::write::PoolOut| RawPool {
        name: at(p.name.clone()),
        gpu: at(p.gpu.clone()),
        nodes: at(p.nodes),
        gpus_per_node: at(p.gpus_per_node),
        rack_size: Some(at(p.rack_size)),
        shared: p.shared,
        placement: None,
    };
    let fleet = out.fleet();
    let (cluster, clusters) = if fleet.is_empty() {
        (
            Some(RawCluster {
                name: Some(at(out.cluster_name.clone())),
                pools: out.pools.iter().map(pool).collect(),
                executor: None,
            }),
            None,
        )
    } else {
        let clusters = fleet
            .into_iter()
            .map(|(name, pools)| RawCluster {
                name: Some(at(name.to_string())),
                pools: pools.into_iter().map(pool).collect(),
                executor: None,
            })
            .collect();
        (None, Some(clusters))
    };
    let accounts = out
        .accounts
        .iter()
        .map(|a| RawAccount {
            path: at(a.path.clone()),
            share: a.share.map(at),
            budget_gpu_hours: a.budget_gpu_hours.map(at),
            impact: a.impact.map(at),
            legacy_pools: a.legacy_pools.clone().map(at),
            max_service_gpus: a.max_service_gpus,
            users: a.users.iter().map(|(u, v)| (u.clone(), at(*v))).collect(),
            user_budgets: a.user_budgets.iter().map(|(u, v)| (u.clone(), at(*v))).collect(),
            closed: false,
        })
        .collect();
    let secs = |s: u64| Some(at(Secs(s)));
    let per_class = |p: &allot_core::contract::PerClass<Option<u64>>| {
        let raw = RawPerClass {
            batch: p.batch.and_then(secs),
            interactive: p.interactive.and_then(secs),
            service: p.service.and_then(secs),
        };
        (p.batch.is_some() || p.interactive.is_some() || p.service.is_some()).then_some(raw)
    };
    RawConfig {
        name: (!clusters.as_ref().is_none_or(Vec::is_empty)).then(|| at(out.cluster_name.clone())),
        cluster,
        clusters,
        gpu_types,
        accounts,
        contract: RawContract {
            budget_period: match c.budget_calendar {
                allot_core::calendar::Calendar::Months { .. } => Some(at(Period::Month)),
                allot_core::calendar::Calendar::Fixed { .. } => Some(at(Period::Every(Secs(c.budget_period)))),
            },
            budget_period_start: match c.budget_calendar {
                allot_core::calendar::Calendar::Fixed { anchor } if anchor != 0 => {
                    Some(at(allot_core::calendar::format_instant(anchor)))
                }
                _ => None,
            },
            budget_timezone: match c.budget_calendar {
                allot_core::calendar::Calendar::Months { utc_offset } if utc_offset != 0 => {
                    Some(at(allot_core::calendar::format_utc_offset(utc_offset)))
                }
                _ => None,
            },
            budget_carry_over: (c.budget_carry_over > 0.0).then(|| at(c.budget_carry_over)),
            budget_alerts: Some(at(c.budget_alerts.as_slice().to_vec())),
            usage_half_life: secs(c.usage_half_life),
            min_slice: Some(RawPerClass {
                batch: secs(c.min_slice.batch),
                interactive: secs(c.min_slice.interactive),
                service: secs(c.min_slice.service),
            }),
            grace: secs(c.grace),
            interactive_max_gpus: Some(c.interactive_max_gpus),
            interactive_max_duration: secs(c.interactive_max_duration),
            scheduling_interval: secs(c.scheduling_interval),
            impact_weighting: c.impact_weighting.then(|| at("on".to_string())),
            keep_claims: c.keep_claims.then(|| at("on".to_string())),
            swap_margin: (c.swap_margin > 0.0).then(|| at(c.swap_margin)),
            checkpoint_wait: (c.checkpoint_wait > 0).then(|| at(Secs(c.checkpoint_wait))),
            time_limit: per_class(&c.time_limit),
            max_time_limit: per_class(&c.max_time_limit),
            idle_threshold: Some(RawPerClassF {
                batch: Some(at(c.idle_reclaim.batch.map_or(0.0, |i| i.threshold))),
                interactive: Some(at(c.idle_reclaim.interactive.map_or(0.0, |i| i.threshold))),
                service: Some(at(c.idle_reclaim.service.map_or(0.0, |i| i.threshold))),
            }),
            idle_after: per_class(&idle_times(&c.idle_reclaim, |i| i.after)),
            idle_warning: per_class(&idle_times(&c.idle_reclaim, |i| i.warning)),
        },
        alerts: None,
        telemetry: None,
        api: None,
        identity: None,
        grants: Vec::new(),
        slurm: slurm::raw_of(out),
        provenance: (!out.assumed.is_empty()).then(|| RawProvenance { assumed: out.assumed.clone() }),
    }
}

// ---------------------------------------------------------------- raw TOML

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    /// The fleet's name (with `[[clusters]]`).
    name: Option<Spanned<String>>,
    /// A fleet of one.
    cluster: Option<RawCluster>,
    /// A fleet of several clusters.
    clusters: Option<Vec<RawCluster>>,
    #[serde(default)]
    gpu_types: BTreeMap<String, Spanned<f64>>,
    accounts: Vec<RawAccount>,
    #[serde(default)]
    contract: RawContract,
    alerts: Option<RawAlerts>,
    telemetry: Option<telemetry::RawTelemetry>,
    api: Option<api::RawApi>,
    identity: Option<identity::RawIdentity>,
    #[serde(default)]
    grants: Vec<identity::RawGrant>,
    /// `[slurm]`: the `slurm` policy's knobs.
    slurm: Option<slurm::RawSlurm>,
    provenance: Option<RawProvenance>,
}

/// `[provenance]`, written by `allot trace import` and `allot trace gen`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvenance {
    #[serde(default)]
    assumed: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlerts {
    webhook_url: Option<Spanned<String>>,
    webhook_timeout: Option<Spanned<Secs>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    name: Option<Spanned<String>>,
    pools: Vec<RawPool>,
    executor: Option<Spanned<ExecutorConfig>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPool {
    name: Spanned<String>,
    gpu: Spanned<String>,
    nodes: Spanned<u32>,
    gpus_per_node: Spanned<u32>,
    rack_size: Option<Spanned<u32>>,
    #[serde(default)]
    shared: bool,
    /// `pack` (default) or `spread` (rule PLACE-7).
    placement: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAccount {
    path: Spanned<String>,
    share: Option<Spanned<f64>>,
    budget_gpu_hours: Option<Spanned<f64>>,
    impact: Option<Spanned<f64>>,
    legacy_pools: Option<Spanned<Vec<String>>>,
    max_service_gpus: Option<u32>,
    /// User shares of the account's own work (FS-2): `users = { alice = 2 }`.
    #[serde(default)]
    users: BTreeMap<String, Spanned<f64>>,
    /// Closed (ACC-2): as `allot accounts export` writes it.
    #[serde(default)]
    closed: bool,
    /// User budgets in the account, NGH per period (BUD-6):
    /// `user_budgets = { alice = 50 }`.
    #[serde(default)]
    user_budgets: BTreeMap<String, Spanned<f64>>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawContract {
    budget_period: Option<Spanned<Period>>,
    budget_period_start: Option<Spanned<String>>,
    budget_timezone: Option<Spanned<String>>,
    budget_carry_over: Option<Spanned<f64>>,
    budget_alerts: Option<Spanned<Vec<f64>>>,
    usage_half_life: Option<Spanned<Secs>>,
    min_slice: Option<RawPerClass>,
    grace: Option<Spanned<Secs>>,
    interactive_max_gpus: Option<u32>,
    interactive_max_duration: Option<Spanned<Secs>>,
    scheduling_interval: Option<Spanned<Secs>>,
    /// `off` (default) or `on` (rule IMP-3).
    impact_weighting: Option<Spanned<String>>,
    /// `off` (default) or `on` (rule CON-10).
    keep_claims: Option<Spanned<String>>,
    /// CON-11: 0 (default) to 0.9.
    swap_margin: Option<Spanned<f64>>,
    /// CON-12: 0 (default, off) or how long a swap waits for a checkpoint.
    checkpoint_wait: Option<Spanned<Secs>>,
    /// CON-6: default time limit per class (none by default).
    time_limit: Option<RawPerClass>,
    /// CON-6: largest time limit per class (none by default).
    max_time_limit: Option<RawPerClass>,
    /// CON-9: utilisation (0..=1) below which GPUs are idle, per class; 0
    /// turns idle reclaim off for the class.
    idle_threshold: Option<RawPerClassF>,
    /// CON-9: idle time before the warning, per class.
    idle_after: Option<RawPerClass>,
    /// CON-9: time from the warning to the signal, per class.
    idle_warning: Option<RawPerClass>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
/// A number per class (`{ interactive = 0.05 }`); a class left out keeps
/// its default.
struct RawPerClassF {
    batch: Option<Spanned<f64>>,
    interactive: Option<Spanned<f64>>,
    service: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
/// A duration per class (`{ batch = "2h", interactive = "8h" }`); a class
/// left out keeps its default.
struct RawPerClass {
    batch: Option<Spanned<Secs>>,
    interactive: Option<Spanned<Secs>>,
    service: Option<Spanned<Secs>>,
}

impl RawPerClass {
    fn get(&self, class: allot_core::Class) -> Option<&Spanned<Secs>> {
        match class {
            allot_core::Class::Batch => self.batch.as_ref(),
            allot_core::Class::Interactive => self.interactive.as_ref(),
            allot_core::Class::Service => self.service.as_ref(),
        }
    }
}

/// A duration: a string such as `"2h"` or an integer number of seconds.
#[derive(Copy, Clone)]
struct Secs(u64);

/// Reads a [`Secs`]; [`Period`] reads through it too.
struct SecsVisitor;

impl serde::de::Visitor<'_> for SecsVisitor {
    type Value = Secs;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a duration such as \"30s\", \"2h\" or \"7d\", or an integer number of seconds")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Secs, E> {
        parse_duration(v).map(Secs).map_err(E::custom)
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Secs, E> {
        Ok(Secs(v))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Secs, E> {
        u64::try_from(v).map(Secs).map_err(|_| E::custom(format!("invalid duration {v}: must not be negative")))
    }
}

impl<'de> Deserialize<'de> for Secs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SecsVisitor)
    }
}

/// `budget_period`: a duration, or `"month"` for calendar months (BUD-4).
#[derive(Copy, Clone)]
enum Period {
    Every(Secs),
    Month,
}

impl<'de> Deserialize<'de> for Period {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = KeywordOrSecs {
            keyword: "month",
            expecting: "\"month\", a duration such as \"7d\", or an integer number of seconds",
        };
        Ok(d.deserialize_any(v)?.map_or(Period::Month, Period::Every))
    }
}

/// Reads a duration ([`Secs`]), or `keyword` (`None`).
struct KeywordOrSecs {
    keyword: &'static str,
    expecting: &'static str,
}

impl serde::de::Visitor<'_> for KeywordOrSecs {
    type Value = Option<Secs>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.expecting)
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Option<Secs>, E> {
        if v == self.keyword {
            return Ok(None);
        }
        SecsVisitor.visit_str(v).map(Some)
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Option<Secs>, E> {
        SecsVisitor.visit_u64(v).map(Some)
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Option<Secs>, E> {
        SecsVisitor.visit_i64(v).map(Some)
    }
}

// ---------------------------------------------------------------- errors

struct Ctx<'a> {
    text: &'a str,
    file: &'a str,
    /// Whether spans are offsets into `text` (false for a config made in memory).
    located: bool,
}

impl Ctx<'_> {
    fn line_of(&self, offset: usize) -> Option<u64> {
        let end = offset.min(self.text.len());
        self.located.then(|| self.text.as_bytes()[..end].iter().filter(|b| **b == b'\n').count() as u64 + 1)
    }

    /// ` on line n`, when the config has lines.
    fn on_line(&self, offset: usize) -> String {
        self.line_of(offset).map_or_else(String::new, |l| format!(" on line {l}"))
    }

    fn err(&self, key: impl Into<String>, span: Option<Range<usize>>, message: impl Into<String>) -> FormatError {
        let e = FormatError::new(FormatKind::Config, self.file, message).in_field(key);
        match span.and_then(|s| self.line_of(s.start)) {
            Some(line) => e.at_line(line),
            None => e,
        }
    }

    /// A number within its bound (`crate::bounds`), or an error at its key
    /// and line saying `what` must be.
    fn float(&self, key: String, what: &str, v: &Spanned<f64>, b: FloatBound) -> Result<f64, FormatError> {
        b.check(*v.get_ref()).map_err(|m| self.err(key, Some(v.span()), format!("{what} {m}")))
    }

    /// A whole number within its bound, or an error at its key and line.
    fn int(&self, key: String, v: &Spanned<u32>, b: IntBound) -> Result<u32, FormatError> {
        b.check(u64::from(*v.get_ref())).map(|_| *v.get_ref()).map_err(|m| self.err(key, Some(v.span()), m))
    }

    /// A TOML syntax or type error: line from its span, key found at that span.
    /// What is wrong where the TOML parser stopped without saying (it does
    /// so for control characters, in comments for instance).
    fn unexplained(&self, e: &toml::de::Error) -> String {
        let at = e.span().map_or(0, |s| s.start);
        match self.text.get(at..).and_then(|t| t.chars().next()) {
            Some(c) if c.is_control() => format!("control character {:?} is not allowed here", c),
            Some(c) => format!("invalid toml at {c:?}"),
            None => "invalid toml at the end of the file".to_string(),
        }
    }

    fn toml_error(&self, e: &toml::de::Error) -> FormatError {
        let message = e
            .message()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
            .replace("unknown field", "unknown key")
            .replace("missing field", "missing key");
        let message = if message.is_empty() { self.unexplained(e) } else { message };
        let mut out = FormatError::new(FormatKind::Config, self.file, message);
        let missing = e.message().strip_prefix("missing field `").and_then(|r| r.split('`').next());
        match (e.span(), missing) {
            // A key missing at the top level: the span is empty at 0.
            (Some(span), Some(key)) if span.is_empty() && span.start == 0 => out.field = Some(key.to_string()),
            // A key missing in a table: the span is the table's header.
            (Some(span), Some(key)) => {
                out.line = self.line_of(span.start);
                out.field = Some(key_at(self.text, span.start).map_or(key.to_string(), |t| format!("{t}.{key}")));
            }
            (Some(span), None) => {
                out.line = self.line_of(span.start);
                out.field = key_at(self.text, span.start);
            }
            (None, _) => out.field = missing.map(str::to_string),
        }
        out
    }
}

/// The dotted key (with `[i]` for arrays of tables) that the byte `offset`
/// of a TOML document belongs to, found from the table headers above it and
/// the `key =` before it. Best effort: used only to name keys in errors.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let offset = offset.min(text.len());
    let (header, body_start) = header_before(text, offset);
    if body_start > offset {
        // The offset is on the header line itself.
        return header;
    }
    let mut path: Vec<String> = header.into_iter().collect();
    path.extend(keys_in_body(&text[body_start..offset]));
    // The offset may point at a key itself (e.g. an unknown key).
    let ahead = &text[offset..];
    let word: String = ahead.chars().take_while(|c| is_key_char(*c)).collect();
    if !word.is_empty() && ahead[word.len()..].trim_start_matches([' ', '\t']).starts_with('=') {
        path.push(word);
    }
    (!path.is_empty()).then(|| path.join("."))
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// The innermost table header at or before `offset` (arrays of tables get
/// their index) and the byte where its body starts.
fn header_before(text: &str, offset: usize) -> (Option<String>, usize) {
    let mut header = None;
    let mut body_start = 0;
    let mut counts: HashMap<String, usize> = HashMap::new();
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        if start > offset {
            break;
        }
        let t = line.trim();
        if let Some(name) = t.strip_prefix("[[").and_then(|r| r.split("]]").next()) {
            let name = name.trim().to_string();
            let n = counts.entry(name.clone()).or_insert(0);
            header = Some(format!("{name}[{n}]"));
            *n += 1;
            body_start = start + line.len();
        } else if let Some(name) = t.strip_prefix('[').and_then(|r| r.split(']').next()) {
            header = Some(name.trim().to_string());
            body_start = start + line.len();
        }
        start += line.len();
    }
    (header, body_start)
}

/// The open keys at the end of `body`: enclosing inline tables, then the
/// key whose value is being written.
fn keys_in_body(body: &str) -> Vec<String> {
    let mut stack: Vec<String> = Vec::new();
    let mut containers: Vec<char> = Vec::new();
    let mut pending: Option<String> = None;
    let mut token = String::new();
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' => {
                let mut escaped = false;
                for d in chars.by_ref() {
                    if d == c && !escaped {
                        break;
                    }
                    escaped = c == '"' && d == '\\' && !escaped;
                }
            }
            '#' => while chars.next_if(|d| *d != '\n').is_some() {},
            '=' => {
                pending = Some(token.trim().to_string());
                token.clear();
            }
            '{' => {
                containers.push('{');
                stack.push(pending.take().unwrap_or_default());
            }
            '}' => {
                containers.pop();
                stack.pop();
                pending = None;
            }
            '[' => containers.push('['),
            ']' => {
                containers.pop();
            }
            ',' if containers.last() == Some(&'{') => {
                pending = None;
                token.clear();
            }
            '\n' => {
                if containers.is_empty() {
                    pending = None;
                }
                token.clear();
            }
            c if is_key_char(c) => token.push(c),
            _ => {}
        }
    }
    stack.into_iter().filter(|k| !k.is_empty()).chain(pending).collect()
}

// ---------------------------------------------------------------- cluster

/// The fleet: one `[cluster]` (a fleet of one) or `[[clusters]]`, with
/// the clusters' executor settings.
fn build_fleet(ctx: &Ctx<'_>, raw: &RawConfig) -> Result<(Cluster, Vec<Option<ExecutorConfig>>), FormatError> {
    let mut gpu_types = Vec::new();
    for (name, w) in &raw.gpu_types {
        let weight = ctx.float(format!("gpu_types.{name}"), "weight", w, bounds::GPU_WEIGHT)?;
        gpu_types.push(GpuType { name: name.clone(), weight });
    }
    let (list, single): (Vec<&RawCluster>, bool) = match (&raw.cluster, &raw.clusters) {
        (Some(c), None) => (vec![c], true),
        (None, Some(cs)) if !cs.is_empty() => (cs.iter().collect(), false),
        (None, Some(_)) => return Err(ctx.err("clusters", None, "at least one cluster is required")),
        (None, None) => return Err(ctx.err("cluster", None, "missing key: a [cluster] or [[clusters]] is required")),
        (Some(_), Some(_)) => {
            return Err(ctx.err("clusters", None, "give either one [cluster] or [[clusters]], not both"));
        }
    };
    if list.len() > allot_core::cluster::MAX_CLUSTERS {
        let msg = format!("at most {} clusters, got {}", allot_core::cluster::MAX_CLUSTERS, list.len());
        return Err(ctx.err("clusters", None, msg));
    }
    if let Some(n) = raw.name.as_ref().filter(|_| single) {
        return Err(ctx.err("name", Some(n.span()), "the fleet's name goes with [[clusters]]; name a [cluster] in it"));
    }
    let mut clusters = Vec::with_capacity(list.len());
    let mut placements = Vec::new();
    let mut executors = Vec::with_capacity(list.len());
    let mut names: HashMap<&str, usize> = HashMap::new();
    for (ci, c) in list.iter().enumerate() {
        let at = if single { "cluster".to_string() } else { format!("clusters[{ci}]") };
        let name = cluster_name(ctx, &at, c, single)?;
        if let Some(first) = names.insert(name, ci) {
            let msg = format!("cluster {name:?} is declared twice (first as clusters[{first}])");
            return Err(ctx.err(format!("{at}.name"), c.name.as_ref().map(Spanned::span), msg));
        }
        if c.pools.is_empty() {
            return Err(ctx.err(format!("{at}.pools"), None, "at least one pool is required"));
        }
        let mut specs = Vec::with_capacity(c.pools.len());
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, p) in c.pools.iter().enumerate() {
            let key = format!("{at}.pools[{i}]");
            let pname = p.name.get_ref();
            check_pool_name(ctx, &key, &p.name)?;
            if let Some(first) = seen.insert(pname, i) {
                let first_line = ctx.on_line(c.pools[first].name.span().start);
                let msg = format!("pool {pname:?} is declared twice (first as {at}.pools[{first}]{first_line})");
                return Err(ctx.err(format!("{key}.name"), Some(p.name.span()), msg));
            }
            let gpu = resolve_gpu_type(ctx, &key, &p.gpu, &mut gpu_types)?;
            specs.push(pool_spec(ctx, &key, p, gpu)?);
            placements.push(pool_placement(ctx, &key, p)?);
        }
        executors.push(c.executor.as_ref().map(|e| executor(ctx, &at, e)).transpose()?);
        clusters.push((name.to_string(), specs));
    }
    let fleet_name = match &raw.name {
        _ if single => clusters[0].0.clone(),
        Some(n) if n.get_ref().trim().is_empty() => return Err(ctx.err("name", Some(n.span()), "must not be empty")),
        Some(n) => n.get_ref().clone(),
        None => "fleet".to_string(),
    };
    let mut cluster = Cluster::fleet(fleet_name, gpu_types, clusters);
    for (i, placement) in placements.into_iter().enumerate() {
        cluster.set_placement(PoolId(i as u32), placement);
    }
    Ok((cluster, executors))
}

/// A cluster's name: `cluster` by default for a single `[cluster]`;
/// required in `[[clusters]]`; letters, digits, `_`, `.` or `-`.
fn cluster_name<'a>(ctx: &Ctx<'_>, at: &str, c: &'a RawCluster, single: bool) -> Result<&'a str, FormatError> {
    let key = format!("{at}.name");
    let Some(n) = &c.name else {
        return if single { Ok("cluster") } else { Err(ctx.err(key, None, "missing key: each cluster needs a name")) };
    };
    let v = n.get_ref().as_str();
    if v.trim().is_empty() {
        return Err(ctx.err(key, Some(n.span()), "must not be empty"));
    }
    if !single && !v.chars().all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '_' | '.' | '-')) {
        let msg = format!(
            "invalid cluster name {v:?}: use letters, digits, '_', '.' or '-' (nodes are shown as <cluster>/<node>)"
        );
        return Err(ctx.err(key, Some(n.span()), msg));
    }
    Ok(v)
}

/// A cluster's `[clusters.executor]`: a known kind, Slurm keys only for Slurm.
fn executor(ctx: &Ctx<'_>, at: &str, e: &Spanned<ExecutorConfig>) -> Result<ExecutorConfig, FormatError> {
    let v = e.get_ref();
    if !EXECUTOR_KINDS.contains(&v.kind.as_str()) {
        let msg = format!("unknown executor {:?} (use {})", v.kind, EXECUTOR_KINDS.join(", "));
        return Err(ctx.err(format!("{at}.executor.kind"), Some(e.span()), msg));
    }
    if v.kind != "slurm" && (v.partition.is_some() || v.slurm_conf.is_some() || !v.sbatch_args.is_empty()) {
        let msg = format!("partition, slurm_conf and sbatch_args are for the slurm executor, not {:?}", v.kind);
        return Err(ctx.err(format!("{at}.executor"), Some(e.span()), msg));
    }
    if v.kind != "kubernetes" && v.has_kubernetes_keys() {
        let msg = format!(
            "url, ca_file, token_file, node_selector, job_selector, gpu_resource, product_label, topology_label, scheduler_name, \
             namespaces, users and images are for the kubernetes executor, not {:?}",
            v.kind
        );
        return Err(ctx.err(format!("{at}.executor"), Some(e.span()), msg));
    }
    if v.kind == "kubernetes" {
        for (key, value) in [("url", &v.url), ("ca_file", &v.ca_file), ("token_file", &v.token_file)] {
            if value.as_deref().is_none_or(|s| s.trim().is_empty()) {
                let msg = "missing key: a kubernetes cluster needs url, ca_file and token_file \
                           (Allot never falls back to a kubeconfig)";
                return Err(ctx.err(format!("{at}.executor.{key}"), Some(e.span()), msg));
            }
        }
        if let Some(u) = &v.url
            && !u.starts_with("https://")
        {
            let msg = format!("the API server's url must be https://…, got {u:?}");
            return Err(ctx.err(format!("{at}.executor.url"), Some(e.span()), msg));
        }
        for (ns, accounts) in v
            .namespaces
            .iter()
            .map(|(k, a)| (format!("namespaces.{k}"), a))
            .chain(v.users.iter().map(|(k, a)| (format!("users.{k:?}"), a)))
        {
            if let Some(bad) = accounts.iter().find(|a| a.trim().is_empty() || a.starts_with('/') || a.ends_with('/')) {
                let msg = format!("{bad:?} is not an account path (e.g. \"org/team\")");
                return Err(ctx.err(format!("{at}.executor.{ns}"), Some(e.span()), msg));
            }
        }
        for (ns, patterns) in &v.images {
            let key = format!("{at}.executor.images.{ns}");
            if !v.namespaces.contains_key(ns) {
                let msg = format!("{ns:?} is not a namespace of [clusters.executor.namespaces]");
                return Err(ctx.err(key, Some(e.span()), msg));
            }
            if let Some(msg) = patterns.iter().find_map(|p| image_pattern_error(p)) {
                return Err(ctx.err(key, Some(e.span()), msg));
            }
        }
    }
    Ok(v.clone())
}

/// What is wrong with an entry of `images`, if anything: it is an image
/// reference (no white space or control character) with at most one `*`,
/// only at its end.
fn image_pattern_error(p: &str) -> Option<String> {
    if p.is_empty() || p.len() > 1024 || p.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some(format!("{p:?} is not an image (e.g. \"registry.example.org/team/*\")"));
    }
    match p.find('*') {
        Some(i) if i + 1 != p.len() => {
            Some(format!("{p:?}: a * stands only at its end (a prefix such as \"registry.example.org/team/*\")"))
        }
        _ => None,
    }
}

/// How the pool places `nodes = 0` workloads: `pack` (default) or `spread`.
fn pool_placement(ctx: &Ctx<'_>, key: &str, p: &RawPool) -> Result<PoolPlacement, FormatError> {
    let Some(v) = &p.placement else {
        return Ok(PoolPlacement::default());
    };
    PoolPlacement::parse(v.get_ref()).ok_or_else(|| {
        let msg = format!("unknown placement {:?} (use pack or spread)", v.get_ref());
        ctx.err(format!("{key}.placement"), Some(v.span()), msg)
    })
}

fn check_pool_name(ctx: &Ctx<'_>, at: &str, name: &Spanned<String>) -> Result<(), FormatError> {
    let key = format!("{at}.name");
    let n = name.get_ref();
    if n.is_empty() {
        return Err(ctx.err(key, Some(name.span()), "pool name must not be empty"));
    }
    if n.contains('-') {
        let msg = format!(
            "invalid pool name {n:?}: '-' is not allowed because nodes are named <pool>-<index> and split at \
             the last dash; use letters, digits, '_' or '.'"
        );
        return Err(ctx.err(key, Some(name.span()), msg));
    }
    if !n.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.')) {
        let msg = format!("invalid pool name {n:?}: use letters, digits, '_' or '.'");
        return Err(ctx.err(key, Some(name.span()), msg));
    }
    Ok(())
}

/// The pool's GPU type; one not listed in `[gpu_types]` is added with weight 1.
fn resolve_gpu_type(
    ctx: &Ctx<'_>,
    at: &str,
    gpu: &Spanned<String>,
    types: &mut Vec<GpuType>,
) -> Result<GpuTypeId, FormatError> {
    let name = gpu.get_ref();
    let key = format!("{at}.gpu");
    if name.trim().is_empty() {
        return Err(ctx.err(key, Some(gpu.span()), "gpu type must not be empty"));
    }
    if let Some(pos) = types.iter().position(|t| &t.name == name) {
        return Ok(GpuTypeId(pos as u16));
    }
    if let Some(t) = types.iter().find(|t| t.name.eq_ignore_ascii_case(name)) {
        let msg = format!("gpu type {name:?} differs only in case from {:?} in [gpu_types]", t.name);
        return Err(ctx.err(key, Some(gpu.span()), msg));
    }
    types.push(GpuType { name: name.clone(), weight: 1.0 });
    Ok(GpuTypeId((types.len() - 1) as u16))
}

fn pool_spec(ctx: &Ctx<'_>, at: &str, p: &RawPool, gpu: GpuTypeId) -> Result<PoolSpec, FormatError> {
    let key = |k: &str| format!("{at}.{k}");
    let nodes = ctx.int(key("nodes"), &p.nodes, bounds::POOL_NODES)?;
    let per_node = *p.gpus_per_node.get_ref();
    if !(1..=allot_core::cluster::MAX_GPUS_PER_NODE).contains(&per_node) {
        let msg = format!("must be between 1 and {}, got {per_node}", allot_core::cluster::MAX_GPUS_PER_NODE);
        return Err(ctx.err(key("gpus_per_node"), Some(p.gpus_per_node.span()), msg));
    }
    let rack_size = match &p.rack_size {
        Some(r) => ctx.int(key("rack_size"), r, bounds::POOL_NODES)?,
        None => nodes,
    };
    Ok(PoolSpec { name: p.name.get_ref().clone(), gpu, nodes, gpus_per_node: per_node, rack_size, shared: p.shared })
}

// ---------------------------------------------------------------- accounts

fn build_accounts(ctx: &Ctx<'_>, raw: &[RawAccount], cluster: &Cluster) -> Result<AccountTree, FormatError> {
    let mut specs = Vec::with_capacity(raw.len());
    for (i, a) in raw.iter().enumerate() {
        let legacy_pools = match &a.legacy_pools {
            None => None,
            Some(lp) => {
                let mut ids = Vec::with_capacity(lp.get_ref().len());
                for name in lp.get_ref() {
                    let id = cluster.pool_by_name(name).ok_or_else(|| {
                        let known: Vec<&str> = cluster.pools.iter().map(|p| p.name.as_str()).collect();
                        let msg = format!("unknown pool {name:?} (pools: {})", known.join(", "));
                        ctx.err(format!("accounts[{i}].legacy_pools"), Some(lp.span()), msg)
                    })?;
                    ids.push(id);
                }
                Some(ids)
            }
        };
        let float = |k: &str, v: &Option<Spanned<f64>>, b: FloatBound| {
            v.as_ref().map(|v| ctx.float(format!("accounts[{i}].{k}"), k, v, b)).transpose()
        };
        specs.push(AccountSpec {
            path: a.path.get_ref().clone(),
            share: float("share", &a.share, bounds::SHARE)?,
            budget_gpu_hours: float("budget_gpu_hours", &a.budget_gpu_hours, bounds::BUDGET_GPU_HOURS)?,
            impact: float("impact", &a.impact, bounds::IMPACT)?,
            legacy_pools,
            max_service_gpus: a.max_service_gpus,
            users: user_table(ctx, i, "users", "user share", &a.users, bounds::SHARE)?,
            user_budgets: user_table(ctx, i, "user_budgets", "user budget", &a.user_budgets, bounds::BUDGET_GPU_HOURS)?,
            closed: a.closed,
        });
    }
    AccountTree::build(&specs).map_err(|e| account_error(ctx, raw, e))
}

/// A table of user name to number (`users`, `user_budgets`) of
/// `accounts[i]`, each value checked against `b` at its key and line.
fn user_table(
    ctx: &Ctx<'_>,
    i: usize,
    key: &str,
    what: &str,
    table: &BTreeMap<String, Spanned<f64>>,
    b: FloatBound,
) -> Result<BTreeMap<String, f64>, FormatError> {
    table.iter().map(|(u, v)| Ok((u.clone(), ctx.float(format!("accounts[{i}].{key}.{u}"), what, v, b)?))).collect()
}

/// Reports an [`AccountTreeError`] at the key and line it comes from.
fn account_error(ctx: &Ctx<'_>, raw: &[RawAccount], e: AccountTreeError) -> FormatError {
    let find = |path: &str| raw.iter().position(|a| a.path.get_ref() == path);
    let (key, span, message) = match &e {
        AccountTreeError::Empty => ("accounts".to_string(), None, "at least one account is required".to_string()),
        AccountTreeError::BadPath(p) | AccountTreeError::PathTooLong { path: p, .. } => {
            let i = find(p).unwrap_or(0);
            (format!("accounts[{i}].path"), raw.get(i).map(|a| a.path.span()), e.to_string())
        }
        AccountTreeError::Duplicate(p) => {
            let mut hits = raw.iter().enumerate().filter(|(_, a)| a.path.get_ref() == p);
            let first = hits.next().map(|(j, a)| ctx.line_of(a.path.span().start).ok_or(j));
            let (i, a) = hits.next().or_else(|| raw.iter().enumerate().next()).expect("a duplicate has two accounts");
            let first = match first {
                Some(Ok(line)) => format!("on line {line}"),
                Some(Err(j)) => format!("as accounts[{j}]"),
                None => "on line 0".to_string(),
            };
            let msg = format!("account {p:?} is declared twice (first {first})");
            (format!("accounts[{i}].path"), Some(a.path.span()), msg)
        }
        AccountTreeError::BadNumber { path, field, .. } => {
            let i = find(path).unwrap_or(0);
            let span = raw.get(i).and_then(|a| match *field {
                "share" => a.share.as_ref().map(Spanned::span),
                "budget_gpu_hours" => a.budget_gpu_hours.as_ref().map(Spanned::span),
                _ => a.impact.as_ref().map(Spanned::span),
            });
            (format!("accounts[{i}].{field}"), span, e.to_string())
        }
        AccountTreeError::BadUser { path, user } | AccountTreeError::BadUserShare { path, user, .. } => {
            let i = find(path).unwrap_or(0);
            let span = raw.get(i).and_then(|a| a.users.get(user)).map(Spanned::span);
            (format!("accounts[{i}].users.{user}"), span, e.to_string())
        }
        // A config gives no id order (only a stored tree does).
        AccountTreeError::BadOrder(p) => {
            let i = find(p).unwrap_or(0);
            (format!("accounts[{i}].path"), raw.get(i).map(|a| a.path.span()), e.to_string())
        }
        AccountTreeError::TooManyUsers { path, field, .. } => {
            let i = find(path).unwrap_or(0);
            (format!("accounts[{i}].{field}"), raw.get(i).map(|a| a.path.span()), e.to_string())
        }
        AccountTreeError::BadBudgetUser { path, user } | AccountTreeError::BadUserBudget { path, user, .. } => {
            let i = find(path).unwrap_or(0);
            let span = raw.get(i).and_then(|a| a.user_budgets.get(user)).map(Spanned::span);
            (format!("accounts[{i}].user_budgets.{user}"), span, e.to_string())
        }
    };
    ctx.err(key, span, message).caused_by(e)
}

// ---------------------------------------------------------------- contract

/// `budget_period`, `budget_period_start`, `budget_timezone` and
/// `budget_carry_over` (BUD-4, BUD-5; docs/config.md).
fn build_budget_periods(ctx: &Ctx<'_>, raw: &RawContract, c: &mut Contract) -> Result<(), FormatError> {
    use allot_core::calendar::{Calendar, parse_instant, parse_utc_offset};
    let key = |k: &str| format!("contract.{k}");
    let month = matches!(raw.budget_period.as_ref().map(|p| *p.get_ref()), Some(Period::Month));
    if let Some(p) = &raw.budget_period
        && let Period::Every(s) = p.get_ref()
    {
        c.budget_period =
            bounds::CONTRACT_PERIOD_S.check(s.0).map_err(|m| ctx.err(key("budget_period"), Some(p.span()), m))?;
    }
    let anchor = match &raw.budget_period_start {
        None => 0,
        Some(_) if month => {
            let s = raw.budget_period_start.as_ref().map(Spanned::span);
            return Err(ctx.err(
                key("budget_period_start"),
                s,
                "budget_period_start applies to fixed periods; months start on the 1st (set budget_timezone)",
            ));
        }
        Some(s) => parse_instant(s.get_ref()).map_err(|m| ctx.err(key("budget_period_start"), Some(s.span()), m))?,
    };
    c.budget_calendar = match &raw.budget_timezone {
        Some(z) if !month => {
            return Err(ctx.err(
                key("budget_timezone"),
                Some(z.span()),
                "budget_timezone applies to budget_period = \"month\"; fixed periods start at budget_period_start",
            ));
        }
        Some(z) => Calendar::Months {
            utc_offset: parse_utc_offset(z.get_ref())
                .map_err(|m| ctx.err(key("budget_timezone"), Some(z.span()), m))?,
        },
        None if month => Calendar::Months { utc_offset: 0 },
        None => Calendar::Fixed { anchor },
    };
    if month {
        // The nominal length, for capacity estimates (a month of 30 days).
        c.budget_period = 30 * 86_400;
    }
    if let Some(f) = &raw.budget_carry_over {
        c.budget_carry_over = ctx.float(key("budget_carry_over"), "budget_carry_over", f, bounds::CARRY_OVER)?;
    }
    if let Some(v) = &raw.budget_alerts {
        c.budget_alerts = allot_core::alerts::Thresholds::new(v.get_ref())
            .map_err(|m| ctx.err(key("budget_alerts"), Some(v.span()), m))?;
    }
    Ok(())
}

/// `[alerts]`: the webhook URL must be `http://` or `https://` with a host
/// and no spaces; the timeout within [`bounds::WEBHOOK_TIMEOUT_S`].
fn build_alerts(ctx: &Ctx<'_>, raw: Option<&RawAlerts>) -> Result<AlertsConfig, FormatError> {
    let mut a = AlertsConfig::default();
    let Some(raw) = raw else { return Ok(a) };
    if let Some(u) = &raw.webhook_url {
        let url = u.get_ref();
        let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
        let host = rest.map(|r| r.split(['/', '?', '#']).next().unwrap_or(""));
        if host.is_none_or(|h| h.is_empty() || h.starts_with(':')) || url.chars().any(char::is_whitespace) {
            let msg = format!("invalid webhook URL {url:?}: expected http://host[:port]/path or https://…");
            return Err(ctx.err("alerts.webhook_url", Some(u.span()), msg));
        }
        a.webhook_url = Some(url.clone());
    }
    if let Some(t) = &raw.webhook_timeout {
        a.webhook_timeout_s = bounds::WEBHOOK_TIMEOUT_S
            .check(t.get_ref().0)
            .map_err(|m| ctx.err("alerts.webhook_timeout", Some(t.span()), m))?;
    }
    Ok(a)
}

fn build_contract(ctx: &Ctx<'_>, raw: &RawContract) -> Result<Contract, FormatError> {
    let mut c = Contract::default();
    let secs = |key: &str, v: &Option<Spanned<Secs>>, b: IntBound, default: u64| -> Result<u64, FormatError> {
        match v {
            None => Ok(default),
            Some(s) => b.check(s.get_ref().0).map_err(|m| ctx.err(format!("contract.{key}"), Some(s.span()), m)),
        }
    };
    let (period, wait) = (bounds::CONTRACT_PERIOD_S, bounds::CONTRACT_WAIT_S);
    build_budget_periods(ctx, raw, &mut c)?;
    c.usage_half_life = secs("usage_half_life", &raw.usage_half_life, period, c.usage_half_life)?;
    c.scheduling_interval = secs("scheduling_interval", &raw.scheduling_interval, period, c.scheduling_interval)?;
    if let Some(m) = &raw.min_slice {
        c.min_slice.batch = secs("min_slice.batch", &m.batch, wait, c.min_slice.batch)?;
        c.min_slice.interactive = secs("min_slice.interactive", &m.interactive, wait, c.min_slice.interactive)?;
        c.min_slice.service = secs("min_slice.service", &m.service, wait, c.min_slice.service)?;
    }
    c.grace = secs("grace", &raw.grace, wait, c.grace)?;
    c.checkpoint_wait = secs("checkpoint_wait", &raw.checkpoint_wait, wait, c.checkpoint_wait)?;
    for (key, raw, out) in [
        ("time_limit", &raw.time_limit, &mut c.time_limit),
        ("max_time_limit", &raw.max_time_limit, &mut c.max_time_limit),
    ] {
        let Some(m) = raw else { continue };
        let limit = bounds::WORK_S;
        let one = |class: &str, v: &Option<Spanned<Secs>>| {
            v.as_ref().map(|_| secs(&format!("{key}.{class}"), v, limit, 0)).transpose()
        };
        out.batch = one("batch", &m.batch)?.or(out.batch);
        out.interactive = one("interactive", &m.interactive)?.or(out.interactive);
        out.service = one("service", &m.service)?.or(out.service);
    }
    for class in allot_core::Class::ALL {
        if let (Some(d), Some(max)) = (c.time_limit.get(class), c.max_time_limit.get(class))
            && d > max
        {
            let name = class.as_str();
            let msg =
                format!("the default time limit {d} s is above the maximum {max} s (contract.max_time_limit.{name})");
            let span = raw.time_limit.as_ref().and_then(|m| m.get(class)).map(Spanned::span);
            return Err(ctx.err(format!("contract.time_limit.{name}"), span, msg));
        }
    }
    build_idle_reclaim(ctx, raw, &mut c)?;
    c.interactive_max_gpus = raw.interactive_max_gpus.unwrap_or(c.interactive_max_gpus);
    let max_duration = &raw.interactive_max_duration;
    c.interactive_max_duration = secs("interactive_max_duration", max_duration, wait, c.interactive_max_duration)?;
    c.impact_weighting = on_off(ctx, "impact_weighting", &raw.impact_weighting, c.impact_weighting)?;
    c.keep_claims = on_off(ctx, "keep_claims", &raw.keep_claims, c.keep_claims)?;
    if let Some(f) = &raw.swap_margin {
        c.swap_margin = ctx.float("contract.swap_margin".to_string(), "swap_margin", f, bounds::SWAP_MARGIN)?;
    }
    Ok(c)
}

/// A `[contract]` switch written `"off"` or `"on"`; `default` when absent.
fn on_off(ctx: &Ctx, key: &str, v: &Option<Spanned<String>>, default: bool) -> Result<bool, FormatError> {
    let Some(v) = v else { return Ok(default) };
    match v.get_ref().as_str() {
        "off" => Ok(false),
        "on" => Ok(true),
        other => {
            let msg = format!("unknown {key} {other:?} (use off or on)");
            Err(ctx.err(format!("contract.{key}"), Some(v.span()), msg))
        }
    }
}

/// One time of each class's idle reclaim (CON-9), where it is on.
fn idle_times(
    p: &allot_core::contract::PerClass<Option<allot_core::IdleReclaim>>,
    f: impl Fn(&allot_core::IdleReclaim) -> u64,
) -> allot_core::contract::PerClass<Option<u64>> {
    allot_core::contract::PerClass {
        batch: p.batch.as_ref().map(&f),
        interactive: p.interactive.as_ref().map(&f),
        service: p.service.as_ref().map(&f),
    }
}

/// CON-9: `idle_threshold`, `idle_after` and `idle_warning` per class. A
/// class given a threshold above 0 is reclaimed (with the interactive
/// default's times unless given); a threshold of 0 turns it off.
fn build_idle_reclaim(ctx: &Ctx<'_>, raw: &RawContract, c: &mut Contract) -> Result<(), FormatError> {
    use allot_core::{Class, IdleReclaim};
    let time = |key: &str, m: &Option<RawPerClass>, class: Class| -> Result<Option<u64>, FormatError> {
        let Some(v) = m.as_ref().and_then(|m| m.get(class)) else { return Ok(None) };
        let key = format!("contract.{key}.{}", class.as_str());
        bounds::CONTRACT_WAIT_S.check(v.get_ref().0).map(Some).map_err(|m| ctx.err(key, Some(v.span()), m))
    };
    for class in Class::ALL {
        let threshold = raw.idle_threshold.as_ref().and_then(|m| match class {
            Class::Batch => m.batch.as_ref(),
            Class::Interactive => m.interactive.as_ref(),
            Class::Service => m.service.as_ref(),
        });
        let after = time("idle_after", &raw.idle_after, class)?;
        let warning = time("idle_warning", &raw.idle_warning, class)?;
        let current = c.idle_reclaim.get(class);
        let mut cfg = match (threshold, current) {
            (Some(t), _) => {
                let v = *t.get_ref();
                if !(0.0..=1.0).contains(&v) {
                    let key = format!("contract.idle_threshold.{}", class.as_str());
                    let msg = format!("a utilisation from 0 to 1 (0 turns idle reclaim off), got {v}");
                    return Err(ctx.err(key, Some(t.span()), msg));
                }
                (v > 0.0).then_some(IdleReclaim { threshold: v, ..current.unwrap_or(IdleReclaim::INTERACTIVE) })
            }
            (None, cfg) => cfg,
        };
        if let Some(cfg) = cfg.as_mut() {
            cfg.after = after.unwrap_or(cfg.after);
            cfg.warning = warning.unwrap_or(cfg.warning);
        } else if let Some(key) = [("idle_after", after), ("idle_warning", warning)].iter().find(|(_, v)| v.is_some()) {
            let name = format!("contract.{}.{}", key.0, class.as_str());
            let msg = format!(
                "idle reclaim is off for {} work: give contract.idle_threshold.{} first",
                class.as_str(),
                class.as_str()
            );
            return Err(ctx.err(name, None, msg));
        }
        match class {
            Class::Batch => c.idle_reclaim.batch = cfg,
            Class::Interactive => c.idle_reclaim.interactive = cfg,
            Class::Service => c.idle_reclaim.service = cfg,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLEET: &str = "name = \"lab\"\n[[clusters]]\nname = \"c1\"\n[[clusters.pools]]\nname = \"h\"\ngpu = \"H100\"\n\
                         nodes = 2\ngpus_per_node = 8\n[clusters.executor]\nkind = \"local\"\n\
                         [[clusters]]\nname = \"c2\"\n[[clusters.pools]]\nname = \"h\"\ngpu = \"B200\"\nnodes = 1\n\
                         gpus_per_node = 8\n[[accounts]]\npath = \"org/a\"\nlegacy_pools = [\"c2/h\"]\n";

    #[test]
    fn a_fleet_of_clusters_is_one_config() {
        let cfg = parse_config(FLEET, "f.toml").unwrap();
        assert_eq!(cfg.cluster.name, "lab");
        assert_eq!(cfg.cluster.clusters, ["c1", "c2"]);
        let pools: Vec<&str> = cfg.cluster.pools.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(pools, ["c1/h", "c2/h"], "a pool name is unique per cluster");
        assert_eq!(cfg.cluster.nodes[2].name, "c2/h-0");
        assert_eq!(cfg.executors[0].as_ref().map(|e| e.kind.as_str()), Some("local"));
        assert!(cfg.executors[1].is_none());
        let k = FLEET.replace(
            "kind = \"local\"",
            "kind = \"kubernetes\"\nurl = \"https://k:6443\"\nca_file = \"/ca\"\ntoken_file = \"/t\"\n\
             [clusters.executor.namespaces]\nteam-a = [\"org/a\"]",
        );
        let kc = parse_config(&k, "k.toml").unwrap();
        let e = kc.executors[0].as_ref().unwrap();
        assert_eq!((e.kind.as_str(), e.url.as_deref()), ("kubernetes", Some("https://k:6443")));
        assert_eq!(e.namespaces["team-a"], ["org/a"]);
        // The writer's TOML reads back as the same fleet.
        let again = parse_config(&cfg.text, "f.toml").unwrap();
        assert_eq!(again.cluster.pools.len(), 2);
    }

    /// K8S-12: the images a namespace's Jobs made from submissions may run;
    /// each key a namespace of `namespaces`, each pattern an image or a
    /// prefix ending in `*`.
    #[test]
    fn kubernetes_images_are_listed_per_namespace() {
        let kube = |images: &str| {
            FLEET.replace(
                "kind = \"local\"",
                &format!(
                    "kind = \"kubernetes\"\nurl = \"https://k:6443\"\nca_file = \"/ca\"\ntoken_file = \"/t\"\n\
                     [clusters.executor.namespaces]\nteam-a = [\"org/a\"]\nteam-b = [\"org/b\"]\n\
                     [clusters.executor.images]\n{images}"
                ),
            )
        };
        let cfg = parse_config(
            &kube("team-a = [\"registry.example.org/team/*\", \"busybox:1\"]\nteam-b = [\"*\"]"),
            "k.toml",
        )
        .unwrap();
        let e = cfg.executors[0].as_ref().unwrap();
        assert_eq!(e.images["team-a"], ["registry.example.org/team/*", "busybox:1"]);
        assert_eq!(e.images["team-b"], ["*"]);
        let cases = [
            ("team-c = [\"*\"]", "clusters[0].executor.images.team-c", "not a namespace of"),
            ("team-a = [\"reg/*/x\"]", "clusters[0].executor.images.team-a", "only at its end"),
            ("team-a = [\"\"]", "clusters[0].executor.images.team-a", "is not an image"),
            ("team-a = [\"a b\"]", "clusters[0].executor.images.team-a", "is not an image"),
        ];
        for (images, key, msg) in cases {
            let e = parse_config(&kube(images), "k.toml").unwrap_err();
            assert_eq!(e.field.as_deref(), Some(key), "{images}: {e}");
            assert!(e.to_string().contains(msg), "{images}: {e}");
        }
    }

    #[test]
    fn fleet_errors_name_the_key() {
        let cases = [
            (FLEET.replace("name = \"c2\"", "name = \"c1\""), "clusters[1].name", "declared twice"),
            (FLEET.replace("name = \"c2\"", "name = \"c 2\""), "clusters[1].name", "invalid cluster name"),
            (FLEET.replace("kind = \"local\"", "kind = \"k8s\""), "clusters[0].executor.kind", "unknown executor"),
            (FLEET.replace("\"c2/h\"", "\"h\""), "accounts[0].legacy_pools", "unknown pool \"h\""),
            (FLEET.replace("kind = \"local\"", "kind = \"kubernetes\""), "clusters[0].executor.url", "never falls back to a kubeconfig"),
            (FLEET.replace("kind = \"local\"", &"kind = \"kubernetes\"\nurl = \"https://k:6443\"\nca_file = \"/ca\"\ntoken_file = \"/t\"".replace("https", "http")), "clusters[0].executor.url", "must be https"),
            (FLEET.replace("kind = \"local\"", "kind = \"local\"\nurl = \"https://k\""), "clusters[0].executor", "for the kubernetes executor, not \"local\""),
            (FLEET.replace("kind = \"local\"", "kind = \"kubernetes\"\nurl = \"https://k:6443\"\nca_file = \"/ca\"\ntoken_file = \"/t\"\npartition = \"p\""), "clusters[0].executor", "for the slurm executor"),
            (FLEET.replace("kind = \"local\"", "kind = \"kubernetes\"\nurl = \"https://k:6443\"\nca_file = \"/ca\"\ntoken_file = \"/t\"\n[clusters.executor.namespaces]\nteam = [\"/org\"]"), "clusters[0].executor.namespaces.team", "is not an account path"),
            (format!("[cluster]\n[[cluster.pools]]\nname=\"a\"\ngpu=\"H\"\nnodes=1\ngpus_per_node=1\n{FLEET}"), "", ""),
        ];
        for (text, key, msg) in cases {
            let e = parse_config(&text, "f.toml").unwrap_err();
            if key.is_empty() {
                continue;
            }
            assert_eq!(e.field.as_deref(), Some(key), "{e}");
            assert!(e.to_string().contains(msg), "{e}");
        }
    }

    #[test]
    fn alerts_webhook_is_read_and_checked_with_key_and_line() {
        let cfg = parse_config(FLEET, "f.toml").unwrap();
        assert_eq!(cfg.alerts, AlertsConfig { webhook_url: None, webhook_timeout_s: 10 }, "no [alerts]: no webhook");
        let ok = format!("{FLEET}[alerts]\nwebhook_url = \"http://127.0.0.1:9/hook\"\nwebhook_timeout = \"3s\"\n");
        let cfg = parse_config(&ok, "f.toml").unwrap();
        assert_eq!(cfg.alerts.webhook_url.as_deref(), Some("http://127.0.0.1:9/hook"));
        assert_eq!(cfg.alerts.webhook_timeout_s, 3);
        let line = FLEET.lines().count() as u64 + 2;
        let cases = [
            ("webhook_url = \"ftp://x/y\"", "alerts.webhook_url", "invalid webhook URL"),
            ("webhook_url = \"http:///path\"", "alerts.webhook_url", "invalid webhook URL"),
            ("webhook_url = \"http://a b/\"", "alerts.webhook_url", "invalid webhook URL"),
            ("webhook_timeout = \"0s\"", "alerts.webhook_timeout", "1"),
            ("webhook_timeout = \"10m\"", "alerts.webhook_timeout", "300"),
        ];
        for (entry, key, msg) in cases {
            let e = parse_config(&format!("{FLEET}[alerts]\n{entry}\n"), "f.toml").unwrap_err();
            assert_eq!((e.field.as_deref(), e.line), (Some(key), Some(line)), "{entry}: {e}");
            assert!(e.to_string().contains(msg), "{entry}: {e}");
        }
        let e = parse_config(&format!("{FLEET}[alerts]\nwebhook = \"http://x\"\n"), "f.toml").unwrap_err();
        assert!(e.to_string().contains("webhook"), "unknown keys are refused: {e}");
    }

    #[test]
    fn user_shares_seed_from_the_config_and_bad_ones_name_the_key() {
        let ok = FLEET.replace("legacy_pools = [\"c2/h\"]\n", "users = { alice = 2, bob = 0.5 }\n");
        let cfg = parse_config(&ok, "f.toml").unwrap();
        let a = cfg.accounts.account(cfg.accounts.get("org/a").unwrap());
        assert_eq!((a.user_share("alice"), a.user_share("bob"), a.user_share("carol")), (2.0, 0.5, 1.0));
        let cases = [
            ("users = { alice = -1 }", "accounts[0].users.alice", "user share"),
            ("users = { alice = 0 }", "accounts[0].users.alice", "user share"),
            ("users = { \"a b\" = 1 }", "accounts[0].users.a b", "invalid user name"),
        ];
        for (users, key, msg) in cases {
            let text = FLEET.replace("legacy_pools = [\"c2/h\"]", users);
            let e = parse_config(&text, "f.toml").unwrap_err();
            assert_eq!(e.field.as_deref(), Some(key), "{e}");
            assert!(e.to_string().contains(msg), "{e}");
        }
    }

    #[test]
    fn user_budgets_seed_from_the_config_and_bad_ones_name_the_key_and_line() {
        let ok = FLEET.replace("legacy_pools = [\"c2/h\"]\n", "user_budgets = { alice = 50, bob = 0.5 }\n");
        let cfg = parse_config(&ok, "f.toml").unwrap();
        let a = cfg.accounts.account(cfg.accounts.get("org/a").unwrap());
        assert_eq!(
            (a.user_budget("alice"), a.user_budget("bob"), a.user_budget("carol")),
            (Some(50.0), Some(0.5), None)
        );
        let line = FLEET.lines().count();
        let cases = [
            ("negative", "user_budgets = { alice = -1 }", "accounts[0].user_budgets.alice", "user budget"),
            ("zero", "user_budgets = { alice = 0 }", "accounts[0].user_budgets.alice", "user budget"),
            ("nan", "user_budgets = { alice = nan }", "accounts[0].user_budgets.alice", "user budget"),
            ("bad name", "user_budgets = { \"a b\" = 1 }", "accounts[0].user_budgets.a b", "invalid user name"),
        ];
        for (name, budgets, key, msg) in cases {
            let text = FLEET.replace("legacy_pools = [\"c2/h\"]", budgets);
            let e = parse_config(&text, "f.toml").unwrap_err();
            assert_eq!(e.field.as_deref(), Some(key), "{name}: {e}");
            assert!(e.to_string().contains(msg), "{name}: {e}");
            assert_eq!(e.line, Some(line as u64), "{name}: {e}");
        }
    }

    #[test]
    fn key_at_finds_headers_inline_tables_and_keys() {
        let text = "[cluster]\nname = \"x\"\n[[cluster.pools]]\nname = \"a\"\n[[cluster.pools]]\nnodes = -1\n\
                    [contract]\nmin_slice = { batch = \"2h\", service = \"9q\" }\nbogus = 1\n";
        let at = |needle: &str| key_at(text, text.find(needle).unwrap());
        let cases = [
            ("plain key", "\"x\"", Some("cluster.name")),
            ("array of tables index", "-1", Some("cluster.pools[1].nodes")),
            ("inline table", "\"9q\"", Some("contract.min_slice.service")),
            ("key itself", "bogus", Some("contract.bogus")),
            ("header line", "[contract]", Some("contract")),
        ];
        for (name, needle, want) in cases {
            assert_eq!(at(needle).as_deref(), want, "case {name}");
        }
    }
}
