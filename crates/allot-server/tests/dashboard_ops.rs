//! The dashboard's operator pages against a real `allot serve` (SQLite):
//! the Fleet grid (who holds which GPU, what another project sees, drains
//! from the grid with and without CSRF), History (charts, numbers by the
//! definitions of docs/measures.md, the trace download) and Admin (tokens
//! created, used and revoked from the page; the audit log; 403 for others).
//! Plus the History page's store reads over a few thousand rows.

mod support;

use std::time::{Duration, Instant};

use allot_core::Phase;
use allot_server::store::{AttemptRow, NewWorkload, Op, Store};
use serde_json::Value;
use support::{Backend, Fixture, Server, TestDb, submit, token};

/// A signed-in browser: the session cookie kept by hand, redirects not
/// followed (each answer is checked as it is).
struct Browser {
    url: String,
    client: reqwest::Client,
    cookie: String,
}

/// An answer: status, headers, body.
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }
}

impl Browser {
    async fn sign_in(s: &Server, token: &str) -> Browser {
        let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        let r = client.post(format!("{}/login", s.url)).form(&[("token", token), ("next", "/")]).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 303, "sign-in: {:?}", r.text().await);
        let set = r.headers().get_all("set-cookie").iter().filter_map(|v| v.to_str().ok());
        let cookie = set
            .filter(|c| c.starts_with("allot_session="))
            .map(|c| c.split(';').next().unwrap().to_string())
            .next()
            .expect("a session cookie");
        Browser { url: s.url.clone(), client, cookie }
    }

    async fn answer(r: reqwest::RequestBuilder) -> Answer {
        let r = r.send().await.expect("http");
        let (status, headers) = (r.status().as_u16(), r.headers().clone());
        Answer { status, headers, body: r.text().await.unwrap_or_default() }
    }

    async fn get(&self, path: &str) -> Answer {
        Browser::answer(self.client.get(format!("{}{path}", self.url)).header("cookie", &self.cookie)).await
    }

    async fn post(&self, path: &str, form: &[(&str, &str)]) -> Answer {
        Browser::answer(self.client.post(format!("{}{path}", self.url)).header("cookie", &self.cookie).form(form)).await
    }

    /// The session's CSRF token, from a page's forms.
    async fn csrf(&self) -> String {
        let page = self.get("/fleet").await;
        attr_after(&page.body, r#"name="csrf""#, "value").expect("a form with the CSRF field")
    }
}

/// The value of attribute `attr` in the first tag of `html` containing `marker`.
fn attr_after(html: &str, marker: &str, attr: &str) -> Option<String> {
    let at = html.find(marker)?;
    let start = html[..at].rfind('<')?;
    let end = at + html[at..].find('>')?;
    let tag = &html[start..end];
    let key = format!("{attr}=\"");
    let v = &tag[tag.find(&key)? + key.len()..];
    Some(v[..v.find('"')?].to_string())
}

/// The History summary's row of occupancy.
const OCCUPANCY: &str = "occupancy (GPUs allocated)";

/// What a measured figure reads when no telemetry was reported.
const NOT_MEASURED: &str = "not measured (no GPU telemetry reported)";

/// The "Window" (last) cell of the History summary's row `name`.
fn summary_cell(html: &str, name: &str) -> String {
    let row = &html[html.find(&format!(">{name}</a></th>")).unwrap_or_else(|| panic!("no row {name}: {html}"))..];
    let row = &row[..row.find("</tr>").unwrap()];
    let cells: Vec<&str> = row.split("<td class=\"num\">").skip(1).map(|c| &c[..c.find("</td>").unwrap()]).collect();
    cells[1].to_string()
}

fn count(html: &str, needle: &str) -> usize {
    html.matches(needle).count()
}

/// Polls `GET /v1/nodes` until `node` has `health` in `want`.
async fn wait_health(s: &Server, admin: &str, node: &str, want: &[&str]) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, nodes) = s.http("GET", "/v1/nodes", Some(admin), None).await;
        let n = nodes.as_array().unwrap().iter().find(|n| n["name"] == node).unwrap().clone();
        if want.contains(&n["health"].as_str().unwrap()) {
            return n;
        }
        assert!(Instant::now() < deadline, "{node} did not become {want:?}: {n}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn running(v: &Value) -> bool {
    v["workload"]["state"] == "running" && v["workload"]["on_nodes"].as_array().is_some_and(|n| !n.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_grid_names_holders_hides_others_and_drains_from_the_grid() {
    let f = Fixture::new(Backend::Sqlite, "dash-fleet").await;
    let ann = token(&f.db.url, "researcher", "ann", &["--project", "org/a"]);
    let lee = token(&f.db.url, "researcher", "lee", &["--project", "lab/x"]);
    let s = Server::start(&f.dir, &f.db.url);
    let id = submit(&s, &ann, &["--account", "org/a", "--gpus", "1", "--", "sleep", "300"]);
    let run = s.wait_for(&f.admin, &id, 20, running).await;
    let node = run["workload"]["on_nodes"][0].as_str().unwrap().to_string();
    let link = format!(r#"href="/workloads/{id}""#);

    // The admin and the owner see the account and the workload on its GPU.
    let (admin, owner, other) =
        (Browser::sign_in(&s, &f.admin).await, Browser::sign_in(&s, &ann).await, Browser::sign_in(&s, &lee).await);
    for b in [&admin, &owner] {
        let page = b.get("/fleet").await;
        assert_eq!(page.status, 200);
        assert_eq!(count(&page.body, r#"<li class="gpu held""#), 1, "{}", page.body);
        assert_eq!(count(&page.body, r#"<li class="gpu free""#), 3, "2 nodes of 2 GPUs: {}", page.body);
        assert!(page.body.contains(&link) && page.body.contains("org/a"), "{}", page.body);
        assert!(page.body.contains(&format!(r#"id="node-{node}""#)), "{}", page.body);
    }
    let mine = owner.get("/fleet").await.body;
    assert!(mine.contains(&link) && !mine.contains(r#"action="/fleet/node""#), "a researcher has no buttons: {mine}");
    // Another project's researcher: held by "another account", no id, no name.
    let theirs = other.get("/fleet").await.body;
    assert!(theirs.contains("another account"), "{theirs}");
    assert!(!theirs.contains(&link) && !theirs.contains("org/a"), "{theirs}");
    assert_eq!(count(&theirs, r#"<li class="gpu held other""#), 1, "the grid stays complete: {theirs}");
    let (_, nodes) = s.http("GET", "/v1/nodes", Some(&lee), None).await;
    let held: Vec<&Value> = nodes.as_array().unwrap().iter().flat_map(|n| n["held"].as_array().unwrap()).collect();
    assert_eq!(held.len(), 1, "{nodes}");
    assert_eq!((&held[0]["workload"], &held[0]["account"], &held[0]["gpus"]), (&Value::Null, &Value::Null, &1.into()));

    // A researcher's crafted drain is refused by the API; nothing changes.
    let r = other.post("/fleet/node", &[("csrf", &other.csrf().await), ("node", &node), ("action", "drain")]).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("only admins may"), "{}", r.body);
    // The admin's form without its CSRF token is refused before the API.
    let r = admin.post("/fleet/node", &[("csrf", "forged"), ("node", &node), ("action", "drain")]).await;
    assert_eq!(r.status, 403, "{}", r.body);
    wait_health(&s, &f.admin, &node, &["up"]).await;
    assert!(running(&s.wait_for(&f.admin, &id, 5, |_| true).await), "still running");

    // The admin drains the node from the grid: its workload is preempted
    // under MNT-1 and requeued; the node ends drained.
    let page = admin.get("/fleet").await.body;
    assert!(page.contains(r#"value="drain""#) && page.contains("data-confirm=\"Drain"), "{page}");
    let r = admin.post("/fleet/node", &[("csrf", &admin.csrf().await), ("node", &node), ("action", "drain")]).await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(r.header("location").starts_with("/fleet"), "{}", r.header("location"));
    let v = s.wait_for(&f.admin, &id, 20, |v| v["attempts"][0]["outcome"] == "preempted").await;
    assert!(v["attempts"][0]["signal_reason"].as_str().unwrap().starts_with("MNT-1"), "{v}");
    wait_health(&s, &f.admin, &node, &["drained"]).await;
    let page = admin.get("/fleet").await.body;
    assert_eq!(count(&page, r#"<li class="gpu drained""#), 2, "{page}");
    assert!(page.contains(r#"value="undrain""#), "{page}");
    let r = admin.post("/fleet/node", &[("csrf", &admin.csrf().await), ("node", &node), ("action", "undrain")]).await;
    assert_eq!(r.status, 303);
    wait_health(&s, &f.admin, &node, &["up"]).await;
    drop(s);
    f.finish().await;
}

/// A fleet of one node of two GPUs: one 1-GPU workload occupies half of it.
const HALF_CONFIG: &str = r#"
[cluster]
name = "half"
[[cluster.pools]]
name = "gpu"
gpu = "H100"
nodes = 1
gpus_per_node = 2

[[accounts]]
path = "org/a"
[[accounts]]
path = "lab/x"

[contract]
scheduling_interval = "1s"
grace = "1s"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_numbers_follow_the_definitions_and_admins_download_the_trace() {
    let f = Fixture::new(Backend::Sqlite, "dash-history").await;
    std::fs::write(f.dir.join("cluster.toml"), HALF_CONFIG).unwrap();
    let ann = token(&f.db.url, "researcher", "ann", &["--project", "org/a"]);
    let lee = token(&f.db.url, "researcher", "lee", &["--project", "lab/x"]);
    let s = Server::start(&f.dir, &f.db.url);
    let id = submit(&s, &ann, &["--account", "org/a", "--gpus", "1", "--", "sleep", "30"]);
    let v = s.wait_for(&f.admin, &id, 20, running).await;
    let start = v["attempts"][0]["start_t"].as_i64().unwrap();
    let submitted = v["workload"]["submit_t"].as_i64().unwrap();
    while (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64) < start + 5 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (admin, owner, other) =
        (Browser::sign_in(&s, &f.admin).await, Browser::sign_in(&s, &ann).await, Browser::sign_in(&s, &lee).await);

    // The default page: four charts, their definitions, the export links.
    let page = admin.get("/history").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(count(&page.body, "<svg"), 4, "{}", page.body);
    for id in ["m-occupancy", "m-utilization", "m-availability", "m-queue-time", "m-preemptions", "m-queue-length"] {
        assert!(page.body.contains(&format!(r#"id="{id}""#)), "{id}");
    }
    assert!(page.body.contains(r#"href="/history/export""#), "{}", page.body);

    // A window in which the 1-GPU workload ran the whole time on the two
    // GPUs: occupancy 0.5, the fleet in service, utilization by its
    // declared util (1: nothing measured), nothing preempted.
    let inside = format!("/history?from={}&to={}", start + 1, start + 4);
    let page = admin.get(&inside).await.body;
    assert_eq!(summary_cell(&page, OCCUPANCY), "50.0 %", "{page}");
    assert_eq!(summary_cell(&page, "availability"), "100.0 %");
    assert_eq!(summary_cell(&page, "utilization, declared"), "50.0 %");
    assert_eq!(summary_cell(&page, "utilization, measured"), NOT_MEASURED, "no telemetry is not 0 %");
    assert_eq!(summary_cell(&page, "allocated GPU-time measured"), NOT_MEASURED);
    assert_eq!(summary_cell(&page, "utilization (measured where reported, else declared)"), "50.0 %");
    assert_eq!(summary_cell(&page, "preemptions"), "0");
    assert_eq!(summary_cell(&page, "queue length (mean)"), "0");
    // Its owner sees the same (its work over the fleet); another project nothing.
    assert_eq!(summary_cell(&owner.get(&inside).await.body, OCCUPANCY), "50.0 %");
    let theirs = other.get(&inside).await.body;
    assert_eq!(summary_cell(&theirs, OCCUPANCY), "0.0 %");
    assert_eq!(summary_cell(&theirs, "availability"), "100.0 %", "the fleet's capacity");
    // Over a window from before its submission: one start, queue time = start − submit.
    let around = admin.get(&format!("/history?from={}&to={}", submitted - 2, start + 4)).await.body;
    assert_eq!(summary_cell(&around, "workloads started"), "1");
    let q = start - submitted;
    assert_eq!(summary_cell(&around, "queue time p50"), format!("{q}s"), "{around}");
    let bad = admin.get("/history?window=2h").await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("window: unknown window"), "{}", bad.body);

    // The trace export: admins only, as an attachment, what `allot trace export` writes.
    let trace = admin.get("/history/export").await;
    assert_eq!(trace.status, 200, "{}", trace.body);
    assert!(trace.header("content-disposition").starts_with("attachment;"), "{:?}", trace.headers);
    assert!(trace.body.starts_with("id,submit_s,account,user,"), "{}", trace.body);
    assert!(trace.body.contains("org/a"), "{}", trace.body);
    let attempts = admin.get("/history/export?part=attempts").await;
    assert!(attempts.status == 200 && attempts.body.starts_with("workload,attempt,"), "{}", attempts.body);
    assert_eq!(admin.get("/history/export?part=events").await.status, 404, "no node event recorded");
    assert_eq!(owner.get("/history/export").await.status, 403);
    assert!(!owner.get("/history").await.body.contains(r#"href="/history/export""#));
    drop(s);
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_creates_a_token_that_works_until_revoked_and_others_are_refused() {
    let f = Fixture::new(Backend::Sqlite, "dash-admin").await;
    let ann = token(&f.db.url, "researcher", "ann", &["--project", "org/a"]);
    let s = Server::start(&f.dir, &f.db.url);
    let admin = Browser::sign_in(&s, &f.admin).await;
    let page = admin.get("/admin").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains(">root") && page.body.contains(">ann"), "{}", page.body);
    let csrf = attr_after(&page.body, r#"name="csrf""#, "value").unwrap();

    // Without the session's CSRF token: refused, nothing created.
    let r = admin.post("/admin/tokens", &[("csrf", "x"), ("name", "bob"), ("role", "researcher")]).await;
    assert_eq!(r.status, 403);
    // Created from the form: shown once, not cached.
    let form = [("csrf", csrf.as_str()), ("name", "bob"), ("role", "researcher"), ("scope", ""), ("projects", "org/a")];
    let r = admin.post("/admin/tokens", &form).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.header("cache-control"), "no-store");
    assert!(r.body.contains("will not be shown again"), "{}", r.body);
    let bob = attr_after(&r.body, r#"id="new-token""#, "value").expect("the token on the page");
    let (status, who) = s.http("GET", "/v1/whoami", Some(&bob), None).await;
    assert_eq!((status, who["name"].as_str(), who["role"].as_str()), (200, Some("bob"), Some("researcher")));
    let page = admin.get("/admin").await.body;
    assert!(page.contains(">bob") && !page.contains(&bob), "listed, its secret never again: {page}");
    assert!(page.contains("token.create"), "audited: {page}");
    // A bad request names the field; nothing is created.
    let r = admin.post("/admin/tokens", &[("csrf", &csrf), ("name", "a b"), ("role", "researcher")]).await;
    assert_eq!(r.status, 303);

    // Revoked from the page: it stops working at once.
    let r = admin.post("/admin/tokens/revoke", &[("csrf", &csrf), ("name", "bob")]).await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(s.http("GET", "/v1/whoami", Some(&bob), None).await.0, 401);
    let page = admin.get("/admin").await.body;
    assert!(page.contains("token.revoke") && !page.contains(r#"value="bob""#), "{page}");
    // The audit log is limited, with a link to more.
    let one = admin.get("/admin?audit=1").await.body;
    assert!(one.contains("/admin?audit=51"), "{one}");

    // Anyone else: the API's 403, by page and by a crafted form.
    let res = Browser::sign_in(&s, &ann).await;
    let r = res.get("/admin").await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("only admins may"), "{}", r.body);
    let r = res.post("/admin/tokens", &[("csrf", &res.csrf().await), ("name", "eve"), ("role", "admin")]).await;
    assert_eq!(r.status, 403);
    assert!(!admin.get("/admin").await.body.contains(">eve"));
    drop(s);
    f.finish().await;
}

fn new_workload(account: &str, submit_t: i64) -> NewWorkload {
    NewWorkload {
        run_as: None,
        owner: None,
        submit_t,
        account: account.into(),
        submitter: "ann".into(),
        class: "batch".into(),
        gpus: 1,
        nodes: 0,
        gpu_type: None,
        clusters: None,
        work_s: 1800,
        checkpoint_s: 0,
        util: 0.5,
        priority: "normal".into(),
        preemptible: true,
        name: None,
        command: r#"["sleep","1"]"#.into(),
        env: "{}".into(),
        retries: 0,
        time_limit_s: None,
        workdir: None,
        checkpoint_on_signal: false,
        conditions: Default::default(),
    }
}

both_stores!(history_store_reads_are_bounded_sqlite, history_store_reads_are_bounded_postgres, bounded_reads);

/// Over 3,000 workloads of 30 days, a day's window reads only what
/// overlaps it, of the accounts asked; prints how long the reads take.
async fn bounded_reads(backend: Backend) {
    let dir = support::temp_dir("dash-history-store");
    let db = TestDb::new(backend, &dir).await;
    let store = Store::open(&db.url).await.unwrap();
    let (base, n, step) = (1_700_000_000i64, 3000i64, 864i64);
    let accounts = ["org/a", "org/b", "lab/x_y"];
    let t = Instant::now();
    for i in 0..n {
        let submit_t = base + i * step;
        let seq = store.insert_workload(&new_workload(accounts[i as usize % 3], submit_t)).await.unwrap();
        let row = AttemptRow {
            workload: seq,
            attempt: 1,
            alloc: format!(r#"[{{"node":"gpu-{}","gpus":[0]}}]"#, i % 4),
            gpus: 1,
            weight: 1.0,
            state: "starting".into(),
            start_t: submit_t + 60,
            start_reason: "FS-1: test".into(),
            log_path: "/tmp/x.log".into(),
            ..AttemptRow::default()
        };
        let mut ops = vec![Op::AttemptStart { row: Box::new(row) }];
        if i < n - 5 {
            let outcome = if i % 10 == 0 { "preempted" } else { "finished" };
            let (seq, end_t) = (seq, submit_t + 60 + 1800);
            ops.push(Op::AttemptEnd { seq, attempt: 1, end_t, outcome: outcome.into(), exit_code: None, kept_s: 0 });
            if outcome == "finished" {
                let reason = "finished".to_string();
                ops.push(Op::WorkloadState { seq, state: Phase::Finished, reason, end_t: Some(end_t) });
            }
        }
        store.apply(&ops).await.unwrap();
    }
    let events = [(base - 10, "gpu-0", "fail"), (base + 10, "gpu-0", "drain"), (base + 20, "gpu-1", "drain")];
    let mut ops: Vec<Op> = events
        .iter()
        .map(|(t, node, kind)| Op::NodeEvent {
            t: *t,
            node: (*node).into(),
            kind: (*kind).into(),
            principal: "root".into(),
            reason: None,
        })
        .collect();
    let (from, to) = (base + 20 * 86_400, base + 21 * 86_400);
    ops.push(Op::NodeEvent {
        t: from + 100,
        node: "gpu-1".into(),
        kind: "undrain".into(),
        principal: "root".into(),
        reason: None,
    });
    store.apply(&ops).await.unwrap();
    println!("{backend:?}: inserted {n} workloads and attempts in {:?}", t.elapsed());

    let t = Instant::now();
    let rows = store.history(from, to, None).await.unwrap();
    println!(
        "{backend:?}: a day of 30: {} attempts, {} workloads in {:?}",
        rows.attempts.len(),
        rows.workloads.len(),
        t.elapsed()
    );
    let all = store.all_attempts().await.unwrap();
    let overlaps = |a: &AttemptRow| a.start_t < to && a.end_t.is_none_or(|e| e > from);
    let want: Vec<(i64, i64)> = all.iter().filter(|a| overlaps(a)).map(|a| (a.workload, a.attempt)).collect();
    let got: Vec<(i64, i64)> = rows.attempts.iter().map(|a| (a.workload, a.attempt)).collect();
    assert_eq!(got, want, "exactly the attempts overlapping the window");
    assert!(got.len() < 200 && got.len() > 90, "a day's worth, not the table: {}", got.len());
    assert!(rows.attempts.iter().all(|a| a.first && a.declared_util == 0.5 && a.measured_util.is_none()));
    let alive = |w: &allot_server::store::WorkloadRow| w.submit_t < to && w.end_t.is_none_or(|e| e > from);
    let want = store.all_workloads().await.unwrap().iter().filter(|w| alive(w)).count();
    assert_eq!(rows.workloads.len(), want);
    // Before the window each node's last event and last failure or repair;
    // then the window's.
    let ev: Vec<(&str, &str)> = rows.events.iter().map(|e| (e.node.as_str(), e.kind.as_str())).collect();
    assert_eq!(ev, [("gpu-0", "fail"), ("gpu-0", "drain"), ("gpu-1", "drain"), ("gpu-1", "undrain")]);

    let roots = vec!["lab/x_y".to_string()];
    let t = Instant::now();
    let mine = store.history(from, to, Some(&roots)).await.unwrap();
    println!("{backend:?}: one account's day: {} workloads in {:?}", mine.workloads.len(), t.elapsed());
    assert!(!mine.workloads.is_empty() && mine.workloads.iter().all(|w| w.account == "lab/x_y"));
    assert_eq!(mine.attempts.len(), rows.attempts.len(), "attempts of every account (capacity needs them)");
    let none = store.history(from, to, Some(&[])).await.unwrap();
    assert!(none.workloads.is_empty());
    let t = Instant::now();
    let month = store.history(base, base + 31 * 86_400, None).await.unwrap();
    println!("{backend:?}: the whole 30 days: {} attempts in {:?}", month.attempts.len(), t.elapsed());
    assert_eq!(month.attempts.len(), n as usize);
    store.close().await;
    db.drop_db().await;
    let _ = std::fs::remove_dir_all(&dir);
}
