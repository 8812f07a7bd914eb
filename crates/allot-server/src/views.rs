//! The JSON bodies of the HTTP API, shared by the server and the client.
//!
//! In the OpenAPI document a response field that is always written (`null`
//! or empty when there is nothing) is `required` (`#[schema(required =
//! true)]`): a generated client then types it "may be null", never "may be
//! absent" (the test of [`crate::api::openapi`] checks every response body).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

/// A reason as people read it (issue 30, point 8): its plain sentence
/// first, then the rule id and its numbers, with every instant (`t=` and
/// Unix seconds) written as a UTC time and how far it is from `now`.
pub fn for_people(reason: &allot_core::Reason, now: i64) -> String {
    let text = reason.words();
    let mut out = String::with_capacity(text.len() + 32);
    let mut rest = text.as_str();
    while let Some(i) = rest.find("t=") {
        let digits = rest[i + 2..].bytes().take_while(u8::is_ascii_digit).count();
        let word_start = i == 0 || !rest.as_bytes()[i - 1].is_ascii_alphanumeric();
        // Instants of a live server are Unix seconds (after 2001).
        let t = rest[i + 2..i + 2 + digits].parse::<i64>().ok().filter(|t| *t >= 1_000_000_000);
        match t {
            Some(t) if word_start => {
                out.push_str(&rest[..i]);
                out.push_str(&instant_words(t, now));
            }
            _ => out.push_str(&rest[..i + 2 + digits]),
        }
        rest = &rest[i + 2 + digits..];
    }
    out.push_str(rest);
    out
}

/// `14:05 UTC (in 3 min)`, with the date when it is not `now`'s day.
fn instant_words(t: i64, now: i64) -> String {
    let full = allot_core::calendar::format_instant(t.max(0) as u64).replacen('T', " ", 1);
    let today = allot_core::calendar::format_instant(now.max(0) as u64);
    let clock = if full.get(..10) == today.get(..10) { full.get(11..16) } else { full.get(..16) };
    let clock = clock.unwrap_or(&full);
    let gap = allot_core::words::span((t - now).unsigned_abs());
    if t >= now { format!("{clock} UTC (in {gap})") } else { format!("{clock} UTC ({gap} ago)") }
}

/// `POST /v1/workloads`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// Project the workload is charged to.
    pub account: String,
    /// batch (default), interactive or service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Total GPUs, all at once.
    #[schema(minimum = 1)]
    pub gpus: u32,
    /// 0 or absent: any packing; k: exactly k nodes of gpus/k.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// The clusters of the fleet it may run on, one name each (FLEET-1);
    /// absent or empty: any cluster that can run it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
    /// Program and arguments (no shell); required, except with `image`,
    /// where absent or empty runs the image's entrypoint.
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Seconds of progress between checkpoints; absent or 0: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_interval_s: Option<u64>,
    /// Expected run time if never interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_duration_s: Option<u64>,
    /// Reruns after a non-zero exit (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(maximum = 100)]
    pub retries: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Legacy `priority` policy only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptible: Option<bool>,
    /// Expected mean GPU utilisation (0..1), for the measures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 1)]
    pub util: Option<f64>,
    /// CON-6: seconds of running time allowed per attempt; absent: the
    /// class's `time_limit` (none unless configured). Above the class's
    /// `max_time_limit` it is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub time_limit_s: Option<u64>,
    /// Where the command starts: an absolute path on the nodes that run
    /// it (a relative program such as `./train.sh` is found there);
    /// `allot submit` sends the submitter's current directory, or
    /// `--chdir`. Absent: the server's own working directory. On clusters
    /// of the local executor a directory that does not exist is refused;
    /// elsewhere it is found missing at launch, and the workload fails
    /// without a retry (MNT-4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 65536, pattern = "^/")]
    pub workdir: Option<String>,
    /// CON-8: it saves its progress when signalled (SIGTERM) and reports
    /// that checkpoint within the grace; a preemption then costs it only
    /// the grace, and the policy prefers it as a victim. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_on_signal: Option<bool>,
    /// ARR-1: submit an array, one workload per index, as Slurm writes it:
    /// `0-99`, `1,3,5-9`, `0-15:4`, with `%N` for at most N queued or
    /// running at once (`0-99%8`); at most 10000 elements. Each element
    /// gets `ALLOT_ARRAY_ID`, `ALLOT_ARRAY_INDEX` and `ALLOT_ARRAY_COUNT` in
    /// its environment. The answer is the first element; the array's id is
    /// its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, example = "0-99%8")]
    pub array: Option<String>,
    /// DEP-1: `afterok:ID[:ID…]`, `afterany:…`, `afternotok:…`, several
    /// joined by commas (all must hold). An ID is a workload (`12`), an
    /// array element (`12_3`) or an array (`12`: all its elements). A
    /// dependency that can no longer be satisfied is refused (400); one that
    /// becomes so later cancels the workload (DEP-2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, example = "afterok:12")]
    pub dependency: Option<String>,
    /// HOLD-1: submit on hold; it waits until released. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<bool>,
    /// K8S-12: run this container image as a managed Job of a Kubernetes
    /// cluster of the fleet: Allot creates the Job (`nodes` pods of
    /// `gpus / nodes` GPUs each, `command`, `env` and `workdir` as the
    /// container's) and it is then a Job like any other. Only the fields a
    /// Job carries may be set with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, example = "ghcr.io/org/trainer:1.4")]
    pub image: Option<String>,
    /// K8S-12: the namespace of the Job (one whose Jobs may charge the
    /// account); absent: the most specific such namespace of the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1)]
    pub namespace: Option<String>,
}

/// ARR-1: a workload as an element of an array.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = ArrayElement)]
pub struct ArrayView {
    /// The array's id: its first element's.
    pub id: String,
    /// This element's index.
    pub index: u32,
    /// `ID_INDEX`, as the element is also addressed.
    pub element: String,
    /// How many elements the array has.
    pub count: u32,
    /// At most this many elements queued or running at once; absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// GPUs on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = NodeGpus)]
pub struct NodeGpusView {
    pub node: String,
    pub gpus: Vec<u32>,
}

/// A workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = Workload)]
pub struct WorkloadView {
    pub id: String,
    #[schema(required = true)]
    pub name: Option<String>,
    pub account: String,
    pub user: String,
    pub class: String,
    pub gpus: u32,
    pub nodes: u32,
    #[schema(required = true)]
    pub gpu_type: Option<String>,
    /// The clusters it may run on (FLEET-1); empty: any.
    #[serde(default)]
    #[schema(required = true)]
    pub clusters: Vec<String>,
    pub command: Vec<String>,
    /// Its environment; the values are `(hidden)` except to its owner (the
    /// token that submitted it) and admins.
    pub env: BTreeMap<String, String>,
    pub expected_duration_s: u64,
    pub checkpoint_interval_s: u64,
    /// CON-6: seconds of running time allowed per attempt; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<u64>,
    /// Where its command starts; absent: the server's working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// CON-8: it saves its progress when signalled.
    #[serde(default)]
    #[schema(required = true)]
    pub checkpoint_on_signal: bool,
    pub retries: u32,
    pub failures: u32,
    /// pending | running | stopping | finished | failed | cancelled | rejected
    #[schema(value_type = WorkloadState)]
    pub state: String,
    /// Why it is in this state (rule id and numbers).
    #[schema(required = true)]
    pub reason: Option<String>,
    pub submit_t: i64,
    #[schema(required = true)]
    pub end_t: Option<i64>,
    pub cancel_requested: bool,
    /// The cluster of the fleet its last attempt runs or ran on (only with several clusters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Measured GPU utilization (0..1) over its attempts, weighted by
    /// GPUs × measured seconds (GPU telemetry); null: never measured.
    #[serde(default)]
    #[schema(required = true, minimum = 0, maximum = 1)]
    pub measured_util: Option<f64>,
    /// The nodes its last attempt runs or ran on (empty: never started).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_nodes: Vec<String>,
    /// When its last attempt started (Unix seconds); absent: never started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_t: Option<i64>,
    /// ARR-1: the array it is an element of; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<ArrayView>,
    /// DEP-1: its dependencies by workload id (`afterok:12:13`); absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependency: Option<String>,
    /// HOLD-1: it is held.
    #[serde(default)]
    #[schema(required = true)]
    pub held: bool,
    /// Its attempts so far.
    #[serde(default)]
    #[schema(required = true)]
    pub attempts: u32,
    /// GPU-hours its ended attempts held (GPUs × hours, not normalised).
    #[serde(default)]
    #[schema(required = true)]
    pub gpu_hours: f64,
    /// When its first attempt started (Unix seconds); absent: never started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_start_t: Option<i64>,
}

/// A workload's state in the OpenAPI document: an enum of
/// [`crate::states::PHASES`] (a generated client's `WorkloadState`); the
/// view holds it as the stored text.
pub struct WorkloadState;

impl utoipa::PartialSchema for WorkloadState {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        let states = crate::states::PHASES.map(|p| p.as_str());
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some(states.join(" | ")))
            .enum_values(Some(states))
            .into()
    }
}

impl ToSchema for WorkloadState {}

impl WorkloadView {
    /// Rewrites its reason with `f` (see [`crate::auth::Principal::redact`]).
    pub fn redact(&mut self, f: &impl Fn(&str) -> String) {
        self.reason = self.reason.as_deref().map(f);
    }
}

/// One attempt of a workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = Attempt)]
pub struct AttemptView {
    pub attempt: i64,
    pub state: String,
    pub allocation: Vec<NodeGpusView>,
    /// The cluster of the fleet of its nodes (only with several clusters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    pub start_t: i64,
    pub start_reason: String,
    #[schema(required = true)]
    pub signal_t: Option<i64>,
    /// Why it was preempted (or drained, cancelled).
    #[schema(required = true)]
    pub signal_reason: Option<String>,
    #[schema(required = true)]
    pub end_t: Option<i64>,
    #[schema(required = true)]
    pub outcome: Option<String>,
    #[schema(required = true)]
    pub exit_code: Option<i64>,
    #[schema(required = true)]
    pub kept_s: Option<i64>,
    #[schema(required = true)]
    pub pid: Option<i64>,
    pub log_path: String,
    /// CON-7: checkpoints the attempt reported (marker file or API).
    #[serde(default)]
    #[schema(required = true)]
    pub checkpoints: i64,
    /// CON-7: when its last reported checkpoint completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_t: Option<i64>,
    /// CON-7: seconds of the attempt's progress its last reported
    /// checkpoint saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_saved_s: Option<i64>,
    /// CON-9: when it was warned that its idle GPUs will be reclaimed
    /// (absent: not warned, or the warning was withdrawn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_warning_t: Option<i64>,
    /// CON-9: when it is (or was) to be stopped for idle GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_reclaim_t: Option<i64>,
    /// Its GPU telemetry so far; null: not measured (no sample).
    #[serde(default)]
    #[schema(required = true)]
    pub telemetry: Option<AttemptTelemetry>,
}

/// What an attempt's GPU samples add up to (docs/server.md, "GPU telemetry").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AttemptTelemetry {
    /// Samples taken.
    #[schema(minimum = 1)]
    pub samples: u64,
    /// Mean utilization (0..1) over the samples, each the mean over the
    /// attempt's GPUs.
    #[schema(minimum = 0, maximum = 1)]
    pub util_mean: f64,
    /// Seconds the samples cover.
    pub measured_s: u64,
    /// Seconds whose sample was below `[telemetry] idle_threshold`.
    pub idle_s: u64,
    /// The most memory one of its GPUs used in a sample, MiB.
    pub mem_max_mib: u64,
    /// Unix time of the last sample.
    pub last_sample_t: i64,
}

/// `GET /v1/workloads/{id}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WorkloadDetail {
    pub workload: WorkloadView,
    pub attempts: Vec<AttemptView>,
    /// Why it waits (pending) or why it was last stopped.
    #[schema(required = true)]
    pub why: Option<String>,
}

impl WorkloadDetail {
    /// Rewrites every reason in it with `f` (see [`crate::auth::Principal::redact`]).
    pub fn redact(&mut self, f: &impl Fn(&str) -> String) {
        self.workload.redact(f);
        for a in &mut self.attempts {
            a.start_reason = f(&a.start_reason);
            a.signal_reason = a.signal_reason.as_deref().map(f);
        }
        self.why = self.why.as_deref().map(f);
    }
}

/// An account with its budget and fair-share standing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = Account)]
pub struct AccountView {
    pub path: String,
    #[schema(required = true)]
    pub parent: Option<String>,
    pub depth: u32,
    pub share: f64,
    pub explicit_share: bool,
    /// Own budget in normalised GPU-hours per budget period.
    #[schema(required = true)]
    pub budget_gpu_hours: Option<f64>,
    /// Normalised GPU-hours used by the subtree this budget period.
    pub used_gpu_hours: f64,
    /// NGH carried over into this period from the one before (BUD-5).
    #[serde(default)]
    #[schema(required = true)]
    pub carried_gpu_hours: f64,
    /// `budget + carried − used` (negative once over).
    #[schema(required = true)]
    pub remaining_gpu_hours: Option<f64>,
    /// Burn rate: NGH per hour, the period's average so far (docs/budgets.md).
    #[serde(default)]
    #[schema(required = true)]
    pub burn_gpu_hours_per_hour: f64,
    /// When the remaining budget runs out at that rate (Unix seconds); null
    /// without a budget, once exhausted or at rate 0. May lie past
    /// `period_end_t`, when the budget renews first.
    #[serde(default)]
    #[schema(required = true)]
    pub projected_exhaustion_t: Option<i64>,
    /// Raw GPU-hours ever charged to the subtree (the ledger).
    pub charged_gpu_hours: f64,
    /// GPUs held now by the subtree.
    pub allocated_gpus: u64,
    /// Static entitled share of the cluster (product of share ratios).
    pub entitled_share: f64,
    /// FS-1 (decayed usage + allocation) / entitlement; 1 = at fair share.
    #[schema(required = true)]
    pub fair_share: Option<f64>,
    /// FS-1: the fraction of the cluster it is entitled to now, its share
    /// among siblings with work (0 without work); `entitled_share` is the
    /// same when every account has work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entitled_now: Option<f64>,
    /// FS-1: the fraction of the cluster its recent use and GPUs held
    /// stand for (`fair_share` × `entitled_now`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub using_share: Option<f64>,
    #[schema(required = true)]
    pub over_budget: Option<bool>,
    pub pending: u64,
    pub running: u64,
    pub period_start_t: i64,
    /// End of the current budget period: the next renewal (BUD-4).
    #[serde(default)]
    #[schema(required = true)]
    pub period_end_t: i64,
    /// Own or inherited impact (IMP rules).
    #[serde(default = "one")]
    #[schema(required = true)]
    pub impact: f64,
    /// Users' FS-2 shares set for this account's own work (others: 1).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub users: BTreeMap<String, f64>,
    /// Users' BUD-6 budgets in this account's own work, NGH per period.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub user_budgets: BTreeMap<String, f64>,
    /// ACC-2: closed itself or below a closed account; no new work.
    #[serde(default)]
    #[schema(required = true)]
    pub closed: bool,
}

impl AccountView {
    /// Its fair-share standing in words (FS-1): what it uses, what it is
    /// entitled to now, and what that means for its waiting work. `None`
    /// where the policy has no fair share.
    pub fn standing_words(&self) -> Option<String> {
        let (value, entitled, using) = (self.fair_share?, self.entitled_now?, self.using_share?);
        let pct = |x: f64| format!("{:.0} %", x * 100.0);
        if !value.is_finite() || entitled <= 0.0 {
            return Some(format!(
                "no work now, so no entitlement (its part goes to accounts with work; {} when all have work)",
                pct(self.entitled_share)
            ));
        }
        let verdict = if value > 1.0 + AT_SHARE {
            "above its share, so its waiting work ranks behind work of accounts below theirs"
        } else if value < 1.0 - AT_SHARE {
            "below its share, so its waiting work ranks ahead of work of accounts above theirs"
        } else {
            "at its share"
        };
        let all = if (entitled - self.entitled_share).abs() > 0.005 {
            format!(" ({} when all have work)", pct(self.entitled_share))
        } else {
            String::new()
        };
        Some(format!(
            "recent use and GPUs held come to {} of the GPUs, entitled to {} now{all}: {verdict}",
            pct(using),
            pct(entitled)
        ))
    }
}

/// How close to 1 a fair-share value counts as at its share.
pub const AT_SHARE: f64 = 0.02;

fn one() -> f64 {
    1.0
}

fn double_option<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// `PATCH /v1/accounts/{path}`: a field absent is unchanged; `null` returns
/// to the config's value (none when the config does not declare it). The
/// changes apply together (one transaction, one audit entry each) in this
/// order: budget, share, impact, users, user_budgets, closed, rename.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AccountChange {
    #[serde(default, deserialize_with = "double_option", skip_serializing_if = "Option::is_none")]
    pub budget_gpu_hours: Option<Option<f64>>,
    #[serde(default, deserialize_with = "double_option", skip_serializing_if = "Option::is_none")]
    pub share: Option<Option<f64>>,
    #[serde(default, deserialize_with = "double_option", skip_serializing_if = "Option::is_none")]
    pub impact: Option<Option<f64>>,
    /// Users' FS-2 shares within the account (`null`: back to 1 or the
    /// config's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub users: BTreeMap<String, Option<f64>>,
    /// Users' BUD-6 budgets within the account, NGH per period (`null`:
    /// back to the config's, else none).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub user_budgets: BTreeMap<String, Option<f64>>,
    /// Close (`true`, ACC-2) or reopen (`false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed: Option<bool>,
    /// With `closed: true`: also cancel the subtree's pending work and stop
    /// its running work after grace (ACC-3). Default: they run on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stop: bool,
    /// A new path with the same parent (the last segment changes; the
    /// subtree, its workloads and grants move with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rename_to: Option<String>,
}

pub use allot_trace::decl::AccountDecl;

/// `GET` / `PUT /v1/account-tree`: the whole tree (an export, an import).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AccountTreeImport {
    pub accounts: Vec<AccountDecl>,
    /// Only say what would change.
    #[serde(default)]
    pub dry_run: bool,
}

/// What an account request changed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AccountEdits {
    /// One line per change, e.g. `create org/new`, `budget_gpu_hours org/a: 10 -> 20`.
    pub changes: Vec<String>,
    /// Whether the changes were made (false for a dry run).
    pub applied: bool,
    /// The accounts changed, as they are now.
    pub accounts: Vec<AccountView>,
    /// Workloads cancelled or stopped by a close with `stop` (ACC-3).
    #[serde(default)]
    #[schema(required = true)]
    pub stopped: u64,
}

/// A node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = Node)]
pub struct NodeView {
    pub name: String,
    /// The cluster of the fleet it belongs to (only with several clusters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    pub pool: String,
    pub rack: u32,
    pub gpu_type: String,
    pub gpus: u32,
    pub free_gpus: u32,
    /// up | draining | drained | down
    pub health: String,
    /// Why it is out of service (draining, drained or down), as its
    /// operator said (`--reason`) or the executor that took it out; absent:
    /// up, or not said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Ids of the workloads on it that the caller may see.
    pub workloads: Vec<String>,
    /// The account of each of `workloads` (server side only: what
    /// [`NodeView::retain_visible`] filters by).
    #[serde(skip)]
    pub workload_accounts: Vec<String>,
    /// Its GPUs held by running (or stopping) workloads: one entry per
    /// workload the caller may see, and one anonymous entry (no workload,
    /// no account) for all the GPUs held by workloads it may not see, so
    /// that a grid of the node's GPUs is complete without naming them. The
    /// GPUs in no entry are free, or out of service with the node.
    #[serde(default)]
    #[schema(required = true)]
    pub held: Vec<NodeHold>,
}

/// GPUs of one node held by one running workload (`GET /v1/nodes`), or,
/// without `workload` and `account`, by workloads the caller may not see.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct NodeHold {
    /// The workload's id; null: workloads of accounts the caller may not see.
    #[schema(required = true)]
    pub workload: Option<String>,
    /// The workload's account; null as `workload`.
    #[schema(required = true)]
    pub account: Option<String>,
    /// How many of this node's GPUs it holds (of a gang: its part here).
    #[schema(minimum = 1)]
    pub gpus: u32,
    /// Which of this node's GPUs (indices, ascending).
    pub indices: Vec<u32>,
    /// The utilization (0..1) of the attempt's last GPU telemetry sample,
    /// the mean over all its GPUs (on every node of a gang), while that
    /// sample is recent (within three sampling intervals); null: not
    /// measured now, or not the caller's to see (docs/measures.md, "Live
    /// utilization").
    #[serde(default)]
    #[schema(required = true, minimum = 0, maximum = 1)]
    pub util: Option<f64>,
    /// `util` is below the config's `[telemetry] idle_threshold`: by its
    /// telemetry the workload leaves these GPUs idle. False when not measured.
    #[serde(default)]
    #[schema(required = true)]
    pub idle: bool,
}

impl NodeView {
    /// Keeps only the workloads whose account `visible` accepts; the
    /// holdings of the others become one anonymous entry with their GPUs
    /// (no id, no account, no utilization), so the GPU count stays right.
    pub fn retain_visible(&mut self, visible: impl Fn(&str) -> bool) {
        let pairs = std::mem::take(&mut self.workloads).into_iter().zip(std::mem::take(&mut self.workload_accounts));
        (self.workloads, self.workload_accounts) = pairs.filter(|(_, a)| visible(a)).unzip();
        let (seen, hidden): (Vec<NodeHold>, Vec<NodeHold>) =
            std::mem::take(&mut self.held).into_iter().partition(|h| h.account.as_deref().is_some_and(&visible));
        self.held = seen;
        if !hidden.is_empty() {
            let mut indices: Vec<u32> = hidden.iter().flat_map(|h| h.indices.iter().copied()).collect();
            indices.sort_unstable();
            self.held.push(NodeHold {
                workload: None,
                account: None,
                gpus: hidden.iter().map(|h| h.gpus).sum(),
                indices,
                util: None,
                idle: false,
            });
        }
    }
}

/// `POST /v1/tokens`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    pub name: String,
    /// admin | manager | researcher | metrics
    #[schema(value_type = crate::auth::Role)]
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub projects: Vec<String>,
    /// The Unix user its workloads run as: the service account it acts
    /// for (ID-1; a token without one cannot submit unless the server
    /// runs `--single-user`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Seconds until it stops working (none: until revoked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_s: Option<u64>,
}

/// How people sign in to this server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LoginInfo {
    /// `munge` when people may sign in with a munge credential.
    pub methods: Vec<String>,
    /// The payload a munge credential for this server carries.
    pub munge_payload: String,
    /// The login socket on the server's host (`peercred`): connecting to
    /// it signs in as the connecting Unix user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
}

/// A munge credential (`munge -s PAYLOAD`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MungeLogin {
    pub credential: String,
}

/// A session opened: its token is shown this once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LoginCreated {
    /// The session's id (`DELETE /v1/sessions/{id}` ends it).
    pub id: String,
    pub token: String,
    pub user: String,
    pub role: String,
    pub expires_t: i64,
}

/// A created token: the only time its text is shown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TokenCreated {
    pub name: String,
    pub role: String,
    pub token: String,
}

/// A token without its secret.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = Token)]
pub struct TokenView {
    pub name: String,
    pub role: String,
    #[schema(required = true)]
    pub scope: Option<String>,
    pub projects: Vec<String>,
    pub created_t: i64,
    pub created_by: String,
    /// The Unix user its workloads run as.
    #[schema(required = true)]
    pub user: Option<String>,
    /// When it stops working (Unix seconds); none: until revoked.
    #[schema(required = true)]
    pub expires_t: Option<i64>,
}

/// An audit entry.
/// A config reload's answer (CFG-1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = Reload)]
pub struct ReloadView {
    /// The config file read.
    pub file: String,
    /// One line per change applied, e.g. `contract.grace: 300 -> 60`,
    /// `accounts: create org/new`; empty when the file is unchanged.
    pub changes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = Audit)]
pub struct AuditView {
    pub t: i64,
    pub principal: String,
    pub action: String,
    pub target: String,
    #[schema(required = true)]
    pub before: Option<serde_json::Value>,
    #[schema(required = true)]
    pub after: Option<serde_json::Value>,
}

/// Every error body.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// CON-7: a checkpoint report taken.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = Checkpoint)]
pub struct CheckpointView {
    pub workload: String,
    pub attempt: i64,
    /// When the checkpoint completed (the report's time).
    pub t: i64,
    /// Seconds of the attempt's progress it saved: what a stop keeps.
    pub saved_s: i64,
}

#[cfg(test)]
mod reason_tests {
    use super::*;
    use allot_core::{Reason, Rule};

    #[test]
    fn a_reason_for_people_leads_with_a_sentence_and_shows_times_as_times() {
        let now = 1_796_456_000; // 2026-12-05T07:33:20Z
        let r = Reason::new(
            Rule::Slice,
            "no running workload is past its slice (CON-1); the earliest slice ends at t=1796456180",
        );
        let text = for_people(&r, now);
        assert!(text.starts_with(Rule::Slice.plain()), "{text}");
        assert!(text.contains("CON-1: no running workload"), "{text}");
        assert!(text.contains("ends at 07:36 UTC (in 3 min)"), "{text}");
        assert!(!text.contains("t=1796456180"), "{text}");
        // Another day: the date is shown; a time past: "ago".
        let r = Reason::new(Rule::Grace, "starts when their grace ends at t=1796600000; was at t=1796455000");
        let text = for_people(&r, now);
        assert!(text.contains("at 2026-12-06 23:33 UTC (in 1 d 16 h)"), "{text}");
        assert!(text.contains("at 07:16 UTC (16 min ago)"), "{text}");
        // Small numbers after t= are left alone (a simulator's seconds).
        let r = Reason::new(Rule::Slice, "at t=42");
        assert!(for_people(&r, now).ends_with("at t=42"));
    }
}

#[cfg(test)]
mod node_tests {
    use super::*;

    fn hold(id: &str, account: &str, indices: &[u32], util: Option<f64>) -> NodeHold {
        NodeHold {
            workload: Some(id.into()),
            account: Some(account.into()),
            gpus: indices.len() as u32,
            indices: indices.to_vec(),
            util,
            idle: util.is_some_and(|u| u < 0.1),
        }
    }

    fn node() -> NodeView {
        NodeView {
            name: "gpu-0".into(),
            cluster: None,
            pool: "gpu".into(),
            rack: 0,
            gpu_type: "H100".into(),
            gpus: 8,
            free_gpus: 2,
            health: "up".into(),
            reason: None,
            workloads: vec!["1".into(), "2".into(), "3".into()],
            workload_accounts: vec!["org/a".into(), "org/b".into(), "lab/x".into()],
            held: vec![
                hold("1", "org/a", &[0, 1], Some(0.9)),
                hold("2", "org/b", &[2, 5], Some(0.02)),
                hold("3", "lab/x", &[3, 4], None),
            ],
        }
    }

    /// Hidden holdings merge into one entry that names nothing but keeps
    /// the GPUs; a caller who sees everything gets the holdings unchanged.
    #[test]
    fn invisible_holdings_become_one_anonymous_entry() {
        let mut n = node();
        n.retain_visible(|a| a.starts_with("org/a"));
        assert_eq!(n.workloads, ["1"]);
        assert_eq!(n.held.len(), 2, "{:?}", n.held);
        assert_eq!(n.held[0], hold("1", "org/a", &[0, 1], Some(0.9)));
        let anon = &n.held[1];
        assert_eq!((anon.workload.as_deref(), anon.account.as_deref()), (None, None));
        assert_eq!((anon.gpus, anon.indices.as_slice(), anon.util, anon.idle), (4, &[2, 3, 4, 5][..], None, false));
        let held: u32 = n.held.iter().map(|h| h.gpus).sum();
        assert_eq!(held + n.free_gpus, n.gpus, "every GPU is free or held");

        let mut all = node();
        all.retain_visible(|_| true);
        assert_eq!(all, node());
        let mut none = node();
        none.retain_visible(|_| false);
        assert_eq!(none.held.len(), 1);
        assert!(none.workloads.is_empty());
    }
}

/// Cancel, hold or release several workloads at once.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRequest {
    /// Workload ids: `12`, `12_3` (an array's element), or an array's id
    /// (all its elements).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<String>,
    /// And/or every workload the caller may change that matches all of
    /// these filters (at least one filter, or ids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// States, comma-separated (default: those not ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An account's subtree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
}

/// What became of one workload of a bulk change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = BulkResult)]
pub struct BulkResult {
    pub id: String,
    /// Its state after the change (`cancelled`, `stopping`, `held`,
    /// `pending`); absent when it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Why it was refused; absent when it was changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
