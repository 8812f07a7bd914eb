//! Reads for the dashboard's Budgets and Queue pages: the attempt intervals
//! an account's subtree held GPUs in during a budget period (its burn-down,
//! BUD-3/BUD-4), and the pending work grouped by account and class.
//!
//! Both are one query each, bounded by what the page shows: the intervals
//! of one period, and one row per (account, class) with pending work. The
//! SQL is the subset SQLite and PostgreSQL share (`$n` placeholders, `LIKE
//! … ESCAPE`, `CAST(… AS BIGINT)` where PostgreSQL would answer `NUMERIC`).

use sqlx::Row;
use sqlx::any::AnyRow;

use super::rows::WorkloadFilter;
use super::workloads::{conditions, subtree};
use super::{Ctx, Store, StoreError};

/// Seconds per hour, for normalised GPU-hours.
const HOUR: f64 = 3600.0;

/// An attempt's hold on GPUs, as the ledger charges it (BUD-3): `gpus`
/// GPUs of normalisation weight `weight` from `start_t` to `end_t` (`None`:
/// it still holds them).
#[derive(Clone, Debug, PartialEq)]
pub struct UsageSpan {
    pub start_t: i64,
    pub end_t: Option<i64>,
    pub gpus: i64,
    pub weight: f64,
}

/// Pending workloads of one account and class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingGroup {
    pub account: String,
    pub class: String,
    pub workloads: i64,
    /// GPUs they ask for together.
    pub gpus: i64,
    /// The submission time of the oldest of them.
    pub oldest_submit_t: i64,
}

impl Store {
    /// The GPUs the subtree of `account` held at some time in `[from, to)`:
    /// every attempt of its workloads that overlaps that interval (one
    /// query, bounded by the interval).
    pub async fn usage_spans(&self, account: &str, from: i64, to: i64) -> Result<Vec<UsageSpan>, StoreError> {
        let mut binds = Vec::new();
        let cond = subtree(&mut binds, "w.account", account);
        let sql = format!(
            "SELECT a.start_t, a.end_t, a.gpus, a.weight FROM attempts a JOIN workloads w ON w.seq = a.workload \
             WHERE {cond} AND a.start_t < ${} AND (a.end_t IS NULL OR a.end_t > ${})",
            binds.len() + 1,
            binds.len() + 2
        );
        let mut q = sqlx::query(&sql);
        for b in &binds {
            q = q.bind(b.clone());
        }
        let rows = q.bind(to).bind(from).fetch_all(&self.pool).await.ctx("read the usage of an account")?;
        let decode = |r: &AnyRow| -> Result<UsageSpan, sqlx::Error> {
            Ok(UsageSpan {
                start_t: r.try_get("start_t")?,
                end_t: r.try_get("end_t")?,
                gpus: r.try_get("gpus")?,
                weight: r.try_get("weight")?,
            })
        };
        rows.iter().map(decode).collect::<Result<_, _>>().ctx("decode the usage of an account")
    }

    /// Pending workloads matching `f` (its states, `before` and `limit` are
    /// not read) grouped by account and class, in that order: one
    /// aggregate query, never the rows themselves, with the listing's
    /// conditions.
    pub async fn pending_groups(&self, f: &WorkloadFilter) -> Result<Vec<PendingGroup>, StoreError> {
        let mut binds = Vec::new();
        let pending =
            WorkloadFilter { states: vec![allot_core::Phase::Pending.as_str().to_string()], before: None, ..f.clone() };
        let Some(cond) = conditions(&pending, &mut binds) else { return Ok(Vec::new()) };
        let sql = format!(
            "SELECT account, class, COUNT(*) AS n, CAST(SUM(gpus) AS BIGINT) AS gpus, MIN(submit_t) AS oldest \
             FROM workloads WHERE {cond} GROUP BY account, class ORDER BY account, class"
        );
        let mut q = sqlx::query(&sql);
        for b in &binds {
            q = q.bind(b.clone());
        }
        let rows = q.fetch_all(&self.pool).await.ctx("count the pending workloads")?;
        let decode = |r: &AnyRow| -> Result<PendingGroup, sqlx::Error> {
            Ok(PendingGroup {
                account: r.try_get("account")?,
                class: r.try_get("class")?,
                workloads: r.try_get("n")?,
                gpus: r.try_get("gpus")?,
                oldest_submit_t: r.try_get("oldest")?,
            })
        };
        rows.iter().map(decode).collect::<Result<_, _>>().ctx("decode the pending workloads' counts")
    }
}

/// Cumulative normalised GPU-hours used from `from` to `now` by `spans`,
/// as points `(t, NGH used since from)`: at `from`, at every instant the
/// use changes (at most `max_points` of them; beyond that at `max_points`
/// evenly spaced instants) and at `now`. Each span counts from
/// `max(start, from)` to `min(end or now, now)` at `gpus × weight`, which
/// is what the ledger charges for the period (BUD-3, BUD-4), so the last
/// point is the period's `used_gpu_hours`.
pub fn burn_down(spans: &[UsageSpan], from: i64, now: i64, max_points: usize) -> Vec<(i64, f64)> {
    let now = now.max(from);
    let mut events: Vec<(i64, f64)> = Vec::with_capacity(spans.len() * 2);
    let mut total = 0.0;
    for s in spans {
        let (start, end) = (s.start_t.max(from), s.end_t.unwrap_or(now).min(now));
        if end > start {
            let rate = s.gpus as f64 * s.weight;
            events.push((start, rate));
            events.push((end, -rate));
            total += rate * (end - start) as f64;
        }
    }
    events.sort_by_key(|e| e.0);
    let mut times: Vec<i64> = Vec::with_capacity(events.len() + 2);
    times.push(from);
    let changes = {
        let mut t: Vec<i64> = events.iter().map(|e| e.0).collect();
        t.dedup();
        t
    };
    if changes.len() <= max_points {
        times.extend(changes);
    } else {
        let n = max_points.max(1) as i64;
        times.extend((1..n).map(|i| from + (now - from) * i / n));
    }
    times.push(now);
    times.dedup();
    let (mut cum, mut rate, mut last, mut next) = (0.0, 0.0, from, 0);
    let mut out = Vec::with_capacity(times.len());
    for t in times {
        while next < events.len() && events[next].0 <= t {
            cum += rate * (events[next].0 - last) as f64;
            last = events[next].0;
            rate += events[next].1;
            next += 1;
        }
        out.push((t, (cum + rate * (t - last) as f64) / HOUR));
    }
    // The last point is the exact sum (the sweep's running rate may carry
    // rounding residue across many changes).
    if let Some(p) = out.last_mut() {
        p.1 = total / HOUR;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start_t: i64, end_t: Option<i64>, gpus: i64, weight: f64) -> UsageSpan {
        UsageSpan { start_t, end_t, gpus, weight }
    }

    /// Named cases: (name, spans, from, now, expected points).
    #[test]
    fn burn_down_integrates_what_the_ledger_charges() {
        type Case = (&'static str, Vec<UsageSpan>, i64, i64, Vec<(i64, f64)>);
        let cases: Vec<Case> = vec![
            ("nothing used", vec![], 0, 3600, vec![(0, 0.0), (3600, 0.0)]),
            (
                "one span inside the period",
                vec![span(600, Some(1800), 2, 1.0)],
                0,
                3600,
                vec![(0, 0.0), (600, 0.0), (1800, 2.0 * 1200.0 / HOUR), (3600, 2.0 * 1200.0 / HOUR)],
            ),
            (
                "a span begun before the period counts from its start",
                vec![span(-500, Some(900), 4, 0.5)],
                0,
                3600,
                vec![(0, 0.0), (900, 2.0 * 900.0 / HOUR), (3600, 2.0 * 900.0 / HOUR)],
            ),
            (
                "a span still holding counts until now",
                vec![span(1800, None, 8, 1.0), span(0, Some(3600), 1, 2.0)],
                0,
                3600,
                vec![(0, 0.0), (1800, 2.0 * 1800.0 / HOUR), (3600, (2.0 * 3600.0 + 8.0 * 1800.0) / HOUR)],
            ),
            (
                "a span ended before the period counts nothing",
                vec![span(-900, Some(-100), 4, 1.0)],
                0,
                60,
                vec![(0, 0.0), (60, 0.0)],
            ),
        ];
        for (name, spans, from, now, want) in cases {
            let got = burn_down(&spans, from, now, 100);
            assert_eq!(got.len(), want.len(), "{name}: {got:?}");
            for ((t, v), (wt, wv)) in got.iter().zip(&want) {
                assert_eq!(t, wt, "{name}: {got:?}");
                assert!((v - wv).abs() < 1e-12, "{name}: {got:?}");
            }
        }
    }

    #[test]
    fn many_changes_are_sampled_evenly_and_end_exact() {
        let spans: Vec<UsageSpan> = (0..1000).map(|i| span(i * 10, Some(i * 10 + 5), 1, 1.3)).collect();
        let got = burn_down(&spans, 0, 10_000, 50);
        assert!(got.len() <= 52, "{}", got.len());
        assert!(got.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1 + 1e-12), "{got:?}");
        let exact = 1000.0 * 5.0 * 1.3 / HOUR;
        assert_eq!(got.last().map(|p| p.1), Some(exact));
        // Sampled points lie on the curve: at t = 5,000, 500 spans are done.
        let mid = got.iter().find(|p| p.0 == 5000).expect("a sample at the middle");
        assert!((mid.1 - 500.0 * 5.0 * 1.3 / HOUR).abs() < 1e-9, "{mid:?}");
    }
}
