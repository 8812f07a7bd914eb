//! Tokens, grants, account overrides and the audit log.

use sqlx::Row;
use sqlx::any::AnyRow;

use super::rows::{AuditRow, LoginRow, OverrideRow, TokenRow};
use super::{Ctx, Store, StoreError};

fn token_row(r: &AnyRow) -> Result<TokenRow, sqlx::Error> {
    Ok(TokenRow {
        id: r.try_get("id")?,
        name: r.try_get("name")?,
        hash: r.try_get("hash")?,
        role: r.try_get("role")?,
        scope: r.try_get("scope")?,
        created_t: r.try_get("created_t")?,
        created_by: r.try_get("created_by")?,
        unix_user: r.try_get("unix_user")?,
        expires_t: r.try_get("expires_t")?,
    })
}

const TOKEN_COLUMNS: &str = "id, name, hash, role, scope, created_t, created_by, unix_user, expires_t";

fn login_row(r: &AnyRow) -> Result<LoginRow, sqlx::Error> {
    Ok(LoginRow {
        id: r.try_get("id")?,
        hash: r.try_get("hash")?,
        unix_user: r.try_get("unix_user")?,
        method: r.try_get("method")?,
        source: r.try_get("source")?,
        created_t: r.try_get("created_t")?,
        expires_t: r.try_get("expires_t")?,
        groups: r
            .try_get::<Option<String>, _>("groups")?
            .map(|g| serde_json::from_str(&g))
            .transpose()
            .map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
    })
}

const LOGIN_COLUMNS: &str = "id, hash, unix_user, method, source, created_t, expires_t, groups";

impl Store {
    /// Records a person's new session and ends their oldest beyond `max`
    /// live ones; expired sessions of everyone are removed on the way.
    pub async fn insert_login(&self, l: &LoginRow, max: i64) -> Result<(), StoreError> {
        let mut tx = self.begin_write("begin recording a session").await?;
        sqlx::query("DELETE FROM logins WHERE expires_t <= $1")
            .bind(l.created_t)
            .execute(&mut *tx)
            .await
            .ctx("remove expired sessions")?;
        sqlx::query(&format!("INSERT INTO logins ({LOGIN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"))
            .bind(&l.id)
            .bind(&l.hash)
            .bind(&l.unix_user)
            .bind(&l.method)
            .bind(&l.source)
            .bind(l.created_t)
            .bind(l.expires_t)
            .bind(l.groups.as_ref().map(|g| serde_json::to_string(g).expect("names serialize")))
            .execute(&mut *tx)
            .await
            .ctx("record the session")?;
        sqlx::query(
            "DELETE FROM logins WHERE unix_user = $1 AND id NOT IN \
             (SELECT id FROM logins WHERE unix_user = $1 ORDER BY created_t DESC, id DESC LIMIT $2)",
        )
        .bind(&l.unix_user)
        .bind(max)
        .execute(&mut *tx)
        .await
        .ctx("end the person's oldest sessions")?;
        tx.commit().await.ctx("commit the session")
    }

    /// The live session with this hash (not expired by `now`).
    pub async fn login_by_hash(&self, hash: &str, now: i64) -> Result<Option<LoginRow>, StoreError> {
        let row = sqlx::query(&format!("SELECT {LOGIN_COLUMNS} FROM logins WHERE hash = $1 AND expires_t > $2"))
            .bind(hash)
            .bind(now)
            .fetch_optional(&self.pool)
            .await
            .ctx("look up the session")?;
        row.as_ref().map(login_row).transpose().ctx("decode the session")
    }

    /// Live sessions (of `user` only, when given), newest first.
    pub async fn logins(&self, user: Option<&str>, now: i64) -> Result<Vec<LoginRow>, StoreError> {
        let mine = if user.is_some() { " AND unix_user = $2" } else { "" };
        let sql = format!("SELECT {LOGIN_COLUMNS} FROM logins WHERE expires_t > $1{mine} ORDER BY created_t DESC, id");
        let mut q = sqlx::query(&sql).bind(now);
        if let Some(u) = user {
            q = q.bind(u);
        }
        let rows = q.fetch_all(&self.pool).await.ctx("list sessions")?;
        rows.iter().map(login_row).collect::<Result<_, _>>().ctx("decode a session")
    }

    /// Ends the session `id` (of `user` only, when given), audited as
    /// `by`'s; `Ok(false)` when there is none.
    pub async fn delete_login(&self, id: &str, user: Option<&str>, by: &str, t: i64) -> Result<bool, StoreError> {
        let mut tx = self.begin_write("begin ending a session").await?;
        let mine = if user.is_some() { " AND unix_user = $2" } else { "" };
        let sql = format!("DELETE FROM logins WHERE id = $1{mine}");
        let mut q = sqlx::query(&sql).bind(id);
        if let Some(u) = user {
            q = q.bind(u);
        }
        let n = q.execute(&mut *tx).await.ctx("end the session")?.rows_affected();
        if n > 0 {
            sqlx::query(
                "INSERT INTO audit (t, principal, action, target, before_value, after_value) VALUES ($1, $2, $3, $4, NULL, NULL)",
            )
            .bind(t)
            .bind(by)
            .bind("session.revoke")
            .bind(id)
            .execute(&mut *tx)
            .await
            .ctx("audit the session's end")?;
        }
        tx.commit().await.ctx("commit the session's end")?;
        Ok(n > 0)
    }

    /// Stores a token and its grants; `Ok(false)` when the name is taken.
    pub async fn insert_token(&self, t: &TokenRow, grants: &[String]) -> Result<bool, StoreError> {
        let mut tx = self.begin_write("begin creating a token").await?;
        let taken: Option<String> = sqlx::query_scalar("SELECT name FROM tokens WHERE name = $1")
            .bind(&t.name)
            .fetch_optional(&mut *tx)
            .await
            .ctx("look up the token name")?;
        if taken.is_some() {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO tokens (id, name, hash, role, scope, created_t, created_by, unix_user, expires_t) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(&t.id)
        .bind(&t.name)
        .bind(&t.hash)
        .bind(&t.role)
        .bind(&t.scope)
        .bind(t.created_t)
        .bind(&t.created_by)
        .bind(&t.unix_user)
        .bind(t.expires_t)
        .execute(&mut *tx)
        .await
        .ctx("insert the token")?;
        for g in grants {
            sqlx::query("INSERT INTO grants (principal, account) VALUES ($1, $2)")
                .bind(&t.name)
                .bind(g)
                .execute(&mut *tx)
                .await
                .ctx("insert a grant")?;
        }
        sqlx::query(
            "INSERT INTO audit (t, principal, action, target, before_value, after_value) VALUES ($1, $2, $3, $4, NULL, $5)",
        )
        .bind(t.created_t)
        .bind(&t.created_by)
        .bind("token.create")
        .bind(&t.name)
        .bind(serde_json::json!({"role": t.role, "scope": t.scope, "projects": grants, "user": t.unix_user, "expires_t": t.expires_t}).to_string())
        .execute(&mut *tx)
        .await
        .ctx("audit the token")?;
        tx.commit().await.ctx("commit the token")?;
        Ok(true)
    }

    /// The token with this hash and its grants.
    pub async fn token_by_hash(&self, hash: &str) -> Result<Option<(TokenRow, Vec<String>)>, StoreError> {
        let row = sqlx::query(&format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE hash = $1"))
            .bind(hash)
            .fetch_optional(&self.pool)
            .await
            .ctx("look up the token")?;
        let Some(row) = row else { return Ok(None) };
        let t = token_row(&row).ctx("decode the token")?;
        let grants = sqlx::query_scalar("SELECT account FROM grants WHERE principal = $1 ORDER BY account")
            .bind(&t.name)
            .fetch_all(&self.pool)
            .await
            .ctx("read grants")?;
        Ok(Some((t, grants)))
    }

    /// Whether the store knows `user` as a person: a token's name or Unix
    /// user, a session's Unix user, or a workload's submitter.
    pub async fn knows_user(&self, user: &str) -> Result<bool, StoreError> {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT CAST(1 AS BIGINT) FROM tokens WHERE name = $1 OR unix_user = $1 \
             UNION ALL SELECT CAST(1 AS BIGINT) FROM logins WHERE unix_user = $1 \
             UNION ALL SELECT CAST(1 AS BIGINT) FROM workloads WHERE submitter = $1 LIMIT 1",
        )
        .bind(user)
        .fetch_optional(&self.pool)
        .await
        .ctx("look a user up")?;
        Ok(found.is_some())
    }

    /// Every token with its grants, by name.
    pub async fn tokens(&self) -> Result<Vec<(TokenRow, Vec<String>)>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY name"))
            .fetch_all(&self.pool)
            .await
            .ctx("list tokens")?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let t = token_row(r).ctx("decode a token")?;
            let grants = sqlx::query_scalar("SELECT account FROM grants WHERE principal = $1 ORDER BY account")
                .bind(&t.name)
                .fetch_all(&self.pool)
                .await
                .ctx("read grants")?;
            out.push((t, grants));
        }
        Ok(out)
    }

    /// Deletes a token and its grants; `Ok(false)` when there is none.
    pub async fn delete_token(&self, name: &str, by: &str, t: i64) -> Result<bool, StoreError> {
        let mut tx = self.begin_write("begin revoking a token").await?;
        sqlx::query("DELETE FROM grants WHERE principal = $1")
            .bind(name)
            .execute(&mut *tx)
            .await
            .ctx("delete grants")?;
        let n = sqlx::query("DELETE FROM tokens WHERE name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await
            .ctx("delete the token")?
            .rows_affected();
        if n > 0 {
            sqlx::query(
                "INSERT INTO audit (t, principal, action, target, before_value, after_value) VALUES ($1, $2, $3, $4, NULL, NULL)",
            )
            .bind(t)
            .bind(by)
            .bind("token.revoke")
            .bind(name)
            .execute(&mut *tx)
            .await
            .ctx("audit the revocation")?;
        }
        tx.commit().await.ctx("commit the revocation")?;
        Ok(n > 0)
    }

    /// The budgets and shares set through the API. A value set back to the
    /// config's (`null`) is not an override, also when an older version
    /// stored it as a removed value.
    pub async fn overrides(&self) -> Result<Vec<OverrideRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT path, budget_gpu_hours, budget_set, share, share_set FROM account_overrides ORDER BY path",
        )
        .fetch_all(&self.pool)
        .await
        .ctx("read account overrides")?;
        let decode = |r: &AnyRow| -> Result<OverrideRow, sqlx::Error> {
            let budget_set: i64 = r.try_get("budget_set")?;
            let share_set: i64 = r.try_get("share_set")?;
            let budget: Option<f64> = r.try_get("budget_gpu_hours")?;
            let share: Option<f64> = r.try_get("share")?;
            Ok(OverrideRow {
                path: r.try_get("path")?,
                budget_gpu_hours: budget.filter(|_| budget_set != 0).map(Some),
                share: share.filter(|_| share_set != 0).map(Some),
            })
        };
        rows.iter().map(decode).collect::<Result<_, _>>().ctx("decode account overrides")
    }

    /// Records a budget (`field = "budget"`) or share change and its audit
    /// entry in one transaction; `value = None` returns to the config's
    /// value (the override is cleared).
    #[expect(clippy::too_many_arguments, reason = "one audited change: who, when, what, before and after")]
    pub async fn set_override(
        &self,
        path: &str,
        field: &'static str,
        value: Option<f64>,
        principal: &str,
        t: i64,
        before: &serde_json::Value,
        after: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin_write("begin an account change").await?;
        let exists: Option<String> = sqlx::query_scalar("SELECT path FROM account_overrides WHERE path = $1")
            .bind(path)
            .fetch_optional(&mut *tx)
            .await
            .ctx("read the account override")?;
        if exists.is_none() {
            sqlx::query("INSERT INTO account_overrides (path, updated_t) VALUES ($1, $2)")
                .bind(path)
                .bind(t)
                .execute(&mut *tx)
                .await
                .ctx("insert the account override")?;
        }
        let sql = match field {
            "budget" => {
                "UPDATE account_overrides SET budget_gpu_hours = $1, budget_set = $2, updated_t = $3 WHERE path = $4"
            }
            _ => "UPDATE account_overrides SET share = $1, share_set = $2, updated_t = $3 WHERE path = $4",
        };
        let set = i64::from(value.is_some());
        sqlx::query(sql)
            .bind(value)
            .bind(set)
            .bind(t)
            .bind(path)
            .execute(&mut *tx)
            .await
            .ctx("update the account override")?;
        sqlx::query(
            "INSERT INTO audit (t, principal, action, target, before_value, after_value) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(t)
        .bind(principal)
        .bind(format!("account.{field}"))
        .bind(path)
        .bind(before.to_string())
        .bind(after.to_string())
        .execute(&mut *tx)
        .await
        .ctx("write the audit entry")?;
        tx.commit().await.ctx("commit the account change")
    }

    /// Writes one audit entry of its own (a sign-in attempt: `after` says
    /// how, from where and whether it was refused).
    pub async fn insert_audit(
        &self,
        t: i64,
        principal: &str,
        action: &str,
        target: &str,
        after: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin_write("begin an audit entry").await?;
        sqlx::query(
            "INSERT INTO audit (t, principal, action, target, before_value, after_value) VALUES ($1, $2, $3, $4, NULL, $5)",
        )
        .bind(t)
        .bind(principal)
        .bind(action)
        .bind(target)
        .bind(after.to_string())
        .execute(&mut *tx)
        .await
        .ctx("write the audit entry")?;
        tx.commit().await.ctx("commit the audit entry")
    }

    /// Audit entries, newest first.
    pub async fn audit(&self, limit: i64) -> Result<Vec<AuditRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT seq, t, principal, action, target, before_value, after_value FROM audit ORDER BY seq DESC LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .ctx("read the audit log")?;
        let decode = |r: &AnyRow| -> Result<AuditRow, sqlx::Error> {
            Ok(AuditRow {
                seq: r.try_get("seq")?,
                t: r.try_get("t")?,
                principal: r.try_get("principal")?,
                action: r.try_get("action")?,
                target: r.try_get("target")?,
                before: r.try_get("before_value")?,
                after: r.try_get("after_value")?,
            })
        };
        rows.iter().map(decode).collect::<Result<_, _>>().ctx("decode the audit log")
    }
}
