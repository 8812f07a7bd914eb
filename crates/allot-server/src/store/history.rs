//! The reads of the dashboard's History page: what the store recorded over
//! a window of time, bounded by the window (never a whole table when a
//! window is asked), in one read transaction so the three parts agree.
//!
//! * attempts that held GPUs at some time in the window, with what the
//!   measures need of their workload (docs/measures.md: assigned GPU-time,
//!   utilization measured or declared, first starts for queue times,
//!   preemptions) — of every account: a drain keeps its node in service
//!   until the last of them on it ends, whoever's they are;
//! * workloads alive at some time in the window (submitted before its end,
//!   not ended before its start) of the accounts asked, for the queue;
//! * the node events of the window, and before it each node's last event
//!   and last failure or repair (the health the window starts with);
//! * apart, the first instant the store recorded anything the measures read
//!   (a submission or a node event: [`Store::history_since`]), so a window
//!   longer than the store's history is cut to the span it covers.

use sqlx::Row;
use sqlx::any::AnyRow;

use super::rows::NodeEventRow;
use super::{Ctx, Store, StoreError};

/// An attempt overlapping the window.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryAttempt {
    pub workload: i64,
    pub attempt: i64,
    /// Its workload's account (the page keeps the visible ones).
    pub account: String,
    /// JSON: `[{"node": "a-0", "gpus": [0, 1]}]`.
    pub alloc: String,
    pub gpus: i64,
    pub start_t: i64,
    /// `None`: it still holds its GPUs.
    pub end_t: Option<i64>,
    /// finished | failed | preempted | cancelled | node-failed | lost | …
    pub outcome: Option<String>,
    /// Its measured mean GPU utilization (0..1), when telemetry sampled it.
    pub measured_util: Option<f64>,
    /// The utilization its submission declared (0..1).
    pub declared_util: f64,
    /// Its workload's submission time.
    pub submit_t: i64,
    /// It is its workload's first attempt (its start is the first start).
    pub first: bool,
}

/// A workload alive at some time in the window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryWorkload {
    pub seq: i64,
    pub account: String,
    pub submit_t: i64,
    /// `None`: not ended.
    pub end_t: Option<i64>,
}

/// What the store recorded over a window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistoryRows {
    pub attempts: Vec<HistoryAttempt>,
    pub workloads: Vec<HistoryWorkload>,
    /// In record order: the events before the window that set each node's
    /// health at its start, then the window's.
    pub events: Vec<NodeEventRow>,
}

/// The SQL condition "account is in one of these subtrees" on `col`, with
/// its binds appended to `binds`, numbered after the query's first `before`
/// placeholders; `None` when every account is asked.
fn subtree_clause(col: &str, roots: Option<&[String]>, before: usize, binds: &mut Vec<String>) -> Option<String> {
    let roots = roots?;
    if roots.is_empty() {
        return Some("1 = 0".into());
    }
    let parts: Vec<String> = roots
        .iter()
        .map(|r| {
            binds.push(r.clone());
            // `LIKE` with `\`, `%` and `_` escaped: paths may contain `_`.
            binds.push(format!("{}/%", r.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_")));
            let n = before + binds.len();
            format!("({col} = ${} OR {col} LIKE ${n} ESCAPE '\\')", n - 1)
        })
        .collect();
    Some(format!("({})", parts.join(" OR ")))
}

fn history_attempt(r: &AnyRow) -> Result<HistoryAttempt, sqlx::Error> {
    let measured_s: i64 = r.try_get("gpu_measured_s")?;
    let mean: Option<f64> = r.try_get("gpu_util_mean")?;
    Ok(HistoryAttempt {
        workload: r.try_get("workload")?,
        attempt: r.try_get("attempt")?,
        account: r.try_get("account")?,
        alloc: r.try_get("alloc")?,
        gpus: r.try_get("gpus")?,
        start_t: r.try_get("start_t")?,
        end_t: r.try_get("end_t")?,
        outcome: r.try_get("outcome")?,
        measured_util: mean.filter(|_| measured_s > 0),
        declared_util: r.try_get("util")?,
        submit_t: r.try_get("submit_t")?,
        first: r.try_get::<i64, _>("first_attempt")? == r.try_get::<i64, _>("attempt")?,
    })
}

impl Store {
    /// What the window `[from, to)` needs (see the module's doc); the
    /// workloads only of the subtrees `roots` (`None`: all).
    pub async fn history(&self, from: i64, to: i64, roots: Option<&[String]>) -> Result<HistoryRows, StoreError> {
        let mut tx = self.pool.begin().await.ctx("begin a read")?;
        if self.backend == super::Backend::Postgres {
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                .execute(&mut *tx)
                .await
                .ctx("begin a read")?;
        }
        let rows = sqlx::query(
            "SELECT a.workload, a.attempt, a.alloc, a.gpus, a.start_t, a.end_t, a.outcome, a.gpu_util_mean, \
             a.gpu_measured_s, w.account, w.util, w.submit_t, \
             (SELECT MIN(b.attempt) FROM attempts b WHERE b.workload = a.workload) AS first_attempt \
             FROM attempts a JOIN workloads w ON w.seq = a.workload \
             WHERE a.start_t < $1 AND (a.end_t IS NULL OR a.end_t > $2) ORDER BY a.workload, a.attempt",
        )
        .bind(to)
        .bind(from)
        .fetch_all(&mut *tx)
        .await
        .ctx("read the window's attempts")?;
        let attempts = rows.iter().map(history_attempt).collect::<Result<_, _>>().ctx("decode attempts")?;

        let mut binds = Vec::new();
        let visible = subtree_clause("account", roots, 2, &mut binds).map_or_else(String::new, |c| format!(" AND {c}"));
        let sql = format!(
            "SELECT seq, account, submit_t, end_t FROM workloads \
             WHERE submit_t < $1 AND (end_t IS NULL OR end_t > $2){visible} ORDER BY seq"
        );
        let mut q = sqlx::query(&sql).bind(to).bind(from);
        for b in &binds {
            q = q.bind(b.clone());
        }
        let rows = q.fetch_all(&mut *tx).await.ctx("read the window's workloads")?;
        let decode = |r: &AnyRow| -> Result<HistoryWorkload, sqlx::Error> {
            Ok(HistoryWorkload {
                seq: r.try_get("seq")?,
                account: r.try_get("account")?,
                submit_t: r.try_get("submit_t")?,
                end_t: r.try_get("end_t")?,
            })
        };
        let workloads = rows.iter().map(decode).collect::<Result<_, _>>().ctx("decode workloads")?;

        let rows = sqlx::query(
            "SELECT seq, t, node, kind, principal, reason FROM node_events \
             WHERE (t >= $1 AND t < $2) \
             OR seq IN (SELECT MAX(seq) FROM node_events WHERE t < $1 GROUP BY node) \
             OR seq IN (SELECT MAX(seq) FROM node_events WHERE t < $1 AND kind IN ('fail', 'repair') GROUP BY node) \
             ORDER BY seq",
        )
        .bind(from)
        .bind(to)
        .fetch_all(&mut *tx)
        .await
        .ctx("read the window's node events")?;
        let events =
            rows.iter().map(super::workloads::node_event_row).collect::<Result<_, _>>().ctx("decode node events")?;
        tx.commit().await.ctx("end a read")?;
        Ok(HistoryRows { attempts, workloads, events })
    }

    /// The first instant of the store's history: its earliest submission
    /// or node event (two index lookups); `None` when it recorded neither.
    /// An attempt starts after its workload's submission, so nothing the
    /// History page measures lies before it.
    pub async fn history_since(&self) -> Result<Option<i64>, StoreError> {
        let row = sqlx::query(
            "SELECT (SELECT MIN(submit_t) FROM workloads) AS submitted, (SELECT MIN(t) FROM node_events) AS event",
        )
        .fetch_one(&self.pool)
        .await
        .ctx("read when the history begins")?;
        let submitted: Option<i64> = row.try_get("submitted").ctx("decode the first submission")?;
        let event: Option<i64> = row.try_get("event").ctx("decode the first node event")?;
        Ok(submitted.into_iter().chain(event).min())
    }
}
