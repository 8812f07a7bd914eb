//! Conditions through the API (docs/conditions.md): arrays (ARR-1),
//! dependencies (DEP-1, DEP-2) and holds (HOLD-1) at submission; hold,
//! release and cancel of several workloads at once; ids as `12` or `12_3`.

use allot_core::{ArrayPart, DepKind, Phase, WorkloadSpec};
use std::collections::{HashMap, HashSet};

use allot_trace::conditions::{MAX_DEPENDENCY_TARGETS, format_dependencies, parse_array, parse_dependencies};
use axum::Json;
use axum::extract::State;

use super::extract::Path;
use super::{ApiError, ApiErrors, App, Auth, Body, ask};
use crate::auth::Principal;
use crate::scheduler::{LiveDep, Msg};
use crate::states::{PHASES, parse_phase};
use crate::store::{NewWorkload, WorkloadFilter, WorkloadRow};
pub use crate::views::{BulkRequest, BulkResult};

/// What a checked submission stores and hands over: its rows and specs
/// (one, or an array's elements in index order) and its dependencies.
pub(crate) struct Plan {
    pub rows: Vec<NewWorkload>,
    pub specs: Vec<WorkloadSpec>,
    pub after: Vec<LiveDep>,
}

/// The seq an id names: `12`, or `12_3` (element 3 of array 12); 404 when
/// there is none.
pub(crate) async fn seq_of(app: &App, id: &str) -> Result<i64, ApiError> {
    let none = || ApiError::not_found(format!("no workload {id}"));
    let positive = |s: &str| s.parse::<i64>().ok().filter(|n| *n > 0);
    match id.split_once('_') {
        None => positive(id).ok_or_else(none),
        Some((array, index)) => {
            let (Some(array), Some(index)) = (positive(array), index.parse::<i64>().ok()) else { return Err(none()) };
            app.store.array_element(array, index).await?.ok_or_else(none)
        }
    }
}

/// The workloads an id names for a change (cancel, hold, release): an
/// array's id names all its elements (as Slurm's does), `12_3` one
/// element, any other id its workload. Each is the caller's to see (404
/// otherwise, as for an id that does not exist).
pub(crate) async fn targets(app: &App, who: &Principal, id: &str) -> Result<Vec<WorkloadRow>, ApiError> {
    let seq = seq_of(app, id).await?;
    let row = app.store.workload(seq).await?.filter(|r| who.can_see(&r.account));
    let row = row.ok_or_else(|| ApiError::not_found(format!("no workload {id}")))?;
    if id.contains('_') || row.conditions.array_id != Some(row.seq) {
        return Ok(vec![row]);
    }
    let f = WorkloadFilter { array: Some(row.seq), limit: 100_000, ..Default::default() };
    let mut rows = app.store.workloads(&f).await?;
    rows.retain(|r| who.can_see(&r.account));
    rows.reverse();
    Ok(rows)
}

/// A checked submission's conditions: its dependencies resolved and
/// checked (each names workloads the caller sees; one that can never be
/// satisfied is refused), an array expanded into its elements, a hold.
pub(crate) async fn plan(
    app: &App,
    who: &Principal,
    array: Option<&str>,
    dependency: Option<&str>,
    hold: bool,
    row: NewWorkload,
    spec: WorkloadSpec,
) -> Result<Plan, ApiError> {
    let (after, depends_on) = match dependency.map(str::trim).filter(|d| !d.is_empty()) {
        Some(text) => dependencies(app, who, text).await?,
        None => (Vec::new(), None),
    };
    let mut row = row;
    let mut spec = spec;
    row.conditions.depends_on = depends_on;
    row.conditions.held = hold;
    spec.hold = hold;
    let Some(text) = array.map(str::trim) else {
        return Ok(Plan { rows: vec![row], specs: vec![spec], after });
    };
    let a = parse_array(text).map_err(|e| ApiError::field("array", e.to_string()))?;
    let count = a.indices.len() as u32;
    let (mut rows, mut specs) = (Vec::with_capacity(a.indices.len()), Vec::with_capacity(a.indices.len()));
    for index in a.indices {
        let mut r = row.clone();
        r.conditions.array_index = Some(i64::from(index));
        r.conditions.array_count = Some(i64::from(count));
        r.conditions.array_limit = a.limit.map(i64::from);
        rows.push(r);
        // The array's id is its first element's seq, known once stored.
        specs.push(WorkloadSpec { array: Some(ArrayPart { array: 0, index, count, limit: a.limit }), ..spec.clone() });
    }
    Ok(Plan { rows, specs, after })
}

/// DEP-1: the dependencies of `text`, by seq with their states now, and
/// as stored (`afterok:12:13,afterany:9`). Ids are taken as numbers, so
/// `26`, `026` and `0026` are one id, looked up once; each workload is
/// waited for once per kind (a set); and the arrays named may expand to at
/// most [`MAX_DEPENDENCY_TARGETS`] workloads in all: the work of a request
/// is bounded by what it names, not by how often (issue 30, point 16).
async fn dependencies(app: &App, who: &Principal, text: &str) -> Result<(Vec<LiveDep>, Option<String>), ApiError> {
    let bad = |m: String| ApiError::field("dependency", m);
    let parsed = parse_dependencies(text).map_err(|e| bad(e.to_string()))?;
    let mut named: HashSet<(DepKind, DepId)> = HashSet::new();
    let mut found: HashMap<DepId, Vec<(i64, Phase)>> = HashMap::new();
    let mut seen: HashSet<(DepKind, i64)> = HashSet::new();
    let mut after: Vec<LiveDep> = Vec::new();
    for (kind, id) in parsed {
        let key = DepId::parse(&id);
        if !named.insert((kind, key.clone())) {
            continue;
        }
        if !found.contains_key(&key) {
            let rows = dep_targets(app, who, &key.text(&id)).await.map_err(|_| {
                bad(format!("no workload {id} (a dependency names a workload, 12_3 or an array you can see)"))
            })?;
            found.insert(key.clone(), rows);
        }
        for &(seq, phase) in &found[&key] {
            if kind.satisfied_by(phase) == Some(false) {
                return Err(bad(format!(
                    "{}:{id} can never be satisfied: workload {seq} ended {} (DEP-2)",
                    kind.as_str(),
                    phase.as_str()
                )));
            }
            if seen.insert((kind, seq)) {
                after.push(LiveDep { kind, seq, phase });
            }
        }
        if after.len() > MAX_DEPENDENCY_TARGETS {
            return Err(bad(format!(
                "the dependencies name more than {MAX_DEPENDENCY_TARGETS} workloads once arrays are expanded into \
                 their elements; at most {MAX_DEPENDENCY_TARGETS}"
            )));
        }
    }
    let seqs: Vec<(DepKind, String)> = after.iter().map(|d| (d.kind, d.seq.to_string())).collect();
    let stored = format_dependencies(seqs.iter().map(|(k, s)| (*k, s.as_str())));
    Ok((after, Some(stored)))
}

/// The workloads a dependency's id names, as [`targets`] finds them, by
/// seq and state only: an array's elements are read as (seq, state), and
/// seen as its first element is (they share its account).
async fn dep_targets(app: &App, who: &Principal, id: &str) -> Result<Vec<(i64, Phase)>, ApiError> {
    let seq = seq_of(app, id).await?;
    let row = app.store.workload(seq).await?.filter(|r| who.can_see(&r.account));
    let row = row.ok_or_else(|| ApiError::not_found(format!("no workload {id}")))?;
    let phase = |s: &str| parse_phase(s).unwrap_or(Phase::Pending);
    if id.contains('_') || row.conditions.array_id != Some(row.seq) {
        return Ok(vec![(row.seq, phase(&row.state))]);
    }
    Ok(app.store.array_states(row.seq).await?.into_iter().map(|(s, st)| (s, phase(&st))).collect())
}

/// A dependency's id as a number (`12`, `012`) or an array's element
/// (`12_3`), so that the ways of writing one id are one; any other text as
/// it is (it names no workload, and is refused as such).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum DepId {
    Seq(i64),
    Element(i64, i64),
    Other(String),
}

impl DepId {
    fn parse(id: &str) -> DepId {
        let num = |s: &str| s.parse::<i64>().ok().filter(|_| s.bytes().all(|b| b.is_ascii_digit()));
        match id.split_once('_') {
            None => num(id).map_or_else(|| DepId::Other(id.to_string()), DepId::Seq),
            Some((a, i)) => match (num(a), num(i)) {
                (Some(a), Some(i)) => DepId::Element(a, i),
                _ => DepId::Other(id.to_string()),
            },
        }
    }

    /// The id as [`targets`] reads it.
    fn text(&self, given: &str) -> String {
        match self {
            DepId::Seq(s) => s.to_string(),
            DepId::Element(a, i) => format!("{a}_{i}"),
            DepId::Other(_) => given.to_string(),
        }
    }
}

/// DEP-1: the dependencies a workload was stored with, by seq, with the
/// states their workloads have in `states` (pending when unknown).
pub(crate) fn stored_dependencies(depends_on: Option<&str>, states: &dyn Fn(i64) -> Option<Phase>) -> Vec<LiveDep> {
    let Some(text) = depends_on else { return Vec::new() };
    parse_dependencies(text)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(kind, seq)| {
            let seq = seq.parse::<i64>().ok()?;
            Some(LiveDep { kind, seq, phase: states(seq).unwrap_or(Phase::Pending) })
        })
        .collect()
}

/// A `state` filter (`GET /v1/workloads`, the bulk requests): states,
/// comma-separated, each a phase or `held` (pending and held, HOLD-1, as
/// the CLI shows them).
pub(super) fn states(v: &str) -> Result<Vec<String>, ApiError> {
    let mut out = Vec::new();
    for s in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if parse_phase(s).is_none() && s != crate::store::HELD {
            let known: Vec<&str> = PHASES.iter().map(|p| p.as_str()).chain([crate::store::HELD]).collect();
            return Err(ApiError::field("state", format!("unknown state {s:?} (use {})", known.join(", "))));
        }
        out.push(s.to_string());
    }
    Ok(out)
}

/// The workloads a bulk request names that the caller may change, not
/// ended; the others are reported with why.
async fn bulk_targets(
    app: &App,
    who: &Principal,
    req: &BulkRequest,
    out: &mut Vec<BulkResult>,
) -> Result<Vec<WorkloadRow>, ApiError> {
    let filtered = req.user.is_some() || req.state.is_some() || req.name.is_some() || req.account.is_some();
    if req.ids.is_empty() && !filtered {
        return Err(ApiError::field("ids", "name workloads (ids) or filters (user, state, name, account)"));
    }
    let mut rows: Vec<WorkloadRow> = Vec::new();
    for id in &req.ids {
        match targets(app, who, id).await {
            Ok(found) => rows.extend(found),
            Err(e) => out.push(BulkResult { id: id.clone(), state: None, error: Some(e.error) }),
        }
    }
    if filtered {
        let states = states(req.state.as_deref().unwrap_or("pending,running,stopping"))?;
        let f = WorkloadFilter {
            visible: who.visible_roots(),
            account: req.account.clone(),
            submitter: req.user.clone(),
            name: req.name.clone(),
            states,
            limit: 100_000,
            ..Default::default()
        };
        let mut found = app.store.workloads(&f).await?;
        found.reverse();
        rows.extend(found);
    }
    let mut seen = std::collections::BTreeSet::new();
    rows.retain(|r| seen.insert(r.seq));
    let mut keep = Vec::new();
    for r in rows {
        if !who.can_cancel(&r.account, r.owner.as_deref()) {
            let e = format!("{} may change only workloads its own token submitted", who.name);
            out.push(BulkResult { id: r.seq.to_string(), state: None, error: Some(e) });
        } else if r.is_terminal() {
            let e = format!("workload {} has already ended ({})", r.seq, r.state);
            out.push(BulkResult { id: r.seq.to_string(), state: None, error: Some(e) });
        } else {
            keep.push(r);
        }
    }
    Ok(keep)
}

/// `POST /v1/workloads/cancel`: cancel several workloads (running ones are
/// signalled and stopped after grace).
#[utoipa::path(post, path = "/v1/workloads/cancel", summary = "cancel several workloads: by ids (an array's id names all its elements) and/or filters", description = "Roles: admin; manager inside the scope; researcher own workloads. Each workload's result is reported; those the caller may not change are refused one by one.", security(("bearer" = [])), request_body = BulkRequest, responses((status = 200, description = "what became of each", body = Vec<BulkResult>), ApiErrors))]
pub async fn cancel_many(
    State(app): State<App>,
    Auth(who): Auth,
    Body(req): Body<BulkRequest>,
) -> Result<Json<Vec<BulkResult>>, ApiError> {
    let mut out = Vec::new();
    let rows = bulk_targets(&app, &who, &req, &mut out).await?;
    let seqs: Vec<i64> = rows.iter().map(|r| r.seq).collect();
    if !seqs.is_empty() {
        let by = who.name.clone();
        let results = ask(&app, |reply| Msg::CancelMany { seqs: seqs.clone(), by, reply }).await??;
        for (seq, r) in seqs.iter().zip(results) {
            out.push(match r {
                Ok(state) => BulkResult { id: seq.to_string(), state: Some(state), error: None },
                Err(e) => BulkResult { id: seq.to_string(), state: None, error: Some(ApiError::from(e).error) },
            });
        }
    }
    Ok(Json(out))
}

async fn hold_many(app: &App, who: &Principal, req: &BulkRequest, hold: bool) -> Result<Vec<BulkResult>, ApiError> {
    let mut out = Vec::new();
    let rows = bulk_targets(app, who, req, &mut out).await?;
    // A release of several (an array, a filter) concerns those held.
    let one = rows.len() == 1;
    let seqs: Vec<i64> = rows
        .iter()
        .filter(|r| if hold { r.state == Phase::Pending.as_str() } else { one || r.conditions.held })
        .map(|r| r.seq)
        .collect();
    for r in rows.iter().filter(|r| hold && r.state != Phase::Pending.as_str()) {
        let e = format!("workload {}: only a pending workload can be held (HOLD-1); it is {}", r.seq, r.state);
        out.push(BulkResult { id: r.seq.to_string(), state: None, error: Some(e) });
    }
    if !seqs.is_empty() {
        let results = ask(app, |reply| Msg::Hold { seqs: seqs.clone(), hold, reply }).await??;
        for (seq, r) in seqs.iter().zip(results) {
            out.push(match r {
                Ok(state) => BulkResult { id: seq.to_string(), state: Some(state), error: None },
                Err(e) => BulkResult { id: seq.to_string(), state: None, error: Some(e) },
            });
        }
    }
    Ok(out)
}

/// `POST /v1/workloads/hold`: hold pending workloads (HOLD-1).
#[utoipa::path(post, path = "/v1/workloads/hold", summary = "hold pending workloads (HOLD-1): they wait, whatever the policy, until released", description = "Roles: admin; manager inside the scope; researcher own workloads.", security(("bearer" = [])), request_body = BulkRequest, responses((status = 200, description = "what became of each", body = Vec<BulkResult>), ApiErrors))]
pub async fn hold(
    State(app): State<App>,
    Auth(who): Auth,
    Body(req): Body<BulkRequest>,
) -> Result<Json<Vec<BulkResult>>, ApiError> {
    Ok(Json(hold_many(&app, &who, &req, true).await?))
}

/// `POST /v1/workloads/release`: release held workloads (HOLD-1).
#[utoipa::path(post, path = "/v1/workloads/release", summary = "release held workloads (HOLD-1)", description = "Roles: admin; manager inside the scope; researcher own workloads.", security(("bearer" = [])), request_body = BulkRequest, responses((status = 200, description = "what became of each", body = Vec<BulkResult>), ApiErrors))]
pub async fn release(
    State(app): State<App>,
    Auth(who): Auth,
    Body(req): Body<BulkRequest>,
) -> Result<Json<Vec<BulkResult>>, ApiError> {
    Ok(Json(hold_many(&app, &who, &req, false).await?))
}

/// `POST /v1/workloads/{id}/hold`
#[utoipa::path(post, path = "/v1/workloads/{id}/hold", summary = "hold a pending workload, or an array's pending elements (HOLD-1)", description = "Roles: admin; manager inside the scope; researcher own workloads.", security(("bearer" = [])), params(("id" = String, Path, description = "the workload's id, 12_3 for an array's element, or an array's id for all its elements")), responses((status = 200, description = "what became of each", body = Vec<BulkResult>), ApiErrors))]
pub async fn hold_one(
    State(app): State<App>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> Result<Json<Vec<BulkResult>>, ApiError> {
    let req = BulkRequest { ids: vec![id], ..Default::default() };
    Ok(Json(hold_many(&app, &who, &req, true).await?))
}

/// `POST /v1/workloads/{id}/release`
#[utoipa::path(post, path = "/v1/workloads/{id}/release", summary = "release a held workload, or an array's held elements (HOLD-1)", description = "Roles: admin; manager inside the scope; researcher own workloads.", security(("bearer" = [])), params(("id" = String, Path, description = "the workload's id, 12_3 for an array's element, or an array's id for all its elements")), responses((status = 200, description = "what became of each", body = Vec<BulkResult>), ApiErrors))]
pub async fn release_one(
    State(app): State<App>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> Result<Json<Vec<BulkResult>>, ApiError> {
    let req = BulkRequest { ids: vec![id], ..Default::default() };
    Ok(Json(hold_many(&app, &who, &req, false).await?))
}

#[cfg(test)]
mod tests {
    use super::DepId;

    /// `26`, `026` and `0026` are one id; an element keeps its index.
    #[test]
    fn ids_are_numbers() {
        for same in ["26", "026", "0026", "000000000000026"] {
            assert_eq!(DepId::parse(same), DepId::Seq(26), "{same}");
        }
        assert_eq!(DepId::parse("012_003"), DepId::Element(12, 3));
        assert_eq!(DepId::parse("012_003").text("012_003"), "12_3");
        for other in ["+26", "-1", "x", "1_x", ""] {
            assert!(matches!(DepId::parse(other), DepId::Other(_)), "{other}");
        }
    }
}
