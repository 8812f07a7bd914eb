//! CON-6 end to end: the real `allot` binary stops a workload that reaches
//! its time limit after grace and ends it as failed with the rule's reason;
//! limits above the class maximum and unreadable ones are refused, nothing
//! stored.

mod support;

use std::time::Instant;

use serde_json::Value;
use support::{Backend, CONFIG, Fixture, Server, state, submit};

both_stores!(time_limit_sqlite, time_limit_postgres, time_limit);

async fn time_limit(backend: Backend) {
    let f = Fixture::new(backend, "time-limit").await;
    // The support config's [contract] comes last: grace 1 s.
    let config = format!("{CONFIG}max_time_limit = {{ batch = \"1h\" }}\n");
    std::fs::write(f.dir.join("cluster.toml"), config).expect("write config");
    let s = Server::start(&f.dir, &f.db.url);
    let t = Some(f.admin.as_str());

    // Bad input first: nothing may be stored.
    let out = s.cli(&f.admin, &["submit", "--account", "org/a", "--gpus", "1", "--time", "soon", "--", "true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("invalid duration \"soon\""), "{err}");
    let body = r#"{"account":"org/a","gpus":1,"command":["true"],"time_limit_s":7200}"#;
    let (status, v) = s.http("POST", "/v1/workloads", t, Some(body)).await;
    assert_eq!((status, v["field"].as_str()), (400, Some("time_limit_s")), "{v}");
    let msg = v["error"].as_str().unwrap_or("");
    assert!(msg.contains("time limit 7200 s is above the batch maximum of 3600 s"), "{v}");
    let (_, list) = s.http("GET", "/v1/workloads", t, None).await;
    assert_eq!(list, Value::Array(vec![]), "nothing stored");

    let started = Instant::now();
    let id = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "1", "--time", "0:02", "--", "sleep", "30"]);
    let shown = s.cli_ok(&f.admin, &["show", &id]);
    assert!(shown.contains("time limit 2 s per attempt (CON-6)"), "{shown}");
    let done = s.wait_for(&f.admin, &id, 20, |v| state(v) == "failed").await;
    assert!(started.elapsed().as_secs() < 15, "stopped at the limit, not after the work: {done}");
    let w = &done["workload"];
    assert_eq!(w["time_limit_s"], 2, "{done}");
    let reason = w["reason"].as_str().unwrap_or("");
    assert!(reason.starts_with("CON-6: time limit of 2 s reached"), "{done}");
    let attempts = done["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "not requeued: {done}");
    let a = &attempts[0];
    let (start, signal, end) = (a["start_t"].as_i64().unwrap(), a["signal_t"].as_i64(), a["end_t"].as_i64().unwrap());
    assert_eq!(signal, Some(start + 2), "signalled at the limit: {done}");
    assert!((start + 2..=start + 4).contains(&end), "ends within grace of the limit: {done}");
    assert!(a["signal_reason"].as_str().is_some_and(|r| r.starts_with("CON-6: ran 2 s")), "{done}");
    assert_eq!(a["outcome"], "failed", "{done}");

    // A limit longer than the work changes nothing.
    let roomy = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "1", "--time", "1m", "--", "sleep", "1"]);
    s.wait_for(&f.admin, &roomy, 20, |v| state(v) == "finished").await;
    drop(s);
    f.finish().await;
}
