//! The History page's measures over time, computed from the store's rows
//! ([`crate::store::history::HistoryRows`]) with the definitions of
//! docs/measures.md, per bucket of the window and over the whole window:
//!
//! * **available GPU-s**: ∫ in-service GPUs, from the node events: a node
//!   is in service while up, and while draining until the last attempt it
//!   held at the drain ends (`Health::in_service`, MNT-1); failed (MNT-2)
//!   or drained it is not. Always the whole fleet's.
//! * **assigned GPU-s**: Σ over attempts of their time in the bucket × GPUs
//!   (an attempt that still runs counts until the window's end);
//!   `occupancy` = assigned / available.
//! * **used GPU-s**: assigned × the attempt's measured mean utilization
//!   where GPU telemetry sampled it, × its declared `util` elsewhere, kept
//!   apart; `utilization` = (measured + declared used) / available.
//! * **declared** and **measured** apart: Σ assigned × declared `util`
//!   over every attempt, and the assigned GPU-s of the attempts telemetry
//!   sampled (so a page says "not measured" where none was, rather than 0).
//! * **queue time**: first start − submit, of the workloads whose first
//!   attempt started in the bucket; percentiles by nearest rank.
//! * **preemptions**: attempts that ended `preempted` in the bucket.
//! * **queue length** (not a measure of the report): workloads waiting
//!   (submitted, not ended, holding no GPUs: before their first start and
//!   between attempts), averaged over the bucket's time.
//!
//! Everything but availability counts only the attempts and workloads of
//! the accounts the viewer may see.

use std::collections::BTreeMap;

use crate::store::NodeEventRow;
use crate::store::history::{HistoryAttempt, HistoryRows, HistoryWorkload};
use crate::views::NodeGpusView;

/// The window `[from, to)` cut into `n` buckets of `bucket` seconds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub from: i64,
    pub to: i64,
    pub bucket: i64,
}

impl Window {
    /// The window of `span` seconds ending at `to`, in buckets of `bucket`
    /// seconds (the start moved back to a whole number of buckets).
    pub fn ending(to: i64, span: i64, bucket: i64) -> Window {
        let bucket = bucket.max(1);
        let n = (span.max(1) + bucket - 1) / bucket;
        Window { from: to - n * bucket, to, bucket }
    }

    pub fn buckets(&self) -> usize {
        ((self.to - self.from) / self.bucket).max(0) as usize
    }

    /// The start of bucket `i`.
    pub fn start(&self, i: usize) -> i64 {
        self.from + i as i64 * self.bucket
    }

    /// The bucket of instant `t`, if it lies in the window.
    fn index(&self, t: i64) -> Option<usize> {
        (t >= self.from && t < self.to).then(|| ((t - self.from) / self.bucket) as usize)
    }

    /// Adds `weight` × the seconds of `[a, b)` within each bucket to `v`.
    fn spread(&self, v: &mut [f64], a: i64, b: i64, weight: f64) {
        let (a, b) = (a.max(self.from), b.min(self.to));
        let mut t = a;
        while t < b {
            let i = ((t - self.from) / self.bucket) as usize;
            let end = self.start(i + 1).min(b);
            v[i] += (end - t) as f64 * weight;
            t = end;
        }
    }
}

/// A node of the fleet and its GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCap {
    pub name: String,
    pub gpus: u32,
}

/// The measures per bucket.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    /// GPUs of the fleet, in service or not.
    pub total_gpus: u64,
    pub available_s: Vec<f64>,
    pub assigned_s: Vec<f64>,
    /// Assigned × measured utilization, of the attempts telemetry sampled.
    pub used_measured_s: Vec<f64>,
    /// Assigned × declared `util`, of the attempts telemetry did not sample.
    pub used_declared_s: Vec<f64>,
    /// Assigned GPU-s of the attempts telemetry sampled.
    pub measured_assigned_s: Vec<f64>,
    /// Assigned × declared `util`, of every attempt (what was declared,
    /// measured or not).
    pub declared_s: Vec<f64>,
    pub waiting_s: Vec<f64>,
    /// Queue times (s) of the workloads first started in each bucket.
    pub queue_times: Vec<Vec<i64>>,
    pub preemptions: Vec<u64>,
}

/// Nearest-rank percentiles of a list (docs/measures.md): p50, p90, p95,
/// p99 and the mean.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct QueueStats {
    pub n: usize,
    pub p50: i64,
    pub p90: i64,
    pub p95: i64,
    pub p99: i64,
    pub mean: f64,
}

impl QueueStats {
    /// `None` for no values.
    pub fn of(values: &[i64]) -> Option<QueueStats> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_unstable();
        let rank = |p: usize| v[(p * v.len()).div_ceil(100).max(1) - 1];
        Some(QueueStats {
            n: v.len(),
            p50: rank(50),
            p90: rank(90),
            p95: rank(95),
            p99: rank(99),
            mean: v.iter().map(|x| *x as f64).sum::<f64>() / v.len() as f64,
        })
    }
}

/// `a / b`, 0 when `b` is 0 (docs/measures.md: such a ratio is reported as 0).
pub fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

impl Series {
    /// The measures of `rows` over `w` for a fleet of `nodes`, counting
    /// the work of the accounts `visible` accepts.
    pub fn compute(rows: &HistoryRows, nodes: &[NodeCap], w: &Window, visible: &dyn Fn(&str) -> bool) -> Series {
        let n = w.buckets();
        let mut s = Series {
            total_gpus: nodes.iter().map(|n| u64::from(n.gpus)).sum(),
            available_s: vec![0.0; n],
            assigned_s: vec![0.0; n],
            used_measured_s: vec![0.0; n],
            used_declared_s: vec![0.0; n],
            measured_assigned_s: vec![0.0; n],
            declared_s: vec![0.0; n],
            waiting_s: vec![0.0; n],
            queue_times: vec![Vec::new(); n],
            preemptions: vec![0; n],
        };
        available(&mut s.available_s, rows, nodes, w);
        let mut by_workload: BTreeMap<i64, Vec<&HistoryAttempt>> = BTreeMap::new();
        for a in rows.attempts.iter().filter(|a| visible(&a.account)) {
            by_workload.entry(a.workload).or_default().push(a);
            let end = a.end_t.unwrap_or(w.to);
            let gpus = a.gpus.max(0) as f64;
            w.spread(&mut s.assigned_s, a.start_t, end, gpus);
            w.spread(&mut s.declared_s, a.start_t, end, gpus * a.declared_util);
            match a.measured_util {
                Some(u) => {
                    w.spread(&mut s.used_measured_s, a.start_t, end, gpus * u);
                    w.spread(&mut s.measured_assigned_s, a.start_t, end, gpus);
                }
                None => w.spread(&mut s.used_declared_s, a.start_t, end, gpus * a.declared_util),
            }
            if a.first
                && let Some(i) = w.index(a.start_t)
            {
                s.queue_times[i].push(a.start_t - a.submit_t);
            }
            if a.outcome.as_deref() == Some("preempted")
                && let Some(i) = a.end_t.and_then(|e| w.index(e))
            {
                s.preemptions[i] += 1;
            }
        }
        for wl in rows.workloads.iter().filter(|x| visible(&x.account)) {
            waiting(&mut s.waiting_s, wl, by_workload.get(&wl.seq).map_or(&[], Vec::as_slice), w);
        }
        s
    }
}

/// Adds a workload's waiting time to `v`: its life in the window minus the
/// time its attempts held GPUs.
fn waiting(v: &mut [f64], wl: &HistoryWorkload, attempts: &[&HistoryAttempt], w: &Window) {
    let mut t = wl.submit_t;
    let end = wl.end_t.unwrap_or(w.to);
    let mut spans: Vec<(i64, i64)> = attempts.iter().map(|a| (a.start_t, a.end_t.unwrap_or(w.to))).collect();
    spans.sort_unstable();
    for (a, b) in spans {
        if a > t {
            w.spread(v, t, a.min(end), 1.0);
        }
        t = t.max(b);
    }
    if t < end {
        w.spread(v, t, end, 1.0);
    }
}

/// A node's health as the engine keeps it (allot_core::Health), with when
/// a drain began: draining, it is drained once the attempts it held then
/// have ended (computed, as no event records it).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Health {
    Up,
    Draining(i64),
    Down,
}

/// The health after `kind` (the engine's `node_event`: a drain or an
/// undrain of a failed node changes nothing).
fn after(h: Health, kind: &str, t: i64) -> Health {
    match (kind, h) {
        ("fail", _) => Health::Down,
        ("repair", _) => Health::Up,
        ("drain" | "undrain", Health::Down) => Health::Down,
        ("drain", Health::Draining(since)) => Health::Draining(since),
        ("drain", _) => Health::Draining(t),
        ("undrain", _) => Health::Up,
        _ => h,
    }
}

/// Available GPU-s per bucket: each node's GPUs over the time it was in
/// service.
fn available(v: &mut [f64], rows: &HistoryRows, nodes: &[NodeCap], w: &Window) {
    let mut events: BTreeMap<&str, Vec<&NodeEventRow>> = BTreeMap::new();
    for e in &rows.events {
        events.entry(e.node.as_str()).or_default().push(e);
    }
    // The GPUs each node's attempts held: (start, end) by node.
    let mut holds: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for a in &rows.attempts {
        let on: Vec<NodeGpusView> = serde_json::from_str(&a.alloc).unwrap_or_default();
        for p in on {
            holds.entry(p.node).or_default().push((a.start_t, a.end_t.unwrap_or(i64::MAX)));
        }
    }
    for node in nodes {
        let gpus = f64::from(node.gpus);
        let list = events.get(node.name.as_str()).map_or(&[][..], Vec::as_slice);
        let held = holds.get(&node.name).map_or(&[][..], Vec::as_slice);
        // Served until the last attempt holding it at the drain ends.
        let drained_at = |since: i64| {
            held.iter().filter(|(a, b)| *a <= since && *b > since).map(|(_, b)| *b).max().unwrap_or(since).max(since)
        };
        let (before, during): (Vec<&NodeEventRow>, Vec<&NodeEventRow>) = list.iter().partition(|e| e.t < w.from);
        let mut h = start_health(&before);
        let mut t = w.from;
        let serve = |v: &mut [f64], h: Health, a: i64, b: i64| match h {
            Health::Up => w.spread(v, a, b, gpus),
            Health::Draining(since) => w.spread(v, a, drained_at(since).min(b), gpus),
            Health::Down => {}
        };
        for e in during {
            serve(v, h, t, e.t);
            h = after(h, &e.kind, e.t);
            t = e.t;
        }
        serve(v, h, t, w.to);
    }
}

/// A node's health at the window's start from the events before it (its
/// last one and its last failure or repair, as the store reads them).
fn start_health(before: &[&NodeEventRow]) -> Health {
    let Some(last) = before.iter().max_by_key(|e| e.seq) else { return Health::Up };
    let failed = before
        .iter()
        .filter(|e| e.kind == "fail" || e.kind == "repair")
        .max_by_key(|e| e.seq)
        .is_some_and(|e| e.kind == "fail");
    let prior = if failed { Health::Down } else { Health::Up };
    after(prior, &last.kind, last.t)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_000_000;

    fn attempt(workload: i64, node: &str, gpus: i64, start: i64, end: Option<i64>) -> HistoryAttempt {
        let idx: Vec<String> = (0..gpus).map(|i| i.to_string()).collect();
        HistoryAttempt {
            workload,
            attempt: 1,
            account: "org/a".into(),
            alloc: format!(r#"[{{"node":"{node}","gpus":[{}]}}]"#, idx.join(",")),
            gpus,
            start_t: T0 + start,
            end_t: end.map(|e| T0 + e),
            outcome: end.map(|_| "finished".into()),
            measured_util: None,
            declared_util: 1.0,
            submit_t: T0 + start,
            first: true,
        }
    }

    fn event(seq: i64, t: i64, node: &str, kind: &str) -> NodeEventRow {
        NodeEventRow { seq, t: T0 + t, node: node.into(), kind: kind.into(), principal: "root".into(), reason: None }
    }

    fn nodes(n: usize, gpus: u32) -> Vec<NodeCap> {
        (0..n).map(|i| NodeCap { name: format!("gpu-{i}"), gpus }).collect()
    }

    fn sum(v: &[f64]) -> f64 {
        v.iter().sum()
    }

    /// Occupancy and availability over the whole window for named cases.
    #[test]
    fn occupancy_and_availability_follow_the_definitions() {
        let w = Window::ending(T0 + 100, 100, 10);
        type Case = (&'static str, Vec<HistoryAttempt>, Vec<NodeEventRow>, f64, f64);
        let cases: Vec<Case> = vec![
            ("one GPU of two all the time", vec![attempt(1, "gpu-0", 1, -50, None)], vec![], 0.5, 1.0),
            ("half the window", vec![attempt(1, "gpu-0", 2, 50, Some(200))], vec![], 0.5, 1.0),
            ("nothing ran", vec![], vec![], 0.0, 1.0),
            ("failed half the window", vec![], vec![event(1, 50, "gpu-0", "fail")], 0.0, 0.5),
            (
                "a drain serves its last attempt to its end",
                vec![attempt(1, "gpu-0", 2, 0, Some(30))],
                vec![event(1, 10, "gpu-0", "drain")],
                1.0,
                0.3,
            ),
            (
                "failed before the window: a drain, then an undrain, do not repair",
                vec![],
                vec![event(1, -20, "gpu-0", "fail"), event(2, -10, "gpu-0", "drain"), event(3, 40, "gpu-0", "undrain")],
                0.0,
                0.0,
            ),
            (
                "drained before the window, undrained in it",
                vec![],
                vec![event(1, -20, "gpu-0", "drain"), event(2, 40, "gpu-0", "undrain")],
                0.0,
                0.6,
            ),
            ("another node's events", vec![], vec![event(1, 0, "gpu-9", "fail")], 0.0, 1.0),
        ];
        for (name, attempts, events, occupancy, availability) in cases {
            let rows = HistoryRows { attempts, workloads: vec![], events };
            let s = Series::compute(&rows, &nodes(1, 2), &w, &|_| true);
            let total = s.total_gpus as f64 * (w.to - w.from) as f64;
            assert!((ratio(sum(&s.available_s), total) - availability).abs() < 1e-9, "case {name}: {s:?}");
            assert!((ratio(sum(&s.assigned_s), sum(&s.available_s)) - occupancy).abs() < 1e-9, "case {name}: {s:?}");
        }
    }

    /// Measured utilization where sampled, declared elsewhere; invisible
    /// accounts count for nothing but the fleet's capacity.
    #[test]
    fn utilization_is_measured_or_declared_and_work_is_filtered() {
        let w = Window::ending(T0 + 100, 100, 50);
        let mut measured = attempt(1, "gpu-0", 1, 0, None);
        measured.measured_util = Some(0.5);
        let mut declared = attempt(2, "gpu-0", 1, 0, None);
        declared.declared_util = 0.25;
        let mut hidden = attempt(3, "gpu-1", 2, 0, None);
        hidden.account = "lab/x".into();
        let rows = HistoryRows { attempts: vec![measured, declared, hidden], workloads: vec![], events: vec![] };
        let s = Series::compute(&rows, &nodes(2, 2), &w, &|a| a.starts_with("org/"));
        assert_eq!(sum(&s.available_s), 400.0);
        assert_eq!(sum(&s.assigned_s), 200.0);
        assert_eq!((sum(&s.used_measured_s), sum(&s.used_declared_s)), (50.0, 25.0));
        assert_eq!(sum(&s.measured_assigned_s), 100.0, "the measured attempt's GPU-s alone");
        assert_eq!(sum(&s.declared_s), 100.0 * 1.0 + 100.0 * 0.25, "every visible attempt's declared use");
        assert_eq!(s.assigned_s, [100.0, 100.0], "spread over both buckets");
    }

    /// Waiting time, queue times by first start, preemptions by end.
    #[test]
    fn queue_length_times_and_preemptions() {
        let w = Window::ending(T0 + 100, 100, 25);
        let mut first = attempt(1, "gpu-0", 1, 40, Some(60));
        first.submit_t = T0 + 10;
        first.outcome = Some("preempted".into());
        let mut second = attempt(1, "gpu-0", 1, 70, None);
        second.attempt = 2;
        second.first = false;
        second.submit_t = T0 + 10;
        let waiting = HistoryWorkload { seq: 1, account: "org/a".into(), submit_t: T0 + 10, end_t: None };
        let never = HistoryWorkload { seq: 2, account: "org/a".into(), submit_t: T0 - 500, end_t: Some(T0 + 5) };
        let rows = HistoryRows { attempts: vec![first, second], workloads: vec![waiting, never], events: vec![] };
        let s = Series::compute(&rows, &nodes(1, 2), &w, &|_| true);
        assert_eq!(s.waiting_s, [5.0 + 15.0, 15.0, 10.0, 0.0], "30 s before its start, 10 s requeued; 5 s of another");
        assert_eq!(s.queue_times, [vec![], vec![30], vec![], vec![]]);
        assert_eq!(s.preemptions, [0, 0, 1, 0]);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let q = QueueStats::of(&[5, 1, 4, 2, 3]).unwrap();
        assert_eq!((q.p50, q.p90, q.p95, q.p99, q.mean), (3, 5, 5, 5, 3.0));
        let q = QueueStats::of(&(1..=100).collect::<Vec<_>>()).unwrap();
        assert_eq!((q.p50, q.p90, q.p99), (50, 90, 99));
        assert_eq!(QueueStats::of(&[]), None);
    }

    #[test]
    fn windows_are_whole_buckets_ending_at_their_end() {
        let w = Window::ending(1000, 95, 10);
        assert_eq!((w.from, w.buckets(), w.index(999), w.index(1000), w.index(900)), (900, 10, Some(9), None, Some(0)));
    }
}
