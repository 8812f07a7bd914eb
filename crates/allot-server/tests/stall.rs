//! Requests that stalled everyone (issue 30, points 15–18), through the
//! real `allot serve` (SQLite). No timings are asserted (docs/style.md
//! rule 11; the figures are the server bench's, docs/benchmarks.md): each
//! test checks the structure that keeps the cost bounded.
//!
//! * 15: at most 1,000 users per account and per request; a change of
//!   1,000 users' shares is one edit of the tree and one audit entry, and a
//!   submission beside it is answered;
//! * 16: dependency ids are numbers (`26`, `026`, `0026` are one), each
//!   workload waited for once, and the expanded size is bounded;
//! * 17: account paths are bounded (length, segment, depth) in every way an
//!   account is made (API, CLI, config), and a clean stop leaves no empty
//!   cgroup behind;
//! * 18: each principal has its share of the API (API-1): over it, 429 with
//!   `Retry-After` and why, while another principal is served; the CLI
//!   waits and retries.

mod support;

use std::path::Path;

use serde_json::{Value, json};
use support::{Backend, Fixture, Server, token};

fn users(n: usize) -> Value {
    Value::Object((0..n).map(|i| (format!("user{i}"), json!(1.0 + (i % 7) as f64))).collect())
}

/// Point 15: the bound, with the field named, and a change of 1,000 users
/// applied as one edit: one audit entry naming every user, the account
/// with all of them, and a submission beside it answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_of_an_account_are_bounded_and_set_at_once() {
    let f = Fixture::new(Backend::Sqlite, "stall-users").await;
    let mgr = token(&f.db.url, "manager", "mgr", &["--scope", "org"]);
    let s = Server::start(&f.dir, &f.db.url);
    let admin = f.admin.as_str();

    for field in ["users", "user_budgets"] {
        let body = json!({ field: users(1001) }).to_string();
        let (code, v) = s.http("PATCH", "/v1/accounts/org/a", Some(&mgr), Some(&body)).await;
        assert_eq!((code, v["field"].as_str()), (400, Some(field)), "{v}");
        let msg = v["error"].as_str().unwrap_or("");
        assert!(msg.contains(&format!("1001 users in {field}, at most 1000")), "{msg}");
    }
    let (_, audit) = s.http("GET", "/v1/audit", Some(admin), None).await;
    assert!(
        !audit.as_array().unwrap().iter().any(|a| a["target"] == "org/a"),
        "nothing was changed or recorded: {audit}"
    );

    // 1,000 users while a submission goes in beside it.
    let body = json!({ "users": users(1000), "budget_gpu_hours": 5 }).to_string();
    let patch = s.http("PATCH", "/v1/accounts/org/a?new_users=true", Some(&mgr), Some(&body));
    let sub = r#"{"account":"org/b","gpus":1,"command":["true"]}"#;
    let submit = s.http("POST", "/v1/workloads", Some(admin), Some(sub));
    let ((code, v), (sub_code, w)) = tokio::join!(patch, submit);
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["users"].as_object().map(|m| m.len()), Some(1000));
    assert_eq!(sub_code, 201, "{w}");

    // One audit entry for the users (its `set` names every one of them),
    // one for the budget.
    let (_, audit) = s.http("GET", "/v1/audit?limit=100", Some(admin), None).await;
    let entries: Vec<&Value> = audit.as_array().unwrap().iter().filter(|a| a["target"] == "org/a").collect();
    let actions: Vec<&str> = entries.iter().filter_map(|a| a["action"].as_str()).collect();
    assert_eq!(actions.iter().filter(|a| **a == "account.user_share").count(), 1, "{actions:?}");
    assert_eq!(actions.iter().filter(|a| **a == "account.budget").count(), 1, "{actions:?}");
    let shares = entries.iter().find(|a| a["action"] == "account.user_share").unwrap();
    assert_eq!(shares["after"]["set"].as_object().map(|m| m.len()), Some(1000), "{}", shares["after"]["set"]);
    assert_eq!(shares["after"]["set"]["user3"], json!(4.0));

    // The account now holds 1,000: one more, in another request, is refused.
    let body = json!({ "users": { "one-more": 2 } }).to_string();
    let (code, v) = s.http("PATCH", "/v1/accounts/org/a?new_users=true", Some(&mgr), Some(&body)).await;
    assert_eq!((code, v["field"].as_str()), (400, Some("users")), "{v}");
    assert!(v["error"].as_str().unwrap().contains("1001 users in users, at most 1000"), "{v}");
    drop(s);
    f.finish().await;
}

async fn submit_json(s: &Server, t: &str, body: Value) -> (u16, Value) {
    s.http("POST", "/v1/workloads", Some(t), Some(&body.to_string())).await
}

/// Point 16: one id however written, each workload once, the expanded size
/// bounded with the field named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependencies_are_ids_taken_once_and_bounded() {
    let f = Fixture::new(Backend::Sqlite, "stall-deps").await;
    let s = Server::start(&f.dir, &f.db.url);
    let admin = f.admin.as_str();
    let held = |extra: Value| {
        let mut b = json!({"account": "org/a", "gpus": 1, "command": ["true"], "hold": true});
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        b
    };
    let (code, one) = submit_json(&s, admin, held(json!({}))).await;
    assert_eq!(code, 201, "{one}");
    let id = one["id"].as_str().unwrap().to_string();
    let aliases: Vec<String> = (0..300).map(|z| format!("{}{id}", "0".repeat(z % 12))).collect();
    let text = format!("afterok:{}", aliases.join(":"));
    let (code, w) = submit_json(&s, admin, held(json!({ "dependency": text }))).await;
    assert_eq!(code, 201, "{w}");
    assert_eq!(w["dependency"], format!("afterok:{id}"), "300 ways of writing one id are one: {w}");

    // An array named 300 times (and by its elements) is waited for once
    // per element.
    let (code, arr) = submit_json(&s, admin, held(json!({ "array": "0-99" }))).await;
    assert_eq!(code, 201, "{arr}");
    let a = arr["id"].as_str().unwrap().split('_').next().unwrap().to_string();
    let names: Vec<String> = (0..300).map(|z| format!("{}{a}", "0".repeat(z % 5))).collect();
    let text = format!("afterany:{}:{a}_3:0{a}_03", names.join(":"));
    let (code, w) = submit_json(&s, admin, held(json!({ "dependency": text }))).await;
    assert_eq!(code, 201, "{w}");
    let deps = w["dependency"].as_str().unwrap();
    assert_eq!(deps.split(':').count(), 1 + 100, "each of the 100 elements once: {deps}");
    // Its reason names the array once, with its elements' phases, however
    // many of them it waits for (issue 30, point 5).
    let text = format!("afterany:{}", names.join(":"));
    let (code, w) =
        submit_json(&s, admin, json!({"account": "org/a", "gpus": 1, "command": ["true"], "dependency": text})).await;
    assert_eq!(code, 201, "{w}");
    let (_, v) = s.http("GET", &format!("/v1/workloads/{}", w["id"].as_str().unwrap()), Some(admin), None).await;
    let reason = v["why"].as_str().unwrap_or("");
    let want = format!(
        "It waits for the work it depends on. DEP-1: waits for afterany:{} (array of 100: 100 pending)",
        names[0]
    );
    assert_eq!(reason, want, "{v}");

    // 5,001 elements waited for two ways are 10,002 dependencies: refused.
    let (code, big) = submit_json(&s, admin, held(json!({ "array": "0-5000" }))).await;
    assert_eq!(code, 201, "{big}");
    let b = big["id"].as_str().unwrap().split('_').next().unwrap().to_string();
    let text = format!("afterok:{b},afterany:{b}");
    let (code, v) = submit_json(&s, admin, held(json!({ "dependency": text }))).await;
    assert_eq!((code, v["field"].as_str()), (400, Some("dependency")), "{v}");
    let msg = v["error"].as_str().unwrap();
    assert!(msg.contains("more than 10000 workloads once arrays are expanded"), "{msg}");
    drop(s);
    f.finish().await;
}

/// Point 17: paths past a bound are refused wherever an account is made,
/// naming the bound; the path is shown cut short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn account_paths_are_bounded_everywhere() {
    let f = Fixture::new(Backend::Sqlite, "stall-paths").await;
    let s = Server::start(&f.dir, &f.db.url);
    let admin = f.admin.as_str();
    let deep = format!("org/{}", vec!["l"; 16].join("/"));
    let long =
        format!("org/{}", ["s".repeat(60), "s".repeat(60), "s".repeat(60), "s".repeat(60), "s".repeat(60)].join("/"));
    let wide = format!("org/{}", "a".repeat(65));
    let huge = format!("org/{}", "x".repeat(200_000));
    let cases = [
        (deep.as_str(), "17 levels, at most 16"),
        (long.as_str(), "308 characters, at most 256"),
        (wide.as_str(), "has 65 characters, at most 64"),
    ];
    for (path, says) in cases {
        let body = json!({ "path": path }).to_string();
        let (code, v) = s.http("POST", "/v1/accounts", Some(admin), Some(&body)).await;
        assert_eq!((code, v["field"].as_str()), (400, Some("path")), "{v}");
        assert!(v["error"].as_str().unwrap().contains(says), "{v}");
        let out = s.cli(admin, &["accounts", "create", path]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{err}");
        let body = json!({ "rename_to": path }).to_string();
        let (code, v) = s.http("PATCH", "/v1/accounts/org/a", Some(admin), Some(&body)).await;
        assert_eq!((code, v["field"].as_str()), (400, Some("rename_to")), "{v}");
    }
    // 200,000 characters: over the request target's limit as a path, and
    // refused as a body with the path cut short in the answer.
    let body = json!({ "path": huge }).to_string();
    let (code, v) = s.http("POST", "/v1/accounts", Some(admin), Some(&body)).await;
    assert_eq!(code, 400, "{v}");
    let msg = v["error"].as_str().unwrap();
    assert!(msg.contains("200004 characters, at most 256") && msg.len() < 300, "{msg}");
    let (_, list) = s.http("GET", "/v1/accounts", Some(admin), None).await;
    assert!(list.as_array().unwrap().iter().all(|a| a["path"].as_str().unwrap().len() <= 256), "{list}");

    // The config: the same check, at the key and line.
    let config = format!("{}\n[[accounts]]\npath = \"{deep}\"\n", support::CONFIG);
    let e = allot_trace::config::parse_config(&config, "c.toml").unwrap_err().to_string();
    assert!(e.contains("c.toml") && e.contains("path") && e.contains("17 levels, at most 16"), "{e}");
    drop(s);
    f.finish().await;
}

/// Every `allot-<instance>` group of the store under the cgroup mounts.
fn store_groups(instance: &str) -> Vec<std::path::PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mountinfo
        .lines()
        .filter(|l| l.contains(" - cgroup"))
        .filter_map(|l| l.split(' ').nth(4))
        .map(|point| Path::new(point).join(format!("allot-{instance}")))
        .filter(|p| p.is_dir())
        .collect()
}

/// Point 17: a clean stop (SIGTERM) removes the empty cgroups the local
/// executor made, under the cgroup2 mount and the v1 devices controller
/// alike. Skipped where no cgroup can be made (not root, no cgroup2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_leaves_no_empty_cgroup() {
    let f = Fixture::new(Backend::Sqlite, "stall-cgroups").await;
    let mut s = Server::start(&f.dir, &f.db.url);
    let admin = f.admin.as_str();
    let instance = support::store_instance(&f.db.url).await;
    if store_groups(&instance).is_empty() {
        eprintln!("skipped: this server runs uncontained (no cgroup could be made here)");
        drop(s);
        f.finish().await;
        return;
    }
    let id = support::submit(&s, admin, &["--account", "org/a", "--gpus", "1", "--", "true"]);
    s.wait_for(admin, &id, 30, |v| support::state(v) == "finished").await;
    assert!(s.stop(), "a clean stop:\n{}", s.log());
    let left = store_groups(&instance);
    assert!(left.is_empty(), "cgroups left after a clean stop: {left:?}\n{}", s.log());
    f.finish().await;
}

const LIMITED: &str = "\n[api]\nrequests_per_second = 1\nburst = 3\nmax_in_flight = 4\n";

/// Point 18 (API-1): a principal over its rate is answered 429 with
/// `Retry-After` and why, while another principal and an admin are
/// served; the CLI waits as told and gets its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_principal_over_its_share_does_not_stop_the_others() {
    let f = Fixture::new(Backend::Sqlite, "stall-fair").await;
    std::fs::write(f.dir.join("cluster.toml"), format!("{}{LIMITED}", support::CONFIG)).unwrap();
    let alice = token(&f.db.url, "researcher", "alice", &["--project", "org/a"]);
    let bob = token(&f.db.url, "researcher", "bob", &["--project", "org/b"]);
    let s = Server::start(&f.dir, &f.db.url);
    let admin = f.admin.as_str();
    let client = reqwest::Client::new();
    let get = |t: &str| client.get(format!("{}/v1/workloads", s.url)).bearer_auth(t).send();

    let mut codes = Vec::new();
    let mut refused = None;
    for _ in 0..8 {
        let r = get(&alice).await.unwrap();
        codes.push(r.status().as_u16());
        if r.status() == 429 && refused.is_none() {
            let after = r.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_string);
            refused = Some((after, r.json::<Value>().await.unwrap()));
        }
    }
    assert_eq!(&codes[..3], &[200, 200, 200], "the burst: {codes:?}");
    assert!(codes[3..].contains(&429), "past the burst: {codes:?}");
    let (after, body) = refused.unwrap();
    let after: u64 = after.expect("Retry-After").parse().expect("whole seconds");
    assert!((1..=2).contains(&after), "{after}");
    let msg = body["error"].as_str().unwrap();
    assert!(msg.contains("too many requests from alice") && msg.contains("API-1"), "{msg}");

    // Bob and the admin are served while alice is over her share.
    for t in [bob.as_str(), bob.as_str(), bob.as_str(), admin, admin, admin, admin, admin] {
        let r = get(t).await.unwrap();
        assert_eq!(r.status(), 200, "{:?}", r.text().await);
    }
    // The CLI waits for Retry-After and gets its answer.
    let out = s.cli(&alice, &["nodes"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    drop(s);
    f.finish().await;
}
