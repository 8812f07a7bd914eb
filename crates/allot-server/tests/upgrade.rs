//! Upgrades keep the store (docs/operations.md#upgrade).
//!
//! Each store in `tests/fixtures/schema` was written by the allot of an
//! earlier schema version (`scripts/schema-fixtures.sh`, which also writes
//! what it holds in `vNN.toml`). Opened by this allot it gets the missing
//! migrations and loses no row of any table; the upgraded server then shows
//! its workloads in their states, takes its admin token, and runs its held
//! workload once released. A store that a newer allot migrated is refused
//! by the store, `allot serve` and `allot db`, and left as it was.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use allot_server::store::backup::known_schema;
use allot_server::store::{Store, StoreFailure};
use sqlx::{Connection, Row};
use support::{Server, allot_bin, free_port, state, temp_dir};

/// What `scripts/schema-fixtures.sh` says a fixture holds.
struct Fixture {
    name: String,
    file: PathBuf,
    schema: i64,
    config: PathBuf,
    token: String,
    /// Workloads that ended: finished, failed, cancelled.
    ended: [(String, &'static str); 3],
    /// A held workload, pending at the end (versions with holds only).
    held: Option<String>,
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema")
}

/// Every `vNN.sqlite` with its `vNN.toml`, oldest first.
fn fixtures() -> Vec<Fixture> {
    let dir = fixture_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "sqlite"))
        .collect();
    files.sort();
    files.into_iter().map(|file| fixture(&file)).collect()
}

fn fixture(file: &Path) -> Fixture {
    let meta = file.with_extension("toml");
    let text = std::fs::read_to_string(&meta).unwrap_or_else(|e| panic!("cannot read {}: {e}", meta.display()));
    let t: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", meta.display()));
    let s = |key: &str| -> String {
        t.get(key)
            .and_then(|v| v.as_str())
            .unwrap_or_else(|| panic!("{}: no string field `{key}`", meta.display()))
            .to_string()
    };
    Fixture {
        name: file.file_stem().expect("a file name").to_string_lossy().into_owned(),
        file: file.to_path_buf(),
        schema: t.get("schema").and_then(|v| v.as_integer()).unwrap_or_else(|| panic!("{}: no schema", meta.display())),
        config: fixture_dir().join(s("config")),
        token: s("token"),
        ended: [(s("finished"), "finished"), (s("failed"), "failed"), (s("cancelled"), "cancelled")],
        held: t.get("held").and_then(|v| v.as_str()).map(str::to_string),
    }
}

async fn connect(db: &Path) -> sqlx::AnyConnection {
    sqlx::any::install_default_drivers();
    sqlx::AnyConnection::connect(&format!("sqlite://{}?mode=rw", db.display()))
        .await
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", db.display()))
}

/// The number of rows of every table, by plain SQL.
async fn rows(db: &Path) -> BTreeMap<String, i64> {
    let mut c = connect(db).await;
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' AND name <> 'sqlite_sequence'")
            .fetch_all(&mut c)
            .await
            .expect("list the tables");
    let mut out = BTreeMap::new();
    for t in tables {
        let n: i64 =
            sqlx::query_scalar(&format!("SELECT COUNT(*) FROM \"{t}\"")).fetch_one(&mut c).await.expect("count rows");
        out.insert(t, n);
    }
    let _ = c.close().await;
    out
}

/// Every workload's state, by id.
async fn states(db: &Path) -> BTreeMap<i64, String> {
    let mut c = connect(db).await;
    let rows = sqlx::query("SELECT seq, state FROM workloads").fetch_all(&mut c).await.expect("read the workloads");
    let _ = c.close().await;
    rows.iter().map(|r| (r.get::<i64, _>(0), r.get::<String, _>(1))).collect()
}

async fn versions(db: &Path) -> Vec<i64> {
    let mut c = connect(db).await;
    let v = sqlx::query_scalar("SELECT version FROM allot_schema ORDER BY version")
        .fetch_all(&mut c)
        .await
        .expect("read allot_schema");
    let _ = c.close().await;
    v
}

/// The schema as SQLite holds it (every table's and index's statement).
async fn schema(db: &Path) -> Vec<String> {
    let mut c = connect(db).await;
    let v =
        sqlx::query_scalar("SELECT type || ' ' || name || ': ' || COALESCE(sql, '') FROM sqlite_master ORDER BY name")
            .fetch_all(&mut c)
            .await
            .expect("read sqlite_master");
    let _ = c.close().await;
    v
}

/// The table counts a fixture must have for "nothing lost" to mean
/// something: workloads that ended, their attempts (the usage), a token
/// and audit rows.
fn assert_holds_enough(f: &Fixture, before: &BTreeMap<String, i64>) {
    for (table, least) in [("workloads", 3), ("attempts", 2), ("tokens", 1), ("audit", 1)] {
        let n = before.get(table).copied().unwrap_or(0);
        assert!(n >= least, "{}: the fixture has {n} rows in {table}, fewer than {least}: remake it", f.name);
    }
}

/// Opens the fixture with this allot's store (all migrations apply) and
/// checks that every table kept every row (`allot_schema` gains the new
/// versions).
async fn upgrade_keeps_rows(f: &Fixture, db: &Path) {
    let before = rows(db).await;
    let before_states = states(db).await;
    assert_holds_enough(f, &before);
    let had = versions(db).await;
    assert_eq!(had.last(), Some(&f.schema), "{}: its allot_schema does not end at {}", f.name, f.schema);

    let store = Store::open(&format!("sqlite://{}", db.display()))
        .await
        .unwrap_or_else(|e| panic!("{}: this allot cannot open it: {e}", f.name));
    store.close().await;

    assert_eq!(versions(db).await, (1..=known_schema()).collect::<Vec<_>>(), "{}: migrations missing", f.name);
    let after = rows(db).await;
    let lost: Vec<String> = before
        .iter()
        .filter(|(t, n)| *t != "allot_schema" && after.get(*t) != Some(n))
        .map(|(t, n)| format!("{t}: {n} rows before, {:?} after", after.get(t)))
        .collect();
    assert!(lost.is_empty(), "{}: the upgrade to schema {} changed tables: {lost:?}", f.name, known_schema());
    assert_eq!(states(db).await, before_states, "{}: workload states changed in the upgrade", f.name);
}

/// The upgraded store served: its token is taken, its workloads read back
/// in their states, and its held workload runs once released.
async fn upgraded_store_serves(f: &Fixture, dir: &Path, url: &str) {
    std::fs::copy(&f.config, dir.join("cluster.toml")).expect("copy the fixture's config");
    let s = Server::start_with(dir, url, &["--allow-uncontained"], &[]);
    for (id, want) in &f.ended {
        let (status, v) = s.http("GET", &format!("/v1/workloads/{id}"), Some(&f.token), None).await;
        assert_eq!(status, 200, "{}: workload {id}: {v}\n{}", f.name, s.log());
        assert_eq!(state(&v), *want, "{}: workload {id}: {v}", f.name);
    }
    if let Some(id) = &f.held {
        let (status, v) = s.http("GET", &format!("/v1/workloads/{id}"), Some(&f.token), None).await;
        assert_eq!(status, 200, "{}: workload {id}: {v}\n{}", f.name, s.log());
        assert_eq!(state(&v), "pending", "{}: held workload {id}: {v}", f.name);
        s.cli_ok(&f.token, &["release", id]);
        s.wait_for(&f.token, id, 20, |v| state(v) == "finished").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_upgrades_and_keeps_its_rows() {
    let all = fixtures();
    assert!(!all.is_empty(), "no fixture in {}", fixture_dir().display());
    for f in &all {
        assert!(f.schema < known_schema(), "{}: schema {} is not older than this allot's", f.name, f.schema);
        let dir = temp_dir(&format!("upgrade-{}", f.name));
        let db = dir.join("allot.db");
        std::fs::copy(&f.file, &db).expect("copy the fixture");
        upgrade_keeps_rows(f, &db).await;
        upgraded_store_serves(f, &dir, &format!("sqlite://{}", db.display())).await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}

fn run(args: &[&str], dir: &Path) -> Output {
    Command::new(allot_bin()).args(args).current_dir(dir).env("HOME", dir).output().expect("run allot")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_of_a_newer_schema_is_refused_and_left_as_it_was() {
    let dir = temp_dir("newer-schema");
    let db = dir.join("allot.db");
    let url = format!("sqlite://{}", db.display());
    Store::open(&url).await.expect("a new store").close().await;
    let mut c = connect(&db).await;
    sqlx::query("INSERT INTO allot_schema (version, applied_t) VALUES (999, 0)")
        .execute(&mut c)
        .await
        .expect("record a newer version");
    let _ = c.close().await;
    let (had_versions, had_schema, had_rows) = (versions(&db).await, schema(&db).await, rows(&db).await);
    let message = format!(
        "the store's schema is version 999, newer than this allot's ({}): it was written by a newer allot; run \
         that version, or restore a backup made before the upgrade (docs/operations.md#upgrade)",
        known_schema()
    );

    let e = Store::open(&url).await.expect_err("a store of a newer schema is opened");
    assert!(matches!(e.source, StoreFailure::Newer { version: 999, .. }), "{e:?}");
    assert!(e.to_string().contains(&message), "{e}");

    std::fs::write(dir.join("cluster.toml"), support::CONFIG).expect("write the config");
    let listen = format!("127.0.0.1:{}", free_port());
    let serve = [
        "serve",
        "--single-user",
        "--allow-uncontained",
        "--config",
        "cluster.toml",
        "--db",
        &url,
        "--listen",
        &listen,
        "--data-dir",
        "data",
    ];
    let commands: [(&str, &[&str]); 4] = [
        ("allot serve", &serve),
        ("allot db init", &["db", "init", "--db", &url, "--data-dir", "data"]),
        ("allot db replay", &["db", "replay", "--db", &url]),
        ("allot token create", &["token", "create", "--db", &url, "--role", "admin", "--name", "n"]),
    ];
    for (name, args) in commands {
        let o = run(args, &dir);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{name} exits 2 (bad input): {err}");
        assert!(err.contains(&message), "{name} says what happened and what to do: {err}");
    }

    assert_eq!(versions(&db).await, had_versions, "allot_schema changed");
    assert_eq!(schema(&db).await, had_schema, "the schema changed");
    assert_eq!(rows(&db).await, had_rows, "rows changed");
    assert!(
        !dir.join("data").join(allot_server::store::instance::RECORD).exists(),
        "the data directory recorded the refused store"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
