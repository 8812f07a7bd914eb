//! `allot db backup` and `allot db restore` of a SQLite store
//! (docs/operations.md, "Back up and restore").
//!
//! A backup is SQLite's `VACUUM INTO` run on a connection of its own: one
//! read transaction, so the copy is the store as of one commit, taken
//! while a server keeps serving (WAL readers do not block its writer). The
//! copy is written beside its destination, checked, and renamed into place.
//!
//! A restore checks what it restores before it touches the target: the
//! file is an allot store whose schema this binary knows, the target holds
//! no store unless forced, and no server serves the target (its lock file
//! and its lease). A PostgreSQL store is backed up and restored with
//! `pg_dump` and `pg_restore`; both commands refuse it, naming them.

use std::path::{Path, PathBuf};

use sqlx::Connection;

use super::lease::{FileLock, LeaseHolder, pid_alive};
use super::{Backend, SQLITE_MIGRATIONS, StoreError, StoreFailure, instance::sqlite_file, normalize_url};

/// Why a backup or a restore was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The `--db` value is not a store url.
    #[error("{0}")]
    Url(String),
    /// A PostgreSQL store: `pg_dump` / `pg_restore` do it.
    #[error(
        "{url} is a PostgreSQL store: allot db {verb} copies SQLite stores only; use {tool} (docs/operations.md, \
         \"Back up and restore\")"
    )]
    Postgres { url: String, verb: &'static str, tool: &'static str },
    /// The store to back up does not exist.
    #[error("the store {0} does not exist")]
    Missing(PathBuf),
    /// The backup's destination is taken.
    #[error("{0} already exists: a backup never overwrites a file; name a new one")]
    OutExists(PathBuf),
    /// The file to restore is not an allot store (or is damaged).
    #[error("{path} is not an allot store: {why}")]
    NotAStore { path: PathBuf, why: String },
    /// The file to restore was written by a newer allot.
    #[error(
        "{path} is an allot store of schema version {version}, newer than this allot's ({known}): restore it with \
         the allot that wrote it, or a newer one"
    )]
    Newer { path: PathBuf, version: i64, known: i64 },
    /// The target already holds a store (or some other file).
    #[error(
        "{target} already holds {what}: restoring would replace it. Pass --force to replace it (it is kept aside \
         as {target}.replaced-<unix time>), or restore into another file"
    )]
    TargetExists { target: PathBuf, what: String },
    /// A server serves the target.
    #[error("a server is serving {target}: {holder}. Stop it (and its standbys) first, then restore")]
    Served { target: PathBuf, holder: String },
    /// The store itself failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A file could not be read or written.
    #[error("cannot {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What a backup or a restore copied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Copied {
    /// The store's id (`meta.instance`), if it was ever served.
    pub instance: Option<String>,
    /// Its schema version.
    pub schema: i64,
    /// Its size in bytes.
    pub bytes: u64,
    /// With `--force`, where the target's former file was put.
    pub replaced: Option<PathBuf>,
}

/// The newest schema version this binary knows.
pub fn known_schema() -> i64 {
    super::known_version(SQLITE_MIGRATIONS)
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> BackupError {
    let path = path.to_path_buf();
    move |source| BackupError::Io { what, path, source }
}

fn db_err(what: &str) -> impl FnOnce(sqlx::Error) -> BackupError + '_ {
    move |e| BackupError::Store(StoreError::new(what, StoreFailure::Db(e)))
}

/// The SQLite file of a `--db` value, or why it has none.
fn sqlite_target(url: &str, verb: &'static str, tool: &'static str) -> Result<PathBuf, BackupError> {
    match normalize_url(url).map_err(BackupError::Url)? {
        (Backend::Postgres, _) => Err(BackupError::Postgres { url: url.to_string(), verb, tool }),
        (Backend::Sqlite, normal) => Ok(sqlite_file(&normal)),
    }
}

/// A connection of its own to a SQLite file (`mode`: `ro` or `rw`), with
/// the server's busy timeout.
async fn connect(path: &Path, mode: &str) -> Result<sqlx::AnyConnection, sqlx::Error> {
    sqlx::any::install_default_drivers();
    let mut c = sqlx::AnyConnection::connect(&format!("sqlite://{}?mode={mode}", path.display())).await?;
    sqlx::query("PRAGMA busy_timeout = 5000").execute(&mut c).await?;
    Ok(c)
}

/// Checks that `path` is an allot store this binary can serve; returns its
/// id and schema version.
async fn inspect(path: &Path) -> Result<(Option<String>, i64), BackupError> {
    let not = |why: String| BackupError::NotAStore { path: path.to_path_buf(), why };
    let mut c = connect(path, "ro").await.map_err(|e| not(format!("cannot open it as SQLite ({e})")))?;
    let checked = async {
        let ok: String = sqlx::query_scalar("PRAGMA quick_check")
            .fetch_one(&mut c)
            .await
            .map_err(|e| not(format!("not a SQLite database, or a damaged one ({e})")))?;
        if ok != "ok" {
            return Err(not(format!("SQLite finds it damaged ({ok})")));
        }
        let versions: Vec<i64> = sqlx::query_scalar("SELECT version FROM allot_schema")
            .fetch_all(&mut c)
            .await
            .map_err(|_| not("it has no allot_schema table (no schema version)".into()))?;
        let version = versions.iter().copied().max();
        let version = version.ok_or_else(|| not("its allot_schema table is empty (no schema version)".into()))?;
        // The store's own rule of a newer store (`Store::migrate`).
        if let Some(StoreFailure::Newer { version, known }) = super::newer_schema(&versions, SQLITE_MIGRATIONS) {
            return Err(BackupError::Newer { path: path.to_path_buf(), version, known });
        }
        let instance: Option<String> = sqlx::query_scalar("SELECT value FROM meta WHERE key = 'instance'")
            .fetch_optional(&mut c)
            .await
            .map_err(|e| not(format!("it has no readable meta table ({e})")))?;
        Ok((instance, version))
    }
    .await;
    let _ = c.close().await;
    checked
}

/// A copy's lease names no live holder: whoever serves the copy takes it
/// at once (the epoch goes on growing, so fencing stays monotonic).
async fn free_lease(path: &Path) -> Result<(), BackupError> {
    let mut c = connect(path, "rw").await.map_err(db_err("open the copy"))?;
    let r =
        sqlx::query("UPDATE lease SET expires_ms = 0").execute(&mut c).await.map_err(db_err("free the copy's lease"));
    let _ = c.close().await;
    r.map(|_| ())
}

fn private(path: &Path) -> Result<(), BackupError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io("make private", path))
}

/// Who should own the files of the store `db`: the owner of the file it
/// replaces, else of the directory it goes in (a restore run as root into
/// the state directory of a service's user leaves files that user can open).
fn owner_for(db: &Path) -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    let dir = db.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let m = std::fs::metadata(db).or_else(|_| std::fs::metadata(dir)).ok()?;
    Some((m.uid(), m.gid()))
}

/// Gives `path` to `owner`; only root may give a file away, so for anyone
/// else (whose files are their own) a refusal is no error.
fn give(path: &Path, owner: Option<(u32, u32)>) -> Result<(), BackupError> {
    let Some((uid, gid)) = owner else { return Ok(()) };
    match std::os::unix::fs::chown(path, Some(uid), Some(gid)) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Ok(()),
        r => r.map_err(io("give to the store's owner", path)),
    }
}

fn sync(path: &Path) -> Result<(), BackupError> {
    std::fs::File::open(path).and_then(|f| f.sync_all()).map_err(io("flush", path))
}

/// `allot db backup`: a consistent copy of the SQLite store `url` in
/// `out` (a new file, readable by its owner only), taken while a server
/// may be serving it.
pub async fn backup(url: &str, out: &Path) -> Result<Copied, BackupError> {
    let db = sqlite_target(url, "backup", "pg_dump --format=custom")?;
    if !db.is_file() {
        return Err(BackupError::Missing(db));
    }
    if out.exists() {
        return Err(BackupError::OutExists(out.to_path_buf()));
    }
    inspect(&db).await?;
    let tmp = PathBuf::from(format!("{}.partial-{}", out.display(), std::process::id()));
    let made = copy_into(&db, &tmp, out).await;
    if made.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    made
}

/// VACUUM INTO `tmp` (created empty and private first), checked, then
/// renamed to `out`.
async fn copy_into(db: &Path, tmp: &Path, out: &Path) -> Result<Copied, BackupError> {
    {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(tmp).map_err(io("create", tmp))?;
    }
    let mut c = connect(db, "ro").await.map_err(db_err("open the store"))?;
    let sql = format!("VACUUM INTO '{}'", tmp.display().to_string().replace('\'', "''"));
    let r = sqlx::query(&sql).execute(&mut c).await.map_err(db_err("copy the store"));
    let _ = c.close().await;
    r?;
    free_lease(tmp).await?;
    let (instance, schema) = inspect(tmp).await?;
    private(tmp)?;
    sync(tmp)?;
    if out.exists() {
        return Err(BackupError::OutExists(out.to_path_buf()));
    }
    std::fs::rename(tmp, out).map_err(io("rename the copy to", out))?;
    let bytes = std::fs::metadata(out).map_err(io("read", out))?.len();
    Ok(Copied { instance, schema, bytes, replaced: None })
}

/// Who serves the SQLite store `db`, if anyone: its lock file is held, or
/// its lease is live and held from another host (a process of this host
/// that is gone holds nothing).
async fn holder(db: &Path, locked: bool) -> Option<String> {
    let lease = async {
        let mut c = connect(db, "ro").await.ok()?;
        let row: Option<(i64, String, i64, String, i64)> = sqlx::query_as(
            "SELECT epoch, host, pid, listen, expires_ms - CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) \
             FROM lease WHERE id = 1",
        )
        .fetch_optional(&mut c)
        .await
        .ok()
        .flatten();
        let _ = c.close().await;
        row
    }
    .await;
    let describe = |(epoch, host, pid, listen, _): &(i64, String, i64, String, i64)| {
        format!("host {host}, pid {pid}, listening on {listen}, lease epoch {epoch}")
    };
    if !locked {
        let lock = format!("{}.lock", db.display());
        return Some(lease.as_ref().map(describe).unwrap_or_else(|| format!("a process holds {lock}")));
    }
    let row = lease?;
    let me = LeaseHolder::this_process("");
    let live = row.0 > 0 && row.4 > 0;
    let gone = row.1 == me.host && !pid_alive(row.2);
    (live && !gone).then(|| describe(&row))
}

/// What the target file holds, if anything (an empty file holds nothing).
async fn target_holds(db: &Path) -> Option<String> {
    let len = std::fs::metadata(db).ok()?.len();
    if len == 0 {
        return None;
    }
    Some(match inspect(db).await {
        Ok((Some(id), v)) => format!("allot store {id} (schema version {v})"),
        Ok((None, v)) => format!("an allot store (schema version {v})"),
        Err(_) => format!("a file of {len} bytes that is not an allot store"),
    })
}

/// `allot db restore`: replaces the SQLite store `url` by the backup
/// `input`, after checking both (see the module's doc).
pub async fn restore(url: &str, input: &Path, force: bool) -> Result<Copied, BackupError> {
    let db = sqlite_target(url, "restore", "pg_restore")?;
    if !input.is_file() {
        return Err(BackupError::NotAStore { path: input.to_path_buf(), why: "no such file".into() });
    }
    let (instance, schema) = inspect(input).await?;
    if let Some(dir) = db.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io("create the directory", dir))?;
    }
    let owner = owner_for(&db);
    let lock_path = PathBuf::from(format!("{}.lock", db.display()));
    let new_lock = !lock_path.exists();
    // Held until the restore is done: no server starts on a half-restored store.
    let lock = FileLock::try_lock(&lock_path).map_err(io("lock", &lock_path))?;
    if new_lock && lock.is_some() {
        give(&lock_path, owner)?;
    }
    if db.exists() {
        if let Some(h) = holder(&db, lock.is_some()).await {
            return Err(BackupError::Served { target: db, holder: h });
        }
    } else if lock.is_none() {
        return Err(BackupError::Served { target: db, holder: format!("a process holds {}", lock_path.display()) });
    }
    let held = target_holds(&db).await;
    if let (Some(what), false) = (&held, force) {
        return Err(BackupError::TargetExists { target: db, what: what.clone() });
    }
    let tmp = PathBuf::from(format!("{}.restoring-{}", db.display(), std::process::id()));
    let copied = async {
        std::fs::copy(input, &tmp).map_err(io("copy the backup to", &tmp))?;
        private(&tmp)?;
        give(&tmp, owner)?;
        free_lease(&tmp).await?;
        inspect(&tmp).await?;
        sync(&tmp)
    }
    .await;
    if let Err(e) = copied {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let replaced = if held.is_some() {
        let aside = PathBuf::from(format!("{}.replaced-{}", db.display(), crate::clock::now()));
        std::fs::rename(&db, &aside).map_err(io("set aside", &db))?;
        Some(aside)
    } else {
        None
    };
    // The former store's write-ahead log would be replayed into the restored one.
    for suffix in ["-wal", "-shm"] {
        let p = PathBuf::from(format!("{}{suffix}", db.display()));
        match (&replaced, p.exists()) {
            (Some(aside), true) => {
                let to = PathBuf::from(format!("{}{suffix}", aside.display()));
                std::fs::rename(&p, &to).map_err(io("set aside", &p))?;
            }
            (None, true) => std::fs::remove_file(&p).map_err(io("remove", &p))?,
            _ => {}
        }
    }
    std::fs::rename(&tmp, &db).map_err(io("rename the restored copy to", &db))?;
    drop(lock);
    let bytes = std::fs::metadata(&db).map_err(io("read", &db))?.len();
    Ok(Copied { instance, schema, bytes, replaced })
}
