//! A fleet of two clusters through the API and the store: a workload's
//! eligible clusters (FLEET-1) are checked by the one validator, stored,
//! shown, honoured by placement and kept across a restart. The `none`
//! executor: a started workload holds its GPUs until cancelled, so what
//! runs where is decided by the scheduler alone. Every scenario runs
//! against SQLite and PostgreSQL.

mod support;

use serde_json::{Value, json};
use support::{Backend, Fixture, Server, state, submit};

/// Two clusters of one node of two GPUs each.
pub const FLEET: &str = r#"
name = "fleet"
[[clusters]]
name = "c1"
[[clusters.pools]]
name = "h"
gpu = "H100"
nodes = 1
gpus_per_node = 2
[[clusters]]
name = "c2"
[[clusters.pools]]
name = "h"
gpu = "H100"
nodes = 1
gpus_per_node = 2

[[accounts]]
path = "org/a"
[[accounts]]
path = "org/b"

[contract]
scheduling_interval = "1s"
grace = "1s"
"#;

fn start(f: &Fixture) -> Server {
    std::fs::write(f.dir.join("cluster.toml"), FLEET).expect("write config");
    Server::start_with(&f.dir, &f.db.url, &["--executor", "none"], &[])
}

async fn post(s: &Server, token: &str, body: Value) -> (u16, Value) {
    s.http("POST", "/v1/workloads", Some(token), Some(&body.to_string())).await
}

/// The nodes of a workload's last attempt.
fn last_nodes(detail: &Value) -> Vec<String> {
    let attempts = detail["attempts"].as_array().expect("attempts");
    let alloc = attempts.last().map_or(&Value::Null, |a| &a["allocation"]);
    alloc.as_array().map_or_else(Vec::new, |l| l.iter().map(|n| n["node"].as_str().unwrap().to_string()).collect())
}

/// A submission under the key `pin-1`: (status, replayed, body).
async fn keyed(s: &Server, token: &str, body: Value) -> (u16, bool, Value) {
    let r = reqwest::Client::new()
        .post(format!("{}/v1/workloads", s.url))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("idempotency-key", "pin-1")
        .body(body.to_string())
        .send()
        .await
        .expect("http");
    let replayed = r.headers().contains_key("idempotent-replayed");
    (r.status().as_u16(), replayed, r.json::<Value>().await.expect("json"))
}

fn is_running(v: &Value) -> bool {
    state(v) == "running"
}

both_stores!(pinned_submission_sqlite, pinned_submission_postgres, pinned_submission);

/// A pinned workload runs on its cluster, or waits for it while others run
/// elsewhere; an unknown cluster is a 400 naming the field and the fleet's
/// clusters; the pin is part of the idempotency comparison and survives a
/// restart.
async fn pinned_submission(backend: Backend) {
    let f = Fixture::new(backend, "fleet-pin").await;
    let mut s = start(&f);
    let body = |clusters: Value| json!({"account": "org/a", "gpus": 2, "command": ["work"], "clusters": clusters});

    let (code, unknown) = post(&s, &f.admin, body(json!(["c3"]))).await;
    assert_eq!(code, 400, "{unknown}");
    assert_eq!(unknown["field"], "clusters", "{unknown}");
    let msg = unknown["error"].as_str().unwrap();
    assert!(msg.contains("unknown cluster \"c3\"") && msg.contains("c1, c2"), "names it and the fleet's: {msg}");
    let (code, two) = post(&s, &f.admin, body(json!(["c1,c2"]))).await;
    assert_eq!((code, two["field"].as_str()), (400, Some("clusters")), "one name per entry: {two}");

    // The CLI's --cluster and the API's field are the same list.
    let first = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "2", "--cluster", "c2", "--", "work"]);
    let (code, second) = post(&s, &f.admin, body(json!(["c2"]))).await;
    assert_eq!(code, 201, "{second}");
    assert_eq!(second["clusters"], json!(["c2"]), "shown as submitted");
    let second = second["id"].as_str().unwrap().to_string();
    let run = s.wait_for(&f.admin, &first, 20, is_running).await;
    assert_eq!(run["workload"]["clusters"], json!(["c2"]));
    assert_eq!(last_nodes(&run), ["c2/h-0"], "placed on its cluster: {run}");

    // Anything may run on c1 while the second pinned one waits for c2.
    let (code, any) = post(&s, &f.admin, json!({"account": "org/b", "gpus": 2, "command": ["work"]})).await;
    assert_eq!((code, any["clusters"].clone()), (201, json!([])), "no pin: any cluster");
    let any = any["id"].as_str().unwrap().to_string();
    let elsewhere = s.wait_for(&f.admin, &any, 20, is_running).await;
    assert_eq!(last_nodes(&elsewhere), ["c1/h-0"]);
    let (_, waiting) = s.http("GET", &format!("/v1/workloads/{second}"), Some(&f.admin), None).await;
    assert_eq!(state(&waiting), "pending", "submitted before `any` was placed on c1, yet waits for c2: {waiting}");

    // The same key with another pin is another request.
    let (code, replayed, k1) = keyed(&s, &f.admin, body(json!(["c1"]))).await;
    assert_eq!((code, replayed), (201, false), "{k1}");
    let (code, replayed, again) = keyed(&s, &f.admin, body(json!(["c1"]))).await;
    assert_eq!((code, replayed, again["id"].clone()), (201, true, k1["id"].clone()), "{again}");
    let (code, _, other) = keyed(&s, &f.admin, body(json!(["c2"]))).await;
    assert_eq!((code, other["field"].as_str()), (422, Some("Idempotency-Key")), "{other}");
    let k1 = k1["id"].as_str().unwrap().to_string();
    assert!(s.cli_ok(&f.admin, &["cancel", &k1]).contains("cancelled"));

    // After a restart every attempt was closed and requeued: the pins are
    // read back from the store and placement honours them again: one of
    // the two pinned gangs runs on c2, the other waits, none on c1.
    s.restart();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let mut running = Vec::new();
        for id in [&first, &second] {
            let (_, v) = s.http("GET", &format!("/v1/workloads/{id}"), Some(&f.admin), None).await;
            assert_eq!(v["workload"]["clusters"], json!(["c2"]), "kept across the restart: {v}");
            if is_running(&v) {
                assert_eq!(last_nodes(&v), ["c2/h-0"], "after the restart: {v}");
                running.push(id);
            }
        }
        assert!(running.len() <= 1, "one gang of 2 GPUs fits c2");
        if running.len() == 1 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no pinned workload restarted:\n{}", s.log());
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    drop(s);
    f.finish().await;
}
