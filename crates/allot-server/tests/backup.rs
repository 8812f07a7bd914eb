//! `allot db backup` and `allot db restore`: a SQLite store backed up while
//! its server runs, restored into a new directory and served there; and
//! every refusal of a restore (docs/operations.md, "Back up and restore").

mod support;

use std::path::Path;
use std::process::{Command, Output};

use support::{
    Backend, Fixture, Server, allot_bin, assert_replay_equals_store, remove_store_cgroups, state, submit, temp_dir,
};

fn allot(args: &[&str]) -> Output {
    Command::new(allot_bin()).args(args).output().expect("run allot")
}

/// Asserts `out` exited with `code` and its stderr says every one of `says`.
fn refused(out: &Output, code: i32, says: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "exit code; stderr: {err}");
    for s in says {
        assert!(err.contains(s), "stderr should say {s:?}: {err}");
    }
}

fn ok(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "allot failed: {err}");
    err
}

/// SQL straight into a SQLite file (as a damaged or foreign file would be).
async fn sql(file: &Path, statements: &[&str]) {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let mut c = sqlx::AnyConnection::connect(&format!("sqlite://{}?mode=rwc", file.display())).await.expect("connect");
    for s in statements {
        sqlx::query(s).execute(&mut c).await.unwrap_or_else(|e| panic!("{s}: {e}"));
    }
    c.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_while_serving_then_restore_schedules_what_was_pending() {
    let f = Fixture::new(Backend::Sqlite, "backup").await;
    let mut s = Server::start(&f.dir, &f.db.url);
    let done = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "1", "--", "true"]);
    s.wait_for(&f.admin, &done, 20, |v| state(v) == "finished").await;
    let long = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "4", "--", "sleep", "600"]);
    s.wait_for(&f.admin, &long, 20, |v| state(v) == "running").await;
    let pending = submit(&s, &f.admin, &["--account", "org/b", "--gpus", "2", "--", "sleep", "1"]);
    s.wait_for(&f.admin, &pending, 5, |v| state(v) == "pending").await;

    // Online: the server keeps serving (and writing) while the copy is made.
    let out = f.dir.join("backup.db");
    let said = ok(&allot(&["db", "backup", "--db", &f.db.url, out.to_str().unwrap()]));
    assert!(said.contains("backed up store") && said.contains("schema version"), "{said}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&out).expect("backup file").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the backup holds token hashes: its owner's only");
    assert!(s.cli_ok(&f.admin, &["queue"]).contains("pending"), "the server still serves");
    refused(&allot(&["db", "backup", "--db", &f.db.url, out.to_str().unwrap()]), 4, &["already exists"]);

    // The machine is lost: its server and the work it ran are gone.
    s.kill9();
    remove_store_cgroups(&f.db.url).await;

    let r_dir = temp_dir("restored");
    let restored = format!("sqlite://{}", r_dir.join("allot.db").display());
    let said = ok(&allot(&["db", "restore", "--db", &restored, out.to_str().unwrap()]));
    assert!(said.contains("restored store"), "{said}");
    let mut r = Server::start(&r_dir, &restored);
    // The store's history and tokens came with it.
    r.wait_for(&f.admin, &done, 5, |v| state(v) == "finished").await;
    r.cli_ok(&f.admin, &["cancel", &long]);
    r.wait_for(&f.admin, &pending, 30, |v| state(v) == "finished").await;
    assert!(r.stop(), "the restored store's server stops cleanly:\n{}", r.log());
    assert_replay_equals_store(&restored);
    remove_store_cgroups(&restored).await;
    let _ = std::fs::remove_dir_all(&r_dir);
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_refuses_what_it_must_not_restore() {
    let f = Fixture::new(Backend::Sqlite, "restore-refusals").await;
    let db_file = f.dir.join("allot.db");
    let mut s = Server::start(&f.dir, &f.db.url);
    let out = f.dir.join("backup.db");
    let backup = out.to_str().unwrap();
    ok(&allot(&["db", "backup", "--db", &f.db.url, backup]));

    // A served store is never replaced, --force or not.
    let served = ["a server is serving", db_file.to_str().unwrap(), &format!("pid {}", s.pid())];
    refused(&allot(&["db", "restore", "--db", &f.db.url, backup]), 4, &served);
    refused(&allot(&["db", "restore", "--db", &f.db.url, "--force", backup]), 4, &served);
    assert!(s.stop(), "{}", s.log());

    // A store in place is replaced only with --force, and kept aside.
    refused(
        &allot(&["db", "restore", "--db", &f.db.url, backup]),
        4,
        &["already holds allot store", db_file.to_str().unwrap(), "--force"],
    );
    let said = ok(&allot(&["db", "restore", "--db", &f.db.url, "--force", backup]));
    assert!(said.contains(".replaced-"), "{said}");
    let aside = std::fs::read_dir(&f.dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("allot.db.replaced-") && !name.ends_with("-wal") && !name.ends_with("-shm")
        })
        .count();
    assert_eq!(aside, 1, "the replaced store is kept aside");

    // A live lease held from another host (a server there, its lock file
    // out of reach) is a server serving it too.
    let elsewhere = "UPDATE lease SET epoch = 7, host = 'elsewhere', pid = 1, listen = '10.0.0.9:8080', \
                     expires_ms = 99999999999999";
    sql(&db_file, &[elsewhere]).await;
    refused(
        &allot(&["db", "restore", "--db", &f.db.url, "--force", backup]),
        4,
        &["a server is serving", "host elsewhere", "lease epoch 7"],
    );
    sql(&db_file, &["UPDATE lease SET expires_ms = 0"]).await;

    let target = format!("sqlite://{}", f.dir.join("new.db").display());
    // Not a store: not SQLite at all, SQLite without a schema, a newer schema, no file.
    let junk = f.dir.join("junk.db");
    std::fs::write(&junk, "hello, not a database\n".repeat(100)).unwrap();
    refused(&allot(&["db", "restore", "--db", &target, junk.to_str().unwrap()]), 2, &["junk.db is not an allot store"]);
    let foreign = f.dir.join("foreign.db");
    sql(&foreign, &["CREATE TABLE t (x INTEGER)"]).await;
    refused(
        &allot(&["db", "restore", "--db", &target, foreign.to_str().unwrap()]),
        2,
        &["foreign.db is not an allot store", "no allot_schema table"],
    );
    let newer = f.dir.join("newer.db");
    std::fs::copy(&out, &newer).unwrap();
    sql(&newer, &["INSERT INTO allot_schema (version, applied_t) VALUES (9999, 0)"]).await;
    refused(
        &allot(&["db", "restore", "--db", &target, newer.to_str().unwrap()]),
        2,
        &["newer.db is an allot store of schema version 9999, newer than this allot's"],
    );
    let missing = f.dir.join("missing.db");
    refused(&allot(&["db", "restore", "--db", &target, missing.to_str().unwrap()]), 2, &["missing.db", "no such file"]);
    assert!(!f.dir.join("new.db").exists(), "a refused restore writes nothing");

    // PostgreSQL: pg_dump and pg_restore do it.
    let pg = "postgres://allot@127.0.0.1:1/allot";
    refused(&allot(&["db", "backup", "--db", pg, backup]), 2, &["PostgreSQL store", "pg_dump"]);
    refused(&allot(&["db", "restore", "--db", pg, backup]), 2, &["PostgreSQL store", "pg_restore"]);
    f.finish().await;
}

/// Run as root (as an operator's `sudo allot db restore` is), a restore
/// into the state directory of a service's user leaves files that user
/// can open: the store and its lock file are given to the directory's
/// owner. Skipped when not root (only root can give files away).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_as_root_gives_the_store_to_its_owner() {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: not root");
        return;
    }
    let f = Fixture::new(Backend::Sqlite, "restore-owner").await;
    let out = f.dir.join("backup.db");
    ok(&allot(&["db", "backup", "--db", &f.db.url, out.to_str().unwrap()]));
    let state = f.dir.join("state");
    std::fs::create_dir(&state).unwrap();
    let (uid, gid) = (65534, 65534);
    std::os::unix::fs::chown(&state, Some(uid), Some(gid)).unwrap();
    let target = state.join("allot.db");
    ok(&allot(&["db", "restore", "--db", &format!("sqlite://{}", target.display()), out.to_str().unwrap()]));
    for file in [target.clone(), state.join("allot.db.lock")] {
        let m = std::fs::metadata(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert_eq!((m.uid(), m.gid()), (uid, gid), "{}", file.display());
    }
    assert_eq!(std::fs::metadata(&target).unwrap().mode() & 0o777, 0o600, "the store is its owner's only");
    f.finish().await;
}
