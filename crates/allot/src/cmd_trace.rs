//! `allot trace import …` and `allot trace gen …`: write a trace CSV and a
//! matching cluster + accounts config from a public trace or a synthetic
//! scenario. Summaries go to stderr (docs/importers.md, docs/generator.md).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use allot_core::{Class, Priority};
use allot_trace::generate::{Ai2Params, Behaviour, Scenario, generate};
use allot_trace::import::{Format, ImportOptions, ProjectBy, RowDefaults, Sizing};
use allot_trace::workload;
use allot_trace::write::{ConfigOut, TraceRow, write_config_toml, write_trace_csv};
use anyhow::{Context, Result};

use crate::args::ArgError;

#[derive(clap::Subcommand)]
#[expect(clippy::large_enum_variant, reason = "parsed once per run; the import flags are many, not large")]
pub enum TraceCommand {
    /// Convert a public GPU-cluster trace into an Allot trace (+ config).
    Import(ImportArgs),
    /// Generate a synthetic trace (+ config) for a scenario.
    Gen(GenArgs),
    /// Write the live scheduler's recorded history as a trace (+ events) to
    /// replay it with `allot sim` or `allot compare`.
    Export(ExportArgs),
}

#[derive(clap::Args)]
pub struct ExportArgs {
    /// The server's store: sqlite://PATH or postgres://…
    #[arg(long, default_value = "sqlite://allot.db")]
    db: String,
    /// Trace to write (CSV); node events go next to it as `<stem>.events.csv`, attempts as `<stem>.attempts.csv`.
    #[arg(long)]
    out: std::path::PathBuf,
}

fn run_export(a: ExportArgs) -> Result<()> {
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("failed to start the runtime")?;
    let s = rt.block_on(allot_server::export_trace(&a.db, &a.out))?;
    eprintln!("exported {} workloads to {}", s.workloads, a.out.display());
    if let Some(p) = s.events_path {
        eprintln!("exported {} node events to {}", s.events, p.display());
    }
    if let Some(p) = &s.account_changes_path {
        eprintln!("exported {} account changes (budgets, shares) to {}", s.account_changes, p.display());
    }
    if let Some(p) = s.attempts_path {
        eprintln!("exported {} attempts (with their clusters) to {}", s.attempts, p.display());
    }
    eprintln!("submit_s = 0 is Unix time {}", s.t0);
    Ok(())
}

pub fn run(c: TraceCommand) -> Result<()> {
    match c {
        TraceCommand::Import(a) => run_import(a),
        TraceCommand::Gen(a) => run_gen(a),
        TraceCommand::Export(a) => run_export(a),
    }
}

fn parse_format(s: &str) -> Result<Format, ArgError> {
    Format::parse(s).ok_or_else(|| {
        let known: Vec<&str> = Format::ALL.iter().map(|f| f.as_str()).collect();
        ArgError::unknown("format", s, &known)
    })
}

fn parse_projects(s: &str) -> Result<ProjectBy, ArgError> {
    match s {
        "team" => Ok(ProjectBy::Team),
        "user" => Ok(ProjectBy::User),
        _ => Err(ArgError::unknown("project mode", s, &["team", "user"])),
    }
}

fn parse_weight(s: &str) -> Result<(String, f64), ArgError> {
    let (k, v) = s.split_once('=').ok_or_else(|| ArgError::expected("MODEL=WEIGHT", s))?;
    let w: f64 = v.trim().parse().map_err(|_| ArgError::expected("MODEL=WEIGHT with a number as the weight", s))?;
    Ok((k.trim().to_string(), w))
}

pub(crate) fn fraction(s: &str) -> Result<f64, ArgError> {
    let v: f64 = s.parse().map_err(|_| ArgError::expected("a number", s))?;
    if (0.0..=1.0).contains(&v) { Ok(v) } else { Err(ArgError::NotAFraction(v)) }
}

#[derive(clap::Args)]
pub struct ImportArgs {
    /// Source format: philly-pollux, philly, alibaba-openb, helios, sacct, swf.
    #[arg(long, value_parser = parse_format)]
    format: Format,
    /// The source trace file.
    input: PathBuf,
    /// Trace CSV to write ("-" for stdout).
    #[arg(long)]
    out: PathBuf,
    /// Also write a matching cluster + accounts config (TOML).
    #[arg(long)]
    config_out: Option<PathBuf>,
    /// Node list giving the cluster (alibaba-openb: openb_node_list_gpu_node.csv).
    #[arg(long)]
    nodes: Option<PathBuf>,
    /// Cluster size in GPUs, split among teams by GPU-hours
    /// (default: each team's pool is its observed peak demand).
    #[arg(long)]
    gpus: Option<u32>,
    /// Per-team GPU counts for the legacy pools (`team,gpus` rows, or a
    /// per-day table such as helios_earth_vc_gpus.csv).
    #[arg(long)]
    legacy_sizes: Option<PathBuf>,
    /// GPUs per node of the written pools (without --nodes).
    #[arg(long, default_value_t = Sizing::default().gpus_per_node)]
    gpus_per_node: u32,
    /// GPU model name of the written pools (without --nodes).
    #[arg(long, default_value_t = Sizing::default().gpu_model)]
    gpu_model: String,
    /// Normalisation weight of a GPU model, MODEL=WEIGHT (repeatable; default 1).
    #[arg(long = "gpu-weight", value_parser = parse_weight)]
    gpu_weights: Vec<(String, f64)>,
    /// Nodes per rack in the written pools.
    #[arg(long, default_value_t = Sizing::default().rack_size)]
    rack_size: u32,
    /// Fraction of the nodes written as shared pools (legacy policy).
    #[arg(long, default_value_t = Sizing::default().shared_fraction)]
    shared_fraction: f64,
    /// Root of the account paths (default: philly, alibaba, helios, slurm or swf).
    #[arg(long)]
    root: Option<String>,
    /// Leaf projects: one per team (`<root>/<team>/jobs`) or one per user.
    #[arg(long, value_parser = parse_projects, default_value = "team")]
    projects: ProjectBy,
    /// Class written for every row (alibaba-openb: from qos instead).
    #[arg(long, value_parser = workload::parse_class, default_value = RowDefaults::default().class.as_str())]
    class: Class,
    /// Legacy priority written for every row (alibaba-openb: from qos).
    #[arg(long, value_parser = workload::parse_priority, default_value = RowDefaults::default().priority.as_str())]
    priority: Priority,
    /// Legacy preemptible flag written for every row (alibaba-openb: from qos).
    #[arg(long, default_value_t = RowDefaults::default().preemptible, action = clap::ArgAction::Set)]
    preemptible: bool,
    /// Mean GPU utilisation written (alibaba-openb fractional pods: gpu_milli/1000).
    #[arg(long, value_parser = fraction, default_value_t = RowDefaults::default().util)]
    util: f64,
    /// Checkpoint interval in seconds written for batch rows (0 = never;
    /// interactive and service rows never checkpoint).
    #[arg(long, default_value_t = RowDefaults::default().checkpoint_s)]
    checkpoint_s: u64,
    /// Class of alibaba-openb LS (latency-sensitive) pods: service or interactive.
    #[arg(long, value_parser = workload::parse_class, default_value = "service")]
    ls_class: Class,
    /// Name of the written cluster (default: the root).
    #[arg(long)]
    cluster_name: Option<String>,
    /// sacct: IANA time zone of times printed without an offset, e.g.
    /// America/Denver (default UTC; not needed with SLURM_TIME_FORMAT=%s).
    #[arg(long)]
    tz: Option<String>,
    /// Saved `scontrol show nodes --oneliner` output: the written cluster is
    /// the site's GPU nodes, one shared pool per partition set and GPU type.
    #[arg(long)]
    slurm_nodes: Option<PathBuf>,
    /// sacct: saved `sacctmgr show assoc format=Cluster,Account,ParentName,User,Partition,Share
    /// --parsable2` output: the account tree and its fair-share shares.
    #[arg(long)]
    slurm_assoc: Option<PathBuf>,
    /// Saved `scontrol show config` output: the `[slurm]` knobs of
    /// `--policy slurm` (priority weights, decay, backfill, preemption).
    #[arg(long)]
    slurm_config: Option<PathBuf>,
    /// sacct: saved `sacctmgr show qos format=Name,Priority,UsageFactor,Preempt,PreemptMode
    /// --parsable2` output: each job's QOS becomes a priority label, ranked
    /// by QOS priority, and the QOS priorities go to `[slurm]`.
    #[arg(long)]
    slurm_qos: Option<PathBuf>,
    /// swf: processors that make one GPU (rounded up; default 1).
    #[arg(long)]
    procs_per_gpu: Option<u32>,
}

fn run_import(a: ImportArgs) -> Result<()> {
    let mut opts = ImportOptions {
        root: a.root,
        project_by: a.projects,
        defaults: RowDefaults {
            class: a.class,
            priority: a.priority,
            preemptible: a.preemptible,
            util: a.util,
            checkpoint_s: a.checkpoint_s,
        },
        sizing: Sizing {
            gpus: a.gpus,
            gpus_per_node: a.gpus_per_node,
            gpu_model: a.gpu_model,
            rack_size: a.rack_size,
            shared_fraction: a.shared_fraction,
            legacy_sizes: a.legacy_sizes,
            node_list: a.nodes,
            slurm_nodes: a.slurm_nodes,
            gpu_weights: a.gpu_weights.into_iter().collect::<BTreeMap<_, _>>(),
            ..Sizing::default()
        },
        cluster_name: a.cluster_name,
        time_zone: a.tz,
        slurm_assoc: a.slurm_assoc,
        slurm_config: a.slurm_config,
        slurm_qos: a.slurm_qos,
        procs_per_gpu: a.procs_per_gpu,
        ..ImportOptions::default()
    };
    opts.qos.ls.class = a.ls_class;
    let imported = allot_trace::import::import(a.format, &a.input, &opts).context("failed to import")?;
    write_outputs(&a.out, a.config_out.as_deref(), &imported.rows, &imported.config)?;
    eprint!("{}", imported.summary);
    Ok(())
}

fn create(path: &Path) -> Result<Box<dyn Write>> {
    if path == Path::new("-") {
        return Ok(Box::new(BufWriter::new(std::io::stdout().lock())));
    }
    let f = File::create(path).with_context(|| format!("failed to create {}", path.display()))?;
    Ok(Box::new(BufWriter::with_capacity(1 << 16, f)))
}

fn write_outputs(out: &Path, config_out: Option<&Path>, rows: &[TraceRow], config: &ConfigOut) -> Result<()> {
    write_trace_csv(create(out)?, rows).with_context(|| format!("failed to write {}", out.display()))?;
    if let Some(p) = config_out {
        write_config_toml(create(p)?, config).with_context(|| format!("failed to write {}", p.display()))?;
    }
    Ok(())
}

fn parse_scenario(s: &str) -> Result<Scenario, ArgError> {
    Scenario::parse(s).ok_or_else(|| {
        let known: Vec<&str> = Scenario::ALL.iter().map(|x| x.as_str()).collect();
        ArgError::unknown("scenario", s, &known)
    })
}

#[derive(clap::Args)]
pub struct GenArgs {
    /// Scenario to generate: ai2.
    #[arg(long, value_parser = parse_scenario, default_value = "ai2")]
    scenario: Scenario,
    /// Cluster size in GPUs (a multiple of 8).
    #[arg(long, default_value_t = Ai2Params::default().gpus)]
    gpus: u32,
    /// Horizon in days (time 0 is a Monday 00:00).
    #[arg(long, default_value_t = Ai2Params::default().days)]
    days: u32,
    /// Random seed: the same seed and parameters give the same bytes.
    #[arg(long, default_value_t = Ai2Params::default().seed)]
    seed: u64,
    /// Trace CSV to write ("-" for stdout).
    #[arg(long)]
    out: PathBuf,
    /// Also write the matching cluster + accounts config (TOML).
    #[arg(long)]
    config_out: Option<PathBuf>,
    /// Demand / capacity in GPU-time over the horizon.
    #[arg(long, default_value_t = Ai2Params::default().load)]
    load: f64,
    /// Researchers, spread over the teams.
    #[arg(long, default_value_t = Ai2Params::default().users)]
    users: u32,
    /// Legacy priority inflation: share of work labelled high at the end of
    /// the horizon (it grows linearly from the start share).
    #[arg(long, value_parser = fraction, default_value_t = Behaviour::default().high_share)]
    high_share: f64,
    /// Legacy GPU squatting: chance that an interactive user holds an idle
    /// placeholder on a day they debug.
    #[arg(long, value_parser = fraction, default_value_t = Behaviour::default().squat_fraction)]
    squat_fraction: f64,
    /// Share of low/normal-priority batch work marked preemptible (legacy policy).
    #[arg(long, value_parser = fraction, default_value_t = Behaviour::default().preemptible_fraction)]
    preemptible_fraction: f64,
    /// Share of batch work that checkpoints when signalled and reports it
    /// (CON-8: a preemption then costs it only the grace).
    #[arg(long, value_parser = fraction, default_value_t = Behaviour::default().on_signal_fraction)]
    checkpoint_on_signal_fraction: f64,
}

fn run_gen(a: GenArgs) -> Result<()> {
    let mut p =
        Ai2Params { gpus: a.gpus, days: a.days, seed: a.seed, load: a.load, users: a.users, ..Default::default() };
    p.behaviour.high_share = a.high_share;
    p.behaviour.squat_fraction = a.squat_fraction;
    p.behaviour.preemptible_fraction = a.preemptible_fraction;
    p.behaviour.on_signal_fraction = a.checkpoint_on_signal_fraction;
    let g = generate(a.scenario, &p).context("failed to generate")?;
    write_outputs(&a.out, a.config_out.as_deref(), &g.rows, &g.config)?;
    eprint!("{}", g.stats);
    Ok(())
}
