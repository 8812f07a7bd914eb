//! The Kubernetes executor's way into the server ([`Front`]): a managed Job
//! is submitted exactly as `POST /v1/workloads` submits (the same check,
//! commit and hand-off), by a principal standing for the Job's namespace
//! and creator, granted the accounts they may charge (K8S-2).

use allot_core::Phase;

use super::App;
use crate::auth::{Principal, Role};
use crate::executor::BoxFuture;
use crate::executor::kubernetes::{Front, JobShape, job};
use crate::scheduler::Msg;
use crate::store::{Idempotency, Inserted, NewWorkload, Op};

/// The server as the Kubernetes executor of cluster `cluster` sees it.
pub struct ApiFront {
    pub app: App,
    pub cluster: String,
}

impl ApiFront {
    /// Who submits `job`: its creator, granted what its namespace and
    /// creator may charge; its workloads are owned by the cluster.
    fn principal(&self, job: &JobShape) -> Principal {
        Principal {
            name: job.user.clone().unwrap_or_else(|| format!("kubernetes:{}", job.namespace)),
            role: Role::Researcher,
            scopes: Vec::new(),
            projects: job.grants.clone(),
            token_id: format!("kubernetes:{}", self.cluster),
            unix_user: None,
        }
    }
}

impl Front for ApiFront {
    fn submit(&self, job: JobShape) -> BoxFuture<'_, Result<i64, String>> {
        Box::pin(async move {
            let who = self.principal(&job);
            let req = job::request(&job, &self.cluster);
            match super::workloads::submit_as(&self.app, &who, req, Some(format!("job:{}", job.uid))).await {
                Ok((Inserted::New(seq) | Inserted::Replayed(seq) | Inserted::KeyReused { workload: seq }, _)) => {
                    Ok(seq)
                }
                Ok((Inserted::InProgress, _)) => Err("K8S-1: the Job's submission is still being committed".into()),
                Err(e) => Err(match &e.field {
                    Some(f) => format!("{}: {}", request_field(f), e.error),
                    None => e.error.clone(),
                }),
            }
        })
    }

    fn reject(&self, job: JobShape, reason: String) -> BoxFuture<'_, Option<i64>> {
        Box::pin(async move {
            let now = crate::clock::now() as i64;
            let row = NewWorkload {
                run_as: None,
                owner: Some(format!("kubernetes:{}", self.cluster)),
                submit_t: now,
                account: job.account.clone(),
                submitter: job.user.clone().unwrap_or_default(),
                class: job.class.clone().unwrap_or_else(|| "batch".into()),
                gpus: i64::from(job.gpus()),
                nodes: i64::from(job.pods),
                gpu_type: None,
                clusters: Some(self.cluster.clone()),
                work_s: job.expected_s.unwrap_or(0) as i64,
                checkpoint_s: job.checkpoint_s.unwrap_or(0) as i64,
                util: 1.0,
                priority: "normal".into(),
                preemptible: false,
                name: Some(job.key()),
                command: serde_json::to_string(&["kubernetes-job", &job.key()]).expect("strings serialise"),
                env: "{}".into(),
                retries: 0,
                time_limit_s: None,
                workdir: None,
                checkpoint_on_signal: false,
                conditions: Default::default(),
            };
            // One rejected workload per refused version of the Job.
            let key = Idempotency {
                principal: format!("kubernetes:{}", self.cluster),
                key: format!("job-refused:{}:{}", job.uid, crate::secret::hash_token(&reason)),
                request_hash: crate::secret::hash_token(&reason),
            };
            let seq = match self.app.store.submit_workloads(&[row], Some(&key)).await {
                Ok((Inserted::New(seq), _)) => seq,
                Ok((Inserted::Replayed(seq) | Inserted::KeyReused { workload: seq }, _)) => return Some(seq),
                Ok((Inserted::InProgress, _)) => return None,
                Err(e) => {
                    tracing::warn!(job = %job.key(), error = %e, "cannot record the refused Job");
                    return None;
                }
            };
            let op = Op::WorkloadState { seq, state: Phase::Rejected, reason, end_t: Some(now) };
            if let Err(e) = self.app.store.apply(&[op]).await {
                tracing::warn!(job = %job.key(), workload = seq, error = %e, "cannot record the refusal");
            }
            Some(seq)
        })
    }

    fn cancel(&self, seq: i64, by: String) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            match super::ask(&self.app, |reply| Msg::Cancel { seq, by, reply }).await {
                Ok(Ok(state)) => tracing::info!(workload = seq, state, "cancelled: its Job was deleted"),
                Ok(Err(r)) => tracing::info!(workload = seq, refusal = ?r, "its Job was deleted; not cancelled"),
                Err(e) => {
                    tracing::warn!(workload = seq, error = %e.error, "cannot cancel the workload of a deleted Job")
                }
            }
        })
    }

    fn reasons(&self, seqs: Vec<i64>) -> BoxFuture<'_, Vec<Option<String>>> {
        Box::pin(async move {
            let mut out = super::ask(&self.app, |reply| Msg::ExplainPending { seqs: seqs.clone(), reply })
                .await
                .unwrap_or_else(|_| vec![None; seqs.len()]);
            // Not pending (a cancelled Job, suspended for good): its last reason.
            for (seq, reason) in seqs.iter().zip(out.iter_mut()).filter(|(_, r)| r.is_none()) {
                let seq = *seq;
                *reason = super::ask(&self.app, |reply| Msg::Explain { seq, reply }).await.ok().flatten();
            }
            out
        })
    }
}

/// The Job's own name for a submission field the check refused.
fn request_field(field: &str) -> String {
    match field {
        "account" => format!("K8S-1: annotation {}", crate::executor::kubernetes::ACCOUNT),
        "gpus" | "nodes" => "K8S-1: the Job's pods (parallelism × GPUs per pod)".into(),
        "class" => format!("K8S-1: annotation {}", crate::executor::kubernetes::CLASS),
        "expected_duration_s" => format!("K8S-1: annotation {}", crate::executor::kubernetes::EXPECTED),
        "checkpoint_interval_s" => format!("K8S-1: annotation {}", crate::executor::kubernetes::CHECKPOINT),
        f => format!("K8S-1: {f}"),
    }
}
