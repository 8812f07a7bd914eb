//! The Kubernetes executor: a Kubernetes cluster as a member of the fleet
//! (docs/kubernetes.md).
//!
//! Researchers create ordinary `batch/v1` Jobs labelled
//! `allot.dev/managed=true`. Allot's admission policies (printed by
//! `allot kubernetes manifests`, applied by the cluster's admin) suspend
//! them at creation, record who created them, give their pods Allot's
//! `schedulerName` and the contract's grace, and turn the Job controller's
//! own retries off; only Allot's identity may unsuspend one. This executor
//!
//! * **ingests** each managed Job as a workload, through the same check as
//!   the API's submissions ([`job`]: the Job's shape; [`Front`]: the
//!   check, the store and the scheduler), charging the account its
//!   annotation names if its namespace or its creator may (K8S-2);
//! * **runs** what the engine decides: unsuspends the Job and binds each
//!   pod to exactly the node of the allocation (`pods/binding`, K8S-3);
//!   preempts by suspending it again (the Job controller deletes its pods
//!   with the grace set at creation); reports the Job's end;
//! * follows the cluster's **Nodes**, watched, as node events (K8S-5);
//! * writes each pending Job's reason onto it, as an annotation and an
//!   Event, when it changes (K8S-6).

pub mod job;
pub mod manifests;
mod run;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::sync::{mpsc, oneshot};

use crate::executor::{Adoption, AttemptKey, BoxFuture, ExecEvent, Executor, Launch, Survivor};

pub use job::JobShape;

/// The label that makes a Job (and, by the creation policy, its pods) Allot's.
pub const MANAGED: &str = "allot.dev/managed";
/// The annotation naming the account a Job charges.
pub const ACCOUNT: &str = "allot.dev/account";
/// Optional annotations: class, expected duration, checkpoint interval.
pub const CLASS: &str = "allot.dev/class";
pub const EXPECTED: &str = "allot.dev/expected-duration";
pub const CHECKPOINT: &str = "allot.dev/checkpoint-interval";
/// Written by the creation policy: the user the API server authenticated
/// (for a Job Allot created, K8S-12: the one it names in [`SUBMITTED_BY`]).
pub const USER: &str = "allot.dev/user";
/// Written by Allot on a Job it creates for `allot submit --image`
/// (K8S-12): who submitted it. The creation policy takes it as the Job's
/// user only when Allot's identity created the Job.
pub const SUBMITTED_BY: &str = "allot.dev/submitted-by";
/// Written by Allot: the workload id of the Job, and the store it is a
/// workload of (a Job of another store is not this server's: K8S-1).
pub const WORKLOAD: &str = "allot.dev/workload";
pub const STORE: &str = "allot.dev/store";
/// Written by Allot: the attempt now admitted and its nodes.
pub const ATTEMPT: &str = "allot.dev/attempt";
pub const NODES: &str = "allot.dev/nodes";
/// Written by Allot: why the Job waits, or how it ended (K8S-6).
pub const REASON: &str = "allot.dev/reason";
/// The Job controller's annotation of an Indexed Job's pod.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// The Job controller's label naming a pod's Job.
pub const JOB_NAME: &str = "batch.kubernetes.io/job-name";
/// The field manager of Allot's writes.
pub const MANAGER: &str = "allot";

/// One Kubernetes cluster of the fleet (`[clusters.executor]` with
/// `kind = "kubernetes"`).
#[derive(Clone, Debug, Default)]
pub struct KubeOptions {
    /// The fleet's name of this cluster (Allot's node names are
    /// `<cluster>/<node>` in a fleet of several).
    pub cluster: String,
    pub fleet: bool,
    pub url: String,
    pub ca_file: PathBuf,
    pub token_file: PathBuf,
    pub node_selector: Option<String>,
    /// The label selector of the Jobs this server runs (default
    /// `allot.dev/managed=true`).
    pub job_selector: String,
    /// The store's identity, written on every Job it ingests.
    pub store: String,
    pub gpu_resource: String,
    pub product_label: String,
    pub topology_label: Option<String>,
    pub scheduler_name: String,
    /// Accounts each namespace's Jobs may charge.
    pub namespaces: std::collections::BTreeMap<String, Vec<String>>,
    /// Accounts each user may charge.
    pub users: std::collections::BTreeMap<String, Vec<String>>,
    /// K8S-12: the images each namespace's Jobs made of submissions may run.
    pub images: std::collections::BTreeMap<String, Vec<String>>,
    /// The contract's grace (the creation policy sets it on every pod).
    pub grace: Duration,
}

impl KubeOptions {
    /// The options of cluster `cluster` from its `[clusters.executor]`.
    pub fn from_config(
        cluster: &str,
        fleet: bool,
        e: &allot_trace::config::ExecutorConfig,
        grace: Duration,
    ) -> KubeOptions {
        KubeOptions {
            cluster: cluster.to_string(),
            fleet,
            url: e.url.clone().unwrap_or_default(),
            ca_file: e.ca_file.clone().unwrap_or_default().into(),
            token_file: e.token_file.clone().unwrap_or_default().into(),
            node_selector: e.node_selector.clone().filter(|s| !s.trim().is_empty()),
            job_selector: e.job_selector.clone().unwrap_or_else(|| format!("{MANAGED}=true")),
            store: String::new(),
            gpu_resource: e.gpu_resource.clone().unwrap_or_else(|| "nvidia.com/gpu".into()),
            product_label: e.product_label.clone().unwrap_or_else(|| "nvidia.com/gpu.product".into()),
            topology_label: e.topology_label.clone(),
            scheduler_name: e.scheduler_name.clone().unwrap_or_else(|| "allot".into()),
            namespaces: e.namespaces.clone(),
            users: e.users.clone(),
            images: e.images.clone(),
            grace,
        }
    }

    /// Kubernetes' name of Allot's node `node`.
    pub fn kube_name<'a>(&self, node: &'a str) -> &'a str {
        if !self.fleet {
            return node;
        }
        node.strip_prefix(self.cluster.as_str()).and_then(|r| r.strip_prefix('/')).unwrap_or(node)
    }

    /// Allot's name of the Kubernetes Node `node`.
    pub fn allot_name(&self, node: &str) -> String {
        if self.fleet { format!("{}/{node}", self.cluster) } else { node.to_string() }
    }

    /// A client for exactly this API server, CA and token: never a
    /// kubeconfig or the environment.
    pub fn client(&self) -> Result<Client, KubeError> {
        let url = self.url.parse().map_err(|e| KubeError::Config(format!("url {:?}: {e}", self.url)))?;
        for (what, path) in [("ca_file", &self.ca_file), ("token_file", &self.token_file)] {
            std::fs::metadata(path).map_err(|e| KubeError::Config(format!("{what} {}: {e}", path.display())))?;
        }
        let mut cfg = kube::Config::new(url);
        cfg.root_cert_file = Some(self.ca_file.clone());
        // kube-rs sends a token file's content as it is: one written with a
        // trailing newline (`echo $TOKEN > file`) would be refused by the
        // API server. Such a file is read once, trimmed; a file without
        // surrounding whitespace (a projected service-account token) is
        // re-read as it rotates.
        let token = std::fs::read_to_string(&self.token_file)
            .map_err(|e| KubeError::Config(format!("token_file {}: {e}", self.token_file.display())))?;
        if token.trim().is_empty() {
            return Err(KubeError::Config(format!("token_file {} is empty", self.token_file.display())));
        }
        if token.trim() == token {
            cfg.auth_info.token_file = Some(self.token_file.display().to_string());
        } else {
            tracing::warn!(file = %self.token_file.display(), "the token file has surrounding whitespace: read once, trimmed (it is not re-read)");
            cfg.auth_info.token = Some(token.trim().to_string().into());
        }
        cfg.connect_timeout = Some(Duration::from_secs(10));
        cfg.read_timeout = Some(Duration::from_secs(295));
        Client::try_from(cfg).map_err(|e| KubeError::Api(format!("cannot build a client for {}: {e}", self.url)))
    }

    /// Whether a Job in `namespace`, created by `user`, may charge
    /// `account` (K8S-2): a namespace's or the user's accounts cover it.
    pub fn may_charge(&self, namespace: &str, user: Option<&str>, account: &str) -> bool {
        self.grants(namespace, user).iter().any(|root| crate::auth::within(account, root))
    }

    /// K8S-12: the namespace of a Job Allot creates to charge `account`:
    /// `requested` if its Jobs may charge it, else the namespace whose
    /// covering account is the most specific (ties: the first by name).
    pub fn namespace_for(&self, account: &str, requested: Option<&str>) -> Result<String, String> {
        let covering =
            |ns: &str| self.namespaces.get(ns).is_some_and(|r| r.iter().any(|root| crate::auth::within(account, root)));
        if let Some(ns) = requested {
            if covering(ns) {
                return Ok(ns.to_string());
            }
            let may: Vec<&str> = self.namespaces.keys().map(String::as_str).filter(|n| covering(n)).collect();
            return Err(format!(
                "K8S-12: Jobs of namespace {ns:?} of cluster {} may not charge {account:?} ({})",
                self.cluster,
                if may.is_empty() { "no namespace may".to_string() } else { format!("these may: {}", may.join(", ")) }
            ));
        }
        self.namespaces
            .iter()
            .filter_map(|(ns, roots)| {
                let depth = roots.iter().filter(|r| crate::auth::within(account, r)).map(|r| r.len()).max()?;
                Some((std::cmp::Reverse(depth), ns))
            })
            .min()
            .map(|(_, ns)| ns.clone())
            .ok_or_else(|| {
                format!(
                    "K8S-12: no namespace of cluster {} may charge {account:?}: the cluster's \
                     [clusters.executor.namespaces] says which namespace's Jobs charge which accounts",
                    self.cluster
                )
            })
    }

    /// K8S-12: whether a Job Allot makes of a submission in `namespace` may
    /// run `image`: an entry of the namespace's `images` is the image as
    /// written, or a prefix of it ending in `*` (`*` alone: any image). A
    /// namespace with no list takes no image submissions. `Err` names the
    /// image, the namespace and what it takes.
    pub fn image_allowed(&self, namespace: &str, image: &str) -> Result<(), String> {
        let list = self.images.get(namespace).map(Vec::as_slice).unwrap_or_default();
        let matches = |p: &String| match p.strip_suffix('*') {
            Some(prefix) => image.starts_with(prefix),
            None => p == image,
        };
        if list.iter().any(matches) {
            return Ok(());
        }
        let takes = if list.is_empty() {
            "no image: the cluster's [clusters.executor.images] lists none for it".to_string()
        } else {
            format!("only {}", list.join(", "))
        };
        Err(format!(
            "K8S-12: namespace {namespace:?} of cluster {} may not run image {image:?} (it takes {takes})",
            self.cluster
        ))
    }

    /// The labels a Job must carry to be this server's: the equality
    /// terms of `job_selector` (K8S-12); `Err` names a term Allot cannot
    /// set as a label.
    pub fn job_labels(&self) -> Result<std::collections::BTreeMap<String, String>, String> {
        let mut out = std::collections::BTreeMap::from([(MANAGED.to_string(), "true".to_string())]);
        // Terms are split at commas outside a set (`k in (a,b)`).
        let mut depth = 0i32;
        let terms = self.job_selector.split(|c: char| {
            depth += i32::from(c == '(') - i32::from(c == ')');
            c == ',' && depth == 0
        });
        for term in terms.map(str::trim).filter(|t| !t.is_empty()) {
            let kv = term.split_once("==").or_else(|| term.split_once('=').filter(|(k, _)| !k.ends_with('!')));
            match kv {
                Some((k, v)) if !v.contains(['(', ')', ' ']) => {
                    out.insert(k.trim().to_string(), v.trim().to_string());
                }
                _ => {
                    return Err(format!(
                        "K8S-12: cluster {}'s job_selector term {term:?} is not key=value: Allot cannot label a \
                         Job it creates to match it",
                        self.cluster
                    ));
                }
            }
        }
        Ok(out)
    }

    /// The accounts a Job in `namespace` by `user` may charge.
    pub fn grants(&self, namespace: &str, user: Option<&str>) -> Vec<String> {
        let mut out: Vec<String> = self.namespaces.get(namespace).cloned().unwrap_or_default();
        if let Some(u) = user.and_then(|u| self.users.get(u)) {
            out.extend(u.iter().cloned());
        }
        out
    }
}

/// What went wrong talking to the cluster.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("kubernetes cluster config: {0}")]
    Config(String),
    #[error("kubernetes API: {0}")]
    Api(String),
    #[error("{0}")]
    Inventory(String),
}

/// One Node of the cluster, as the inventory sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeNode {
    pub name: String,
    pub gpus: u32,
    pub product: Option<String>,
    pub topology: Option<String>,
}

/// The cluster's selected Nodes, in natural name order.
pub async fn nodes(opts: &KubeOptions) -> Result<Vec<KubeNode>, KubeError> {
    let client = opts.client()?;
    let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
    let mut lp = kube::api::ListParams::default();
    if let Some(s) = &opts.node_selector {
        lp = lp.labels(s);
    }
    let list = api
        .list(&lp)
        .await
        .map_err(|e| KubeError::Api(format!("list the Nodes of cluster {} at {}: {e}", opts.cluster, opts.url)))?;
    let mut out: Vec<KubeNode> = list.items.iter().map(|n| run::kube_node(n, opts)).collect();
    out.sort_by_key(|n| crate::executor::health::natural_key(&n.name));
    Ok(out)
}

/// The config's nodes of cluster `of`, in order, named after the cluster's
/// Nodes (natural order). A config node without a Node to name it keeps
/// its laid-out name and starts out of service until one appears; Nodes
/// beyond the config's join their pools (MNT-5).
pub fn map_nodes(
    cluster: &mut allot_core::Cluster,
    of: allot_core::cluster::ClusterId,
    kube: &[KubeNode],
    opts: &KubeOptions,
) -> Result<(), KubeError> {
    let mine: Vec<usize> =
        (0..cluster.nodes.len()).filter(|&i| cluster.cluster_of(allot_core::NodeId(i as u32)) == of).collect();
    if kube.is_empty() {
        return Err(KubeError::Inventory(format!(
            "cluster {}: no Node matches {} at {}",
            opts.cluster,
            opts.node_selector.as_deref().map(|s| format!("the selector {s:?}")).unwrap_or("any selector".into()),
            opts.url
        )));
    }
    for (&i, k) in mine.iter().zip(kube) {
        let node = &mut cluster.nodes[i];
        if k.gpus < node.gpus {
            return Err(KubeError::Inventory(format!(
                "cluster {}: the config's node {} has {} GPUs but Node {} has {} allocatable {}",
                opts.cluster, node.name, node.gpus, k.name, k.gpus, opts.gpu_resource
            )));
        }
        node.name = opts.allot_name(&k.name);
    }
    // MNT-5: Nodes beyond the config's join their pool, as a Node that
    // appears later does (a restarted server so finds the nodes its
    // attempts ran on).
    for k in kube.iter().skip(mine.len()) {
        let name = opts.allot_name(&k.name);
        match crate::executor::inventory::pool_for(cluster, of, k.gpus, k.product.as_deref()) {
            Ok(pool) => match cluster.add_node(pool, name.clone()) {
                Ok(_) => {
                    tracing::info!(cluster = %opts.cluster, node = %name, pool = %cluster.pool(pool).name, "MNT-5: a Node beyond the config's joins its pool")
                }
                Err(e) => {
                    tracing::warn!(cluster = %opts.cluster, node = %name, error = %e, "a Node beyond the config's is not used")
                }
            },
            Err(why) => {
                tracing::warn!(cluster = %opts.cluster, node = %name, %why, "a Node beyond the config's is not used")
            }
        }
    }
    Ok(())
}

/// What the executor needs from the rest of the server: the API's check
/// and commit of a submission, cancellation, and the reasons of waiting
/// workloads. Set once the server's state exists ([`KubeExecutor::serve`]).
pub trait Front: Send + Sync {
    /// Checks and commits `job` as a workload charged by `who` (idempotent
    /// on the Job's uid); its workload id, or why it is refused.
    fn submit(&self, job: JobShape) -> BoxFuture<'_, Result<i64, String>>;
    /// Stores `job`, which cannot be admitted, as a rejected workload with
    /// `reason` (idempotent on the Job's uid), so `allot why` answers it.
    fn reject(&self, job: JobShape, reason: String) -> BoxFuture<'_, Option<i64>>;
    /// Cancels workload `seq` (its Job was deleted).
    fn cancel(&self, seq: i64, by: String) -> BoxFuture<'_, ()>;
    /// Why each workload waits, or its state and reason; `None`: unknown.
    fn reasons(&self, seqs: Vec<i64>) -> BoxFuture<'_, Vec<Option<String>>>;
}

pub(crate) enum Command {
    Launch(Launch),
    Stop {
        key: AttemptKey,
        kill: bool,
    },
    Serve(Arc<dyn Front>),
    Survivors {
        survivors: Vec<Survivor>,
        done: oneshot::Sender<()>,
    },
    /// K8S-10: attempts of the previous server, taken back as they run.
    Adopt(Vec<Adoption>),
    /// K8S-12: create a Job for a submission and ingest it.
    Create {
        job: Box<k8s_openapi::api::batch::v1::Job>,
        reply: Created,
    },
}

/// The answer to [`Command::Create`]: the Job's `namespace/name` and
/// workload id, or why not.
pub(crate) type Created = oneshot::Sender<Result<(String, i64), String>>;

/// MNT-5: whether a Node that appears, of so many GPUs of a product,
/// fits a pool of the cluster (why not, if not): the one rule,
/// [`crate::executor::inventory::pool_for`], on the config's pools.
pub type Fits = Box<dyn Fn(u32, Option<&str>) -> Result<(), String> + Send + Sync>;

/// Runs one Kubernetes cluster's workloads.
pub struct KubeExecutor {
    commands: mpsc::UnboundedSender<Command>,
    cluster: String,
    opts: KubeOptions,
}

impl KubeExecutor {
    /// Starts the watchers of Nodes (Allot's `nodes` of this cluster, and
    /// those that appear and `fits` a pool), Jobs and pods; must be called
    /// inside the runtime.
    pub fn new(
        events: mpsc::UnboundedSender<ExecEvent>,
        opts: KubeOptions,
        nodes: Vec<String>,
        fits: Fits,
        fence: Arc<crate::store::lease::Fence>,
    ) -> Result<KubeExecutor, KubeError> {
        let client = opts.client()?;
        let (commands, rx) = mpsc::unbounded_channel();
        let cluster = opts.cluster.clone();
        tokio::spawn(run::Loop::start(client, opts.clone(), nodes, fits, events, rx, fence));
        Ok(KubeExecutor { commands, cluster, opts })
    }

    /// The fleet's name of its cluster.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    pub fn options(&self) -> &KubeOptions {
        &self.opts
    }

    /// K8S-12: creates `job` in the cluster (as Allot, the lease's holder)
    /// and ingests it: its `namespace/name` and workload id, or why not.
    pub async fn create(&self, job: k8s_openapi::api::batch::v1::Job) -> Result<(String, i64), String> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(Command::Create { job: Box::new(job), reply })
            .map_err(|_| format!("cluster {}: its executor has stopped", self.cluster))?;
        rx.await.map_err(|_| format!("cluster {}: its executor has stopped", self.cluster))?
    }

    /// Starts ingesting Jobs through `front` (the API's checks and store).
    pub fn serve(&self, front: Arc<dyn Front>) {
        let _ = self.commands.send(Command::Serve(front));
    }
}

impl Executor for KubeExecutor {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    fn launch(&self, job: Launch) {
        let _ = self.commands.send(Command::Launch(job));
    }

    fn signal(&self, key: AttemptKey) {
        let _ = self.commands.send(Command::Stop { key, kill: false });
    }

    fn kill(&self, key: AttemptKey) {
        let _ = self.commands.send(Command::Stop { key, kill: true });
    }

    /// K8S-10: the cluster runs its Jobs whether Allot runs or not: every
    /// attempt is taken back, and reconciled with its Job once the Jobs
    /// and pods are listed.
    fn adopt(&self, attempts: Vec<Adoption>) -> Vec<AttemptKey> {
        let keys = attempts.iter().map(|a| a.key).collect();
        let _ = self.commands.send(Command::Adopt(attempts));
        keys
    }

    fn terminate_survivors(&self, survivors: Vec<Survivor>, _grace: Duration) -> BoxFuture<'_, ()> {
        let (done, wait) = oneshot::channel();
        let _ = self.commands.send(Command::Survivors { survivors, done });
        Box::pin(async move {
            let _ = wait.await;
        })
    }
}
