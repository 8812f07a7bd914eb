//! The durable store: SQLite (embedded default) or PostgreSQL, one logical
//! schema (`migrations/sqlite`, `migrations/postgres`), reached through
//! sqlx's `Any` driver so every query is written once. Placeholders are
//! `$1, $2, …`, which both backends accept.
//!
//! The store is the source of truth: the scheduler writes every transition
//! (a start before the process is launched, a signal before it is sent, an
//! end when the process is gone) in one transaction per scheduling step, and
//! rebuilds its state from here at startup (`crate::recovery`).

pub mod accounts;
mod auth;
pub mod backup;
pub mod budget;
pub mod history;
pub mod instance;
pub mod lease;
mod rows;
pub mod sessions;
pub mod usage;
mod workloads;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{Any, AnyPool, Executor};

pub use lease::{Fence, LeaseConfig, LeaseHolder};

pub use rows::{
    AttemptRow, AuditRow, ClusterFilter, GpuSample, GpuSummary, LoginRow, NewWorkload, NodeEventRow, Op, OverrideRow,
    RowConditions, TokenRow, WorkloadFilter, WorkloadRow,
};
pub use workloads::{HELD, Idempotency, Inserted};

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

/// A store failure: what was being done and why.
#[derive(Debug, thiserror::Error)]
#[error("store: cannot {what}: {source}")]
pub struct StoreError {
    pub what: String,
    #[source]
    pub source: StoreFailure,
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreFailure {
    /// The database refused or could not be reached.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    /// This server no longer holds the store's lease: another server took
    /// over (its epoch is newer), or the lease could not be renewed in time.
    #[error("this server no longer holds the store's lease ({0})")]
    Fenced(String),
    /// The store is not the one this server was serving (the database file
    /// was deleted or replaced), or it cannot be used at all.
    #[error("{0}")]
    Lost(String),
    /// The store records a schema version this binary does not know: a
    /// newer allot migrated it. Nothing was changed.
    #[error(
        "the store's schema is version {version}, newer than this allot's ({known}): it was written by a newer \
         allot; run that version, or restore a backup made before the upgrade (docs/operations.md#upgrade)"
    )]
    Newer { version: i64, known: i64 },
}

impl StoreError {
    pub(crate) fn new(what: &str, source: StoreFailure) -> StoreError {
        StoreError { what: what.to_string(), source }
    }

    /// The lease is gone: this server must stop scheduling.
    pub fn is_fenced(&self) -> bool {
        matches!(self.source, StoreFailure::Fenced(_) | StoreFailure::Lost(_))
    }

    /// A failure that may go away by itself (the database is down, busy,
    /// full or read-only): the API answers 503 and the scheduler retries.
    pub fn is_unavailable(&self) -> bool {
        match &self.source {
            StoreFailure::Fenced(_) | StoreFailure::Lost(_) => true,
            StoreFailure::Newer { .. } => false,
            StoreFailure::Db(e) => transient(e),
        }
    }
}

/// Database errors an outage causes (as opposed to a bad query or row).
fn transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(d) => {
            let code = d.code().unwrap_or_default();
            // SQLite primary codes (the low byte of extended codes): BUSY,
            // LOCKED, READONLY, IOERR, CORRUPT, FULL, CANTOPEN, PROTOCOL.
            if let Ok(n) = code.parse::<i32>() {
                return matches!(n & 0xff, 5 | 6 | 8 | 10 | 11 | 13 | 14 | 15);
            }
            // PostgreSQL: connection exception, insufficient resources,
            // operator intervention, system error, serialization failure.
            ["08", "53", "57", "58", "40"].iter().any(|c| code.starts_with(c))
        }
        _ => false,
    }
}

/// SQLITE_BUSY / SQLITE_LOCKED: another connection holds the write lock.
fn busy(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => {
            d.code().and_then(|c| c.parse::<i32>().ok()).is_some_and(|n| matches!(n & 0xff, 5 | 6))
        }
        _ => false,
    }
}

pub(crate) trait Ctx<T> {
    fn ctx(self, what: &str) -> Result<T, StoreError>;
}

impl<T> Ctx<T> for Result<T, sqlx::Error> {
    fn ctx(self, what: &str) -> Result<T, StoreError> {
        self.map_err(|source| StoreError { what: what.to_string(), source: StoreFailure::Db(source) })
    }
}

/// Migrations per backend: (version, SQL).
const SQLITE_MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("migrations/sqlite/0001_init.sql")),
    (2, include_str!("migrations/sqlite/0002_idempotency.sql")),
    (3, include_str!("migrations/sqlite/0003_lease.sql")),
    (4, include_str!("migrations/sqlite/0004_token_ids.sql")),
    (5, include_str!("migrations/sqlite/0005_clusters.sql")),
    (6, include_str!("migrations/sqlite/0006_attempt_clusters.sql")),
    (7, include_str!("migrations/sqlite/0007_budget_events.sql")),
    (8, include_str!("migrations/sqlite/0008_accounts.sql")),
    (9, include_str!("migrations/sqlite/0009_time_limits.sql")),
    (10, include_str!("migrations/sqlite/0010_workdir.sql")),
    (11, include_str!("migrations/sqlite/0011_telemetry.sql")),
    (12, include_str!("migrations/sqlite/0012_contract_reports.sql")),
    (13, include_str!("migrations/sqlite/0013_dashboard.sql")),
    (14, include_str!("migrations/sqlite/0014_conditions.sql")),
    (15, include_str!("migrations/sqlite/0015_identity.sql")),
    (16, include_str!("migrations/sqlite/0016_login_groups.sql")),
    (17, include_str!("migrations/sqlite/0017_node_reason.sql")),
    (18, include_str!("migrations/sqlite/0018_submitter_index.sql")),
    (19, include_str!("migrations/sqlite/0019_outage_events.sql")),
    (20, include_str!("migrations/sqlite/0020_journal.sql")),
    (21, include_str!("migrations/sqlite/0021_snapshots.sql")),
];
const POSTGRES_MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("migrations/postgres/0001_init.sql")),
    (2, include_str!("migrations/postgres/0002_idempotency.sql")),
    (3, include_str!("migrations/postgres/0003_lease.sql")),
    (4, include_str!("migrations/postgres/0004_token_ids.sql")),
    (5, include_str!("migrations/postgres/0005_clusters.sql")),
    (6, include_str!("migrations/postgres/0006_attempt_clusters.sql")),
    (7, include_str!("migrations/postgres/0007_budget_events.sql")),
    (8, include_str!("migrations/postgres/0008_accounts.sql")),
    (9, include_str!("migrations/postgres/0009_time_limits.sql")),
    (10, include_str!("migrations/postgres/0010_workdir.sql")),
    (11, include_str!("migrations/postgres/0011_telemetry.sql")),
    (12, include_str!("migrations/postgres/0012_contract_reports.sql")),
    (13, include_str!("migrations/postgres/0013_dashboard.sql")),
    (14, include_str!("migrations/postgres/0014_conditions.sql")),
    (15, include_str!("migrations/postgres/0015_identity.sql")),
    (16, include_str!("migrations/postgres/0016_login_groups.sql")),
    (17, include_str!("migrations/postgres/0017_node_reason.sql")),
    (18, include_str!("migrations/postgres/0018_submitter_index.sql")),
    (19, include_str!("migrations/postgres/0019_outage_events.sql")),
    (20, include_str!("migrations/postgres/0020_journal.sql")),
    (21, include_str!("migrations/postgres/0021_snapshots.sql")),
];

/// How often a write that found the SQLite write lock taken (after
/// `busy_timeout`) is tried again before the error is returned.
const BUSY_RETRIES: u32 = 3;

/// A connection pool to the store.
#[derive(Clone, Debug)]
pub struct Store {
    pub(crate) pool: AnyPool,
    pub backend: Backend,
    /// The SQLite database file (None for PostgreSQL).
    pub sqlite_path: Option<PathBuf>,
    /// The lease epoch every write of a serving process is checked against.
    pub(crate) fence: Arc<Fence>,
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

/// Makes a SQLite store's files (the database, its `-wal` and `-shm`)
/// readable by their owner only, whoever made them and with whatever
/// umask: they hold every token's hash and everyone's commands and
/// environments (docs/security.md).
fn private_sqlite(db: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::PermissionsExt;
    for suffix in ["", "-wal", "-shm"] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        let p = PathBuf::from(name);
        let Ok(meta) = std::fs::symlink_metadata(&p) else { continue };
        let mode = meta.permissions().mode();
        if meta.is_file() && mode & 0o077 != 0 {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode & 0o700))
                .map_err(|e| StoreError::new("make the store private", StoreFailure::Db(sqlx::Error::Io(e))))?;
            tracing::info!(file = %p.display(), was = format!("{:o}", mode & 0o777), "the store's file is now readable by its owner only");
        }
    }
    Ok(())
}

impl Store {
    /// Connects, creating a SQLite file if needed, and runs the migrations.
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        Store::connect(url, true).await
    }

    /// Opens a store that must exist (a missing SQLite file is an error).
    pub async fn open_existing(url: &str) -> Result<Store, StoreError> {
        Store::connect(url, false).await
    }

    /// Connects and runs the migrations; `create`: a missing SQLite file is
    /// created (else it is an error).
    pub(crate) async fn connect(url: &str, create: bool) -> Result<Store, StoreError> {
        let bad_url =
            |m: String| StoreError::new("open the database", StoreFailure::Db(sqlx::Error::Configuration(m.into())));
        let (backend, url) = normalize_url(url).map_err(bad_url)?;
        let url = if create { url } else { url.replace("mode=rwc", "mode=rw") };
        sqlx::any::install_default_drivers();
        let opts = AnyConnectOptions::from_str(&url).ctx("parse the database url")?;
        let max = if backend == Backend::Sqlite { 4 } else { 8 };
        let pool = AnyPoolOptions::new()
            .max_connections(max)
            // A store outage answers 503 within seconds, not after 30 s.
            .acquire_timeout(Duration::from_secs(5))
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        // WAL for concurrent readers; FULL so a commit survives a
                        // crash of the machine, not only of the server. No memory
                        // map of the database file: a full disk or a truncated
                        // file is then an error (SQLITE_FULL / IOERR), never SIGBUS.
                        conn.execute("PRAGMA journal_mode = WAL").await?;
                        conn.execute("PRAGMA synchronous = FULL").await?;
                        conn.execute("PRAGMA busy_timeout = 5000").await?;
                        conn.execute("PRAGMA mmap_size = 0").await?;
                        conn.execute("PRAGMA foreign_keys = ON").await?;
                    } else {
                        // A server paused inside a transaction (SIGSTOP, a
                        // frozen VM) would hold the lease lock it shares
                        // with every write forever, and no standby could
                        // take over: PostgreSQL ends such a session after
                        // this long, and the paused server, once resumed,
                        // finds its lease gone (fenced).
                        conn.execute("SET idle_in_transaction_session_timeout = '10s'").await?;
                    }
                    Ok(())
                })
            })
            .connect_with(opts)
            .await
            .ctx("connect to the database")?;
        let sqlite_path = (backend == Backend::Sqlite).then(|| instance::sqlite_file(&url));
        if let Some(p) = &sqlite_path {
            private_sqlite(p)?;
        }
        let store = Store { pool, backend, sqlite_path, fence: Arc::new(Fence::default()) };
        store.migrate().await?;
        Ok(store)
    }

    /// Begins a write transaction of this process: on SQLite with `BEGIN
    /// IMMEDIATE` (the write lock is taken first, so a read-then-write never
    /// fails half-way with SQLITE_BUSY), retried a bounded number of times
    /// when the lock stays taken; then, when this process serves the store,
    /// checks that it still holds the lease ([`Fence`]).
    pub(crate) async fn begin_write(&self, what: &str) -> Result<WriteTx, StoreError> {
        self.fence.check_local(what)?;
        let begin = lease::begin_sql(self.backend, self.fence.epoch());
        let mut delay = Duration::from_millis(20);
        let mut tries = 0;
        let (mut tx, rows) = loop {
            let mut conn = self.pool.acquire().await.ctx(what)?;
            match conn.fetch_all(begin.as_str()).await {
                Ok(rows) => break (WriteTx { conn, done: false }, rows.len()),
                Err(e) => {
                    // Whatever state it is in, this connection is not reused.
                    conn.close_on_drop();
                    if !(busy(&e) && tries < BUSY_RETRIES) {
                        return Err(StoreError::new(what, StoreFailure::Db(e)));
                    }
                }
            }
            tries += 1;
            tracing::warn!(what, tries, "the store is busy; trying again");
            tokio::time::sleep(delay).await;
            delay *= 4;
        };
        lease::check_fence(self, &mut tx, rows, what).await?;
        Ok(tx)
    }

    /// Applies the migrations not yet recorded in `allot_schema`. A store
    /// that records a version this binary does not know was migrated by a
    /// newer allot, whose rows this one may misread: it is refused before
    /// anything is changed ([`StoreFailure::Newer`]).
    async fn migrate(&self) -> Result<(), StoreError> {
        let mut tx = match self.backend {
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await,
            Backend::Postgres => self.pool.begin().await,
        }
        .ctx("begin the migration")?;
        if self.backend == Backend::Postgres {
            // Two servers starting at once migrate one after the other.
            sqlx::query("SELECT pg_advisory_xact_lock(7446)").execute(&mut *tx).await.ctx("lock the schema")?;
        }
        sqlx::query("CREATE TABLE IF NOT EXISTS allot_schema (version BIGINT PRIMARY KEY, applied_t BIGINT NOT NULL)")
            .execute(&mut *tx)
            .await
            .ctx("create the schema table")?;
        let have: Vec<i64> = sqlx::query_scalar("SELECT version FROM allot_schema")
            .fetch_all(&mut *tx)
            .await
            .ctx("read the schema version")?;
        let list = match self.backend {
            Backend::Sqlite => SQLITE_MIGRATIONS,
            Backend::Postgres => POSTGRES_MIGRATIONS,
        };
        if let Some(newer) = newer_schema(&have, list) {
            // Dropping the transaction rolls it back: nothing was written.
            return Err(StoreError::new("open the store", newer));
        }
        // Every migration not yet recorded (not only those above the highest):
        // versions may be added out of order.
        for (version, sql) in list.iter().filter(|(v, _)| !have.contains(v)) {
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

    /// Closes the pool (waits for connections to be returned).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// The newest schema version of `list`'s migrations.
pub(crate) fn known_version(list: &[(i64, &str)]) -> i64 {
    list.iter().map(|(v, _)| *v).max().unwrap_or(0)
}

/// The refusal of a store whose `allot_schema` records a version that is
/// not one of `list`'s (a newer allot's migration), if it records any.
pub(crate) fn newer_schema(have: &[i64], list: &[(i64, &str)]) -> Option<StoreFailure> {
    let known = known_version(list);
    let unknown = have.iter().any(|v| !list.iter().any(|(k, _)| k == v));
    let version = have.iter().copied().max()?;
    unknown.then_some(StoreFailure::Newer { version, known })
}

/// A write transaction begun and ended with plain `BEGIN` / `COMMIT`
/// statements, so that a failed commit (a full disk) cannot leave a pooled
/// connection that believes it is still in a transaction: a transaction
/// that is not committed closes its connection (which rolls it back).
pub(crate) struct WriteTx {
    conn: sqlx::pool::PoolConnection<Any>,
    done: bool,
}

impl WriteTx {
    pub(crate) async fn commit(mut self) -> Result<(), sqlx::Error> {
        sqlx::query("COMMIT").execute(&mut *self.conn).await?;
        self.done = true;
        Ok(())
    }
}

impl std::ops::Deref for WriteTx {
    type Target = sqlx::AnyConnection;

    fn deref(&self) -> &sqlx::AnyConnection {
        &self.conn
    }
}

impl std::ops::DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut sqlx::AnyConnection {
        &mut self.conn
    }
}

impl Drop for WriteTx {
    fn drop(&mut self) {
        if !self.done {
            self.conn.close_on_drop();
        }
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
    fn a_version_this_binary_does_not_know_is_a_newer_store() {
        let known = SQLITE_MIGRATIONS.len() as i64;
        let all: Vec<i64> = (1..=known).collect();
        let cases: [(&str, Vec<i64>, Option<i64>); 5] = [
            ("new store", vec![], None),
            ("older store", vec![1, 2, 3], None),
            ("this binary's", all.clone(), None),
            ("one more", [all.clone(), vec![known + 1]].concat(), Some(known + 1)),
            ("a far newer one", [all.clone(), vec![999]].concat(), Some(999)),
        ];
        for (name, have, want) in cases {
            let got = newer_schema(&have, SQLITE_MIGRATIONS);
            match (got, want) {
                (None, None) => {}
                (Some(StoreFailure::Newer { version, known: k }), Some(v)) => {
                    assert_eq!((version, k), (v, known), "case {name}")
                }
                (got, want) => panic!("case {name}: got {got:?}, want a newer store of {want:?}"),
            }
        }
        let message = StoreFailure::Newer { version: 23, known: 21 }.to_string();
        assert_eq!(
            message,
            "the store's schema is version 23, newer than this allot's (21): it was written by a newer allot; run \
             that version, or restore a backup made before the upgrade (docs/operations.md#upgrade)"
        );
    }

    #[test]
    fn migration_files_split_into_statements() {
        for (s, p) in SQLITE_MIGRATIONS.iter().zip(POSTGRES_MIGRATIONS) {
            assert_eq!(s.0, p.0);
            assert_eq!(statements(s.1).count(), statements(p.1).count(), "migration {}", s.0);
        }
        assert!(statements(SQLITE_MIGRATIONS[0].1).count() >= 9);
    }
}
