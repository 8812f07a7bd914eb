//! The live account tree (ACC-1..ACC-3, docs/accounts.md) on the real
//! server and CLI, on SQLite and PostgreSQL: accounts created, renamed,
//! closed (with and without stop) and users' shares set while work runs;
//! bad input refused with the field named and nothing stored; the tree kept
//! across a restart (the store is the truth); export, import and the trace
//! export's account changes replayed by the simulator's reader.

mod support;

use serde_json::Value;
use support::{Backend, Fixture, Server, state, submit, token};

both_stores!(live_tree_sqlite, live_tree_postgres, live_tree);

fn sleep_in(s: &Server, t: &str, account: &str, secs: &str) -> String {
    submit(s, t, &["--account", account, "--gpus", "1", "--", "sleep", secs])
}

fn account<'a>(list: &'a Value, path: &str) -> Option<&'a Value> {
    list.as_array().unwrap().iter().find(|a| a["path"] == path)
}

async fn live_tree(backend: Backend) {
    let f = Fixture::new(backend, "live-tree").await;
    let mgr = token(&f.db.url, "manager", "mgr", &["--scope", "org"]);
    let mut s = Server::start(&f.dir, &f.db.url);
    let admin = f.admin.as_str();

    // Work runs in org/a and org/b while the tree changes.
    let a1 = sleep_in(&s, admin, "org/a", "60");
    let b1 = sleep_in(&s, admin, "org/b", "60");
    for w in [&a1, &b1] {
        s.wait_for(admin, w, 30, |v| state(v) == "running").await;
    }

    // Create (a manager, inside the scope), with a budget and a user's share.
    // Issue 30, point 11: a user the server does not know is refused, with
    // the fix named, and nothing is created; said to be new, it is set.
    let out = s.cli(&mgr, &["accounts", "create", "org/new", "--budget", "5", "--user", "alice=2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no user alice is known here") && err.contains("--new-user"),
        "{err}"
    );
    assert!(!String::from_utf8_lossy(&s.cli(admin, &["accounts"]).stdout).contains("org/new"), "nothing created");
    let v = s.cli_json(&mgr, &["accounts", "create", "org/new", "--budget", "5", "--user", "alice=2", "--new-users"]);
    assert_eq!(
        (v["path"].clone(), v["budget_gpu_hours"].clone(), v["users"]["alice"].clone()),
        ("org/new".into(), 5.0.into(), 2.0.into())
    );
    let n1 = sleep_in(&s, admin, "org/new", "1");
    s.wait_for(admin, &n1, 30, |v| state(v) == "finished").await;
    let out = s.cli(&mgr, &["accounts", "create", "lab/y"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("may change only accounts below"));

    // A researcher's share (FS-2), then back to the config's (none: 1).
    let v = s.cli_json(&mgr, &["share", "set", "org/new", "--user", "bob", "3", "--new-user"]);
    assert_eq!(v["users"], serde_json::json!({"alice": 2.0, "bob": 3.0}));
    let v = s.cli_json(&mgr, &["share", "set", "org/new", "--user", "bob", "default"]);
    assert_eq!(v["users"], serde_json::json!({"alice": 2.0}));
    // Issue 30, point 11: the change is printed, from what it was.
    let out = s.cli(&mgr, &["share", "set", "org/new", "--user", "carol", "2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("no user carol is known here"), "a misspelt name is refused: {err}");
    // Known without --new-user: a Unix user of the host, a token's name.
    for known in ["nobody", "mgr"] {
        let v = s.cli_json(&mgr, &["share", "set", "org/new", "--user", known, "2"]);
        assert_eq!(v["users"][known], 2.0, "{v}");
        s.cli_ok(&mgr, &["share", "set", "org/new", "--user", known, "default"]);
    }
    let out = s.cli(&mgr, &["share", "set", "org/new", "--user", "carol", "2", "--new-user"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("share of carol in org/new: 1 (the default) → 2"), "{text}");
    let out = s.cli(&mgr, &["share", "set", "org/new", "--user", "carol", "default"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("share of carol in org/new: 2 → 1 (the default)"));
    s.cli_ok(admin, &["impact", "set", "org/new", "4"]);
    // A researcher's budget within the project (BUD-6).
    let v = s.cli_json(&mgr, &["budget", "set", "org/new", "--user", "alice", "3"]);
    assert_eq!(v["user_budgets"], serde_json::json!({"alice": 3.0}));

    // Bad input: the field is named, nothing is stored.
    let (_, audit_before) = s.http("GET", "/v1/audit", Some(admin), None).await;
    let bad: [(&str, &str, &str, u16, &str); 10] = [
        ("PATCH", "/v1/accounts/org/a", r#"{"users":{"zed":1}}"#, 400, "users.zed"),
        ("PATCH", "/v1/accounts/org/a?new_users=maybe", r#"{"users":{"zed":1}}"#, 400, "new_users"),
        ("PATCH", "/v1/accounts/org/a", r#"{"rename_to":"lab/a"}"#, 400, "to"),
        ("POST", "/v1/accounts", r#"{"path":"org/neg","budget_gpu_hours":-1}"#, 400, "budget_gpu_hours"),
        ("POST", "/v1/accounts", r#"{"path":"org/new"}"#, 400, "path"),
        ("POST", "/v1/accounts", r#"{"path":"org//x"}"#, 400, "path"),
        ("PATCH", "/v1/accounts/org/a", r#"{"users":{"no one":1}}"#, 400, "users"),
        ("PATCH", "/v1/accounts/org/a", r#"{"users":{"alice":0}}"#, 400, "users.alice"),
        ("PATCH", "/v1/accounts/org/a", r#"{"stop":true}"#, 400, "stop"),
        ("PATCH", "/v1/accounts/org/a", r#"{"user_budgets":{"bob":-3}}"#, 400, "user_budgets.bob"),
    ];
    for (method, path, body, want, field) in bad {
        let (status, v) = s.http(method, path, Some(admin), Some(body)).await;
        assert_eq!((status, v["field"].as_str()), (want, Some(field)), "{method} {path} {body}: {v}");
    }
    let (status, v) = s.http("PATCH", "/v1/accounts/org/a", Some(&mgr), Some(r#"{"rename_to":"lab/a"}"#)).await;
    assert_eq!(status, 403, "a manager cannot rename out of the scope: {v}");
    let (status, _) = s.http("PATCH", "/v1/accounts/org/zz", Some(admin), Some(r#"{"closed":true}"#)).await;
    assert_eq!(status, 404);
    let (_, audit_after) = s.http("GET", "/v1/audit", Some(admin), None).await;
    assert_eq!(audit_before, audit_after, "refused changes are not recorded");

    // Rename while org/a's work runs: the workload follows, the old path is gone.
    let v = s.cli_json(admin, &["accounts", "rename", "org/a", "org/alpha"]);
    assert_eq!((v["path"].as_str(), v["running"].as_u64()), (Some("org/alpha"), Some(1)), "{v}");
    let (_, w) = s.http("GET", &format!("/v1/workloads/{a1}"), Some(admin), None).await;
    assert_eq!((state(&w), w["workload"]["account"].as_str()), ("running", Some("org/alpha")), "{w}");
    assert_eq!(s.http("GET", "/v1/accounts/org/a", Some(admin), None).await.0, 404);
    let out = s.cli(admin, &["submit", "--account", "org/a", "--gpus", "1", "--", "true"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("unknown account"));

    // Close org/b without stop: no new work (ACC-2), its running work runs on.
    let v = s.cli_json(admin, &["accounts", "close", "org/b"]);
    assert_eq!(v["closed"], true);
    let (status, v) =
        s.http("POST", "/v1/workloads", Some(admin), Some(r#"{"account":"org/b","gpus":1,"command":["true"]}"#)).await;
    assert_eq!((status, v["field"].as_str()), (400, Some("account")), "{v}");
    assert!(v["error"].as_str().unwrap().contains("ACC-2"), "{v}");
    let (_, w) = s.http("GET", &format!("/v1/workloads/{b1}"), Some(admin), None).await;
    assert_eq!(state(&w), "running", "accepted work runs on: {w}");

    // Close org/alpha with stop (ACC-3): its running work is stopped, and
    // its held work (parked, in no queue) cancelled too.
    let held = submit(&s, admin, &["--account", "org/alpha", "--gpus", "1", "--hold", "--", "true"]);
    let (status, v) =
        s.http("PATCH", "/v1/accounts/org/alpha", Some(admin), Some(r#"{"closed":true,"stop":true}"#)).await;
    assert_eq!((status, v["closed"].clone()), (200, true.into()), "{v}");
    let w = s.wait_for(admin, &a1, 30, |v| state(v) == "cancelled").await;
    assert!(w.to_string().contains("ACC-3"), "the reason cites the rule: {w}");
    let w = s.wait_for(admin, &held, 30, |v| state(v) == "cancelled").await;
    assert!(w.to_string().contains("ACC-3"), "the held workload's reason cites the rule: {w}");

    // Export, restart (the store is the truth), import.
    let exported = s.cli_ok(admin, &["accounts", "export"]);
    assert!(exported.contains("path = \"org/new\"") && exported.contains("closed = true"), "{exported}");
    s.restart();
    let list = s.cli_json(admin, &["accounts"]);
    let new = account(&list, "org/new").expect("created accounts survive a restart");
    assert_eq!(
        (new["budget_gpu_hours"].clone(), new["impact"].clone(), new["users"]["alice"].clone()),
        (5.0.into(), 4.0.into(), 2.0.into())
    );
    assert!(account(&list, "org/a").is_none() && account(&list, "org/alpha").unwrap()["closed"] == true);
    assert!(s.log().contains("differ from the store's tree"), "the config's accounts no longer say what is in force");
    let file = f.dir.join("tree.toml");
    std::fs::write(
        &file,
        exported.replace("path = \"org/new\"", "path = \"org/new\"\nshare = 7") + "\n[[accounts]]\npath = \"lab/z\"\n",
    )
    .unwrap();
    let dry = s.cli_ok(admin, &["accounts", "import", file.to_str().unwrap(), "--dry-run"]);
    assert!(dry.contains("would be made") && dry.contains("create lab/z") && dry.contains("replace org/new"), "{dry}");
    assert!(account(&s.cli_json(admin, &["accounts"]), "lab/z").is_none(), "a dry run changes nothing");
    let done = s.cli_ok(admin, &["accounts", "import", file.to_str().unwrap()]);
    assert!(done.contains("2 changes made"), "{done}");
    let list = s.cli_json(admin, &["accounts"]);
    assert_eq!(account(&list, "org/new").unwrap()["share"], 7.0);
    assert!(account(&list, "lab/z").is_some());
    let out = s.cli(&mgr, &["accounts", "import", file.to_str().unwrap()]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("only admins"));

    // The trace export's account changes replay through the simulator's reader.
    let out = f.dir.join("trace.csv");
    let summary = allot_server::export_trace(&f.db.url, &out).await.expect("export");
    let cfg = allot_trace::config::load_config(&s.config).unwrap();
    let path = summary.account_changes_path.expect("an account changes file");
    let changes = allot_trace::changes::load_account_changes(&path, &cfg)
        .unwrap_or_else(|e| panic!("{e}\n{}", std::fs::read_to_string(&path).unwrap()));
    let trees = allot_trace::changes::trees_in_force(&cfg, &changes).unwrap();
    let last = allot_trace::changes::last_tree(&cfg, &trees);
    let list = s.cli_json(admin, &["accounts"]);
    for a in list.as_array().unwrap() {
        let p = a["path"].as_str().unwrap();
        let acc = last.account(last.get(p).unwrap_or_else(|| panic!("{p} in the replayed tree")));
        assert_eq!((acc.closed, acc.share), (a["closed"] == true, a["share"].as_f64().unwrap()), "{p}");
        let budgets: std::collections::BTreeMap<String, f64> =
            serde_json::from_value(a.get("user_budgets").cloned().unwrap_or_default()).unwrap_or_default();
        assert_eq!(acc.user_budgets, budgets, "{p}");
    }
    let rows = allot_trace::trace::load_trace(&out, &allot_trace::config::Config { accounts: last, ..cfg }).unwrap();
    assert!(rows.iter().any(|r| r.id == a1), "the renamed account's workload replays");
    drop(s);
    f.finish().await;
}
