//! `allot kubernetes manifests`: what a Kubernetes cluster's admin applies
//! once so that Allot can run the cluster's managed Jobs (docs/kubernetes.md).

use std::path::PathBuf;

use allot_server::executor::kubernetes::manifests::{self, ManifestOptions};
use anyhow::{Context, Result, bail};

#[derive(clap::Subcommand)]
pub enum KubeCommand {
    /// Print the admission policies, ClusterRole and binding (and with --deployment a Deployment of
    /// `allot serve`) as one List for `kubectl apply -f -`.
    Manifests(ManifestArgs),
}

#[derive(clap::Args)]
pub struct ManifestArgs {
    /// The config `allot serve` runs with: the contract's grace and the Kubernetes cluster's
    /// scheduler name come from it.
    #[arg(long)]
    config: PathBuf,
    /// The user name the API server gives Allot; only it may unsuspend managed Jobs.
    /// Default: the ServiceAccount allot in --namespace.
    #[arg(long)]
    identity: Option<String>,
    /// Bind Allot's ClusterRole to this user rather than to its ServiceAccount (an identity from a
    /// token file or a certificate); implies --identity USER.
    #[arg(long)]
    user: Option<String>,
    /// The namespace of Allot's ServiceAccount and Deployment.
    #[arg(long, default_value = "allot-system")]
    namespace: String,
    /// Also print the namespace, ServiceAccount, ConfigMap (the config) and Deployment of `allot serve`.
    #[arg(long)]
    deployment: bool,
    /// The image of the Deployment.
    #[arg(long, default_value = "allot:latest")]
    image: String,
}

pub fn run(c: KubeCommand) -> Result<()> {
    let KubeCommand::Manifests(a) = c;
    let cfg = allot_trace::config::load_config(&a.config)?;
    let kube: Vec<_> = cfg.executors.iter().flatten().filter(|e| e.kind == "kubernetes").collect();
    let Some(first) = kube.first() else {
        bail!(
            "{}: no cluster has kind = \"kubernetes\" in its [clusters.executor] (docs/kubernetes.md)",
            a.config.display()
        );
    };
    let identity = match (&a.identity, &a.user) {
        (Some(i), _) => i.clone(),
        (None, Some(u)) => u.clone(),
        (None, None) => format!("system:serviceaccount:{}:allot", a.namespace),
    };
    let text = std::fs::read_to_string(&a.config).with_context(|| format!("cannot read {}", a.config.display()))?;
    let o = ManifestOptions {
        identity,
        user: a.user.clone(),
        namespace: a.namespace.clone(),
        image: a.image.clone(),
        grace_s: cfg.contract.grace,
        scheduler_name: first.scheduler_name.clone().unwrap_or_else(|| "allot".into()),
        config_text: text,
    };
    println!("{}", serde_json::to_string_pretty(&manifests::all(&o, a.deployment))?);
    Ok(())
}
