//! The dashboard's Budgets and Queue pages against a real `allot serve`
//! (SQLite store): signed in with a token as a browser would be (a session
//! cookie, the CSRF field of the page's forms), reading the pages' HTML;
//! and the store reads behind them against SQLite and PostgreSQL.

mod support;

use std::collections::BTreeMap;
use std::time::Instant;

use allot_core::Phase;
use allot_server::store::usage::{PendingGroup, UsageSpan, burn_down};
use allot_server::store::{AttemptRow, ClusterFilter, NewWorkload, Op, Store, WorkloadFilter};
use serde_json::Value;
use support::{Backend, CONFIG, Fixture, Server, state, submit, token};

/// A browser without a script: one session's cookies, redirects not
/// followed (a change answers 303).
struct Browser {
    base: String,
    client: reqwest::Client,
    cookies: BTreeMap<String, String>,
}

/// An answer: status, `Location`, body.
struct Answer {
    status: u16,
    location: Option<String>,
    body: String,
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Browser {
    /// Signs in at `/login` with `token`.
    async fn sign_in(s: &Server, token: &str) -> Browser {
        let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
        let mut b = Browser { base: s.url.clone(), client, cookies: BTreeMap::new() };
        let a = b.post("/login", &[("token", token), ("next", "/budgets")]).await;
        assert_eq!((a.status, a.location.as_deref()), (303, Some("/budgets")), "signed in: {}", a.body);
        assert!(b.cookies.contains_key("allot_session"), "a session cookie: {:?}", b.cookies);
        b
    }

    fn cookie_header(&self) -> String {
        self.cookies.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ")
    }

    async fn answer(&mut self, r: reqwest::RequestBuilder) -> Answer {
        let r = if self.cookies.is_empty() { r } else { r.header("cookie", self.cookie_header()) };
        let resp = r.send().await.expect("request");
        for v in resp.headers().get_all("set-cookie") {
            let v = v.to_str().expect("ascii cookie");
            let (pair, attrs) = v.split_once(';').unwrap_or((v, ""));
            let (k, val) = pair.split_once('=').expect("name=value");
            if attrs.contains("Max-Age=0") {
                self.cookies.remove(k);
            } else {
                self.cookies.insert(k.to_string(), val.to_string());
            }
        }
        let status = resp.status().as_u16();
        let location = resp.headers().get("location").map(|l| l.to_str().expect("ascii").to_string());
        Answer { status, location, body: resp.text().await.expect("body") }
    }

    async fn get(&mut self, path: &str) -> Answer {
        let r = self.client.get(format!("{}{path}", self.base));
        self.answer(r).await
    }

    /// A page that must answer 200.
    async fn page(&mut self, path: &str) -> String {
        let a = self.get(path).await;
        assert_eq!(a.status, 200, "GET {path}: {}", a.body);
        a.body
    }

    async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Answer {
        let body: Vec<String> = form.iter().map(|(k, v)| format!("{}={}", urlencode(k), urlencode(v))).collect();
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.join("&"));
        self.answer(r).await
    }
}

/// The value of the first `attr="…"` after `after` in `html`.
fn attr_after<'a>(html: &'a str, after: &str, attr: &str) -> Option<&'a str> {
    let rest = &html[html.find(after)?..];
    let start = rest.find(&format!("{attr}=\""))? + attr.len() + 2;
    rest[start..].split('"').next()
}

/// The session's CSRF token, from any page's forms.
fn csrf(html: &str) -> String {
    attr_after(html, r#"name="csrf""#, "value").expect("a csrf field").to_string()
}

/// The `<tr>` of the budgets table of account `path`.
fn row<'a>(html: &'a str, path: &str) -> &'a str {
    let start = html.find(&format!(r#"<tr data-account="{path}""#)).unwrap_or_else(|| panic!("a row of {path}"));
    let len = html[start..].find("</tr>").expect("row end");
    &html[start..start + len]
}

/// The server's accounts as `token` sees them, by path.
async fn api_accounts(s: &Server, token: &str) -> BTreeMap<String, Value> {
    let (status, v) = s.http("GET", "/v1/accounts", Some(token), None).await;
    assert_eq!(status, 200, "{v}");
    v.as_array().expect("accounts").iter().map(|a| (a["path"].as_str().unwrap().to_string(), a.clone())).collect()
}

/// One account as `token` sees it.
async fn api_account(s: &Server, token: &str, path: &str) -> Value {
    let (status, v) = s.http("GET", &format!("/v1/accounts/{path}"), Some(token), None).await;
    assert_eq!(status, 200, "{v}");
    v
}

/// Runs 2 GPUs of `org/a` for 3 s and waits until it finished.
async fn run_in_org_a(s: &Server, admin: &str) {
    let id = submit(s, admin, &["--account", "org/a", "--gpus", "2", "--duration", "3s", "--", "sleep", "3"]);
    s.wait_for(admin, &id, 30, |v| state(v) == "finished").await;
}

/// The budgets page lists what the API lists for the manager, with its
/// numbers; an account's burn-down ends at the API's `used_gpu_hours`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_tree_matches_the_api_and_the_burn_down_ends_at_used() {
    let f = Fixture::new(Backend::Sqlite, "dash-budgets-tree").await;
    let s = Server::start(&f.dir, &f.db.url);
    let mgr = token(&f.db.url, "manager", "mgr", &["--scope", "org"]);
    let (status, v) = s.http("PATCH", "/v1/accounts/org/a", Some(&f.admin), Some(r#"{"budget_gpu_hours":10}"#)).await;
    assert_eq!(status, 200, "{v}");
    run_in_org_a(&s, &f.admin).await;

    let mut b = Browser::sign_in(&s, &mgr).await;
    let page = b.page("/budgets").await;
    let api = api_accounts(&s, &mgr).await;
    assert_eq!(api.keys().collect::<Vec<_>>(), ["org", "org/a", "org/b"], "the manager's scope");
    assert!(!page.contains("lab/x"), "nothing outside the scope is on the page");
    for (path, a) in &api {
        let r = row(&page, path);
        let used = a["used_gpu_hours"].as_f64().unwrap();
        assert!(r.contains(&format!(r#"data-used="{used}""#)), "{path}: {r}");
        assert!(r.contains(&allot_core::ledger::format_ngh(used)), "{path}: {r}");
        match a["budget_gpu_hours"].as_f64() {
            Some(budget) => assert!(r.contains(&format!(r#"data-budget="{budget}""#)), "{path}: {r}"),
            None => assert!(!r.contains("data-budget") && r.contains("none"), "{path}: {r}"),
        }
    }
    let a = &api["org/a"];
    let r = row(&page, "org/a");
    assert!(r.contains("% of 10 NGH"), "the bar's words: {r}");
    assert!(r.contains(r#"href="/budgets/org/a#change""#), "the manager may change org/a: {r}");
    assert!(!row(&page, "org").contains("#change"), "but not its own scope's root");

    // The burn-down, from the store, ends where the ledger is.
    for path in ["org/a", "org"] {
        let used = api_accounts(&s, &mgr).await[path]["used_gpu_hours"].as_f64().unwrap();
        assert!(used > 0.0, "the run was charged to {path}: {a}");
        let page = b.page(&format!("/budgets/{path}")).await;
        let end: f64 = attr_after(&page, "Used until now", "data-used-ngh").expect("the curve's end").parse().unwrap();
        assert!((end - used).abs() < 1e-6, "{path}: curve ends at {end}, the API says {used}");
        assert!(page.contains(r#"<svg"#) && page.contains("budget"), "a chart: {path}");
    }
    drop(s);
    f.finish().await;
}

/// A manager changes a budget inside its scope through the form: with the
/// session's CSRF token it is done (303, audited) and the page shows the
/// new budget, remaining and projection; without it, or with another, it
/// is refused and nothing changes; a bad value comes back naming the field;
/// its scope's root has no form and a crafted change of it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_a_manager_changes_a_budget_through_the_form() {
    let f = Fixture::new(Backend::Sqlite, "dash-budgets-change").await;
    let s = Server::start(&f.dir, &f.db.url);
    let mgr = token(&f.db.url, "manager", "mgr", &["--scope", "org"]);
    let (status, v) = s.http("PATCH", "/v1/accounts/org/a", Some(&f.admin), Some(r#"{"budget_gpu_hours":10}"#)).await;
    assert_eq!(status, 200, "{v}");
    run_in_org_a(&s, &f.admin).await;
    let mut b = Browser::sign_in(&s, &mgr).await;
    let before = b.page("/budgets/org/a").await;
    assert!(before.contains(r#"action="/budgets/org/a""#), "a form: {before}");
    let token = csrf(&before);
    let exhaustion_before: i64 = attr_after(&before, "<dt>Runs out</dt>", "data-exhaustion")
        .expect("a projection (the run burned budget)")
        .parse()
        .unwrap();

    for bad in [vec![("budget_gpu_hours", "20")], vec![("csrf", "not-the-token"), ("budget_gpu_hours", "20")]] {
        let a = b.post("/budgets/org/a", &bad).await;
        assert_eq!(a.status, 403, "{bad:?}: {}", a.body);
        assert!(a.body.contains("CSRF"), "{}", a.body);
    }
    assert_eq!(api_account(&s, &mgr, "org/a").await["budget_gpu_hours"], 10.0, "nothing changed");

    let a = b.post("/budgets/org/a", &[("csrf", &token), ("budget_gpu_hours", "20"), ("share", "1")]).await;
    assert_eq!((a.status, a.location.as_deref()), (303, Some("/budgets/org/a")), "{}", a.body);
    let now = api_account(&s, &mgr, "org/a").await;
    assert_eq!(now["budget_gpu_hours"], 20.0, "{now}");
    let after = b.page("/budgets/org/a").await;
    assert!(after.contains("Done: org/a: budget 20 NGH"), "the flash says what changed: {after}");
    assert!(after.contains(r#"value="20""#), "the form shows the new budget");
    let remaining = now["remaining_gpu_hours"].as_f64().unwrap();
    assert!(remaining > 19.9, "{now}");
    assert!(after.contains(&allot_core::ledger::format_ngh(remaining)), "the new remaining: {remaining}");
    assert!(after.contains("% of 20 NGH"), "the bar moved");
    let exhaustion_after: i64 =
        attr_after(&after, "<dt>Runs out</dt>", "data-exhaustion").expect("a projection").parse().unwrap();
    assert!(exhaustion_after > exhaustion_before, "the projection moved: {exhaustion_before} -> {exhaustion_after}");
    assert!(row(&b.page("/budgets").await, "org/a").contains(r#"data-budget="20""#), "the tree shows it too");
    let (_, audit) = s.http("GET", "/v1/audit", Some(&f.admin), None).await;
    assert!(
        audit.as_array().unwrap().iter().any(|e| e["principal"] == "mgr" && e["target"] == "org/a"),
        "audited as the manager: {audit}"
    );

    // A value out of bounds: back to the form, naming the field.
    let a = b.post("/budgets/org/a", &[("csrf", &token), ("budget_gpu_hours", "-5")]).await;
    assert_eq!(a.status, 303, "{}", a.body);
    let page = b.page("/budgets/org/a").await;
    assert!(page.contains("Not done: Budget: "), "the flash names the field: {page}");
    assert_eq!(api_account(&s, &mgr, "org/a").await["budget_gpu_hours"], 20.0, "nothing changed");

    // A researcher's allocation, added from the same form: a name the
    // server does not know is refused (issue 30, point 11) unless ticked as
    // new.
    let ana = [("csrf", token.as_str()), ("user.0.name", "ana"), ("user.0.share", "3"), ("user.0.budget", "2.5")];
    let a = b.post("/budgets/org/a", &ana).await;
    assert_eq!(a.status, 303, "{}", a.body);
    let page = b.page("/budgets/org/a").await;
    assert!(page.contains("Not done: Share of researcher ana: no user ana is known here"), "{page}");
    assert!(api_account(&s, &mgr, "org/a").await["users"].get("ana").is_none(), "nothing changed");
    let a = b.post("/budgets/org/a", &[&ana[..], &[("new_users", "true")]].concat()).await;
    assert_eq!(a.status, 303, "{}", a.body);
    let now = api_account(&s, &mgr, "org/a").await;
    assert_eq!((&now["users"]["ana"], &now["user_budgets"]["ana"]), (&Value::from(3.0), &Value::from(2.5)), "{now}");
    assert!(b.page("/budgets/org/a").await.contains("Done: org/a: share of ana 3, budget of ana 2.5 NGH"));

    // Its scope's root: no form, and a crafted change is refused.
    let root = b.page("/budgets/org").await;
    assert!(!root.contains("account-change"), "no form where the API would refuse");
    let a = b.post("/budgets/org", &[("csrf", &token), ("budget_gpu_hours", "1")]).await;
    assert_eq!(a.status, 403, "{}", a.body);
    let (_, org) = s.http("GET", "/v1/accounts/org", Some(&f.admin), None).await;
    assert!(org["budget_gpu_hours"].is_null(), "{org}");
    drop(s);
    f.finish().await;
}

/// A researcher sees only its project's budget; it has no form, a crafted
/// change (with its own CSRF token) is refused by the API, and another
/// project's page does not exist for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_a_researcher_sees_its_projects_and_cannot_change_them() {
    let f = Fixture::new(Backend::Sqlite, "dash-budgets-researcher").await;
    let s = Server::start(&f.dir, &f.db.url);
    let res = token(&f.db.url, "researcher", "ana", &["--project", "org/b"]);
    let mut b = Browser::sign_in(&s, &res).await;
    let page = b.page("/budgets").await;
    row(&page, "org/b");
    for other in ["org/a", "lab/x", r#"data-account="org""#] {
        assert!(!page.contains(other), "{other} is not shown: {page}");
    }
    assert!(!page.contains("#change"), "nothing to change");
    let own = b.page("/budgets/org/b").await;
    assert!(!own.contains("account-change"), "no form");
    let token = csrf(&own);
    let a = b.post("/budgets/org/b", &[("csrf", &token), ("budget_gpu_hours", "99")]).await;
    assert_eq!(a.status, 403, "refused by the API: {}", a.body);
    let a = b.post("/budgets/org/a", &[("csrf", &token), ("budget_gpu_hours", "99")]).await;
    assert_eq!(a.status, 404, "another project is not there for it: {}", a.body);
    assert_eq!(b.get("/budgets/org/a").await.status, 404);
    for path in ["org/a", "org/b"] {
        let (_, v) = s.http("GET", &format!("/v1/accounts/{path}"), Some(&f.admin), None).await;
        assert!(v["budget_gpu_hours"].is_null(), "unchanged: {v}");
    }
    drop(s);
    f.finish().await;
}

/// A running workload that ignores SIGTERM: preempted, it holds its GPUs
/// for the whole grace.
const STUBBORN: &[&str] = &["sh", "-c", "trap '' TERM; sleep 300"];

/// Count of `needle` in `hay`.
fn count(hay: &str, needle: &str) -> usize {
    hay.matches(needle).count()
}

/// 55 batch workloads wait behind one that fills the cluster, and an
/// interactive one preempts it (INT-1) and waits for its grace: the page
/// counts them by account and class, lists them 50 a page, names the
/// interactive one next with its victim's rule linked, and filters; a
/// researcher of org/b sees only org/b's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_groups_pages_and_names_what_starts_next() {
    let f = Fixture::new(Backend::Sqlite, "dash-queue").await;
    std::fs::write(f.dir.join("cluster.toml"), CONFIG.replace(r#"grace = "1s""#, r#"grace = "60s""#)).unwrap();
    let s = Server::start(&f.dir, &f.db.url);
    let filler = submit(&s, &f.admin, &[&["--account", "org/a", "--gpus", "4", "--"], STUBBORN].concat());
    s.wait_for(&f.admin, &filler, 20, |v| state(v) == "running").await;
    for i in 0..55 {
        let body = format!(r#"{{"account":"org/a","gpus":1,"command":["sleep","1"],"name":"wait-{i}"}}"#);
        let (status, v) = s.http("POST", "/v1/workloads", Some(&f.admin), Some(&body)).await;
        assert_eq!(status, 201, "{v}");
    }
    let inter = submit(
        &s,
        &f.admin,
        &["--account", "org/b", "--gpus", "4", "--class", "interactive", "--duration", "10s", "--", "sleep", "10"],
    );
    s.wait_for(&f.admin, &filler, 20, |v| state(v) == "stopping").await;

    let mut b = Browser::sign_in(&s, &f.admin).await;
    let started = Instant::now();
    let page = b.page("/queue").await;
    let took = started.elapsed();
    assert!(page.contains(r#"data-pending="56""#), "56 waiting: {page}");
    let group = |page: &str, key: &str| {
        let start = page.find(&format!(r#"data-group="{key}""#)).unwrap_or_else(|| panic!("group {key}: {page}"));
        page[start..start + page[start..].find("</tr>").unwrap()].to_string()
    };
    assert!(group(&page, "org/a|batch").contains(r#"<td class="num">55</td><td class="num">55</td>"#));
    assert!(group(&page, "org/b|interactive").contains(r#"<td class="num">1</td><td class="num">4</td>"#));

    // Next: the interactive workload, its victim and the victim's rule.
    let next = &page[page.find(r#"id="next""#).unwrap()..page.find(r#"id="by-account""#).unwrap()];
    assert!(next.contains(&format!(r#"href="/workloads/{inter}""#)), "{next}");
    assert!(next.contains(&format!(r#"href="/workloads/{filler}""#)), "its victim: {next}");
    assert!(next.contains(r#"href="/rules#INT-1""#), "the victim's rule, linked: {next}");

    // The list: 50 on the first page, the interactive one with its reason.
    let list = &page[page.find(r#"id="waiting""#).unwrap()..];
    assert_eq!(count(list, "st-pending"), 50, "{list}");
    let inter_row = &list[list.find(&format!(r#"<a href="/workloads/{inter}">"#)).expect("newest first")..];
    let inter_row = &inter_row[..inter_row.find("</tr>").unwrap()];
    assert!(inter_row.contains(r#"href="/rules#CON-2""#) && inter_row.contains("being released"), "{inter_row}");
    let at = list.find(r#"rel="next""#).expect("a link to older workloads");
    let open = list[..at].rfind("<a ").unwrap();
    let older = attr_after(&list[open..], "<a ", "href").unwrap().replace("&amp;", "&");
    assert!(older.starts_with("/queue?before="), "{older}");
    let second = b.page(&older).await;
    let list2 = &second[second.find(r#"id="waiting""#).unwrap()..];
    assert_eq!(count(list2, "st-pending"), 6, "{list2}");
    assert!(!list2.contains(r#"rel="next""#) && list2.contains("Newest"));

    // Filters.
    for (query, n) in [("?class=interactive", 1), ("?account=org/b", 1), ("?account=org", 56), ("?class=service", 0)] {
        let p = b.page(&format!("/queue{query}")).await;
        assert!(p.contains(&format!(r#"data-pending="{n}""#)), "{query}: {n}");
    }

    // A researcher of org/b: its work only, and nothing of org/a's named.
    let res = token(&f.db.url, "researcher", "ben", &["--project", "org/b"]);
    let mut r = Browser::sign_in(&s, &res).await;
    let theirs = r.page("/queue").await;
    assert!(theirs.contains(r#"data-pending="1""#), "{theirs}");
    assert!(theirs.contains(&format!(r#"href="/workloads/{inter}""#)));
    assert!(!theirs.contains("org/a"), "{theirs}");
    eprintln!("queue page with 56 pending: {took:?} (round trip, first request)");
    drop(s);
    f.finish().await;
}

fn new_workload(account: &str, class: &str, gpus: i64, submit_t: i64) -> NewWorkload {
    NewWorkload {
        run_as: None,
        owner: None,
        submit_t,
        account: account.into(),
        submitter: "ann".into(),
        class: class.into(),
        gpus,
        nodes: 0,
        gpu_type: None,
        clusters: None,
        work_s: 60,
        checkpoint_s: 0,
        util: 1.0,
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

/// Attempt `attempt` of `seq` on `gpus` GPUs of weight `weight` over
/// `[start_t, end_t)` (`None`: still holding them).
fn attempt_ops(seq: i64, attempt: i64, gpus: i64, weight: f64, start_t: i64, end_t: Option<i64>) -> Vec<Op> {
    let row = AttemptRow {
        workload: seq,
        attempt,
        alloc: r#"[{"node":"gpu-0","gpus":[0]}]"#.into(),
        gpus,
        weight,
        state: "starting".into(),
        start_t,
        start_reason: "FS-1: test".into(),
        log_path: "/tmp/x.log".into(),
        ..AttemptRow::default()
    };
    let mut ops = vec![Op::AttemptStart { row: Box::new(row) }];
    if let Some(end_t) = end_t {
        let outcome = "finished".into();
        ops.push(Op::AttemptEnd { seq, attempt, end_t, outcome, exit_code: Some(0), kept_s: 0 });
    }
    ops
}

both_stores!(budgets_usage_spans_sqlite, budgets_usage_spans_postgres, usage_spans);

/// The attempts of an account's subtree that overlap a period, and only
/// those (`_` in a path is no wildcard; a sibling with the same prefix is
/// not below it), as both stores read them.
async fn usage_spans(backend: Backend) {
    let dir = support::temp_dir("dash-usage-spans");
    let db = support::TestDb::new(backend, &dir).await;
    let store = Store::open(&db.url).await.expect("open");
    let mut seq = BTreeMap::new();
    for account in ["org/a", "org/a/sub", "org/ab", "org/b", "org/a_b/c", "org/aXb/c"] {
        seq.insert(account, store.insert_workload(&new_workload(account, "batch", 2, 900)).await.unwrap());
    }
    let mut ops = Vec::new();
    ops.extend(attempt_ops(seq["org/a"], 1, 2, 1.0, 1000, Some(1100)));
    ops.extend(attempt_ops(seq["org/a"], 2, 4, 0.5, 1200, None));
    ops.extend(attempt_ops(seq["org/a/sub"], 1, 1, 2.0, 900, Some(1050)));
    for other in ["org/ab", "org/b", "org/a_b/c", "org/aXb/c"] {
        ops.extend(attempt_ops(seq[other], 1, 8, 1.0, 1000, Some(1100)));
    }
    store.apply(&ops).await.expect("attempts");
    let span = |start_t, end_t, gpus, weight| UsageSpan { start_t, end_t, gpus, weight };
    let sorted = |mut v: Vec<UsageSpan>| {
        v.sort_by_key(|s| (s.start_t, s.gpus));
        v
    };
    let cases = [
        ("org/a", 1050, 1300, vec![span(1000, Some(1100), 2, 1.0), span(1200, None, 4, 0.5)]),
        ("org/a", 0, 1000, vec![span(900, Some(1050), 1, 2.0)]),
        ("org/a/sub", 1050, 2000, vec![]),
        ("org/a_b", 0, 5000, vec![span(1000, Some(1100), 8, 1.0)]),
        ("org", 1101, 1200, vec![]),
    ];
    for (account, from, to, want) in cases {
        let got = sorted(store.usage_spans(account, from, to).await.expect("spans"));
        assert_eq!(got, want, "{account} over [{from}, {to})");
    }
    assert_eq!(store.usage_spans("org", 0, 5000).await.unwrap().len(), 7, "the whole subtree");
    // The burn-down of org/a over [1000, 1300): 2 GPUs × 100 s, its
    // sub-account's 2 normalised GPUs × 50 s, then 2 normalised GPUs × 100 s.
    let spans = store.usage_spans("org/a", 1000, 1300).await.unwrap();
    let curve = burn_down(&spans, 1000, 1300, 100);
    assert_eq!(curve.last(), Some(&(1300, 500.0 / 3600.0)), "{curve:?}");
    db.drop_db().await;
    let _ = std::fs::remove_dir_all(&dir);
}

both_stores!(queue_pending_groups_sqlite, queue_pending_groups_postgres, pending_groups);

/// Pending work counted by account and class in the store, with the
/// listing's filters: who may see it, subtree, class and clusters.
async fn pending_groups(backend: Backend) {
    let dir = support::temp_dir("dash-pending-groups");
    let db = support::TestDb::new(backend, &dir).await;
    let store = Store::open(&db.url).await.expect("open");
    for (account, class, gpus, t) in [
        ("org/a", "batch", 2, 1003),
        ("org/a", "batch", 2, 1001),
        ("org/a", "batch", 4, 1002),
        ("org/a", "interactive", 1, 1005),
        ("org/a/sub", "batch", 8, 1004),
        ("org/b", "batch", 1, 1000),
    ] {
        store.insert_workload(&new_workload(account, class, gpus, t)).await.unwrap();
    }
    let running = store.insert_workload(&new_workload("org/a", "batch", 16, 900)).await.unwrap();
    let pinned = NewWorkload { clusters: Some("c2".into()), ..new_workload("lab/x", "batch", 3, 990) };
    store.insert_workload(&pinned).await.unwrap();
    let typed = NewWorkload { gpu_type: Some("B200".into()), ..new_workload("lab/x", "batch", 5, 995) };
    store.insert_workload(&typed).await.unwrap();
    store
        .apply(&[Op::WorkloadState { seq: running, state: Phase::Running, reason: "FS-1: test".into(), end_t: None }])
        .await
        .unwrap();
    let group = |account: &str, class: &str, workloads, gpus, oldest_submit_t| PendingGroup {
        account: account.into(),
        class: class.into(),
        workloads,
        gpus,
        oldest_submit_t,
    };
    let c1 = ClusterFilter { name: "c1".into(), gpu_types: vec!["H100".into()] };
    let cases: Vec<(&str, WorkloadFilter, Vec<PendingGroup>)> = vec![
        (
            "everything",
            WorkloadFilter::default(),
            vec![
                group("lab/x", "batch", 2, 8, 990),
                group("org/a", "batch", 3, 8, 1001),
                group("org/a", "interactive", 1, 1, 1005),
                group("org/a/sub", "batch", 1, 8, 1004),
                group("org/b", "batch", 1, 1, 1000),
            ],
        ),
        (
            "a manager of org/a",
            WorkloadFilter { visible: Some(vec!["org/a".into()]), ..Default::default() },
            vec![
                group("org/a", "batch", 3, 8, 1001),
                group("org/a", "interactive", 1, 1, 1005),
                group("org/a/sub", "batch", 1, 8, 1004),
            ],
        ),
        ("nothing visible", WorkloadFilter { visible: Some(vec![]), ..Default::default() }, vec![]),
        (
            "a subtree and a class",
            WorkloadFilter { account: Some("org".into()), class: Some("interactive".into()), ..Default::default() },
            vec![group("org/a", "interactive", 1, 1, 1005)],
        ),
        (
            "cluster c1 of H100s: not what is pinned to c2 or asks for B200s",
            WorkloadFilter { account: Some("lab".into()), clusters: Some(vec![c1.clone()]), ..Default::default() },
            vec![],
        ),
        (
            "clusters c1 and c2",
            WorkloadFilter {
                account: Some("lab/x".into()),
                clusters: Some(vec![c1, ClusterFilter { name: "c2".into(), gpu_types: vec!["H100".into()] }]),
                ..Default::default()
            },
            vec![group("lab/x", "batch", 1, 3, 990)],
        ),
    ];
    for (name, f, want) in cases {
        assert_eq!(store.pending_groups(&f).await.expect("groups"), want, "{name}");
    }
    db.drop_db().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 30, point 5: an array's elements are `ID_INDEX` on the pages, as
/// in the CLI, and a workload without a name shows its program.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn array_elements_are_named_as_the_cli_names_them() {
    let f = Fixture::new(Backend::Sqlite, "dash-array").await;
    let s = Server::start(&f.dir, &f.db.url);
    let body = r#"{"account":"org/a","gpus":1,"command":["sleep","30"],"array":"0-3%1"}"#;
    let (status, v) = s.http("POST", "/v1/workloads", Some(&f.admin), Some(body)).await;
    assert_eq!(status, 201, "{v}");
    let id = v["id"].as_str().expect("an id").to_string();
    let mut b = Browser::sign_in(&s, &f.admin).await;
    let page = b.page("/").await;
    for i in 0..4 {
        assert!(page.contains(&format!(">{id}_{i}</a>")), "element {i} as {id}_{i}: {page}");
    }
    assert!(page.contains("<td>sleep</td>"), "the program for a name: {page}");
    let second = id.parse::<u64>().expect("a number") + 1;
    let page = b.page(&format!("/workloads/{second}")).await;
    assert!(page.contains(&format!("Workload {id}_1 · sleep")), "{page}");
    for i in 0..4 {
        let (status, _) = s.http("POST", &format!("/v1/workloads/{id}_{i}/cancel"), Some(&f.admin), None).await;
        assert!(status < 300, "cancel {id}_{i}: {status}");
    }
    drop(s);
    f.finish().await;
}
