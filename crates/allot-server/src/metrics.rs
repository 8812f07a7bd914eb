//! Prometheus metrics (`GET /metrics`, text exposition): the measures of
//! docs/design.md §3 as gauges and counters per account and class, the queue
//! length and the scheduling-pass latency.
//!
//! Counters count over the store's whole history: at start they are
//! restored from the recorded workloads and attempts ([`Metrics::restore`]),
//! so a restart does not reset them. Gauges are refreshed by the scheduler
//! task; the pass-latency histogram counts since this process started.
//!
//! Series labelled by account are kept in a registry of their own and shown
//! only to principals that may see every account (admins and scrape
//! tokens, [`crate::auth::Principal::can_read_account_metrics`]); others
//! get the cluster-wide series only.
//!
//! `utilization` is labelled `source`: `measured` (GPU telemetry) for the
//! attempts with recent samples, `declared` (the submission's `util`) for
//! the others; `gpu_utilization_measured{cluster, account, class}` is the
//! measured one per group (`crate::scheduler` telemetry).
//!
//! Beside the fleet-wide gauges, each cluster of the fleet has its own,
//! labelled `cluster` ([`Metrics::set_clusters`]): GPUs, GPUs allocated,
//! GPUs available (free on nodes that are up), pending workloads eligible
//! for it (FLEET-1: some pool of the cluster may serve them) and workloads
//! running on it. A fleet of one has them for its one cluster.
//!
//! Each scrape also probes the store (a read of its lease row) and reads
//! this process's hold on the lease ([`Metrics::probe`]): `store_up`,
//! `store_probe_seconds`, `lease_held`, `lease_epoch`.
//! `executor_errors_total{error}` counts the executors' failed launches and
//! unreachable clusters as their events pass to the scheduler
//! (`crate::server`), since this process started.
//!
//! Budgets and use are in base units, normalised GPU-seconds (NGH × 3600).
//! The exposition is OpenMetrics for a scraper that asks for it (Prometheus
//! does), else the Prometheus text format 0.0.4 ([`Metrics::encode_text`]),
//! which `promtool check metrics` and older tools read.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use allot_core::{Health, NodeId, Phase, State};

use crate::store::{AttemptRow, WorkloadRow};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AccountClass {
    pub account: String,
    pub class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabel {
    pub class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AccountLabel {
    pub account: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabel {
    pub error: String,
}

/// The kinds of `executor_errors_total` (see [`Metrics::executor_errors`]).
pub const EXECUTOR_ERRORS: [&str; 4] = ["launch_infrastructure", "launch_setup", "launch_workload", "cluster_down"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabel {
    pub cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterAccountClass {
    pub cluster: String,
    pub account: String,
    pub class: String,
}

/// Where a utilization figure comes from: GPU telemetry, or the
/// submission's declared `util` (docs/measures.md, "Live utilization").
#[derive(Copy, Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum UtilSource {
    Measured,
    Declared,
}

impl UtilSource {
    pub fn as_str(self) -> &'static str {
        match self {
            UtilSource::Measured => "measured",
            UtilSource::Declared => "declared",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    pub source: String,
}

type FGauge = Gauge<f64, AtomicU64>;

pub struct Metrics {
    /// Cluster-wide series (no account label).
    registry: Registry,
    /// Series labelled by account.
    per_account: Registry,
    pub submissions: Family<AccountClass, Counter>,
    pub starts: Family<AccountClass, Counter>,
    pub preemptions: Family<AccountClass, Counter>,
    pub completed: Family<AccountClass, Counter>,
    pub failed: Family<AccountClass, Counter>,
    pub cancelled: Family<AccountClass, Counter>,
    pub assigned_gpu_seconds: Family<AccountClass, Counter>,
    pub useful_gpu_seconds: Family<AccountClass, Counter>,
    pub lost_gpu_seconds: Family<AccountClass, Counter>,
    pub queue_time: Family<ClassLabel, Histogram>,
    pub pass_seconds: Histogram,
    pub queue_length: Family<ClassLabel, Gauge>,
    pub running: Family<AccountClass, Gauge>,
    pub allocated_gpus: Family<AccountClass, Gauge>,
    pub gpus_total: Gauge,
    pub gpus_in_service: Gauge,
    pub availability: FGauge,
    pub occupancy: FGauge,
    /// `source="measured"`: Σ allocated GPUs × their last sample's mean
    /// over attempts measured; `"declared"`: × the declared `util` over the
    /// others; both over the in-service GPUs (their sum is the estimate).
    pub utilization: Family<SourceLabel, FGauge>,
    /// The last samples' mean utilization of the attempts measured, GPU-weighted.
    pub gpu_utilization_measured: Family<ClusterAccountClass, FGauge>,
    pub budget_gpu_hours: Family<AccountLabel, FGauge>,
    pub used_gpu_hours: Family<AccountLabel, FGauge>,
    pub budget_remaining: Family<AccountLabel, FGauge>,
    pub projected_exhaustion: Family<AccountLabel, Gauge>,
    pub fair_share: Family<AccountLabel, FGauge>,
    pub cluster_gpus: Family<ClusterLabel, Gauge>,
    pub cluster_allocated_gpus: Family<ClusterLabel, Gauge>,
    pub cluster_available_gpus: Family<ClusterLabel, Gauge>,
    pub cluster_pending: Family<ClusterLabel, Gauge>,
    pub cluster_running: Family<ClusterLabel, Gauge>,
    pub store_up: Gauge,
    pub store_probe_seconds: Histogram,
    pub lease_held: Gauge,
    pub lease_epoch: Gauge,
    /// What the executors reported going wrong, since this process
    /// started: a launch that failed outside the workload
    /// (`launch_infrastructure`: no cgroup, log or checkpoint directory, a
    /// spawn or executor error), because of its setup where it was placed
    /// (`launch_setup`: a working directory missing on the node), or the
    /// workload's own (`launch_workload`: its command cannot run); a
    /// cluster of the fleet unreachable (`cluster_down`, FLEET-3).
    pub executor_errors: Family<ErrorLabel, Counter>,
    /// CFG-1: 1 until a config reload is refused, then 0 until one is
    /// applied (or finds the file unchanged).
    pub config_last_reload_successful: Gauge,
    /// Config reloads by outcome: `applied`, `unchanged`, `refused`.
    pub config_reloads: Family<OutcomeLabel, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: String,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Counts what an executor reported going wrong
    /// ([`Metrics::executor_errors`]), as the scheduler takes its event.
    pub(crate) fn executor_event(&self, e: &crate::executor::ExecEvent) {
        use crate::executor::{ExecEvent, LaunchFault};
        let error = match e {
            ExecEvent::LaunchFailed { error, .. } => match error.fault {
                LaunchFault::Infrastructure => "launch_infrastructure",
                LaunchFault::Setup => "launch_setup",
                LaunchFault::Workload => "launch_workload",
            },
            ExecEvent::ClusterDown { .. } => "cluster_down",
            _ => return,
        };
        self.executor_errors.get_or_create(&ErrorLabel { error: error.into() }).inc();
    }

    /// CFG-1: a config reload's outcome (`applied`, `unchanged`,
    /// `refused`).
    pub fn config_reload(&self, outcome: &str) {
        self.config_last_reload_successful.set(i64::from(outcome != "refused"));
        self.config_reloads.get_or_create(&OutcomeLabel { outcome: outcome.into() }).inc();
    }

    pub fn new() -> Metrics {
        let mut r = Registry::with_prefix("allot");
        let mut a = Registry::with_prefix("allot");
        let queue_time = Family::<ClassLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(1.0, 4.0, 10)) // 1 s … ~3 days
        });
        let pass_seconds = Histogram::new(exponential_buckets(0.0001, 2.0, 18)); // 0.1 ms … 13 s
        let m = Metrics {
            submissions: Family::default(),
            starts: Family::default(),
            preemptions: Family::default(),
            completed: Family::default(),
            failed: Family::default(),
            cancelled: Family::default(),
            assigned_gpu_seconds: Family::default(),
            useful_gpu_seconds: Family::default(),
            lost_gpu_seconds: Family::default(),
            queue_time,
            pass_seconds,
            queue_length: Family::default(),
            running: Family::default(),
            allocated_gpus: Family::default(),
            gpus_total: Gauge::default(),
            gpus_in_service: Gauge::default(),
            availability: FGauge::default(),
            occupancy: FGauge::default(),
            utilization: Family::default(),
            gpu_utilization_measured: Family::default(),
            budget_gpu_hours: Family::default(),
            used_gpu_hours: Family::default(),
            budget_remaining: Family::default(),
            projected_exhaustion: Family::default(),
            fair_share: Family::default(),
            cluster_gpus: Family::default(),
            cluster_allocated_gpus: Family::default(),
            cluster_available_gpus: Family::default(),
            cluster_pending: Family::default(),
            cluster_running: Family::default(),
            store_up: Gauge::default(),
            store_probe_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 14)), // 0.5 ms … 4 s
            lease_held: Gauge::default(),
            lease_epoch: Gauge::default(),
            executor_errors: Family::default(),
            config_last_reload_successful: Gauge::default(),
            config_reloads: Family::default(),
            registry: Registry::default(),
            per_account: Registry::default(),
        };
        a.register("submissions", "Workloads accepted", m.submissions.clone());
        a.register("starts", "Attempts started", m.starts.clone());
        a.register(
            "preemptions",
            "Workloads signalled to stop by the policy, a drain or a cancel",
            m.preemptions.clone(),
        );
        a.register("completed_workloads", "Workloads that finished (exit code 0)", m.completed.clone());
        a.register("failed_workloads", "Workloads that failed for good", m.failed.clone());
        a.register("cancelled_workloads", "Workloads cancelled", m.cancelled.clone());
        a.register("assigned_gpu_seconds", "GPU-seconds held by ended attempts", m.assigned_gpu_seconds.clone());
        a.register(
            "useful_gpu_seconds",
            "GPU-seconds of progress kept by ended attempts",
            m.useful_gpu_seconds.clone(),
        );
        a.register(
            "lost_gpu_seconds",
            "GPU-seconds lost to preemption and failures (grace + progress since checkpoint)",
            m.lost_gpu_seconds.clone(),
        );
        r.register("queue_time_seconds", "Submit to first start", m.queue_time.clone());
        r.register("scheduling_pass_seconds", "Latency of one scheduling pass", m.pass_seconds.clone());
        r.register("queue_length", "Pending workloads", m.queue_length.clone());
        a.register("running_workloads", "Workloads holding GPUs", m.running.clone());
        a.register("allocated_gpus", "GPUs held", m.allocated_gpus.clone());
        r.register("gpus", "GPUs in the cluster", m.gpus_total.clone());
        r.register("gpus_in_service", "GPUs on nodes up or draining", m.gpus_in_service.clone());
        r.register("availability", "In-service GPUs / all GPUs, now", m.availability.clone());
        r.register("occupancy", "Allocated GPUs / in-service GPUs, now", m.occupancy.clone());
        r.register(
            "utilization",
            "Σ allocated GPUs × util / in-service GPUs, now: source=measured (GPU telemetry) where attempts are \
             measured, source=declared (the submission's util) elsewhere; the sum is the estimate",
            m.utilization.clone(),
        );
        r.register("cluster_gpus", "GPUs of one cluster of the fleet", m.cluster_gpus.clone());
        r.register("cluster_allocated_gpus", "GPUs held on one cluster", m.cluster_allocated_gpus.clone());
        r.register("cluster_available_gpus", "Free GPUs on nodes up, of one cluster", m.cluster_available_gpus.clone());
        r.register(
            "cluster_pending_workloads",
            "Pending workloads eligible for one cluster (FLEET-1)",
            m.cluster_pending.clone(),
        );
        r.register("cluster_running_workloads", "Workloads holding GPUs on one cluster", m.cluster_running.clone());
        r.register(
            "store_up",
            "1 when the store answered this scrape's probe (a read of its lease row) within 5 s, else 0",
            m.store_up.clone(),
        );
        r.register(
            "store_probe_seconds",
            "Time the store took to answer the scrapes' probes (a read of its lease row)",
            m.store_probe_seconds.clone(),
        );
        r.register(
            "lease_held",
            "1 while this server holds the store's lease (renewed within its deadline, not taken over), else 0",
            m.lease_held.clone(),
        );
        r.register("lease_epoch", "The lease epoch this server holds (0: none)", m.lease_epoch.clone());
        r.register(
            "executor_errors",
            "Executor errors since this process started: error=launch_infrastructure, launch_setup, \
             launch_workload (a launch that failed and why) or cluster_down (a cluster of the fleet unreachable)",
            m.executor_errors.clone(),
        );
        for error in EXECUTOR_ERRORS {
            let _ = m.executor_errors.get_or_create(&ErrorLabel { error: error.into() });
        }
        m.config_last_reload_successful.set(1);
        r.register(
            "config_last_reload_successful",
            "1 until a config reload (SIGHUP, allot admin reload) is refused, then 0 until one succeeds (CFG-1)",
            m.config_last_reload_successful.clone(),
        );
        r.register(
            "config_reloads",
            "Config reloads by outcome: applied, unchanged, refused",
            m.config_reloads.clone(),
        );
        for outcome in ["applied", "unchanged", "refused"] {
            let _ = m.config_reloads.get_or_create(&OutcomeLabel { outcome: outcome.into() });
        }
        a.register(
            "account_budget_gpu_seconds",
            "Budget per period (normalised GPU-seconds: NGH × 3600)",
            m.budget_gpu_hours.clone(),
        );
        a.register(
            "account_used_gpu_seconds",
            "Used this budget period (normalised GPU-seconds: NGH × 3600)",
            m.used_gpu_hours.clone(),
        );
        a.register(
            "account_budget_remaining_gpu_seconds",
            "Budget + carried over − used this period (normalised GPU-seconds: NGH × 3600; negative once over)",
            m.budget_remaining.clone(),
        );
        a.register(
            "account_projected_exhaustion_timestamp_seconds",
            "When the remaining budget runs out at this period's average burn (absent: never, or already out)",
            m.projected_exhaustion.clone(),
        );
        a.register(
            "gpu_utilization_measured",
            "Measured GPU utilization of the running attempts with recent samples (GPU-weighted mean of their last \
             samples), per cluster, account and class",
            m.gpu_utilization_measured.clone(),
        );
        a.register("account_fair_share", "FS-1 usage / entitlement (1 = at fair share)", m.fair_share.clone());
        Metrics { registry: r, per_account: a, ..m }
    }

    /// Sets the per-account gauges from the account views (budget, use,
    /// remaining, projected exhaustion, fair share).
    pub fn set_accounts(&self, views: &[crate::views::AccountView]) {
        for v in views {
            let l = AccountLabel { account: v.path.clone() };
            if let Some(b) = v.budget_gpu_hours {
                self.budget_gpu_hours.get_or_create(&l).set(b * 3600.0);
            }
            self.used_gpu_hours.get_or_create(&l).set(v.used_gpu_hours * 3600.0);
            if let Some(r) = v.remaining_gpu_hours {
                self.budget_remaining.get_or_create(&l).set(r * 3600.0);
            }
            match v.projected_exhaustion_t {
                Some(t) => {
                    self.projected_exhaustion.get_or_create(&l).set(t);
                }
                None => {
                    self.projected_exhaustion.remove(&l);
                }
            }
            if let Some(f) = v.fair_share {
                self.fair_share.get_or_create(&l).set(f);
            }
        }
    }

    /// Sets the counters (and the queue-time histogram) to what the store
    /// recorded: called once at start, after recovery, before serving.
    pub fn restore(&self, workloads: &[WorkloadRow], attempts: &[AttemptRow]) {
        let mut first_start: HashMap<i64, i64> = HashMap::new();
        let by_seq: HashMap<i64, &WorkloadRow> = workloads.iter().map(|w| (w.seq, w)).collect();
        for a in attempts {
            let Some(w) = by_seq.get(&a.workload) else { continue };
            let ac = labels(&w.account, &w.class);
            self.starts.get_or_create(&ac).inc();
            if a.signal_t.is_some() {
                self.preemptions.get_or_create(&ac).inc();
            }
            if let Some(end) = a.end_t {
                let gpus = a.gpus.max(0) as u64;
                let assigned = (end - a.start_t).max(0) as u64 * gpus;
                let useful = a.kept_s.unwrap_or(0).max(0) as u64 * gpus;
                self.assigned_gpu_seconds.get_or_create(&ac).inc_by(assigned);
                self.useful_gpu_seconds.get_or_create(&ac).inc_by(useful);
                self.lost_gpu_seconds.get_or_create(&ac).inc_by(assigned.saturating_sub(useful));
            }
            let first = first_start.entry(a.workload).or_insert(a.start_t);
            *first = (*first).min(a.start_t);
        }
        for w in workloads {
            let ac = labels(&w.account, &w.class);
            self.submissions.get_or_create(&ac).inc();
            let ended = match w.phase() {
                Some(Phase::Finished) => Some(&self.completed),
                Some(Phase::Failed) => Some(&self.failed),
                Some(Phase::Cancelled) => Some(&self.cancelled),
                _ => None,
            };
            if let Some(c) = ended {
                c.get_or_create(&ac).inc();
            }
            if let Some(t) = first_start.get(&w.seq) {
                let waited = (t - w.submit_t).max(0) as f64;
                self.queue_time.get_or_create(&ClassLabel { class: w.class.clone() }).observe(waited);
            }
        }
    }

    /// Sets the per-cluster gauges from the state (see the module docs).
    pub fn set_clusters(&self, st: &State) {
        let c = &st.cluster;
        let n = c.clusters.len();
        let (mut gpus, mut free, mut held, mut pending, mut running) =
            (vec![0i64; n], vec![0i64; n], vec![0i64; n], vec![0i64; n], vec![0i64; n]);
        for (i, node) in c.nodes.iter().enumerate() {
            let k = c.cluster_of(NodeId(i as u32)).0 as usize;
            gpus[k] += i64::from(node.gpus);
            if st.health[i] == Health::Up {
                free[k] += i64::from(st.free.free[i].count_ones());
            }
        }
        for &w in &st.running {
            // A gang never spans clusters (FLEET-1): its first node's is its cluster.
            if let Some(first) = st.run(w).alloc.as_ref().and_then(|a| a.nodes().next()) {
                let k = c.cluster_of(first).0 as usize;
                running[k] += 1;
                held[k] += i64::from(st.spec(w).gpus);
            }
        }
        for (_, w) in &st.pending {
            let spec = st.spec(*w);
            let mut eligible = vec![false; n];
            for p in c.pools.iter().filter(|p| p.may_serve(spec.gpu_type, spec.clusters)) {
                eligible[p.cluster.0 as usize] = true;
            }
            eligible.iter().zip(&mut pending).filter(|(e, _)| **e).for_each(|(_, k)| *k += 1);
        }
        for (k, name) in c.clusters.iter().enumerate() {
            let l = ClusterLabel { cluster: name.clone() };
            self.cluster_gpus.get_or_create(&l).set(gpus[k]);
            self.cluster_allocated_gpus.get_or_create(&l).set(held[k]);
            self.cluster_available_gpus.get_or_create(&l).set(free[k]);
            self.cluster_pending.get_or_create(&l).set(pending[k]);
            self.cluster_running.get_or_create(&l).set(running[k]);
        }
    }

    /// The text exposition: the cluster-wide series, and the per-account
    /// ones when `per_account`.
    pub fn encode(&self, per_account: bool) -> String {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        let mut out = String::new();
        encode_registry(&mut out, &self.registry).expect("writing to a string");
        if per_account {
            encode_registry(&mut out, &self.per_account).expect("writing to a string");
        }
        encode_eof(&mut out).expect("writing to a string");
        out
    }

    /// The Prometheus text format 0.0.4 of [`Metrics::encode`]: a counter's
    /// `# HELP` and `# TYPE` name its samples (`…_total`), and OpenMetrics'
    /// `# UNIT` and `# EOF` lines are left out.
    pub fn encode_text(&self, per_account: bool) -> String {
        to_text_format(&self.encode(per_account))
    }

    /// Probes the store (a read of its lease row, at most 5 s) and reads
    /// this process's hold on the lease: `store_up`, `store_probe_seconds`,
    /// `lease_held`, `lease_epoch`.
    pub async fn probe(&self, store: &crate::store::Store) {
        let t0 = std::time::Instant::now();
        let read = tokio::time::timeout(std::time::Duration::from_secs(5), store.lease()).await;
        self.store_probe_seconds.observe(t0.elapsed().as_secs_f64());
        self.store_up.set(i64::from(matches!(read, Ok(Ok(_)))));
        let epoch = store.fence.epoch();
        self.lease_held.set(i64::from(epoch > 0 && store.fence.fresh()));
        self.lease_epoch.set(epoch);
    }
}

/// OpenMetrics text → Prometheus text format 0.0.4 (see [`Metrics::encode_text`]).
fn to_text_format(open: &str) -> String {
    let counters: std::collections::HashSet<&str> =
        open.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter")).collect();
    let mut out = String::with_capacity(open.len());
    for line in open.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "].into_iter().find(|p| line.starts_with(p));
        match meta.and_then(|p| line[p.len()..].split_once(' ').map(|(name, rest)| (p, name, rest))) {
            Some((p, name, rest)) if counters.contains(name) => {
                out.push_str(&format!("{p}{name}_total {rest}"));
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Sets `utilization{source}` from the GPU-weighted sums of utilization by
/// source over `in_service` GPUs.
pub fn set_utilization(m: &Metrics, sums: &std::collections::BTreeMap<UtilSource, f64>, in_service: u64) {
    let denom = in_service.max(1) as f64;
    for (source, sum) in sums {
        m.utilization.get_or_create(&SourceLabel { source: source.as_str().into() }).set(sum / denom);
    }
}

pub fn labels(account: &str, class: &str) -> AccountClass {
    AccountClass { account: account.to_string(), class: class.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The projection's gauges follow the views: the exhaustion instant is
    /// dropped again once nothing runs out.
    #[test]
    fn budget_remaining_and_projected_exhaustion() {
        let mut state = allot_testkit::StateBuilder::new()
            .pool("p", "H100", 1, 8)
            .account_with("org/a", |a| a.budget_gpu_hours = Some(10.0))
            .contract(|c| c.budget_period = 10 * 3600)
            .build();
        let a = state.accounts.get("org/a").unwrap();
        let tree = state.accounts.clone();
        state.ledger.change(&tree, a, 0, 2, 1.0);
        let m = Metrics::new();
        m.set_accounts(&crate::accounts::views(&state, 2 * 3600, false));
        let text = m.encode(true);
        assert!(text.contains("allot_account_budget_remaining_gpu_seconds{account=\"org/a\"} 21600.0"), "{text}");
        assert!(
            text.contains("allot_account_projected_exhaustion_timestamp_seconds{account=\"org/a\"} 18000"),
            "{text}"
        );
        state.ledger.change(&tree, a, 4 * 3600, -2, 1.0);
        state.ledger.change(&tree, a, 4 * 3600, 4, 1.0);
        m.set_accounts(&crate::accounts::views(&state, 5 * 3600, false));
        let text = m.encode(true);
        assert!(text.contains("allot_account_budget_remaining_gpu_seconds{account=\"org/a\"} -7200.0"), "{text}");
        assert!(!text.contains("allot_account_projected_exhaustion_timestamp_seconds{"), "{text}");
    }

    /// The text format names a counter family by its samples and has no
    /// `# EOF`; everything else is as in OpenMetrics.
    #[test]
    fn text_format_of_counters_histograms_and_gauges() {
        let m = Metrics::new();
        m.submissions.get_or_create(&labels("org/a", "batch")).inc();
        m.queue_length.get_or_create(&ClassLabel { class: "batch".into() }).set(3);
        m.pass_seconds.observe(0.01);
        let open = m.encode(true);
        let text = m.encode_text(true);
        assert!(open.contains("# TYPE allot_submissions counter") && open.ends_with("# EOF\n"), "{open}");
        for want in [
            "# HELP allot_submissions_total Workloads accepted.\n# TYPE allot_submissions_total counter\n\
             allot_submissions_total{account=\"org/a\",class=\"batch\"} 1\n",
            "# TYPE allot_queue_length gauge\nallot_queue_length{class=\"batch\"} 3\n",
            "# TYPE allot_scheduling_pass_seconds histogram\n",
            "allot_scheduling_pass_seconds_count 1\n",
        ] {
            assert!(text.contains(want), "{want:?} in:\n{text}");
        }
        assert!(!text.contains("# EOF") && !text.contains("# TYPE allot_submissions counter"), "{text}");
    }
}
