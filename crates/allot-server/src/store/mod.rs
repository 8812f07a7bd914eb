//! The durable store: SQLite (embedded default) or PostgreSQL, one logical
//! schema (`migrations/sqlite`, `migrations/postgres`), reached through
//! sqlx's `Any` driver so every query is written once. Placeholders are
//! `$1, $2, …`, which both backends accept.
//!
//! The store is the source of truth: the scheduler writes every transition
//! (a start before the process is launched, a signal before it is sent, an
//! end when the process is gone) in one transaction per scheduling step, and
//! rebuilds its state from here at startup (`crate::recovery`).

mod auth;
mod rows;
mod workloads;

use std::str::FromStr;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Executor};

pub use rows::{
    AttemptRow, AuditRow, NewWorkload, NodeEventRow, Op, OverrideRow, TokenRow, WorkloadFilter, WorkloadRow,
};

/// Which database a store talks to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// A store failure: what was being done and the database error.
#[derive(Debug, thiserror::Error)]
#[error("store: cannot {what}: {source}")]
pub struct StoreError {
    pub what: String,
    #[source]
    pub source: sqlx::Error,
}

pub(crate) trait Ctx<T> {
    fn ctx(self, what: &str) -> Result<T, StoreError>;
}

impl<T> Ctx<T> for Result<T, sqlx::Error> {
    fn ctx(self, what: &str) -> Result<T, StoreError> {
        self.map_err(|source| StoreError { what: what.to_string(), source })
    }
}

/// Migrations per backend: (version, SQL).
const SQLITE_MIGRATIONS: &[(i64, &str)] = &[(1, include_str!("migrations/sqlite/0001_init.sql"))];
const POSTGRES_MIGRATIONS: &[(i64, &str)] = &[(1, include_str!("migrations/postgres/0001_init.sql"))];

/// A connection pool to the store.
#[derive(Clone, Debug)]
pub struct Store {
    pub(crate) pool: AnyPool,
    pub backend: Backend,
}

/// Normalises a `--db` value: `sqlite://PATH` (created if missing),
/// `postgres://…`, or a bare path meaning SQLite.
pub fn normalize_url(url: &str) -> Result<(Backend, String), String> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok((Backend::Postgres, url.to_string()));
    }
    let path = if let Some(p) = url.strip_prefix("sqlite://") {
        p
    } else if let Some(p) = url.strip_prefix("sqlite:") {
        p
    } else if url.contains("://") {
        return Err(format!("unsupported database url {url:?} (use sqlite://PATH or postgres://…)"));
    } else {
        url
    };
    if path.is_empty() {
        return Err("the sqlite url names no file (use sqlite://PATH)".to_string());
    }
    let sep = if path.contains('?') { '&' } else { '?' };
    let mode = if path.contains("mode=") { String::new() } else { format!("{sep}mode=rwc") };
    Ok((Backend::Sqlite, format!("sqlite://{path}{mode}")))
}

impl Store {
    /// Connects, creating a SQLite file if needed, and runs the migrations.
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        let (backend, url) = normalize_url(url).map_err(|m| StoreError {
            what: "open the database".into(),
            source: sqlx::Error::Configuration(m.into()),
        })?;
        sqlx::any::install_default_drivers();
        let opts = AnyConnectOptions::from_str(&url).ctx("parse the database url")?;
        let max = if backend == Backend::Sqlite { 4 } else { 8 };
        let pool = AnyPoolOptions::new()
            .max_connections(max)
            .acquire_timeout(Duration::from_secs(30))
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        // WAL for concurrent readers; FULL so a commit survives a
                        // crash of the machine, not only of the server.
                        conn.execute("PRAGMA journal_mode = WAL").await?;
                        conn.execute("PRAGMA synchronous = FULL").await?;
                        conn.execute("PRAGMA busy_timeout = 10000").await?;
                        conn.execute("PRAGMA foreign_keys = ON").await?;
                    }
                    Ok(())
                })
            })
            .connect_with(opts)
            .await
            .ctx("connect to the database")?;
        let store = Store { pool, backend };
        store.migrate().await?;
        Ok(store)
    }

    /// Applies the migrations not yet recorded in `allot_schema`.
    async fn migrate(&self) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.ctx("begin the migration")?;
        sqlx::query("CREATE TABLE IF NOT EXISTS allot_schema (version BIGINT PRIMARY KEY, applied_t BIGINT NOT NULL)")
            .execute(&mut *tx)
            .await
            .ctx("create the schema table")?;
        let have: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM allot_schema")
            .fetch_one(&mut *tx)
            .await
            .ctx("read the schema version")?;
        let list = match self.backend {
            Backend::Sqlite => SQLITE_MIGRATIONS,
            Backend::Postgres => POSTGRES_MIGRATIONS,
        };
        for (version, sql) in list.iter().filter(|(v, _)| *v > have.unwrap_or(0)) {
            for stmt in statements(sql) {
                sqlx::query(stmt).execute(&mut *tx).await.ctx(&format!("run migration {version}"))?;
            }
            sqlx::query("INSERT INTO allot_schema (version, applied_t) VALUES ($1, $2)")
                .bind(*version)
                .bind(crate::clock::now() as i64)
                .execute(&mut *tx)
                .await
                .ctx("record the migration")?;
        }
        tx.commit().await.ctx("commit the migration")
    }

    /// This store's identity: a random id made when it was created. Processes
    /// started for it carry it, so a restarted server finds them whatever
    /// its data directory or URL spelling.
    pub async fn instance_id(&self) -> Result<String, StoreError> {
        let fresh = crate::auth::new_token().replace("allot_", "");
        let mut tx = self.pool.begin().await.ctx("begin reading the store id")?;
        let have: Option<String> = sqlx::query_scalar("SELECT value FROM meta WHERE key = 'instance'")
            .fetch_optional(&mut *tx)
            .await
            .ctx("read the store id")?;
        let id = match have {
            Some(id) => id,
            None => {
                sqlx::query("INSERT INTO meta (key, value) VALUES ('instance', $1)")
                    .bind(&fresh[..16])
                    .execute(&mut *tx)
                    .await
                    .ctx("record the store id")?;
                fresh[..16].to_string()
            }
        };
        tx.commit().await.ctx("commit the store id")?;
        Ok(id)
    }

    /// Closes the pool (waits for connections to be returned).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// The statements of a migration file: split at `;` line ends, comments
/// and blank chunks dropped.
fn statements(sql: &str) -> impl Iterator<Item = &str> {
    sql.split(";\n").map(str::trim).filter(|s| s.lines().any(|l| !l.trim().is_empty() && !l.trim().starts_with("--")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let cases = [
            ("sqlite path", "sqlite://./a.db", Ok((Backend::Sqlite, "sqlite://./a.db?mode=rwc".to_string()))),
            ("bare path", "/tmp/x.db", Ok((Backend::Sqlite, "sqlite:///tmp/x.db?mode=rwc".to_string()))),
            ("postgres", "postgres://u@h/db", Ok((Backend::Postgres, "postgres://u@h/db".to_string()))),
        ];
        for (name, url, want) in cases {
            assert_eq!(normalize_url(url), want, "case {name}");
        }
        assert!(normalize_url("mysql://x").is_err());
    }

    #[test]
    fn migration_files_split_into_statements() {
        let n = statements(SQLITE_MIGRATIONS[0].1).count();
        assert_eq!(n, statements(POSTGRES_MIGRATIONS[0].1).count());
        assert!(n >= 9, "{n}");
    }
}
