//! Checking a submission: the caller's grant, then the workload's shape and
//! fields by the validator trace rows and recovered store rows go through
//! too (`allot_trace::workload`: account exists, gpus ≥ 1, nodes divide
//! gpus, the GPU type is one some pool has, the shape fits some pool, class
//! and priority known, numbers within `allot_trace::bounds`), plus the
//! policy's admission (INT-2, SVC-2, PRIO-2) and the live-only fields
//! (command, env, retries, workdir). Every error names its field. A
//! `workdir` must be absolute; when the workload may run only on clusters
//! of the local executor (this host) it must also be a directory here
//! now, else it is found missing at launch (MNT-4).
//!
//! An account the caller may not submit to is answered exactly like one
//! that does not exist, so a submission never reveals which accounts exist
//! outside the caller's grants. `env` names are identifiers
//! (`[A-Za-z_][A-Za-z0-9_]*`) and may not set what steers the executor,
//! the GPU assignment or the loader ([`denied_env`]); no value, argument
//! or working directory holds NUL.

use std::collections::BTreeMap;
use std::sync::Arc;

use allot_core::cluster::ClusterSet;
use allot_core::{AccountId, AccountTree, Cluster, Policy, PolicyKind, Rule, State, WorkloadSpec};
use allot_trace::workload::{self, Field, FieldErrorKind, RawWorkload, Validator};

use crate::auth::Principal;
use crate::store::NewWorkload;
use crate::views::SubmitRequest;

/// Default expected duration of batch and service work without one.
pub const DEFAULT_EXPECTED_S: u64 = workload::DEFAULT_WORK_S;
/// Limits on the live-only fields.
pub const MAX_COMMAND_ARGS: usize = 1024;
pub const MAX_ENV_VARS: usize = 256;
pub const MAX_TEXT_BYTES: usize = 64 * 1024;
pub const MAX_RETRIES: u32 = 100;

/// Variables a submission's `env` may not set, by name, with what they
/// steer: the executor (Slurm reads `SBATCH_*`, `SLURM_*` … from the
/// environment of `sbatch` and of the job), the GPU assignment Allot made,
/// Allot itself, or the dynamic loader of every process of the job.
const DENIED_ENV: [(&str, &str); 11] = [
    ("CUDA_VISIBLE_DEVICES", "the GPUs Allot assigned"),
    ("CUDA_DEVICE_ORDER", "the GPUs Allot assigned"),
    ("NVIDIA_VISIBLE_DEVICES", "the GPUs Allot assigned"),
    ("ROCR_VISIBLE_DEVICES", "the GPUs Allot assigned"),
    ("HIP_VISIBLE_DEVICES", "the GPUs Allot assigned"),
    ("GPU_DEVICE_ORDINAL", "the GPUs Allot assigned"),
    ("ZE_AFFINITY_MASK", "the GPUs Allot assigned"),
    ("ONEAPI_DEVICE_SELECTOR", "the GPUs Allot assigned"),
    ("BASH_ENV", "what every shell of the job runs first"),
    ("ENV", "what every shell of the job runs first"),
    ("PROMPT_COMMAND", "what every shell of the job runs first"),
];

/// Prefixes of variables a submission's `env` may not set.
const DENIED_ENV_PREFIXES: [(&str, &str); 10] = [
    ("SBATCH_", "the Slurm executor (sbatch options)"),
    ("SALLOC_", "the Slurm executor (salloc options)"),
    ("SRUN_", "the Slurm executor (srun options)"),
    ("SLURM", "the Slurm executor (Slurm's configuration and job context)"),
    ("ALLOT_", "Allot (set by the executor)"),
    ("CUDA_MPS_", "the GPUs Allot assigned (the MPS daemon)"),
    ("NVIDIA_", "the GPUs Allot assigned (the container runtime)"),
    ("LD_", "the dynamic loader of every process of the job"),
    ("DYLD_", "the dynamic loader of every process of the job"),
    ("GCONV_", "the dynamic loader of every process of the job"),
];

/// What a variable a submission may not set steers, or `None` when it may
/// be set.
pub fn denied_env(name: &str) -> Option<&'static str> {
    let exact = DENIED_ENV.iter().find(|(n, _)| *n == name);
    let prefix = || DENIED_ENV_PREFIXES.iter().find(|(p, _)| name.starts_with(p));
    exact.or_else(prefix).map(|(_, why)| *why)
}

/// The fleet of a published admission view.
pub struct ClusterView(Arc<State>);

impl std::ops::Deref for ClusterView {
    type Target = Cluster;
    fn deref(&self) -> &Cluster {
        &self.0.cluster
    }
}

/// A field and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

fn bad(field: &str, message: impl Into<String>) -> FieldError {
    FieldError { field: field.to_string(), message: message.into() }
}

/// What the API needs to check submissions without asking the scheduler:
/// the engine's [`allot_core::Engine::admission_view`] (its fleet, account
/// tree and contract, no workloads), which the scheduler publishes again
/// whenever [`allot_core::Engine::shape`] moves (a node added, MNT-5; an
/// account edit, ACC-1), and the policy's admission.
pub struct Catalog {
    /// The engine's admission view, for the policy's admission check.
    template: std::sync::RwLock<Arc<State>>,
    pub policy: PolicyKind,
    admit: std::sync::Mutex<Box<dyn Policy>>,
    /// The clusters of the fleet the local executor runs, on this host.
    local: ClusterSet,
    /// The Kubernetes clusters: they run their own managed Jobs only
    /// (K8S-1), never a command submitted through the API.
    jobs_only: ClusterSet,
}

impl Catalog {
    /// A catalog for a fleet none of whose clusters runs on this host.
    pub fn new(template: State, policy: PolicyKind) -> Arc<Catalog> {
        Catalog::with_local(template, policy, ClusterSet(0))
    }

    /// `local`: the clusters the local executor runs (a submission that
    /// may run only there has its `workdir` checked on this host).
    pub fn with_local(template: State, policy: PolicyKind, local: ClusterSet) -> Arc<Catalog> {
        Catalog::with_clusters(template, policy, local, ClusterSet(0))
    }

    /// `jobs_only`: the Kubernetes clusters, which run their managed Jobs
    /// only: a command submitted through the API runs elsewhere (K8S-1).
    pub fn with_clusters(
        template: State,
        policy: PolicyKind,
        local: ClusterSet,
        jobs_only: ClusterSet,
    ) -> Arc<Catalog> {
        Arc::new(Catalog {
            template: std::sync::RwLock::new(Arc::new(template)),
            policy,
            admit: std::sync::Mutex::new(policy.build()),
            local,
            jobs_only,
        })
    }

    /// The fleet as the engine last published it (nodes added included).
    pub fn cluster(&self) -> ClusterView {
        ClusterView(self.template())
    }

    /// The engine's admission view as last published (no workloads; the
    /// live tree and fleet).
    pub fn template(&self) -> Arc<State> {
        self.template.read().expect("catalog lock").clone()
    }

    /// The engine's new admission view (its shape moved).
    pub fn publish(&self, view: State) {
        *self.template.write().expect("catalog lock") = Arc::new(view);
    }

    pub fn account_exists(&self, path: &str) -> bool {
        self.template().accounts.get(path).is_some_and(|id| id != AccountId::ROOT)
    }

    /// Whether `who` may see `path` and it exists: otherwise both are
    /// answered with [`Catalog::unknown_account`], so neither is told apart.
    pub fn visible_account(&self, who: &Principal, path: &str) -> bool {
        who.can_see(path) && self.account_exists(path)
    }

    /// The answer to `who` for `path`, an account that does not exist or
    /// that `who` may not see ([`unknown_account`]).
    pub fn unknown_account(&self, who: &Principal, path: &str) -> String {
        unknown_account(&self.template().accounts, who, path)
    }

    /// Checks a request from `who`; returns the row to store and the core
    /// spec (without id, which the store gives).
    pub fn check(
        &self,
        req: &SubmitRequest,
        who: &Principal,
        now: u64,
    ) -> Result<(NewWorkload, WorkloadSpec), FieldError> {
        if req.image.is_some() || req.namespace.is_some() {
            return Err(bad("image", "K8S-12: a submission that names an image is checked as the Job it becomes"));
        }
        // The Kubernetes executor's submissions are its Jobs (K8S-1).
        self.check_with(req, who, now, who.token_id.starts_with("kubernetes:"))
    }

    /// K8S-12: checks a submission that names an image, to be made a
    /// managed Job of a Kubernetes cluster: only fields a Job carries, one
    /// Kubernetes cluster (the one named, or the fleet's only one), then
    /// as the Job's own submission will be (the account, the shape, the
    /// fit). Returns the cluster's name.
    pub fn check_image(&self, req: &SubmitRequest, who: &Principal, now: u64) -> Result<String, FieldError> {
        let image = req.image.as_deref().unwrap_or_default();
        if image.trim().is_empty() || image.len() > 1024 || image.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("image", "K8S-12: a container image reference (no spaces, at most 1024 bytes)"));
        }
        let not_carried = [
            ("retries", req.retries.is_some()),
            ("priority", req.priority.is_some()),
            ("preemptible", req.preemptible.is_some()),
            ("util", req.util.is_some()),
            ("time_limit_s", req.time_limit_s.is_some()),
            ("checkpoint_on_signal", req.checkpoint_on_signal.is_some()),
            ("gpu_type", req.gpu_type.is_some()),
            ("array", req.array.is_some()),
            ("dependency", req.dependency.is_some()),
            ("hold", req.hold.is_some()),
        ];
        if let Some((field, _)) = not_carried.iter().find(|(_, set)| *set) {
            return Err(bad(
                field,
                format!("K8S-12: a Kubernetes Job does not carry {field}: submit the image without it"),
            ));
        }
        let cluster = self.job_cluster(&req.clusters)?;
        if !req.command.is_empty() {
            check_command(&req.command)?;
        }
        let pods = req.nodes.filter(|n| *n > 0).unwrap_or(1);
        if !req.gpus.is_multiple_of(pods) {
            return Err(bad("gpus", format!("K8S-12: {} GPUs do not split evenly over {pods} pods", req.gpus)));
        }
        if let Some(ns) = &req.namespace
            && (ns.is_empty()
                || ns.len() > 63
                || !ns.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
        {
            return Err(bad("namespace", format!("K8S-12: {ns:?} is not a namespace name")));
        }
        let as_job = SubmitRequest {
            account: req.account.clone(),
            class: req.class.clone(),
            gpus: req.gpus,
            nodes: Some(pods),
            clusters: vec![cluster.clone()],
            command: vec!["kubernetes-job".into(), image.to_string()],
            env: req.env.clone(),
            expected_duration_s: req.expected_duration_s,
            checkpoint_interval_s: req.checkpoint_interval_s,
            name: req.name.clone(),
            workdir: req.workdir.clone(),
            ..Default::default()
        };
        self.check_with(&as_job, who, now, true)?;
        Ok(cluster)
    }

    /// K8S-12: the Kubernetes cluster a Job is created in.
    fn job_cluster(&self, named: &[String]) -> Result<String, FieldError> {
        let fleet = self.cluster();
        let kube: Vec<&str> = (0..fleet.clusters.len())
            .filter(|&i| self.jobs_only.contains(allot_core::cluster::ClusterId(i as u16)))
            .map(|i| fleet.clusters[i].as_str())
            .collect();
        match (cluster_list(named)?, kube.as_slice()) {
            (_, []) => Err(bad("image", "K8S-12: no cluster of this fleet runs Kubernetes Jobs")),
            (None, [one]) => Ok(one.to_string()),
            (None, many) => Err(bad(
                "clusters",
                format!("K8S-12: name the Kubernetes cluster to create the Job in: one of {}", many.join(", ")),
            )),
            (Some(list), _) if kube.contains(&list.as_str()) => Ok(list),
            (Some(list), _) => Err(bad(
                "clusters",
                format!(
                    "K8S-12: an image runs as a Job of one Kubernetes cluster; {list} is not one (Kubernetes: {})",
                    kube.join(", ")
                ),
            )),
        }
    }

    /// [`Catalog::check`]; `job`: a Kubernetes Job's (it may name its
    /// Kubernetes cluster).
    fn check_with(
        &self,
        req: &SubmitRequest,
        who: &Principal,
        now: u64,
        job: bool,
    ) -> Result<(NewWorkload, WorkloadSpec), FieldError> {
        // The grant first: an account outside it is answered as an unknown one.
        if !who.can_submit(&req.account) {
            return Err(bad("account", self.unknown_account(who, &req.account)));
        }
        let clusters = cluster_list(&req.clusters)?;
        let clusters = if job { clusters } else { self.command_clusters(clusters)? };
        let raw = RawWorkload {
            id: "",
            submit: now,
            account: &req.account,
            user: &who.name,
            class: req.class.as_deref(),
            gpus: u64::from(req.gpus),
            nodes: u64::from(req.nodes.unwrap_or(0)),
            gpu_type: req.gpu_type.as_deref().filter(|s| !s.is_empty()),
            work_s: req.expected_duration_s,
            checkpoint_s: req.checkpoint_interval_s.unwrap_or(0),
            util: req.util.unwrap_or(1.0),
            priority: req.priority.as_deref(),
            preemptible: req.preemptible.unwrap_or(false),
            clusters: clusters.as_deref(),
            time_limit_s: req.time_limit_s,
            checkpoint_on_signal: req.checkpoint_on_signal.unwrap_or(false),
            billing: None,
        };
        let template = self.template();
        let spec = Validator::for_state(&template)
            .check(&raw)
            .map_err(|e| field_error(e, || unknown_account(&template.accounts, who, &req.account)))?;
        if let Some(closed) = closed_account(&template, spec.account) {
            return Err(bad("account", closed));
        }
        if let Some(not_here) = not_own_work(&template, spec.account, &spec.user) {
            return Err(bad("account", not_here));
        }
        let retries = req.retries.unwrap_or(0);
        if retries > MAX_RETRIES {
            return Err(bad("retries", format!("at most {MAX_RETRIES}, got {retries}")));
        }
        check_command(&req.command)?;
        check_env(&req.env)?;
        check_workdir(req.workdir.as_deref())?;
        if let Some(n) = &req.name
            && (n.len() > 128 || n.chars().any(char::is_control))
        {
            return Err(bad("name", "at most 128 characters, no control characters"));
        }
        self.admit(&template, &spec)?;
        drop(template);
        if let Some(dir) = &req.workdir
            && self.runs_only_here(&spec)
        {
            workdir_here(dir)?;
        }
        Ok((self.row(req, &spec, who, clusters), spec))
    }

    /// K8S-1: a command submitted through the API never runs on a
    /// Kubernetes cluster (it runs that cluster's managed Jobs only): one
    /// named is refused, and "any cluster" means any other. The Kubernetes
    /// executor's own submissions (its Jobs) are left as they are.
    fn command_clusters(&self, clusters: Option<String>) -> Result<Option<String>, FieldError> {
        if self.jobs_only.0 == 0 {
            return Ok(clusters);
        }
        let fleet = self.cluster();
        let names = &fleet.clusters;
        let kube = |name: &str| {
            names
                .iter()
                .position(|n| n == name)
                .is_some_and(|i| self.jobs_only.contains(allot_core::cluster::ClusterId(i as u16)))
        };
        let hint = "submit an image (K8S-12), or create a Job there (label allot.dev/managed=true: docs/kubernetes.md)";
        match clusters {
            Some(list) => match list.split(',').find(|n| kube(n)) {
                Some(n) => Err(bad("clusters", format!("K8S-1: cluster {n} runs its Kubernetes Jobs only; {hint}"))),
                None => Ok(Some(list)),
            },
            None => {
                let rest: Vec<&str> = names.iter().map(String::as_str).filter(|n| !kube(n)).collect();
                if rest.is_empty() {
                    return Err(bad(
                        "clusters",
                        format!("K8S-1: every cluster of this fleet runs Kubernetes Jobs only; {hint}"),
                    ));
                }
                Ok(Some(rest.join(",")))
            }
        }
    }

    /// Whether every pool that may serve `spec` (its GPU type, its
    /// clusters) is of a cluster the local executor runs: it runs on this
    /// host, whose file system the server sees.
    fn runs_only_here(&self, spec: &WorkloadSpec) -> bool {
        let fleet = self.cluster();
        let mut pools = fleet.pools.iter().filter(|p| p.may_serve(spec.gpu_type, spec.clusters)).peekable();
        pools.peek().is_some() && pools.all(|p| self.local.contains(p.cluster))
    }

    /// The store row of a checked request; `clusters` as validated.
    fn row(&self, req: &SubmitRequest, spec: &WorkloadSpec, who: &Principal, clusters: Option<String>) -> NewWorkload {
        NewWorkload {
            owner: Some(who.token_id.clone()),
            run_as: None,
            submit_t: spec.submit as i64,
            account: req.account.clone(),
            submitter: spec.user.clone(),
            class: spec.class.as_str().to_string(),
            gpus: i64::from(spec.gpus),
            nodes: i64::from(spec.nodes),
            gpu_type: spec.gpu_type.map(|g| self.cluster().gpu_types[g.0 as usize].name.clone()),
            clusters,
            work_s: spec.work_s as i64,
            checkpoint_s: spec.checkpoint_s as i64,
            util: spec.util,
            priority: spec.priority.as_str().to_string(),
            preemptible: spec.preemptible,
            name: req.name.clone(),
            command: serde_json::to_string(&req.command).expect("strings serialise"),
            env: serde_json::to_string(&req.env).expect("strings serialise"),
            retries: i64::from(req.retries.unwrap_or(0)),
            time_limit_s: spec.time_limit_s.map(|l| l as i64),
            workdir: req.workdir.clone(),
            checkpoint_on_signal: spec.checkpoint_on_signal,
            conditions: Default::default(),
        }
    }

    /// The policy's admission, with the field its rule is about.
    fn admit(&self, template: &State, spec: &WorkloadSpec) -> Result<(), FieldError> {
        let policy = self.admit.lock().expect("admission policy");
        policy.admit(template, spec).map_err(|r| {
            let field = match r.rule {
                Rule::InteractiveLimit => "class",
                Rule::PrioPools => "account",
                _ => "gpus",
            };
            bad(field, format!("rejected by the {} policy: {r}", policy.name()))
        })
    }
}

/// ACC-2: "account org/x is closed …" when the account or one above it is
/// closed (the engine refuses such work too; this answers before storing).
fn closed_account(state: &State, account: AccountId) -> Option<String> {
    let tree = &state.accounts;
    let c = tree.ancestry(account).map(|a| tree.account(a)).find(|a| a.own_closed)?;
    let path = &tree.account(account).path;
    Some(if &c.path == path {
        format!("ACC-2: account {path:?} is closed; it takes no new work")
    } else {
        format!("ACC-2: account {path:?} is below {:?}, which is closed; it takes no new work", c.path)
    })
}

/// ACC-4: live work goes to a project (an account without open
/// sub-accounts). An account with sub-accounts takes work of its own (its
/// own-work slot, FS-1) only from a user it names in `users` or
/// `user_budgets` (as a site's Slurm associations of users at a parent
/// account are imported); anyone else is told the sub-accounts to use.
/// Work submitted to a parent by mistake would otherwise rank as a slot of
/// its own, share 1, beside the projects its budget was split into.
fn not_own_work(state: &State, account: AccountId, user: &str) -> Option<String> {
    let tree = &state.accounts;
    let a = tree.account(account);
    let open: Vec<&str> =
        a.children.iter().map(|&c| tree.account(c)).filter(|c| !c.closed).map(|c| c.path.as_str()).collect();
    if open.is_empty() || a.users.contains_key(user) || a.user_budgets.contains_key(user) {
        return None;
    }
    Some(format!(
        "account {:?} is split into sub-accounts; submit to one of them ({}), or ask its manager to name {user} \
         in its users for work of its own (ACC-4)",
        a.path,
        allot_trace::choices::list(&a.path, &open)
    ))
}

/// The answer for an account that does not exist or that `who` may not
/// see: the same for both, with the accounts `who` sees (the nearest ones
/// when there are many, `allot_trace::choices`), so a typo is answered
/// with what was meant and nothing outside the caller's grants is named.
pub fn unknown_account(tree: &AccountTree, who: &Principal, path: &str) -> String {
    let seen: Vec<&str> =
        tree.ids_by_path().map(|id| tree.account(id).path.as_str()).filter(|p| who.can_see(p)).collect();
    if seen.is_empty() {
        return format!("unknown account {path:?} ({} sees no account)", who.name);
    }
    format!("unknown account {path:?} (accounts {} sees: {})", who.name, allot_trace::choices::list(path, &seen))
}

/// A validator's error in the API's form: its field as the API names it;
/// an unknown account is answered with `unknown_account`.
fn field_error(e: workload::FieldError, unknown_account: impl FnOnce() -> String) -> FieldError {
    let field = match e.field {
        Field::WorkS => "expected_duration_s",
        Field::CheckpointS => "checkpoint_interval_s",
        f => f.as_str(),
    };
    match e.kind {
        // Said exactly as for an account the caller may not see.
        FieldErrorKind::UnknownAccount(_) => bad(field, unknown_account()),
        kind => bad(field, kind.to_string()),
    }
}

/// A submission's `clusters` as the validator and the store take them
/// (names joined by commas), `None` for any; an entry must be one name.
/// Whether each name is the fleet's is the validator's check
/// ([`Validator::clusters`]).
fn cluster_list(names: &[String]) -> Result<Option<String>, FieldError> {
    let names: Vec<&str> = names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()).collect();
    if let Some(n) = names.iter().find(|n| n.contains(|c: char| c == ',' || c.is_whitespace())) {
        return Err(bad("clusters", format!("one cluster name per entry, got {n:?}")));
    }
    Ok((!names.is_empty()).then(|| names.join(",")))
}

fn check_command(cmd: &[String]) -> Result<(), FieldError> {
    if cmd.first().is_none_or(|p| p.is_empty()) {
        return Err(bad("command", "must name a program (a non-empty array of strings)"));
    }
    if cmd.len() > MAX_COMMAND_ARGS {
        return Err(bad("command", format!("at most {MAX_COMMAND_ARGS} arguments")));
    }
    if cmd.iter().map(String::len).sum::<usize>() > MAX_TEXT_BYTES {
        return Err(bad("command", format!("at most {MAX_TEXT_BYTES} bytes in all")));
    }
    if cmd.iter().any(|a| a.contains('\0')) {
        return Err(bad("command", "arguments must not contain NUL"));
    }
    Ok(())
}

/// `workdir`: an absolute path (the client resolves a relative one against
/// its own current directory), without NUL, of at most [`MAX_TEXT_BYTES`].
fn check_workdir(dir: Option<&str>) -> Result<(), FieldError> {
    let Some(dir) = dir else { return Ok(()) };
    if dir.len() > MAX_TEXT_BYTES {
        return Err(bad("workdir", format!("at most {MAX_TEXT_BYTES} bytes")));
    }
    if dir.contains('\0') {
        return Err(bad("workdir", "must not contain NUL"));
    }
    if !std::path::Path::new(dir).is_absolute() {
        return Err(bad("workdir", format!("must be an absolute path, got {dir:?}")));
    }
    Ok(())
}

/// `workdir` of a workload that runs on this host: a directory here now.
fn workdir_here(dir: &str) -> Result<(), FieldError> {
    match crate::executor::unusable_dir(std::path::Path::new(dir)) {
        None => Ok(()),
        Some(why) => Err(bad(
            "workdir",
            format!("working directory {dir} {why} on this host, where the local executor runs the workload"),
        )),
    }
}

/// A variable name as shells and `env` read it: `[A-Za-z_][A-Za-z0-9_]*`.
/// Anything else may be read as something else by what the executor runs
/// (`--chdir` is an option of the Slurm job's wrapper, `A=B` an assignment).
fn is_env_name(k: &str) -> bool {
    let mut chars = k.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `env`: at most [`MAX_ENV_VARS`] variables and [`MAX_TEXT_BYTES`] in
/// all; each name an identifier ([`is_env_name`]) that steers nothing
/// ([`denied_env`]), each value without NUL.
fn check_env(env: &BTreeMap<String, String>) -> Result<(), FieldError> {
    if env.len() > MAX_ENV_VARS {
        return Err(bad("env", format!("at most {MAX_ENV_VARS} variables")));
    }
    if env.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() > MAX_TEXT_BYTES {
        return Err(bad("env", format!("at most {MAX_TEXT_BYTES} bytes in all")));
    }
    for (k, v) in env {
        if !is_env_name(k) {
            return Err(bad(
                &format!("env[{k:?}]"),
                format!(
                    "{k:?} is not a variable name: a letter or _, then letters, digits and _ ([A-Za-z_][A-Za-z0-9_]*)"
                ),
            ));
        }
        let field = format!("env.{k}");
        if let Some(what) = denied_env(k) {
            return Err(bad(&field, format!("{k} may not be set by a submission: it steers {what}")));
        }
        if v.contains('\0') {
            return Err(bad(&field, "value must not contain NUL"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Role;
    use allot_core::Class;
    use allot_core::cluster::{ClusterId, ClusterSet};
    use allot_trace::bounds;

    const CONFIG: &str = r#"
[cluster]
[[cluster.pools]]
name = "a"
gpu = "H100"
nodes = 2
gpus_per_node = 4
[[accounts]]
path = "org/x"
max_service_gpus = 2
[[accounts]]
path = "lab/y"
[[accounts]]
path = "lab"
users = { ann = 2 }
[[accounts]]
path = "old/done"
closed = true
[contract]
interactive_max_gpus = 2
"#;

    fn catalog() -> Arc<Catalog> {
        let cfg = allot_trace::config::parse_config(CONFIG, "t.toml").unwrap();
        Catalog::new(State::new(cfg.cluster, cfg.accounts, cfg.contract), PolicyKind::Allot)
    }

    fn admin() -> Principal {
        Principal {
            name: "ann".into(),
            role: Role::Admin,
            scopes: vec![],
            projects: vec![],
            token_id: "t1".into(),
            unix_user: None,
        }
    }

    fn researcher() -> Principal {
        Principal { role: Role::Researcher, projects: vec!["org/x".into()], ..admin() }
    }

    fn req() -> SubmitRequest {
        SubmitRequest { account: "org/x".into(), gpus: 1, command: vec!["true".into()], ..Default::default() }
    }

    fn workdir(dir: &str) -> SubmitRequest {
        SubmitRequest { workdir: Some(dir.into()), ..req() }
    }

    fn env(k: &str) -> SubmitRequest {
        SubmitRequest { env: [(k.to_string(), "1".to_string())].into(), ..req() }
    }

    #[test]
    fn each_rule_names_its_field() {
        let c = catalog();
        let cases: Vec<(&str, SubmitRequest, Option<&str>)> = vec![
            ("valid", req(), None),
            ("unknown account", SubmitRequest { account: "org/y".into(), ..req() }, Some("account")),
            ("parent, user not named", SubmitRequest { account: "org".into(), ..req() }, Some("account")),
            ("parent naming the user", SubmitRequest { account: "lab".into(), ..req() }, None),
            ("parent of closed accounts only", SubmitRequest { account: "old".into(), ..req() }, None),
            ("zero gpus", SubmitRequest { gpus: 0, ..req() }, Some("gpus")),
            ("nodes divide gpus", SubmitRequest { gpus: 3, nodes: Some(2), ..req() }, Some("nodes")),
            ("too large", SubmitRequest { gpus: 9, ..req() }, Some("gpus")),
            ("gpus past the bound", SubmitRequest { gpus: u32::MAX, ..req() }, Some("gpus")),
            ("nodes past the bound", SubmitRequest { nodes: Some(u32::MAX), ..req() }, Some("nodes")),
            ("gpu type", SubmitRequest { gpu_type: Some("B200".into()), ..req() }, Some("gpu_type")),
            ("class", SubmitRequest { class: Some("gpu".into()), ..req() }, Some("class")),
            ("lane", SubmitRequest { class: Some("interactive".into()), gpus: 4, ..req() }, Some("class")),
            ("service cap", SubmitRequest { class: Some("service".into()), gpus: 4, ..req() }, Some("gpus")),
            ("priority", SubmitRequest { priority: Some("max".into()), ..req() }, Some("priority")),
            ("duration", SubmitRequest { expected_duration_s: Some(0), ..req() }, Some("expected_duration_s")),
            (
                "duration 2^63",
                SubmitRequest { expected_duration_s: Some(1 << 63), ..req() },
                Some("expected_duration_s"),
            ),
            ("longest duration", SubmitRequest { expected_duration_s: Some(bounds::WORK_S.max), ..req() }, None),
            (
                "checkpoint 2^63",
                SubmitRequest { checkpoint_interval_s: Some(1 << 63), ..req() },
                Some("checkpoint_interval_s"),
            ),
            ("util", SubmitRequest { util: Some(1.5), ..req() }, Some("util")),
            ("util nan", SubmitRequest { util: Some(f64::NAN), ..req() }, Some("util")),
            ("retries", SubmitRequest { retries: Some(1000), ..req() }, Some("retries")),
            ("command", SubmitRequest { command: vec![], ..req() }, Some("command")),
            ("env", env("ALLOT_X"), Some("env.ALLOT_X")),
            ("env allowed", env("OMP_NUM_THREADS"), None),
            ("relative workdir", workdir("proj"), Some("workdir")),
            ("dot workdir", workdir("./proj"), Some("workdir")),
            ("empty workdir", workdir(""), Some("workdir")),
            ("workdir with NUL", workdir("/a\0b"), Some("workdir")),
            ("workdir too long", workdir(&format!("/{}", "a".repeat(MAX_TEXT_BYTES))), Some("workdir")),
            ("absolute workdir, elsewhere", workdir("/no/such/dir/on/this/host"), None),
        ];
        for (name, r, want) in cases {
            let got = c.check(&r, &admin(), 100).err().map(|e| e.field);
            assert_eq!(got.as_deref(), want, "case {name}");
        }
    }

    #[test]
    fn env_that_steers_the_executor_is_denied_by_name() {
        let c = catalog();
        let denied = [
            "SBATCH_QOS",
            "SBATCH_ACCOUNT",
            "SBATCH_PARTITION",
            "SALLOC_ACCOUNT",
            "SRUN_CPUS_PER_TASK",
            "SLURM_CONF",
            "SLURM_JOB_ID",
            "SLURMD_NODENAME",
            "ALLOT_NODE_RANK",
            "CUDA_VISIBLE_DEVICES",
            "CUDA_DEVICE_ORDER",
            "CUDA_MPS_PIPE_DIRECTORY",
            "NVIDIA_VISIBLE_DEVICES",
            "ROCR_VISIBLE_DEVICES",
            "HIP_VISIBLE_DEVICES",
            "GPU_DEVICE_ORDINAL",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "LD_AUDIT",
            "BASH_ENV",
        ];
        for k in denied {
            let e = c.check(&env(k), &admin(), 100).expect_err(k);
            assert_eq!(e.field, format!("env.{k}"), "{k}");
            assert!(e.message.starts_with(&format!("{k} may not be set")), "{k}: {}", e.message);
        }
        for k in ["PATH", "HOME", "OMP_NUM_THREADS", "NCCL_DEBUG", "PYTHONPATH", "MY_SLURMish", "sbatch_qos"] {
            assert!(c.check(&env(k), &admin(), 100).is_ok(), "{k} may be set");
        }
    }

    /// An env name is `[A-Za-z_][A-Za-z0-9_]*`: anything else could be
    /// read as an option by what the executor runs (`--chdir` of the
    /// Slurm job's wrapper). The field names the bad name, quoted.
    #[test]
    fn env_names_are_identifiers() {
        let c = catalog();
        for k in ["--chdir", "-x", "1ABC", "A-B", "A B", "A.B", "É", "A=B", "A\0B", "", "\x1b[2J"] {
            let e = c.check(&env(k), &admin(), 100).expect_err(k);
            assert_eq!(e.field, format!("env[{k:?}]"), "{k:?}");
            assert!(e.message.contains("[A-Za-z_][A-Za-z0-9_]*"), "{k:?}: {}", e.message);
        }
        for k in ["_", "A", "a1", "_X_9", "OMP_NUM_THREADS"] {
            assert!(c.check(&env(k), &admin(), 100).is_ok(), "{k} may be set");
        }
        let nul = SubmitRequest { env: [("A".to_string(), "x\0y".to_string())].into(), ..req() };
        assert_eq!(c.check(&nul, &admin(), 100).unwrap_err().field, "env.A");
        let nul = SubmitRequest { command: vec!["echo".into(), "x\0y".into()], ..req() };
        assert_eq!(c.check(&nul, &admin(), 100).unwrap_err().field, "command");
    }

    /// ACC-4 (issue 30, point 11): `--account org` for a project of org is
    /// refused with the projects to use, not queued as org's own work.
    #[test]
    fn work_goes_to_a_project_unless_the_parent_names_its_user() {
        let c = catalog();
        let e = c.check(&SubmitRequest { account: "org".into(), ..req() }, &admin(), 100).unwrap_err();
        assert_eq!(e.field, "account");
        assert_eq!(
            e.message,
            "account \"org\" is split into sub-accounts; submit to one of them (org/x), or ask its manager to \
             name ann in its users for work of its own (ACC-4)"
        );
        let bob = Principal { name: "bob".into(), ..admin() };
        let e = c.check(&SubmitRequest { account: "lab".into(), ..req() }, &bob, 100).unwrap_err();
        assert!(e.message.contains("(lab/y)"), "{}", e.message);
        assert!(c.check(&SubmitRequest { account: "lab".into(), ..req() }, &admin(), 100).is_ok());
    }

    #[test]
    fn hidden_and_unknown_accounts_get_the_same_answer() {
        let c = catalog();
        let hidden = c.check(&SubmitRequest { account: "lab/y".into(), ..req() }, &researcher(), 100).unwrap_err();
        let unknown = c.check(&SubmitRequest { account: "lab/z".into(), ..req() }, &researcher(), 100).unwrap_err();
        let seen = "(accounts ann sees: org/x)";
        assert_eq!(
            (hidden.field.as_str(), hidden.message.as_str()),
            ("account", &*format!("unknown account \"lab/y\" {seen}"))
        );
        assert_eq!(unknown.message, format!("unknown account \"lab/z\" {seen}"));
        assert!(c.check(&SubmitRequest { account: "lab/y".into(), ..req() }, &admin(), 100).is_ok());
        assert!(c.check(&req(), &researcher(), 100).is_ok());
    }

    const FLEET: &str = r#"
name = "f"
[[clusters]]
name = "c1"
[[clusters.pools]]
name = "h"
gpu = "H100"
nodes = 1
gpus_per_node = 4
[[clusters]]
name = "c2"
[[clusters.pools]]
name = "h"
gpu = "H100"
nodes = 2
gpus_per_node = 4
[[accounts]]
path = "org/x"
"#;

    /// FLEET-1 through the API: the names are the validator's to check
    /// (its message, the field `clusters`), stored as validated, and the
    /// shape must fit a pool of the named clusters.
    #[test]
    fn clusters_are_checked_by_the_validator_and_stored_as_checked() {
        let cfg = allot_trace::config::parse_config(FLEET, "f.toml").unwrap();
        let c = Catalog::new(State::new(cfg.cluster, cfg.accounts, cfg.contract), PolicyKind::Allot);
        let pinned = |names: &[&str], gpus: u32| SubmitRequest {
            clusters: names.iter().map(|n| n.to_string()).collect(),
            gpus,
            ..req()
        };
        let (row, spec) = c.check(&pinned(&["c2"], 1), &admin(), 0).unwrap();
        assert_eq!((row.clusters.as_deref(), spec.clusters), (Some("c2"), ClusterSet::of([ClusterId(1)])));
        let (row, spec) = c.check(&pinned(&[" c2", "c1 "], 1), &admin(), 0).unwrap();
        assert_eq!(
            (row.clusters.as_deref(), spec.clusters),
            (Some("c2,c1"), ClusterSet::of([ClusterId(0), ClusterId(1)]))
        );
        for empty in [&[][..], &[""][..]] {
            let (row, spec) = c.check(&pinned(empty, 1), &admin(), 0).unwrap();
            assert_eq!((row.clusters, spec.clusters), (None, ClusterSet::ANY), "{empty:?} is any cluster");
        }
        let e = c.check(&pinned(&["c1", "c9"], 1), &admin(), 0).unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.message.as_str()),
            ("clusters", "unknown cluster \"c9\" (the fleet has c1, c2)")
        );
        let e = c.check(&pinned(&["c1 c2"], 1), &admin(), 0).unwrap_err();
        assert_eq!(e.field, "clusters", "{}", e.message);
        // 8 GPUs fit c2's pool (2 × 4) only.
        assert!(c.check(&pinned(&["c2"], 8), &admin(), 0).is_ok());
        let e = c.check(&pinned(&["c1"], 8), &admin(), 0).unwrap_err();
        assert_eq!(e.field, "gpus");
        assert!(e.message.contains("on cluster c1"), "{}", e.message);
    }

    /// A workload that may run only on clusters of the local executor has
    /// its `workdir` checked on this host: missing or not a directory is
    /// refused naming the field. One that may run on another cluster is
    /// not (that node's file system is not this host's).
    #[test]
    fn workdir_is_checked_on_this_host_only_when_the_workload_runs_here() {
        let e = catalog().check(&workdir("proj"), &admin(), 0).unwrap_err();
        assert_eq!((e.field.as_str(), e.message.as_str()), ("workdir", "must be an absolute path, got \"proj\""));
        let cfg = allot_trace::config::parse_config(FLEET, "f.toml").unwrap();
        let local = ClusterSet::of([ClusterId(0)]);
        let c = Catalog::with_local(State::new(cfg.cluster, cfg.accounts, cfg.contract), PolicyKind::Allot, local);
        let here = std::env::temp_dir().join(format!("allot-workdir-{}", std::process::id()));
        let (file, missing) = (here.join("file"), here.join("missing"));
        std::fs::create_dir_all(&here).unwrap();
        std::fs::write(&file, "").unwrap();
        let on = |dir: &std::path::Path, clusters: &[&str]| SubmitRequest {
            clusters: clusters.iter().map(|c| c.to_string()).collect(),
            ..workdir(&dir.display().to_string())
        };
        let e = c.check(&on(&missing, &["c1"]), &admin(), 0).unwrap_err();
        let want = "does not exist on this host, where the local executor runs the workload";
        assert_eq!((e.field, e.message), ("workdir".into(), format!("working directory {} {want}", missing.display())));
        let e = c.check(&on(&file, &["c1"]), &admin(), 0).unwrap_err();
        assert!(e.field == "workdir" && e.message.contains("is not a directory"), "{e:?}");
        let (row, _) = c.check(&on(&here, &["c1"]), &admin(), 0).unwrap();
        assert_eq!(row.workdir, Some(here.display().to_string()), "stored as sent");
        assert!(c.check(&on(&missing, &[]), &admin(), 0).is_ok(), "may run on c2: found at launch there");
        assert!(c.check(&on(&missing, &["c2"]), &admin(), 0).is_ok(), "c2 is not this host");
        std::fs::remove_dir_all(&here).unwrap();
    }

    #[test]
    fn defaults_and_row() {
        let (row, spec) = catalog().check(&req(), &admin(), 100).unwrap();
        assert_eq!((spec.work_s, spec.class, spec.submit), (DEFAULT_EXPECTED_S, Class::Batch, 100));
        assert_eq!((row.command.as_str(), row.env.as_str(), row.submitter.as_str()), (r#"["true"]"#, "{}", "ann"));
        assert_eq!(row.owner.as_deref(), Some("t1"), "owned by the token's id");
        let inter = SubmitRequest { class: Some("interactive".into()), ..req() };
        assert_eq!(catalog().check(&inter, &admin(), 0).unwrap().1.work_s, 8 * 3600, "the lane's maximum");
    }
}
