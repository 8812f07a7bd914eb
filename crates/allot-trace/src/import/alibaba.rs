//! `alibaba-openb`: Alibaba's `openb_pod_list_*.csv` (clusterdata,
//! cluster-trace-gpu-v2023) and its GPU node list
//! `openb_node_list_gpu_node.csv` (`sn,cpu_milli,memory_mib,gpu,model`).
//!
//! * submit = `creation_time`; run time = `deletion_time - scheduled_time`;
//!   pods never scheduled (empty `scheduled_time`, e.g. `Pending`) are skipped.
//! * `num_gpu` 0 (CPU pods) are skipped. A pod asking `gpu_milli` < 1000 of a
//!   GPU is rounded **up to one whole GPU** (the simulator allocates whole
//!   GPUs) with `util = gpu_milli / 1000`; each such pod is counted.
//! * A pod runs on one node (`nodes = 1`).
//! * `gpu_spec` (required model, `A|B` for alternatives) becomes `gpu_type`
//!   when it names exactly one model that has a node large enough; otherwise
//!   it is dropped and counted.
//! * `qos` is the team (`<root>/<qos>/jobs`) and sets class, priority and
//!   preemptibility through [`super::QosMapping`]. Pods have no user: the
//!   user is the qos value.

use std::collections::BTreeMap;
use std::path::Path;

use super::error::ImportError;
use super::options::ImportOptions;
use super::record::{Record, check_duration, open_csv, parse_gpus, parse_time, required_time};
use super::sizing::NodeGroup;
use super::summary::{Adjustment, ImportSummary, SkipReason};

const REQUIRED: [&str; 6] = ["name", "num_gpu", "qos", "creation_time", "scheduled_time", "deletion_time"];
const OPTIONAL: [&str; 3] = ["gpu_milli", "gpu_spec", "pod_phase"];

pub(crate) fn read(path: &Path, opts: &ImportOptions, summary: &mut ImportSummary) -> Result<Vec<Record>, ImportError> {
    let src = open_csv(path, &REQUIRED, &OPTIONAL)?;
    let mut out = Vec::new();
    src.for_each(path, summary, |f, summary| match row(f, opts) {
        Ok(r) => out.push(r),
        Err(reason) => summary.skip(reason),
    })?;
    Ok(out)
}

/// Checks in order: team (qos), GPUs, submit time, scheduled, deleted, run time.
fn row(f: &[&str], opts: &ImportOptions) -> Result<Record, SkipReason> {
    let (name, num_gpu, qos, created, scheduled, deleted) = (f[0].trim(), f[1], f[2].trim(), f[3], f[4], f[5]);
    let (milli, spec) = (f[6].trim(), f[7].trim());
    if qos.is_empty() {
        return Err(SkipReason::MissingTeam);
    }
    let gpus = parse_gpus(num_gpu)?;
    if gpus == 0 {
        return Err(SkipReason::ZeroGpus);
    }
    let milli: u32 = if milli.is_empty() { 1000 } else { parse_gpus(milli)? };
    let submit = required_time(created)?;
    let start = parse_time(scheduled)?.ok_or(SkipReason::NeverStarted)?;
    let end = parse_time(deleted)?.ok_or(SkipReason::NoEndTime)?;
    let run = check_duration(end - start)?;
    let team = qos.to_lowercase();
    let mut r = Record::new(name.to_string(), submit, team.clone(), team, gpus, run, &opts.defaults);
    let q = opts.qos.get(qos, &opts.defaults);
    (r.class, r.priority, r.preemptible) = (q.class, q.priority, q.preemptible);
    r.single_node = true;
    r.status = Some(f[8].trim().to_string()).filter(|s| !s.is_empty());
    r.source_nodes = Some(1);
    if (1..1000).contains(&milli) {
        r.util = f64::from(milli) / 1000.0;
        r.adjusted.push(Adjustment::FractionalGpuRoundedUp);
    }
    if !spec.is_empty() {
        if spec.contains('|') {
            r.adjusted.push(Adjustment::GpuTypeDropped);
        } else {
            r.gpu_type = Some(spec.to_string());
        }
    }
    Ok(r)
}

/// Reads the GPU node list into groups of identical nodes (model, GPUs per
/// node), largest nodes first. Nodes with no GPU are left out.
pub(crate) fn read_node_list(path: &Path) -> Result<Vec<NodeGroup>, ImportError> {
    let src = open_csv(path, &["gpu", "model"], &[])?;
    let mut groups: BTreeMap<(String, u32), u32> = BTreeMap::new();
    let mut bad = 0u64;
    let mut scratch = ImportSummary::new(super::Format::AlibabaOpenb, path.to_path_buf());
    src.for_each(path, &mut scratch, |f, _| match parse_gpus(f[0]) {
        Ok(0) => {}
        Ok(g) if !f[1].trim().is_empty() => *groups.entry((f[1].trim().to_string(), g)).or_default() += 1,
        _ => bad += 1,
    })?;
    bad += scratch.skipped_total();
    if bad > 0 {
        return Err(ImportError::bad_file(path, format!("{bad} node rows have no GPU model or an invalid GPU count")));
    }
    let mut out: Vec<NodeGroup> =
        groups.into_iter().map(|((model, gpus_per_node), nodes)| NodeGroup { model, gpus_per_node, nodes }).collect();
    out.sort_by(|a, b| b.gpus_per_node.cmp(&a.gpus_per_node).then(b.nodes.cmp(&a.nodes)).then(a.model.cmp(&b.model)));
    if out.is_empty() {
        return Err(ImportError::bad_file(path, "no GPU nodes"));
    }
    Ok(out)
}
