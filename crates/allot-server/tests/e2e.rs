//! End to end: the real `allot` binary on a temporary store, driven through
//! the CLI and HTTP, with sleep-based workloads on fake GPUs. Every scenario
//! runs against SQLite and PostgreSQL.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use support::{Backend, Fixture, Server, WORK_SH, script, state, submit};

const ENV_SH: &str = r#"#!/bin/sh
echo "$CUDA_VISIBLE_DEVICES|$ALLOT_WORKLOAD_ID|$ALLOT_CHECKPOINT_DIR|$FOO" > "$ALLOT_CHECKPOINT_DIR/env"
"#;

fn checkpoint_dir(s: &Server, id: &str) -> std::path::PathBuf {
    s.dir.join("data/checkpoints").join(id)
}

both_stores!(lifecycle_sqlite, lifecycle_postgres, lifecycle);

/// Submit, run, finish; the environment of a workload; a failing workload
/// retried then failed; cancel a pending one; listings; trace export.
async fn lifecycle(backend: Backend) {
    let f = Fixture::new(backend, "lifecycle").await;
    let s = Server::start(&f.dir, &f.db.url);
    let env_sh = script(&f.dir, "env.sh", ENV_SH);
    let a = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "2", "--env", "FOO=bar", "--", &env_sh]);
    let b = submit(&s, &f.admin, &["--account", "org/b", "--gpus", "1", "--duration", "1s", "--", "sleep", "1"]);
    let c = submit(&s, &f.admin, &["--account", "org/b", "--gpus", "1", "--retries", "1", "--", "sh", "-c", "exit 3"]);
    for id in [&a, &b] {
        s.wait_for(&f.admin, id, 20, |v| state(v) == "finished").await;
    }
    let env = std::fs::read_to_string(checkpoint_dir(&s, &a).join("env")).expect("env file");
    let ck = checkpoint_dir(&s, &a).canonicalize().unwrap();
    let parts: Vec<&str> = env.trim().split('|').collect();
    assert_eq!(parts[0].split(',').count(), 2, "two GPU indices in CUDA_VISIBLE_DEVICES: {env}");
    assert_eq!(parts[1], a);
    assert_eq!(Path::new(parts[2]).canonicalize().unwrap(), ck);
    assert_eq!(parts[3], "bar");

    let failed = s.wait_for(&f.admin, &c, 20, |v| state(v) == "failed").await;
    let attempts = failed["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "one retry: {failed}");
    assert!(attempts.iter().all(|a| a["exit_code"] == 3 && a["outcome"] == "failed"));
    assert_eq!(failed["workload"]["failures"], 2);

    // A workload too long to finish, then one queued behind it, cancelled.
    let long = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "4", "--", "sleep", "60"]);
    s.wait_for(&f.admin, &long, 20, |v| state(v) == "running").await;
    let queued = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "4", "--", "sleep", "1"]);
    let shown = s.cli_ok(&f.admin, &["show", &queued]);
    assert!(shown.contains("state      pending") && shown.contains("why"), "{shown}");
    let queue = s.cli_json(&f.admin, &["queue"]);
    let ids: Vec<&str> = queue.as_array().unwrap().iter().map(|w| w["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [long.as_str(), queued.as_str()], "queue lists live workloads oldest first");
    assert!(s.cli_ok(&f.admin, &["queue"]).contains("pending"));
    // A fleet of one: no cluster in the views, no CLUSTER column.
    assert!(!s.cli_ok(&f.admin, &["queue"]).contains("CLUSTER") && !s.cli_ok(&f.admin, &["nodes"]).contains("CLUSTER"));
    let (_, nodes) = s.http("GET", "/v1/nodes", Some(&f.admin), None).await;
    assert!(nodes[0].get("cluster").is_none() && queue[0].get("cluster").is_none(), "{nodes}");
    assert_eq!(s.cli_ok(&f.admin, &["cancel", &queued]).trim(), format!("{queued} cancelled"));
    // `sleep` dies at once on SIGTERM: by the time the answer reads the
    // store back, the workload may already have stopped and be cancelled.
    let answer = s.cli_ok(&f.admin, &["cancel", &long]);
    assert!([format!("{long} stopping"), format!("{long} cancelled")].contains(&answer.trim().to_string()), "{answer}");
    let done = s.wait_for(&f.admin, &long, 20, |v| state(v) == "cancelled").await;
    assert_eq!(done["attempts"][0]["outcome"], "cancelled");
    // Cancelling it again is refused (exit 4, rejected), saying why.
    let again = s.cli(&f.admin, &["cancel", &long]);
    let err = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(4), "{err}");
    assert!(err.contains(&format!("409 Conflict: workload {long} has already ended (cancelled)")), "{err}");

    // Prometheus exposition with the measures.
    let (status, metrics) = s.http("GET", "/metrics", Some(&f.admin), None).await;
    let metrics = metrics.as_str().expect("text").to_string();
    assert_eq!(status, 200);
    for m in [
        "allot_queue_length{class=\"batch\"}",
        "allot_scheduling_pass_seconds_count",
        "allot_completed_workloads_total{",
        "allot_occupancy",
        "allot_account_used_gpu_seconds{account=\"org/a\"}",
        "allot_cluster_gpus{cluster=\"test\"} 4",
    ] {
        assert!(metrics.contains(m), "metrics have {m}:\n{metrics}");
    }

    // Budgets and shares set through the API, then one back to the config's.
    for (body, want) in [
        (r#"{"budget_gpu_hours":5}"#, 200),
        (r#"{"share":3}"#, 200),
        (r#"{"share":null}"#, 200),
        (r#"{"budget_gpu_hours":-1}"#, 400),
    ] {
        let (status, v) = s.http("PATCH", "/v1/accounts/org/a", Some(&f.admin), Some(body)).await;
        assert_eq!(status, want, "{body}: {v}");
    }

    // The history as a simulator trace.
    let out = f.dir.join("trace.csv");
    let summary = allot_server::export_trace(&f.db.url, &out).await.expect("export");
    let cfg = allot_trace::config::load_config(&s.config).unwrap();
    let rows = allot_trace::trace::load_trace(&out, &cfg).expect("the export loads as a trace");
    assert_eq!(summary.workloads, rows.len());
    // ... with the account changes in force, when they were: the replay's
    // trees are the server's.
    let path = summary.account_changes_path.as_ref().expect("an account changes file");
    let (_, audit) = s.http("GET", "/v1/audit", Some(&f.admin), None).await;
    assert_eq!(summary.account_changes, 3, "the refused change is not one: {audit}");
    let changes = allot_trace::changes::load_account_changes(path, &cfg).expect("the changes load");
    let fields: Vec<(&str, &str, Option<f64>)> = changes
        .iter()
        .map(|c| match &c.edit {
            allot_core::AccountEdit::Set { path, field, value } => (path.as_str(), field.key(), *value),
            e => panic!("only values were set: {e:?}"),
        })
        .collect();
    assert_eq!(
        fields,
        [("org/a", "budget_gpu_hours", Some(5.0)), ("org/a", "share", Some(3.0)), ("org/a", "share", None)]
    );
    assert!(changes.windows(2).all(|w| w[0].t <= w[1].t));
    let trees = allot_trace::changes::trees_in_force(&cfg, &changes).unwrap();
    let (_, last) = trees.last().unwrap();
    let org_a = last.account(last.get("org/a").unwrap());
    assert_eq!((org_a.budget_gpu_hours, org_a.share), (Some(5.0), 1.0), "as the server has it now");
    let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, [a.as_str(), b.as_str(), c.as_str(), long.as_str()], "cancelled-before-running is left out");
    assert!(rows[1].work_s >= 1 && rows[1].work_s <= 3, "real run time of `sleep 1`: {}", rows[1].work_s);
    drop(s);
    replay_check_can_fail(&f.db.url, &a).await;
    f.finish().await;
}

/// The replay check can fail: a store whose record was changed behind the
/// journal's back (an attempt's kept progress) differs from the replay,
/// which names the attempt and exits 1. The change is undone after.
async fn replay_check_can_fail(db: &str, seq: &str) {
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(db).await.expect("the store");
    let shift =
        |by: i64| format!("UPDATE attempts SET kept_s = kept_s + ({by}) WHERE workload = {seq} AND attempt = 1");
    sqlx::query(&shift(7)).execute(&pool).await.expect("tamper");
    let out = std::process::Command::new(support::allot_bin())
        .args(["db", "replay", "--db", db])
        .output()
        .expect("run allot db replay");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("workload {seq} attempt 1: the store has")), "{stdout}");
    sqlx::query(&shift(-7)).execute(&pool).await.expect("undo");
    pool.close().await;
}

both_stores!(preemption_sqlite, preemption_postgres, preemption);

/// Fill the cluster with batch work; an interactive submission preempts it
/// once past its slice (INT-1): the victim sees SIGTERM, writes its marker,
/// is requeued and resumes from its checkpoint.
async fn preemption(backend: Backend) {
    let f = Fixture::new(backend, "preempt").await;
    let s = Server::start(&f.dir, &f.db.url);
    let work = script(&f.dir, "work.sh", WORK_SH);
    let victim = submit(
        &s,
        &f.admin,
        &["--account", "org/a", "--gpus", "4", "--checkpoint", "1s", "--duration", "6s", "--", &work, "6"],
    );
    s.wait_for(&f.admin, &victim, 20, |v| state(v) == "running").await;
    let inter = submit(
        &s,
        &f.admin,
        &["--account", "org/b", "--gpus", "4", "--class", "interactive", "--duration", "2s", "--", "sleep", "2"],
    );
    let v = s.wait_for(&f.admin, &victim, 20, |v| v["attempts"].as_array().is_some_and(|a| a.len() >= 2)).await;
    let first = &v["attempts"][0];
    assert_eq!(first["outcome"], "preempted", "{v}");
    assert!(first["signal_reason"].as_str().unwrap().starts_with("INT-1"), "{v}");
    assert!(first["end_t"].as_i64().unwrap() - first["start_t"].as_i64().unwrap() >= 2, "ran at least its slice: {v}");
    let marker = std::fs::read_to_string(checkpoint_dir(&s, &victim).join("marker")).expect("the victim saw SIGTERM");
    for rank in 0..2 {
        assert!(marker.contains(&format!("rank {rank} sigterm at")), "each node's process saw SIGTERM: {marker}");
    }
    let i = s.wait_for(&f.admin, &inter, 20, |v| state(v) == "finished").await;
    assert!(i["attempts"][0]["start_t"].as_i64() >= first["end_t"].as_i64(), "no GPU held by two workloads");
    let done = s.wait_for(&f.admin, &victim, 30, |v| state(v) == "finished").await;
    let log2 =
        std::fs::read_to_string(done["attempts"][1]["log_path"].as_str().map(|p| s.dir.join(p)).unwrap()).unwrap();
    assert!(log2.contains("resumed from"), "second attempt resumed from the checkpoint: {log2}");
    assert!(!checkpoint_dir(&s, &victim).join("DOUBLE").exists());
    drop(s);
    f.finish().await;
}

both_stores!(crash_restart_sqlite, crash_restart_postgres, crash_restart);

/// kill -9 the server mid-run and restart it: every accepted submission is
/// there, no workload ever ran twice at once, the survivors were stopped
/// and requeued, everything finishes, and the ledger equals the recorded
/// allocation time.
async fn crash_restart(backend: Backend) {
    let f = Fixture::new(backend, "crash").await;
    // A snapshot every 10 journal entries, one kept: the restart restores
    // it and replays only what followed; the journal before it is gone.
    let mut s = Server::start_with(&f.dir, &f.db.url, &["--snapshot-every", "10", "--snapshots-kept", "1"], &[]);
    let work = script(&f.dir, "work.sh", WORK_SH);
    let r1 = submit(
        &s,
        &f.admin,
        &["--account", "org/a", "--gpus", "2", "--checkpoint", "1s", "--duration", "5s", "--", &work, "5"],
    );
    let r2 = submit(
        &s,
        &f.admin,
        &["--account", "org/b", "--gpus", "2", "--checkpoint", "1s", "--duration", "5s", "--", &work, "5"],
    );
    for id in [&r1, &r2] {
        s.wait_for(&f.admin, id, 20, |v| state(v) == "running" && v["attempts"][0]["pid"].is_number()).await;
    }
    // A burst of submissions, then kill -9 right after the last 201.
    let mut burst = Vec::new();
    // (All in org/a, which holds GPUs already: nothing ranks better than
    // the running workloads, so none is preempted before the crash.)
    for _ in 0..12 {
        burst.push(submit(
            &s,
            &f.admin,
            &["--account", "org/a", "--gpus", "1", "--duration", "1s", "--", "sleep", "1"],
        ));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    s.kill9();
    assert!(checkpoint_dir(&s, &r1).join("running-0").exists(), "the workload outlived the server");
    s.restart();
    // L-5: the run carried on from its journal's replay, not rebuilt from
    // the rows; the two attempts that held GPUs were lost.
    let log = s.log();
    let carried = log.lines().find(|l| l.contains("carried on from its journal's replay"));
    assert!(carried.is_some_and(|l| l.contains("lost=2")), "recovery replays the journal:\n{log}");
    assert!(log.contains("snapshot of the run"), "snapshots were taken:\n{log}");
    let store = allot_server::store::Store::open_existing(&f.db.url).await.expect("the store");
    let first = store.journal_first().await.expect("the journal");
    assert!(first.is_some_and(|f| f > 1), "the journal was compacted: its first entry is {first:?}");
    let (after, _, _) = store.snapshot(false).await.expect("a snapshot").expect("one");
    assert!(store.snapshot(true).await.expect("a snapshot").is_some_and(|(s, _, _)| s == after), "one kept");
    let all = s.cli_json(&f.admin, &["queue", "--all"]);
    let ids: Vec<String> = all.as_array().unwrap().iter().map(|w| w["id"].as_str().unwrap().to_string()).collect();
    for id in [&r1, &r2].into_iter().chain(&burst) {
        assert!(ids.contains(id), "submission {id} lost after kill -9: {ids:?}");
    }
    for id in [&r1, &r2].into_iter().chain(&burst) {
        s.wait_for(&f.admin, id, 60, |v| state(v) == "finished").await;
    }
    for id in [&r1, &r2] {
        let v = s.wait_for(&f.admin, id, 1, |_| true).await;
        let first = &v["attempts"][0];
        assert!(matches!(first["outcome"].as_str(), Some("lost")), "{v}");
        assert!(!checkpoint_dir(&s, id).join("DOUBLE").exists(), "workload {id} ran twice at once");
        let marker = std::fs::read_to_string(checkpoint_dir(&s, id).join("marker")).unwrap_or_default();
        assert!(marker.contains("sigterm"), "the survivor was signalled before being requeued: {marker:?}");
    }
    assert_ledger_matches_attempts(&s, &f.admin).await;
    // Counters count the store's whole history, not since the restart.
    let (_, metrics) = s.http("GET", "/metrics", Some(&f.admin), None).await;
    let metrics = metrics.as_str().expect("text").to_string();
    for line in [
        "allot_submissions_total{account=\"org/a\",class=\"batch\"} 13",
        "allot_completed_workloads_total{account=\"org/a\",class=\"batch\"} 13",
        "allot_completed_workloads_total{account=\"org/b\",class=\"batch\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }
    drop(s);
    f.finish().await;
}

/// Σ over attempts of (end − start) × GPUs equals the ledger's charge per
/// account subtree.
async fn assert_ledger_matches_attempts(s: &Server, token: &str) {
    let (_, ws) = s.http("GET", "/v1/workloads?limit=1000", Some(token), None).await;
    let mut recorded: std::collections::BTreeMap<String, i64> = Default::default();
    for w in ws.as_array().unwrap() {
        let id = w["id"].as_str().unwrap();
        let (_, d) = s.http("GET", &format!("/v1/workloads/{id}"), Some(token), None).await;
        for a in d["attempts"].as_array().unwrap() {
            let held = (a["end_t"].as_i64().expect("all attempts ended") - a["start_t"].as_i64().unwrap())
                * a["allocation"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| n["gpus"].as_array().unwrap().len() as i64)
                    .sum::<i64>();
            let acct = w["account"].as_str().unwrap();
            for (i, _) in acct.match_indices('/').chain([(acct.len(), "")]) {
                *recorded.entry(acct[..i].to_string()).or_default() += held;
            }
        }
    }
    let (_, accounts) = s.http("GET", "/v1/accounts", Some(token), None).await;
    for a in accounts.as_array().unwrap() {
        let path = a["path"].as_str().unwrap();
        let charged = (a["charged_gpu_hours"].as_f64().unwrap() * 3600.0).round() as i64;
        assert_eq!(charged, recorded.get(path).copied().unwrap_or(0), "ledger of {path}: {accounts}");
    }
}

both_stores!(bad_input_sqlite, bad_input_postgres, bad_input);

/// Malformed, invalid or oversize requests get 400 naming the field (or
/// the limit) and store nothing.
async fn bad_input(backend: Backend) {
    let f = Fixture::new(backend, "bad").await;
    let s = Server::start(&f.dir, &f.db.url);
    let t = Some(f.admin.as_str());
    let big = format!(r#"{{"account":"org/a","gpus":1,"command":["{}"]}}"#, "x".repeat(300 * 1024));
    let cases: [(&str, &str, u16, Option<&str>); 12] = [
        ("malformed json", "{\"account\": ", 400, Some("account")),
        ("unknown field", r#"{"account":"org/a","gpus":1,"command":["true"],"gpu":2}"#, 400, Some("gpu")),
        ("negative gpus", r#"{"account":"org/a","gpus":-1,"command":["true"]}"#, 400, Some("gpus")),
        ("zero gpus", r#"{"account":"org/a","gpus":0,"command":["true"]}"#, 400, Some("gpus")),
        ("unknown account", r#"{"account":"org/zzz","gpus":1,"command":["true"]}"#, 400, Some("account")),
        ("too many gpus", r#"{"account":"org/a","gpus":64,"command":["true"]}"#, 400, Some("gpus")),
        ("unknown class", r#"{"account":"org/a","gpus":1,"class":"urgent","command":["true"]}"#, 400, Some("class")),
        (
            "unknown gpu type",
            r#"{"account":"org/a","gpus":1,"gpu_type":"A100","command":["true"]}"#,
            400,
            Some("gpu_type"),
        ),
        ("empty command", r#"{"account":"org/a","gpus":1,"command":[]}"#, 400, Some("command")),
        (
            "reserved env",
            r#"{"account":"org/a","gpus":1,"command":["true"],"env":{"CUDA_VISIBLE_DEVICES":"9"}}"#,
            400,
            Some("env.CUDA_VISIBLE_DEVICES"),
        ),
        (
            "interactive over the lane",
            r#"{"account":"org/a","gpus":1,"class":"interactive","expected_duration_s":99999,"command":["true"]}"#,
            400,
            Some("class"),
        ),
        ("oversize body", big.as_str(), 400, None),
    ];
    for (name, body, want, field) in cases {
        let (status, v) = s.http("POST", "/v1/workloads", t, Some(body)).await;
        assert_eq!(status, want, "case {name}: {v}");
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "case {name}: {v}");
        assert_eq!(v["field"].as_str(), field, "case {name}: {v}");
    }
    let (status, v) = s.http("PATCH", "/v1/accounts/org/a", t, Some(r#"{"budget_gpu_hours": -5}"#)).await;
    assert_eq!((status, v["field"].as_str()), (400, Some("budget_gpu_hours")), "{v}");
    let (status, v) = s.http("GET", "/v1/workloads?state=bogus", t, None).await;
    assert_eq!((status, v["field"].as_str()), (400, Some("state")), "{v}");
    let (_, list) = s.http("GET", "/v1/workloads", t, None).await;
    assert_eq!(list, Value::Array(vec![]), "nothing stored");
    let (status, doc) = s.http("GET", "/v1/openapi.json", None, None).await;
    assert_eq!(status, 200);
    for path in [
        "/v1/workloads",
        "/v1/workloads/{id}",
        "/v1/workloads/{id}/cancel",
        "/v1/accounts/{path}",
        "/v1/nodes/{name}/{action}",
        "/v1/tokens",
        "/v1/audit",
        "/metrics",
    ] {
        assert!(doc["paths"][path].is_object(), "openapi documents {path}");
    }
    let (_, audit) = s.http("GET", "/v1/audit", t, None).await;
    assert!(audit.as_array().unwrap().iter().all(|e| e["action"] != "account.budget"), "{audit}");
    drop(s);
    f.finish().await;
}
