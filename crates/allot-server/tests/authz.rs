//! The authorisation matrix: each role (admin, manager of `org`, researcher
//! of `org/a`, a scrape token, no token, a bad token) × each endpoint, and
//! that refused calls change nothing. What a caller may not see is answered
//! like what does not exist (404, or 400 `unknown account` for a
//! submission), and no answer names an account the caller may not see
//! unless the caller named it; `/v1/nodes` shows only visible workloads and
//! `/metrics` per-account series only to admins and scrape tokens. Runs
//! against SQLite and PostgreSQL.

mod support;

use serde_json::Value;
use support::{Backend, Fixture, Server, token};

both_stores!(authz_sqlite, authz_postgres, authz);

const SLEEP: &str = r#"{"account":"ACCOUNT","gpus":1,"command":["sleep","60"]}"#;

fn body(account: &str) -> String {
    SLEEP.replace("ACCOUNT", account)
}

async fn authz(backend: Backend) {
    let f = Fixture::new(backend, "authz").await;
    let db = &f.db.url;
    let mgr = token(db, "manager", "mgr", &["--scope", "org"]);
    let res = token(db, "researcher", "res", &["--project", "org/a"]);
    let res2 = token(db, "researcher", "res2", &["--project", "org/a"]);
    let scrape = token(db, "metrics", "scrape", &[]);
    let s = Server::start(&f.dir, db);
    let admin = f.admin.as_str();
    let who: [(&str, Option<&str>); 6] = [
        ("admin", Some(admin)),
        ("manager", Some(&mgr)),
        ("researcher", Some(&res)),
        ("metrics", Some(&scrape)),
        ("none", None),
        ("bad", Some("allot_0000")),
    ];
    // Accounts each principal may not see (the admin sees all).
    let hidden: [&[&str]; 6] = [&[], &["lab/x"], &["lab/x", "org/b"], &["lab/x", "org/a", "org/b"], &[], &[]];

    // Workloads to act on.
    let post = |t: &str, acct: &str| {
        let (s, t, b) = (&s, t.to_string(), body(acct));
        async move { s.http("POST", "/v1/workloads", Some(&t), Some(&b)).await }
    };
    let (_, w_admin) = post(admin, "org/a").await;
    let (_, w_res) = post(&res, "org/a").await;
    let (_, w_lab) = post(admin, "lab/x").await;
    let id = |v: &Value| v["id"].as_str().unwrap().to_string();
    let (w_admin, w_res, w_lab) = (id(&w_admin), id(&w_res), id(&w_lab));
    nodes_show_visible_workloads(&s, admin, &mgr, &res, &scrape, [&w_admin, &w_res, &w_lab]).await;

    // (method, path, body, expected status per principal in `who` order)
    let matrix: Vec<(&str, String, Option<String>, [u16; 6])> = vec![
        ("GET", "/v1/whoami".into(), None, [200, 200, 200, 200, 401, 401]),
        ("GET", "/v1/openapi.json".into(), None, [200, 200, 200, 200, 200, 200]),
        ("POST", "/v1/workloads".into(), Some(body("org/b")), [201, 201, 400, 400, 401, 401]),
        ("POST", "/v1/workloads".into(), Some(body("lab/x")), [201, 400, 400, 400, 401, 401]),
        ("GET", "/v1/workloads".into(), None, [200, 200, 200, 200, 401, 401]),
        ("GET", format!("/v1/workloads/{w_lab}"), None, [200, 404, 404, 404, 401, 401]),
        ("GET", format!("/v1/workloads/{w_admin}"), None, [200, 200, 200, 404, 401, 401]),
        ("GET", "/v1/accounts".into(), None, [200, 200, 200, 200, 401, 401]),
        ("GET", "/v1/budget-events".into(), None, [200, 200, 200, 200, 401, 401]),
        ("GET", "/v1/budget-report?period=previous&format=csv".into(), None, [200, 200, 200, 200, 401, 401]),
        ("GET", "/v1/budget-report?period=someday".into(), None, [400, 400, 400, 400, 401, 401]),
        ("GET", "/v1/accounts/lab/x".into(), None, [200, 404, 404, 404, 401, 401]),
        ("PATCH", "/v1/accounts/lab/x".into(), Some(r#"{"share":2}"#.into()), [200, 404, 404, 404, 401, 401]),
        ("PATCH", "/v1/accounts/org".into(), Some(r#"{"share":2}"#.into()), [200, 403, 404, 404, 401, 401]),
        (
            "PATCH",
            "/v1/accounts/org/b".into(),
            Some(r#"{"budget_gpu_hours":5}"#.into()),
            [200, 200, 404, 404, 401, 401],
        ),
        ("PATCH", "/v1/accounts/org/a".into(), Some(r#"{"share":1}"#.into()), [200, 200, 403, 404, 401, 401]),
        ("PATCH", "/v1/accounts/org/a".into(), Some(r#"{"users":{"res":2}}"#.into()), [200, 200, 403, 404, 401, 401]),
        ("POST", "/v1/accounts".into(), Some(r#"{"path":"lab/new"}"#.into()), [201, 403, 403, 403, 401, 401]),
        ("GET", "/v1/account-tree".into(), None, [200, 200, 200, 200, 401, 401]),
        (
            "PUT",
            "/v1/account-tree".into(),
            Some(r#"{"accounts":[{"path":"org/a"}],"dry_run":true}"#.into()),
            [200, 403, 403, 403, 401, 401],
        ),
        ("GET", "/v1/nodes".into(), None, [200, 200, 200, 200, 401, 401]),
        ("POST", "/v1/nodes/gpu-1/undrain".into(), None, [200, 403, 403, 403, 401, 401]),
        ("GET", "/v1/tokens".into(), None, [200, 403, 403, 403, 401, 401]),
        ("GET", "/v1/audit".into(), None, [200, 403, 403, 403, 401, 401]),
        ("GET", "/metrics".into(), None, [200, 200, 200, 200, 401, 401]),
        ("DELETE", "/v1/tokens/nobody".into(), None, [404, 403, 403, 403, 401, 401]),
    ];
    for (method, path, b, want) in &matrix {
        for (((name, t), w), hidden) in who.iter().zip(want).zip(hidden) {
            // Posting tokens is checked separately (names must be unique).
            let (status, v) = s.http(method, path, *t, b.as_deref()).await;
            assert_eq!(status, *w, "{name} {method} {path}: {v}");
            if status >= 400 {
                let e = v["error"].as_str().unwrap_or("");
                assert!(e.len() > 10, "{name} {method} {path}: clear message {v}");
                let asked = format!("{path} {}", b.as_deref().unwrap_or(""));
                for a in hidden.iter().filter(|a| !asked.contains(*a)) {
                    assert!(!e.contains(&format!("{a:?}")), "{name} {method} {path}: names hidden {a}: {v}");
                }
            }
        }
    }
    metrics_per_account_only_for_admins_and_scrapers(&s, &who).await;
    for (i, (name, t)) in who.iter().enumerate() {
        let req = format!(r#"{{"name":"new{i}","role":"researcher","projects":["org/b"]}}"#);
        let (status, v) = s.http("POST", "/v1/tokens", *t, Some(&req)).await;
        let want = [201, 403, 403, 403, 401, 401][i];
        assert_eq!(status, want, "{name} POST /v1/tokens: {v}");
    }

    // What each sees.
    let seen = |t: &str, path: &'static str| {
        let (s, t) = (&s, t.to_string());
        async move {
            let (_, v) = s.http("GET", path, Some(&t), None).await;
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x[if path.contains("accounts") { "path" } else { "account" }].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(seen(admin, "/v1/accounts").await, ["lab", "lab/new", "lab/x", "org", "org/a", "org/b"]);
    assert_eq!(seen(&mgr, "/v1/accounts").await, ["org", "org/a", "org/b"]);
    assert_eq!(seen(&res, "/v1/accounts").await, ["org/a"]);
    assert!(seen(&scrape, "/v1/accounts").await.is_empty() && seen(&scrape, "/v1/workloads").await.is_empty());
    assert!(seen(&mgr, "/v1/workloads").await.iter().all(|a| a.starts_with("org/")));
    assert!(seen(&res, "/v1/workloads").await.iter().all(|a| a == "org/a"));
    assert!(seen(admin, "/v1/workloads").await.iter().any(|a| a == "lab/x"));
    let in_report = |t: &str| {
        let (s, t) = (&s, t.to_string());
        async move {
            let (_, v) = s.http("GET", "/v1/budget-report", Some(&t), None).await;
            let accounts = v["periods"][0]["accounts"].as_array().unwrap().clone();
            accounts.iter().map(|a| a["account"].as_str().unwrap().to_string()).collect::<Vec<_>>()
        }
    };
    assert_eq!(
        in_report(admin).await,
        ["lab", "lab/new", "lab/x", "org", "org/a", "org/b"],
        "the report as /v1/accounts"
    );
    assert_eq!(in_report(&mgr).await, ["org", "org/a", "org/b"]);
    assert_eq!(in_report(&res).await, ["org/a"]);
    assert!(in_report(&scrape).await.is_empty());
    let csv = s.cli(&res, &["budget", "report", "--format", "csv"]);
    let csv = String::from_utf8_lossy(&csv.stdout).into_owned();
    assert!(csv.starts_with("period_start,") && csv.contains(",org/a,") && !csv.contains(",org/b,"), "{csv}");

    // Cancels: researchers only their own; refused calls change nothing.
    let cancel = |t: &str, w: &str| {
        let (s, t, p) = (&s, t.to_string(), format!("/v1/workloads/{w}/cancel"));
        async move { s.http("POST", &p, Some(&t), None).await.0 }
    };
    assert_eq!(cancel(&res2, &w_res).await, 403);
    assert_eq!(cancel(&res, &w_admin).await, 403);
    assert_eq!(cancel(&mgr, &w_lab).await, 404, "hidden: like a workload that does not exist");
    assert_eq!(cancel(&scrape, &w_res).await, 404);
    for w in [&w_res, &w_admin, &w_lab] {
        let (_, v) = s.http("GET", &format!("/v1/workloads/{w}"), Some(admin), None).await;
        assert!(!v["workload"]["cancel_requested"].as_bool().unwrap() && v["workload"]["state"] != "cancelled", "{v}");
    }
    assert_eq!(cancel(&res, &w_res).await, 200);
    assert_eq!(cancel(&mgr, &w_admin).await, 200);

    // Refused changes left budgets, shares and nodes alone; allowed ones are audited.
    let (_, org) = s.http("GET", "/v1/accounts/org", Some(admin), None).await;
    assert_eq!(org["share"], 2.0, "only the admin's change applied: {org}");
    let (_, audit) = s.http("GET", "/v1/audit", Some(admin), None).await;
    let changes: Vec<(String, String, String)> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"].as_str().unwrap().starts_with("account."))
        .map(|e| {
            (
                e["principal"].as_str().unwrap().into(),
                e["action"].as_str().unwrap().into(),
                e["target"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        changes.len(),
        9,
        "admin: lab/x, org, org/b, org/a ×2, lab/new (not the dry run); manager: org/b, org/a ×2: {audit}"
    );
    assert!(changes.contains(&("mgr".into(), "account.budget".into(), "org/b".into())), "{audit}");
    assert!(changes.contains(&("mgr".into(), "account.user_share".into(), "org/a".into())), "{audit}");
    assert!(changes.contains(&("root".into(), "account.create".into(), "lab/new".into())), "{audit}");
    let entry = audit.as_array().unwrap().iter().find(|e| e["target"] == "org/b" && e["principal"] == "root").unwrap();
    assert_eq!(
        (entry["before"]["budget_gpu_hours"].clone(), entry["after"]["budget_gpu_hours"].clone()),
        (Value::Null, 5.0.into())
    );
    let nodes = s.cli_json(&mgr, &["nodes"]);
    assert!(nodes.as_array().unwrap().iter().all(|n| n["health"] == "up"), "{nodes}");
    let drain = s.cli(&res, &["node", "drain", "gpu-0"]);
    assert!(!drain.status.success() && String::from_utf8_lossy(&drain.stderr).contains("403"));
    let budget = s.cli(&res, &["budget", "set", "org/a", "10"]);
    assert!(!budget.status.success() && String::from_utf8_lossy(&budget.stderr).contains("403"));
    s.cli_ok(&mgr, &["budget", "set", "org/a", "10"]);
    let accounts = s.cli_json(&res, &["accounts"]);
    assert_eq!(accounts[0]["budget_gpu_hours"], 10.0);
    drop(s);
    f.finish().await;
}

both_stores!(env_values_sqlite, env_values_postgres, env_values);

/// A workload's env values (where API keys go) are shown to its owner (the
/// token that submitted it) and to admins only; everyone else who sees the
/// workload sees the names with the values masked, in the list, the
/// detail and the answer to a cancel.
async fn env_values(backend: Backend) {
    let f = Fixture::new(backend, "authz-env").await;
    let db = &f.db.url;
    let mgr = token(db, "manager", "mgr", &["--scope", "org"]);
    let res = token(db, "researcher", "res", &["--project", "org/a"]);
    let res2 = token(db, "researcher", "res2", &["--project", "org/a"]);
    let s = Server::start(&f.dir, db);
    let admin = f.admin.as_str();
    let secret = r#"{"account":"org/a","gpus":1,"command":["sleep","60"],"env":{"API_KEY":"s3cret","MODE":"x"}}"#;
    let (st, mine) = s.http("POST", "/v1/workloads", Some(&res), Some(secret)).await;
    assert_eq!(st, 201, "{mine}");
    assert_eq!(mine["env"]["API_KEY"], "s3cret", "the owner's own submission: {mine}");
    let id = mine["id"].as_str().unwrap().to_string();
    let (_, by_admin) = s.http("POST", "/v1/workloads", Some(admin), Some(secret)).await;
    let admins = by_admin["id"].as_str().unwrap().to_string();
    let env_of = |t: &str, w: &str| {
        let (s, t, w) = (&s, t.to_string(), w.to_string());
        async move {
            let (st, v) = s.http("GET", &format!("/v1/workloads/{w}"), Some(&t), None).await;
            assert_eq!(st, 200, "{v}");
            let (_, list) = s.http("GET", "/v1/workloads?state=pending,running", Some(&t), None).await;
            let listed = list.as_array().unwrap().iter().find(|x| x["id"] == w.as_str()).unwrap()["env"].clone();
            assert_eq!(listed, v["workload"]["env"], "the list shows what the detail shows");
            (v["workload"]["env"]["API_KEY"].clone(), v["workload"]["env"]["MODE"].clone())
        }
    };
    let shown = (Value::from("s3cret"), Value::from("x"));
    let hidden = (Value::from("(hidden)"), Value::from("(hidden)"));
    assert_eq!(env_of(&res, &id).await, shown, "the owner");
    assert_eq!(env_of(admin, &id).await, shown, "an admin");
    assert_eq!(env_of(&res2, &id).await, hidden, "another researcher of the project");
    assert_eq!(env_of(&mgr, &id).await, hidden, "a manager of the account");
    assert_eq!(env_of(&res, &admins).await, hidden, "a researcher, of an admin's workload");
    let (st, v) = s.http("POST", &format!("/v1/workloads/{id}/cancel"), Some(&mgr), None).await;
    assert_eq!((st, &v["env"]["API_KEY"]), (200, &Value::from("(hidden)")), "{v}");
    drop(s);
    f.finish().await;
}

/// `/v1/nodes` lists on each node only the workloads the caller may see.
async fn nodes_show_visible_workloads(s: &Server, admin: &str, mgr: &str, res: &str, scrape: &str, ids: [&str; 3]) {
    let [w_admin, w_res, w_lab] = ids;
    let on_nodes = |t: &str| {
        let t = t.to_string();
        async move {
            let (status, v) = s.http("GET", "/v1/nodes", Some(&t), None).await;
            assert_eq!(status, 200, "{v}");
            let ids = v.as_array().unwrap().iter().flat_map(|n| n["workloads"].as_array().unwrap().clone());
            ids.map(|w| w.as_str().unwrap().to_string()).collect::<Vec<_>>()
        }
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let all = on_nodes(admin).await;
        if ids.iter().all(|w| all.iter().any(|a| a == w)) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the three workloads did not start: {all:?}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let mut r = on_nodes(res).await;
    r.sort();
    let mut want = vec![w_admin.to_string(), w_res.to_string()];
    want.sort();
    assert_eq!(r, want, "the researcher sees its project's workloads only");
    let m = on_nodes(mgr).await;
    assert!(m.contains(&w_res.to_string()) && !m.contains(&w_lab.to_string()), "{m:?}");
    assert!(on_nodes(scrape).await.is_empty());
}

/// `/metrics`: series labelled by account for admins and scrape tokens only.
async fn metrics_per_account_only_for_admins_and_scrapers(s: &Server, who: &[(&str, Option<&str>); 6]) {
    for ((name, t), per_account) in who.iter().zip([true, false, false, true]) {
        let (status, v) = s.http("GET", "/metrics", *t, None).await;
        let text = v.as_str().unwrap_or_default();
        assert_eq!(status, 200, "{name}: {text}");
        // The Prometheus text format unless OpenMetrics is asked for (below).
        assert!(text.contains("allot_gpus ") && !text.contains("# EOF"), "{name}: cluster series: {text}");
        assert_eq!(text.contains("account=\"lab/x\""), per_account, "{name}: {text}");
        assert_eq!(text.contains("account="), per_account, "{name}: {text}");
        let Some(token) = t else { continue };
        let open = reqwest::Client::new()
            .get(format!("{}/metrics", s.url))
            .bearer_auth(token)
            .header("accept", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
            .send()
            .await
            .expect("scrape");
        let kind = open.headers()["content-type"].to_str().unwrap_or_default().to_string();
        let text = open.text().await.expect("body");
        assert!(kind.starts_with("application/openmetrics-text"), "{name}: {kind}");
        assert!(text.contains("allot_gpus ") && text.trim_end().ends_with("# EOF"), "{name}: OpenMetrics: {text}");
        assert_eq!(text.contains("account=\"lab/x\""), per_account, "{name}: {text}");
    }
}
