//! A fleet of two clusters through the API and the store: a workload's
//! eligible clusters (FLEET-1) are checked by the one validator, stored,
//! shown, honoured by placement and kept across a restart. The `none`
//! executor: a started workload holds its GPUs until cancelled, so what
//! runs where is decided by the scheduler alone. Every scenario runs
//! against SQLite and PostgreSQL.

mod support;

use std::process::Command;

use allot_core::cluster::{ClusterId, ClusterSet};
use serde_json::{Value, json};
use support::{Backend, Fixture, Server, allot_bin, state, submit};

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

/// Scrapes `/metrics` until it has every line of `want` (gauges follow
/// the scheduler's passes); returns the exposition.
async fn scrape_until(s: &Server, token: &str, want: &[&str]) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (code, text) = s.http("GET", "/metrics", Some(token), None).await;
        let text = text.as_str().unwrap_or_default().to_string();
        let missing: Vec<&&str> = want.iter().filter(|w| !text.lines().any(|l| l == **w)).collect();
        if code == 200 && missing.is_empty() {
            return text;
        }
        assert!(std::time::Instant::now() < deadline, "/metrics lacks {missing:?}:\n{text}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
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

both_stores!(views_and_filters_sqlite, views_and_filters_postgres, views_and_filters);

fn ids(list: &Value) -> Vec<String> {
    let mut v: Vec<String> =
        list.as_array().expect("a list").iter().map(|w| w["id"].as_str().unwrap().into()).collect();
    v.sort();
    v
}

fn sorted(list: &[&String]) -> Vec<String> {
    let mut v: Vec<String> = list.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

/// `cluster` in node, workload and attempt views; `?cluster=` on the node
/// and workload listings (pending: eligible; running: placed there); an
/// unknown cluster in a filter is a 400 naming it; the CLI's `--cluster`
/// and its CLUSTER column.
async fn views_and_filters(backend: Backend) {
    let f = Fixture::new(backend, "fleet-views").await;
    let s = start(&f);
    let t = &f.admin;
    let sub = |args: &[&str]| submit(&s, t, &[&["--account", "org/a", "--gpus", "2"], args, &["--", "work"]].concat());
    let on_c2 = sub(&["--cluster", "c2"]);
    s.wait_for(t, &on_c2, 20, is_running).await;
    let wait_c2 = sub(&["--cluster", "c2"]);
    let on_c1 = sub(&[]);
    s.wait_for(t, &on_c1, 20, is_running).await;
    let wait_c1 = sub(&["--cluster", "c1"]);
    let wait_any = sub(&[]);

    let (code, nodes) = s.http("GET", "/v1/nodes", Some(t), None).await;
    assert_eq!(code, 200);
    let named: Vec<(&str, &str)> = nodes
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["name"].as_str().unwrap(), n["cluster"].as_str().unwrap()))
        .collect();
    assert_eq!(named, [("c1/h-0", "c1"), ("c2/h-0", "c2")]);
    let (_, only) = s.http("GET", "/v1/nodes?cluster=c2", Some(t), None).await;
    assert_eq!(only.as_array().unwrap().len(), 1);
    assert_eq!((only[0]["name"].as_str(), only[0]["workloads"].clone()), (Some("c2/h-0"), json!([on_c2])));
    for path in ["/v1/nodes?cluster=c9", "/v1/workloads?cluster=c9"] {
        let (code, e) = s.http("GET", path, Some(t), None).await;
        assert_eq!((code, e["field"].as_str()), (400, Some("cluster")), "{path}: {e}");
        assert!(e["error"].as_str().unwrap().contains("unknown cluster \"c9\" (the fleet has c1, c2)"), "{e}");
    }

    let (_, c2) = s.http("GET", "/v1/workloads?cluster=c2", Some(t), None).await;
    assert_eq!(ids(&c2), sorted(&[&on_c2, &wait_c2, &wait_any]), "running on c2, pending eligible for it: {c2}");
    let (_, c1) = s.http("GET", "/v1/workloads?cluster=c1", Some(t), None).await;
    assert_eq!(ids(&c1), sorted(&[&on_c1, &wait_c1, &wait_any]), "{c1}");
    let (_, both) = s.http("GET", "/v1/workloads?cluster=c1,c2", Some(t), None).await;
    assert_eq!(ids(&both).len(), 5);
    let cluster_of = |list: &Value, id: &str| {
        list.as_array().unwrap().iter().find(|w| w["id"] == id).map(|w| w["cluster"].clone()).unwrap()
    };
    assert_eq!((cluster_of(&c2, &on_c2), cluster_of(&c2, &wait_c2)), (json!("c2"), Value::Null), "{c2}");

    let (_, detail) = s.http("GET", &format!("/v1/workloads/{on_c1}"), Some(t), None).await;
    assert_eq!(
        (detail["workload"]["cluster"].as_str(), detail["attempts"][0]["cluster"].as_str()),
        (Some("c1"), Some("c1"))
    );

    // The CLI: --cluster filters, and the CLUSTER column of a fleet.
    let nodes = s.cli_ok(t, &["nodes", "--cluster", "c1"]);
    let lines: Vec<&str> = nodes.lines().collect();
    assert_eq!(lines.len(), 2, "{nodes}");
    assert!(lines[0].starts_with("CLUSTER") && lines[1].starts_with("c1 ") && lines[1].contains("c1/h-0"), "{nodes}");
    let queue = s.cli_json(t, &["queue", "--cluster", "c2"]);
    assert_eq!(ids(&queue), sorted(&[&on_c2, &wait_c2, &wait_any]));
    let table = s.cli_ok(t, &["queue"]);
    assert!(table.lines().next().unwrap().contains("CLUSTER"), "{table}");
    let shown = s.cli_ok(t, &["show", &on_c2]);
    assert!(shown.contains("may run on c2") && shown.contains("cluster    c2"), "{shown}");
    let bad = s.cli(t, &["nodes", "--cluster", "c9"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("unknown cluster"));

    // Per-cluster gauges beside the fleet-wide ones: both clusters full,
    // each with one workload pinned to it and the unpinned one waiting.
    let want = [
        "allot_gpus 4",
        "allot_queue_length{class=\"batch\"} 3",
        "allot_cluster_gpus{cluster=\"c1\"} 2",
        "allot_cluster_gpus{cluster=\"c2\"} 2",
        "allot_cluster_allocated_gpus{cluster=\"c1\"} 2",
        "allot_cluster_allocated_gpus{cluster=\"c2\"} 2",
        "allot_cluster_available_gpus{cluster=\"c1\"} 0",
        "allot_cluster_running_workloads{cluster=\"c1\"} 1",
        "allot_cluster_running_workloads{cluster=\"c2\"} 1",
        "allot_cluster_pending_workloads{cluster=\"c1\"} 2",
        "allot_cluster_pending_workloads{cluster=\"c2\"} 2",
    ];
    let metrics = scrape_until(&s, t, &want).await;
    // Cancelling the one on c2 frees it for the one pinned there.
    assert!(s.cli_ok(t, &["cancel", &on_c2]).contains(&on_c2));
    s.wait_for(t, &wait_c2, 20, is_running).await;
    let after = [
        "allot_cluster_pending_workloads{cluster=\"c1\"} 2",
        "allot_cluster_pending_workloads{cluster=\"c2\"} 1",
        "allot_cluster_running_workloads{cluster=\"c2\"} 1",
    ];
    scrape_until(&s, t, &after).await;
    assert!(metrics.contains("# TYPE allot_cluster_gpus gauge"), "{metrics}");

    // Export: the trace keeps what each workload was allowed (`clusters`),
    // the attempts file where each attempt ran; the trace replays under
    // `allot sim` on the same config as a fleet, the pins kept.
    let out = f.dir.join("fleet.csv");
    let export =
        Command::new(allot_bin()).args(["trace", "export", "--db", &f.db.url, "--out"]).arg(&out).output().unwrap();
    assert!(export.status.success(), "{}", String::from_utf8_lossy(&export.stderr));
    let cfg = allot_trace::config::load_config(&s.config).unwrap();
    let specs = allot_trace::trace::load_trace(&out, &cfg).expect("the export loads as a fleet trace");
    let pin = |id: &str| specs.iter().find(|w| w.id == id).unwrap_or_else(|| panic!("{id} exported")).clusters;
    let (c1, c2) = (ClusterSet::of([ClusterId(0)]), ClusterSet::of([ClusterId(1)]));
    let want = [(&on_c2, c2), (&wait_c2, c2), (&on_c1, ClusterSet::ANY), (&wait_c1, c1), (&wait_any, ClusterSet::ANY)];
    for (id, set) in want {
        assert_eq!(pin(id), set, "workload {id}");
    }
    let attempts = std::fs::read_to_string(f.dir.join("fleet.attempts.csv")).expect("the attempts file");
    let rows: Vec<Vec<&str>> = attempts.lines().skip(1).map(|l| l.split(',').collect()).collect();
    assert_eq!(attempts.lines().next(), Some("workload,attempt,cluster,nodes,start_s,end_s,outcome"));
    let ran: Vec<(&str, &str, &str, &str, &str)> = rows.iter().map(|r| (r[0], r[1], r[2], r[3], r[6])).collect();
    let want = [
        (on_c2.as_str(), "1", "c2", "c2/h-0", "cancelled"),
        (wait_c2.as_str(), "1", "c2", "c2/h-0", ""),
        (on_c1.as_str(), "1", "c1", "c1/h-0", ""),
    ];
    assert_eq!(ran, want, "by workload and attempt: {attempts}");
    assert!(rows.iter().all(|r| r.len() == 7 && r[4].parse::<u64>().is_ok()), "{attempts}");
    let log = f.dir.join("sim.jsonl");
    let sim = Command::new(allot_bin())
        .args(["sim", "--config"])
        .arg(&s.config)
        .arg("--trace")
        .arg(&out)
        .arg("--log")
        .arg(&log)
        .output()
        .unwrap();
    assert!(sim.status.success(), "allot sim on the export: {}", String::from_utf8_lossy(&sim.stderr));
    let log = std::fs::read_to_string(&log).unwrap();
    for id in [&on_c2, &wait_c2, &wait_c1] {
        let cluster = if *id == wait_c1 { "c1/" } else { "c2/" };
        let starts: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(&format!("\"workload\":\"{id}\"")) && l.contains("\"event\":\"start\""))
            .collect();
        assert!(!starts.is_empty(), "{id} starts in the replay:\n{log}");
        assert!(
            starts.iter().all(|l| l.contains(cluster) && !l.contains(if cluster == "c1/" { "c2/" } else { "c1/" })),
            "{id} on {cluster}: {starts:?}"
        );
    }
    drop(s);
    f.finish().await;
}
