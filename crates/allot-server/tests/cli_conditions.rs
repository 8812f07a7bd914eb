//! Slurm's everyday habits through the live CLI and API, on both stores:
//! arrays with a concurrency limit (ARR-1), dependency chains with a failed
//! parent (DEP-1, DEP-2), hold and release (HOLD-1, kept across a restart),
//! cancelling several by id and by filter, `queue --watch` and `history`.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Backend, Fixture, Server, script, submit};

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Polls `GET /v1/workloads/{id}` until its state is one of `states`.
async fn until(s: &Server, token: &str, id: &str, states: &[&str]) -> Value {
    s.wait_for(token, id, 60, |v| states.contains(&v["workload"]["state"].as_str().unwrap_or(""))).await
}

async fn conditions(backend: Backend) {
    let f = Fixture::new(backend, &format!("conditions-{backend:?}")).await;
    let mut s = Server::start(&f.dir, &f.db.url);
    let t = f.admin.as_str();

    // An array of 6 one-GPU elements, at most 2 at once, on 4 free GPUs.
    let out = f.dir.join("array.out");
    let body = format!("echo \"$ALLOT_ARRAY_ID $ALLOT_ARRAY_INDEX $ALLOT_ARRAY_COUNT\" >> {}; sleep 1", out.display());
    let id = submit(&s, t, &["--account", "org/a", "--gpus", "1", "--array", "0-5%2", "--", "sh", "-c", &body]);
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut most = 0;
    loop {
        let ws = s.cli_json(t, &["queue", "--all", "--array", &id]);
        let ws = ws.as_array().expect("elements");
        assert_eq!(ws.len(), 6, "{ws:?}");
        let running = ws.iter().filter(|w| w["state"] == "running" || w["state"] == "stopping").count();
        assert!(running <= 2, "ARR-1: {running} elements running at once");
        most = most.max(running);
        if ws.iter().all(|w| w["state"] == "finished") {
            break;
        }
        assert!(Instant::now() < deadline, "the array did not finish: {ws:?}\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert_eq!(most, 2, "the limit is used");
    let mut lines: Vec<String> = std::fs::read_to_string(&out).unwrap().lines().map(String::from).collect();
    lines.sort();
    let want: Vec<String> = (0..6).map(|i| format!("{id} {i} 6")).collect();
    assert_eq!(lines, want, "each element knows its place");
    let custom = s.cli_ok(t, &["queue", "--all", "--array", &id, "--format", "id,state,attempts"]);
    let rows: Vec<Vec<&str>> = custom.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["ID", "STATE", "ATT"], "{custom}");
    assert_eq!(rows[4], [format!("{id}_3").as_str(), "finished", "1"], "{custom}");
    let third = s.cli_json(t, &["show", &format!("{id}_3")]);
    assert_eq!(third["workload"]["array"]["element"], format!("{id}_3"));
    assert_eq!(third["workload"]["array"]["limit"], 2);
    // The dashboard shows the element's place and lists the array.
    let browser = support::Browser::sign_in(&s, t).await;
    let page = browser.get(&format!("/workloads/{id}_3")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("element 3 of 6, at most 2 at once"), "{}", page.body);

    // A chain whose head fails: its afterok dependents are cancelled in
    // turn (DEP-2), its afternotok one runs.
    let head =
        submit(&s, t, &["--account", "org/a", "--gpus", "1", "--name", "head", "--", "sh", "-c", "sleep 1; exit 3"]);
    let dep = |kind: &str, on: &str| format!("{kind}:{on}");
    let b = submit(&s, t, &["--account", "org/a", "--gpus", "1", "-d", &dep("afterok", &head), "--", "true"]);
    let c = submit(&s, t, &["--account", "org/a", "--gpus", "1", "-d", &dep("afterok", &b), "--", "true"]);
    let d = submit(&s, t, &["--account", "org/a", "--gpus", "1", "-d", &dep("afternotok", &head), "--", "true"]);
    let why = s.cli_json(t, &["show", &b]);
    // A plain sentence first (issue 30, point 8), then the rule and its numbers.
    let text = why["why"].as_str().unwrap();
    assert!(
        text.starts_with("It waits for the work it depends on. ")
            && text.contains(&format!(" DEP-1: waits for afterok:{head}")),
        "{why}"
    );
    until(&s, t, &head, &["failed"]).await;
    let v = until(&s, t, &c, &["cancelled"]).await;
    let reason = v["workload"]["reason"].as_str().unwrap();
    assert_eq!(reason, format!("DEP-2: dependency afterok:{b} can never be satisfied: {b} ended cancelled; cancelled"));
    assert!(v["attempts"].as_array().unwrap().is_empty(), "never started");
    until(&s, t, &b, &["cancelled"]).await;
    until(&s, t, &d, &["finished"]).await;
    // A dependency that can no longer hold is refused at submission.
    let o = s.cli(t, &["submit", "--account", "org/a", "--gpus", "1", "-d", &dep("afterok", &head), "--", "true"]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("afterok:{head} can never be satisfied: workload {head} ended failed (DEP-2)")),
        "{}",
        stderr(&o)
    );
    let o = s.cli(t, &["submit", "--account", "org/a", "--gpus", "1", "-d", "after:1", "--", "true"]);
    assert!(
        stderr(&o).contains("unknown dependency type \"after\" in \"after:1\" (use afterok, afterany or afternotok)"),
        "{}",
        stderr(&o)
    );

    // Held: it waits with free GPUs, across a restart, until released.
    let held = submit(&s, t, &["--account", "org/b", "--gpus", "1", "--hold", "--", "true"]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let v = s.cli_json(t, &["show", &held]);
    assert_eq!(
        (v["workload"]["state"].as_str(), v["workload"]["held"].as_bool()),
        (Some("pending"), Some(true)),
        "{v}"
    );
    assert!(v["why"].as_str().unwrap().starts_with("It is on hold until someone releases it. HOLD-1: held"), "{v}");
    let q = s.cli_ok(t, &["queue"]);
    assert!(q.lines().any(|l| l.split_whitespace().next() == Some(held.as_str()) && l.contains(" held ")), "{q}");
    s.restart();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(s.cli_json(t, &["show", &held])["workload"]["held"], true, "still held after a restart");
    assert_eq!(s.cli_ok(t, &["release", &held]).trim(), format!("{held} pending"));
    until(&s, t, &held, &["finished"]).await;
    let o = s.cli(t, &["release", &held]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("has already ended"), "{}", stderr(&o));

    // Several at once: by ids, then by filter.
    let sleepy = script(&f.dir, "sleepy.sh", "#!/bin/sh\nsleep 300\n");
    let ids: Vec<String> = (0..4)
        .map(|_| submit(&s, t, &["--account", "lab/x", "--gpus", "1", "--name", "sweep", "--", &sleepy]))
        .collect();
    until(&s, t, &ids[0], &["running"]).await;
    let o = s.cli_ok(t, &["cancel", &ids[0], &ids[1]]);
    let states: Vec<&str> = o.lines().map(|l| l.split_whitespace().nth(1).unwrap()).collect();
    assert!(states.iter().all(|st| *st == "stopping" || *st == "cancelled"), "{o}");
    let o = s.cli_ok(t, &["cancel", "--name", "sweep", "--state", "pending,running"]);
    assert!(o.contains(&ids[2]) && o.contains(&ids[3]), "{o}");
    for id in &ids {
        until(&s, t, id, &["cancelled"]).await;
    }
    let o = s.cli(t, &["cancel", "--name", "nothing-has-this-name"]);
    assert!(o.status.success() && stderr(&o).contains("nothing to cancel"), "{}", stderr(&o));

    // Watch, not on a terminal: one table after another.
    let o = s.cli_ok(t, &["queue", "--all", "--watch", "0.2", "--count", "2"]);
    assert_eq!(o.lines().filter(|l| l.starts_with("--- ")).count(), 2, "{o}");
    assert_eq!(o.lines().filter(|l| l.trim_start().starts_with("ID ")).count(), 2, "{o}");
    assert!(o.contains("ELAPSED") && o.contains("TIME LEFT") && o.contains("NODES"), "{o}");

    // History: ended work with attempts, GPU-hours and why.
    let h = s.cli_json(t, &["history", "--limit", "100"]);
    let h = h.as_array().unwrap();
    let finished = h.iter().find(|w| w["array"]["element"] == format!("{id}_0")).expect("an element in history");
    assert_eq!(finished["attempts"], 1);
    assert!(finished["gpu_hours"].as_f64().unwrap() > 0.0, "{finished}");
    assert!(h.iter().all(|w| !["pending", "running", "stopping"].contains(&w["state"].as_str().unwrap())));
    let text = s.cli_ok(t, &["history", "--name", "head"]);
    assert!(text.contains("WAITED") && text.lines().nth(1).unwrap().contains("failed"), "{text}");

    // The dashboard lists an array's elements alone.
    let list = browser.get(&format!("/?who=all&state=finished&array={id}")).await;
    let first: i64 = id.parse().unwrap();
    for seq in first..first + 6 {
        assert!(list.body.contains(&format!("/workloads/{seq}\"")), "element {seq} listed: {}", list.body);
    }
    assert!(!list.body.contains(&format!("/workloads/{d}\"")), "only the array's elements: {}", list.body);

    // The recorded history replays with its arrays and dependencies.
    let trace = f.dir.join("export.csv");
    let o = s.cli(t, &["trace", "export", "--db", &f.db.url, "--out", trace.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = std::fs::read_to_string(&trace).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    assert!(["after", "array", "array_index", "array_limit"].iter().all(|c| header.contains(c)), "{header:?}");
    let o = s.cli(
        t,
        &["sim", "--config", s.config.to_str().unwrap(), "--trace", trace.to_str().unwrap(), "--policy", "allot"],
    );
    assert!(o.status.success(), "the export replays: {}", stderr(&o));

    drop(s);
    f.finish().await;
}

both_stores!(conditions_sqlite, conditions_postgres, conditions);
