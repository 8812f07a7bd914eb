//! CFG-1: the config reloaded while the server runs, on the real server
//! and CLI, on SQLite and PostgreSQL: `allot admin reload` and SIGHUP apply
//! the file's changes to accounts, the contract and `[api]` with work
//! running, audit them and journal the contract (the store's journal
//! replays to what the store holds, and a restart carries on from it, a
//! contract edited while it was down applied at the start); a
//! change that needs a restart, a file that does not read and a caller who
//! is not an admin change nothing; the server survives SIGHUP.

mod support;

use serde_json::Value;
use support::{Backend, CONFIG, Fixture, Server, metric, state, submit, token};

both_stores!(reload_sqlite, reload_postgres, reload);

fn account<'a>(list: &'a Value, path: &str) -> Option<&'a Value> {
    list.as_array().unwrap().iter().find(|a| a["path"] == path)
}

async fn reload(backend: Backend) {
    let f = Fixture::new(backend, "reload").await;
    let researcher = token(&f.db.url, "researcher", "res", &["--project", "org/a"]);
    let mut s = Server::start_with(&f.dir, &f.db.url, &["--log-format", "json"], &[]);
    let admin = f.admin.as_str();
    let config = f.dir.join("cluster.toml");
    let w = submit(&s, admin, &["--account", "org/a", "--gpus", "1", "--", "sleep", "60"]);
    s.wait_for(admin, &w, 30, |v| state(v) == "running").await;

    // Unchanged: nothing to apply.
    let v = s.cli_json(admin, &["admin", "reload"]);
    assert_eq!(v["changes"], serde_json::json!([]), "{v}");

    // Accounts, the contract and [api] change with work running.
    let edited = CONFIG.replace("grace = \"1s\"", "grace = \"7s\"").replace(
        "[[accounts]]\npath = \"org/b\"\nshare = 1",
        "[[accounts]]\npath = \"org/b\"\nshare = 3\n[[accounts]]\npath = \"org/c\"\nshare = 2",
    ) + "\n[api]\nrequests_per_second = 7\n";
    std::fs::write(&config, &edited).unwrap();
    let v = s.cli_json(admin, &["admin", "reload"]);
    let changes: Vec<String> =
        v["changes"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_string()).collect();
    for want in ["contract.grace: 1 -> 7", "accounts: create org/c", "api.requests_per_second: 20 -> 7"] {
        assert!(changes.iter().any(|c| c == want), "{want:?} not in {changes:?}");
    }
    assert!(changes.iter().any(|c| c.starts_with("accounts:") && c.contains("org/b")), "{changes:?}");
    let accounts = s.cli_json(admin, &["accounts"]);
    assert_eq!(account(&accounts, "org/c").map(|a| a["share"].clone()), Some(2.0.into()), "{accounts}");
    assert_eq!(account(&accounts, "org/b").map(|a| a["share"].clone()), Some(3.0.into()), "{accounts}");
    let audit = s.cli_json(admin, &["audit"]);
    let reloads: Vec<&Value> = audit.as_array().unwrap().iter().filter(|e| e["action"] == "reload").collect();
    assert!(
        reloads.iter().any(|e| e["target"] == "contract" && e["principal"] == "root"),
        "the contract's change is audited: {audit}"
    );
    assert!(reloads.iter().any(|e| e["target"] == "api"), "{audit}");
    assert_eq!(state(&s.cli_json(admin, &["show", &w])), "running", "running work runs on");

    // A researcher may not reload.
    let out = s.cli(&researcher, &["admin", "reload"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("admin"), "{out:?}");

    // A change that needs a restart changes nothing, and says which key and why.
    std::fs::write(&config, edited.replace("nodes = 2", "nodes = 3").replace("share = 2", "share = 9")).unwrap();
    let out = s.cli(admin, &["admin", "reload"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("nothing was reloaded") && err.contains("cluster changed") && err.contains("at start"),
        "{err}"
    );
    let accounts = s.cli_json(admin, &["accounts"]);
    assert_eq!(account(&accounts, "org/c").map(|a| a["share"].clone()), Some(2.0.into()), "nothing applied");

    // The refusal shows in the metrics (the AllotConfigReloadFailed alert).
    let metrics = async |s: &Server| {
        let r = reqwest::Client::new().get(format!("{}/metrics", s.url)).bearer_auth(admin).send().await.unwrap();
        r.text().await.unwrap()
    };
    let text = metrics(&s).await;
    assert_eq!(metric(&text, "allot_config_last_reload_successful"), Some(0.0), "{text}");
    assert_eq!(metric(&text, "allot_config_reloads_total{outcome=\"refused\"}"), Some(1.0), "{text}");
    assert_eq!(metric(&text, "allot_config_reloads_total{outcome=\"applied\"}"), Some(1.0), "{text}");

    // A file that does not read: the loader's error, file and line.
    std::fs::write(&config, edited.replace("share = 3", "share = \"three\"")).unwrap();
    let out = s.cli(admin, &["admin", "reload"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("cluster.toml:") && err.contains("share"), "{err}");

    // SIGHUP reloads (it used to end the server).
    std::fs::write(&config, edited.replace("share = 2", "share = 5")).unwrap();
    let hup = std::process::Command::new("kill").args(["-HUP", &s.pid().to_string()]).status().unwrap();
    assert!(hup.success());
    let mut share = Value::Null;
    for _ in 0..100 {
        share = account(&s.cli_json(admin, &["accounts"]), "org/c").map(|a| a["share"].clone()).unwrap_or_default();
        if share == 5.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(share, Value::from(5.0), "SIGHUP applied the file: {}", s.log());
    assert!(s.log().contains("SIGHUP: the config was reloaded"), "{}", s.log());
    assert_eq!(metric(&metrics(&s).await, "allot_config_last_reload_successful"), Some(1.0));
    assert_eq!(state(&s.cli_json(admin, &["show", &w])), "running", "the server survived SIGHUP");

    // A restart carries on from the journal, which holds the contract's
    // change; a contract edited while the server was down applies at the
    // start as a reload would (Fixture::finish replays the journal).
    std::fs::write(&config, edited.replace("share = 2", "share = 5").replace("grace = \"7s\"", "grace = \"9s\""))
        .unwrap();
    s.restart();
    let log = s.log();
    assert!(log.contains("the config's contract differs from the run's: it applies from this start"), "{log}");
    assert!(log.contains("L-5: the live run carried on from its journal's replay"), "{log}");
    let accounts = s.cli_json(admin, &["accounts"]);
    assert_eq!(account(&accounts, "org/c").map(|a| a["share"].clone()), Some(5.0.into()), "{accounts}");
    s.cli_ok(admin, &["cancel", &w]);
    s.wait_for(admin, &w, 30, |v| state(v) == "cancelled").await;
    s.stop();
    // The JSON log: every line an object; every decision line names its
    // workload, attempt, change and rule as fields of their own.
    let mut decisions = 0;
    for line in s.log().lines().filter(|l| l.starts_with('{')) {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if v.get("change").is_some() {
            decisions += 1;
            for k in ["workload", "attempt", "rule", "reason"] {
                assert!(v.get(k).is_some(), "a decision line without {k}: {line}");
            }
            let rule = v["rule"].as_str().unwrap();
            assert!(v["reason"].as_str().unwrap().contains(rule), "{line}");
        }
    }
    assert!(decisions >= 3, "start, stop at the restart, cancel: {decisions} decision lines\n{}", s.log());
    f.finish().await;
}
