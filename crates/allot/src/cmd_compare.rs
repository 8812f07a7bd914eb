//! `allot compare`: replay one trace (or generated traces over several
//! seeds) under several policies, in parallel, and write `summary.json`,
//! `summary.md` and a self-contained `report.html` (docs/compare.md).

use std::path::{Path, PathBuf};

use allot_core::PolicyKind;
use allot_report::{Page, PolicyRun, Setup};
use allot_sim::SimOptions;
use allot_sim::report::{Report, Tables, measures_tables, summary_table};
use allot_trace::generate::{Ai2Params, Generated, Scenario, generate};
use anyhow::{Context, Result, anyhow, bail};
use rayon::prelude::*;

use crate::cmd_sim::progress::{Horizon, Progress, RunProgress};
use crate::cmd_sim::{Inputs, load_inputs, run_one};

#[derive(clap::Args)]
pub struct CompareArgs {
    /// Cluster, accounts and contract (TOML).
    #[arg(long, required_unless_present = "scenario", requires = "trace")]
    config: Option<PathBuf>,
    /// Workload trace (.csv with header, or .jsonl).
    #[arg(long, required_unless_present = "scenario", requires = "config")]
    trace: Option<PathBuf>,
    /// Node events (fail / repair / drain / undrain / add), .csv or .jsonl.
    #[arg(long, requires = "trace")]
    events: Option<PathBuf>,
    /// Account changes (budgets, shares, impacts with their times, as
    /// `allot trace export` writes them), .csv: applied as they happened
    /// (a --vary of an account's field adjusts them too).
    #[arg(long, requires = "trace")]
    account_changes: Option<PathBuf>,
    /// Policies to compare, separated by commas: fifo, fifo-backfill,
    /// priority, slurm, allot, and for a fleet allot-split (allot with every
    /// budget split per cluster, as one scheduler per cluster would have it)
    /// and slurm-split (one Slurm controller per cluster).
    #[arg(long, default_value = "priority,fifo-backfill,allot")]
    policies: String,
    /// Stop at this time (e.g. 30d); measures cover [0, until]. Default: run
    /// until every workload has ended.
    #[arg(long)]
    until: Option<String>,
    /// Directory to write summary.json, summary.md and report.html to
    /// (created if missing). Default: compare-STEM (STEM: the trace file's
    /// name without extension) or compare-SCENARIO, in the current directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Generate the trace and config instead of reading them: scenario name (ai2).
    #[arg(long, conflicts_with_all = ["config", "trace"], value_parser = parse_scenario)]
    scenario: Option<Scenario>,
    /// Generated cluster size in GPUs.
    #[arg(long, requires = "scenario", default_value_t = Ai2Params::default().gpus)]
    gpus: u32,
    /// Generated horizon in days.
    #[arg(long, requires = "scenario", default_value_t = Ai2Params::default().days)]
    days: u32,
    /// Number of generator seeds: each policy runs once per seed and the
    /// summaries give the mean and 95% confidence interval of every measure.
    #[arg(long, requires = "scenario", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    seeds: u32,
    /// First seed; the runs use seed, seed + 1, …
    #[arg(long, requires = "scenario", default_value_t = Ai2Params::default().seed)]
    seed: u64,
    /// Generated share of batch work that checkpoints on the signal (CON-8).
    #[arg(long, requires = "scenario", value_parser = crate::cmd_trace::fraction,
          default_value_t = allot_trace::generate::Behaviour::default().on_signal_fraction)]
    checkpoint_on_signal_fraction: f64,
    /// What-if sweep, repeatable: KEY=V1,V2,… with KEY budget:ACCOUNT,
    /// share:ACCOUNT, impact:ACCOUNT (a number, or +20% / -10% of the
    /// config's value), contract.KEY (e.g. contract.min_slice.batch=1h,2h)
    /// or slurm.KEY (e.g. slurm.weight_fairshare=10000).
    /// Each policy runs on the config as given and once per combination of
    /// values, side by side.
    #[arg(long, value_name = "KEY=VALUES")]
    vary: Vec<String>,
    /// Apply idle reclaim (CON-9, the config's `contract.idle_reclaim_*`)
    /// to the baselines too (fifo, fifo-backfill, priority, slurm,
    /// slurm-split); by default only allot and allot-split reclaim idle GPUs
    /// (docs/baselines.md).
    #[arg(long)]
    idle_reclaim_baselines: bool,
}

fn parse_scenario(s: &str) -> Result<Scenario, String> {
    Scenario::parse(s).ok_or_else(|| {
        let known: Vec<&str> = Scenario::ALL.iter().map(|x| x.as_str()).collect();
        format!("unknown scenario {s:?} (known: {})", known.join(", "))
    })
}

/// One trace to replay: read from files, or generated for one seed.
struct Source {
    inputs: Inputs,
    seed: Option<u64>,
}

/// The traces to replay and the rows that describe where they came from.
type Sources = (Vec<Source>, Vec<(String, String)>);

/// What one column of the comparison runs: a policy on the inputs, or the
/// per-cluster form of `allot` or `slurm` on the inputs split per cluster
/// ([`allot_sim::split`], `allot-split`, `slurm-split`), on one variation
/// of the config.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Variant {
    Policy(PolicyKind),
    Split(PolicyKind),
}

impl Variant {
    fn as_str(self) -> &'static str {
        match self {
            Variant::Policy(k) => k.as_str(),
            Variant::Split(k) => k.split_name().expect("only kinds with a split form are parsed"),
        }
    }

    fn kind(self) -> PolicyKind {
        match self {
            Variant::Policy(k) | Variant::Split(k) => k,
        }
    }

    fn is_split(self) -> bool {
        matches!(self, Variant::Split(_))
    }
}

fn parse_variants(list: &str) -> Result<Vec<Variant>> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let split = PolicyKind::SPLIT.into_iter().find(|k| k.split_name() == Some(name));
        let v = if let Some(k) = split {
            Variant::Split(k)
        } else if let Some(k) = PolicyKind::parse(name) {
            Variant::Policy(k)
        } else {
            let mut known: Vec<&str> = PolicyKind::ALL.iter().map(|k| k.as_str()).collect();
            known.extend(PolicyKind::SPLIT.iter().filter_map(|k| k.split_name()));
            bail!("unknown policy {name:?} (known: {})", known.join(", "));
        };
        if !out.contains(&v) {
            out.push(v);
        }
    }
    if out.is_empty() {
        bail!("--policies names no policy");
    }
    Ok(out)
}

/// One column: a variant on one variation of the config, and its name in
/// the report (the variant's alone when nothing varies).
struct Column {
    variant: Variant,
    variation: usize,
    label: String,
}

fn columns(kinds: &[Variant], variations: &[allot_trace::vary::Variation]) -> Vec<Column> {
    let mut out = Vec::new();
    for &variant in kinds {
        for (variation, v) in variations.iter().enumerate() {
            let label = match variations {
                [_] => variant.as_str().to_string(),
                _ => format!("{} [{}]", variant.as_str(), v.label),
            };
            out.push(Column { variant, variation, label });
        }
    }
    out
}

pub fn run(a: CompareArgs) -> Result<()> {
    let kinds = parse_variants(&a.policies)?;
    let sweeps = a.vary.iter().map(|v| allot_trace::vary::parse_sweep(v)).collect::<Result<Vec<_>, _>>()?;
    let variations = allot_trace::vary::variations(&sweeps)?;
    let columns = columns(&kinds, &variations);
    let until = match &a.until {
        Some(s) => Some(allot_trace::duration::parse_duration(s).map_err(|e| anyhow!("--until: {e}"))?),
        None => None,
    };
    let (sources, source_rows) = match a.scenario {
        Some(scenario) => generated_sources(scenario, &a)?,
        None => file_sources(&a)?,
    };
    // inputs[s][v]: source s under variation v (checked before any run).
    let inputs = sources
        .iter()
        .map(|s| {
            variations
                .iter()
                .map(|v| {
                    let config = v.apply(&s.inputs.config)?;
                    let (trace, events) = (s.inputs.trace.clone(), s.inputs.events.clone());
                    Inputs::new(config, trace, events, v.adjust(&s.inputs.changes))
                })
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    let out = out_dir(&a);
    std::fs::create_dir_all(&out).with_context(|| format!("failed to create {}", out.display()))?;
    let opts = SimOptions { until, check_invariants: false, keep_log: false, ..Default::default() };
    if let Some(v) = kinds.iter().find(|v| v.is_split())
        && sources.iter().any(|s| !s.inputs.changes.is_empty())
    {
        bail!("{} does not replay --account-changes (its accounts are copies per cluster): leave one out", v.as_str());
    }
    let splits = if let Some(v) = kinds.iter().find(|v| v.is_split()) {
        let split = |i: &Inputs| {
            let c = &i.config;
            allot_sim::split::split_by_cluster(&c.cluster, &c.accounts, &i.trace)
                .map_err(|e| anyhow!("{}: cannot copy the account tree per cluster: {e}", v.as_str()))
        };
        inputs.iter().map(|vs| vs.iter().map(|i| split(i).map(Some)).collect()).collect::<Result<Vec<Vec<_>>>>()?
    } else {
        vec![vec![None; variations.len()]; sources.len()]
    };
    // runs[s][c]: source s in column c.
    let runs = run_all(&sources, &inputs, &splits, &columns, &opts, a.idle_reclaim_baselines);
    let title = format!("Allot policy comparison: {}", sources[0].inputs.config.cluster.name);
    let mut source_rows = source_rows;
    if variations.len() > 1 {
        let labels: Vec<&str> = variations.iter().map(|v| v.label.as_str()).collect();
        source_rows.push(("variations".to_string(), labels.join("; ")));
    }
    let warnings = warnings(&sources, &runs);
    let words = Words::of(&a, &sources, &columns, &runs, until);
    let table = write_summaries(&out, &title, &words, &source_rows, &columns, &runs, &warnings)?;
    write_page(&out, title, &sources, source_rows, &runs[0], &table, warnings, &words)?;
    print!("{}", words.text());
    if sources.len() == 1 {
        print!("{}", summary_table(&runs[0].iter().map(|r| &r.report).collect::<Vec<_>>()));
    } else {
        print!("{}", table.markdown());
    }
    let dir = out.display();
    eprintln!("wrote {dir}/summary.json, {dir}/summary.md and {dir}/report.html");
    Ok(())
}

/// The report in words, first in every form: the headline paragraphs and
/// the assumptions behind the results (docs/compare.md, "Headline").
struct Words {
    headline: Vec<String>,
    assumed: Vec<String>,
}

impl Words {
    fn of(
        a: &CompareArgs,
        sources: &[Source],
        columns: &[Column],
        runs: &[Vec<PolicyRun>],
        until: Option<u64>,
    ) -> Words {
        let inputs = &sources[0].inputs;
        let cluster = &inputs.config.cluster;
        let gpus = cluster.total_gpus();
        let (days, load) = allot_report::load(&inputs.trace, gpus, until);
        let trace = match (&a.scenario, &a.trace) {
            (Some(s), _) => match sources {
                [one] => format!("scenario {} (seed {})", s.as_str(), one.seed.unwrap_or(0)),
                [first, .., last] => {
                    format!("scenario {}, seeds {}–{}", s.as_str(), first.seed.unwrap_or(0), last.seed.unwrap_or(0))
                }
                [] => format!("scenario {}", s.as_str()),
            },
            (None, Some(t)) => format!("trace {} ({} workloads)", t.display(), inputs.trace.len()),
            (None, None) => "the trace".to_string(),
        };
        let subject = allot_report::Subject { trace, clusters: cluster.clusters.len().max(1), gpus, days, load };
        // Per column of the config as given (the first variation): its
        // reports over the seeds.
        let per_column: Vec<(String, Vec<Report>)> = columns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.variation == 0)
            .map(|(i, c)| (c.label.clone(), runs.iter().map(|s| s[i].report.clone()).collect()))
            .collect();
        let allot = columns.iter().find(|c| c.variant == Variant::Policy(PolicyKind::Allot) && c.variation == 0);
        let headline = allot_report::headline(&subject, &per_column, allot.map_or("allot", |c| c.label.as_str()));
        let reclaim: Vec<(String, bool)> = columns
            .iter()
            .filter(|c| c.variation == 0)
            .map(|c| {
                let on = c.variant.kind().idle_reclaim(a.idle_reclaim_baselines);
                (c.label.clone(), on)
            })
            .collect();
        let assumed = allot_report::html::assumptions_of(&inputs.config.assumed, &reclaim, load);
        Words { headline, assumed }
    }

    /// As Markdown (also read as plain text): the paragraphs, then the
    /// assumptions as a list.
    fn markdown(&self) -> String {
        let mut out: String = self.headline.iter().map(|p| format!("{p}\n\n")).collect();
        out.push_str("**Assumptions behind the results**\n\n");
        out.extend(self.assumed.iter().map(|x| format!("* {x}\n")));
        out + "\n"
    }

    /// For the terminal.
    fn text(&self) -> String {
        self.markdown().replace("**", "")
    }
}

/// `--out`, or `compare-<trace file stem>` / `compare-<scenario>` in the
/// current directory.
fn out_dir(a: &CompareArgs) -> PathBuf {
    if let Some(out) = &a.out {
        return out.clone();
    }
    let stem = match (&a.scenario, &a.trace) {
        (Some(s), _) => s.as_str().to_string(),
        (None, Some(t)) => t.file_stem().map_or_else(|| "trace".to_string(), |s| s.to_string_lossy().into_owned()),
        (None, None) => "trace".to_string(),
    };
    PathBuf::from(format!("compare-{stem}"))
}

/// The warnings of every run, for summary.md and the page: per column and
/// kind, the first seed's (with the seeds it held for, when several).
fn warnings(sources: &[Source], runs: &[Vec<PolicyRun>]) -> Vec<String> {
    let mut out = Vec::new();
    let columns = runs.first().map_or(0, Vec::len);
    for c in 0..columns {
        let mut seen: Vec<(allot_sim::report::Unserved, usize, String)> = Vec::new();
        for (s, source_runs) in runs.iter().enumerate() {
            for w in &source_runs[c].warnings {
                match seen.iter_mut().find(|x| x.0 == w.unserved) {
                    Some(x) => x.1 += 1,
                    None => {
                        let seed = sources[s].seed.map_or_else(String::new, |x| format!(" [seed {x}]"));
                        seen.push((w.unserved, 1, format!("{w}{seed}")));
                    }
                }
            }
        }
        for (_, n, text) in seen {
            let also = if runs.len() > 1 { format!(" (in {n} of {} seeds)", runs.len()) } else { String::new() };
            out.push(format!("{text}{also}"));
        }
    }
    out
}

/// Writes summary.json and summary.md; returns the tables of measures (of
/// the single run, or means and intervals over the seeds).
fn write_summaries(
    out: &Path,
    title: &str,
    words: &Words,
    rows: &[(String, String)],
    columns: &[Column],
    runs: &[Vec<PolicyRun>],
    warnings: &[String],
) -> Result<Tables> {
    let (json, table) = if let [single] = runs {
        let reports: Vec<&Report> = single.iter().map(|r| &r.report).collect();
        (serde_json::to_string_pretty(&reports)?, measures_tables(&reports))
    } else {
        let per_policy: Vec<(String, Vec<Report>)> = columns
            .iter()
            .enumerate()
            .map(|(c, col)| (col.label.clone(), runs.iter().map(|s| s[c].report.clone()).collect()))
            .collect();
        let summaries: Vec<serde_json::Value> = per_policy.iter().map(|(_, rs)| allot_report::summarise(rs)).collect();
        (serde_json::to_string_pretty(&summaries)?, allot_report::seeds_tables(&per_policy))
    };
    write(&out.join("summary.json"), &(json + "\n"))?;
    let warned: String = warnings.iter().map(|w| format!("* {w}\n")).collect();
    let warned = if warned.is_empty() { warned } else { format!("**Warnings**\n\n{warned}\n") };
    let md = format!("# {title}\n\n{}{}\n\n{warned}{}", words.markdown(), inputs_line(rows), table.markdown());
    write(&out.join("summary.md"), &md)?;
    Ok(table)
}

/// Writes report.html: the words, charts of the first source's runs, the
/// table of measures.
#[expect(clippy::too_many_arguments, reason = "the parts of the page, each made elsewhere")]
fn write_page(
    out: &Path,
    title: String,
    sources: &[Source],
    rows: Vec<(String, String)>,
    runs: &[PolicyRun],
    table: &Tables,
    warnings: Vec<String>,
    words: &Words,
) -> Result<()> {
    let inputs = &sources[0].inputs;
    let mut notes = Vec::new();
    if let [s0, .., last] = sources {
        let (s0, last) = (s0.seed.unwrap_or(0), last.seed.unwrap_or(0));
        notes.push(format!(
            "Charts show the run of seed {s0}; the table of measures gives the mean and 95% confidence interval \
             over seeds {s0}–{last} ({} runs per policy).",
            sources.len()
        ));
    }
    let page = Page {
        title,
        setup: Setup {
            cluster: &inputs.config.cluster,
            accounts: &inputs.config.accounts,
            contract: &inputs.config.contract,
            config_text: &inputs.config.text,
            source: rows,
            trace: &inputs.trace,
        },
        runs,
        measures: table,
        notes,
        warnings,
        headline: words.headline.clone(),
        assumed: words.assumed.clone(),
    };
    write(&out.join("report.html"), &allot_report::render(&page))
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("failed to write {}", path.display()))
}

/// The inputs as one Markdown line: `config: …; trace: …`.
fn inputs_line(rows: &[(String, String)]) -> String {
    rows.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join("; ")
}

fn file_sources(a: &CompareArgs) -> Result<Sources> {
    let (config, trace) = match (&a.config, &a.trace) {
        (Some(c), Some(t)) => (c, t),
        _ => bail!("give --config and --trace, or --scenario"),
    };
    let inputs = load_inputs(config, trace, a.events.as_ref(), a.account_changes.as_ref())?;
    let mut rows = vec![
        ("config".to_string(), config.display().to_string()),
        ("trace".to_string(), format!("{} ({} workloads)", trace.display(), inputs.trace.len())),
        (
            "events".to_string(),
            match &a.events {
                Some(e) => format!("{} ({} node events)", e.display(), inputs.events.len()),
                None => "none".to_string(),
            },
        ),
    ];
    if let Some(c) = &a.account_changes {
        rows.push(("account changes".to_string(), format!("{} ({} changes)", c.display(), inputs.changes.len())));
    }
    rows.push(horizon_row(a));
    Ok((vec![Source { inputs, seed: None }], rows))
}

fn horizon_row(a: &CompareArgs) -> (String, String) {
    let v = match &a.until {
        Some(u) => format!("until {u} (runs stop there; measures cover [0, {u}])"),
        None => "until every workload has ended".to_string(),
    };
    ("horizon".to_string(), v)
}

/// Generates one trace per seed (in parallel), checked by the same code as
/// files (without writing and reading them), so generated and file inputs
/// are validated alike.
fn generated_sources(scenario: Scenario, a: &CompareArgs) -> Result<Sources> {
    let params = |seed| {
        let mut p = Ai2Params { gpus: a.gpus, days: a.days, seed, ..Ai2Params::default() };
        p.behaviour.on_signal_fraction = a.checkpoint_on_signal_fraction;
        p
    };
    let seeds: Vec<u64> = (0..u64::from(a.seeds)).map(|i| a.seed + i).collect();
    let sources: Vec<Result<Source>> = seeds
        .par_iter()
        .map(|&seed| {
            let g = generate(scenario, &params(seed)).map_err(|e| anyhow!("{e}"))?;
            Ok(Source { inputs: generated_inputs(&g, seed)?, seed: Some(seed) })
        })
        .collect();
    let sources = sources.into_iter().collect::<Result<Vec<_>>>()?;
    let mut rows = scenario_rows(scenario, &params(a.seed), &seeds, sources[0].inputs.trace.len());
    let fleet = &sources[0].inputs.config.cluster;
    if fleet.is_fleet() {
        let sizes: Vec<String> = (0..fleet.clusters.len())
            .map(|c| {
                let id = allot_core::cluster::ClusterId(c as u16);
                format!("{} {} GPUs", fleet.cluster_name(id), fleet.cluster_gpus(id))
            })
            .collect();
        let pins = allot_trace::generate::FLEET_PIN_FRACTION * 100.0;
        rows.push((
            "fleet".to_string(),
            format!("{}; {pins:.0}% of workloads pinned to their team's home cluster", sizes.join(", ")),
        ));
    }
    rows.push(horizon_row(a));
    Ok((sources, rows))
}

/// The scenario, seeds and every generator parameter, as rows for the page.
fn scenario_rows(scenario: Scenario, p: &Ai2Params, seeds: &[u64], workloads: usize) -> Vec<(String, String)> {
    let b = &p.behaviour;
    // A fleet's node shares are per cluster (its own row); only the weights apply.
    let mix: Vec<String> = p
        .gpu_mix
        .iter()
        .map(|m| match scenario {
            Scenario::Ai2 => format!("{} {:.1}% of nodes (weight {})", m.model, m.node_share * 100.0, m.weight),
            Scenario::Ai2Fleet => format!("{} weight {}", m.model, m.weight),
        })
        .collect();
    let seed_text = match seeds {
        [one] => one.to_string(),
        [s0, .., last] => format!("{s0}–{last} ({} runs per policy)", seeds.len()),
        [] => String::new(),
    };
    [
        ("scenario", scenario.as_str().to_string()),
        ("GPUs", p.gpus.to_string()),
        ("days", p.days.to_string()),
        ("seeds", seed_text),
        ("workloads (first seed)", workloads.to_string()),
        ("load (demand / capacity)", p.load.to_string()),
        ("users", p.users.to_string()),
        ("GPU mix", mix.join(", ")),
        ("nodes", format!("{} GPUs per node, racks of {} nodes", p.gpus_per_node, p.rack_size)),
        (
            "interactive users",
            format!("{:.0}%, {} sessions per working day", p.interactive_users * 100.0, p.sessions_per_day),
        ),
        ("early failures", format!("{:.0}% of batch jobs", p.fail_fraction * 100.0)),
        (
            "behaviour: priority labels",
            format!(
                "high {:.0}% → {:.0}% over the horizon, urgent {:.0}%, low {:.0}% of evaluation / RL simulation",
                b.high_share_start * 100.0,
                b.high_share * 100.0,
                b.urgent_share * 100.0,
                b.low_share * 100.0
            ),
        ),
        (
            "behaviour: GPU squatting",
            format!(
                "{:.0}% of interactive user-days, {}–{} h at utilisation {}–{}",
                b.squat_fraction * 100.0,
                b.squat_hours.0,
                b.squat_hours.1,
                b.squat_util.0,
                b.squat_util.1
            ),
        ),
        ("behaviour: preemptible", format!("{:.0}% of low/normal batch jobs", b.preemptible_fraction * 100.0)),
        ("behaviour: checkpoint on the signal", format!("{:.0}% of batch jobs (CON-8)", b.on_signal_fraction * 100.0)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn generated_inputs(g: &Generated, seed: u64) -> Result<Inputs> {
    let (config, trace) = g.inputs(&format!("generated (seed {seed})"))?;
    Inputs::new(config, trace, allot_core::NodeEvents::default(), Vec::new())
}

/// Runs one variant on one source's inputs: `allot-split` and
/// `slurm-split` run the per-cluster form of their policy on the split
/// inputs and map the result back onto the original accounts.
fn run_variant(
    inputs: &Inputs,
    split: Option<&allot_sim::split::Split>,
    v: Variant,
    opts: &SimOptions,
    reclaim_baselines: bool,
    progress: &mut RunProgress,
) -> (allot_core::State, allot_sim::SimOutput) {
    match (v, split) {
        (Variant::Policy(k), _) => run_one(inputs, k, opts, reclaim_baselines, progress),
        (Variant::Split(k), Some(split)) => {
            let c = &inputs.config;
            let contract = k.contract(c.contract, reclaim_baselines);
            let state = allot_core::State::new(c.cluster.clone(), split.accounts.clone(), contract);
            let mut policy = k.build_split().expect("only kinds with a split form are parsed");
            let (trace, events) = (split.trace.clone(), inputs.events.clone());
            let mut observe = |t| progress.at(t);
            let (state, out) = allot_sim::simulate_observed(
                state,
                trace,
                events,
                Vec::new(),
                Vec::new(),
                policy.as_mut(),
                opts,
                &mut observe,
            );
            split.unsplit(&c.accounts, state, out, v.as_str())
        }
        (Variant::Split(_), None) => unreachable!("split inputs are made for every source when a split form runs"),
    }
}

/// Runs every (source, column) pair on the rayon pool; returns the runs per
/// source, in column order. A run's policy name is its column's label.
fn run_all(
    sources: &[Source],
    inputs: &[Vec<Inputs>],
    splits: &[Vec<Option<allot_sim::split::Split>>],
    columns: &[Column],
    opts: &SimOptions,
    reclaim_baselines: bool,
) -> Vec<Vec<PolicyRun>> {
    let jobs: Vec<(usize, &Column)> = (0..sources.len()).flat_map(|s| columns.iter().map(move |c| (s, c))).collect();
    let progress = Progress::new(jobs.len());
    let done: Vec<PolicyRun> = jobs
        .par_iter()
        .map(|&(s, c)| {
            let seed = sources[s].seed.map_or_else(String::new, |x| format!(" (seed {x})"));
            let label = format!("{}{seed}", c.label);
            let inputs = &inputs[s][c.variation];
            let mut p = progress.start(&label, Horizon::of(&inputs.trace, opts.until));
            let split = splits[s][c.variation].as_ref();
            let (state, out) = run_variant(inputs, split, c.variant, opts, reclaim_baselines, &mut p);
            progress.done(p, out.horizon_end);
            let mut run = PolicyRun::of(&state, &out);
            run.rename(&c.label);
            for w in &run.warnings {
                progress.println(&format!("warning{seed}: {w}"));
            }
            run
        })
        .collect();
    progress.finish();
    let mut runs = done.into_iter();
    (0..sources.len()).map(|_| runs.by_ref().take(columns.len()).collect()).collect()
}
