//! Assembling and running the server: config, store, recovery, the
//! scheduler task, the executor and the HTTP listener.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use allot_core::PolicyKind;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::api::{AppState, Limits, router};
use crate::auth::Authenticator;
use crate::executor::fleet::FleetExecutor;
use crate::executor::inventory::{self, DeviceMap, GpuInventory};
use crate::executor::kubernetes::{self, KubeExecutor, KubeOptions};
use crate::executor::local::LocalExecutor;
use crate::executor::slurm::{self, SlurmExecutor, SlurmOptions};
use crate::executor::{ExecEvent, Executor, NullExecutor};
use crate::listener::{EdgeError, EdgeOptions};
use crate::metrics::Metrics;
use crate::recovery::{RecoveryError, recover};
use crate::scheduler::{Paths, Scheduler};
use crate::store::lease::{self, FileLock, LeaseConfig, LeaseHolder, Takeover};
use crate::store::{Backend, Store, StoreError};
use crate::submission::Catalog;

/// Which executor runs the workloads.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ExecutorKind {
    /// Child process groups on this host.
    Local,
    /// Nothing runs: decisions are made and recorded only.
    None,
    /// A Slurm cluster runs what Allot decides.
    Slurm,
    /// A Kubernetes cluster runs its managed Jobs as Allot decides (only
    /// from a cluster's `[clusters.executor]`: it needs the API server's
    /// address and credentials).
    Kubernetes,
}

impl ExecutorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutorKind::Local => "local",
            ExecutorKind::None => "none",
            ExecutorKind::Slurm => "slurm",
            ExecutorKind::Kubernetes => "kubernetes",
        }
    }

    pub fn parse(s: &str) -> Option<ExecutorKind> {
        match s {
            "local" => Some(ExecutorKind::Local),
            "none" => Some(ExecutorKind::None),
            "slurm" => Some(ExecutorKind::Slurm),
            "kubernetes" => Some(ExecutorKind::Kubernetes),
            _ => None,
        }
    }
}

/// `allot serve` options.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub config: PathBuf,
    /// `sqlite://PATH` or `postgres://…`.
    pub db: String,
    pub listen: SocketAddr,
    pub executor: ExecutorKind,
    /// Policy name (default `allot`).
    pub policy: String,
    /// Logs and checkpoint directories of attempts.
    pub data_dir: PathBuf,
    /// Where the GPU inventory comes from (local executor).
    pub gpu_inventory: GpuInventory,
    /// Partition and sbatch options (Slurm executor), the default of every
    /// cluster without `[clusters.executor]` settings; its outage threshold
    /// is every Slurm cluster's.
    pub slurm: SlurmOptions,
    /// Wait for the store's lease instead of refusing to start while
    /// another server holds it.
    pub standby: bool,
    /// Lease timing.
    pub lease: LeaseConfig,
    /// Local executor: run without cgroups where none can be made
    /// (`--allow-uncontained`; see `executor::local`).
    pub allow_uncontained: bool,
    /// Every workload runs as the server's own user, whoever submitted it
    /// (`--single-user`: one person's machine, or a test); otherwise each
    /// runs as its submitter's Unix user (ID-1).
    pub single_user: bool,
    /// Connection, timeout and in-flight limits of the HTTP listener.
    pub edge: EdgeOptions,
    /// When the run is snapshotted and how much of the journal is kept.
    pub snapshots: crate::scheduler::Snapshots,
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Config(#[from] allot_trace::error::FormatError),
    #[error("unknown policy {0:?} (known: {1})")]
    Policy(String, String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Recovery(#[from] RecoveryError),
    #[error("cannot listen on {addr}: {source}{}", listen_hint(source))]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error("cannot create the data directory {path}: {source}")]
    DataDir { path: PathBuf, source: std::io::Error },
    #[error("single sign-on cannot be set up: {0}")]
    Sso(String),
    #[error("the http server failed: {0}")]
    Http(std::io::Error),
    #[error("the scheduler task failed: {0}")]
    Scheduler(String),
    #[error(transparent)]
    Inventory(#[from] crate::executor::inventory::InventoryError),
    #[error(transparent)]
    Slurm(#[from] crate::executor::slurm::SlurmError),
    #[error(
        "another server is serving this store: {0}. Stop it first, or start this one with --standby to take over \
         when it stops"
    )]
    Held(String),
    #[error("cannot lock {path}: {source}")]
    Lock { path: PathBuf, source: std::io::Error },
    #[error("stopped serving: {0}")]
    Lease(StoreError),
    #[error(
        "the local executor cannot contain workloads: {0}; run as a user that may create cgroups, \
         or pass --allow-uncontained to accept that a workload's processes can escape stop, kill and restart"
    )]
    Containment(#[source] crate::executor::cgroup::CgroupError),
    #[error(transparent)]
    Edge(#[from] EdgeError),
    #[error("{0}")]
    Executor(String),
}

/// A started server.
pub struct Running {
    pub addr: SocketAddr,
    shutdown: oneshot::Sender<()>,
    http: JoinHandle<Result<(), std::io::Error>>,
    scheduler: JoinHandle<Result<(), StoreError>>,
    lease: JoinHandle<StoreError>,
    store: Store,
    /// Weak: the scheduler ends when the API's last sender is gone.
    app: std::sync::Weak<AppState>,
    /// SQLite: the kernel lock behind the lease, held until the process ends.
    _lock: Option<FileLock>,
}

impl Running {
    /// Stops accepting requests and waits for the scheduler to commit.
    /// Running workloads are left alone; the next start deals with them.
    pub async fn stop(self) -> Result<(), ServerError> {
        let _ = self.shutdown.send(());
        self.http.await.map_err(|e| ServerError::Scheduler(e.to_string()))?.map_err(ServerError::Http)?;
        self.scheduler.await.map_err(|e| ServerError::Scheduler(e.to_string()))??;
        say_what_runs_on(&self.store).await;
        self.lease.abort();
        if let Err(e) = self.store.release_lease().await {
            tracing::warn!(error = %e, "could not release the lease; a standby takes over when it expires");
        }
        Ok(())
    }

    /// CFG-1: reads the config again and applies what changed
    /// (`crate::api::reload`), as `by`.
    pub async fn reload(&self, by: &str) -> Result<crate::api::reload::Reloaded, crate::api::reload::ReloadError> {
        let app = self.app.upgrade().ok_or(crate::api::reload::ReloadError::Stopped)?;
        app.reload.reload(&app, by).await
    }

    /// Waits until the scheduler or the listener ends (a fatal error).
    pub async fn wait(&mut self) -> Result<(), ServerError> {
        tokio::select! {
            r = &mut self.http => r.map_err(|e| ServerError::Scheduler(e.to_string()))?.map_err(ServerError::Http),
            r = &mut self.scheduler => Ok(r.map_err(|e| ServerError::Scheduler(e.to_string()))??),
            r = &mut self.lease => Err(ServerError::Lease(r.map_err(|e| ServerError::Scheduler(e.to_string()))?)),
        }
    }
}

pub fn policy_kind(name: &str) -> Result<PolicyKind, ServerError> {
    PolicyKind::parse(name).ok_or_else(|| {
        let known: Vec<&str> = PolicyKind::ALL.iter().map(|k| k.as_str()).collect();
        ServerError::Policy(name.to_string(), known.join(", "))
    })
}

/// What to do when the listening address cannot be had.
fn listen_hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => {
            " (another process listens there: stop it, or give this server another address with --listen \
             HOST:PORT)"
        }
        std::io::ErrorKind::PermissionDenied => " (ports below 1024 need root: choose another with --listen HOST:PORT)",
        std::io::ErrorKind::AddrNotAvailable => {
            " (no interface of this host has that address: choose one with --listen HOST:PORT)"
        }
        _ => "",
    }
}

/// The data directory, made if missing and absolute from then on (the
/// paths workloads are given never depend on where they start), with its
/// `logs` and `checkpoints` directories: mode 0711, so that a workload's
/// user reaches its own directories inside but lists nobody's.
fn data_dir(dir: &std::path::Path) -> Result<PathBuf, ServerError> {
    use std::os::unix::fs::PermissionsExt;
    let fail = |source| ServerError::DataDir { path: dir.to_path_buf(), source };
    std::fs::create_dir_all(dir).map_err(fail)?;
    let dir = std::path::absolute(dir).map_err(fail)?;
    for d in [dir.clone(), dir.join("logs"), dir.join("checkpoints")] {
        std::fs::create_dir_all(&d).map_err(fail)?;
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o711)).map_err(fail)?;
    }
    Ok(dir)
}

/// Says at start whose identity workloads run as, loudly when that is
/// root's.
fn warn_run_policy(run: &crate::identity::RunPolicy) {
    match (run.single_user, run.server_uid) {
        (true, 0) => tracing::warn!(
            "--single-user as root: every workload runs as root, whoever submitted it; any token that may submit \
             is a root shell on this host"
        ),
        (true, _) => {
            tracing::info!(user = %run.server_user, "--single-user: every workload runs as the server's own user")
        }
        (false, 0) => tracing::info!(min_uid = run.min_uid, "workloads run as their submitters' Unix users (ID-1)"),
        (false, _) => tracing::warn!(
            user = %run.server_user,
            "not root: only work submitted as {} can run (workloads run as their submitters' Unix users, ID-1); run \
             as root, or with --single-user on a machine of one person",
            run.server_user
        ),
    }
}

/// Loads, recovers and starts everything; returns once it listens.
pub async fn start(opts: &ServeOptions) -> Result<Running, ServerError> {
    let mut cfg = allot_trace::config::load_config(&opts.config)?;
    let reloader = Arc::new(crate::api::reload::Reloader::new(opts.config.clone(), cfg.clone()));
    let kind = policy_kind(&opts.policy)?;
    let max_connections = crate::listener::check(&opts.edge)?;
    // The address first: a port in use stops the server before it asks an
    // executor anything or makes its data directory or store (bound again below, once recovered).
    drop(std::net::TcpListener::bind(opts.listen).map_err(|source| ServerError::Listen { addr: opts.listen, source })?);
    let plans = executor_plans(&cfg, opts)?;
    let devices = prepare(&mut cfg.cluster, &plans, opts).await?;
    let data_dir = data_dir(&opts.data_dir)?;
    let opts = &ServeOptions { data_dir, ..opts.clone() };
    let run = crate::identity::RunPolicy::new(opts.single_user, cfg.identity.min_uid);
    warn_run_policy(&run);
    // The lease first: a second server stops here, before anything is touched.
    let lock = lock_sqlite(opts).await?;
    let (store, instance) = crate::store::instance::open_for_serve(&opts.db, &opts.data_dir).await?;
    take_lease(&store, opts, lock.is_some()).await?;
    let metrics = Arc::new(Metrics::new());
    let (ev_tx, ev_rx) = mpsc::unbounded_channel();
    let local = clusters_run_by(&plans, ExecutorKind::Local);
    let jobs_only = clusters_run_by(&plans, ExecutorKind::Kubernetes);
    let host = Host { instance: &instance, min_uid: cfg.identity.min_uid, fence: store.fence.clone() };
    let (exec, exec_name, kubes) = build_executors(&cfg.cluster, plans, devices, &host, opts, ev_tx)?;
    match cfg.telemetry.interval_s {
        Some(every) => exec.start_telemetry(std::time::Duration::from_secs(every)),
        None => tracing::info!("GPU telemetry is off ([telemetry] interval = \"off\")"),
    }
    let now = crate::clock::now();
    let mut policy = kind.build();
    let rec = recover(&cfg, &store, exec.as_ref(), &run, &mut *policy, now).await?;
    metrics.restore(&rec.history.0, &rec.history.1);
    let catalog = Catalog::with_clusters(rec.engine.admission_view(), kind, local, jobs_only);
    let paths = Paths { data_dir: opts.data_dir.clone() };
    // L-5: carried on from the journal's replay, under the replayed policy.
    let (policy, carried) = match rec.carried {
        Some(crate::recovery::Carried { policy, lives, inputs, end, adopted }) => {
            (policy, Some((lives, inputs, end, adopted)))
        }
        None => (policy, None),
    };
    let mut sched = Scheduler::new(rec.engine, policy, store.clone(), exec, metrics.clone(), paths, rec.book);
    sched.catalog = Some(catalog.clone());
    sched.webhook = webhook(&cfg)?;
    sched.telemetry = crate::scheduler::Telemetry::new(cfg.telemetry);
    sched.snapshots = opts.snapshots;
    let recovered = rec.workloads.len();
    let mut adopted = rec.adopted.len();
    if let Some((lives, inputs, end, taken)) = carried {
        // L-5: the engine holds the run's workloads; the lost attempts end,
        // and a contract edited meanwhile applies (CFG-1).
        sched.carry_on(lives, inputs, end);
        adopted += taken;
    }
    // The adopted first: waiting workloads may depend on them (DEP-1).
    for a in rec.adopted {
        sched.adopt(a, now);
    }
    for (spec, live, retries, past) in rec.workloads {
        sched.restore(spec, live, retries, &past, now);
    }
    sched.node_reasons = rec.node_reasons;
    sched.resume_after_outages(now);
    tracing::info!(
        policy = kind.as_str(),
        store = store.backend.as_str(),
        executor = exec_name.as_str(),
        pending = recovered,
        adopted,
        closed_attempts = rec.closed_attempts,
        "recovered"
    );
    let (tx, rx) = mpsc::channel(4096);
    // Weak: the watcher must not keep the scheduler's channel open (the
    // scheduler ends when every API sender is gone).
    let app_tx = tx.downgrade();
    let limits = Arc::new(
        Limits::new(opts.edge.body_timeout, opts.edge.request_timeout, opts.edge.max_in_flight).with_api(cfg.api),
    );
    let socket_path = crate::peercred::socket_path(&opts.data_dir);
    let login_socket = match crate::peercred::bind(&socket_path) {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::warn!(path = %socket_path.display(), error = %e, "no login socket: people on this host sign in with munge");
            None
        }
    };
    let sso = match &cfg.identity.oidc {
        Some(o) => Some(Arc::new(crate::oidc::Sso::new(o).map_err(ServerError::Sso)?)),
        None => None,
    };
    if let Some(sso) = sso.clone() {
        // At start, without holding it up: a provider down now is asked
        // again at the first sign-in.
        tokio::spawn(async move { sso.discover().await.map(|_| ()) });
    }
    let app = Arc::new(AppState {
        store: store.clone(),
        auth: Authenticator::with_identity(store.clone(), cfg.identity.clone()),
        catalog,
        tx,
        metrics,
        limits,
        kube: kubes.clone(),
        run,
        instance: instance.clone(),
        seen: Default::default(),
        login_socket: login_socket.as_ref().map(|_| socket_path.clone()),
        sso,
        reload: reloader,
    });
    let weak_app = Arc::downgrade(&app);
    if let Some(l) = login_socket {
        tokio::spawn(crate::peercred::serve(Arc::downgrade(&app), l));
    }
    for k in &kubes {
        k.serve(Arc::new(crate::api::kubernetes::ApiFront { app: app.clone(), cluster: k.cluster().to_string() }));
    }
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|source| ServerError::Listen { addr: opts.listen, source })?;
    let addr = listener.local_addr().map_err(|source| ServerError::Listen { addr: opts.listen, source })?;
    let host = if addr.ip().is_unspecified() { std::net::Ipv4Addr::LOCALHOST.into() } else { addr.ip() };
    sched.api_url = Some(format!("http://{}", std::net::SocketAddr::new(host, addr.port())));
    tokio::spawn(crate::scheduler::watch_markers(sched.markers.clone(), app_tx));
    let scheduler = tokio::spawn(sched.run(rx, ev_rx));
    let lease = tokio::spawn(lease::keep(store.clone(), opts.lease));
    let (shutdown, stop) = oneshot::channel::<()>();
    let http = tokio::spawn(crate::listener::serve(
        listener,
        router(app, crate::dashboard::routes(), crate::dashboard::fallback),
        opts.edge.clone(),
        max_connections,
        stop,
    ));
    tracing::info!(%addr, "listening");
    Ok(Running { addr, shutdown, http, scheduler, lease, store, app: weak_app, _lock: lock })
}

/// The budget-alert webhook of `[alerts]`, started, if the config has one.
fn webhook(cfg: &allot_trace::config::Config) -> Result<Option<crate::webhook::Webhook>, ServerError> {
    let target = crate::webhook::Target::from_config(&cfg.alerts).map_err(|e| {
        allot_trace::error::FormatError::new(allot_trace::error::FormatKind::Config, cfg.path.clone(), e)
            .in_field("alerts.webhook_url")
    })?;
    Ok(target.map(|t| {
        tracing::info!(url = %t.url, "budget events are posted to the webhook");
        crate::webhook::Webhook::start(t, cfg.cluster.name.clone())
    }))
}

/// The clusters of the fleet that executors of `kind` run.
fn clusters_run_by(plans: &[Plan], kind: ExecutorKind) -> allot_core::cluster::ClusterSet {
    allot_core::cluster::ClusterSet::of(
        plans.iter().enumerate().filter(|(_, p)| p.kind == kind).map(|(i, _)| allot_core::cluster::ClusterId(i as u16)),
    )
}

/// How one cluster of the fleet is run.
#[derive(Clone, Debug)]
struct Plan {
    kind: ExecutorKind,
    slurm: SlurmOptions,
    kube: Option<KubeOptions>,
}

/// Each cluster's executor: its `[clusters.executor]` settings, else the
/// command line's `--executor` and `--slurm-*`. In a fleet of several
/// clusters a Slurm cluster's nodes are named `<cluster>/<Slurm node>`.
fn executor_plans(cfg: &allot_trace::config::Config, opts: &ServeOptions) -> Result<Vec<Plan>, ServerError> {
    let fleet = cfg.cluster.is_fleet();
    let plans = cfg
        .cluster
        .clusters
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let named = fleet.then(|| name.clone());
            match cfg.executors.get(i).and_then(Option::as_ref) {
                None if opts.executor == ExecutorKind::Kubernetes => Err(ServerError::Executor(format!(
                    "cluster {name}: the kubernetes executor is set in the cluster's [clusters.executor] \
                     (kind = \"kubernetes\", url, ca_file, token_file), not with --executor"
                ))),
                None => Ok(Plan {
                    kind: opts.executor,
                    slurm: SlurmOptions { cluster: named, min_uid: Some(cfg.identity.min_uid), ..opts.slurm.clone() },
                    kube: None,
                }),
                Some(e) => {
                    let kind = ExecutorKind::parse(&e.kind).ok_or_else(|| {
                        ServerError::Executor(format!("cluster {name}: unknown executor {:?}", e.kind))
                    })?;
                    let slurm = SlurmOptions {
                        partition: e.partition.clone(),
                        sbatch_args: e.sbatch_args.clone(),
                        slurm_conf: e.slurm_conf.as_ref().map(PathBuf::from),
                        cluster: named,
                        outage_after: opts.slurm.outage_after,
                        min_uid: Some(cfg.identity.min_uid),
                    };
                    let kube = (kind == ExecutorKind::Kubernetes)
                        .then(|| KubeOptions::from_config(name, fleet, e, Duration::from_secs(cfg.contract.grace)));
                    Ok(Plan { kind, slurm, kube })
                }
            }
        })
        .collect::<Result<Vec<Plan>, ServerError>>()?;
    if opts.gpu_inventory == GpuInventory::Hardware {
        let single_local = plans.len() == 1 && plans[0].kind == ExecutorKind::Local;
        if !single_local {
            let kinds: Vec<String> =
                cfg.cluster.clusters.iter().zip(&plans).map(|(n, p)| format!("{n}: {}", p.kind.as_str())).collect();
            return Err(ServerError::Executor(format!(
                "--gpu-inventory hardware reads this host's GPUs into the one pool of a single cluster run by the \
                 local executor; this config has {} ({}): use --gpu-inventory config",
                if plans.len() == 1 { "one cluster" } else { "several clusters" },
                kinds.join(", ")
            )));
        }
    }
    Ok(plans)
}

/// The inventory of every cluster: the local executor's GPUs (compared
/// with the host's, or the host's), each Slurm cluster's nodes named after
/// its partition's.
async fn prepare(
    cluster: &mut allot_core::Cluster,
    plans: &[Plan],
    opts: &ServeOptions,
) -> Result<DeviceMap, ServerError> {
    let mut devices = DeviceMap::new();
    if plans.iter().any(|p| p.kind == ExecutorKind::Local) {
        devices = gpu_inventory(cluster, opts.gpu_inventory)?;
    }
    for (i, p) in plans.iter().enumerate().filter(|(_, p)| p.kind == ExecutorKind::Slurm) {
        let nodes = slurm::nodes(&p.slurm).await?;
        slurm::map_nodes(cluster, allot_core::cluster::ClusterId(i as u16), &nodes, &p.slurm)?;
    }
    for (i, p) in plans.iter().enumerate() {
        if let Some(k) = &p.kube {
            let nodes = kubernetes::nodes(k).await.map_err(|e| ServerError::Executor(e.to_string()))?;
            kubernetes::map_nodes(cluster, allot_core::cluster::ClusterId(i as u16), &nodes, k)
                .map_err(|e| ServerError::Executor(e.to_string()))?;
        }
    }
    Ok(devices)
}

/// What every executor of this server shares: the store's instance, the
/// lowest uid a person's work may run as, and the store's lease fence.
struct Host<'a> {
    instance: &'a str,
    min_uid: u32,
    fence: Arc<crate::store::lease::Fence>,
}

/// The fleet's executor, how it is described in logs, and the Kubernetes
/// clusters' executors (each is handed the API's front once it exists).
type Executors = (Arc<dyn Executor>, String, Vec<Arc<KubeExecutor>>);

/// The executors of the fleet's clusters, and how they are described in
/// logs. A fleet of one is its cluster's executor itself; a fleet of
/// several, a [`FleetExecutor`] over one executor per cluster (clusters
/// run by this host's local executor, or by none, share one).
fn build_executors(
    cluster: &allot_core::Cluster,
    plans: Vec<Plan>,
    devices: DeviceMap,
    host: &Host<'_>,
    opts: &ServeOptions,
    events: mpsc::UnboundedSender<ExecEvent>,
) -> Result<Executors, ServerError> {
    let (instance, min_uid, fence) = (host.instance, host.min_uid, &host.fence);
    let one = plans.len() == 1;
    let (tx, from_members) = if one {
        (events.clone(), None)
    } else {
        let (tx, rx) = mpsc::unbounded_channel();
        (tx, Some(rx))
    };
    let described: Vec<String> = if one {
        vec![plans[0].kind.as_str().to_string()]
    } else {
        cluster.clusters.iter().zip(&plans).map(|(n, p)| format!("{n}={}", p.kind.as_str())).collect()
    };
    let mut local: Option<Arc<dyn Executor>> = None;
    let mut none: Option<Arc<dyn Executor>> = None;
    let mut devices = Some(devices);
    let mut members: Vec<Arc<dyn Executor>> = Vec::with_capacity(plans.len());
    let mut kubes = Vec::new();
    for (i, p) in plans.into_iter().enumerate() {
        let name = &cluster.clusters[i];
        let of = allot_core::cluster::ClusterId(i as u16);
        let cluster_nodes = || -> Vec<String> {
            (0..cluster.nodes.len() as u32)
                .map(allot_core::NodeId)
                .filter(|&n| cluster.cluster_of(n) == of)
                .map(|n| cluster.node(n).name.clone())
                .collect()
        };
        let member: Arc<dyn Executor> = match p.kind {
            ExecutorKind::Local => match &local {
                Some(l) => l.clone(),
                None => {
                    let contain = crate::executor::cgroup::for_server(instance, opts.allow_uncontained)
                        .map_err(ServerError::Containment)?;
                    let devices = devices.take().unwrap_or_default();
                    let exec = LocalExecutor::new(tx.clone(), instance, devices, contain).with_min_uid(min_uid);
                    local.insert(Arc::new(exec)).clone()
                }
            },
            ExecutorKind::None => none.get_or_insert_with(|| Arc::new(NullExecutor::new(tx.clone()))).clone(),
            ExecutorKind::Kubernetes => {
                let mut k = p.kube.expect("a kubernetes plan has its options");
                k.store = instance.to_string();
                let pools = cluster.clone();
                let fits: crate::executor::kubernetes::Fits = Box::new(move |gpus, product| {
                    crate::executor::inventory::pool_for(&pools, of, gpus, product).map(|_| ())
                });
                let exec = KubeExecutor::new(tx.clone(), k, cluster_nodes(), fits, fence.clone())
                    .map_err(|e| ServerError::Executor(e.to_string()))?;
                let exec = Arc::new(exec);
                kubes.push(exec.clone());
                exec
            }
            ExecutorKind::Slurm => {
                let nodes = cluster_nodes();
                let dir = if one { opts.data_dir.join("slurm") } else { opts.data_dir.join("slurm").join(name) };
                Arc::new(SlurmExecutor::new(tx.clone(), instance, p.slurm, dir, name, nodes))
            }
        };
        members.push(member);
    }
    let described = described.join(",");
    match from_members {
        None => Ok((members.pop().expect("one cluster"), described, kubes)),
        Some(rx) => Ok((Arc::new(FleetExecutor::new(cluster, members, rx, events)), described, kubes)),
    }
}

/// SQLite: the lock on `<db>.lock` (the holder is alive while it is held),
/// waited for with `--standby`, else a held lock refuses the start naming
/// the holder. None for PostgreSQL.
async fn lock_sqlite(opts: &ServeOptions) -> Result<Option<FileLock>, ServerError> {
    // A bad url is reported by the open that follows.
    let Ok((Backend::Sqlite, url)) = crate::store::normalize_url(&opts.db) else {
        return Ok(None);
    };
    let file = crate::store::instance::sqlite_file(&url);
    let path = PathBuf::from(format!("{}.lock", file.display()));
    let mut logged = false;
    loop {
        match FileLock::try_lock(&path) {
            Ok(Some(lock)) => return Ok(Some(lock)),
            Ok(None) => {}
            Err(source) => return Err(ServerError::Lock { path, source }),
        }
        if !opts.standby {
            return Err(ServerError::Held(sqlite_holder(&opts.db, &path).await));
        }
        if !logged {
            let holder = sqlite_holder(&opts.db, &path).await;
            tracing::info!(holder = %holder, "standing by: another server is serving this store");
            logged = true;
        }
        tokio::time::sleep(opts.lease.retry).await;
    }
}

/// Who holds a SQLite store's lock, as its lease row says.
async fn sqlite_holder(db: &str, lock: &std::path::Path) -> String {
    match Store::connect(db, false).await {
        Ok(s) => {
            let row = s.lease().await.map(|r| r.describe());
            s.close().await;
            row.unwrap_or_else(|e| format!("a process holding {} ({e})", lock.display()))
        }
        Err(e) => format!("a process holding {} ({e})", lock.display()),
    }
}

/// Takes the store's lease (SQLite: at once, the file lock says the last
/// holder is gone); with `--standby`, waits until the holder's lease expires.
async fn take_lease(store: &Store, opts: &ServeOptions, locked: bool) -> Result<(), ServerError> {
    let me = LeaseHolder::this_process(&opts.listen.to_string());
    let mut logged = false;
    let mut takeover = if locked { Takeover::Any } else { Takeover::IfExpired };
    loop {
        match store.try_acquire_lease(&me, &opts.lease, takeover).await {
            Ok(Ok(_epoch)) => return Ok(()),
            Ok(Err(row))
                if row.holder.host == me.host
                    && !lease::pid_alive(row.holder.pid)
                    && takeover != Takeover::Epoch(row.epoch) =>
            {
                tracing::info!(holder = %row.describe(), "the lease's holder ran on this host and is gone: taking over");
                takeover = Takeover::Epoch(row.epoch);
                continue;
            }
            Ok(Err(row)) if !opts.standby => return Err(ServerError::Held(row.describe())),
            Ok(Err(row)) => {
                if !logged {
                    tracing::info!(holder = %row.describe(), "standing by: another server is serving this store");
                    logged = true;
                }
            }
            Err(e) if opts.standby && e.is_unavailable() => {
                tracing::warn!(error = %e, "standing by: cannot read the store's lease; trying again");
            }
            Err(e) => return Err(e.into()),
        }
        tokio::time::sleep(opts.lease.retry).await;
    }
}

/// The inventory the local executor hands out: the config's, compared
/// with the hardware's where there is a driver; or the hardware's, which
/// replaces the config's one-node pool.
fn gpu_inventory(cluster: &mut allot_core::Cluster, source: GpuInventory) -> Result<DeviceMap, ServerError> {
    let detected = inventory::detect();
    if let Ok(hw) = &detected {
        tracing::info!(gpus = hw.len(), model = hw[0].name.as_str(), "host GPUs");
    }
    match (source, detected) {
        (GpuInventory::Config, Err(why)) => {
            tracing::info!(why = %crate::executor::with_sources(&why), "the GPU inventory is the config's");
            Ok(DeviceMap::new())
        }
        (GpuInventory::Config, Ok(hw)) => {
            for m in inventory::mismatches(cluster, &hw) {
                tracing::warn!("{m}");
            }
            Ok(DeviceMap::new())
        }
        (GpuInventory::Hardware, Err(why)) => Err(why.into()),
        (GpuInventory::Hardware, Ok(hw)) => {
            let (built, devices) = inventory::from_hardware(cluster, &hw)?;
            tracing::info!(
                pool = built.pools[0].name.as_str(),
                gpus = built.nodes[0].gpus,
                "the GPU inventory is the host's"
            );
            *cluster = built;
            Ok(devices)
        }
    }
}

/// Says, as a stopped server leaves them, how many workloads still run and
/// what becomes of them (issue 30 #13: an operator is told on screen).
async fn say_what_runs_on(store: &Store) {
    let f = crate::store::WorkloadFilter {
        states: vec!["running".into(), "stopping".into()],
        limit: 100_000,
        ..Default::default()
    };
    match store.workloads(&f).await {
        Ok(left) if !left.is_empty() => tracing::warn!(
            running = left.len(),
            "stopped with {} running: they are left as they are (the local executor's processes and \
             the Slurm and Kubernetes jobs keep running); the next allot serve on this store stops and requeues \
             the local and Slurm ones (they resume from their last checkpoint) and adopts the Kubernetes ones. \
             To end them instead, cancel them or drain their nodes before stopping the server",
            allot_core::words::count(left.len() as u64, "workload")
        ),
        Ok(_) => tracing::info!("stopped; no workload was running"),
        Err(e) => tracing::warn!(error = %e, "stopped; could not count the workloads still running"),
    }
}

/// `allot serve`: runs until SIGINT or SIGTERM; SIGHUP reloads the
/// config (CFG-1).
pub async fn serve(opts: &ServeOptions) -> Result<(), ServerError> {
    use tokio::signal::unix::{SignalKind, signal};
    // Before the start: a SIGHUP during recovery is taken once serving.
    let mut hup = signal(SignalKind::hangup()).map_err(ServerError::Http)?;
    let mut running = start(opts).await?;
    let mut term = signal(SignalKind::terminate()).map_err(ServerError::Http)?;
    loop {
        tokio::select! {
            r = running.wait() => return r,
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = hup.recv() => match running.reload("SIGHUP").await {
                Ok(r) => tracing::info!(changes = r.changes.len(), "SIGHUP: the config was reloaded"),
                Err(e) => tracing::error!("SIGHUP: {e}"),
            },
        }
    }
    tracing::info!("shutting down: no new requests; running workloads are left as they are");
    running.stop().await
}
