//! Dashboard sessions (`sessions`, migration 0013): the SHA-256 of a
//! browser's session cookie, the hash of the API token it was opened with,
//! its CSRF token and its expiry.

use sqlx::Row;

use super::{Ctx, Store, StoreError};

/// A live session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRow {
    pub hash: String,
    pub token_hash: String,
    pub csrf: String,
    /// When it was opened, Unix milliseconds: it orders a token's sessions
    /// (several may open within one second) when the oldest are ended.
    pub created_t: i64,
    /// When it expires, Unix seconds.
    pub expires_t: i64,
}

impl Store {
    /// Records a new session and ends the oldest others of its token beyond
    /// `keep - 1` (its token then holds at most `keep`: the newest);
    /// expired ones are removed on the way. Returns how many were ended.
    pub async fn insert_session(&self, s: &SessionRow, keep: usize) -> Result<usize, StoreError> {
        let mut tx = self.pool.begin().await.ctx("begin the session")?;
        sqlx::query("DELETE FROM sessions WHERE expires_t <= $1")
            .bind(s.created_t.div_euclid(1000))
            .execute(&mut *tx)
            .await
            .ctx("remove expired sessions")?;
        // The others of this token, newest first: those past keep - 1 end.
        let others: Vec<String> = sqlx::query_scalar(
            "SELECT hash FROM sessions WHERE token_hash = $1 AND hash <> $2 ORDER BY created_t DESC, hash",
        )
        .bind(&s.token_hash)
        .bind(&s.hash)
        .fetch_all(&mut *tx)
        .await
        .ctx("read the token's sessions")?;
        let ended = others.get(keep.saturating_sub(1)..).unwrap_or_default();
        for hash in ended {
            sqlx::query("DELETE FROM sessions WHERE hash = $1")
                .bind(hash)
                .execute(&mut *tx)
                .await
                .ctx("end the token's oldest session")?;
        }
        sqlx::query("INSERT INTO sessions (hash, token_hash, csrf, created_t, expires_t) VALUES ($1, $2, $3, $4, $5)")
            .bind(&s.hash)
            .bind(&s.token_hash)
            .bind(&s.csrf)
            .bind(s.created_t)
            .bind(s.expires_t)
            .execute(&mut *tx)
            .await
            .ctx("record the session")?;
        tx.commit().await.ctx("commit the session")?;
        Ok(ended.len())
    }

    /// Removes the sessions expired by `now`; returns how many.
    pub async fn sweep_sessions(&self, now: i64) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM sessions WHERE expires_t <= $1")
            .bind(now)
            .execute(&self.pool)
            .await
            .ctx("remove expired sessions")?;
        Ok(done.rows_affected())
    }

    /// The session with this hash, unless it expired by `now`.
    pub async fn session(&self, hash: &str, now: i64) -> Result<Option<SessionRow>, StoreError> {
        let row = sqlx::query(
            "SELECT hash, token_hash, csrf, created_t, expires_t FROM sessions WHERE hash = $1 AND expires_t > $2",
        )
        .bind(hash)
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .ctx("look up the session")?;
        let Some(r) = row else { return Ok(None) };
        let decode = || -> Result<SessionRow, sqlx::Error> {
            Ok(SessionRow {
                hash: r.try_get("hash")?,
                token_hash: r.try_get("token_hash")?,
                csrf: r.try_get("csrf")?,
                created_t: r.try_get("created_t")?,
                expires_t: r.try_get("expires_t")?,
            })
        };
        decode().map(Some).ctx("decode the session")
    }

    /// Ends a session (sign-out).
    pub async fn delete_session(&self, hash: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM sessions WHERE hash = $1")
            .bind(hash)
            .execute(&self.pool)
            .await
            .ctx("end the session")?;
        Ok(())
    }
}
