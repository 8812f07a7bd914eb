//! Per-cluster measures of a fleet of several clusters: availability,
//! occupancy, utilization and queue times, with the fleet-wide definitions
//! restricted to one cluster's GPUs (its own capacity step function), the
//! attempts that ran on it and the workloads whose first attempt started on
//! it.

use std::collections::BTreeMap;

use allot_core::Time;
use allot_core::cluster::ClusterId;

use crate::measures::capacity::{integrate, overlap, ratio, total_gpu_s};
use crate::measures::queue::Times;
use crate::record::SimOutput;
use crate::report::ClusterReport;

const HOUR: f64 = 3600.0;

/// One [`ClusterReport`] per cluster of `out.clusters`, by name; empty for
/// a fleet of one.
pub(crate) fn clusters(out: &SimOutput, times: &Times) -> BTreeMap<String, ClusterReport> {
    if out.clusters.is_empty() {
        return BTreeMap::new();
    }
    let h = out.horizon_end;
    let n = out.clusters.len();
    let (mut assigned, mut util) = (vec![0u64; n], vec![0.0f64; n]);
    // The cluster of each workload's first attempt (earliest start; of
    // several at one instant, the first recorded).
    let mut first: Vec<Option<(Time, ClusterId)>> = Vec::new();
    for a in &out.attempts {
        let c = a.cluster.0 as usize;
        let gpu_s = overlap(a.start, a.end, 0, h) * u64::from(a.gpus);
        assigned[c] += gpu_s;
        util[c] += gpu_s as f64 * a.util;
        let w = a.workload.0 as usize;
        if first.len() <= w {
            first.resize(w + 1, None);
        }
        if first[w].is_none_or(|(t, _)| a.start < t) {
            first[w] = Some((a.start, a.cluster));
        }
    }
    out.clusters
        .iter()
        .enumerate()
        .map(|(c, cc)| {
            let id = ClusterId(c as u16);
            let available = integrate(&cc.capacity, cc.total_gpus, h) as f64;
            let here = |w: usize| first.get(w).copied().flatten().is_some_and(|(_, x)| x == id);
            let (queue_time_s, queue_time_by_class) = times.class_stats(here);
            let report = ClusterReport {
                index: c as u64,
                gpus: cc.total_gpus + cc.added_gpus.iter().map(|a| a.1).sum::<u64>(),
                availability: ratio(available, total_gpu_s(cc.total_gpus, &cc.added_gpus, h) as f64),
                occupancy: ratio(assigned[c] as f64, available),
                utilization: ratio(util[c], available),
                available_gpu_hours: available / HOUR,
                assigned_gpu_hours: assigned[c] as f64 / HOUR,
                started_workloads: times.queue.iter().filter(|q| here(q.0)).count() as u64,
                queue_time_s,
                queue_time_by_class,
            };
            (cc.name.clone(), report)
        })
        .collect()
}
