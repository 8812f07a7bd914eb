//! Budget threshold events (`budget_events`, migration 0007): each once per
//! account, period and threshold, so a restarted server that notices one
//! again records nothing new and posts nothing.

use serde::{Deserialize, Serialize};
use sqlx::Row;
use sqlx::any::AnyRow;
use utoipa::ToSchema;

use super::{Ctx, Store, StoreError};

/// One threshold reached (docs/budgets.md, "Threshold events").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BudgetEventRow {
    /// When the threshold was reached (Unix seconds).
    pub t: i64,
    pub account: String,
    /// Start of the budget period it belongs to.
    pub period_start_t: i64,
    /// The fraction of the period's budget, e.g. 0.8.
    pub threshold: f64,
    /// NGH used then, and the period's budget with carry-over.
    pub used_gpu_hours: f64,
    pub budget_gpu_hours: f64,
}

impl Store {
    /// Records `events`; returns those that were new (the others were
    /// recorded before, by this process or an earlier one).
    pub async fn record_budget_events(&self, events: &[BudgetEventRow]) -> Result<Vec<BudgetEventRow>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.begin_write("record budget events").await?;
        let mut new = Vec::new();
        for e in events {
            let added = sqlx::query(
                "INSERT INTO budget_events (t, account, period_start_t, threshold, used_gpu_hours, budget_gpu_hours) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (account, period_start_t, threshold) DO NOTHING",
            )
            .bind(e.t)
            .bind(&e.account)
            .bind(e.period_start_t)
            .bind(e.threshold)
            .bind(e.used_gpu_hours)
            .bind(e.budget_gpu_hours)
            .execute(&mut *tx)
            .await
            .ctx("record a budget event")?
            .rows_affected();
            if added > 0 {
                new.push(e.clone());
            }
        }
        tx.commit().await.ctx("commit the budget events")?;
        Ok(new)
    }

    /// Every budget event, oldest first.
    pub async fn budget_events(&self) -> Result<Vec<BudgetEventRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT t, account, period_start_t, threshold, used_gpu_hours, budget_gpu_hours FROM budget_events \
             ORDER BY t, seq",
        )
        .fetch_all(&self.pool)
        .await
        .ctx("read the budget events")?;
        let decode = |r: &AnyRow| -> Result<BudgetEventRow, sqlx::Error> {
            Ok(BudgetEventRow {
                t: r.try_get("t")?,
                account: r.try_get("account")?,
                period_start_t: r.try_get("period_start_t")?,
                threshold: r.try_get("threshold")?,
                used_gpu_hours: r.try_get("used_gpu_hours")?,
                budget_gpu_hours: r.try_get("budget_gpu_hours")?,
            })
        };
        rows.iter().map(decode).collect::<Result<_, _>>().ctx("decode the budget events")
    }
}
