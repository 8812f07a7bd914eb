//! `allot serve`, the live scheduler. See docs/server.md.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use allot_server::store::LeaseConfig;
use allot_server::{EdgeOptions, ExecutorKind, GpuInventory, ServeOptions, SlurmOptions};
use anyhow::{Context, Result};

use crate::args::ArgError;

fn parse_executor(s: &str) -> Result<ExecutorKind, ArgError> {
    ExecutorKind::parse(s).ok_or_else(|| ArgError::unknown("executor", s, &["local", "slurm", "none"]))
}

fn parse_inventory(s: &str) -> Result<GpuInventory, ArgError> {
    GpuInventory::parse(s).ok_or_else(|| ArgError::unknown("GPU inventory", s, &["config", "hardware"]))
}

/// `500ms`, or whole units as in the config (`15s`, `1m`).
fn parse_time(s: &str) -> Result<std::time::Duration, ArgError> {
    if let Some(ms) = s.strip_suffix("ms") {
        return ms
            .trim()
            .parse()
            .map(std::time::Duration::from_millis)
            .map_err(|_| ArgError::expected("a duration such as 500ms, 15s or 1m", s));
    }
    Ok(allot_trace::duration::parse_duration(s).map(std::time::Duration::from_secs)?)
}

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Cluster, accounts and contract (TOML).
    #[arg(long)]
    config: PathBuf,
    /// Store: sqlite://PATH (created with its tables if missing) or postgres://USER@HOST/DB (its password in
    /// PGPASSWORD or a .pgpass file, not here: `ps` shows the command line).
    #[arg(long, default_value = "sqlite://allot.db")]
    db: String,
    /// Address of the HTTP API.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// local: run workloads on this host, each attempt in a cgroup of its own; slurm: run them as Slurm jobs where Allot places them;
    /// none: decide and record only.
    #[arg(long, value_parser = parse_executor, default_value = "local")]
    executor: ExecutorKind,
    /// Scheduling policy: allot, fifo, fifo-backfill or priority.
    #[arg(long, default_value = "allot")]
    policy: String,
    /// Where attempt logs and checkpoint directories go.
    #[arg(long, default_value = "allot-data")]
    data_dir: PathBuf,
    /// The local executor's GPUs. config: the config's pools (works without GPUs; the hardware, if any, is only
    /// compared); hardware: this host's GPUs as read by nvidia-smi, into the config's single one-node pool.
    #[arg(long, value_parser = parse_inventory, default_value = "config")]
    gpu_inventory: GpuInventory,
    /// Slurm executor: the partition of Allot's nodes (default: Slurm's default partition).
    #[arg(long)]
    slurm_partition: Option<String>,
    /// Slurm executor: one more sbatch option for every node of a job (repeatable), e.g. --slurm-sbatch-arg=--mem-per-gpu=64G.
    #[arg(long = "slurm-sbatch-arg", allow_hyphen_values = true)]
    slurm_sbatch_args: Vec<String>,
    /// Slurm executor: how long a Slurm cluster may be unreachable (every sinfo failing) before it is taken out of
    /// service as a whole and its workloads are requeued elsewhere (FLEET-3); applies to every Slurm cluster of
    /// the config.
    #[arg(long, value_parser = parse_time, default_value = "30s")]
    slurm_outage_after: Duration,
    /// Wait as a hot standby while another server holds the store's lease, and take over (through the normal
    /// recovery) when its lease expires or it stops. Without it, a start on a served store is refused.
    #[arg(long)]
    standby: bool,
    /// How long the lease lasts after each renewal; a standby takes over this long after the active server's last
    /// renewal (measured by the database's clock).
    #[arg(long, value_parser = parse_time, default_value = "15s")]
    lease_duration: std::time::Duration,
    /// The active server stops acting (no launch, signal or kill) once it has not renewed its lease for this
    /// long, and exits; must be below --lease-duration.
    #[arg(long, value_parser = parse_time, default_value = "10s")]
    lease_renew_deadline: std::time::Duration,
    /// How often the lease is renewed, and how often a standby tries to take it; must be below
    /// --lease-renew-deadline.
    #[arg(long, value_parser = parse_time, default_value = "2s")]
    lease_retry: std::time::Duration,
    /// Local executor: start even where no cgroup can be made (an unprivileged server). Workloads then run as
    /// process groups only: a process that leaves its group (setsid) escapes stop and kill, keeps running after
    /// its attempt ended and its GPUs were given to another workload, and a restarted server finds it only by
    /// its ALLOT_TAG environment variable, which it can drop.
    #[arg(long)]
    allow_uncontained: bool,
    /// Run every workload as the server's own user, whoever submitted it: for a machine of one person, or a test.
    /// Without it, each workload runs as its submitter's Unix user (a person signed in with `allot login`, or the
    /// service account a token was made for), which needs a root server. As root, --single-user makes every token
    /// that may submit a root shell.
    #[arg(long)]
    single_user: bool,
    /// Open client connections at most (default: the file descriptor limit less an eighth, at least 256, kept for
    /// the store, logs and workloads; at most 16384). Checked against RLIMIT_NOFILE at start.
    #[arg(long)]
    max_connections: Option<usize>,
    /// Time a client has to send a request head, counted from when the server waits for it (a new connection or an
    /// idle keep-alive one): also the keep-alive idle timeout.
    #[arg(long, value_parser = parse_time, default_value = "10s")]
    header_timeout: Duration,
    /// Time a client has to send a request body.
    #[arg(long, value_parser = parse_time, default_value = "30s")]
    body_timeout: Duration,
    /// Time a request may take from its head to its answer (503 past it).
    #[arg(long, value_parser = parse_time, default_value = "60s")]
    request_timeout: Duration,
    /// Requests handled at once; more are answered 503 with Retry-After at once.
    #[arg(long, default_value_t = 256)]
    max_in_flight: usize,
    /// Snapshot the live run (its engine and policy, exactly) after this many journal entries, in the same
    /// transaction as the step: a restart restores the newest snapshot and replays only the journal after it.
    /// 0: never (a restart replays the whole journal, which is then never compacted).
    #[arg(long, default_value_t = 50_000)]
    snapshot_every: u64,
    /// Snapshots kept: the journal before the oldest of them is deleted, which bounds the store's growth
    /// (`allot db replay` then checks from the oldest snapshot kept).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    snapshots_kept: u32,
    /// Log lines on stderr: text (coloured only on a terminal, and never with NO_COLOR set) or json (one object
    /// per line: timestamp, level, target, fields).
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
}

/// How `allot serve` writes its log.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Whether a store URL holds a password (`postgres://user:secret@host/db`).
fn password_in_url(db: &str) -> bool {
    let Some((_, rest)) = db.split_once("://") else { return false };
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    authority.rsplit_once('@').is_some_and(|(userinfo, _)| userinfo.contains(':'))
}

pub fn run(a: ServeArgs) -> Result<()> {
    // Whatever the server makes (the SQLite store and its journal, logs,
    // directories) is its own unless it says otherwise.
    // SAFETY: umask has no memory-safety preconditions.
    unsafe {
        libc::umask(0o077);
    }
    init_logs(a.log_format);
    if password_in_url(&a.db) {
        eprintln!(
            "warning: --db carries the store's password, which every user of this host sees in `ps`: give it in \
             PGPASSWORD or a .pgpass file (PGPASSFILE) instead (docs/security.md)"
        );
    }
    let lease =
        LeaseConfig { duration: a.lease_duration, renew_deadline: a.lease_renew_deadline, retry: a.lease_retry };
    lease.check().map_err(anyhow::Error::msg)?;
    let opts = ServeOptions {
        config: a.config,
        db: a.db,
        listen: a.listen,
        executor: a.executor,
        policy: a.policy,
        data_dir: a.data_dir,
        gpu_inventory: a.gpu_inventory,
        slurm: SlurmOptions {
            partition: a.slurm_partition,
            sbatch_args: a.slurm_sbatch_args,
            outage_after: Some(a.slurm_outage_after),
            ..SlurmOptions::default()
        },
        standby: a.standby,
        lease,
        allow_uncontained: a.allow_uncontained,
        single_user: a.single_user,
        edge: EdgeOptions {
            max_connections: a.max_connections,
            header_timeout: a.header_timeout,
            body_timeout: a.body_timeout,
            request_timeout: a.request_timeout,
            max_in_flight: a.max_in_flight,
        },
        snapshots: allot_server::scheduler::Snapshots { every: a.snapshot_every, keep: a.snapshots_kept },
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("failed to start the runtime")?;
    rt.block_on(allot_server::serve(&opts)).context("allot serve failed")
}

/// The log on stderr at `ALLOT_LOG` (default `info`): colour only when
/// stderr is a terminal and `NO_COLOR` is unset, so a log written to a file
/// or a journal is plain text.
pub(crate) fn init_logs(format: LogFormat) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("ALLOT_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let fmt = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => fmt.with_ansi(colour).try_init(),
        LogFormat::Json => fmt.json().flatten_event(true).try_init(),
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_password_in_the_store_url_is_seen() {
        for (url, has) in [
            ("postgres://allot:secret@db:5432/allot", true),
            ("postgres://allot@db/allot", false),
            ("postgres://db/allot?user=a", false),
            ("sqlite://allot.db", false),
            ("sqlite:///tmp/a:b@c.db", false),
        ] {
            assert_eq!(super::password_in_url(url), has, "{url}");
        }
    }
}
