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
    pub created_t: i64,
    pub expires_t: i64,
}

impl Store {
    /// Records a new session; expired ones are removed on the way.
    pub async fn insert_session(&self, s: &SessionRow) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.ctx("begin the session")?;
        sqlx::query("DELETE FROM sessions WHERE expires_t <= $1")
            .bind(s.created_t)
            .execute(&mut *tx)
            .await
            .ctx("remove expired sessions")?;
        sqlx::query("INSERT INTO sessions (hash, token_hash, csrf, created_t, expires_t) VALUES ($1, $2, $3, $4, $5)")
            .bind(&s.hash)
            .bind(&s.token_hash)
            .bind(&s.csrf)
            .bind(s.created_t)
            .bind(s.expires_t)
            .execute(&mut *tx)
            .await
            .ctx("record the session")?;
        tx.commit().await.ctx("commit the session")
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
