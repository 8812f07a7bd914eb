//! Loose input and scope faults of `allot serve`, each against the real
//! binary on SQLite and PostgreSQL: numbers past their bounds are refused
//! and nothing is stored; a submission's `env` cannot steer the executor;
//! duplicate grants are a 400; a token re-created under a revoked token's
//! name owns nothing of the old one's; `null` returns a budget to the
//! config's value, also after a restart; and what a researcher may not see
//! is answered exactly like what does not exist, and named in no reason.

mod support;

use serde_json::Value;
use support::{Backend, CONFIG, Fixture, Server, token};

both_stores!(bounds_sqlite, bounds_postgres, bounds);
both_stores!(env_sqlite, env_postgres, env);
both_stores!(revoked_name_sqlite, revoked_name_postgres, revoked_name);
both_stores!(null_budget_sqlite, null_budget_postgres, null_budget);
both_stores!(hidden_sqlite, hidden_postgres, hidden_is_unknown);
both_stores!(reasons_sqlite, reasons_postgres, reasons_name_no_hidden_account);

/// Decide and record only: no processes.
const NO_EXEC: [&str; 2] = ["--executor", "none"];

fn submission(account: &str, extra: &str) -> String {
    format!(r#"{{"account":"{account}","gpus":1,"command":["sleep","60"]{extra}}}"#)
}

async fn count_workloads(s: &Server, admin: &str) -> usize {
    let (status, v) = s.http("GET", "/v1/workloads?state=pending,running,stopping,cancelled", Some(admin), None).await;
    assert_eq!(status, 200, "{v}");
    v.as_array().unwrap().len()
}

/// A 400 naming `field`, whose message contains `fragment`.
fn assert_field(status: u16, v: &Value, field: &str, fragment: &str, case: &str) {
    assert_eq!(status, 400, "{case}: {v}");
    assert_eq!(v["field"], field, "{case}: {v}");
    let msg = v["error"].as_str().unwrap_or("");
    assert!(msg.contains(fragment), "{case}: message {msg:?} lacks {fragment:?}");
}

async fn bounds(backend: Backend) {
    let f = Fixture::new(backend, "bounds").await;
    let s = Server::start_with(&f.dir, &f.db.url, &NO_EXEC, &[]);
    let admin = f.admin.as_str();
    let huge = 1u64 << 63;
    let cases = [
        ("2^63 duration", format!(r#","expected_duration_s":{huge}"#), "expected_duration_s", "at most 315360000"),
        (
            "2^63 checkpoint",
            format!(r#","checkpoint_interval_s":{huge}"#),
            "checkpoint_interval_s",
            "at most 315360000",
        ),
        ("u32::MAX gpus", String::new(), "gpus", "at most"),
    ];
    for (case, extra, field, fragment) in &cases {
        let body = if *field == "gpus" {
            submission("org/a", "").replace(r#""gpus":1"#, &format!(r#""gpus":{}"#, u32::MAX))
        } else {
            submission("org/a", extra)
        };
        let (status, v) = s.http("POST", "/v1/workloads", Some(admin), Some(&body)).await;
        assert_field(status, &v, field, fragment, case);
    }
    assert_eq!(count_workloads(&s, admin).await, 0, "nothing stored");

    let patches = [
        ("huge share", r#"{"share":1.7e308}"#, "share", "between 0.001 and 1000000, got 1.7e308"),
        ("tiny share", r#"{"share":1e-300}"#, "share", "between 0.001 and 1000000"),
        ("huge budget", r#"{"budget_gpu_hours":1e300}"#, "budget_gpu_hours", "between 0.001 and 1e9"),
    ];
    for (case, body, field, fragment) in patches {
        let (status, v) = s.http("PATCH", "/v1/accounts/org/a", Some(admin), Some(body)).await;
        assert_field(status, &v, field, fragment, case);
    }
    let (_, a) = s.http("GET", "/v1/accounts/org/a", Some(admin), None).await;
    assert_eq!((a["share"].as_f64(), a["budget_gpu_hours"].as_f64()), (Some(1.0), None), "unchanged: {a}");
    let (_, b) = s.http("GET", "/v1/accounts/org/b", Some(admin), None).await;
    assert!(b["entitled_share"].as_f64().is_some_and(|e| e > 0.0), "entitlements stay positive: {b}");

    // Duplicate grants: a 400 naming the field, not a 500, and no token.
    let dup = r#"{"name":"dup","role":"researcher","projects":["org/a","org/b","org/a"]}"#;
    let (status, v) = s.http("POST", "/v1/tokens", Some(admin), Some(dup)).await;
    assert_field(status, &v, "projects", "granted twice", "duplicate projects");
    let (_, tokens) = s.http("GET", "/v1/tokens", Some(admin), None).await;
    assert!(tokens.as_array().unwrap().iter().all(|t| t["name"] != "dup"), "{tokens}");
    drop(s);
    f.finish().await;
}

async fn env(backend: Backend) {
    let f = Fixture::new(backend, "env").await;
    let s = Server::start_with(&f.dir, &f.db.url, &NO_EXEC, &[]);
    let admin = f.admin.as_str();
    let denied = [
        "SBATCH_ACCOUNT",
        "SBATCH_QOS",
        "SBATCH_PARTITION",
        "SBATCH_EXPORT",
        "SALLOC_ACCOUNT",
        "SRUN_CPUS_PER_TASK",
        "SLURM_CONF",
        "SLURM_JOB_ID",
        "ALLOT_NODE_RANK",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "NVIDIA_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
    ];
    for k in denied {
        let body = submission("org/a", &format!(r#","env":{{"OK":"1","{k}":"x"}}"#));
        let (status, v) = s.http("POST", "/v1/workloads", Some(admin), Some(&body)).await;
        assert_field(status, &v, &format!("env.{k}"), &format!("{k} may not be set"), k);
    }
    assert_eq!(count_workloads(&s, admin).await, 0, "nothing stored");
    let body = submission("org/a", r#","env":{"OMP_NUM_THREADS":"4","NCCL_DEBUG":"INFO"}"#);
    let (status, v) = s.http("POST", "/v1/workloads", Some(admin), Some(&body)).await;
    assert_eq!((status, v["env"]["OMP_NUM_THREADS"].as_str()), (201, Some("4")), "{v}");
    drop(s);
    f.finish().await;
}

async fn revoked_name(backend: Backend) {
    let f = Fixture::new(backend, "revoked-name").await;
    let old = token(&f.db.url, "researcher", "res", &["--project", "org/a"]);
    let s = Server::start_with(&f.dir, &f.db.url, &NO_EXEC, &[]);
    let admin = f.admin.as_str();
    let (status, w) = s.http("POST", "/v1/workloads", Some(&old), Some(&submission("org/a", ""))).await;
    assert_eq!(status, 201, "{w}");
    let id = w["id"].as_str().unwrap().to_string();

    let (status, v) = s.http("DELETE", "/v1/tokens/res", Some(admin), None).await;
    assert_eq!(status, 204, "{v}");
    let again = r#"{"name":"res","role":"researcher","projects":["org/a"]}"#;
    let (status, v) = s.http("POST", "/v1/tokens", Some(admin), Some(again)).await;
    assert_eq!(status, 201, "{v}");
    let new = v["token"].as_str().unwrap().to_string();

    let (status, v) = s.http("POST", &format!("/v1/workloads/{id}/cancel"), Some(&new), None).await;
    assert_eq!(status, 403, "the new token named res does not own the old one's workload: {v}");
    let (_, d) = s.http("GET", &format!("/v1/workloads/{id}"), Some(admin), None).await;
    assert!(d["workload"]["state"] != "cancelled" && d["workload"]["cancel_requested"] == false, "{d}");
    let (status, _) = s.http("GET", &format!("/v1/workloads/{id}"), Some(&new), None).await;
    assert_eq!(status, 200, "it still sees the project's workloads");

    // Its own workloads it cancels, also after a restart (ownership is stored).
    let (_, mine) = s.http("POST", "/v1/workloads", Some(&new), Some(&submission("org/a", ""))).await;
    let mine = mine["id"].as_str().unwrap().to_string();
    let mut s = s;
    s.restart();
    let (status, v) = s.http("POST", &format!("/v1/workloads/{mine}/cancel"), Some(&new), None).await;
    assert_eq!(status, 200, "{v}");
    let (status, _) = s.http("POST", &format!("/v1/workloads/{id}/cancel"), Some(&new), None).await;
    assert_eq!(status, 403, "still not after a restart");
    drop(s);
    f.finish().await;
}

async fn null_budget(backend: Backend) {
    let f = Fixture::new(backend, "null-budget").await;
    let config = CONFIG.replace("path = \"org/a\"\nshare = 1", "path = \"org/a\"\nshare = 1\nbudget_gpu_hours = 100");
    assert_ne!(config, CONFIG);
    std::fs::write(f.dir.join("cluster.toml"), config).unwrap();
    let mut s = Server::start_with(&f.dir, &f.db.url, &NO_EXEC, &[]);
    let admin = f.admin.as_str();
    let budget = |s: &Server| {
        let s = s.cli_json(admin, &["accounts"]);
        s.as_array().unwrap().iter().find(|a| a["path"] == "org/a").unwrap()["budget_gpu_hours"].as_f64()
    };
    assert_eq!(budget(&s), Some(100.0), "the config's");

    let (status, v) = s.http("PATCH", "/v1/accounts/org/a", Some(admin), Some(r#"{"budget_gpu_hours":5}"#)).await;
    assert_eq!((status, v["budget_gpu_hours"].as_f64()), (200, Some(5.0)), "{v}");
    let (status, v) = s.http("PATCH", "/v1/accounts/org/a", Some(admin), Some(r#"{"budget_gpu_hours":null}"#)).await;
    assert_eq!((status, v["budget_gpu_hours"].as_f64()), (200, Some(100.0)), "null: back to the config: {v}");
    s.restart();
    assert_eq!(budget(&s), Some(100.0), "also after a restart");

    s.cli_ok(admin, &["budget", "set", "org/a", "7"]);
    assert_eq!(budget(&s), Some(7.0));
    s.cli_ok(admin, &["budget", "set", "org/a", "default"]);
    assert_eq!(budget(&s), Some(100.0), "`default`: the config's");
    s.restart();
    assert_eq!(budget(&s), Some(100.0), "also after a restart");
    s.cli_ok(admin, &["share", "set", "org/b", "3"]);
    s.cli_ok(admin, &["share", "set", "org/b", "default"]);
    s.restart();
    let accounts = s.cli_json(admin, &["accounts"]);
    let b = accounts.as_array().unwrap().iter().find(|a| a["path"] == "org/b").unwrap();
    assert_eq!((b["share"].as_f64(), b["explicit_share"].as_bool()), (Some(1.0), Some(true)), "{b}");
    drop(s);
    f.finish().await;
}

/// Method, path and body of one HTTP call.
type Call<'a> = (&'a str, String, Option<String>);

async fn hidden_is_unknown(backend: Backend) {
    let f = Fixture::new(backend, "hidden").await;
    let res = token(&f.db.url, "researcher", "res", &["--project", "org/a"]);
    let mgr = token(&f.db.url, "manager", "mgr", &["--scope", "org"]);
    let s = Server::start_with(&f.dir, &f.db.url, &NO_EXEC, &[]);
    let admin = f.admin.as_str();
    let (_, w) = s.http("POST", "/v1/workloads", Some(admin), Some(&submission("lab/x", ""))).await;
    let hidden_id = w["id"].as_str().unwrap().to_string();
    let unknown_id = "999999";

    // (what, hidden call, unknown call): method, path, body; the answers
    // must be equal once the name asked for is replaced.
    let calls: Vec<(&str, [Call; 2], [&str; 2])> = vec![
        (
            "account",
            [("GET", "/v1/accounts/lab/x".into(), None), ("GET", "/v1/accounts/lab/nope".into(), None)],
            ["lab/x", "lab/nope"],
        ),
        (
            "account change",
            [
                ("PATCH", "/v1/accounts/lab/x".into(), Some(r#"{"share":2}"#.into())),
                ("PATCH", "/v1/accounts/lab/nope".into(), Some(r#"{"share":2}"#.into())),
            ],
            ["lab/x", "lab/nope"],
        ),
        (
            "submission",
            [
                ("POST", "/v1/workloads".into(), Some(submission("lab/x", ""))),
                ("POST", "/v1/workloads".into(), Some(submission("lab/nope", ""))),
            ],
            ["lab/x", "lab/nope"],
        ),
        (
            "workload",
            [("GET", format!("/v1/workloads/{hidden_id}"), None), ("GET", format!("/v1/workloads/{unknown_id}"), None)],
            [&hidden_id, unknown_id],
        ),
        (
            "cancel",
            [
                ("POST", format!("/v1/workloads/{hidden_id}/cancel"), None),
                ("POST", format!("/v1/workloads/{unknown_id}/cancel"), None),
            ],
            [&hidden_id, unknown_id],
        ),
    ];
    for (who, t) in [("researcher", &res), ("manager", &mgr)] {
        for (what, [(m1, p1, b1), (m2, p2, b2)], [n1, n2]) in &calls {
            let (s1, v1) = s.http(m1, p1, Some(t), b1.as_deref()).await;
            let (s2, v2) = s.http(m2, p2, Some(t), b2.as_deref()).await;
            assert!(s1 >= 400, "{who} {what}: hidden refused: {v1}");
            let e1 = v1["error"].as_str().unwrap_or("").replace(n1, "NAME");
            let e2 = v2["error"].as_str().unwrap_or("").replace(n2, "NAME");
            assert_eq!((s1, &e1, &v1["field"]), (s2, &e2, &v2["field"]), "{who} {what}: {v1} vs {v2}");
        }
    }
    let (status, d) = s.http("GET", &format!("/v1/workloads/{hidden_id}"), Some(admin), None).await;
    assert!(status == 200 && d["workload"]["cancel_requested"] == false, "the refused cancel changed nothing: {d}");
    drop(s);
    f.finish().await;
}

/// A researcher's workload preempted for another team's: the reason names
/// that team's account to the admin, not to the researcher or a manager
/// who cannot see it.
async fn reasons_name_no_hidden_account(backend: Backend) {
    let f = Fixture::new(backend, "reasons").await;
    let res = token(&f.db.url, "researcher", "res", &["--project", "org/a"]);
    let mgr = token(&f.db.url, "manager", "mgr", &["--scope", "org"]);
    let s = Server::start(&f.dir, &f.db.url);
    let admin = f.admin.as_str();
    // Four 1-GPU workloads fill the cluster; one of lab's then ranks
    // strictly better after a swap (CON-4), so one of them is preempted.
    let mut ids = Vec::new();
    for _ in 0..4 {
        let (status, w) = s.http("POST", "/v1/workloads", Some(&res), Some(&submission("org/a", ""))).await;
        assert_eq!(status, 201, "{w}");
        ids.push(w["id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        s.wait_for(admin, id, 30, |v| support::state(v) == "running").await;
    }
    let (status, _) = s.http("POST", "/v1/workloads", Some(admin), Some(&submission("lab/x", ""))).await;
    assert_eq!(status, 201);
    let signalled = |v: &Value| v["attempts"][0]["signal_reason"].as_str().is_some_and(|r| r.contains("lab"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (id, seen) = loop {
        let mut found = None;
        for id in &ids {
            let (_, v) = s.http("GET", &format!("/v1/workloads/{id}"), Some(admin), None).await;
            if signalled(&v) {
                found = Some((id.clone(), v));
                break;
            }
        }
        if let Some(hit) = found {
            break hit;
        }
        assert!(std::time::Instant::now() < deadline, "no org/a workload was preempted for lab/x:\n{}", s.log());
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let reason = seen["attempts"][0]["signal_reason"].as_str().unwrap().to_string();
    for (who, t) in [("researcher", &res), ("manager", &mgr)] {
        let (_, v) = s.http("GET", &format!("/v1/workloads/{id}"), Some(t), None).await;
        let shown = v["attempts"][0]["signal_reason"].as_str().unwrap_or_default();
        assert!(!shown.contains("lab") && shown.contains("another account"), "{who}: {shown:?} (admin: {reason:?})");
        let text = v.to_string();
        assert!(!text.contains("lab/x") && !text.contains("\"lab"), "{who}: {text}");
        let (_, list) = s.http("GET", "/v1/workloads?state=pending,running,stopping", Some(t), None).await;
        assert!(!list.to_string().contains("lab"), "{who}: {list}");
    }
    drop(s);
    f.finish().await;
}
