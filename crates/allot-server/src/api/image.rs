//! `POST /v1/workloads` with an image (K8S-12): the submission becomes a
//! managed Job of a Kubernetes cluster of the fleet, which the cluster's
//! executor creates and ingests.

use super::{ApiError, App, ErrorKind};
use crate::auth::Principal;
use crate::executor::kubernetes::job;
use crate::store::WorkloadRow;

/// K8S-12: `POST /v1/workloads` with an image: checked as any submission
/// of `who` (and for the fields a Job carries), made a managed Job of the
/// Kubernetes cluster in the namespace that may charge its account, and
/// ingested as every Job is. The answer is its workload, named after the
/// Job. A retry with the same idempotency key finds the same Job (its name
/// is derived from the key) instead of creating a second.
pub(crate) async fn submit(
    app: &App,
    who: &Principal,
    req: crate::views::SubmitRequest,
    key: Option<String>,
) -> Result<WorkloadRow, ApiError> {
    let now = crate::clock::now();
    let cluster = app.catalog.check_image(&req, who, now).map_err(|e| ApiError::field(e.field, e.message))?;
    let exec =
        app.kube.iter().find(|k| k.cluster() == cluster).ok_or_else(|| {
            ApiError::field("clusters", format!("K8S-12: cluster {cluster} has no Kubernetes executor"))
        })?;
    let opts = exec.options();
    let namespace =
        opts.namespace_for(&req.account, req.namespace.as_deref()).map_err(|e| ApiError::field("namespace", e))?;
    let name = key.as_ref().map(|k| {
        let h = crate::secret::hash_token(&format!("{}\u{0}{k}", who.token_id));
        format!("{}-{}", job::job_name_prefix(req.name.as_deref()), &h[..10])
    });
    let image = req.image.as_deref().unwrap_or_default();
    opts.image_allowed(&namespace, image).map_err(|e| ApiError::field("image", e))?;
    // ID-1: the pod runs as its submitter's Unix user (resolved now).
    let run_as = app.run.pod_user(&who.name, who.unix_user.as_deref()).map_err(ApiError::forbidden)?;
    let new = job::NewJob { req: &req, image, namespace, submitter: &who.name, name, run_as: run_as.as_ref() };
    let made = job::build(&new, opts).map_err(|e| ApiError::field("clusters", e))?;
    let (job_key, seq) = exec.create(made).await.map_err(|e| ApiError::new(ErrorKind::Unprocessable, e))?;
    let row = app.store.workload(seq).await?.ok_or_else(|| ApiError::not_found(format!("no workload {seq}")))?;
    tracing::info!(workload = seq, job = %job_key, account = %row.account, principal = %who.name, "submitted as a Job");
    Ok(row)
}
