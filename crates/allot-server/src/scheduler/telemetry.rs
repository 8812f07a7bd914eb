//! GPU telemetry in the scheduler task: the samples executors report
//! ([`ExecEvent::Telemetry`](crate::executor::ExecEvent)) folded into each
//! running attempt's [`GpuSummary`], written to the store with the step's
//! other writes, and the live utilization gauges (docs/server.md, "GPU
//! telemetry"; docs/measures.md, "Live utilization").
//!
//! A summary is kept in memory while its attempt runs and rewritten in
//! the store as a whole (one row per attempt, never one per sample): an
//! attempt never outlives its server (a restarted server stops the
//! survivors), so nothing is read back.

use std::collections::{BTreeMap, HashMap};

use allot_core::{Phase, Time};
use allot_trace::config::TelemetryConfig;

use super::Scheduler;
use crate::executor::{AttemptKey, GpuSample};
use crate::metrics::{ClusterAccountClass, UtilSource};
use crate::store::{GpuSummary, Op};

/// The telemetry settings and the running attempts' measures.
#[derive(Debug, Default)]
pub(crate) struct Telemetry {
    pub(crate) config: TelemetryConfig,
    attempts: HashMap<AttemptKey, Measured>,
}

/// A running attempt's summary and the mean utilization of its last sample.
#[derive(Clone, Debug)]
struct Measured {
    summary: GpuSummary,
    last_util: f64,
}

impl Telemetry {
    pub(crate) fn new(config: TelemetryConfig) -> Telemetry {
        Telemetry { config, attempts: HashMap::new() }
    }

    /// The attempt is over: its summary is final in the store.
    pub(crate) fn forget(&mut self, key: AttemptKey) {
        self.attempts.remove(&key);
    }

    /// The attempt's last sample's mean, unless older than three intervals
    /// (the executor stopped answering): then it counts as not measured.
    pub(super) fn current(&self, key: AttemptKey, now: Time) -> Option<f64> {
        let m = self.attempts.get(&key)?;
        let fresh = self.config.interval_s.is_some_and(|i| now.saturating_sub(m.summary.last_t.max(0) as u64) <= 3 * i);
        fresh.then_some(m.last_util)
    }
}

/// `summary` with one more sample at `t` whose mean utilization over the
/// attempt's GPUs is `util` and whose largest memory use is `mem_max_mib`.
/// The sample covers the time since the previous one (or the attempt's
/// start at `start_t`), at least 1 s and at most one `interval_s` (a gap
/// of failed samples is not measured); that time is idle when `util` is
/// below `idle_threshold`.
pub(crate) fn fold(
    summary: Option<&GpuSummary>,
    start_t: Time,
    t: Time,
    util: f64,
    mem_max_mib: u64,
    config: &TelemetryConfig,
) -> GpuSummary {
    let prev = summary.map_or(start_t, |s| s.last_t.max(0) as Time);
    let dt = t.saturating_sub(prev).clamp(1, config.interval_s.unwrap_or(1).max(1)) as i64;
    let idle = if util < config.idle_threshold { dt } else { 0 };
    let mem = i64::try_from(mem_max_mib).unwrap_or(i64::MAX);
    match summary {
        None => {
            GpuSummary { samples: 1, measured_s: dt, util_mean: util, idle_s: idle, mem_max_mib: mem, last_t: t as i64 }
        }
        Some(s) => GpuSummary {
            samples: s.samples + 1,
            measured_s: s.measured_s + dt,
            util_mean: s.util_mean + (util - s.util_mean) / (s.samples + 1) as f64,
            idle_s: s.idle_s + idle,
            mem_max_mib: s.mem_max_mib.max(mem),
            last_t: (t as i64).max(s.last_t),
        },
    }
}

/// Seconds per point of an attempt's utilization over time in the store
/// (or the sampling interval, when longer): at most 1,440 points a day per
/// attempt, whatever the sampling interval.
pub(crate) const POINT_BUCKET_S: u64 = 60;

impl Scheduler {
    /// An executor's sample of an attempt's GPUs: folded into the
    /// attempt's summary, whose store row is rewritten with the step's
    /// writes. A sample of an attempt that is no longer the workload's
    /// running one (it ended meanwhile) is dropped.
    pub(crate) fn on_telemetry(&mut self, key: AttemptKey, t: Time, gpus: &[GpuSample], now: Time) {
        let Some(&w) = self.by_seq.get(&key.seq) else { return };
        let run = self.engine.state().run(w);
        let current = i64::from(run.attempts) == key.attempt && matches!(run.phase, Phase::Running | Phase::Stopping);
        if !current || gpus.is_empty() {
            return;
        }
        let (Some(started), attempt) = (run.started, run.attempts) else { return };
        // The attempt's mean utilization over its GPUs at this sample.
        let util = gpus.iter().map(|g| g.util.clamp(0.0, 1.0)).sum::<f64>() / gpus.len() as f64;
        // CON-9: the engine reads it as the attempt's telemetry (idle
        // reclaim); its effects are applied with the event's.
        self.feed(allot_core::engine::Input::GpuUtil { workload: w, attempt, util }, t.min(now));
        let mem = gpus.iter().map(|g| g.mem_used_mib).max().unwrap_or(0);
        let before = self.telemetry.attempts.get(&key).map(|m| &m.summary);
        let summary = fold(before, started, t.min(now), util, mem, &self.telemetry.config);
        tracing::debug!(workload = key.seq, attempt, util, samples = summary.samples, "gpu sample");
        let op = Op::AttemptTelemetry { seq: key.seq, attempt: key.attempt, summary: summary.clone() };
        // One write per attempt per step: a later sample replaces the earlier.
        let same = |o: &&mut Op| matches!(o, Op::AttemptTelemetry { seq, attempt, .. } if (*seq, *attempt) == (key.seq, key.attempt));
        match self.ops.iter_mut().rev().find(same) {
            Some(o) => *o = op,
            None => self.ops.push(op),
        }
        self.telemetry.attempts.insert(key, Measured { summary, last_util: util });
        // The chart's point of this bucket (the last sample in it wins).
        let bucket = POINT_BUCKET_S.max(self.telemetry.config.interval_s.unwrap_or(1)) as i64;
        let at = t.min(now) as i64;
        let point = crate::store::GpuSample {
            seq: key.seq,
            attempt: key.attempt,
            t: at - at.rem_euclid(bucket),
            util,
            mem_mib: i64::try_from(mem).unwrap_or(i64::MAX),
        };
        let same = |o: &&mut Op| matches!(o, Op::GpuPoint(p) if (p.seq, p.attempt, p.t) == (point.seq, point.attempt, point.t));
        match self.ops.iter_mut().rev().find(same) {
            Some(o) => *o = Op::GpuPoint(point),
            None => self.ops.push(Op::GpuPoint(point)),
        }
    }
}

/// Sets `allot_gpu_utilization_measured{cluster, account, class}` from the
/// running attempts' last samples, and returns the GPU-weighted sums of
/// utilization by source: measured where an attempt has a recent sample,
/// declared (the submission's `util`) elsewhere.
pub(crate) fn utilization(s: &Scheduler, now: Time) -> BTreeMap<UtilSource, f64> {
    let st = s.engine.state();
    let mut groups: HashMap<ClusterAccountClass, (f64, f64)> = HashMap::new();
    let mut sums = BTreeMap::from([(UtilSource::Measured, 0.0), (UtilSource::Declared, 0.0)]);
    for &w in &st.running {
        let (spec, run) = (st.spec(w), st.run(w));
        let gpus = f64::from(spec.gpus);
        let Some(util) = s.telemetry.current(s.key(w, run.attempts), now) else {
            *sums.get_mut(&UtilSource::Declared).expect("present") += gpus * spec.util;
            continue;
        };
        *sums.get_mut(&UtilSource::Measured).expect("present") += gpus * util;
        let cluster = run.alloc.as_ref().and_then(|a| a.nodes().next()).map(|n| st.cluster.cluster_of(n));
        let label = ClusterAccountClass {
            cluster: cluster.map(|c| st.cluster.cluster_name(c).to_string()).unwrap_or_default(),
            account: st.accounts.account(spec.account).path.clone(),
            class: spec.class.as_str().to_string(),
        };
        let g = groups.entry(label).or_default();
        g.0 += gpus * util;
        g.1 += gpus;
    }
    let family = &s.metrics.gpu_utilization_measured;
    family.clear();
    for (label, (util, gpus)) in groups {
        family.get_or_create(&label).set(util / gpus.max(1.0));
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(interval: u64, idle: f64) -> TelemetryConfig {
        TelemetryConfig { interval_s: Some(interval), idle_threshold: idle }
    }

    /// A summary as the cases write it: samples, measured s, mean, idle s, memory, last t.
    fn summary(
        samples: i64,
        measured_s: i64,
        util_mean: f64,
        idle_s: i64,
        mem_max_mib: i64,
        last_t: i64,
    ) -> GpuSummary {
        GpuSummary { samples, measured_s, util_mean, idle_s, mem_max_mib, last_t }
    }

    #[test]
    fn folds_samples_into_means_idle_time_and_memory() {
        let c = config(10, 0.1);
        type Samples = &'static [(Time, f64, u64)];
        let cases: [(&str, Samples, GpuSummary); 4] = [
            ("one busy sample covers the time since the start", &[(1008, 0.8, 100)], summary(1, 8, 0.8, 0, 100, 1008)),
            (
                "busy then idle",
                &[(1010, 0.9, 100), (1020, 0.05, 300), (1030, 0.0, 200)],
                summary(3, 30, 0.95 / 3.0, 20, 300, 1030),
            ),
            ("a gap counts one interval", &[(1010, 0.5, 1), (1100, 0.5, 1)], summary(2, 20, 0.5, 0, 1, 1100)),
            ("two in one second count 1 s", &[(1010, 0.0, 1), (1010, 0.0, 1)], summary(2, 11, 0.0, 11, 1, 1010)),
        ];
        for (name, samples, want) in cases {
            let mut s: Option<GpuSummary> = None;
            for &(t, u, m) in samples {
                s = Some(fold(s.as_ref(), 1000, t, u, m, &c));
            }
            let got = s.unwrap();
            assert!((got.util_mean - want.util_mean).abs() < 1e-9, "case {name}: {got:?}");
            assert_eq!(GpuSummary { util_mean: want.util_mean, ..got }, want, "case {name}");
        }
    }

    /// Samples of the running attempt fold into one write per step and
    /// feed the gauges; a sample of another attempt, or after the end, is
    /// dropped.
    #[tokio::test]
    async fn samples_fold_into_one_write_per_step_and_stale_ones_are_dropped() {
        use crate::executor::{ExecEvent, ExitStatus};
        use crate::scheduler::testing::{batch, scheduler};
        let text = "[cluster]\nname = \"c\"\n[[cluster.pools]]\nname = \"gpu\"\ngpu = \"H100\"\nnodes = 1\n\
                    gpus_per_node = 4\n[[accounts]]\npath = \"org/a\"\n";
        let cfg = allot_trace::config::parse_config(text, "c.toml").unwrap();
        let dir = std::env::temp_dir().join(format!("allot-telemetry-fold-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = crate::store::Store::open(&format!("sqlite://{}", dir.join("allot.db").display())).await.unwrap();
        let state = allot_core::State::new(cfg.cluster.clone(), cfg.accounts.clone(), cfg.contract);
        let mut s = scheduler(allot_core::Engine::new(state), store, &dir);
        s.telemetry = Telemetry::new(config(1, 0.1));
        let now = s.tick_now();
        let spec = allot_core::WorkloadSpec { util: 0.5, ..batch("1", cfg.accounts.get("org/a").unwrap(), 2, 1, now) };
        let live = crate::scheduler::Live {
            seq: 1,
            command: vec!["work".into()],
            env: Default::default(),
            workdir: None,
            run_as: crate::identity::RunAs::Server,
            after: Vec::new(),
        };
        s.arrive(spec, live, 0, now);
        s.pass(now);
        let key = s.launches.pop().expect("launched").key;
        s.exec_event(ExecEvent::Started { key, pid: 7 });
        let declared = utilization(&s, now);
        assert_eq!((declared[&UtilSource::Measured], declared[&UtilSource::Declared]), (0.0, 1.0), "2 GPUs × 0.5");
        s.ops.clear();
        let sample = |util: f64| {
            let gpu = |index: u32| GpuSample {
                node: "gpu-0".into(),
                index,
                util,
                mem_used_mib: 100 * u64::from(index + 1),
                mem_total_mib: 800,
            };
            vec![gpu(0), gpu(1)]
        };
        s.on_telemetry(key, now + 1, &sample(0.8), now + 1);
        s.on_telemetry(key, now + 2, &sample(0.4), now + 2);
        s.on_telemetry(AttemptKey { attempt: 2, ..key }, now + 2, &sample(1.0), now + 2);
        s.on_telemetry(AttemptKey { seq: 9, ..key }, now + 2, &sample(1.0), now + 2);
        let writes: Vec<&GpuSummary> = s
            .ops
            .iter()
            .filter_map(|o| match o {
                Op::AttemptTelemetry { summary, .. } => Some(summary),
                _ => None,
            })
            .collect();
        assert_eq!(writes.len(), 1, "one write per attempt per step: {:?}", s.ops);
        let w = writes[0];
        assert_eq!((w.samples, w.measured_s, w.mem_max_mib, w.idle_s), (2, 2, 200, 0), "{w:?}");
        assert!((w.util_mean - 0.6).abs() < 1e-9, "{w:?}");
        let sums = utilization(&s, now + 2);
        assert!((sums[&UtilSource::Measured] - 0.8).abs() < 1e-9 && sums[&UtilSource::Declared] == 0.0, "{sums:?}");
        let text = s.metrics.encode(true);
        let series = "allot_gpu_utilization_measured{cluster=\"c\",account=\"org/a\",class=\"batch\"} 0.4";
        assert!(text.contains(series), "{text}");
        // Over: later samples are dropped, the gauges forget it.
        s.exec_event(ExecEvent::Exited { key, status: ExitStatus { code: Some(0), signal: None } });
        s.ops.clear();
        s.on_telemetry(key, now + 3, &sample(0.9), now + 3);
        assert!(s.ops.is_empty(), "{:?}", s.ops);
        utilization(&s, now + 3);
        assert!(!s.metrics.encode(true).contains("allot_gpu_utilization_measured{"), "no series once over");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_stale_sample_is_not_current() {
        let mut t = Telemetry::new(config(10, 0.1));
        let key = AttemptKey { seq: 1, attempt: 1 };
        let summary = fold(None, 0, 100, 0.7, 1, &t.config);
        t.attempts.insert(key, Measured { summary, last_util: 0.7 });
        assert_eq!(t.current(key, 130), Some(0.7));
        assert_eq!(t.current(key, 131), None, "three intervals without a sample: not measured");
        t.forget(key);
        assert_eq!(t.current(key, 100), None);
    }
}
