//! The client commands: `allot submit`, `queue`, `show`, `cancel`,
//! `accounts`, `budget set`, `budget report`, `share set`, `nodes` (`node`
//! is in `cmd_admin`).
//! Server and token: `--server` / `ALLOT_SERVER` / the client config file,
//! `ALLOT_TOKEN` / the client config file (docs/server.md).

use std::collections::BTreeMap;

use allot_core::AccountField;
use allot_server::client::columns::Col;
use allot_server::client::{Client, render, terminal};
use allot_server::views::{AccountChange, AccountDecl, AccountTreeImport, AccountView, SubmitRequest};
use anyhow::{Context, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;

#[derive(clap::Args, Clone)]
pub struct ClientOpts {
    /// Server URL, e.g. http://HOST:8080 (a bare HOST:PORT gets http://). Default: ALLOT_SERVER, else
    /// `server` in the client config file ($ALLOT_CLIENT_CONFIG or ~/.config/allot/client.toml), else
    /// http://127.0.0.1:8080. The token: ALLOT_TOKEN, else `token` in that file.
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) server: Option<String>,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    pub(crate) json: bool,
}

#[derive(clap::Subcommand)]
pub enum ClientCommand {
    /// Submit a workload: allot submit --account P --gpus N -- COMMAND [ARGS…]
    Submit(SubmitArgs),
    /// List workloads (squeue-like).
    Queue(QueueArgs),
    /// Show a workload: history and why it is pending or was preempted.
    Show(IdArgs),
    /// Cancel workloads by id (an array's id: all its elements) and/or by
    /// filter; a running one is signalled and stopped after grace.
    Cancel(BulkArgs),
    /// Hold pending workloads: they wait, whatever the policy, until
    /// released (HOLD-1).
    Hold(BulkArgs),
    /// Release held workloads (HOLD-1).
    Release(BulkArgs),
    /// Ended workloads (sacct-like): times, attempts, GPU-hours, measured
    /// utilization, why they ended.
    History(HistoryArgs),
    /// A workload's output (stdout and stderr) through the API: allot logs ID [--attempt N] [--follow]
    Logs(LogsArgs),
    /// The account tree with budgets, use and fair-share standing; create,
    /// rename, close, reopen, export, import.
    Accounts(AccountsArgs),
    /// Budgets: allot budget set PATH HOURS [--user NAME]; allot budget report
    #[command(subcommand)]
    Budget(BudgetCommand),
    /// Shares: allot share set PATH N, or a researcher's: allot share set PATH --user NAME N
    #[command(subcommand)]
    Share(SetCommand),
    /// Impact: allot impact set PATH N (IMP rules)
    #[command(subcommand)]
    Impact(SetCommand),
    /// Nodes with health and free GPUs.
    Nodes(NodesArgs),
}

#[derive(clap::Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// Account (project) to charge, a path such as org/llm/pretrain (`allot accounts` lists them).
    #[arg(long, value_name = "PATH")]
    account: String,
    /// Total GPUs (a count), all at once (gang).
    #[arg(long, value_name = "N")]
    gpus: u32,
    /// batch, interactive or service (default: batch).
    #[arg(long)]
    class: Option<String>,
    /// Exactly this many nodes (a count; gpus / nodes GPUs on each).
    #[arg(long, value_name = "N")]
    nodes: Option<u32>,
    /// Only GPUs of this type (a name of the config's pools, e.g. H100).
    #[arg(long, value_name = "TYPE")]
    gpu_type: Option<String>,
    /// Only these clusters of the fleet, comma-separated (default: any).
    #[arg(long = "cluster", value_delimiter = ',', value_name = "NAME")]
    clusters: Vec<String>,
    /// Checkpoint interval (a duration: 10m, 1.5h or HH:MM:SS).
    #[arg(long, value_parser = allot_trace::duration::parse_duration, value_name = "DURATION")]
    checkpoint: Option<u64>,
    /// Expected duration (a duration: 2h, 90m, 1-00:00:00).
    #[arg(long, value_parser = allot_trace::duration::parse_duration, value_name = "DURATION")]
    duration: Option<u64>,
    /// Time limit per attempt (CON-6), e.g. 30m, 1.5h, 02:00:00 or 1-00:00:00;
    /// the workload is stopped after grace when it has run this long.
    /// Default: the class's time_limit in the config (none unless set).
    #[arg(long, value_parser = allot_trace::duration::parse_duration, value_name = "DURATION")]
    time: Option<u64>,
    /// The command saves its progress when it gets SIGTERM and reports that
    /// checkpoint within the grace (touches $ALLOT_CHECKPOINT_MARKER, CON-8):
    /// a preemption then costs it only the grace.
    #[arg(long)]
    checkpoint_on_signal: bool,
    /// Reruns after a non-zero exit (a count; default 0).
    #[arg(long, value_name = "N")]
    retries: Option<u32>,
    /// A name shown in listings (and to filter by: queue, history, cancel --name).
    #[arg(long, short = 'J')]
    name: Option<String>,
    /// Submit an array, one workload per index (ARR-1): 0-99, 1,3,5-9 or
    /// 0-15:4, with %N for at most N queued or running at once (0-99%8).
    /// Each element gets ALLOT_ARRAY_ID, ALLOT_ARRAY_INDEX and
    /// ALLOT_ARRAY_COUNT; the array's id is printed, its elements are ID_INDEX.
    #[arg(long, short = 'a', value_name = "INDICES[%N]")]
    array: Option<String>,
    /// Start only after other workloads (DEP-1): afterok:ID[:ID…] (they
    /// finished), afternotok:ID (they failed or were cancelled), afterany:ID
    /// (they ended), several joined by commas. ID may be an array's id (all
    /// its elements) or ID_INDEX. If a dependency can no longer hold, the
    /// workload is cancelled (DEP-2).
    #[arg(long, short = 'd', value_name = "TYPE:ID[:ID…]")]
    dependency: Option<String>,
    /// Submit on hold: it waits until `allot release ID` (HOLD-1).
    #[arg(long, short = 'H')]
    hold: bool,
    /// KEY=VALUE added to the environment (repeatable).
    #[arg(long = "env", value_parser = parse_env, value_name = "KEY=VALUE")]
    env: Vec<(String, String)>,
    /// Where the command starts on the nodes that run it (a relative
    /// program such as ./train.sh is found there); a relative DIR is taken
    /// from the current directory. Default: the current directory.
    #[arg(long, value_name = "DIR")]
    chdir: Option<std::path::PathBuf>,
    /// Run this container image as a managed Job of the fleet's Kubernetes
    /// cluster (K8S-12): --nodes pods of gpus/nodes GPUs each, the command
    /// (default: the image's entrypoint), --env and an absolute --chdir as
    /// the container's. `kubectl describe job` then says why it waits.
    #[arg(long, value_name = "IMAGE")]
    image: Option<String>,
    /// With --image: the Job's namespace (default: the most specific one
    /// whose Jobs may charge the account).
    #[arg(long, value_name = "NAME", requires = "image")]
    namespace: Option<String>,
    /// The program and its arguments (with --image: optional).
    #[arg(last = true, required_unless_present = "image")]
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
    /// Only this account's subtree (a path such as org/llm).
    #[arg(long, value_name = "PATH")]
    account: Option<String>,
    /// States, comma-separated: pending, held (pending and held), running, stopping, finished,
    /// failed, cancelled, rejected (default: pending,running,stopping).
    #[arg(long, short = 't', value_name = "STATES")]
    state: Option<String>,
    /// Every state (instead of --state).
    #[arg(long, conflicts_with = "state")]
    all: bool,
    /// Only the workloads this user (a token's name) submitted.
    #[arg(long, short = 'u', value_name = "NAME")]
    user: Option<String>,
    /// Only workloads of these clusters of the fleet, comma-separated:
    /// pending ones eligible for one of them, the others run there.
    #[arg(long, value_name = "NAMES")]
    cluster: Option<String>,
    /// Only workloads of this name.
    #[arg(long, short = 'n')]
    name: Option<String>,
    /// Only the elements of this array.
    #[arg(long, value_name = "ARRAY_ID")]
    array: Option<String>,
    /// Reasons in full, not cut to the line.
    #[arg(long, short = 'l')]
    long: bool,
    /// Columns to show instead, comma-separated: id, name, account, user,
    /// class, gpus, state, cluster, nodes, elapsed, timeleft, age,
    /// submitted, started, ended, waited, ran, attempts, gpuh, util
    /// (measured), reason.
    #[arg(long, short = 'o', value_name = "COLUMNS", value_parser = parse_columns)]
    format: Option<Columns>,
    /// Refresh every SECONDS (default 2) until interrupted: in place on a
    /// terminal, one table after another otherwise.
    #[arg(long, short = 'w', value_name = "SECONDS", num_args = 0..=1, default_missing_value = "2")]
    watch: Option<f64>,
    /// With --watch: stop after this many refreshes.
    #[arg(long, value_name = "N", requires = "watch")]
    count: Option<u64>,
}

#[derive(clap::Args)]
pub struct BulkArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// Workload ids: 12, 12_3 (an array's element), or an array's id (all
    /// its elements).
    ids: Vec<String>,
    /// And every workload of this user (that you may change).
    #[arg(long, short = 'u')]
    user: Option<String>,
    /// … in these states, comma-separated: pending, held (pending and held), running, stopping
    /// (default: pending,running,stopping).
    #[arg(long, short = 't', value_name = "STATES")]
    state: Option<String>,
    /// … of this name.
    #[arg(long, short = 'n')]
    name: Option<String>,
    /// … in this account's subtree.
    #[arg(long, short = 'A')]
    account: Option<String>,
}

#[derive(clap::Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// Only this account's subtree.
    #[arg(long, short = 'A')]
    account: Option<String>,
    /// Only this user's workloads.
    #[arg(long, short = 'u')]
    user: Option<String>,
    /// Only workloads of this name.
    #[arg(long, short = 'n')]
    name: Option<String>,
    /// Only the elements of this array.
    #[arg(long, value_name = "ARRAY_ID")]
    array: Option<String>,
    /// Ended states, comma-separated (default: finished,failed,cancelled,rejected).
    #[arg(long, short = 't')]
    state: Option<String>,
    /// The newest this many (default 50).
    #[arg(long, default_value_t = 50)]
    limit: u32,
    /// Reasons in full, not cut to the line.
    #[arg(long, short = 'l')]
    long: bool,
    /// Columns to show instead, comma-separated: id, name, account, user,
    /// class, gpus, state, cluster, nodes, elapsed, timeleft, age,
    /// submitted, started, ended, waited, ran, attempts, gpuh, util
    /// (measured), reason.
    #[arg(long, short = 'o', value_name = "COLUMNS", value_parser = parse_columns)]
    format: Option<Columns>,
}

#[derive(clap::Args)]
pub struct NodesArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// Only the nodes of these clusters of the fleet, comma-separated.
    #[arg(long, value_name = "NAMES")]
    cluster: Option<String>,
}

#[derive(clap::Args)]
pub struct IdArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// The workload's id, as `allot submit` printed it (`allot queue` lists them).
    id: String,
}

#[derive(clap::Args)]
pub struct LogsArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// The workload's id.
    id: String,
    /// The attempt (1 is the first; default: the last).
    #[arg(long, value_name = "N")]
    attempt: Option<i64>,
    /// Keep printing what the attempt writes until it ends (or Ctrl-C).
    #[arg(long, short = 'f')]
    follow: bool,
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
    /// The account's path, e.g. org/llm/pretrain.
    path: String,
    /// The value: for a budget GPU-hours (NGH, normalised by the GPU type's weight) per budget
    /// period, e.g. 10, 10h or 2.5NGH; for a share or an impact a weight without a unit, e.g. 2;
    /// "default" for the config's.
    value: String,
    /// A researcher's share (FS-2) or budget (BUD-6) within the account: a person the server
    /// knows (a Unix user of its host, a token's or session's user, or one with work or a share).
    #[arg(long, value_name = "NAME")]
    user: Option<String>,
    /// The --user is new here (not yet signed in, no work): set it anyway.
    #[arg(long, requires = "user")]
    new_user: bool,
}

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct AccountsArgs {
    #[command(flatten)]
    opts: ClientOpts,
    #[command(subcommand)]
    command: Option<AccountsCommand>,
}

#[derive(clap::Subcommand)]
pub enum AccountsCommand {
    /// Create an account (ACC-1).
    Create(CreateArgs),
    /// Rename an account: a new last segment; its subtree, workloads and grants move with it.
    Rename(RenameArgs),
    /// Close an account (ACC-2): no new work; its accepted work runs on, or with --stop is stopped (ACC-3).
    Close(CloseArgs),
    /// Reopen a closed account.
    Reopen(PathArgs),
    /// Write the account tree as TOML (`[[accounts]]` entries).
    Export(ExportArgs),
    /// Make the tree the one of a TOML file: create, replace, close the unlisted (admins).
    Import(ImportArgs),
}

#[derive(clap::Args)]
pub struct CreateArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// The new account's path, e.g. org/llm/new-project.
    path: String,
    /// Share among its siblings, a weight without a unit (default: FS-0).
    #[arg(long, value_name = "WEIGHT")]
    share: Option<f64>,
    /// Budget in GPU-hours (NGH, normalised by the GPU type's weight) per budget period.
    #[arg(long, value_name = "NGH")]
    budget: Option<f64>,
    /// Impact, a weight without a unit (default: inherited).
    #[arg(long, value_name = "WEIGHT")]
    impact: Option<f64>,
    /// A researcher's share, NAME=WEIGHT (repeatable); each a person the server knows.
    #[arg(long = "user", value_parser = parse_user_share, value_name = "NAME=WEIGHT")]
    users: Vec<(String, f64)>,
    /// The --user names may be new here (not yet signed in, no work): set them anyway.
    #[arg(long, requires = "users")]
    new_users: bool,
}

fn parse_user_share(s: &str) -> Result<(String, f64), crate::args::ArgError> {
    let (k, v) = s.split_once('=').ok_or_else(|| crate::args::ArgError::expected("NAME=SHARE", s))?;
    let v: f64 = v.parse().map_err(|_| crate::args::ArgError::expected("NAME=SHARE with a number", s))?;
    Ok((k.to_string(), v))
}

#[derive(clap::Args)]
pub struct RenameArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// The account's path now.
    path: String,
    /// Its new path (same parent), e.g. org/llm/pretrain-v2.
    to: String,
}

#[derive(clap::Args)]
pub struct CloseArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// The account's path.
    path: String,
    /// Also cancel its pending work and stop its running work after grace (ACC-3).
    #[arg(long)]
    stop: bool,
}

#[derive(clap::Args)]
pub struct PathArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// The account's path.
    path: String,
}

#[derive(clap::Args)]
pub struct ExportArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// Write to this file (default: standard output).
    #[arg(long, short, value_name = "FILE")]
    output: Option<std::path::PathBuf>,
}

#[derive(clap::Args)]
pub struct ImportArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// A TOML file with `[[accounts]]` entries (an export, or a config).
    file: std::path::PathBuf,
    /// Only print what would change.
    #[arg(long)]
    dry_run: bool,
}

/// The client of `--server`, else `ALLOT_SERVER`, else the client config
/// file, else the default; its errors say which and how to set another.
pub(crate) fn client(o: &ClientOpts) -> Result<Client> {
    Ok(Client::from_env(o.server.as_deref())?)
}

fn print_json<T: Serialize>(v: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// Prints `v` as JSON (exactly), or the text rendering with what users
/// wrote escaped for a terminal (`client::terminal`): the one place text
/// answers are printed.
pub(crate) fn output<T: Serialize + DeserializeOwned>(
    json: bool,
    v: &T,
    text: impl FnOnce(&T) -> String,
) -> Result<()> {
    if json {
        print_json(v)
    } else {
        print!("{}", terminal::text(v, text));
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
                time_limit_s: a.time,
                checkpoint_on_signal: a.checkpoint_on_signal.then_some(true),
                retries: a.retries,
                name: a.name,
                // An image's working directory is the container's: only
                // one asked for, never this host's current directory.
                workdir: match (&a.image, a.chdir.as_deref()) {
                    (Some(_), None) => None,
                    (Some(_), Some(d)) => Some(d.display().to_string()),
                    (None, dir) => Some(crate::workdir::for_submission(dir)?),
                },
                image: a.image,
                namespace: a.namespace,
                array: a.array,
                dependency: a.dependency,
                hold: a.hold.then_some(true),
                ..Default::default()
            };
            let w = client(&a.opts)?.submit(&req).await.context("failed to submit")?;
            if let Some(arr) = w.array.as_ref().filter(|_| !a.opts.json) {
                eprintln!(
                    "array {id}: {n} elements, {id}_{first} …; allot queue --array {id}",
                    id = arr.id,
                    n = arr.count,
                    first = arr.index
                );
            }
            output(a.opts.json, &w, |w| format!("{}\n", w.array.as_ref().map_or(&w.id, |arr| &arr.id)))
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
            if let Some(n) = a.name {
                q.push(("name", n));
            }
            if let Some(arr) = a.array {
                q.push(("array", arr));
            }
            if !a.all {
                q.push(("state", a.state.unwrap_or_else(|| "pending,running,stopping".into())));
            }
            let c = client(&a.opts)?;
            let mut shown = 0u64;
            loop {
                let mut ws = c.workloads(&q).await.context("failed to list workloads")?;
                ws.reverse(); // oldest first
                let Some(every) = a.watch else {
                    return output(a.opts.json, &ws, |ws| {
                        listing(ws, a.format.as_ref().map(|c| c.0.as_slice()), a.long, render::queue)
                    });
                };
                watch_frame(a.opts.json, &ws, |ws| {
                    listing(ws, a.format.as_ref().map(|c| c.0.as_slice()), a.long, render::queue)
                })?;
                shown += 1;
                if a.count.is_some_and(|n| shown >= n) {
                    return Ok(());
                }
                tokio::time::sleep(std::time::Duration::from_secs_f64(every.max(0.2))).await;
            }
        }
        ClientCommand::History(a) => {
            let mut q = vec![("limit", a.limit.to_string())];
            for (k, v) in [("account", a.account), ("user", a.user), ("name", a.name), ("array", a.array)] {
                if let Some(v) = v {
                    q.push((k, v));
                }
            }
            q.push(("state", a.state.unwrap_or_else(|| "finished,failed,cancelled,rejected".into())));
            let ws = client(&a.opts)?.workloads(&q).await.context("failed to list workloads")?;
            output(a.opts.json, &ws, |ws| {
                listing(ws, a.format.as_ref().map(|c| c.0.as_slice()), a.long, render::history)
            })
        }
        ClientCommand::Show(a) => {
            let d = client(&a.opts)?.workload(&a.id).await.with_context(|| format!("failed to show {}", a.id))?;
            output(a.opts.json, &d, render::show)
        }
        ClientCommand::Cancel(a) => bulk(a, "cancel").await,
        ClientCommand::Hold(a) => bulk(a, "hold").await,
        ClientCommand::Release(a) => bulk(a, "release").await,
        ClientCommand::Logs(a) => logs(a).await,
        ClientCommand::Accounts(AccountsArgs { opts, command: None }) => {
            let list = client(&opts)?.accounts().await.context("failed to list accounts")?;
            output(opts.json, &list, |l| render::accounts(l))
        }
        ClientCommand::Accounts(AccountsArgs { command: Some(c), .. }) => accounts_command(c).await,
        ClientCommand::Budget(BudgetCommand::Set(a)) => set_account(a, AccountField::Budget).await,
        ClientCommand::Budget(BudgetCommand::Report(a)) => {
            let q = [("period", a.period.clone())];
            let s = client(&a.opts)?.budget_report(&q).await.context("failed to get the budget report")?;
            let format = if a.opts.json { allot_core::statement::Format::Json } else { a.format };
            print!("{}", crate::cmd_sim::render_statement(&s, format)?);
            Ok(())
        }
        ClientCommand::Share(SetCommand::Set(a)) => set_account(a, AccountField::Share).await,
        ClientCommand::Impact(SetCommand::Set(a)) => set_account(a, AccountField::Impact).await,
        ClientCommand::Nodes(a) => {
            let q: Vec<(&str, String)> = a.cluster.into_iter().map(|c| ("cluster", c)).collect();
            let list = client(&a.opts)?.nodes(&q).await.context("failed to list nodes")?;
            output(a.opts.json, &list, |l| render::nodes(l))
        }
    }
}

/// `--format`'s columns.
#[derive(Clone, Debug)]
pub struct Columns(Vec<Col>);

fn parse_columns(s: &str) -> Result<Columns, String> {
    Col::parse_list(s).map(Columns)
}

/// A workload listing: `--format`'s columns, or the command's own table.
fn listing(
    ws: &[allot_server::views::WorkloadView],
    format: Option<&[Col]>,
    long: bool,
    table: fn(&[allot_server::views::WorkloadView], i64, bool) -> String,
) -> String {
    match format {
        Some(cols) => allot_server::client::columns::table(ws, now(), cols, long),
        None => table(ws, now(), long),
    }
}

/// One refresh of `allot queue --watch`: on a terminal the screen is
/// redrawn in place; otherwise each table follows the last, after a line
/// with the time.
fn watch_frame<T: Serialize + DeserializeOwned>(json: bool, v: &T, text: impl FnOnce(&T) -> String) -> Result<()> {
    use std::io::{IsTerminal, Write};
    let body = if json { serde_json::to_string(v)? + "\n" } else { terminal::text(v, text) };
    let mut out = std::io::stdout().lock();
    if out.is_terminal() {
        write!(out, "\x1b[H\x1b[2J{body}")?;
    } else {
        write!(out, "--- {}\n{body}", render_time(now()))?;
    }
    out.flush()?;
    Ok(())
}

/// Unix seconds as the time of day (UTC).
fn render_time(t: i64) -> String {
    let s = t.rem_euclid(86_400);
    format!("{:02}:{:02}:{:02} UTC", s / 3600, s % 3600 / 60, s % 60)
}

/// Some workloads of a change were refused (the server said why for each).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PartlyRefused(String);

/// `allot cancel|hold|release`: what became of each workload named; an
/// error (exit 4) when any was refused. A cancel of one id alone is the
/// API's cancel of it (its answer, and its refusal's exit code).
async fn bulk(a: BulkArgs, action: &str) -> Result<()> {
    let filtered = a.user.is_some() || a.state.is_some() || a.name.is_some() || a.account.is_some();
    if a.ids.is_empty() && !filtered {
        anyhow::bail!(
            "name the workloads to {action}: allot {action} ID [ID…], or select them with --user, --state, --name or --account"
        );
    }
    if action == "cancel" && a.ids.len() == 1 && !filtered {
        // One workload (or one array): the API's own answer and status,
        // so a refusal exits as what it is (docs/cli.md).
        let id = &a.ids[0];
        let w = client(&a.opts)?.cancel(id).await.with_context(|| format!("failed to cancel {id}"))?;
        return output(a.opts.json, &w, |w| format!("{id} {}\n", w.state));
    }
    let req =
        allot_server::views::BulkRequest { ids: a.ids, user: a.user, state: a.state, name: a.name, account: a.account };
    let results = client(&a.opts)?.bulk(action, &req).await.with_context(|| format!("failed to {action}"))?;
    if a.opts.json {
        print_json(&results)?;
    } else {
        for r in &results {
            match (&r.state, &r.error) {
                (Some(s), _) => println!("{}", terminal::line(&format!("{} {s}", r.id))),
                (None, Some(e)) => eprintln!("{}", terminal::line(&format!("{}: {e}", r.id))),
                (None, None) => {}
            }
        }
    }
    let refused = results.iter().filter(|r| r.error.is_some()).count();
    if results.is_empty() {
        eprintln!("nothing to {action}: no workload matches");
    }
    if refused > 0 {
        let done = match action {
            "cancel" => "cancelled",
            "hold" => "held",
            _ => "released",
        };
        return Err(PartlyRefused(format!(
            "{refused} of {} could not be {done}",
            allot_core::words::count(results.len() as u64, "workload")
        ))
        .into());
    }
    Ok(())
}

/// Prints an attempt's log, following it with `--follow` until the attempt
/// ends; when following, an attempt that has not started yet is waited for
/// while the workload lives.
async fn logs(a: LogsArgs) -> Result<()> {
    use std::io::Write;
    let c = client(&a.opts)?;
    let mut offset = 0;
    loop {
        let chunk = c.log_chunk(&a.id, a.attempt, offset).await;
        let (bytes, next, done) = match chunk {
            Err(e) if a.follow && offset == 0 && e.status().is_some_and(|s| s.as_u16() == 404) => {
                // Not started yet (or that attempt not yet): wait while the
                // workload lives; `show` names a workload the caller cannot see.
                let w = c.workload(&a.id).await.with_context(|| format!("failed to read the log of {}", a.id))?;
                if matches!(w.workload.state.as_str(), "finished" | "failed" | "cancelled" | "rejected") {
                    return Err(e).with_context(|| format!("failed to read the log of {}", a.id));
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
            r => r.with_context(|| format!("failed to read the log of {}", a.id))?,
        };
        let mut out = std::io::stdout().lock();
        out.write_all(&bytes).context("failed to write the log")?;
        out.flush().context("failed to write the log")?;
        offset = next;
        if !a.follow || done {
            return Ok(());
        }
        if bytes.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }
}

async fn set_account(a: SetArgs, field: AccountField) -> Result<()> {
    let value = crate::args::account_value(field, &a.value).with_context(|| format!("VALUE for {}", a.path))?;
    let mut change = AccountChange::default();
    let what = match (&a.user, field) {
        (Some(u), AccountField::Share) => {
            change.users.insert(u.clone(), value);
            format!("share of {u} in")
        }
        (Some(u), AccountField::Budget) => {
            change.user_budgets.insert(u.clone(), value);
            format!("budget of {u} in")
        }
        (Some(_), AccountField::Impact) => {
            anyhow::bail!("--user goes with allot share set (FS-2) or allot budget set (BUD-6), not impact")
        }
        (None, AccountField::Budget) => {
            change.budget_gpu_hours = Some(value);
            "budget of".into()
        }
        (None, AccountField::Share) => {
            change.share = Some(value);
            "share of".into()
        }
        (None, AccountField::Impact) => {
            change.impact = Some(value);
            "impact of".into()
        }
    };
    let c = client(&a.opts)?;
    // What it was, to say what changed (the PATCH reports any error).
    let before = c.account(&a.path).await.ok();
    let v = c
        .change_account(&a.path, &change, a.new_user)
        .await
        .with_context(|| format!("failed to set the {what} {}", a.path))?;
    if !a.opts.json
        && let Some(before) = &before
    {
        let (was, now) = (account_value(before, field, a.user.as_deref()), account_value(&v, field, a.user.as_deref()));
        println!("{what} {}: {was} → {now}", v.path);
    }
    print_account(a.opts.json, &v)
}

/// An account's value of `field` (a user's, with `user`) in words.
fn account_value(v: &AccountView, field: AccountField, user: Option<&str>) -> String {
    let num = |x: f64| format!("{}", (x * 1000.0).round() / 1000.0);
    match (field, user) {
        (AccountField::Share, Some(u)) => v.users.get(u).map_or_else(|| "1 (the default)".into(), |x| num(*x)),
        (AccountField::Budget, Some(u)) => {
            v.user_budgets.get(u).map_or_else(|| "no budget of their own".into(), |x| format!("{} GPU-hours", num(*x)))
        }
        (AccountField::Share, None) => num(v.share),
        (AccountField::Budget, None) => {
            v.budget_gpu_hours.map_or_else(|| "no budget".into(), |x| format!("{} GPU-hours", num(x)))
        }
        (AccountField::Impact, _) => num(v.impact),
    }
}

fn print_account(json: bool, v: &AccountView) -> Result<()> {
    output(json, v, |v| render::accounts(std::slice::from_ref(v)))
}

/// One `PATCH` of an account, printed; `what` says it in the error.
async fn change_one(opts: &ClientOpts, path: &str, change: &AccountChange, what: &str) -> Result<()> {
    let v = client(opts)?.change_account(path, change, false).await.with_context(|| format!("failed to {what}"))?;
    print_account(opts.json, &v)
}

/// The `[[accounts]]` file of `allot accounts export` / `import`.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AccountsFile {
    accounts: Vec<AccountDecl>,
}

/// The `[[accounts]]` of a TOML file (an export, or a whole config whose
/// other tables are left alone).
fn read_accounts_file(path: &std::path::Path) -> Result<Vec<AccountDecl>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let doc: toml::Table = text.parse().with_context(|| format!("{} is not TOML", path.display()))?;
    let mut accounts = doc.get("accounts").cloned().unwrap_or(toml::Value::Array(Vec::new()));
    // A config writes `share = 2`: whole numbers are numbers too.
    for a in accounts.as_array_mut().into_iter().flatten().filter_map(toml::Value::as_table_mut) {
        let float = |v: &mut toml::Value| {
            if let Some(i) = v.as_integer() {
                *v = toml::Value::Float(i as f64);
            }
        };
        if let Some(users) = a.get_mut("users").and_then(toml::Value::as_table_mut) {
            users.iter_mut().for_each(|(_, v)| float(v));
        }
        for k in ["share", "budget_gpu_hours", "impact"] {
            a.get_mut(k).map(float);
        }
    }
    let file: AccountsFile = toml::Value::Table(toml::Table::from_iter([("accounts".to_string(), accounts)]))
        .try_into()
        .with_context(|| format!("{}: [[accounts]] does not read", path.display()))?;
    if file.accounts.is_empty() {
        anyhow::bail!("{}: no [[accounts]] entries", path.display());
    }
    Ok(file.accounts)
}

async fn accounts_command(c: AccountsCommand) -> Result<()> {
    match c {
        AccountsCommand::Create(a) => {
            let decl = AccountDecl {
                path: a.path.clone(),
                share: a.share,
                budget_gpu_hours: a.budget,
                impact: a.impact,
                users: a.users.into_iter().collect(),
                ..Default::default()
            };
            let v = client(&a.opts)?
                .create_account(&decl, a.new_users)
                .await
                .with_context(|| format!("failed to create {}", a.path))?;
            print_account(a.opts.json, &v)
        }
        AccountsCommand::Rename(a) => {
            let change = AccountChange { rename_to: Some(a.to.clone()), ..Default::default() };
            change_one(&a.opts, &a.path, &change, &format!("rename {} to {}", a.path, a.to)).await
        }
        AccountsCommand::Close(a) => {
            let change = AccountChange { closed: Some(true), stop: a.stop, ..Default::default() };
            change_one(&a.opts, &a.path, &change, &format!("close {}", a.path)).await
        }
        AccountsCommand::Reopen(a) => {
            let change = AccountChange { closed: Some(false), ..Default::default() };
            change_one(&a.opts, &a.path, &change, &format!("reopen {}", a.path)).await
        }
        AccountsCommand::Export(a) => {
            let tree = client(&a.opts)?.account_tree().await.context("failed to export the account tree")?;
            if a.opts.json {
                return print_json(&tree);
            }
            let text = toml::to_string(&AccountsFile { accounts: tree.accounts }).context("cannot write TOML")?;
            match a.output {
                Some(p) => std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display())),
                None => {
                    print!("{text}");
                    Ok(())
                }
            }
        }
        AccountsCommand::Import(a) => {
            let accounts = read_accounts_file(&a.file)?;
            let req = AccountTreeImport { accounts, dry_run: a.dry_run };
            let out = client(&a.opts)?
                .import_accounts(&req)
                .await
                .with_context(|| format!("failed to import {}", a.file.display()))?;
            output(a.opts.json, &out, |o| {
                let head = if o.changes.is_empty() {
                    "nothing to change\n".to_string()
                } else if o.applied {
                    format!("{} changes made:\n", o.changes.len())
                } else {
                    format!("{} changes would be made (dry run):\n", o.changes.len())
                };
                o.changes.iter().fold(head, |mut s, c| {
                    s.push_str("  ");
                    s.push_str(c);
                    s.push('\n');
                    s
                })
            })
        }
    }
}
