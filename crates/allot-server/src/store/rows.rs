//! Row types of the store and the writes the scheduler batches ([`Op`]).

use serde::{Deserialize, Serialize};

/// A workload as submitted (before the store assigns its `seq`).
#[derive(Clone, Debug, PartialEq)]
pub struct NewWorkload {
    /// Id of the token that submitted it, or `user:<name>` for a person
    /// (what owns it; see `crate::auth`).
    pub owner: Option<String>,
    /// The Unix user it runs as; `None`: the server's own user
    /// (`allot serve --single-user`).
    pub run_as: Option<String>,
    pub submit_t: i64,
    pub account: String,
    pub submitter: String,
    pub class: String,
    pub gpus: i64,
    pub nodes: i64,
    pub gpu_type: Option<String>,
    /// The clusters it may run on (FLEET-1), names separated by commas;
    /// `None`: any.
    pub clusters: Option<String>,
    pub work_s: i64,
    pub checkpoint_s: i64,
    pub util: f64,
    pub priority: String,
    pub preemptible: bool,
    pub name: Option<String>,
    /// JSON array of strings.
    pub command: String,
    /// JSON object of strings.
    pub env: String,
    pub retries: i64,
    /// CON-6: running time allowed per attempt; `None`: no limit.
    pub time_limit_s: Option<i64>,
    /// Where its command starts, an absolute path; `None`: the server's
    /// working directory.
    pub workdir: Option<String>,
    /// CON-8: it saves its progress when signalled.
    pub checkpoint_on_signal: bool,
    /// Its conditions (HOLD-1, DEP-1, ARR-1).
    pub conditions: RowConditions,
}

/// A workload's conditions as stored (docs/conditions.md).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RowConditions {
    /// ARR-1: the seq of its array's first element; the store sets it on
    /// insertion.
    pub array_id: Option<i64>,
    pub array_index: Option<i64>,
    pub array_count: Option<i64>,
    pub array_limit: Option<i64>,
    /// DEP-1: its dependencies by seq, `afterok:12:13,afterany:9`.
    pub depends_on: Option<String>,
    /// HOLD-1: on hold.
    pub held: bool,
}

/// A stored workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadRow {
    pub seq: i64,
    /// Id of the token that submitted it; `None` for workloads stored
    /// before tokens had ids whose submitter's token was gone by then.
    pub owner: Option<String>,
    /// The Unix user it runs as; `None`: the server's own user.
    pub run_as: Option<String>,
    pub submit_t: i64,
    pub account: String,
    pub submitter: String,
    pub class: String,
    pub gpus: i64,
    pub nodes: i64,
    pub gpu_type: Option<String>,
    /// The clusters it may run on (FLEET-1), names separated by commas;
    /// `None`: any.
    pub clusters: Option<String>,
    pub work_s: i64,
    pub checkpoint_s: i64,
    pub util: f64,
    pub priority: String,
    pub preemptible: bool,
    pub name: Option<String>,
    pub command: String,
    pub env: String,
    pub retries: i64,
    /// CON-6: running time allowed per attempt; `None`: no limit.
    #[serde(default)]
    pub time_limit_s: Option<i64>,
    /// Where its command starts, an absolute path; `None`: the server's
    /// working directory.
    #[serde(default)]
    pub workdir: Option<String>,
    /// CON-8: it saves its progress when signalled.
    #[serde(default)]
    pub checkpoint_on_signal: bool,
    /// Its conditions (HOLD-1, DEP-1, ARR-1).
    #[serde(default)]
    pub conditions: RowConditions,
    pub failures: i64,
    pub cancel_requested: bool,
    /// pending | running | stopping | finished | failed | cancelled | rejected
    pub state: String,
    pub reason: Option<String>,
    pub end_t: Option<i64>,
    /// The cluster of its last attempt ([`AttemptRow::cluster`]), if any:
    /// where it runs or ran.
    pub last_cluster: Option<String>,
    /// The measured GPU utilization of its attempts (0..1): their
    /// [`GpuSummary::util_mean`] weighted by GPUs × measured seconds;
    /// `None` where no attempt was measured.
    #[serde(default)]
    pub measured_util: Option<f64>,
    /// The allocation (JSON, as [`AttemptRow::alloc`]) and start of its last
    /// attempt, if any.
    pub last_alloc: Option<String>,
    pub last_start_t: Option<i64>,
    /// Its attempts so far.
    #[serde(default)]
    pub attempts: i64,
    /// GPU-seconds its ended attempts held (raw GPUs × seconds).
    #[serde(default)]
    pub ended_gpu_s: i64,
    /// When its first attempt started.
    #[serde(default)]
    pub first_start_t: Option<i64>,
}

impl WorkloadRow {
    /// Its state, `None` for text this server does not know.
    pub fn phase(&self) -> Option<allot_core::Phase> {
        crate::states::parse_phase(&self.state)
    }

    pub fn is_terminal(&self) -> bool {
        self.phase().is_some_and(allot_core::Phase::is_terminal)
    }
}

/// One attempt: a workload holding GPUs from `start_t` to `end_t`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AttemptRow {
    pub workload: i64,
    pub attempt: i64,
    /// JSON: `[{"node": "a-0", "gpus": [0, 1]}]`.
    pub alloc: String,
    /// The cluster of the fleet its nodes are in (a gang never spans
    /// clusters, FLEET-1); `None` in a fleet of one.
    pub cluster: Option<String>,
    pub gpus: i64,
    /// Normalisation weight of the GPU type it holds.
    pub weight: f64,
    /// starting (recorded, process not yet confirmed) | running | stopping | ended
    pub state: String,
    pub start_t: i64,
    pub start_reason: String,
    pub signal_t: Option<i64>,
    pub signal_reason: Option<String>,
    pub end_t: Option<i64>,
    /// finished | failed | preempted | cancelled | node-failed | lost
    pub outcome: Option<String>,
    pub exit_code: Option<i64>,
    /// Seconds of progress kept by this attempt.
    pub kept_s: Option<i64>,
    pub pid: Option<i64>,
    pub log_path: String,
    /// Its GPU samples, summed up; `None`: not measured (no sample).
    #[serde(default)]
    pub telemetry: Option<GpuSummary>,
    /// CON-7: checkpoints it reported, the last one's time and the
    /// progress of the attempt that one saved.
    #[serde(default)]
    pub checkpoints: i64,
    #[serde(default)]
    pub checkpoint_t: Option<i64>,
    #[serde(default)]
    pub checkpoint_saved_s: Option<i64>,
    /// CON-9: when it was warned of its idle GPUs, and when it was to be
    /// stopped for them (`None`: not warned, or withdrawn).
    #[serde(default)]
    pub idle_warning_t: Option<i64>,
    #[serde(default)]
    pub idle_reclaim_t: Option<i64>,
}

/// What an attempt's GPU samples add up to (`[telemetry]`, docs/server.md
/// "GPU telemetry"): one row per attempt, rewritten as samples arrive.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuSummary {
    /// Samples taken.
    pub samples: i64,
    /// Seconds the samples cover (each the time since the one before or
    /// the attempt's start, 1 s to one interval).
    pub measured_s: i64,
    /// Mean utilization (0..1) over the samples, each the mean over the
    /// attempt's GPUs.
    pub util_mean: f64,
    /// Seconds covered by samples below the idle threshold.
    pub idle_s: i64,
    /// The most memory one of its GPUs used in a sample (MiB).
    pub mem_max_mib: i64,
    /// Unix time of the last sample.
    pub last_t: i64,
}

impl AttemptRow {
    /// Its state, `None` for text this server does not know.
    pub fn attempt_state(&self) -> Option<crate::states::AttemptState> {
        crate::states::AttemptState::parse(&self.state)
    }

    /// How it ended, `None` while it runs (or for text this server does not know).
    pub fn ended_as(&self) -> Option<allot_core::engine::Outcome> {
        self.outcome.as_deref().and_then(allot_core::engine::Outcome::parse)
    }
}

/// A node event: an operator's action, or one an executor or the engine
/// recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeEventRow {
    pub seq: i64,
    pub t: i64,
    pub node: String,
    /// fail | repair | drain | undrain (an operator's, MNT-3's, an
    /// executor's) | outage | return (a cluster's, FLEET-3, FLEET-4)
    pub kind: String,
    pub principal: String,
    /// Why, as the operator said (`--reason`); `None`: not said.
    pub reason: Option<String>,
}

/// A budget or share set through the API, applied over the config.
#[derive(Clone, Debug, PartialEq)]
pub struct OverrideRow {
    pub path: String,
    /// `Some(v)`: set through the API; `None`: the config's value.
    pub budget_gpu_hours: Option<Option<f64>>,
    pub share: Option<Option<f64>>,
}

/// A stored token (only its hash).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenRow {
    /// Stable identity (random); names may be reused after a revocation.
    pub id: String,
    pub name: String,
    pub hash: String,
    pub role: String,
    pub scope: Option<String>,
    pub created_t: i64,
    pub created_by: String,
    /// The Unix user its workloads run as (a service account).
    pub unix_user: Option<String>,
    /// When it stops working (Unix seconds); `None`: until revoked.
    pub expires_t: Option<i64>,
}

/// A person's session (`allot login`): the SHA-256 of its token, whose it
/// is, how and from where it was opened, and its end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LoginRow {
    /// Stable identity (random): what revokes it.
    pub id: String,
    #[serde(skip)]
    pub hash: String,
    pub unix_user: String,
    /// `munge`, …
    pub method: String,
    /// The client's address as the server saw it.
    pub source: String,
    pub created_t: i64,
    pub expires_t: i64,
    /// The group names single sign-on's ID token gave (its grants come
    /// from them); `None`: the Unix user's groups on this host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<String>>,
}

/// One audit log entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditRow {
    pub seq: i64,
    pub t: i64,
    pub principal: String,
    pub action: String,
    pub target: String,
    pub before: Option<String>,
    pub after: Option<String>,
}

/// Filters of a workload listing.
#[derive(Clone, Debug, Default)]
pub struct WorkloadFilter {
    /// Only these subtrees (None: all accounts).
    pub visible: Option<Vec<String>>,
    /// Only this account's subtree.
    pub account: Option<String>,
    /// Only these states (phases, and `held`: pending and held, HOLD-1);
    /// empty: every state.
    pub states: Vec<String>,
    pub submitter: Option<String>,
    pub class: Option<String>,
    /// Only workloads of this name.
    pub name: Option<String>,
    /// Only the elements of this array (ARR-1).
    pub array: Option<i64>,
    /// Only workloads of these clusters of a fleet: pending ones (and
    /// those that never ran) eligible for one of them (FLEET-1: not pinned
    /// elsewhere, and of a GPU type its pools have), the others whose last
    /// attempt ran on one of them ([`AttemptRow::cluster`]). `None`: every
    /// cluster.
    pub clusters: Option<Vec<ClusterFilter>>,
    /// Only workloads with an id below this one (the next page of a
    /// listing, newest first).
    pub before: Option<i64>,
    pub limit: i64,
}

/// A cluster of a [`WorkloadFilter`]: its name and the GPU types of its
/// pools.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterFilter {
    pub name: String,
    pub gpu_types: Vec<String>,
}

/// One write of a scheduling step; a step's writes commit together.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A journal entry (`allot_core::engine::Entry`, as JSON) at `t`.
    Journal {
        t: i64,
        entry: String,
    },
    /// A snapshot of the live run at the last journal entry written before
    /// it (`allot_sim::replay::encode`).
    Snapshot {
        t: i64,
        data: Vec<u8>,
    },
    /// The journal compacted: the newest `keep` snapshots are kept, and
    /// the entries and snapshots before the oldest of them go.
    CompactJournal {
        keep: i64,
    },
    WorkloadState {
        seq: i64,
        state: allot_core::Phase,
        reason: String,
        end_t: Option<i64>,
    },
    Failures {
        seq: i64,
        failures: i64,
    },
    CancelRequested {
        seq: i64,
    },
    /// HOLD-1: held or released.
    Held {
        seq: i64,
        held: bool,
    },
    /// Boxed: a row is several times the size of every other write.
    AttemptStart {
        row: Box<AttemptRow>,
    },
    AttemptRunning {
        seq: i64,
        attempt: i64,
        pid: i64,
    },
    AttemptSignal {
        seq: i64,
        attempt: i64,
        t: i64,
        reason: String,
    },
    /// CON-7: a checkpoint reported at `t` saved `saved_s` of progress.
    AttemptCheckpoint {
        seq: i64,
        attempt: i64,
        t: i64,
        saved_s: i64,
    },
    /// CON-9: warned at `t`, to be stopped at `reclaim_t`; both `None`:
    /// the warning is withdrawn.
    AttemptIdle {
        seq: i64,
        attempt: i64,
        t: Option<i64>,
        reclaim_t: Option<i64>,
    },
    AttemptEnd {
        seq: i64,
        attempt: i64,
        end_t: i64,
        outcome: String,
        exit_code: Option<i64>,
        kept_s: i64,
    },
    NodeEvent {
        t: i64,
        node: String,
        kind: String,
        principal: String,
        /// Why, as the operator said; `None`: not said.
        reason: Option<String>,
    },
    /// An entry of the audit log, committed with the change it records.
    Audit {
        t: i64,
        principal: String,
        action: String,
        target: String,
        /// JSON, or `None`.
        before: Option<String>,
        after: Option<String>,
    },
    /// The attempt's GPU telemetry as it now stands (replaces the last).
    AttemptTelemetry {
        seq: i64,
        attempt: i64,
        summary: GpuSummary,
    },
    /// A point of the attempt's utilization over time (the dashboard's
    /// chart): the last sample of its bucket starting at `t` wins.
    GpuPoint(GpuSample),
}

/// A point of an attempt's GPU utilization over time (`gpu_samples`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    pub seq: i64,
    pub attempt: i64,
    /// Start of the bucket (Unix seconds).
    pub t: i64,
    /// Mean utilization of its GPUs (0..1).
    pub util: f64,
    /// The most memory used on one of its GPUs (MiB).
    pub mem_mib: i64,
}
