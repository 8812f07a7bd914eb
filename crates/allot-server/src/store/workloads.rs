//! Workloads, attempts and node events: inserts, the scheduler's batched
//! writes and the reads of the API, recovery and export.

use allot_core::Phase;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::rows::{
    AttemptRow, GpuSample, GpuSummary, NewWorkload, NodeEventRow, Op, RowConditions, WorkloadFilter, WorkloadRow,
};
use super::{Ctx, Store, StoreError};
use crate::states::{AttemptState, PHASES};

/// The cluster of a workload's last attempt, in a query on `workloads`.
macro_rules! last_cluster {
    () => {
        "(SELECT a.cluster FROM attempts a WHERE a.workload = workloads.seq ORDER BY a.attempt DESC LIMIT 1)"
    };
}
const LAST_CLUSTER: &str = last_cluster!();

/// A workload's measured GPU utilization: its measured attempts' means
/// weighted by GPUs × measured seconds (NULL: none measured).
macro_rules! measured_util {
    () => {
        "(SELECT SUM(a.gpu_util_mean * a.gpus * a.gpu_measured_s) / SUM(CAST(a.gpus * a.gpu_measured_s AS DOUBLE \
         PRECISION)) FROM attempts a WHERE a.workload = workloads.seq AND a.gpu_measured_s > 0 AND a.gpus > 0)"
    };
}

const WORKLOAD_COLS: &str = concat!(
    "seq, owner, submit_t, account, submitter, class, gpus, nodes, gpu_type, clusters, work_s, checkpoint_s, util, \
     priority, preemptible, name, command, env, retries, time_limit_s, workdir, checkpoint_on_signal, failures, \
     cancel_requested, state, reason, end_t, array_id, array_index, array_count, array_limit, depends_on, held, \
     run_as, ",
    last_cluster!(),
    " AS last_cluster, ",
    measured_util!(),
    " AS measured_util, (SELECT a.alloc FROM attempts a WHERE a.workload = workloads.seq ORDER BY a.attempt DESC \
     LIMIT 1) AS last_alloc, (SELECT a.start_t FROM attempts a WHERE a.workload = workloads.seq ORDER BY a.attempt \
     DESC LIMIT 1) AS last_start_t, (SELECT COUNT(*) FROM attempts a WHERE a.workload = workloads.seq) AS attempts_n, \
     (SELECT CAST(COALESCE(SUM((a.end_t - a.start_t) * a.gpus), 0) AS BIGINT) FROM attempts a WHERE a.workload = \
     workloads.seq AND a.end_t IS NOT NULL) AS ended_gpu_s, (SELECT MIN(a.start_t) FROM attempts a WHERE a.workload = \
     workloads.seq) AS first_start_t"
);

const ATTEMPT_COLS: &str = "workload, attempt, alloc, cluster, gpus, weight, state, start_t, start_reason, signal_t, \
     signal_reason, end_t, outcome, exit_code, kept_s, pid, log_path, gpu_samples, gpu_measured_s, gpu_util_mean, \
     gpu_idle_s, gpu_mem_max_mib, gpu_sample_t, checkpoints, checkpoint_t, checkpoint_saved_s, idle_warning_t, \
     idle_reclaim_t";

/// A submission's `Idempotency-Key`, scoped to its principal, with a hash
/// of the request it came with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Idempotency {
    pub principal: String,
    pub key: String,
    pub request_hash: String,
}

/// What [`Store::submit_workload`] did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Inserted {
    /// A new workload, committed.
    New(i64),
    /// The key's earlier submission of the same request.
    Replayed(i64),
    /// The key was used by this principal for another request.
    KeyReused { workload: i64 },
    /// The key's first submission has not committed yet.
    InProgress,
}

fn insert_query(w: &NewWorkload) -> sqlx::query::QueryScalar<'_, sqlx::Any, i64, sqlx::any::AnyArguments<'_>> {
    sqlx::query_scalar(
        "INSERT INTO workloads (submit_t, account, submitter, class, gpus, nodes, gpu_type, work_s, checkpoint_s, \
         util, priority, preemptible, name, command, env, retries, owner, state, clusters, time_limit_s, workdir, \
         checkpoint_on_signal, array_id, array_index, array_count, array_limit, depends_on, held, run_as) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, \
         $23, $24, $25, $26, $27, $28, $29) RETURNING seq",
    )
    .bind(w.submit_t)
    .bind(&w.account)
    .bind(&w.submitter)
    .bind(&w.class)
    .bind(w.gpus)
    .bind(w.nodes)
    .bind(&w.gpu_type)
    .bind(w.work_s)
    .bind(w.checkpoint_s)
    .bind(w.util)
    .bind(&w.priority)
    .bind(i64::from(w.preemptible))
    .bind(&w.name)
    .bind(&w.command)
    .bind(&w.env)
    .bind(w.retries)
    .bind(&w.owner)
    .bind(Phase::Pending.as_str())
    .bind(&w.clusters)
    .bind(w.time_limit_s)
    .bind(&w.workdir)
    .bind(i64::from(w.checkpoint_on_signal))
    .bind(w.conditions.array_id)
    .bind(w.conditions.array_index)
    .bind(w.conditions.array_count)
    .bind(w.conditions.array_limit)
    .bind(&w.conditions.depends_on)
    .bind(i64::from(w.conditions.held))
    .bind(&w.run_as)
}

fn workload_row(r: &AnyRow) -> Result<WorkloadRow, sqlx::Error> {
    Ok(WorkloadRow {
        seq: r.try_get("seq")?,
        owner: r.try_get("owner")?,
        run_as: r.try_get("run_as")?,
        submit_t: r.try_get("submit_t")?,
        account: r.try_get("account")?,
        submitter: r.try_get("submitter")?,
        class: r.try_get("class")?,
        gpus: r.try_get("gpus")?,
        nodes: r.try_get("nodes")?,
        gpu_type: r.try_get("gpu_type")?,
        clusters: r.try_get("clusters")?,
        work_s: r.try_get("work_s")?,
        checkpoint_s: r.try_get("checkpoint_s")?,
        util: r.try_get("util")?,
        priority: r.try_get("priority")?,
        preemptible: r.try_get::<i64, _>("preemptible")? != 0,
        name: r.try_get("name")?,
        command: r.try_get("command")?,
        env: r.try_get("env")?,
        retries: r.try_get("retries")?,
        time_limit_s: r.try_get("time_limit_s")?,
        workdir: r.try_get("workdir")?,
        checkpoint_on_signal: r.try_get::<i64, _>("checkpoint_on_signal")? != 0,
        conditions: RowConditions {
            array_id: r.try_get("array_id")?,
            array_index: r.try_get("array_index")?,
            array_count: r.try_get("array_count")?,
            array_limit: r.try_get("array_limit")?,
            depends_on: r.try_get("depends_on")?,
            held: r.try_get::<i64, _>("held")? != 0,
        },
        failures: r.try_get("failures")?,
        cancel_requested: r.try_get::<i64, _>("cancel_requested")? != 0,
        state: r.try_get("state")?,
        reason: r.try_get("reason")?,
        end_t: r.try_get("end_t")?,
        last_cluster: r.try_get("last_cluster")?,
        measured_util: r.try_get("measured_util")?,
        last_alloc: r.try_get("last_alloc")?,
        last_start_t: r.try_get("last_start_t")?,
        attempts: r.try_get("attempts_n")?,
        ended_gpu_s: r.try_get("ended_gpu_s")?,
        first_start_t: r.try_get("first_start_t")?,
    })
}

fn attempt_row(r: &AnyRow) -> Result<AttemptRow, sqlx::Error> {
    Ok(AttemptRow {
        workload: r.try_get("workload")?,
        attempt: r.try_get("attempt")?,
        alloc: r.try_get("alloc")?,
        cluster: r.try_get("cluster")?,
        gpus: r.try_get("gpus")?,
        weight: r.try_get("weight")?,
        state: r.try_get("state")?,
        start_t: r.try_get("start_t")?,
        start_reason: r.try_get("start_reason")?,
        signal_t: r.try_get("signal_t")?,
        signal_reason: r.try_get("signal_reason")?,
        end_t: r.try_get("end_t")?,
        outcome: r.try_get("outcome")?,
        exit_code: r.try_get("exit_code")?,
        kept_s: r.try_get("kept_s")?,
        pid: r.try_get("pid")?,
        log_path: r.try_get("log_path")?,
        telemetry: gpu_summary(r)?,
        checkpoints: r.try_get("checkpoints")?,
        checkpoint_t: r.try_get("checkpoint_t")?,
        checkpoint_saved_s: r.try_get("checkpoint_saved_s")?,
        idle_warning_t: r.try_get("idle_warning_t")?,
        idle_reclaim_t: r.try_get("idle_reclaim_t")?,
    })
}

/// An attempt's telemetry columns; `None` before its first sample.
fn gpu_summary(r: &AnyRow) -> Result<Option<GpuSummary>, sqlx::Error> {
    let samples: i64 = r.try_get("gpu_samples")?;
    if samples <= 0 {
        return Ok(None);
    }
    Ok(Some(GpuSummary {
        samples,
        measured_s: r.try_get("gpu_measured_s")?,
        util_mean: r.try_get::<Option<f64>, _>("gpu_util_mean")?.unwrap_or(0.0),
        idle_s: r.try_get("gpu_idle_s")?,
        mem_max_mib: r.try_get::<Option<i64>, _>("gpu_mem_max_mib")?.unwrap_or(0),
        last_t: r.try_get::<Option<i64>, _>("gpu_sample_t")?.unwrap_or(0),
    }))
}

/// A row of `node_events` (its columns `seq, t, node, kind, principal, reason`).
pub(super) fn node_event_row(r: &AnyRow) -> Result<NodeEventRow, sqlx::Error> {
    Ok(NodeEventRow {
        seq: r.try_get("seq")?,
        t: r.try_get("t")?,
        node: r.try_get("node")?,
        kind: r.try_get("kind")?,
        principal: r.try_get("principal")?,
        reason: r.try_get("reason")?,
    })
}

/// `s` for a `LIKE` pattern with `ESCAPE '\'`: `\`, `%` and `_` stand for
/// themselves.
fn like_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_")
}

/// `column` is `path` or an account below it, with its two binds pushed
/// (`LIKE` with `_` and `%` escaped: account paths may contain `_`).
pub(super) fn subtree(binds: &mut Vec<String>, column: &str, path: &str) -> String {
    binds.push(path.to_string());
    binds.push(format!("{}/%", like_escape(path)));
    format!("({column} = ${} OR {column} LIKE ${} ESCAPE '\\')", binds.len() - 1, binds.len())
}

/// The conditions of `f` on `workloads`, with their binds pushed onto
/// `binds` (`$1`…): who may see them, account subtree, states, submitter,
/// class, clusters (pending workloads eligible for one of them, FLEET-1;
/// the others by their last attempt's cluster) and `before`. `None`:
/// nothing can match. The listing and the queue's counts both read it.
/// The state a [`WorkloadFilter`] may name besides the phases: pending and
/// held (HOLD-1).
pub const HELD: &str = "held";

pub(super) fn conditions(f: &WorkloadFilter, binds: &mut Vec<String>) -> Option<String> {
    let mut sql = "1 = 1".to_string();
    if let Some(v) = &f.visible {
        if v.is_empty() {
            return None;
        }
        let parts: Vec<String> = v.iter().map(|p| subtree(binds, "account", p)).collect();
        sql.push_str(&format!(" AND ({})", parts.join(" OR ")));
    }
    if let Some(a) = &f.account {
        let part = subtree(binds, "account", a);
        sql.push_str(&format!(" AND {part}"));
    }
    if !f.states.is_empty() {
        // `held` (HOLD-1) is the pending workloads that are held, as the
        // CLI's STATE column shows them.
        let mut ph = Vec::new();
        for s in f.states.iter().filter(|s| *s != HELD) {
            binds.push(s.clone());
            ph.push(format!("${}", binds.len()));
        }
        let mut any = Vec::new();
        if !ph.is_empty() {
            any.push(format!("state IN ({})", ph.join(", ")));
        }
        if f.states.iter().any(|s| s == HELD) {
            any.push("(state = 'pending' AND held <> 0)".to_string());
        }
        sql.push_str(&format!(" AND ({})", any.join(" OR ")));
    }
    if let Some(array) = f.array {
        sql.push_str(&format!(" AND array_id = {array}"));
    }
    for (col, v) in [("submitter", &f.submitter), ("class", &f.class), ("name", &f.name)] {
        if let Some(v) = v {
            binds.push(v.clone());
            sql.push_str(&format!(" AND {col} = ${}", binds.len()));
        }
    }
    if let Some(before) = f.before {
        sql.push_str(&format!(" AND seq < {before}"));
    }
    if let Some(clusters) = &f.clusters {
        let (mut eligible, mut on) = (Vec::new(), Vec::new());
        for c in clusters {
            let name = like_escape(&c.name);
            binds.push(format!("%,{name},%"));
            let pinned = format!("(clusters IS NULL OR (',' || clusters || ',') LIKE ${} ESCAPE '\\')", binds.len());
            let mut types = Vec::new();
            for t in &c.gpu_types {
                binds.push(t.clone());
                types.push(format!("${}", binds.len()));
            }
            let typed = if types.is_empty() {
                "gpu_type IS NULL".to_string()
            } else {
                format!("(gpu_type IS NULL OR gpu_type IN ({}))", types.join(", "))
            };
            eligible.push(format!("({pinned} AND {typed})"));
            binds.push(c.name.clone());
            on.push(format!("{LAST_CLUSTER} = ${}", binds.len()));
        }
        let waiting = format!("(state = '{}' OR {LAST_CLUSTER} IS NULL)", Phase::Pending.as_str());
        let any = |parts: Vec<String>| if parts.is_empty() { "1 = 0".to_string() } else { parts.join(" OR ") };
        sql.push_str(&format!(" AND (({waiting} AND ({})) OR (NOT {waiting} AND ({})))", any(eligible), any(on)));
    }
    Some(sql)
}

impl Store {
    /// Inserts a submission without a key; see [`Store::submit_workload`].
    pub async fn insert_workload(&self, w: &NewWorkload) -> Result<i64, StoreError> {
        match self.submit_workload(w, None).await? {
            Inserted::New(seq) | Inserted::Replayed(seq) | Inserted::KeyReused { workload: seq } => Ok(seq),
            Inserted::InProgress => Err(sqlx::Error::RowNotFound).ctx("insert the workload"),
        }
    }

    /// Inserts a submission and returns its seq once the commit is durable
    /// (the insert's result is read to its end inside a transaction whose
    /// commit is awaited: a failing commit is an error, never a seq).
    ///
    /// With a key, a submission the same principal already made under it
    /// is returned instead ([`Inserted::Replayed`], or
    /// [`Inserted::KeyReused`] when the request differs); the key is
    /// committed with the workload, so retries find it after a restart.
    pub async fn submit_workload(&self, w: &NewWorkload, key: Option<&Idempotency>) -> Result<Inserted, StoreError> {
        Ok(self.submit_workloads(std::slice::from_ref(w), key).await?.0)
    }

    /// Stores workloads submitted together (the elements of an array, in
    /// index order) in one transaction: all or none. An array element's
    /// `array_id` is set to the first one's seq. Returns the first seq; the
    /// others follow it in the order given; with the seqs of all (none
    /// when nothing new was stored).
    pub async fn submit_workloads(
        &self,
        ws: &[NewWorkload],
        key: Option<&Idempotency>,
    ) -> Result<(Inserted, Vec<i64>), StoreError> {
        if let Some(k) = key
            && let Some(found) = self.idempotent(k).await?
        {
            return Ok((found, Vec::new()));
        }
        let Some(w) = ws.first() else {
            return Err(sqlx::Error::RowNotFound).ctx("insert no workload");
        };
        let mut tx = self.begin_write("insert the workload").await?;
        let seqs: Vec<i64> = insert_query(w).fetch_all(&mut *tx).await.ctx("insert the workload")?;
        let Some(&seq) = seqs.first() else {
            return Err(sqlx::Error::RowNotFound).ctx("read the new workload's seq");
        };
        if w.conditions.array_index.is_some() {
            sqlx::query("UPDATE workloads SET array_id = $1 WHERE seq = $1")
                .bind(seq)
                .execute(&mut *tx)
                .await
                .ctx("number the array")?;
        }
        let mut all = vec![seq];
        for rest in &ws[1..] {
            let mut rest = rest.clone();
            rest.conditions.array_id = Some(seq);
            let s: Vec<i64> = insert_query(&rest).fetch_all(&mut *tx).await.ctx("insert the array's elements")?;
            all.extend(s);
        }
        if let Some(k) = key {
            let added = sqlx::query(
                "INSERT INTO idempotency_keys (principal, key, request_hash, workload, created_t) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
            )
            .bind(&k.principal)
            .bind(&k.key)
            .bind(&k.request_hash)
            .bind(seq)
            .bind(w.submit_t)
            .execute(&mut *tx)
            .await
            .ctx("record the idempotency key")?
            .rows_affected();
            if added == 0 {
                // The same key committed meanwhile: that submission wins
                // (dropping the transaction rolls this one back).
                drop(tx);
                return Ok((self.idempotent(k).await?.unwrap_or(Inserted::InProgress), Vec::new()));
            }
        }
        tx.commit().await.ctx("commit the workload")?;
        Ok((Inserted::New(seq), all))
    }

    /// What a key already names, if anything.
    async fn idempotent(&self, k: &Idempotency) -> Result<Option<Inserted>, StoreError> {
        let row = sqlx::query("SELECT request_hash, workload FROM idempotency_keys WHERE principal = $1 AND key = $2")
            .bind(&k.principal)
            .bind(&k.key)
            .fetch_optional(&self.pool)
            .await
            .ctx("read the idempotency key")?;
        let Some(row) = row else { return Ok(None) };
        let hash: String = row.try_get("request_hash").ctx("decode the idempotency key")?;
        let workload: i64 = row.try_get("workload").ctx("decode the idempotency key")?;
        Ok(Some(if hash == k.request_hash { Inserted::Replayed(workload) } else { Inserted::KeyReused { workload } }))
    }

    /// The seqs of an array's elements, by index.
    pub async fn array_seqs(&self, array_id: i64) -> Result<Vec<(i64, i64)>, StoreError> {
        let rows = sqlx::query("SELECT array_index, seq FROM workloads WHERE array_id = $1 ORDER BY array_index")
            .bind(array_id)
            .fetch_all(&self.pool)
            .await
            .ctx("read the array")?;
        rows.iter()
            .map(|r| Ok((r.try_get::<i64, _>("array_index")?, r.try_get::<i64, _>("seq")?)))
            .collect::<Result<_, sqlx::Error>>()
            .ctx("decode the array")
    }

    /// The seq of element `index` of array `array_id`, if it exists.
    pub async fn array_element(&self, array_id: i64, index: i64) -> Result<Option<i64>, StoreError> {
        sqlx::query_scalar("SELECT seq FROM workloads WHERE array_id = $1 AND array_index = $2")
            .bind(array_id)
            .bind(index)
            .fetch_optional(&self.pool)
            .await
            .ctx("read the array element")
    }

    pub async fn workload(&self, seq: i64) -> Result<Option<WorkloadRow>, StoreError> {
        let sql = format!("SELECT {WORKLOAD_COLS} FROM workloads WHERE seq = $1");
        let row = sqlx::query(&sql).bind(seq).fetch_optional(&self.pool).await.ctx("read the workload")?;
        row.as_ref().map(workload_row).transpose().ctx("decode the workload")
    }

    /// Workloads matching `f`, newest first.
    pub async fn workloads(&self, f: &WorkloadFilter) -> Result<Vec<WorkloadRow>, StoreError> {
        let mut binds: Vec<String> = Vec::new();
        let Some(cond) = conditions(f, &mut binds) else { return Ok(Vec::new()) };
        let mut sql = format!("SELECT {WORKLOAD_COLS} FROM workloads WHERE {cond}");
        sql.push_str(&format!(" ORDER BY seq DESC LIMIT {}", f.limit.max(1)));
        let mut q = sqlx::query(&sql);
        for b in &binds {
            q = q.bind(b.clone());
        }
        let rows = q.fetch_all(&self.pool).await.ctx("list workloads")?;
        rows.iter().map(workload_row).collect::<Result<_, _>>().ctx("decode workloads")
    }

    /// The elements of array `array` as (seq, state), in seq order: what a
    /// dependency on the array waits for, without reading whole rows (a
    /// dependency naming a 10,000-element array read 10,000 rows of every
    /// column; issue 30, point 16).
    pub async fn array_states(&self, array: i64) -> Result<Vec<(i64, String)>, StoreError> {
        let rows = sqlx::query("SELECT seq, state FROM workloads WHERE array_id = $1 ORDER BY seq")
            .bind(array)
            .fetch_all(&self.pool)
            .await
            .ctx("list an array's elements")?;
        rows.iter()
            .map(|r| Ok((r.try_get::<i64, _>("seq")?, r.try_get::<String, _>("state")?)))
            .collect::<Result<_, sqlx::Error>>()
            .ctx("decode an array's elements")
    }

    /// A workload's points of GPU utilization over time, by attempt and time.
    pub async fn gpu_samples_of(&self, seq: i64) -> Result<Vec<GpuSample>, StoreError> {
        let rows = sqlx::query(
            "SELECT workload, attempt, t, util, mem_mib FROM gpu_samples WHERE workload = $1 ORDER BY attempt, t",
        )
        .bind(seq)
        .fetch_all(&self.pool)
        .await
        .ctx("read GPU samples")?;
        let decode = |r: &AnyRow| -> Result<GpuSample, sqlx::Error> {
            Ok(GpuSample {
                seq: r.try_get("workload")?,
                attempt: r.try_get("attempt")?,
                t: r.try_get("t")?,
                util: r.try_get("util")?,
                mem_mib: r.try_get::<Option<i64>, _>("mem_mib")?.unwrap_or(0),
            })
        };
        rows.iter().map(decode).collect::<Result<_, _>>().ctx("decode GPU samples")
    }

    /// Workloads not yet ended, in submit order (recovery).
    pub async fn live_workloads(&self) -> Result<Vec<WorkloadRow>, StoreError> {
        let ended: Vec<String> =
            PHASES.iter().filter(|p| p.is_terminal()).map(|p| format!("'{}'", p.as_str())).collect();
        let sql = format!(
            "SELECT {WORKLOAD_COLS} FROM workloads WHERE state NOT IN ({}) ORDER BY submit_t, seq",
            ended.join(", ")
        );
        let rows = sqlx::query(&sql).fetch_all(&self.pool).await.ctx("read live workloads")?;
        rows.iter().map(workload_row).collect::<Result<_, _>>().ctx("decode workloads")
    }

    /// Every workload, in seq order (export).
    pub async fn all_workloads(&self) -> Result<Vec<WorkloadRow>, StoreError> {
        let sql = format!("SELECT {WORKLOAD_COLS} FROM workloads ORDER BY seq");
        let rows = sqlx::query(&sql).fetch_all(&self.pool).await.ctx("read workloads")?;
        rows.iter().map(workload_row).collect::<Result<_, _>>().ctx("decode workloads")
    }

    /// A workload and its attempts as one snapshot (a commit between two
    /// reads could otherwise pair an older workload row with newer
    /// attempts): one read transaction, repeatable read on PostgreSQL.
    pub async fn workload_detail(&self, seq: i64) -> Result<Option<(WorkloadRow, Vec<AttemptRow>)>, StoreError> {
        let mut tx = self.pool.begin().await.ctx("begin a read")?;
        if self.backend == super::Backend::Postgres {
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                .execute(&mut *tx)
                .await
                .ctx("begin a read")?;
        }
        let sql = format!("SELECT {WORKLOAD_COLS} FROM workloads WHERE seq = $1");
        let row = sqlx::query(&sql).bind(seq).fetch_optional(&mut *tx).await.ctx("read the workload")?;
        let Some(row) = row.as_ref().map(workload_row).transpose().ctx("decode the workload")? else {
            return Ok(None);
        };
        let sql = format!("SELECT {ATTEMPT_COLS} FROM attempts WHERE workload = $1 ORDER BY attempt");
        let rows = sqlx::query(&sql).bind(seq).fetch_all(&mut *tx).await.ctx("read attempts")?;
        let attempts = rows.iter().map(attempt_row).collect::<Result<_, _>>().ctx("decode attempts")?;
        tx.commit().await.ctx("end a read")?;
        Ok(Some((row, attempts)))
    }

    pub async fn attempts_of(&self, seq: i64) -> Result<Vec<AttemptRow>, StoreError> {
        let sql = format!("SELECT {ATTEMPT_COLS} FROM attempts WHERE workload = $1 ORDER BY attempt");
        let rows = sqlx::query(&sql).bind(seq).fetch_all(&self.pool).await.ctx("read attempts")?;
        rows.iter().map(attempt_row).collect::<Result<_, _>>().ctx("decode attempts")
    }

    /// Every attempt, by workload and attempt number.
    pub async fn all_attempts(&self) -> Result<Vec<AttemptRow>, StoreError> {
        let sql = format!("SELECT {ATTEMPT_COLS} FROM attempts ORDER BY workload, attempt");
        let rows = sqlx::query(&sql).fetch_all(&self.pool).await.ctx("read attempts")?;
        rows.iter().map(attempt_row).collect::<Result<_, _>>().ctx("decode attempts")
    }

    pub async fn node_events(&self) -> Result<Vec<NodeEventRow>, StoreError> {
        let rows = sqlx::query("SELECT seq, t, node, kind, principal, reason FROM node_events ORDER BY seq")
            .fetch_all(&self.pool)
            .await
            .ctx("read node events")?;
        rows.iter().map(node_event_row).collect::<Result<_, _>>().ctx("decode node events")
    }

    /// The journal's entries from `after` on (exclusive), in order: (seq,
    /// entry as JSON).
    pub async fn journal(&self, after: i64) -> Result<Vec<(i64, String)>, StoreError> {
        let rows = sqlx::query("SELECT seq, entry FROM journal WHERE seq > $1 ORDER BY seq")
            .bind(after)
            .fetch_all(&self.pool)
            .await
            .ctx("read the journal")?;
        rows.iter()
            .map(|r| Ok((r.try_get::<i64, _>("seq")?, r.try_get::<String, _>("entry")?)))
            .collect::<Result<_, sqlx::Error>>()
            .ctx("decode the journal")
    }

    /// Commits a scheduling step's writes together.
    pub async fn apply(&self, ops: &[Op]) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin_write("begin a scheduling step").await?;
        for op in ops {
            if let Op::CompactJournal { keep } = op {
                let cut = "(SELECT journal_seq FROM snapshots ORDER BY journal_seq DESC LIMIT 1 OFFSET $1)";
                for sql in [
                    format!("DELETE FROM journal WHERE seq <= {cut}"),
                    format!("DELETE FROM snapshots WHERE journal_seq < {cut}"),
                ] {
                    sqlx::query(&sql).bind(keep - 1).execute(&mut *tx).await.ctx("compact the journal")?;
                }
                continue;
            }
            op_query(op).execute(&mut *tx).await.ctx("record a scheduling step")?;
        }
        tx.commit().await.ctx("commit a scheduling step")
    }

    /// The newest snapshot of the live run (`oldest`: the oldest kept):
    /// the journal entry it follows, its instant and its bytes.
    pub async fn snapshot(&self, oldest: bool) -> Result<Option<(i64, i64, Vec<u8>)>, StoreError> {
        let order = if oldest { "ASC" } else { "DESC" };
        let sql = format!("SELECT journal_seq, t, data FROM snapshots ORDER BY journal_seq {order} LIMIT 1");
        let row = sqlx::query(&sql).fetch_optional(&self.pool).await.ctx("read a snapshot")?;
        row.map(|r| Ok((r.try_get("journal_seq")?, r.try_get("t")?, r.try_get("data")?)))
            .transpose()
            .ctx("decode a snapshot")
    }

    /// The first entry the journal still holds (1 unless compacted).
    pub async fn journal_first(&self) -> Result<Option<i64>, StoreError> {
        let row =
            sqlx::query("SELECT MIN(seq) AS first FROM journal").fetch_one(&self.pool).await.ctx("read the journal")?;
        row.try_get::<Option<i64>, _>("first").ctx("decode the journal")
    }
}

type Query<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>;

fn op_query(op: &Op) -> Query<'_> {
    match op {
        Op::WorkloadState { seq, state, reason, end_t } => {
            sqlx::query("UPDATE workloads SET state = $1, reason = $2, end_t = $3 WHERE seq = $4")
                .bind(state.as_str())
                .bind(reason)
                .bind(*end_t)
                .bind(*seq)
        }
        Op::Failures { seq, failures } => {
            sqlx::query("UPDATE workloads SET failures = $1 WHERE seq = $2").bind(*failures).bind(*seq)
        }
        Op::CancelRequested { seq } => {
            sqlx::query("UPDATE workloads SET cancel_requested = 1 WHERE seq = $1").bind(*seq)
        }
        Op::Held { seq, held } => {
            sqlx::query("UPDATE workloads SET held = $1 WHERE seq = $2").bind(i64::from(*held)).bind(*seq)
        }
        Op::AttemptStart { row: a } => sqlx::query(
            // A step retried after a commit whose answer was lost adds nothing twice.
            "INSERT INTO attempts (workload, attempt, alloc, gpus, weight, state, start_t, start_reason, log_path, \
             cluster) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (workload, attempt) DO NOTHING",
        )
        .bind(a.workload)
        .bind(a.attempt)
        .bind(&a.alloc)
        .bind(a.gpus)
        .bind(a.weight)
        .bind(&a.state)
        .bind(a.start_t)
        .bind(&a.start_reason)
        .bind(&a.log_path)
        .bind(&a.cluster),
        Op::AttemptRunning { seq, attempt, pid } => sqlx::query(
            "UPDATE attempts SET pid = $1, state = CASE WHEN state = $2 THEN $3 ELSE state END \
             WHERE workload = $4 AND attempt = $5",
        )
        .bind(*pid)
        .bind(AttemptState::Starting.as_str())
        .bind(AttemptState::Running.as_str())
        .bind(*seq)
        .bind(*attempt),
        Op::AttemptSignal { seq, attempt, t, reason } => sqlx::query(
            "UPDATE attempts SET state = $1, signal_t = $2, signal_reason = $3 WHERE workload = $4 AND attempt = $5",
        )
        .bind(AttemptState::Stopping.as_str())
        .bind(*t)
        .bind(reason)
        .bind(*seq)
        .bind(*attempt),
        Op::AttemptCheckpoint { seq, attempt, t, saved_s } => sqlx::query(
            "UPDATE attempts SET checkpoints = checkpoints + 1, checkpoint_t = $1, checkpoint_saved_s = $2 \
             WHERE workload = $3 AND attempt = $4",
        )
        .bind(*t)
        .bind(*saved_s)
        .bind(*seq)
        .bind(*attempt),
        Op::AttemptIdle { seq, attempt, t, reclaim_t } => sqlx::query(
            "UPDATE attempts SET idle_warning_t = $1, idle_reclaim_t = $2 WHERE workload = $3 AND attempt = $4",
        )
        .bind(*t)
        .bind(*reclaim_t)
        .bind(*seq)
        .bind(*attempt),
        Op::AttemptEnd { seq, attempt, end_t, outcome, exit_code, kept_s } => sqlx::query(
            "UPDATE attempts SET state = $1, end_t = $2, outcome = $3, exit_code = $4, kept_s = $5 \
             WHERE workload = $6 AND attempt = $7",
        )
        .bind(AttemptState::Ended.as_str())
        .bind(*end_t)
        .bind(outcome)
        .bind(*exit_code)
        .bind(*kept_s)
        .bind(*seq)
        .bind(*attempt),
        Op::AttemptTelemetry { seq, attempt, summary: g } => sqlx::query(
            "UPDATE attempts SET gpu_samples = $1, gpu_measured_s = $2, gpu_util_mean = $3, gpu_idle_s = $4, \
             gpu_mem_max_mib = $5, gpu_sample_t = $6 WHERE workload = $7 AND attempt = $8",
        )
        .bind(g.samples)
        .bind(g.measured_s)
        .bind(g.util_mean)
        .bind(g.idle_s)
        .bind(g.mem_max_mib)
        .bind(g.last_t)
        .bind(*seq)
        .bind(*attempt),
        Op::GpuPoint(p) => sqlx::query(
            "INSERT INTO gpu_samples (workload, attempt, t, util, mem_mib) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (workload, attempt, t) DO UPDATE SET util = excluded.util, mem_mib = excluded.mem_mib",
        )
        .bind(p.seq)
        .bind(p.attempt)
        .bind(p.t)
        .bind(p.util)
        .bind(p.mem_mib),
        Op::NodeEvent { t, node, kind, principal, reason } => sqlx::query(
            "INSERT INTO node_events (t, node, kind, principal, reason) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(*t)
        .bind(node)
        .bind(kind)
        .bind(principal)
        .bind(reason.clone()),
        Op::Journal { t, entry } => {
            sqlx::query("INSERT INTO journal (t, entry) VALUES ($1, $2)").bind(*t).bind(entry)
        }
        Op::Snapshot { t, data } => sqlx::query(
            "INSERT INTO snapshots (journal_seq, t, data) VALUES ((SELECT COALESCE(MAX(seq), 0) FROM journal), $1, $2)",
        )
        .bind(*t)
        .bind(data.clone()),
        // Two statements: the caller's `CompactJournal` is expanded by
        // `apply` (the oldest snapshot kept is read once).
        Op::CompactJournal { .. } => unreachable!("expanded by apply"),
        Op::Audit { t, principal, action, target, before, after } => sqlx::query(
            "INSERT INTO audit (t, principal, action, target, before_value, after_value) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(*t)
        .bind(principal)
        .bind(action)
        .bind(target)
        .bind(before.clone())
        .bind(after.clone()),
    }
}
