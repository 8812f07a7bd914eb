//! The live account tree (`accounts`, migration 0008; rules ACC-1..ACC-3):
//! after the first start the store, not the config, is the truth. A change
//! rewrites the tree's rows, writes one audit entry per edit and, for a
//! rename, moves the workloads, grants and manager scopes of the subtree,
//! all in one transaction.

use sqlx::Row;

use super::{Ctx, Store, StoreError};

/// One account row: id, path, declaration (JSON) or `None` (implied).
pub type AccountRow = (i64, String, Option<String>);

/// One audit entry of an account change.
#[derive(Clone, Debug, PartialEq)]
pub struct AccountAudit {
    pub action: String,
    pub target: String,
    pub before: serde_json::Value,
    pub after: serde_json::Value,
}

impl Store {
    /// The stored tree in id order; empty before the first start of a
    /// version with migration 0008.
    pub async fn accounts(&self) -> Result<Vec<AccountRow>, StoreError> {
        let rows = sqlx::query("SELECT id, path, spec FROM accounts ORDER BY id")
            .fetch_all(&self.pool)
            .await
            .ctx("read the account tree")?;
        rows.iter()
            .map(|r| Ok((r.try_get("id")?, r.try_get("path")?, r.try_get("spec")?)))
            .collect::<Result<_, sqlx::Error>>()
            .ctx("decode the account tree")
    }

    /// Replaces the stored tree by `rows`, with `audit` entries by
    /// `principal` at `t` and the `renames` (old path, new path) applied to
    /// the store's workloads, grants and token scopes.
    pub async fn save_accounts(
        &self,
        rows: &[AccountRow],
        audit: &[AccountAudit],
        renames: &[(String, String)],
        principal: &str,
        t: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin_write("begin an account tree change").await?;
        sqlx::query("DELETE FROM accounts").execute(&mut *tx).await.ctx("clear the account tree")?;
        for (id, path, spec) in rows {
            sqlx::query("INSERT INTO accounts (id, path, spec, updated_t) VALUES ($1, $2, $3, $4)")
                .bind(*id)
                .bind(path)
                .bind(spec.as_deref())
                .bind(t)
                .execute(&mut *tx)
                .await
                .ctx("write an account")?;
        }
        for (from, to) in renames {
            // `from` itself, and every path below it (`from/…`): the prefix
            // is compared as a string, since `_` in a path is a LIKE wildcard.
            let below = format!("{from}/");
            let n = i64::try_from(below.chars().count()).unwrap_or(i64::MAX);
            for (table, column) in [("workloads", "account"), ("grants", "account"), ("tokens", "scope")] {
                let sql = format!(
                    "UPDATE {table} SET {column} = $1 || substr({column}, CAST($2 AS INTEGER)) \
                     WHERE {column} = $3 OR substr({column}, 1, CAST($4 AS INTEGER)) = $5"
                );
                sqlx::query(&sql)
                    .bind(to)
                    .bind(i64::try_from(from.chars().count()).unwrap_or(i64::MAX) + 1)
                    .bind(from)
                    .bind(n)
                    .bind(&below)
                    .execute(&mut *tx)
                    .await
                    .ctx("move the renamed account's rows")?;
            }
        }
        for a in audit {
            sqlx::query(
                "INSERT INTO audit (t, principal, action, target, before_value, after_value) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(t)
            .bind(principal)
            .bind(&a.action)
            .bind(&a.target)
            .bind(a.before.to_string())
            .bind(a.after.to_string())
            .execute(&mut *tx)
            .await
            .ctx("write the audit entry")?;
        }
        tx.commit().await.ctx("commit the account tree change")
    }

    /// The budget and share overrides of stores from before migration 0008
    /// (`account_overrides`), for the first seed: (path, budget, share),
    /// `None` where none was set.
    pub async fn legacy_overrides(&self) -> Result<Vec<(String, Option<f64>, Option<f64>)>, StoreError> {
        Ok(self
            .overrides()
            .await?
            .into_iter()
            .map(|o| (o.path, o.budget_gpu_hours.flatten(), o.share.flatten()))
            .collect())
    }
}
