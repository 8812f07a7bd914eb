//! `/v1/workloads`: submit, list, show (history and why), cancel, logs.

use std::collections::HashMap;

use allot_core::cluster::ClusterId;
use allot_core::{Cluster, Phase};
use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::sync::oneshot;

use super::extract::{IdempotencyKey, Path};
use super::{ApiError, ApiErrors, App, Auth, Body, ErrorKind, ask, cluster_filter};
use crate::auth::Principal;
use crate::scheduler::{Live, Msg, Submission};
use crate::store::{AttemptRow, ClusterFilter, Idempotency, Inserted, NewWorkload, WorkloadFilter, WorkloadRow};
use crate::views::{AttemptTelemetry, AttemptView, NodeGpusView, SubmitRequest, WorkloadDetail, WorkloadView};

/// A cluster as the store filters by it: its name and its pools' GPU types.
fn cluster_filter_of(c: &Cluster, id: ClusterId) -> ClusterFilter {
    let mut gpu_types: Vec<String> =
        c.pools.iter().filter(|p| p.cluster == id).map(|p| c.gpu_types[p.gpu.0 as usize].name.clone()).collect();
    gpu_types.sort();
    gpu_types.dedup();
    ClusterFilter { name: c.cluster_name(id).to_string(), gpu_types }
}

/// What a workload's env value is shown as to whoever may not read it.
pub const HIDDEN_ENV_VALUE: &str = "(hidden)";

/// Whether `who` may read the env values of a workload submitted by the
/// token `owner`: its owner (compared as [`Principal::can_cancel`] does for
/// researchers) and admins. Env values are where people put API keys; the
/// others who see the workload see the names only.
fn may_read_env(who: &Principal, owner: Option<&str>) -> bool {
    who.is_admin() || owner == Some(who.token_id.as_str())
}

/// The API's view of a workload as `who` may see it (the one place views
/// are built: the list, the detail, a submission's and a cancel's answers,
/// and through them the dashboard and the command line): env values are
/// masked unless [`may_read_env`].
pub fn workload_view(r: &WorkloadRow, who: &Principal) -> WorkloadView {
    let mut env: std::collections::BTreeMap<String, String> = serde_json::from_str(&r.env).unwrap_or_default();
    if !may_read_env(who, r.owner.as_deref()) {
        env.values_mut().for_each(|v| *v = HIDDEN_ENV_VALUE.to_string());
    }
    WorkloadView {
        id: r.seq.to_string(),
        name: r.name.clone(),
        account: r.account.clone(),
        user: r.submitter.clone(),
        class: r.class.clone(),
        gpus: r.gpus as u32,
        nodes: r.nodes as u32,
        gpu_type: r.gpu_type.clone(),
        clusters: r.clusters.as_deref().map_or_else(Vec::new, |c| c.split(',').map(String::from).collect()),
        command: serde_json::from_str(&r.command).unwrap_or_default(),
        env,
        expected_duration_s: r.work_s as u64,
        checkpoint_interval_s: r.checkpoint_s as u64,
        time_limit_s: r.time_limit_s.map(|l| l as u64),
        workdir: r.workdir.clone(),
        checkpoint_on_signal: r.checkpoint_on_signal,
        retries: r.retries as u32,
        failures: r.failures as u32,
        state: r.state.clone(),
        reason: r.reason.clone(),
        submit_t: r.submit_t,
        end_t: r.end_t,
        cancel_requested: r.cancel_requested,
        cluster: r.last_cluster.clone(),
        measured_util: r.measured_util,
        on_nodes: r
            .last_alloc
            .as_deref()
            .map(|a| serde_json::from_str::<Vec<NodeGpusView>>(a).unwrap_or_default())
            .unwrap_or_default()
            .into_iter()
            .map(|n| n.node)
            .collect(),
        started_t: r.last_start_t,
        array: r.conditions.array_id.zip(r.conditions.array_index).map(|(id, index)| crate::views::ArrayView {
            id: id.to_string(),
            index: index as u32,
            element: format!("{id}_{index}"),
            count: r.conditions.array_count.unwrap_or(0) as u32,
            limit: r.conditions.array_limit.map(|l| l as u32),
        }),
        dependency: r.conditions.depends_on.clone(),
        // An ended workload is no longer held, whatever it was when it ended.
        held: r.conditions.held && !r.is_terminal(),
        attempts: r.attempts.max(0) as u32,
        gpu_hours: r.ended_gpu_s.max(0) as f64 / 3600.0,
        first_start_t: r.first_start_t,
    }
}

pub fn attempt_view(a: &AttemptRow) -> AttemptView {
    AttemptView {
        attempt: a.attempt,
        state: a.state.clone(),
        allocation: serde_json::from_str::<Vec<NodeGpusView>>(&a.alloc).unwrap_or_default(),
        cluster: a.cluster.clone(),
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
        telemetry: a.telemetry.as_ref().map(|g| AttemptTelemetry {
            samples: g.samples.max(0) as u64,
            util_mean: g.util_mean,
            measured_s: g.measured_s.max(0) as u64,
            idle_s: g.idle_s.max(0) as u64,
            mem_max_mib: g.mem_max_mib.max(0) as u64,
            last_sample_t: g.last_t,
        }),
        checkpoints: a.checkpoints,
        checkpoint_t: a.checkpoint_t,
        checkpoint_saved_s: a.checkpoint_saved_s,
        idle_warning_t: a.idle_warning_t,
        idle_reclaim_t: a.idle_reclaim_t,
    }
}

/// `POST /v1/workloads`: checked, authorised, committed, then handed to the
/// scheduler; 201 once the commit is durable and the scheduler has it.
/// With an `Idempotency-Key`, a retry returns the key's workload.
#[utoipa::path(post, path = "/v1/workloads", summary = "submit a workload (201 once committed and accepted by the scheduler)", description = "Roles: admin; manager inside the scope; researcher to granted projects.", security(("bearer" = [])), params(("Idempotency-Key" = Option<String>, Header, nullable = false, description = "the same key from the same principal returns the key's workload (201 with Idempotent-Replayed: true) instead of creating another; reused with another request: 422", min_length = 1, max_length = 255, pattern = "^[!-~][ -~]*$")), request_body = SubmitRequest, responses((status = 201, description = "committed", body = WorkloadView, headers(("Idempotent-Replayed" = String, description = "true when the key's earlier workload is returned"))), ApiErrors))]
pub async fn submit(
    State(app): State<App>,
    Auth(who): Auth,
    IdempotencyKey(key): IdempotencyKey,
    Body(req): Body<SubmitRequest>,
) -> Result<Response, ApiError> {
    if req.image.is_some() {
        let row = super::image::submit(&app, &who, req, key).await?;
        return Ok((StatusCode::CREATED, Json(workload_view(&row, &who))).into_response());
    }
    let (inserted, row) = submit_as(&app, &who, req, key).await?;
    match inserted {
        Inserted::New(seq) => {
            tracing::info!(workload = seq, account = %row.account, principal = %who.name, "submitted");
            let mut row = new_row(seq, row);
            if row.conditions.array_index.is_some() {
                row.conditions.array_id = Some(seq);
            }
            Ok((StatusCode::CREATED, Json(workload_view(&row, &who))).into_response())
        }
        Inserted::Replayed(seq) => {
            let stored =
                app.store.workload(seq).await?.ok_or_else(|| ApiError::not_found(format!("no workload {seq}")))?;
            tracing::info!(workload = seq, principal = %who.name, "submission replayed for its idempotency key");
            let mut r = (StatusCode::CREATED, Json(workload_view(&stored, &who))).into_response();
            r.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
            Ok(r)
        }
        Inserted::KeyReused { workload } => Err(ApiError {
            kind: ErrorKind::Unprocessable,
            error: format!("this key was used for another request (workload {workload}); use a new key"),
            field: Some("Idempotency-Key".into()),
        }),
        Inserted::InProgress => Err(ApiError {
            kind: ErrorKind::Conflict,
            error: "a request with this key is still being committed; retry".into(),
            field: Some("Idempotency-Key".into()),
        }),
    }
}

/// Checks, commits and hands a submission by `who` to the scheduler: the
/// API's `POST /v1/workloads` and the Kubernetes executor's Jobs (K8S-1)
/// alike. `key`: the idempotency key, scoped to `who`'s token id.
pub(crate) async fn submit_as(
    app: &App,
    who: &Principal,
    req: SubmitRequest,
    key: Option<String>,
) -> Result<(Inserted, NewWorkload), ApiError> {
    let now = crate::clock::now();
    // An account the caller may not submit to is answered as unknown (400).
    let (mut row, spec) = app.catalog.check(&req, who, now).map_err(|e| ApiError::field(e.field, e.message))?;
    // ID-1: it runs as its submitter's Unix user (the Kubernetes
    // executor's Jobs run as their pods say).
    if !who.token_id.starts_with("kubernetes:") {
        row.run_as = app
            .run
            .run_as(&who.name, who.unix_user.as_deref())
            .map_err(ApiError::forbidden)?
            .user()
            .map(str::to_string);
    }
    let hold = req.hold.unwrap_or(false);
    let plan =
        super::conditions::plan(app, who, req.array.as_deref(), req.dependency.as_deref(), hold, row, spec).await?;
    let row = plan.rows[0].clone();
    // Keys are the submitting token's (its stable id, not its name: a token
    // made later under a revoked one's name does not see its submissions).
    let key = key.map(|key| Idempotency {
        principal: who.token_id.clone(),
        key,
        request_hash: crate::secret::hash_token(&serde_json::to_string(&req).unwrap_or_default()),
    });
    // The commit and the hand-off run in a task of their own: a client that
    // goes away drops this handler, never a committed workload's hand-off.
    let handoff = tokio::spawn(commit(app.clone(), plan, req, key));
    let inserted = handoff.await.map_err(|e| ApiError::new(ErrorKind::Internal, e.to_string()))??;
    Ok((inserted, row))
}

/// Commits a submission, then waits until the scheduler has it. A
/// scheduler that is gone recovers it from the store at the next start.
async fn commit(
    app: App,
    plan: super::conditions::Plan,
    req: SubmitRequest,
    key: Option<Idempotency>,
) -> Result<Inserted, ApiError> {
    let (inserted, seqs) = app.store.submit_workloads(&plan.rows, key.as_ref()).await?;
    if let Inserted::New(first) = inserted {
        let workdir = req.workdir.map(std::path::PathBuf::from);
        for ((seq, mut spec), row) in seqs.into_iter().zip(plan.specs).zip(&plan.rows) {
            if let Some(a) = spec.array.as_mut() {
                a.array = first as u64;
            }
            let (accepted, ack) = oneshot::channel();
            let live = Live {
                seq,
                command: req.command.clone(),
                env: req.env.clone(),
                workdir: workdir.clone(),
                run_as: app.run.stored(row.run_as.as_deref()),
                after: plan.after.clone(),
            };
            let msg = Msg::Submitted(Box::new(Submission { spec, live, retries: row.retries, accepted }));
            if app.tx.send(msg).await.is_err() || ack.await.is_err() {
                tracing::warn!(workload = seq, "committed while the scheduler stops: it runs after the next start");
            }
        }
    }
    Ok(inserted)
}

/// The stored row of a new submission.
fn new_row(seq: i64, row: NewWorkload) -> WorkloadRow {
    WorkloadRow {
        seq,
        owner: row.owner,
        run_as: row.run_as,
        submit_t: row.submit_t,
        account: row.account,
        submitter: row.submitter,
        class: row.class,
        gpus: row.gpus,
        nodes: row.nodes,
        gpu_type: row.gpu_type,
        clusters: row.clusters,
        work_s: row.work_s,
        checkpoint_s: row.checkpoint_s,
        util: row.util,
        priority: row.priority,
        preemptible: row.preemptible,
        name: row.name,
        command: row.command,
        env: row.env,
        retries: row.retries,
        time_limit_s: row.time_limit_s,
        workdir: row.workdir,
        checkpoint_on_signal: row.checkpoint_on_signal,
        conditions: row.conditions,
        failures: 0,
        cancel_requested: false,
        state: Phase::Pending.as_str().into(),
        reason: None,
        end_t: None,
        last_cluster: None,
        measured_util: None,
        last_alloc: None,
        last_start_t: None,
        attempts: 0,
        ended_gpu_s: 0,
        first_start_t: None,
    }
}

/// `GET /v1/workloads?account=&state=&user=&class=&limit=`
#[utoipa::path(get, path = "/v1/workloads", summary = "list workloads the caller sees, newest first (a pending one's reason is the policy's explanation now)", description = "Roles: any (filtered).", security(("bearer" = [])), params(("account" = Option<String>, Query, description = "subtree"), ("state" = Option<String>, Query, description = "comma-separated states"), ("user" = Option<String>, Query), ("class" = Option<String>, Query), ("name" = Option<String>, Query, description = "workloads of this name"), ("array" = Option<i64>, Query, description = "the elements of this array (ARR-1)"), ("cluster" = Option<String>, Query, description = "clusters of the fleet, comma-separated: pending workloads (and those that never ran) eligible for one of them, the others whose last attempt ran on one"), ("limit" = Option<i64>, Query, description = "1 to 100000 (default 1000)"), ("before" = Option<i64>, Query, description = "only workloads with an id below this one: the next page, newest first")), responses((status = 200, description = "success", body = Vec<WorkloadView>), ApiErrors))]
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
            "name" => f.name = Some(v.clone()),
            "array" => {
                let bad = || ApiError::field("array", format!("expected an array's id, got {v:?}"));
                f.array = Some(v.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(bad)?);
            }
            "cluster" => {
                let set = cluster_filter(&app, v)?;
                let c = app.catalog.cluster();
                // In a fleet of one every workload is of its cluster.
                if c.is_fleet() && !set.is_any() {
                    let ids = (0..c.clusters.len()).map(|i| ClusterId(i as u16)).filter(|&i| set.contains(i));
                    f.clusters = Some(ids.map(|i| cluster_filter_of(&c, i)).collect());
                }
            }
            "state" => f.states = super::conditions::states(v)?,
            "before" => {
                f.before = Some(
                    v.parse::<i64>()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| ApiError::field("before", format!("expected a workload id, got {v:?}")))?,
                );
            }
            "limit" => {
                f.limit = v
                    .parse::<i64>()
                    .ok()
                    .filter(|n| (1..=100_000).contains(n))
                    .ok_or_else(|| ApiError::field("limit", format!("expected 1 to 100000, got {v:?}")))?;
            }
            other => {
                return Err(ApiError::field(
                    other,
                    "unknown query parameter (use account, state, user, class, name, array, cluster, before, limit)",
                ));
            }
        }
    }
    let rows = app.store.workloads(&f).await?;
    let redact = |t: &str| who.redact(t, |p| app.catalog.account_exists(p));
    let mut views: Vec<WorkloadView> = rows.iter().map(|r| workload_view(r, &who)).collect();
    // A pending workload's reason is the policy's explanation now (one
    // pass for the whole page), as `GET /v1/workloads/{id}` gives it.
    let seqs: Vec<i64> = rows.iter().filter(|r| r.state == Phase::Pending.as_str()).map(|r| r.seq).collect();
    if !seqs.is_empty()
        && let Ok(reasons) = ask(&app, |reply| Msg::ExplainPending { seqs: seqs.clone(), reply }).await
    {
        let live: HashMap<String, String> =
            seqs.iter().zip(reasons).filter_map(|(s, r)| Some((s.to_string(), r?))).collect();
        for v in &mut views {
            if let Some(r) = live.get(&v.id) {
                v.reason = Some(r.clone());
            }
        }
    }
    views.iter_mut().for_each(|v| v.redact(&redact));
    Ok(Json(views))
}

/// Reads a workload the caller may see (404 when it does not exist or is
/// not theirs to see: the same answer for both).
async fn visible(app: &App, who: &crate::auth::Principal, id: &str) -> Result<WorkloadRow, ApiError> {
    let seq = super::conditions::seq_of(app, id).await?;
    let row = app.store.workload(seq).await?.filter(|r| who.can_see(&r.account));
    row.ok_or_else(|| ApiError::not_found(format!("no workload {id}")))
}

/// `GET /v1/workloads/{id}`: the workload, its attempts and why.
#[utoipa::path(get, path = "/v1/workloads/{id}", summary = "a workload, its attempts and why it is pending or was stopped", description = "Roles: whoever sees its account.", security(("bearer" = [])), params(("id" = String, Path, description = "the workload's id")), responses((status = 200, description = "success", body = WorkloadDetail), ApiErrors))]
pub async fn show(
    State(app): State<App>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> Result<Json<WorkloadDetail>, ApiError> {
    let seq = super::conditions::seq_of(&app, &id).await?;
    let detail = app.store.workload_detail(seq).await?.filter(|(r, _)| who.can_see(&r.account));
    let (row, attempts) = detail.ok_or_else(|| ApiError::not_found(format!("no workload {id}")))?;
    let live =
        if row.is_terminal() { None } else { ask(&app, |reply| Msg::Explain { seq, reply }).await.ok().flatten() };
    let why = live.or_else(|| {
        let preempted = attempts.last().and_then(|a| a.signal_reason.clone());
        row.reason.clone().or(preempted)
    });
    let mut detail = WorkloadDetail {
        workload: workload_view(&row, &who),
        attempts: attempts.iter().map(attempt_view).collect(),
        why,
    };
    detail.redact(&|t: &str| who.redact(t, |p| app.catalog.account_exists(p)));
    Ok(Json(detail))
}

/// `POST /v1/workloads/{id}/cancel`
#[utoipa::path(post, path = "/v1/workloads/{id}/cancel", summary = "cancel (a running workload is signalled and stopped after grace; an array's id cancels all its elements)", description = "Roles: admin; manager inside the scope; researcher own workloads.", security(("bearer" = [])), params(("id" = String, Path, description = "the workload's id")), responses((status = 200, description = "success", body = WorkloadView), ApiErrors))]
pub async fn cancel(
    State(app): State<App>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> Result<Json<WorkloadView>, ApiError> {
    let row = visible(&app, &who, &id).await?;
    // An array's id names all its elements (12_0 is its first alone).
    if row.conditions.array_id == Some(row.seq) && !id.contains('_') {
        let req = super::conditions::BulkRequest { ids: vec![id], ..Default::default() };
        let results = super::conditions::cancel_many(State(app.clone()), Auth(who.clone()), Body(req)).await?;
        if let Some(e) = results.0.iter().find_map(|r| r.error.clone()).filter(|_| results.0.len() == 1) {
            return Err(ApiError::new(ErrorKind::Conflict, e));
        }
        let row = app
            .store
            .workload(row.seq)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("no workload {}", row.seq)))?;
        return Ok(Json(workload_view(&row, &who)));
    }
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
            ErrorKind::Conflict,
            format!("workload {} has already ended ({})", row.seq, row.state),
        ));
    }
    let seq = row.seq;
    let by = who.name.clone();
    ask(&app, |reply| Msg::Cancel { seq, by, reply }).await??;
    let row = app.store.workload(seq).await?.ok_or_else(|| ApiError::not_found(format!("no workload {seq}")))?;
    Ok(Json(workload_view(&row, &who)))
}

/// `POST /v1/workloads/{id}/checkpoint`: a running attempt reports a
/// completed checkpoint (CON-7) with the credential Allot gave it
/// (`ALLOT_ATTEMPT_TOKEN`), which can do nothing else; a stop then keeps
/// the progress it had now.
#[utoipa::path(post, path = "/v1/workloads/{id}/checkpoint", summary = "report a completed checkpoint of the running attempt (CON-7)", description = "Only with the attempt credential Allot puts in the attempt's environment (ALLOT_ATTEMPT_TOKEN); API tokens are refused. Another workload's credential: 403; an attempt that has ended: 401 or 409.", security(("bearer" = [])), params(("id" = String, Path, description = "the workload's id")), responses((status = 200, description = "taken", body = crate::views::CheckpointView), ApiErrors))]
pub async fn checkpoint(
    State(app): State<App>,
    headers: axum::http::HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<crate::views::CheckpointView>, ApiError> {
    let token = super::bearer(&headers)?.to_string();
    let seq = id.parse::<i64>().map_err(|_| ApiError::not_found(format!("no workload {id}")))?;
    Ok(Json(ask(&app, |reply| Msg::CheckpointReport { seq, token, reply }).await??))
}

/// Largest chunk of a log one request returns.
pub const MAX_LOG_CHUNK: u64 = 1024 * 1024;

/// A chunk of an attempt's log: the bytes, the offset after them, and
/// whether the log is complete (the attempt ended and nothing follows).
pub struct LogChunk {
    pub bytes: Vec<u8>,
    pub next: u64,
    pub done: bool,
}

impl IntoResponse for LogChunk {
    fn into_response(self) -> Response {
        let mut r = ([(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"))], self.bytes)
            .into_response();
        // What a workload wrote: never run, sniffed, framed or cached as a page.
        crate::headers::security_headers(r.headers_mut());
        r.headers_mut().insert("x-log-offset", HeaderValue::from(self.next));
        if self.done {
            r.headers_mut().insert("x-log-done", HeaderValue::from_static("true"));
        }
        r
    }
}

/// `GET /v1/workloads/{id}/log?attempt=&offset=&limit=`: an attempt's
/// output (stdout and stderr), from a byte offset, as plain text.
#[utoipa::path(get, path = "/v1/workloads/{id}/log", summary = "an attempt's output (stdout and stderr) from a byte offset; follow it by asking again from X-Log-Offset until X-Log-Done", description = "Roles: whoever sees its account.", security(("bearer" = [])), params(("id" = String, Path, description = "the workload's id"), ("attempt" = Option<i64>, Query, description = "the attempt (default: the last)"), ("offset" = Option<u64>, Query, description = "first byte (default 0)"), ("limit" = Option<u64>, Query, description = "most bytes returned, 1 to 1048576 (default 65536)")), responses((status = 200, description = "the bytes from offset (possibly none yet)", content_type = "text/plain", body = String, headers(("X-Log-Offset" = u64, description = "the offset after these bytes: ask from there next"), ("X-Log-Done" = String, description = "true when the attempt has ended and the log is read to its end"))), ApiErrors))]
pub async fn log(
    State(app): State<App>,
    Auth(who): Auth,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<LogChunk, ApiError> {
    let (mut attempt, mut offset, mut limit) = (None, 0u64, 64 * 1024u64);
    for (k, v) in &q {
        let bad = |what: &str| ApiError::field(k.clone(), format!("expected {what}, got {v:?}"));
        match k.as_str() {
            "attempt" => {
                attempt =
                    Some(v.parse::<i64>().ok().filter(|n| *n >= 1).ok_or_else(|| bad("an attempt number from 1"))?)
            }
            "offset" => offset = v.parse::<u64>().map_err(|_| bad("a byte offset"))?,
            "limit" => {
                limit = v
                    .parse::<u64>()
                    .ok()
                    .filter(|n| (1..=MAX_LOG_CHUNK).contains(n))
                    .ok_or_else(|| bad("1 to 1048576"))?
            }
            other => return Err(ApiError::field(other, "unknown query parameter (use attempt, offset, limit)")),
        }
    }
    let seq = super::conditions::seq_of(&app, &id).await?;
    let detail = app.store.workload_detail(seq).await?.filter(|(r, _)| who.can_see(&r.account));
    let (_, attempts) = detail.ok_or_else(|| ApiError::not_found(format!("no workload {id}")))?;
    let a = match attempt {
        Some(n) => attempts.iter().find(|a| a.attempt == n).ok_or_else(|| {
            ApiError::not_found(format!("workload {id} has no attempt {n} (it has {})", attempts.len()))
        })?,
        None => attempts.last().ok_or_else(|| ApiError::not_found(format!("workload {id} has not started yet")))?,
    };
    let ended = a.end_t.is_some();
    read_log(std::path::PathBuf::from(&a.log_path), offset, limit, ended).await
}

/// Reads `limit` bytes of the log at `path` from `offset`; a log not yet
/// written is empty. The log lives in a directory of the workload's user:
/// it is read only as a plain file, never through a link the workload put
/// in its place (which would publish any file of the server's host).
async fn read_log(path: std::path::PathBuf, offset: u64, limit: u64, ended: bool) -> Result<LogChunk, ApiError> {
    tokio::task::spawn_blocking(move || {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = match crate::executor::runas::open_for_reading(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(LogChunk { bytes: Vec::new(), next: offset, done: ended });
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) || e.kind() == std::io::ErrorKind::Other => {
                return Err(ApiError::new(
                    ErrorKind::Conflict,
                    format!("the log was replaced by something other than a plain file ({e}): it is not served"),
                ));
            }
            Err(e) => return Err(ApiError::new(ErrorKind::Unavailable, format!("cannot read the log: {e}"))),
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let from = offset.min(len);
        f.seek(SeekFrom::Start(from))
            .map_err(|e| ApiError::new(ErrorKind::Unavailable, format!("cannot read the log: {e}")))?;
        let mut bytes = Vec::with_capacity(limit.min(len - from) as usize);
        f.take(limit)
            .read_to_end(&mut bytes)
            .map_err(|e| ApiError::new(ErrorKind::Unavailable, format!("cannot read the log: {e}")))?;
        let next = from + bytes.len() as u64;
        Ok(LogChunk { bytes, next, done: ended && next >= len })
    })
    .await
    .map_err(|_| ApiError::unavailable())?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The raw log is what a workload wrote: served with the dashboard
    /// pages' security headers, so a browser never runs or frames it.
    #[test]
    fn a_log_chunk_carries_the_pages_security_headers() {
        let r = LogChunk { bytes: b"<script>alert(1)</script>".to_vec(), next: 25, done: true }.into_response();
        let h = |name: &str| r.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        assert_eq!(h("content-type"), "text/plain; charset=utf-8");
        assert_eq!(h("x-content-type-options"), "nosniff");
        assert_eq!(h("x-frame-options"), "DENY");
        assert_eq!(h("referrer-policy"), "same-origin");
        assert_eq!(h("cache-control"), "no-store");
        let csp = h("content-security-policy");
        assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"), "{csp}");
        assert_eq!((h("x-log-offset").as_str(), h("x-log-done").as_str()), ("25", "true"));
    }
}
