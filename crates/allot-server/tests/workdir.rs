//! Where a workload runs, end to end with the local executor: `allot
//! submit` sends the submitter's current directory (or `--chdir`), the
//! command starts there and a relative program (`./run.sh`) is found
//! there; an API client that sends none keeps the server's directory. A
//! directory missing on this host is refused at submission naming
//! `workdir`, nothing stored; one that disappears before the launch ends
//! its workload as MNT-4 (failed at once, no retry spent) and never drains
//! the node, however often it happens.

mod support;

use std::path::Path;

use support::{Backend, Fixture, Server, assert_nodes_up, assert_workdir_missing, script, state, submit};

both_stores!(workdir_local_sqlite, workdir_local_postgres, workdir_local);
both_stores!(workdir_missing_at_launch_sqlite, workdir_missing_at_launch_postgres, workdir_missing_at_launch);

/// Writes which copy of the script ran and where to the checkpoint
/// directory (`where`).
fn where_sh(tag: &str) -> String {
    format!("#!/bin/sh\necho \"{tag} $(pwd -P)\" > \"$ALLOT_CHECKPOINT_DIR/where\"\n")
}

fn ran_where(s: &Server, id: &str) -> String {
    let p = s.dir.join("data/checkpoints").join(id).join("where");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}\n{}", p.display(), s.log())).trim().to_string()
}

fn real(p: &Path) -> String {
    p.canonicalize().expect("an existing directory").display().to_string()
}

async fn stored(s: &Server, token: &str) -> usize {
    let (_, list) = s.http("GET", "/v1/workloads", Some(token), None).await;
    list.as_array().map_or(0, Vec::len)
}

async fn workdir_local(backend: Backend) {
    let f = Fixture::new(backend, "workdir").await;
    let s = Server::start(&f.dir, &f.db.url);
    let t = Some(f.admin.as_str());
    let proj = f.dir.join("proj");
    std::fs::create_dir_all(proj.join("bin")).unwrap();
    script(&proj, "run.sh", &where_sh("proj"));
    script(&proj.join("bin"), "x", &where_sh("bin"));
    // The server's own directory has a run.sh of its own.
    script(&f.dir, "run.sh", &where_sh("server"));

    // The submitter's current directory by default: `./run.sh` is proj's.
    let out = s.cli_in(&proj, &f.admin, &["submit", "--account", "org/a", "--gpus", "1", "--", "./run.sh"]);
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), s.log());
    let here = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let done = s.wait_for(&f.admin, &here, 30, |v| state(v) == "finished").await;
    let sent = done["workload"]["workdir"].as_str().expect("the client sent its directory").to_string();
    assert!(Path::new(&sent).is_absolute(), "{done}");
    assert_eq!(real(Path::new(&sent)), real(&proj), "{done}");
    assert_eq!(ran_where(&s, &here), format!("proj {}", real(&proj)));
    let shown = s.cli_ok(&f.admin, &["show", &here]);
    assert!(shown.contains(&format!("workdir    {sent}\n")), "{shown}");

    // --chdir relative to the current directory; `bin/x` is found there.
    let chdir = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "1", "--chdir", "proj", "--", "bin/x"]);
    let done = s.wait_for(&f.admin, &chdir, 30, |v| state(v) == "finished").await;
    assert_eq!(done["workload"]["workdir"], f.dir.join("proj").display().to_string(), "{done}");
    assert_eq!(ran_where(&s, &chdir), format!("bin {}", real(&proj)));

    // An API client that sends none runs in the server's directory, as before.
    let body = r#"{"account":"org/a","gpus":1,"command":["./run.sh"]}"#;
    let (status, v) = s.http("POST", "/v1/workloads", t, Some(body)).await;
    assert_eq!(status, 201, "{v}");
    assert!(v.get("workdir").is_none(), "no workdir in the view: {v}");
    let id = v["id"].as_str().unwrap().to_string();
    s.wait_for(&f.admin, &id, 30, |v| state(v) == "finished").await;
    assert_eq!(ran_where(&s, &id), format!("server {}", real(&f.dir)));
    let shown = s.cli_ok(&f.admin, &["show", &id]);
    assert!(shown.contains("workdir    (the server's working directory)"), "{shown}");

    // Bad or missing directories: 400 naming the field, nothing stored.
    let before = stored(&s, &f.admin).await;
    let missing = f.dir.join("no-such-dir");
    let cases: [(String, &str); 3] = [
        (missing.display().to_string(), "does not exist on this host"),
        (proj.join("run.sh").display().to_string(), "is not a directory on this host"),
        ("proj".to_string(), "must be an absolute path"),
    ];
    for (dir, want) in cases {
        let body = serde_json::json!({"account": "org/a", "gpus": 1, "command": ["true"], "workdir": dir});
        let (status, v) = s.http("POST", "/v1/workloads", t, Some(&body.to_string())).await;
        assert_eq!((status, v["field"].as_str()), (400, Some("workdir")), "{dir}: {v}");
        assert!(v["error"].as_str().is_some_and(|e| e.contains(want)), "{dir}: {v}");
    }
    let out = s.cli(&f.admin, &["submit", "--account", "org/a", "--gpus", "1", "--chdir", "no-such-dir", "--", "true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("(field `workdir`)") && err.contains("does not exist"), "{err}");
    assert_eq!(stored(&s, &f.admin).await, before, "nothing stored");
    drop(s);
    f.finish().await;
}

/// The directory exists at submission and is gone at launch: every
/// workload that finds it missing fails at once under MNT-4 with its
/// retries untouched, and the node it was placed on stays in service.
async fn workdir_missing_at_launch(backend: Backend) {
    let f = Fixture::new(backend, "workdir-launch").await;
    let s = Server::start(&f.dir, &f.db.url);
    let gone = f.dir.join("gone");
    std::fs::create_dir_all(&gone).unwrap();
    // The four GPUs are taken while the doomed workloads queue.
    let blocker = submit(&s, &f.admin, &["--account", "org/b", "--gpus", "4", "--", "sleep", "600"]);
    s.wait_for(&f.admin, &blocker, 30, |v| state(v) == "running").await;
    // Six failures on two nodes: at least three on one, which MNT-3 would
    // drain were they counted against it.
    let doomed: Vec<String> = (0..6)
        .map(|_| {
            let args = ["--account", "org/a", "--gpus", "1", "--nodes", "1", "--retries", "2"];
            submit(&s, &f.admin, &[&args[..], &["--chdir", "gone", "--", "true"]].concat())
        })
        .collect();
    std::fs::remove_dir(&gone).unwrap();
    s.cli_ok(&f.admin, &["cancel", &blocker]);
    for id in &doomed {
        let v = s.wait_for(&f.admin, id, 30, |v| state(v) == "failed").await;
        assert_workdir_missing(&v, &gone, "gpu-");
    }
    assert_nodes_up(&s, &f.admin);
    // Each is an executor error of its setup on /metrics, none of the infrastructure.
    let (_, m) = s.http("GET", "/metrics", Some(&f.admin), None).await;
    let m = m.as_str().unwrap_or_default();
    assert_eq!(support::metric(m, "allot_executor_errors_total{error=\"launch_setup\"}"), Some(6.0), "{m}");
    assert_eq!(support::metric(m, "allot_executor_errors_total{error=\"launch_infrastructure\"}"), Some(0.0), "{m}");
    let after = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "4", "--", "true"]);
    s.wait_for(&f.admin, &after, 30, |v| state(v) == "finished").await;
    drop(s);
    f.finish().await;
}
