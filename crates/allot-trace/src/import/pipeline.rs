//! The import pipeline: read the source rows, fit them to the cluster, sort
//! and rebase time, build accounts, size pools and budgets.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;

use allot_core::{Class, Time};

use super::error::ImportError;
use super::legacy_sizes::read_legacy_sizes;
use super::options::{Format, ImportOptions, ProjectBy, TEAM_PROJECT};
use super::record::{Record, sanitize};
use super::sizing::{NodeGroup, Shape, Sized, TeamNeed, size_cluster};
use super::slurm::{SlurmShape, read_assoc, read_nodes};
use super::summary::{Adjustment, ImportSummary, SkipReason};
use super::{alibaba, helios, philly, philly_pollux, sacct, swf};
use crate::write::{AccountOut, ConfigOut, TraceRow, round_budget};

/// The result of an import: rows sorted by `submit_s`, a matching config,
/// and the summary to print.
#[derive(Clone, Debug)]
pub struct Imported {
    pub rows: Vec<TraceRow>,
    pub config: ConfigOut,
    pub summary: ImportSummary,
}

/// Imports `input` in `format`.
pub fn import(format: Format, input: &Path, opts: &ImportOptions) -> Result<Imported, ImportError> {
    let root = validate(opts, format)?;
    let shape = opts
        .sizing
        .slurm_nodes
        .as_deref()
        .map(|p| read_nodes(p, &opts.sizing.gpu_model, opts.sizing.rack_size))
        .transpose()?;
    let fixed = match &shape {
        Some(s) => Some(
            s.pools
                .iter()
                .map(|p| NodeGroup { model: p.gpu.clone(), gpus_per_node: p.gpus_per_node, nodes: p.nodes })
                .collect(),
        ),
        None => capacity(opts)?,
    };
    let sizes = opts.sizing.legacy_sizes.as_deref().map(read_legacy_sizes).transpose()?;
    let qos = opts.slurm_qos.as_deref().map(super::slurm_qos::read_qos).transpose()?;
    let mut summary = ImportSummary::new(format, input.to_path_buf());
    let mut records = match format {
        Format::PhillyPollux => philly_pollux::read(input, opts, &mut summary)?,
        Format::Philly => philly::read(input, opts, &mut summary)?,
        Format::AlibabaOpenb => alibaba::read(input, opts, &mut summary)?,
        Format::Helios => helios::read(input, opts, &mut summary)?,
        Format::Sacct => sacct::read(input, opts, &mut summary)?,
        Format::Swf => swf::read(input, opts, &mut summary)?,
    };
    let qos = qos.map(|t| super::slurm_qos::apply(&t, &mut records, &mut summary));
    let mut imported = finish(Inputs { format, root: &root, fixed, sizes, shape }, records, opts, summary)?;
    if let Some(path) = &opts.slurm_assoc {
        let tree = read_assoc(path)?;
        let parts = super::accounts::Parts {
            rows: &mut imported.rows,
            config: &mut imported.config,
            summary: &mut imported.summary,
        };
        super::accounts::apply(&tree, &root, opts.project_by, parts);
    }
    if let Some(path) = &opts.slurm_config {
        let (params, notes) = super::slurm_config::read_slurm_config(path)?;
        imported.config.contract.slurm = params;
        imported.summary.notes.extend(notes);
    }
    if let Some(q) = qos {
        q.apply_to(&mut imported.config.contract.slurm);
    }
    Ok(imported)
}

/// What an import knows before it reads the rows.
struct Inputs<'a> {
    format: Format,
    root: &'a str,
    /// A fixed capacity (node list or `--gpus`).
    fixed: Option<Vec<NodeGroup>>,
    /// Team sizes from `--legacy-sizes`.
    sizes: Option<BTreeMap<String, u64>>,
    /// The pools of `--slurm-nodes`, written as they are.
    shape: Option<SlurmShape>,
}

/// Checks options; returns the account root.
fn validate(opts: &ImportOptions, format: Format) -> Result<String, ImportError> {
    let s = &opts.sizing;
    let bad = |m: String| Err(ImportError::BadOption(m));
    if !(1..=allot_core::cluster::MAX_GPUS_PER_NODE).contains(&s.gpus_per_node) {
        return bad(format!("--gpus-per-node must be 1..=64, got {}", s.gpus_per_node));
    }
    if s.rack_size == 0 {
        return bad("--rack-size must be at least 1".into());
    }
    if !(0.0..1.0).contains(&s.shared_fraction) {
        return bad(format!("--shared-fraction must be in [0, 1), got {}", s.shared_fraction));
    }
    if !(0.0..=1.0).contains(&opts.defaults.util) {
        return bad(format!("--util must be in [0, 1], got {}", opts.defaults.util));
    }
    if let Some(g) = s.gpus
        && (g == 0 || !g.is_multiple_of(s.gpus_per_node))
    {
        return bad(format!("--gpus must be a positive multiple of --gpus-per-node ({}), got {g}", s.gpus_per_node));
    }
    if s.legacy_sizes.is_some() && (s.gpus.is_some() || s.node_list.is_some()) {
        return bad("--legacy-sizes sizes the pools itself; it cannot be combined with --gpus or --nodes".into());
    }
    if s.gpus.is_some() && s.node_list.is_some() {
        return bad("give either --gpus or --nodes, not both".into());
    }
    if s.slurm_nodes.is_some() && (s.gpus.is_some() || s.node_list.is_some() || s.legacy_sizes.is_some()) {
        return bad(
            "--slurm-nodes gives the cluster itself; it cannot be combined with --gpus, --nodes or --legacy-sizes"
                .into(),
        );
    }
    if format != Format::Sacct && (opts.time_zone.is_some() || opts.slurm_assoc.is_some() || opts.slurm_qos.is_some()) {
        return bad("--tz, --slurm-assoc and --slurm-qos apply to --format sacct only".into());
    }
    if format != Format::Swf && opts.procs_per_gpu.is_some() {
        return bad("--procs-per-gpu applies to --format swf only".into());
    }
    if format == Format::Sacct {
        sacct::zone(opts)?;
    }
    if let Some((m, w)) = s.gpu_weights.iter().find(|(_, w)| !(w.is_finite() && **w > 0.0)) {
        return bad(format!("GPU weight of {m} must be > 0, got {w}"));
    }
    let root = opts.root.clone().unwrap_or_else(|| format.default_root().to_string());
    if root.split('/').any(|seg| seg.is_empty() || sanitize(seg).1) {
        return bad(format!("--root {root:?}: use segments of letters, digits, '-', '_', '.' separated by '/'"));
    }
    Ok(root)
}

/// A fixed capacity (node list or `--gpus`), or `None` to size from demand.
fn capacity(opts: &ImportOptions) -> Result<Option<Vec<NodeGroup>>, ImportError> {
    let s = &opts.sizing;
    if let Some(path) = &s.node_list {
        return alibaba::read_node_list(path).map(Some);
    }
    Ok(s.gpus.map(|g| {
        vec![NodeGroup { model: s.gpu_model.clone(), gpus_per_node: s.gpus_per_node, nodes: g / s.gpus_per_node }]
    }))
}

/// Node count written for a workload: one node if it fits one (always for
/// pods), else whole nodes when the GPUs divide evenly, else any packing.
pub(crate) fn pack(gpus: u32, gpn: u32, single_node: bool) -> u32 {
    if single_node || gpus <= gpn {
        1
    } else if gpus.is_multiple_of(gpn) {
        gpus / gpn
    } else {
        0
    }
}

fn group_fits(g: &NodeGroup, shape: Shape, gpu_type: Option<&str>) -> bool {
    gpu_type.is_none_or(|t| t == g.model) && shape.nodes_in(g.gpus_per_node).is_some_and(|n| n <= g.nodes)
}

/// Per-team aggregates.
#[derive(Default)]
struct TeamAcc {
    raw: BTreeSet<String>,
    gpu_s: f64,
    /// Largest workload without a GPU type, and per required type.
    largest: Option<Shape>,
    typed: BTreeMap<String, Shape>,
    events: Vec<(i64, i64)>,
    projects: BTreeSet<String>,
}

fn finish(
    inputs: Inputs<'_>,
    records: Vec<Record>,
    opts: &ImportOptions,
    mut summary: ImportSummary,
) -> Result<Imported, ImportError> {
    let Inputs { format, root, fixed, sizes, shape } = inputs;
    let s = &opts.sizing;
    let gpn_max = fixed.as_ref().map_or(s.gpus_per_node, |g| g.iter().map(|g| g.gpus_per_node).max().unwrap_or(1));
    let mut kept: Vec<(Record, Shape)> = Vec::with_capacity(records.len());
    for mut r in records {
        let shape = Shape { gpus: r.gpus, nodes: pack(r.gpus, gpn_max, r.single_node) };
        let type_ok = |t: &str| match &fixed {
            Some(groups) => groups.iter().any(|g| group_fits(g, shape, Some(t))),
            None => t == s.gpu_model,
        };
        if r.gpu_type.as_deref().is_some_and(|t| !type_ok(t)) {
            r.gpu_type = None;
            r.adjusted.push(Adjustment::GpuTypeDropped);
        }
        let fits = match &fixed {
            Some(groups) => groups.iter().any(|g| group_fits(g, shape, r.gpu_type.as_deref())),
            None => shape.nodes_in(s.gpus_per_node).is_some(),
        };
        if !fits {
            summary.skip(SkipReason::TooLarge);
            continue;
        }
        if r.source_nodes.is_some_and(|k| k != shape.nodes) {
            r.adjusted.push(Adjustment::NodesRepacked);
        }
        kept.push((r, shape));
    }
    if kept.is_empty() {
        return Err(ImportError::NothingImported { path: summary.input.clone(), read: summary.rows_read });
    }
    kept.sort_by_key(|(r, _)| r.submit);
    let t0 = kept[0].0.submit;
    let (rows, teams) = build_rows(format, root, &kept, t0, gpn_max, opts, &mut summary);
    let needs = team_needs(&teams, sizes.as_ref(), fixed.is_some(), &mut summary);
    let sized = match shape {
        Some(shape) => Sized { pools: shape.pools, team_pools: BTreeMap::new(), notes: shape.notes },
        None => size_cluster(fixed, &s.gpu_model, s.gpus_per_node, &needs, s.shared_fraction, s.rack_size),
    };
    let mut config = build_config(format, root, &teams, &needs, sized, opts, &mut summary);
    config.assumed = assumed(format, &rows, opts);
    summary.imported = rows.len() as u64;
    Ok(Imported { rows, config, summary })
}

/// What the import assumed where the trace says nothing, each with the
/// policies it favours (`[provenance] assumed`, listed by the reports).
fn assumed(format: Format, rows: &[TraceRow], opts: &ImportOptions) -> Vec<String> {
    let d = &opts.defaults;
    let batch = rows.iter().filter(|r| r.class == Class::Batch).count();
    let checkpoints = if d.checkpoint_s == 0 {
        format!(
            "checkpoints: none of the {batch} batch jobs checkpoints (--checkpoint-s 0; the trace records no \
             checkpoints): a preempted job loses all its progress (favours policies that do not preempt: fifo, \
             fifo-backfill)"
        )
    } else {
        format!(
            "checkpoints: every one of the {batch} batch jobs checkpoints every {} (--checkpoint-s {}; the trace \
             records no checkpoints): a preempted job loses at most that much work (favours policies that \
             preempt: allot, priority)",
            crate::duration::format_duration(d.checkpoint_s),
            d.checkpoint_s
        )
    };
    let util_where = if format == Format::AlibabaOpenb {
        "every whole-GPU pod (fractional pods: gpu_milli / 1000)"
    } else {
        "every job"
    };
    vec![
        checkpoints,
        format!(
            "utilisation: {util_where} keeps its GPUs {:.0}% busy (--util; the trace records none): idle reclaim \
             (CON-9) never fires on such work unless that is below its threshold",
            d.util * 100.0
        ),
        "budgets: from the same trace (each team's share of its GPU-hours): the budgets fit the demand replayed \
         against them (favours allot, the only policy that reads budgets)"
            .to_string(),
    ]
}

fn build_rows(
    format: Format,
    root: &str,
    kept: &[(Record, Shape)],
    t0: i64,
    gpn_max: u32,
    opts: &ImportOptions,
    summary: &mut ImportSummary,
) -> (Vec<TraceRow>, BTreeMap<String, TeamAcc>) {
    let mut teams: BTreeMap<String, TeamAcc> = BTreeMap::new();
    let mut ids: HashSet<String> = HashSet::with_capacity(kept.len());
    let mut rows = Vec::with_capacity(kept.len());
    for (k, (r, shape)) in kept.iter().enumerate() {
        let (team, team_changed) = sanitize(&r.team);
        let (project, project_changed) = match opts.project_by {
            ProjectBy::Team => (TEAM_PROJECT.to_string(), false),
            ProjectBy::User => sanitize(&r.user),
        };
        let mut adjusted = r.adjusted.clone();
        if team_changed || project_changed {
            adjusted.push(Adjustment::NameSanitized);
        }
        let mut id = if r.id.is_empty() { format!("{}-{}", format.id_prefix(), k + 1) } else { r.id.clone() };
        if ids.contains(&id) {
            let mut n = 2;
            while ids.contains(&format!("{id}-{n}")) {
                n += 1;
            }
            id = format!("{id}-{n}");
            adjusted.push(Adjustment::DuplicateIdRenamed);
        }
        ids.insert(id.clone());
        for a in adjusted {
            summary.adjust(a);
        }
        if let Some(s) = &r.status {
            summary.status(s);
        }
        let acc = teams.entry(team.clone()).or_default();
        if !acc.raw.contains(&r.team) {
            acc.raw.insert(r.team.clone());
        }
        acc.gpu_s += f64::from(r.gpus) * r.work_s as f64;
        let need = |s: &Shape| (s.nodes_in(gpn_max).unwrap_or(u32::MAX), s.gpus);
        match &r.gpu_type {
            None if acc.largest.is_none_or(|l| need(shape) > need(&l)) => acc.largest = Some(*shape),
            None => {}
            Some(t) => match acc.typed.get_mut(t) {
                Some(l) if need(shape) > need(l) => *l = *shape,
                Some(_) => {}
                None => {
                    acc.typed.insert(t.clone(), *shape);
                }
            },
        }
        acc.events.push((r.submit, i64::from(r.gpus)));
        acc.events.push((r.submit.saturating_add(r.work_s as i64), -i64::from(r.gpus)));
        if !acc.projects.contains(&project) {
            acc.projects.insert(project.clone());
        }
        rows.push(TraceRow {
            id,
            submit_s: (r.submit - t0) as Time,
            account: format!("{root}/{team}/{project}"),
            user: r.user.clone(),
            class: r.class,
            gpus: r.gpus,
            nodes: shape.nodes,
            gpu_type: r.gpu_type.clone().unwrap_or_default(),
            work_s: r.work_s,
            checkpoint_s: if r.class == Class::Batch { r.checkpoint_s } else { 0 },
            util: r.util,
            priority: r.priority,
            preemptible: r.preemptible,
            clusters: String::new(),
            time_limit_s: r.time_limit_s,
            checkpoint_on_signal: false,
            after: String::new(),
            array: r.array.as_ref().map(|a| a.0.clone()).unwrap_or_default(),
            array_index: r.array.as_ref().map(|a| a.1),
            array_limit: None,
            billing: r.billing,
        });
    }
    (rows, teams)
}

/// Peak concurrent GPUs if every job started at submit (ends before starts
/// at the same second).
fn peak(events: &mut [(i64, i64)]) -> u64 {
    events.sort_unstable();
    let (mut cur, mut max) = (0i64, 0i64);
    for &(_, d) in events.iter() {
        cur += d;
        max = max.max(cur);
    }
    max as u64
}

fn team_needs(
    teams: &BTreeMap<String, TeamAcc>,
    sizes: Option<&BTreeMap<String, u64>>,
    fixed: bool,
    summary: &mut ImportSummary,
) -> Vec<TeamNeed> {
    let mut from_peak = Vec::new();
    let mut needs = Vec::with_capacity(teams.len());
    for (name, acc) in teams {
        let mut events = acc.events.clone();
        let fixed_gpus = if fixed {
            None
        } else {
            let listed = sizes.and_then(|m| acc.raw.iter().chain([name]).find_map(|n| m.get(n).copied()));
            if sizes.is_some() && listed.is_none() {
                from_peak.push(name.clone());
            }
            Some(listed.unwrap_or_else(|| peak(&mut events)))
        };
        let mut reserve: Vec<(Shape, Option<String>)> = acc.typed.iter().map(|(t, s)| (*s, Some(t.clone()))).collect();
        reserve.extend(acc.largest.map(|s| (s, None)));
        needs.push(TeamNeed { name: name.clone(), weight: acc.gpu_s, reserve, fixed_gpus });
    }
    if !from_peak.is_empty() {
        summary.notes.push(format!(
            "{} teams missing from the legacy sizes file were sized from their peak demand: {}",
            from_peak.len(),
            from_peak.join(", ")
        ));
    }
    needs
}

fn build_config(
    format: Format,
    root: &str,
    teams: &BTreeMap<String, TeamAcc>,
    needs: &[TeamNeed],
    sized: Sized,
    opts: &ImportOptions,
    summary: &mut ImportSummary,
) -> ConfigOut {
    let s = &opts.sizing;
    let mut models: Vec<String> = sized.pools.iter().map(|p| p.gpu.clone()).collect();
    models.sort();
    models.dedup();
    let gpu_types = models.iter().map(|m| (m.clone(), s.gpu_weights.get(m).copied().unwrap_or(1.0))).collect();
    let mut config = ConfigOut {
        comments: Vec::new(),
        cluster_name: opts.cluster_name.clone().unwrap_or_else(|| root.replace('/', "-")),
        pools: sized.pools,
        gpu_types,
        accounts: Vec::new(),
        contract: allot_core::Contract { budget_period: s.budget_period_s, ..Default::default() },
        assumed: Vec::new(),
    };
    let capacity = config.capacity_ngh(s.budget_period_s);
    let total_w: f64 = needs.iter().map(|t| t.weight).sum();
    for t in needs {
        config.accounts.push(AccountOut {
            path: format!("{root}/{}", t.name),
            budget_gpu_hours: Some(round_budget(capacity * t.weight / total_w).max(0.1)),
            // Slurm partitions are shared by every account: no exclusive pools.
            legacy_pools: (s.slurm_nodes.is_none()).then(|| sized.team_pools.get(&t.name).cloned().unwrap_or_default()),
            ..Default::default()
        });
        for p in &teams[&t.name].projects {
            config.accounts.push(AccountOut { path: format!("{root}/{}/{p}", t.name), ..Default::default() });
        }
    }
    let how = if s.slurm_nodes.is_some() {
        "the Slurm nodes, one shared pool per partition set, GPU type and node size".to_string()
    } else if s.node_list.is_some() {
        "the node list, split among teams by GPU-hours".to_string()
    } else if let Some(g) = s.gpus {
        format!("--gpus {g}, split among teams by GPU-hours")
    } else if s.legacy_sizes.is_some() {
        "the legacy sizes file, rounded up to whole nodes".to_string()
    } else {
        "each team's observed peak concurrent GPU demand, rounded up to whole nodes".to_string()
    };
    let shared: u64 = config.pools.iter().filter(|p| p.shared).map(|p| p.gpus()).sum();
    let line = format!(
        "{} GPUs in {} pools ({} GPUs shared), sized from {how}",
        config.total_gpus(),
        config.pools.len(),
        shared
    );
    config.comments = vec![
        format!("written by `allot trace import --format {format}` from {}", summary.input.display()),
        format!("cluster: {line}"),
        format!(
            "budgets: each team's share of the trace's GPU-hours x the cluster's {:.0} normalised GPU-hours per budget period",
            capacity
        ),
    ];
    summary.notes.push(format!("cluster: {line}"));
    summary.notes.extend(sized.notes);
    config
}
