//! `allot sim`: replay a trace under one or more policies and measure.
//! Progress and warnings go to stderr ([`progress`]), the table to stdout.

pub(crate) mod progress;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use allot_core::PolicyKind;
use allot_core::statement::{Format, Statement, to_csv, to_markdown};
use allot_sim::measures::measure;
use allot_sim::report::{Report, summary_table, trace_warnings, write_workloads_csv};
use allot_sim::{SimOptions, SimOutput, simulate_observed};
use allot_trace::changes::AccountChange;
use anyhow::{Context, Result, bail};

use progress::{Horizon, Progress, RunProgress};

#[derive(clap::Args)]
pub struct SimArgs {
    /// Cluster, accounts and contract (TOML).
    #[arg(long)]
    config: PathBuf,
    /// Workload trace (.csv with header, or .jsonl).
    #[arg(long)]
    trace: PathBuf,
    /// Node events (fail / repair / drain / undrain / add), .csv or .jsonl.
    #[arg(long)]
    events: Option<PathBuf>,
    /// Account changes (budgets, shares, impacts with their times, as
    /// `allot trace export` writes them), .csv: applied as they happened.
    #[arg(long)]
    account_changes: Option<PathBuf>,
    /// Policy, or several separated by commas to compare side by side:
    /// fifo, fifo-backfill, priority, slurm, allot.
    #[arg(long, default_value = "allot")]
    policy: String,
    /// Stop at this time (e.g. 30d); measures cover [0, until]. Default:
    /// run until every workload has ended.
    #[arg(long)]
    until: Option<String>,
    /// Write the report object (an array of them for several policies).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write one CSV row per workload (single policy only).
    #[arg(long)]
    workloads: Option<PathBuf>,
    /// Write one JSON line per scheduling event (single policy only).
    #[arg(long)]
    log: Option<PathBuf>,
    /// Write the budget statement of every period (docs/budgets.md,
    /// "Statements"), as the server's GET /v1/budget-report computes it;
    /// the format from the extension: .csv, .json or .md (single policy
    /// only).
    #[arg(long)]
    budget_report: Option<PathBuf>,
    /// Check every state invariant (free maps, ledger, queues) after each
    /// step and stop at the first broken one: slower; for verifying a
    /// policy change on a trace.
    #[arg(long)]
    check_invariants: bool,
    /// Apply idle reclaim (CON-9, the config's `contract.idle_reclaim_*`)
    /// to the baselines too (fifo, fifo-backfill, priority); by default
    /// only allot reclaims idle GPUs (docs/baselines.md).
    #[arg(long)]
    pub(crate) idle_reclaim_baselines: bool,
}

pub(crate) fn parse_policies(list: &str) -> Result<Vec<PolicyKind>> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some(k) = PolicyKind::parse(name) else {
            let known: Vec<&str> = PolicyKind::ALL.iter().map(|k| k.as_str()).collect();
            bail!("unknown policy {name:?} (known: {})", known.join(", "));
        };
        if !out.contains(&k) {
            out.push(k);
        }
    }
    if out.is_empty() {
        bail!("--policy names no policy");
    }
    Ok(out)
}

/// The inputs of a run, loaded and validated once.
pub(crate) struct Inputs {
    pub config: allot_trace::config::Config,
    pub trace: Vec<allot_core::WorkloadSpec>,
    /// Node events: health changes and nodes added (MNT-5).
    pub events: allot_core::NodeEvents,
    /// The account changes as read (a sweep adjusts them).
    pub changes: Vec<AccountChange>,
    /// The account trees they put in force, with their times.
    pub trees: Vec<(allot_core::Time, allot_core::AccountTree)>,
}

impl Inputs {
    /// Inputs with `changes` applied on `config` (checked by its parser).
    pub(crate) fn new(
        config: allot_trace::config::Config,
        trace: Vec<allot_core::WorkloadSpec>,
        events: allot_core::NodeEvents,
        changes: Vec<AccountChange>,
    ) -> Result<Inputs> {
        let trees = allot_trace::changes::trees_in_force(&config, &changes)?;
        Ok(Inputs { config, trace, events, changes, trees })
    }
}

pub(crate) fn load_inputs(
    config: &Path,
    trace: &Path,
    events: Option<&PathBuf>,
    account_changes: Option<&PathBuf>,
) -> Result<Inputs> {
    let config = allot_trace::config::load_config(config)?;
    let changes = match account_changes {
        Some(c) => allot_trace::changes::load_account_changes(c, &config)?,
        None => Vec::new(),
    };
    // The trace names accounts as they are after every change (created
    // ones too, renamed ones by their last path; ACC-1).
    let trees = allot_trace::changes::trees_in_force(&config, &changes)?;
    let events = match events {
        Some(e) => allot_trace::events::load_events(e, &config)?,
        None => allot_core::NodeEvents::default(),
    };
    // The trace may ask for what only nodes added by the events provide
    // (MNT-5): it is checked against the fleet as it ends up. A workload
    // that arrives before those nodes and fits nowhere yet is rejected by
    // the policy at its arrival, as a live server would.
    let last = allot_trace::config::Config {
        accounts: allot_trace::changes::last_tree(&config, &trees),
        cluster: allot_trace::events::fleet_after(&config.cluster, &events)?,
        ..config.clone()
    };
    let trace = allot_trace::trace::load_trace(trace, &last)?;
    Ok(Inputs { config, trace, events, changes, trees })
}

/// Runs one policy on the inputs, telling `progress` how far it got; a
/// baseline reclaims idle GPUs (CON-9) only with `reclaim_baselines`.
pub(crate) fn run_one(
    inputs: &Inputs,
    kind: PolicyKind,
    opts: &SimOptions,
    reclaim_baselines: bool,
    progress: &mut RunProgress,
) -> (allot_core::State, SimOutput) {
    let c = &inputs.config;
    let contract = kind.contract(c.contract, reclaim_baselines);
    let state = allot_core::State::new(c.cluster.clone(), c.accounts.clone(), contract);
    let mut policy = kind.build();
    let (trace, events, trees) = (inputs.trace.clone(), inputs.events.clone(), inputs.trees.clone());
    simulate_observed(state, trace, events, Vec::new(), trees, policy.as_mut(), opts, &mut |t| progress.at(t))
}

/// Prints the warnings of a run ([`trace_warnings`]) above the progress.
fn warn(progress: &Progress, policy: &str, state: &allot_core::State, out: &SimOutput) {
    for w in trace_warnings(policy, state, out.horizon_end) {
        progress.println(&format!("warning: {w}"));
    }
}

pub fn run(a: SimArgs) -> Result<()> {
    let kinds = parse_policies(&a.policy)?;
    if kinds.len() > 1 && (a.workloads.is_some() || a.log.is_some() || a.budget_report.is_some()) {
        bail!("--workloads, --log and --budget-report take a single --policy");
    }
    let report_format = a.budget_report.as_deref().map(report_format).transpose()?;
    let until = match &a.until {
        Some(s) => Some(allot_trace::duration::parse_duration(s).map_err(|e| anyhow::anyhow!("--until: {e}"))?),
        None => None,
    };
    let inputs = load_inputs(&a.config, &a.trace, a.events.as_ref(), a.account_changes.as_ref())?;
    let opts =
        SimOptions { until, check_invariants: a.check_invariants, keep_log: a.log.is_some(), ..Default::default() };
    let progress = Progress::new(kinds.len());
    let horizon = Horizon::of(&inputs.trace, until);
    let reclaim = a.idle_reclaim_baselines;
    let runs: Vec<(allot_core::State, SimOutput, Report)> = std::thread::scope(|s| {
        let handles: Vec<_> = kinds
            .iter()
            .map(|&k| {
                let (inputs, opts, progress) = (&inputs, &opts, &progress);
                s.spawn(move || {
                    let mut p = progress.start(k.as_str(), horizon);
                    let (state, out) = run_one(inputs, k, opts, reclaim, &mut p);
                    progress.done(p, out.horizon_end);
                    warn(progress, k.as_str(), &state, &out);
                    let report = measure(&state, &out);
                    (state, out, report)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("simulation thread panicked")).collect()
    });
    progress.finish();
    let reports: Vec<&Report> = runs.iter().map(|(_, _, r)| r).collect();
    print!("{}", summary_table(&reports));
    // Where allot is worse than a baseline in a tail or in preemptions, a
    // sentence says so (the table alone leaves it to the reader).
    for line in allot_report::worse_tails(&reports, PolicyKind::Allot.as_str()) {
        println!("\n{line}");
    }
    if let Some(path) = &a.json {
        let text = if reports.len() == 1 {
            serde_json::to_string_pretty(reports[0])?
        } else {
            serde_json::to_string_pretty(&reports)?
        };
        std::fs::write(path, text + "\n").with_context(|| format!("failed to write {}", path.display()))?;
    }
    let (state, out, _) = &runs[0];
    if let Some(path) = &a.workloads {
        let f = File::create(path).with_context(|| format!("failed to create {}", path.display()))?;
        let mut w = BufWriter::new(f);
        write_workloads_csv(&mut w, state, out.horizon_end)?;
        w.flush()?;
    }
    if let Some(path) = &a.log {
        let f = File::create(path).with_context(|| format!("failed to create {}", path.display()))?;
        let mut w = BufWriter::new(f);
        for e in &out.log {
            serde_json::to_writer(&mut w, e)?;
            w.write_all(b"\n")?;
        }
        w.flush()?;
    }
    if let (Some(path), Some(format)) = (&a.budget_report, report_format) {
        let s = allot_sim::statement::budget_statement(state, out, &inputs.config.accounts, &inputs.trees);
        std::fs::write(path, render_statement(&s, format)?)
            .with_context(|| format!("failed to write {}", path.display()))?;
    }
    Ok(())
}

/// The statement format of a `--budget-report` file, from its extension.
fn report_format(path: &Path) -> Result<Format> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    match Format::parse(ext) {
        Some(f) => Ok(f),
        None => bail!("--budget-report {}: expected a .csv, .json or .md file", path.display()),
    }
}

/// A budget statement as `format` (the same renderers the server uses).
pub(crate) fn render_statement(s: &Statement, format: Format) -> Result<String> {
    Ok(match format {
        Format::Json => serde_json::to_string_pretty(s)? + "\n",
        Format::Csv => to_csv(s),
        Format::Markdown => to_markdown(s),
    })
}
