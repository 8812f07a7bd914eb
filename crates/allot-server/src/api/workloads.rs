//! `/v1/workloads`: submit, list, show (history and why), cancel.

use std::collections::HashMap;

use allot_core::WorkloadSpec;
use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::sync::oneshot;

use super::extract::{IdempotencyKey, Path};
use super::{ApiError, App, Auth, Body, ask};
use crate::scheduler::Msg;
use crate::store::{AttemptRow, Idempotency, Inserted, NewWorkload, WorkloadFilter, WorkloadRow};
use crate::views::{AttemptView, NodeGpusView, SubmitRequest, WorkloadDetail, WorkloadView};

pub(crate) const STATES: [&str; 7] = ["pending", "running", "stopping", "finished", "failed", "cancelled", "rejected"];

pub fn workload_view(r: &WorkloadRow) -> WorkloadView {
    WorkloadView {
        id: r.seq.to_string(),
        name: r.name.clone(),
        account: r.account.clone(),
        user: r.submitter.clone(),
        class: r.class.clone(),
        gpus: r.gpus as u32,
        nodes: r.nodes as u32,
        gpu_type: r.gpu_type.clone(),
        command: serde_json::from_str(&r.command).unwrap_or_default(),
        env: serde_json::from_str(&r.env).unwrap_or_default(),
        expected_duration_s: r.work_s as u64,
        checkpoint_interval_s: r.checkpoint_s as u64,
        retries: r.retries as u32,
        failures: r.failures as u32,
        state: r.state.clone(),
        reason: r.reason.clone(),
        submit_t: r.submit_t,
        end_t: r.end_t,
        cancel_requested: r.cancel_requested,
    }
}

pub fn attempt_view(a: &AttemptRow) -> AttemptView {
    AttemptView {
        attempt: a.attempt,
        state: a.state.clone(),
        allocation: serde_json::from_str::<Vec<NodeGpusView>>(&a.alloc).unwrap_or_default(),
        start_t: a.start_t,
        start_reason: a.start_reason.clone(),
        signal_t: a.signal_t,
        signal_reason: a.signal_reason.clone(),
        end_t: a.end_t,
        outcome: a.outcome.clone(),
        exit_code: a.exit_code,
        kept_s: a.kept_s,
        pid: a.pid,
        log_path: a.log_path.clone(),
    }
}

/// `POST /v1/workloads`: checked, authorised, committed, then handed to the
/// scheduler; 201 once the commit is durable and the scheduler has it.
/// With an `Idempotency-Key`, a retry returns the key's workload.
pub async fn submit(
    State(app): State<App>,
    Auth(who): Auth,
    IdempotencyKey(key): IdempotencyKey,
    Body(req): Body<SubmitRequest>,
) -> Result<Response, ApiError> {
    let now = crate::clock::now();
    // An account the caller may not submit to is answered as unknown (400).
    let (row, spec) = app.catalog.check(&req, &who, now).map_err(|e| ApiError::field(e.field, e.message))?;
    // Keys are the submitting token's (its stable id, not its name: a token
    // made later under a revoked one's name does not see its submissions).
    let key = key.map(|key| Idempotency {
        principal: who.token_id.clone(),
        key,
        request_hash: crate::secret::hash_token(&serde_json::to_string(&req).unwrap_or_default()),
    });
    // The commit and the hand-off run in a task of their own: a client that
    // goes away drops this handler, never a committed workload's hand-off.
    let handoff = tokio::spawn(commit(app.clone(), row.clone(), spec, req, key));
    let inserted = handoff.await.map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    match inserted {
        Inserted::New(seq) => {
            tracing::info!(workload = seq, account = %row.account, principal = %who.name, "submitted");
            Ok((StatusCode::CREATED, Json(workload_view(&new_row(seq, row)))).into_response())
        }
        Inserted::Replayed(seq) => {
            let stored =
                app.store.workload(seq).await?.ok_or_else(|| ApiError::not_found(format!("no workload {seq}")))?;
            tracing::info!(workload = seq, principal = %who.name, "submission replayed for its idempotency key");
            let mut r = (StatusCode::CREATED, Json(workload_view(&stored))).into_response();
            r.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
            Ok(r)
        }
        Inserted::KeyReused { workload } => Err(ApiError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            error: format!("this key was used for another request (workload {workload}); use a new key"),
            field: Some("Idempotency-Key".into()),
        }),
        Inserted::InProgress => Err(ApiError {
            status: StatusCode::CONFLICT,
            error: "a request with this key is still being committed; retry".into(),
            field: Some("Idempotency-Key".into()),
        }),
    }
}

/// Commits a submission, then waits until the scheduler has it. A
/// scheduler that is gone recovers it from the store at the next start.
async fn commit(
    app: App,
    row: NewWorkload,
    spec: WorkloadSpec,
    req: SubmitRequest,
    key: Option<Idempotency>,
) -> Result<Inserted, ApiError> {
    let inserted = app.store.submit_workload(&row, key.as_ref()).await?;
    if let Inserted::New(seq) = inserted {
        let (accepted, ack) = oneshot::channel();
        let msg = Msg::Submitted { seq, spec, command: req.command, env: req.env, retries: row.retries, accepted };
        if app.tx.send(msg).await.is_err() || ack.await.is_err() {
            tracing::warn!(workload = seq, "committed while the scheduler stops: it runs after the next start");
        }
    }
    Ok(inserted)
}

/// The stored row of a new submission.
fn new_row(seq: i64, row: NewWorkload) -> WorkloadRow {
    WorkloadRow {
        seq,
        owner: row.owner,
        submit_t: row.submit_t,
        account: row.account,
        submitter: row.submitter,
        class: row.class,
        gpus: row.gpus,
        nodes: row.nodes,
        gpu_type: row.gpu_type,
        work_s: row.work_s,
        checkpoint_s: row.checkpoint_s,
        util: row.util,
        priority: row.priority,
        preemptible: row.preemptible,
        name: row.name,
        command: row.command,
        env: row.env,
        retries: row.retries,
        failures: 0,
        cancel_requested: false,
        state: "pending".into(),
        reason: None,
        end_t: None,
    }
}

/// `GET /v1/workloads?account=&state=&user=&class=&limit=`
pub async fn list(
    State(app): State<App>,
    Auth(who): Auth,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Vec<WorkloadView>>, ApiError> {
    let mut f = WorkloadFilter { visible: who.visible_roots(), limit: 1000, ..Default::default() };
    for (k, v) in &q {
        match k.as_str() {
            "account" => f.account = Some(v.clone()),
            "user" => f.submitter = Some(v.clone()),
            "class" => f.class = Some(v.clone()),
            "state" => {
                for s in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    if !STATES.contains(&s) {
                        return Err(ApiError::field(
                            "state",
                            format!("unknown state {s:?} (use {})", STATES.join(", ")),
                        ));
                    }
                    f.states.push(s.to_string());
                }
            }
            "limit" => {
                f.limit = v
                    .parse::<i64>()
                    .ok()
                    .filter(|n| (1..=100_000).contains(n))
                    .ok_or_else(|| ApiError::field("limit", format!("expected 1 to 100000, got {v:?}")))?;
            }
            other => {
                return Err(ApiError::field(other, "unknown query parameter (use account, state, user, class, limit)"));
            }
        }
    }
    let rows = app.store.workloads(&f).await?;
    let redact = |t: &str| who.redact(t, |p| app.catalog.account_exists(p));
    let mut views: Vec<WorkloadView> = rows.iter().map(workload_view).collect();
    views.iter_mut().for_each(|v| v.redact(&redact));
    Ok(Json(views))
}

pub(crate) fn parse_id(id: &str) -> Result<i64, ApiError> {
    id.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| ApiError::not_found(format!("no workload {id:?}")))
}

/// Reads a workload the caller may see (404 when it does not exist or is
/// not theirs to see: the same answer for both).
async fn visible(app: &App, who: &crate::auth::Principal, id: &str) -> Result<WorkloadRow, ApiError> {
    let seq = parse_id(id)?;
    let row = app.store.workload(seq).await?.filter(|r| who.can_see(&r.account));
    row.ok_or_else(|| ApiError::not_found(format!("no workload {id}")))
}

/// `GET /v1/workloads/{id}`: the workload, its attempts and why.
pub async fn show(
    State(app): State<App>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> Result<Json<WorkloadDetail>, ApiError> {
    let row = visible(&app, &who, &id).await?;
    let attempts = app.store.attempts_of(row.seq).await?;
    let seq = row.seq;
    let live =
        if row.is_terminal() { None } else { ask(&app, |reply| Msg::Explain { seq, reply }).await.ok().flatten() };
    let why = live.or_else(|| {
        let preempted = attempts.last().and_then(|a| a.signal_reason.clone());
        row.reason.clone().or(preempted)
    });
    let mut detail =
        WorkloadDetail { workload: workload_view(&row), attempts: attempts.iter().map(attempt_view).collect(), why };
    detail.redact(&|t: &str| who.redact(t, |p| app.catalog.account_exists(p)));
    Ok(Json(detail))
}

/// `POST /v1/workloads/{id}/cancel`
pub async fn cancel(
    State(app): State<App>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> Result<Json<WorkloadView>, ApiError> {
    let row = visible(&app, &who, &id).await?;
    if !who.can_cancel(&row.account, row.owner.as_deref()) {
        return Err(ApiError::forbidden(format!(
            "{} ({}) may cancel only workloads its own token submitted; {} was submitted by {}",
            who.name,
            who.role.as_str(),
            row.seq,
            row.submitter
        )));
    }
    if row.is_terminal() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("workload {} has already ended ({})", row.seq, row.state),
        ));
    }
    let seq = row.seq;
    let by = who.name.clone();
    ask(&app, |reply| Msg::Cancel { seq, by, reply }).await??;
    let row = app.store.workload(seq).await?.ok_or_else(|| ApiError::not_found(format!("no workload {seq}")))?;
    Ok(Json(workload_view(&row)))
}
