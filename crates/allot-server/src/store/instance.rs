//! The store's identity, kept in the store (`meta.instance`, a random id
//! made when it is first served) and beside it, in the data directory
//! (`<data-dir>/store-instance`). A server refuses to start when the two
//! disagree or when the database is missing or empty where a store was
//! served before, so a deleted or replaced database is never silently
//! replaced by an empty one. An empty store is created by `allot db init`,
//! or on the first start (no database file and no record of one).
//!
//! While serving, the SQLite file's identity (device and inode) is watched:
//! a deleted or replaced file stops the server, after everything the open
//! connections still see has been copied to `<db>.rescued-<unix time>`.

use std::path::{Path, PathBuf};

use super::{Backend, Ctx, Store, StoreError, StoreFailure, normalize_url};

/// The record's file name in the data directory.
pub const RECORD: &str = "store-instance";

/// The database file of a normalised `sqlite://PATH?…` url.
pub(crate) fn sqlite_file(url: &str) -> PathBuf {
    let rest = url.strip_prefix("sqlite://").unwrap_or(url);
    PathBuf::from(rest.split('?').next().unwrap_or(rest))
}

/// (device, inode) of a file, if it exists.
pub(crate) fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

fn lost(msg: String) -> StoreError {
    StoreError::new("open the store", StoreFailure::Lost(msg))
}

/// The record: the store's id on its first line and, for a SQLite store,
/// its database file (absolute) on the second (records written before have
/// the id only).
fn read_record(data_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(data_dir.join(RECORD)).ok()?;
    Some(text.lines().next()?.trim().to_string()).filter(|s| !s.is_empty())
}

/// The SQLite database file the record names, if it names one.
fn recorded_file(data_dir: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(data_dir.join(RECORD)).ok()?;
    text.lines().nth(1).map(str::trim).filter(|l| !l.is_empty()).map(PathBuf::from)
}

fn write_record(data_dir: &Path, id: &str, file: Option<&Path>) -> Result<(), StoreError> {
    let path = data_dir.join(RECORD);
    let tmp = data_dir.join(format!("{RECORD}.tmp"));
    let io = |e: std::io::Error| {
        StoreError::new(&format!("record the store id in {}", path.display()), StoreFailure::Db(sqlx::Error::Io(e)))
    };
    std::fs::create_dir_all(data_dir).map_err(io)?;
    let file = file.and_then(|f| std::path::absolute(f).ok()).map(|f| format!("{}\n", f.display()));
    std::fs::write(&tmp, format!("{id}\n{}", file.unwrap_or_default())).map_err(io)?;
    std::fs::rename(&tmp, &path).map_err(io)
}

impl Store {
    /// The id recorded in the store, if any.
    async fn stored_instance(&self) -> Result<Option<String>, StoreError> {
        sqlx::query_scalar("SELECT value FROM meta WHERE key = 'instance'")
            .fetch_optional(&self.pool)
            .await
            .ctx("read the store id")
    }

    /// This store's identity: a random id made when it was created. Processes
    /// started for it carry it, so a restarted server finds them whatever
    /// its data directory or URL spelling.
    pub async fn instance_id(&self) -> Result<String, StoreError> {
        let mut tx = self.begin_write("record the store id").await?;
        let have: Option<String> = sqlx::query_scalar("SELECT value FROM meta WHERE key = 'instance'")
            .fetch_optional(&mut *tx)
            .await
            .ctx("read the store id")?;
        let id = match have {
            Some(id) => id,
            None => {
                let fresh = crate::secret::new_token().replace("allot_", "")[..16].to_string();
                sqlx::query("INSERT INTO meta (key, value) VALUES ('instance', $1)")
                    .bind(&fresh)
                    .execute(&mut *tx)
                    .await
                    .ctx("record the store id")?;
                fresh
            }
        };
        tx.commit().await.ctx("commit the store id")?;
        Ok(id)
    }
}

/// Opens the store `allot serve` was given, checked against the data
/// directory's record; returns it and its id.
pub async fn open_for_serve(url: &str, data_dir: &Path) -> Result<(Store, String), StoreError> {
    let (backend, normal) = normalize_url(url).map_err(lost)?;
    let remembered = read_record(data_dir);
    let init = format!("`allot db init --db {url} --data-dir {}`", data_dir.display());
    if backend == Backend::Sqlite {
        let file = sqlite_file(&normal);
        if !file.exists() {
            if let Some(id) = &remembered {
                let theirs = recorded_file(data_dir);
                let mine = std::path::absolute(&file).ok();
                let other = theirs.filter(|t| t.exists() && mine.as_ref() != Some(t));
                return Err(lost(match other {
                    Some(t) => format!(
                        "the data directory {} belongs to another store, {} (store {id}): a new store needs a data \
                         directory of its own. Start it with --data-dir and a new directory (say {}), or serve \
                         that store with --db sqlite:{}",
                        data_dir.display(),
                        t.display(),
                        own_dir_for(&file).display(),
                        t.display()
                    ),
                    None => format!(
                        "the database file {} does not exist, but the data directory {} belongs to store {id}: the \
                         file was deleted or moved, or the data directory is another store's. Restore the file (or \
                         a `.rescued-*` copy beside it); or start a new store with a data directory of its own, \
                         --data-dir and a new directory (say {})",
                        file.display(),
                        data_dir.display(),
                        own_dir_for(&file).display()
                    ),
                }));
            }
            tracing::info!(file = %file.display(), "no database file and no record of one: creating a new store");
            set_aside_orphans(&file);
        }
    }
    let sqlite_path = (backend == Backend::Sqlite).then(|| sqlite_file(&normal));
    let store = Store::connect(url, true).await?;
    match (store.stored_instance().await?, remembered) {
        (Some(have), Some(want)) if have != want => Err(lost(format!(
            "the store at {url} is store {have}, but the data directory {} belongs to store {want}: the database \
             was replaced. Point --db at store {want}, or --data-dir at this store's directory, or adopt this \
             store with {init}",
            data_dir.display()
        ))),
        (None, Some(want)) => Err(lost(format!(
            "the store at {url} is empty, but the data directory {} belongs to store {want}: the database was \
             deleted or recreated. Restore it, or start afresh with {init}",
            data_dir.display()
        ))),
        (have, _) => {
            let id = match have {
                Some(id) => id,
                None => store.instance_id().await?,
            };
            write_record(data_dir, &id, sqlite_path.as_deref())?;
            Ok((store, id))
        }
    }
}

/// A data directory of its own for the store of database file `file`:
/// `<file's stem>-data` beside it.
fn own_dir_for(file: &Path) -> PathBuf {
    let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "store".into());
    file.with_file_name(format!("{stem}-data"))
}

/// `allot db init`: creates the store if it does not exist (schema and
/// id), and records it in `data_dir`. Returns its id and whether the data
/// directory recorded another store before.
pub async fn init(url: &str, data_dir: &Path) -> Result<(String, Option<String>), StoreError> {
    if let Ok((Backend::Sqlite, normal)) = normalize_url(url) {
        let file = sqlite_file(&normal);
        if !file.exists() {
            set_aside_orphans(&file);
        }
    }
    let store = Store::connect(url, true).await?;
    let id = store.instance_id().await;
    store.close().await;
    let id = id?;
    let before = read_record(data_dir).filter(|b| *b != id);
    let file = match normalize_url(url) {
        Ok((Backend::Sqlite, normal)) => Some(sqlite_file(&normal)),
        _ => None,
    };
    write_record(data_dir, &id, file.as_deref())?;
    Ok((id, before))
}

/// A `-wal` or `-shm` file left by a deleted database would be replayed
/// into the new one: they are renamed `<name>.orphaned-<unix time>`.
fn set_aside_orphans(file: &Path) {
    for suffix in ["-wal", "-shm"] {
        let p = PathBuf::from(format!("{}{suffix}", file.display()));
        if p.exists() {
            let to = PathBuf::from(format!("{}.orphaned-{}", p.display(), crate::clock::now()));
            match std::fs::rename(&p, &to) {
                Ok(()) => {
                    tracing::warn!(from = %p.display(), to = %to.display(), "set aside a file of a deleted database")
                }
                Err(e) => {
                    tracing::warn!(file = %p.display(), error = %e, "cannot set aside a file of a deleted database")
                }
            }
        }
    }
}

/// The SQLite file was deleted or replaced while serving: every write is
/// refused from now on; what the open connections still see is copied out.
pub(crate) async fn file_gone(store: &Store, path: &Path) -> StoreError {
    let why = format!("the database file {} was deleted or replaced while serving", path.display());
    store.fence.lose(why.clone());
    let rescue = PathBuf::from(format!("{}.rescued-{}", path.display(), crate::clock::now()));
    let sql = format!("VACUUM INTO '{}'", rescue.display().to_string().replace('\'', "''"));
    let saved = match sqlx::query(&sql).execute(&store.pool).await {
        Ok(_) => format!(
            "everything committed until now was copied to {}: stop every server of this store, move that copy to {}, \
             then start again",
            rescue.display(),
            path.display()
        ),
        Err(e) => format!("copying what was committed to {} failed too: {e}", rescue.display()),
    };
    tracing::error!(file = %path.display(), rescue = %rescue.display(), "{why}; {saved}");
    StoreError::new("keep serving the store", StoreFailure::Lost(format!("{why}; {saved}")))
}
