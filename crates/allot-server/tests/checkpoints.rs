//! CON-7 end to end: a running workload reports its checkpoints through the
//! marker file and through the API with its attempt credential; a drain then
//! keeps the progress of the last report (its declared interval is "never");
//! the credential is refused for another workload, API tokens are refused,
//! and it dies with its attempt.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use support::{Backend, Fixture, Server, script, state, submit};

both_stores!(checkpoint_reports_sqlite, checkpoint_reports_postgres, checkpoint_reports);

/// Writes its environment to `$1/env-<attempt>`, touches its marker after
/// 2 s (unless `$2` is `quiet`), then waits to be stopped.
const REPORTS_SH: &str = r#"#!/bin/sh
env > "$1/env.tmp" && mv "$1/env.tmp" "$1/env-$ALLOT_ATTEMPT"
sleep 2
[ "$2" = quiet ] || touch "$ALLOT_CHECKPOINT_MARKER"
trap 'exit 0' TERM
sleep 60 & wait $!
"#;

/// The variable `name` of the environment file `path` (waits for it).
async fn env_var(path: &Path, name: &str) -> String {
    support::wait_file(path, 20).await;
    let text = std::fs::read_to_string(path).expect("env file");
    let prefix = format!("{name}=");
    text.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_else(|| panic!("{name} not in {text}")).to_string()
}

fn attempt(v: &Value, i: usize) -> &Value {
    &v["attempts"][i]
}

async fn checkpoint_reports(backend: Backend) {
    let f = Fixture::new(backend, "checkpoints").await;
    std::fs::write(f.dir.join("cluster.toml"), support::CONFIG).expect("write config");
    let s = Server::start(&f.dir, &f.db.url);
    let t = Some(f.admin.as_str());
    let sh = script(&f.dir, "reports.sh", REPORTS_SH);
    let (out_a, out_b) = (f.dir.join("a"), f.dir.join("b"));
    std::fs::create_dir_all(&out_a).expect("dir");
    std::fs::create_dir_all(&out_b).expect("dir");
    let (dir_a, dir_b) = (out_a.display().to_string(), out_b.display().to_string());
    let a = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "2", "--", &sh, &dir_a, "reports"]);
    let b = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "2", "--", &sh, &dir_b, "quiet"]);
    let token_a = env_var(&out_a.join("env-1"), "ALLOT_ATTEMPT_TOKEN").await;
    let marker = env_var(&out_a.join("env-1"), "ALLOT_CHECKPOINT_MARKER").await;
    assert!(marker.ends_with(".allot-checkpoint"), "{marker}");
    assert!(env_var(&out_a.join("env-1"), "ALLOT_SERVER").await.starts_with("http://127.0.0.1:"));
    env_var(&out_b.join("env-1"), "ALLOT_ATTEMPT_TOKEN").await;

    // The marker: the touch after 2 s is taken with its time.
    let v = s.wait_for(&f.admin, &a, 20, |v| attempt(v, 0)["checkpoints"].as_i64() >= Some(1)).await;
    let at = attempt(&v, 0);
    let saved = at["checkpoint_saved_s"].as_i64().unwrap();
    assert!((1..=4).contains(&saved), "about 2 s of progress saved by the marker: {v}");
    assert_eq!(at["checkpoint_t"].as_i64(), Some(at["start_t"].as_i64().unwrap() + saved), "{v}");

    // Bad credentials change nothing.
    let path_a = format!("/v1/workloads/{a}/checkpoint");
    let path_b = format!("/v1/workloads/{b}/checkpoint");
    let (status, e) = s.http("POST", &path_b, Some(&token_a), None).await;
    assert_eq!(status, 403, "another workload's credential: {e}");
    assert!(e["error"].as_str().unwrap().contains(&format!("attempt 1 of workload {a}")), "{e}");
    let (status, e) = s.http("POST", &path_a, t, None).await;
    assert_eq!(status, 401, "an API token is not an attempt credential: {e}");
    let (status, _) = s.http("POST", &path_a, None, None).await;
    assert_eq!(status, 401);
    let (status, e) = s.http("GET", "/v1/workloads", Some(&token_a), None).await;
    assert_eq!(status, 401, "the credential can do nothing else: {e}");
    let v = s.wait_for(&f.admin, &b, 5, |_| true).await;
    assert_eq!(attempt(&v, 0)["checkpoints"].as_i64().unwrap_or(0), 0, "b reported nothing: {v}");

    // The API, 2 s later: saves more.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (status, r) = s.http("POST", &path_a, Some(&token_a), None).await;
    assert_eq!(status, 200, "{r}");
    let saved_api = r["saved_s"].as_i64().unwrap();
    assert!(saved_api > saved, "{r}");
    let shown = s.cli_ok(&f.admin, &["show", &a]);
    assert!(shown.contains("checkpoints: 2 reported"), "{shown}");

    // A drain stops both: a keeps its last report, b (declared "never") nothing.
    let node =
        attempt(&s.wait_for(&f.admin, &a, 5, |_| true).await, 0)["allocation"][0]["node"].as_str().unwrap().to_string();
    let (status, e) = s.http("POST", &format!("/v1/nodes/{node}/drain"), t, None).await;
    assert_eq!(status, 200, "{e}");
    let v = s.wait_for(&f.admin, &a, 20, |v| attempt(v, 0)["end_t"].is_i64()).await;
    assert_eq!(attempt(&v, 0)["kept_s"].as_i64(), Some(saved_api), "CON-7: kept the last reported checkpoint: {v}");
    assert!(v["workload"]["reason"].as_str().is_some_and(|r| !r.is_empty()), "{v}");
    let (status, _) = s.http("POST", &path_a, Some(&token_a), None).await;
    assert_eq!(status, 401, "the ended attempt's credential is gone");
    let (_, e) = s.http("POST", &format!("/v1/nodes/{node}/undrain"), t, None).await;
    assert!(e.is_object(), "{e}");
    s.cli_ok(&f.admin, &["cancel", &a]);
    s.cli_ok(&f.admin, &["cancel", &b]);
    s.wait_for(&f.admin, &a, 20, |v| state(v) == "cancelled").await;
    s.wait_for(&f.admin, &b, 20, |v| state(v) == "cancelled").await;
    drop(s);
    f.finish().await;
}

both_stores!(checkpoint_on_signal_sqlite, checkpoint_on_signal_postgres, checkpoint_on_signal);

/// Works; on SIGTERM saves (touches its marker) and exits at once, before
/// the server's next look at the marker (read again when it exits).
const ON_SIGNAL_SH: &str = r#"#!/bin/sh
trap 'touch "$ALLOT_CHECKPOINT_MARKER"; exit 0' TERM
sleep 60 & wait $!
"#;

/// CON-8: a workload that checkpoints on the signal and reports it in the
/// grace keeps all its progress up to the signal when it is drained.
async fn checkpoint_on_signal(backend: Backend) {
    let f = Fixture::new(backend, "on-signal").await;
    // Grace 3 s: the workload exits well within it.
    let config = support::CONFIG.replace("grace = \"1s\"", "grace = \"3s\"");
    std::fs::write(f.dir.join("cluster.toml"), config).expect("write config");
    let s = Server::start(&f.dir, &f.db.url);
    let t = Some(f.admin.as_str());
    let sh = script(&f.dir, "on-signal.sh", ON_SIGNAL_SH);
    let id = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "2", "--checkpoint-on-signal", "--", &sh]);
    let shown = s.cli_ok(&f.admin, &["show", &id]);
    assert!(shown.contains("checkpoints when signalled (CON-8)"), "{shown}");
    let v = s.wait_for(&f.admin, &id, 20, |v| state(v) == "running").await;
    assert_eq!(v["workload"]["checkpoint_on_signal"], true, "{v}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let node = attempt(&v, 0)["allocation"][0]["node"].as_str().unwrap().to_string();
    let (status, e) = s.http("POST", &format!("/v1/nodes/{node}/drain"), t, None).await;
    assert_eq!(status, 200, "{e}");
    let v = s.wait_for(&f.admin, &id, 20, |v| attempt(v, 0)["end_t"].is_i64()).await;
    let a = attempt(&v, 0);
    let progress = a["signal_t"].as_i64().unwrap() - a["start_t"].as_i64().unwrap();
    assert!(progress >= 3, "{v}");
    assert_eq!(a["checkpoints"], 1, "the report in the grace: {v}");
    assert_eq!(a["kept_s"].as_i64(), Some(progress), "CON-8: kept everything up to the signal: {v}");
    s.cli_ok(&f.admin, &["cancel", &id]);
    s.wait_for(&f.admin, &id, 20, |v| state(v) == "cancelled").await;
    drop(s);
    f.finish().await;
}
