//! The client commands: `allot submit`, `queue`, `show`, `cancel`,
//! `accounts`, `budget set`, `budget report`, `share set`, `nodes`,
//! `node drain|undrain`.
//! Server and token: `--server` / `ALLOT_SERVER` / the client config file,
//! `ALLOT_TOKEN` / the client config file (docs/server.md).

use std::collections::BTreeMap;

use allot_server::client::{Client, render};
use allot_server::views::{AccountChange, SubmitRequest};
use anyhow::{Context, Result};
use serde::Serialize;

#[derive(clap::Args, Clone)]
pub struct ClientOpts {
    /// Server URL (default: ALLOT_SERVER, the client config, http://127.0.0.1:8080).
    #[arg(long, global = true)]
    server: Option<String>,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(clap::Subcommand)]
pub enum ClientCommand {
    /// Submit a workload: allot submit --account P --gpus N -- COMMAND [ARGS…]
    Submit(SubmitArgs),
    /// List workloads (squeue-like).
    Queue(QueueArgs),
    /// Show a workload: history and why it is pending or was preempted.
    Show(IdArgs),
    /// Cancel a workload (a running one is signalled and stopped after grace).
    Cancel(IdArgs),
    /// The account tree with budgets, use and fair-share standing.
    Accounts(ListArgs),
    /// Budgets: allot budget set PATH HOURS; allot budget report
    #[command(subcommand)]
    Budget(BudgetCommand),
    /// Shares: allot share set PATH N
    #[command(subcommand)]
    Share(SetCommand),
    /// Nodes with health and free GPUs.
    Nodes(NodesArgs),
    /// Node maintenance: allot node drain|undrain NAME
    #[command(subcommand)]
    Node(NodeCommand),
}

#[derive(clap::Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// Project to charge.
    #[arg(long)]
    account: String,
    /// Total GPUs, all at once (gang).
    #[arg(long)]
    gpus: u32,
    /// batch, interactive or service.
    #[arg(long)]
    class: Option<String>,
    /// Exactly this many nodes (gpus / nodes each).
    #[arg(long)]
    nodes: Option<u32>,
    /// Only GPUs of this type (as in the config's pools).
    #[arg(long)]
    gpu_type: Option<String>,
    /// Only these clusters of the fleet, comma-separated (default: any).
    #[arg(long = "cluster", value_delimiter = ',')]
    clusters: Vec<String>,
    /// Checkpoint interval, e.g. 10m.
    #[arg(long, value_parser = allot_trace::duration::parse_duration)]
    checkpoint: Option<u64>,
    /// Expected duration, e.g. 2h.
    #[arg(long, value_parser = allot_trace::duration::parse_duration)]
    duration: Option<u64>,
    /// Reruns after a non-zero exit.
    #[arg(long)]
    retries: Option<u32>,
    /// A name shown in listings.
    #[arg(long)]
    name: Option<String>,
    /// KEY=VALUE added to the environment (repeatable).
    #[arg(long = "env", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

fn parse_env(s: &str) -> Result<(String, String), crate::args::ArgError> {
    let (k, v) = s.split_once('=').ok_or_else(|| crate::args::ArgError::expected("KEY=VALUE", s))?;
    Ok((k.to_string(), v.to_string()))
}

#[derive(clap::Args)]
pub struct QueueArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// Only this account's subtree.
    #[arg(long)]
    account: Option<String>,
    /// States, comma-separated (default: pending,running,stopping).
    #[arg(long)]
    state: Option<String>,
    /// Every state.
    #[arg(long)]
    all: bool,
    #[arg(long)]
    user: Option<String>,
    /// Only workloads of these clusters of the fleet, comma-separated:
    /// pending ones eligible for one of them, the others run there.
    #[arg(long)]
    cluster: Option<String>,
}

#[derive(clap::Args)]
pub struct NodesArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// Only the nodes of these clusters of the fleet, comma-separated.
    #[arg(long)]
    cluster: Option<String>,
}

#[derive(clap::Args)]
pub struct IdArgs {
    #[command(flatten)]
    opts: ClientOpts,
    id: String,
}

#[derive(clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    opts: ClientOpts,
}

#[derive(clap::Subcommand)]
pub enum SetCommand {
    /// Set a value (use "default" to return to the config's value).
    Set(SetArgs),
}

#[derive(clap::Subcommand)]
pub enum BudgetCommand {
    /// Set a value (use "default" to return to the config's value).
    Set(SetArgs),
    /// A budget period's statement: budget, carried, used, over budget,
    /// GPU-hours by type, attainment and queue times per account.
    Report(ReportArgs),
}

#[derive(clap::Args)]
pub struct ReportArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// current, previous, or the period's start date (e.g. 2026-11-01).
    #[arg(long, default_value = "current")]
    period: String,
    /// md (a table per period), csv or json.
    #[arg(long, default_value = "md", value_parser = parse_format)]
    format: allot_core::statement::Format,
}

fn parse_format(s: &str) -> Result<allot_core::statement::Format, String> {
    allot_core::statement::Format::parse(s)
        .ok_or_else(|| format!("expected one of {}, got {s:?}", allot_core::statement::Format::NAMES))
}

#[derive(clap::Args)]
pub struct SetArgs {
    #[command(flatten)]
    opts: ClientOpts,
    path: String,
    value: String,
}

#[derive(clap::Subcommand)]
pub enum NodeCommand {
    /// Preempt the node's workloads under the contract, then take it out of service.
    Drain(NodeArgs),
    /// Return a drained node to service.
    Undrain(NodeArgs),
}

#[derive(clap::Args)]
pub struct NodeArgs {
    #[command(flatten)]
    opts: ClientOpts,
    name: String,
}

fn client(o: &ClientOpts) -> Result<Client> {
    Ok(Client::from_env(o.server.as_deref(), None)?)
}

fn print_json<T: Serialize>(v: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// Prints `v` as JSON, or the text rendering.
fn output<T: Serialize>(json: bool, v: &T, text: impl FnOnce(&T) -> String) -> Result<()> {
    if json {
        print_json(v)
    } else {
        print!("{}", text(v));
        Ok(())
    }
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

pub fn run(c: ClientCommand) -> Result<()> {
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("failed to start the runtime")?;
    rt.block_on(run_async(c))
}

async fn run_async(c: ClientCommand) -> Result<()> {
    match c {
        ClientCommand::Submit(a) => {
            let req = SubmitRequest {
                account: a.account,
                class: a.class,
                gpus: a.gpus,
                nodes: a.nodes,
                gpu_type: a.gpu_type,
                clusters: a.clusters,
                command: a.command,
                env: a.env.into_iter().collect::<BTreeMap<_, _>>(),
                checkpoint_interval_s: a.checkpoint,
                expected_duration_s: a.duration,
                retries: a.retries,
                name: a.name,
                ..Default::default()
            };
            let w = client(&a.opts)?.submit(&req).await.context("failed to submit")?;
            output(a.opts.json, &w, |w| format!("{}\n", w.id))
        }
        ClientCommand::Queue(a) => {
            let mut q = Vec::new();
            if let Some(acc) = a.account {
                q.push(("account", acc));
            }
            if let Some(u) = a.user {
                q.push(("user", u));
            }
            if let Some(c) = a.cluster {
                q.push(("cluster", c));
            }
            if !a.all {
                q.push(("state", a.state.unwrap_or_else(|| "pending,running,stopping".into())));
            }
            let mut ws = client(&a.opts)?.workloads(&q).await.context("failed to list workloads")?;
            ws.reverse(); // oldest first
            output(a.opts.json, &ws, |ws| render::queue(ws, now()))
        }
        ClientCommand::Show(a) => {
            let d = client(&a.opts)?.workload(&a.id).await.with_context(|| format!("failed to show {}", a.id))?;
            output(a.opts.json, &d, render::show)
        }
        ClientCommand::Cancel(a) => {
            let w = client(&a.opts)?.cancel(&a.id).await.with_context(|| format!("failed to cancel {}", a.id))?;
            output(a.opts.json, &w, |w| format!("{} {}\n", w.id, w.state))
        }
        ClientCommand::Accounts(a) => {
            let list = client(&a.opts)?.accounts().await.context("failed to list accounts")?;
            output(a.opts.json, &list, |l| render::accounts(l))
        }
        ClientCommand::Budget(BudgetCommand::Set(a)) => set_account(a, true).await,
        ClientCommand::Budget(BudgetCommand::Report(a)) => {
            let q = [("period", a.period.clone())];
            let s = client(&a.opts)?.budget_report(&q).await.context("failed to get the budget report")?;
            let format = if a.opts.json { allot_core::statement::Format::Json } else { a.format };
            print!("{}", crate::cmd_sim::render_statement(&s, format)?);
            Ok(())
        }
        ClientCommand::Share(SetCommand::Set(a)) => set_account(a, false).await,
        ClientCommand::Nodes(a) => {
            let q: Vec<(&str, String)> = a.cluster.into_iter().map(|c| ("cluster", c)).collect();
            let list = client(&a.opts)?.nodes(&q).await.context("failed to list nodes")?;
            output(a.opts.json, &list, |l| render::nodes(l))
        }
        ClientCommand::Node(n) => {
            let (a, action) = match n {
                NodeCommand::Drain(a) => (a, "drain"),
                NodeCommand::Undrain(a) => (a, "undrain"),
            };
            let v = client(&a.opts)?
                .node_action(&a.name, action)
                .await
                .with_context(|| format!("failed to {action} {}", a.name))?;
            output(a.opts.json, &v, |v| format!("{} {}\n", v.name, v.health))
        }
    }
}

async fn set_account(a: SetArgs, budget: bool) -> Result<()> {
    let value = if a.value == "default" {
        None
    } else {
        let v: f64 = a.value.parse().with_context(|| format!("expected a number or \"default\", got {:?}", a.value))?;
        Some(v)
    };
    let change = if budget {
        AccountChange { budget_gpu_hours: Some(value), share: None }
    } else {
        AccountChange { budget_gpu_hours: None, share: Some(value) }
    };
    let what = if budget { "budget" } else { "share" };
    let v = client(&a.opts)?
        .change_account(&a.path, &change)
        .await
        .with_context(|| format!("failed to set the {what} of {}", a.path))?;
    if a.opts.json {
        print_json(&v)
    } else {
        print!("{}", render::accounts(std::slice::from_ref(&v)));
        Ok(())
    }
}
