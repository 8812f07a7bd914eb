//! The lease: exactly one active server per store (docs/reliability.md).
//!
//! The store's `lease` row names the active server (host, pid, listen
//! address, since when) and carries a fencing **epoch**, raised by one at
//! every takeover. Every write of a serving process begins by checking that
//! the row still has its epoch, so a paused or partitioned server can never
//! write after another took over: the fence is in the database, not in the
//! old server's clock. On PostgreSQL the check runs under the shared side
//! of a transaction-scoped advisory lock whose exclusive side the takeover
//! holds while it raises the epoch: a takeover waits for the writes in
//! flight, and every write that begins after it sees the new epoch (read
//! committed: the check's snapshot is taken after the lock). An advisory
//! lock writes nothing, where `FOR SHARE` on the row would rewrite it for
//! every transaction. On SQLite writes are serialised anyway.
//!
//! Expiry uses the database's clock (`clock_timestamp()` on PostgreSQL):
//! the holder renews every `retry` and stops acting (no executor command)
//! once `renew_deadline` has passed on its own monotonic clock since the
//! start of its last successful renewal; a candidate takes over once the
//! row's expiry (database time of the renewal + `duration`) is past. With
//! `renew_deadline < duration`, the old holder stops acting before anyone
//! may take over as long as the two clocks advance at rates within
//! `duration / renew_deadline` of each other (as client-go's leader
//! election; unlike it, writes are also fenced).
//!
//! SQLite has one host, so the lease is backed by a kernel lock on
//! `<db>.lock` (`flock`): it is released when the holder dies, so a
//! restart after kill -9 takes over at once, and a second server is refused
//! before it touches anything.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::Row;

use super::{Backend, Ctx, Store, StoreError, StoreFailure, WriteTx};

/// Lease timing (`allot serve --lease-*`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// How long a lease lasts after a renewal before another server may take it.
    pub duration: Duration,
    /// The holder stops acting when it has not renewed for this long.
    pub renew_deadline: Duration,
    /// How often the holder renews and a standby tries to take over.
    pub retry: Duration,
}

impl Default for LeaseConfig {
    /// Kubernetes' leader-election defaults: 15 s, 10 s, 2 s.
    fn default() -> LeaseConfig {
        LeaseConfig {
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(2),
        }
    }
}

impl LeaseConfig {
    /// `retry < renew_deadline < duration`, or why not.
    pub fn check(&self) -> Result<(), LeaseConfigError> {
        let kind = if self.retry.is_zero() || self.retry >= self.renew_deadline {
            LeaseConfigErrorKind::Retry { retry: self.retry, renew_deadline: self.renew_deadline }
        } else if self.renew_deadline >= self.duration {
            LeaseConfigErrorKind::RenewDeadline { renew_deadline: self.renew_deadline, duration: self.duration }
        } else {
            return Ok(());
        };
        Err(LeaseConfigError { kind })
    }
}

/// Lease timings that do not fit together.
#[derive(Debug, thiserror::Error)]
#[error("failed to use the lease timings: {kind}")]
pub struct LeaseConfigError {
    pub kind: LeaseConfigErrorKind,
}

/// Which ordering of `retry < renew_deadline < duration` does not hold.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseConfigErrorKind {
    #[error("--lease-retry ({retry:?}) must be above zero and below --lease-renew-deadline ({renew_deadline:?})")]
    Retry { retry: Duration, renew_deadline: Duration },
    #[error("--lease-renew-deadline ({renew_deadline:?}) must be below --lease-duration ({duration:?})")]
    RenewDeadline { renew_deadline: Duration, duration: Duration },
}

/// Who holds (or asks for) the lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseHolder {
    pub host: String,
    pub pid: i64,
    pub listen: String,
}

impl LeaseHolder {
    /// This process, listening on `listen`.
    pub fn this_process(listen: &str) -> LeaseHolder {
        LeaseHolder { host: hostname(), pid: i64::from(std::process::id()), listen: listen.to_string() }
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates
    // or truncates within it.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return "unknown-host".into();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Whether a process with this pid exists on this host (a zombie counts:
/// it may not have been reaped yet, but it no longer writes either way).
pub fn pid_alive(pid: i64) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return false };
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The lease row as read, with the database's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRow {
    pub epoch: i64,
    pub holder: LeaseHolder,
    pub since_ms: i64,
    pub expires_ms: i64,
    pub now_ms: i64,
}

impl LeaseRow {
    /// Held by a server that renewed it recently enough.
    pub fn live(&self) -> bool {
        self.epoch > 0 && self.expires_ms > self.now_ms
    }

    /// "host h, pid p, listening on a, since 2026-… (N s ago)".
    pub fn describe(&self) -> String {
        format!(
            "host {}, pid {}, listening on {}, since {} ({} s ago), lease epoch {}",
            self.holder.host,
            self.holder.pid,
            self.holder.listen,
            utc(self.since_ms / 1000),
            (self.now_ms - self.since_ms).max(0) / 1000,
            self.epoch
        )
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` of Unix seconds (the epoch for an earlier one).
fn utc(t: i64) -> String {
    allot_core::calendar::format_instant(t.max(0) as u64)
}

/// This process's hold on the lease, shared by everything that writes.
#[derive(Debug)]
pub struct Fence {
    /// 0: this process does not serve the store (an offline tool): writes
    /// are not fenced.
    epoch: AtomicI64,
    lost: Mutex<Option<String>>,
    base: Instant,
    /// Milliseconds after `base` until which the lease is surely held.
    valid_until_ms: AtomicU64,
}

impl Default for Fence {
    fn default() -> Fence {
        Fence {
            epoch: AtomicI64::new(0),
            lost: Mutex::new(None),
            base: Instant::now(),
            valid_until_ms: AtomicU64::new(u64::MAX),
        }
    }
}

impl Fence {
    pub fn epoch(&self) -> i64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Whether the lease is surely still held (the executor acts only then).
    pub fn fresh(&self) -> bool {
        self.lost().is_none() && (self.base.elapsed().as_millis() as u64) < self.valid_until_ms.load(Ordering::SeqCst)
    }

    /// Why the lease was lost, if it was.
    pub fn lost(&self) -> Option<String> {
        self.lost.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn lose(&self, why: String) {
        let mut l = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        if l.is_none() {
            *l = Some(why);
        }
        self.valid_until_ms.store(0, Ordering::SeqCst);
    }

    fn hold(&self, epoch: i64, renewal_started: Instant, deadline: Duration) {
        self.epoch.store(epoch, Ordering::SeqCst);
        self.renewed(renewal_started, deadline);
    }

    fn renewed(&self, started: Instant, deadline: Duration) {
        let until = (started.saturating_duration_since(self.base) + deadline).as_millis() as u64;
        self.valid_until_ms.store(until, Ordering::SeqCst);
    }

    /// Refuses every write once the lease is known to be lost.
    pub(crate) fn check_local(&self, what: &str) -> Result<(), StoreError> {
        match self.lost() {
            Some(why) => Err(StoreError::new(what, StoreFailure::Fenced(why))),
            None => Ok(()),
        }
    }
}

/// The advisory lock a takeover holds exclusively and every fenced write shares (PostgreSQL).
const PG_LEASE_LOCK: i64 = 7447;

/// How a write transaction begins. PostgreSQL, when serving: in one round
/// trip, `BEGIN`, the shared lease lock, then the epoch check (its row is
/// there while the epoch is this process's; see [`check_fence`]).
pub(crate) fn begin_sql(backend: Backend, epoch: i64) -> String {
    match backend {
        Backend::Sqlite => "BEGIN IMMEDIATE".into(),
        Backend::Postgres if epoch > 0 => format!(
            "BEGIN; SELECT 1 AS locked FROM (SELECT pg_advisory_xact_lock_shared({PG_LEASE_LOCK})) AS l; \
             SELECT epoch FROM lease WHERE id = 1 AND epoch = {epoch}"
        ),
        Backend::Postgres => "BEGIN".into(),
    }
}

/// Milliseconds of the database's clock, as SQL.
fn db_now(b: Backend) -> &'static str {
    match b {
        Backend::Postgres => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
        Backend::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
    }
}

/// The start of every write of a serving process: the lease row must still
/// carry this process's epoch. `begin_rows`: rows [`begin_sql`] returned
/// (PostgreSQL checked the epoch there).
pub(crate) async fn check_fence(
    store: &Store,
    tx: &mut WriteTx,
    begin_rows: usize,
    what: &str,
) -> Result<(), StoreError> {
    let epoch = store.fence.epoch();
    if epoch == 0 {
        return Ok(());
    }
    let held = match store.backend {
        // The lock's row and the lease row.
        Backend::Postgres => begin_rows == 2,
        Backend::Sqlite => sqlx::query_scalar::<_, i64>("SELECT epoch FROM lease WHERE id = 1 AND epoch = $1")
            .bind(epoch)
            .fetch_optional(&mut **tx)
            .await
            .ctx(what)?
            .is_some(),
    };
    if !held {
        let why = format!("lease epoch {epoch} was superseded: another server took over the store");
        store.fence.lose(why.clone());
        return Err(StoreError::new(what, StoreFailure::Fenced(why)));
    }
    Ok(())
}

/// When a live lease may be taken anyway.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Takeover {
    /// Only once it has expired.
    IfExpired,
    /// Always (SQLite: this process holds the file lock, so no holder is alive).
    Any,
    /// While it still has this epoch (its holder is known to be dead).
    Epoch(i64),
}

impl Store {
    /// The lease row.
    pub async fn lease(&self) -> Result<LeaseRow, StoreError> {
        let sql = format!(
            "SELECT epoch, host, pid, listen, since_ms, expires_ms, {} AS now_ms FROM lease WHERE id = 1",
            db_now(self.backend)
        );
        let r = sqlx::query(&sql).fetch_one(&self.pool).await.ctx("read the lease")?;
        let decode = || -> Result<LeaseRow, sqlx::Error> {
            Ok(LeaseRow {
                epoch: r.try_get("epoch")?,
                holder: LeaseHolder { host: r.try_get("host")?, pid: r.try_get("pid")?, listen: r.try_get("listen")? },
                since_ms: r.try_get("since_ms")?,
                expires_ms: r.try_get("expires_ms")?,
                now_ms: r.try_get("now_ms")?,
            })
        };
        decode().ctx("decode the lease")
    }

    /// Takes the lease if it is free or expired, or as `takeover` allows
    /// (the caller knows the holder is dead). `Ok(Ok(epoch))`: this process
    /// now holds it and its writes are fenced with `epoch`; `Ok(Err(row))`:
    /// another server holds it.
    pub async fn try_acquire_lease(
        &self,
        me: &LeaseHolder,
        cfg: &LeaseConfig,
        takeover: Takeover,
    ) -> Result<Result<i64, LeaseRow>, StoreError> {
        let started = Instant::now();
        let row = self.lease().await?;
        let force = match takeover {
            Takeover::IfExpired => false,
            Takeover::Any => true,
            Takeover::Epoch(e) => e == row.epoch,
        };
        if row.live() && !force {
            return Ok(Err(row));
        }
        let now = db_now(self.backend);
        let sql = format!(
            "UPDATE lease SET epoch = epoch + 1, host = $1, pid = $2, listen = $3, since_ms = {now}, \
             renewed_ms = {now}, expires_ms = {now} + $4 WHERE id = 1 AND epoch = $5"
        );
        let mut conn = self.pool.acquire().await.ctx("take the lease")?;
        let mut tx = sqlx::Connection::begin(&mut *conn).await.ctx("take the lease")?;
        if self.backend == Backend::Postgres {
            // Waits for the old holder's writes in flight; later ones see the new epoch.
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(PG_LEASE_LOCK)
                .execute(&mut *tx)
                .await
                .ctx("lock the lease")?;
        }
        let n = sqlx::query(&sql)
            .bind(&me.host)
            .bind(me.pid)
            .bind(&me.listen)
            .bind(cfg.duration.as_millis() as i64)
            .bind(row.epoch)
            .execute(&mut *tx)
            .await
            .ctx("take the lease")?
            .rows_affected();
        tx.commit().await.ctx("commit the lease")?;
        if n != 1 {
            // Another candidate was faster.
            return Ok(Err(self.lease().await?));
        }
        let epoch = row.epoch + 1;
        self.fence.hold(epoch, started, self.renew_deadline(cfg));
        if row.epoch > 0 {
            tracing::info!(epoch, previous = %row.describe(), "took over the store's lease");
        } else {
            tracing::info!(epoch, "took the store's lease");
        }
        Ok(Ok(epoch))
    }

    /// Renews this process's lease; `Ok(false)`: another server took it.
    pub async fn renew_lease(&self, cfg: &LeaseConfig) -> Result<bool, StoreError> {
        let started = Instant::now();
        let now = db_now(self.backend);
        let sql = format!("UPDATE lease SET renewed_ms = {now}, expires_ms = {now} + $1 WHERE id = 1 AND epoch = $2");
        let n = sqlx::query(&sql)
            .bind(cfg.duration.as_millis() as i64)
            .bind(self.fence.epoch())
            .execute(&self.pool)
            .await
            .ctx("renew the lease")?
            .rows_affected();
        if n == 1 {
            self.fence.renewed(started, self.renew_deadline(cfg));
        }
        Ok(n == 1)
    }

    /// How long a renewal keeps the lease surely held. SQLite: for good, as
    /// the file lock keeps every other server out while this one lives.
    fn renew_deadline(&self, cfg: &LeaseConfig) -> Duration {
        match self.backend {
            Backend::Sqlite => Duration::from_secs(u64::from(u32::MAX)),
            Backend::Postgres => cfg.renew_deadline,
        }
    }

    /// Gives the lease up (a clean shutdown): a standby may take over at once.
    pub async fn release_lease(&self) -> Result<(), StoreError> {
        let epoch = self.fence.epoch();
        if epoch == 0 {
            return Ok(());
        }
        sqlx::query("UPDATE lease SET expires_ms = 0 WHERE id = 1 AND epoch = $1")
            .bind(epoch)
            .execute(&self.pool)
            .await
            .ctx("release the lease")?;
        self.fence.lose("released at shutdown".into());
        Ok(())
    }
}

/// An exclusive kernel lock on a file (`flock`), held while the value lives.
#[derive(Debug)]
pub struct FileLock {
    _file: File,
    pub path: PathBuf,
}

impl FileLock {
    /// `Ok(None)`: another process holds it.
    pub fn try_lock(path: &Path) -> std::io::Result<Option<FileLock>> {
        use std::os::fd::AsRawFd;
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path)?;
        // SAFETY: flock on a file descriptor this function owns.
        let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r == 0 {
            return Ok(Some(FileLock { _file: file, path: path.to_path_buf() }));
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) { Ok(None) } else { Err(e) }
    }
}

/// Renews the lease every `retry` until another server takes it; watches
/// that the SQLite file is still the one that was opened. A renewal that
/// fails (the database is down or unreachable) is retried: past the renew
/// deadline the executor is told nothing more ([`Fence::fresh`]) until a
/// renewal succeeds, which it does only while no other server took over
/// (the epoch is unchanged, so nobody else wrote). Returns why this server
/// must stop; by then every write is refused.
pub async fn keep(store: Store, cfg: LeaseConfig) -> StoreError {
    let file = store.sqlite_path.as_deref().and_then(super::instance::file_id);
    let mut failing: Option<Instant> = None;
    let mut lapsed = false;
    loop {
        tokio::time::sleep(cfg.retry).await;
        if let (Some(path), Some(id)) = (store.sqlite_path.as_deref(), file)
            && super::instance::file_id(path) != Some(id)
        {
            return super::instance::file_gone(&store, path).await;
        }
        let why = match tokio::time::timeout(cfg.renew_deadline, store.renew_lease(&cfg)).await {
            Ok(Ok(true)) => {
                if let Some(since) = failing.take() {
                    tracing::info!(
                        epoch = store.fence.epoch(),
                        after_s = since.elapsed().as_secs_f64(),
                        "lease renewed again; acting again"
                    );
                }
                lapsed = false;
                continue;
            }
            Ok(Ok(false)) => {
                let why =
                    format!("lease epoch {} was superseded: another server took over the store", store.fence.epoch());
                tracing::error!(epoch = store.fence.epoch(), "{why}; stopping");
                store.fence.lose(why.clone());
                return StoreError::new("renew the lease", StoreFailure::Fenced(why));
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("the renewal did not answer within {:?}", cfg.renew_deadline),
        };
        failing.get_or_insert_with(Instant::now);
        if store.fence.fresh() {
            tracing::warn!(error = why, "cannot renew the store's lease; trying again");
        } else if !lapsed {
            lapsed = true;
            tracing::error!(
                error = why,
                "the lease was not renewed within the renew deadline: no launch, signal or kill until it is renewed \
                 (or another server takes over, and this one stops)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        for (t, want) in [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_796_149_496, "2026-12-01T18:24:56Z"),
        ] {
            assert_eq!(utc(t), want, "{t}");
        }
    }

    #[test]
    fn config_order() {
        assert!(LeaseConfig::default().check().is_ok());
        let s = Duration::from_secs;
        let bad = LeaseConfig { duration: s(5), renew_deadline: s(5), retry: s(1) };
        assert!(bad.check().unwrap_err().to_string().contains("--lease-renew-deadline"));
        let bad = LeaseConfig { duration: s(5), renew_deadline: s(2), retry: s(2) };
        assert!(bad.check().unwrap_err().to_string().contains("--lease-retry"));
    }
}
