//! The dashboard end to end in a real browser: headless Chromium driven
//! over WebDriver (chromedriver, started by the test: `browser`) against a
//! real `allot serve` on SQLite, with sleep-based workloads on the fake
//! GPUs of `support::CONFIG` (two nodes of two; a 2 s batch slice and a 1 s
//! grace, so that a preemption happens within seconds).
//!
//! One browser visits the pages in turn, as a researcher would, then as
//! the admin: signing in and out (the session cookie is `HttpOnly` and no
//! token is ever in a page or URL), work submitted through the API
//! appearing without a reload with its reason and rule, a preemption with
//! its rule, the log of the attempt that runs followed in place, another
//! project's workloads out of sight and out of reach, the skip link as the
//! first Tab stop, and every section answering the admin.
//!
//! `ALLOT_SCREENSHOTS=DIR` saves a PNG of each page visited into `DIR`
//! (relative: from the workspace root); `scripts/dashboard-screenshots.sh`
//! regenerates `docs/dashboard/` so.
//!
//! Without chromedriver or Chromium the test fails, saying how to install
//! them (`sudo bash .ci/chromium.sh`); it never skips.

mod browser;
mod support;

use std::path::{Path, PathBuf};

use browser::{Browser, Driver};
use fantoccini::key::Key;
use serde_json::{Value, json};
use support::{Backend, Fixture, Server, script, state, submit, token};

/// `$1` seconds of "training": rank 0 logs a line and checkpoints each
/// second, and resumes from its checkpoint; SIGTERM ends it at once (its
/// log says so). Every node of the allocation runs it.
const TRAIN_SH: &str = r#"#!/bin/sh
ck="$ALLOT_CHECKPOINT_DIR"
r="${ALLOT_NODE_RANK:-0}"
n=0
[ -f "$ck/n" ] && n=$(cat "$ck/n") && [ "$r" = 0 ] && echo "resumed from the checkpoint of step $n"
trap '[ "$r" = 0 ] && echo "SIGTERM at step $n"; exit 0' TERM
while [ "$n" -lt "$1" ]; do
  sleep 1 & wait $!
  n=$((n+1))
  if [ "$r" = 0 ]; then echo "$n" > "$ck/n"; echo "step $n of $1: checkpoint saved"; fi
done
[ "$r" = 0 ] && echo "done"
exit 0
"#;

/// Where screenshots go: `$ALLOT_SCREENSHOTS`, a relative path taken from
/// the workspace root (a test runs in its crate's directory).
fn screenshots() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("ALLOT_SCREENSHOTS").filter(|d| !d.is_empty())?);
    Some(if dir.is_absolute() { dir } else { Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(dir) })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_in_a_real_browser() {
    let f = Fixture::new(Backend::Sqlite, "dashboard-browser").await;
    // First: without chromedriver or Chromium there is nothing to run.
    let driver = Driver::start(&f.dir.join("browser"));
    let ada = token(&f.db.url, "researcher", "ada", &["--project", "org/a"]);
    let bob = token(&f.db.url, "researcher", "bob", &["--project", "org/b"]);
    let mia = token(&f.db.url, "manager", "mia", &["--scope", "org"]);
    let s = Server::start(&f.dir, &f.db.url);
    let mut b = driver.browser(&s.url, screenshots()).await;
    for t in [&f.admin, &ada, &bob, &mia] {
        b.never_show(t);
    }
    let work = script(&f.dir, "train.sh", TRAIN_SH);

    sign_in_as_a_researcher(&b, &ada).await;
    let (victim, waiter) = submitted_work_appears_without_a_reload(&b, &s, &ada, &work).await;
    pending_reason_links_its_rule(&b, &waiter).await;
    let other = preemption_shows_its_rule(&b, &s, &ada, &bob, &victim).await;
    log_follows_the_last_attempt(&b).await;
    other_projects_are_out_of_sight_and_reach(&b, &victim, &other).await;
    other_projects_budgets_are_out_of_sight_and_reach(&b).await;
    skip_link_is_the_first_tab_stop(&b).await;
    sign_out_ends_the_session(&b, &victim).await;
    a_manager_changes_a_budget_and_sees_it_move(&b, &mia).await;
    every_page_answers_the_admin(&b, &f.admin).await;
    an_operator_drains_a_node_from_the_grid(&b, &s, &f.admin, &work).await;

    b.close().await;
    drop(driver);
    drop(s);
    f.finish().await;
}

/// The `allot_session` cookie as WebDriver sees it (it sees `HttpOnly` ones).
async fn session_cookie(b: &Browser) -> Option<fantoccini::cookies::Cookie<'static>> {
    b.client.get_all_cookies().await.expect("cookies").into_iter().find(|c| c.name() == "allot_session")
}

/// Types `text` into `#token` and presses Enter there (the keyboard, not a
/// click, submits the form).
async fn type_token_and_enter(b: &Browser, text: &str) {
    let field = b.wait_for("input#token", 10).await;
    assert_eq!(
        field.attr("type").await.expect("type").as_deref(),
        Some("password"),
        "the token field hides what is typed"
    );
    field.send_keys(&format!("{text}{}", char::from(Key::Enter))).await.expect("type the token");
}

/// Scenario 1: `/` sends a stranger to `/login`; a wrong token is refused
/// with a message; the right one, typed and submitted with Enter, lands on
/// "My work" with an `HttpOnly`, `SameSite=Strict` session cookie that the
/// page's script cannot read, and the token nowhere in the page or URL.
async fn sign_in_as_a_researcher(b: &Browser, token: &str) {
    b.visit("/").await;
    assert_eq!(b.here().await, "/login", "a stranger is sent to sign in");
    assert_eq!(b.text("h1").await, "Sign in to Allot");
    b.shot("login").await;

    type_token_and_enter(b, "allot_this_is_not_a_token").await;
    let error = b.wait_for(".flash.error[role=alert]", 10).await.text().await.expect("text");
    assert_eq!(error, "Unknown or revoked token.");
    assert_eq!(b.here().await, "/login");
    assert!(session_cookie(b).await.is_none(), "no session for a wrong token");
    let source = b.client.source().await.expect("source");
    assert!(!source.contains("allot_this_is_not_a_token"), "the refused token is sent back in the page:\n{source}");

    type_token_and_enter(b, token).await;
    b.until("signed in on My work", 10, async || (b.here().await == "/").then_some(())).await;
    assert_eq!(b.text("main h1").await, "My work");
    assert!(b.text("header .who").await.starts_with("ada · researcher"), "{}", b.text("header .who").await);
    let c = session_cookie(b).await.expect("a session cookie");
    assert_eq!(c.http_only(), Some(true), "the session cookie is HttpOnly: {c:?}");
    assert_eq!(format!("{:?}", c.same_site()), "Some(Strict)", "{c:?}");
    assert!(c.value() != token && !c.value().contains(token), "the cookie is a session id, not the token");
    let visible = b.js("return document.cookie;", vec![]).await;
    assert!(
        !visible.as_str().unwrap_or("").contains("allot_session"),
        "the page's script reads the session: {visible}"
    );
    b.assert_no_secret().await;
}

/// The cells of the list's row for workload `id` (by column heading),
/// with the rule links of its reason; `null` while there is none.
const ROW_JS: &str = "
    const a = document.querySelector('main a[href=\"/workloads/' + arguments[0] + '\"]');
    if (!a) return null;
    const tr = a.closest('tr');
    const heads = [...tr.closest('table').querySelectorAll('thead th')].map((th) => th.textContent.trim());
    const row = {};
    [...tr.cells].forEach((td, i) => { row[heads[i]] = td.innerText.trim(); });
    row.rules = [...tr.querySelectorAll('td.reason a.rule')]
        .map((l) => ({ href: l.getAttribute('href'), text: l.textContent }));
    return row;";

/// Scenario 2: workloads submitted through the API (the CLI) appear on
/// "My work" without a reload (the page refreshes `<main>` itself), the
/// running one as running, the pending one with its reason, whose rule is
/// linked to `/rules#ID`. Returns (the running one, the pending one).
async fn submitted_work_appears_without_a_reload(b: &Browser, s: &Server, ada: &str, work: &str) -> (String, String) {
    b.js("window.allotNotReloaded = true;", vec![]).await;
    let args = ["--account", "org/a", "--gpus", "4", "--checkpoint", "1s", "--duration", "20s"];
    let victim = submit(s, ada, &[&["--name", "train-7b"], &args[..], &["--", work, "20"]].concat());
    s.wait_for(ada, &victim, 20, |v| state(v) == "running").await;
    let waiter = submit(
        s,
        ada,
        &["--name", "eval-sweep", "--account", "org/a", "--gpus", "2", "--duration", "5s", "--", "sleep", "5"],
    );
    let row = b
        .until("the pending workload's row with a linked reason", 15, async || {
            let row = b.js(ROW_JS, vec![json!(waiter)]).await;
            row["rules"].as_array().is_some_and(|r| !r.is_empty()).then_some(row)
        })
        .await;
    assert_eq!(b.js("return window.allotNotReloaded === true;", vec![]).await, json!(true), "the page was reloaded");
    assert_eq!(row["State"], "pending", "{row}");
    assert_eq!(row["Name"], "eval-sweep", "{row}");
    assert!(row["Elapsed"].as_str().unwrap_or("").starts_with("waiting"), "{row}");
    for link in row["rules"].as_array().expect("rules") {
        let id = link["text"].as_str().expect("rule id");
        assert_eq!(link["href"], format!("/rules#{id}"), "{row}");
        assert!(row["Why"].as_str().unwrap_or("").contains(id), "{row}");
    }
    let running = b.js(ROW_JS, vec![json!(victim)]).await;
    assert_eq!((running["State"].as_str(), running["Name"].as_str()), (Some("running"), Some("train-7b")), "{running}");
    // (A fleet of one names no cluster: only the nodes.)
    assert_eq!(running["Cluster / nodes"], "gpu-0, gpu-1", "where it runs: {running}");
    b.shot("work").await;
    (victim, waiter)
}

/// Scenario 2, continued: the pending workload's first rule link leads to
/// the rules page, which has an element with that rule's id.
async fn pending_reason_links_its_rule(b: &Browser, waiter: &str) {
    let css = format!("main tr:has(a[href=\"/workloads/{waiter}\"]) td.reason a.rule");
    let link = b.find(&css).await;
    let id = link.text().await.expect("rule id");
    link.click().await.expect("follow the rule link");
    b.until("the rules page", 10, async || (b.here().await == "/rules").then_some(())).await;
    let url = b.client.current_url().await.expect("url");
    assert_eq!(url.fragment(), Some(id.as_str()));
    // The anchor may be an empty mark in the rule's table row: that row says the id.
    let target = b
        .js(
            "const e = document.getElementById(arguments[0]); return e && (e.closest('tr') || e).innerText;",
            vec![json!(id)],
        )
        .await;
    assert!(
        target.as_str().is_some_and(|t| t.contains(&id)),
        "the rules page has no element with id {id} in a row that names it: {target}\n{}",
        b.main_text().await
    );
    b.shot("rules").await;
}

/// The cells of the attempt table's rows (by column heading), with the
/// rule links of "Stopped, and why".
const ATTEMPTS_JS: &str = "
    const table = [...document.querySelectorAll('main table')]
        .find((t) => [...t.querySelectorAll('thead th')].some((th) => th.textContent.trim() === 'Stopped, and why'));
    if (!table) return null;
    const heads = [...table.querySelectorAll('thead th')].map((th) => th.textContent.trim());
    const stopped = heads.indexOf('Stopped, and why');
    return [...table.querySelectorAll('tbody tr')].map((tr) => {
        const row = {};
        [...tr.cells].forEach((td, i) => { row[heads[i]] = td.innerText.trim(); });
        row.rules = [...tr.cells[stopped].querySelectorAll('a.rule')]
            .map((l) => ({ href: l.getAttribute('href'), text: l.textContent }));
        return row;
    });";

/// Scenario 3: another project's interactive submission preempts the
/// researcher's running workload past its slice; the workload's page shows
/// the preempted attempt with why it stopped, the rule linked, and nothing
/// of the other project. Returns the other project's workload.
async fn preemption_shows_its_rule(b: &Browser, s: &Server, ada: &str, bob: &str, victim: &str) -> String {
    let other = submit(
        s,
        bob,
        &[
            "--name",
            "notebook",
            "--account",
            "org/b",
            "--gpus",
            "4",
            "--class",
            "interactive",
            "--duration",
            "3s",
            "--",
            "sleep",
            "3",
        ],
    );
    let v = s
        .wait_for(ada, victim, 30, |v| {
            v["attempts"][0]["outcome"] == "preempted" && v["attempts"][0]["signal_reason"].is_string()
        })
        .await;
    let why = v["attempts"][0]["signal_reason"].as_str().expect("signal reason").to_string();
    let rule = why.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).next().unwrap_or("").to_string();
    b.visit(&format!("/workloads/{victim}")).await;
    assert!(b.text("main h1").await.starts_with(&format!("Workload {victim} · train-7b")));
    let attempts = b
        .until("the preempted attempt with its rule", 15, async || {
            let rows = b.js(ATTEMPTS_JS, vec![]).await;
            rows[0]["rules"].as_array().is_some_and(|r| !r.is_empty()).then_some(rows)
        })
        .await;
    let first = &attempts[0];
    assert_eq!(first["#"], "1", "{attempts}");
    assert!(first["Outcome"].as_str().is_some_and(|o| o.starts_with("preempted")), "{attempts}");
    assert_eq!(
        first["rules"][0],
        json!({ "href": format!("/rules#{rule}"), "text": rule }),
        "reason {why:?}: {attempts}"
    );
    let stopped = first["Stopped, and why"].as_str().unwrap_or("");
    assert!(stopped.starts_with(&rule), "the cell says why: {stopped:?} for {why:?}");
    b.until("the last attempt's log, filled in by the page", 10, async || {
        let log = b.js(LOG_JS, vec![]).await;
        log[1].as_str().is_some_and(|l| l.contains("step 1 of 20\n") || l.contains("resumed from")).then_some(())
    })
    .await;
    let page = b.main_text().await;
    assert!(!page.contains("org/b") && !page.contains("bob"), "another project shows on the page:\n{page}");
    b.shot("workload").await;
    other
}

/// The heading and text of the log on a workload's page.
const LOG_JS: &str = "
    const h = document.getElementById('log-heading'), log = document.getElementById('log');
    return [h && h.textContent, log && log.textContent, window.allotRefreshes];";

/// The number of the last "step N of" line of the training log.
fn last_step(log: &str) -> u32 {
    log.lines().filter_map(|l| l.strip_prefix("step ")?.split(' ').next()?.parse().ok()).max().unwrap_or(0)
}

/// Still on the preempted workload's page: once its next attempt runs, the
/// page (refreshing itself) follows that attempt's log, which holds that
/// attempt's lines only, each once, however many refreshes pass.
async fn log_follows_the_last_attempt(b: &Browser) {
    b.js(
        "window.allotRefreshes = 0;
         document.getElementById('main').addEventListener('allot:refreshed', () => { window.allotRefreshes += 1; });",
        vec![],
    )
    .await;
    let seen = b
        .until("the next attempt's log", 30, async || {
            let v = b.js(LOG_JS, vec![]).await;
            let ok = v[0].as_str().is_some_and(|h| h.starts_with("Log of attempt 2"))
                && v[1].as_str().is_some_and(|l| l.contains("resumed from the checkpoint"));
            ok.then_some(v)
        })
        .await;
    // A refresh of <main> after that, then new lines fetched after it.
    let refreshes = seen[2].as_u64().unwrap_or(0);
    let at_refresh = b
        .until("an in-place refresh of the page", 10, async || {
            let v = b.js(LOG_JS, vec![]).await;
            (v[2].as_u64().unwrap_or(0) > refreshes).then(|| last_step(v[1].as_str().unwrap_or("")))
        })
        .await;
    let log = b
        .until("lines after the refresh", 10, async || {
            let v = b.js(LOG_JS, vec![]).await;
            let log = v[1].as_str().unwrap_or("").to_string();
            (last_step(&log) > at_refresh).then_some(log)
        })
        .await;
    assert!(
        log.starts_with("resumed from the checkpoint of step "),
        "attempt 2's log starts with its own first line:\n{log}"
    );
    assert!(!log.contains("SIGTERM"), "attempt 1's lines are in attempt 2's log:\n{log}");
    let mut lines: Vec<&str> = log.lines().collect();
    let n = lines.len();
    lines.sort_unstable();
    lines.dedup();
    assert_eq!(lines.len(), n, "a line of the log shows more than once:\n{log}");
}

/// Scenario 4: the researcher of org/a does not see org/b's workload in
/// the list of everything it may see, and its page by URL answers exactly
/// as a workload that does not exist (the API's 404).
async fn other_projects_are_out_of_sight_and_reach(b: &Browser, mine: &str, other: &str) {
    b.visit("/?who=all").await;
    b.wait_for("main table", 10).await;
    assert!(b.js(ROW_JS, vec![json!(mine)]).await.is_object(), "its own workload is listed");
    assert_eq!(b.js(ROW_JS, vec![json!(other)]).await, Value::Null, "another project's workload is listed");
    let list = b.main_text().await;
    assert!(!list.contains("org/b") && !list.contains("notebook"), "another project shows in the list:\n{list}");

    let missing = "999999";
    let mut answers = Vec::new();
    for id in [other, missing] {
        let path = format!("/workloads/{id}");
        assert_eq!(b.fetch_status(&path).await, 404, "{path}");
        b.visit(&path).await;
        assert_eq!(b.text("main h1").await, "Not found", "{path}");
        answers.push((b.text("main p[role=alert]").await.replace(id, "ID"), b.client.title().await.expect("title")));
    }
    assert_eq!(answers[0], answers[1], "another project's workload answers unlike one that does not exist");
    assert_eq!(answers[0].0, "no workload ID");
}

/// Scenario 5: the first Tab stop of a page is "Skip to content", and
/// following it with Enter puts the focus on `<main>`.
async fn skip_link_is_the_first_tab_stop(b: &Browser) {
    b.visit("/").await;
    b.wait_for("main h1", 10).await;
    b.press(Key::Tab).await;
    let focused = b
        .js("const a = document.activeElement; return [a.tagName, a.textContent, a.getAttribute('href')];", vec![])
        .await;
    assert_eq!(focused, json!(["A", "Skip to content", "#main"]), "the first Tab stop");
    b.press(Key::Enter).await;
    b.until("the focus on <main>", 5, async || {
        (b.js("return document.activeElement.id;", vec![]).await == "main").then_some(())
    })
    .await;
}

/// Scenario 1, continued: "Sign out" ends the session: back at `/login`,
/// the cookie gone, and pages send the browser to sign in again.
async fn sign_out_ends_the_session(b: &Browser, victim: &str) {
    b.visit("/").await;
    b.find("header form[action=\"/logout\"] button").await.click().await.expect("sign out");
    b.until("signed out", 10, async || (b.here().await == "/login").then_some(())).await;
    assert!(session_cookie(b).await.is_none(), "the session cookie is gone");
    b.visit("/").await;
    assert_eq!(b.here().await, "/login");
    b.visit(&format!("/workloads/{victim}")).await;
    assert_eq!(b.here().await, format!("/login?next=/workloads/{victim}"));
    assert_eq!(b.fetch_status(&format!("/workloads/{victim}")).await, 200, "the sign-in form (after a redirect)");
    assert_eq!(b.text("h1").await, "Sign in to Allot");
}

/// A researcher's budgets: its project's account in the tree, another
/// project's neither there nor reachable by URL (the not-found page, as for
/// an account that does not exist).
async fn other_projects_budgets_are_out_of_sight_and_reach(b: &Browser) {
    b.visit("/budgets").await;
    let tree = b.main_text().await;
    assert!(tree.contains("org/a") && !tree.contains("org/b"), "the researcher of org/a sees org/a only:\n{tree}");
    assert_eq!(b.fetch_status("/budgets/org/b").await, 404);
    assert_eq!(b.fetch_status("/budgets/org/none").await, 404, "the same answer as for no account");
    b.visit("/budgets/org/b").await;
    assert_eq!(b.text("h1").await, "Not found");
    assert!(!b.main_text().await.contains("Budget of"), "nothing of org/b is shown");
}

/// Sets the budget field of the open account page to `value` and saves.
async fn save_budget(b: &Browser, value: &str) {
    let field = b.wait_for("input#budget_gpu_hours", 10).await;
    field.clear().await.expect("clear the budget");
    field.send_keys(value).await.expect("type the budget");
    b.find("form.account-change button[type=submit]").await.click().await.expect("save");
    b.until("the change confirmed", 10, async || {
        let flash = b.client.find(fantoccini::Locator::Css(".flash.ok")).await.ok()?;
        flash.text().await.ok()
    })
    .await;
}

/// A manager sets a budget inside its scope from the account's page: the
/// bar's text follows the new budget, and the projected exhaustion moves
/// (later for a larger budget at the same burn rate).
async fn a_manager_changes_a_budget_and_sees_it_move(b: &Browser, manager: &str) {
    b.visit("/login?next=/budgets/org/a").await;
    type_token_and_enter(b, manager).await;
    b.until("signed in as the manager", 10, async || (b.here().await == "/budgets/org/a").then_some(())).await;
    save_budget(b, "1").await;
    // The page refreshes its <main> every few seconds: wait for the bar
    // rather than catch it between two refreshes.
    let bar = b
        .until("the budget bar", 10, async || {
            b.client.find(fantoccini::Locator::Css(".budget-bar .bar-text")).await.ok()?.text().await.ok()
        })
        .await;
    assert!(bar.contains("of 1 NGH"), "the bar follows the budget: {bar}");
    let exhaustion = async || -> Option<i64> {
        let dd = b.client.find(fantoccini::Locator::Css("dd[data-exhaustion]")).await.ok()?;
        dd.attr("data-exhaustion").await.ok()??.parse().ok()
    };
    let small = exhaustion().await.expect("a projected exhaustion at the burn rate of org/a's work");
    save_budget(b, "500").await;
    // The page refreshes its <main> every few seconds: wait for the bar
    // rather than catch it between two refreshes.
    let bar = b
        .until("the budget bar", 10, async || {
            b.client.find(fantoccini::Locator::Css(".budget-bar .bar-text")).await.ok()?.text().await.ok()
        })
        .await;
    assert!(bar.contains("of 500 NGH"), "the bar follows the budget: {bar}");
    let large = exhaustion().await.expect("a projected exhaustion at the burn rate of org/a's work");
    assert!(small < large, "a larger budget runs out later: {small} then {large}");
    b.shot("budget").await;
    b.find("header form[action=\"/logout\"] button").await.click().await.expect("sign out");
    b.until("signed out", 10, async || (b.here().await == "/login").then_some(())).await;
}

/// The pages of the navigation besides "Work", as the admin sees them
/// (the admin sees every section), with their screenshot names.
const PAGES: [(&str, &str); 5] =
    [("/budgets", "budgets"), ("/queue", "queue"), ("/fleet", "fleet"), ("/history", "history"), ("/admin", "admin")];

/// Signs in as the admin (back to the page asked for) and opens every
/// section: each answers 200 with a page of its own, never an error page.
async fn every_page_answers_the_admin(b: &Browser, admin: &str) {
    b.visit("/login?next=/queue").await;
    type_token_and_enter(b, admin).await;
    b.until("signed in as the admin", 10, async || (b.here().await == "/queue").then_some(())).await;
    b.assert_no_secret().await;
    for (path, name) in PAGES {
        assert_eq!(b.fetch_status(path).await, 200, "{path}");
        b.visit(path).await;
        let h1 = b.wait_for("main h1", 10).await.text().await.expect("h1");
        assert!(
            !h1.is_empty() && !["Error", "Unavailable", "Not allowed", "Refused"].contains(&h1.as_str()),
            "{path}: {h1}"
        );
        let current = b
            .js(
                "const c = document.querySelector('nav a[aria-current=page]'); return c && c.getAttribute('href');",
                vec![],
            )
            .await;
        assert_eq!(current, json!(path), "{path} is marked as the current section");
        if path == "/history" {
            // The table of ended work (or its "none") renders under its heading.
            b.wait_for("main h2#ended", 10).await;
            let ended = b
                .js("return !!document.querySelector('main table.ended') || /No ended workload matches/.test(document.querySelector('main').textContent);", vec![])
                .await;
            assert_eq!(ended, json!(true), "the History page's ended work");
        }
        b.shot(name).await;
    }
}

/// The admin drains, from the fleet's grid, the node a workload runs on
/// (confirming the browser's dialog): the node is draining then drained,
/// and the workload is preempted there (MNT-1) and runs on the other node,
/// as the grid shows.
async fn an_operator_drains_a_node_from_the_grid(b: &Browser, s: &Server, admin: &str, work: &str) {
    // Nothing else holds GPUs: the workload can move to the other node.
    let (_, live) = s.http("GET", "/v1/workloads?state=pending,running,stopping", Some(admin), None).await;
    for w in live.as_array().expect("workloads") {
        let id = w["id"].as_str().expect("id");
        s.http("POST", &format!("/v1/workloads/{id}/cancel"), Some(admin), None).await;
    }
    for w in live.as_array().expect("workloads") {
        let id = w["id"].as_str().expect("id");
        s.wait_for(admin, id, 20, |v| ["cancelled", "finished", "failed"].contains(&state(v))).await;
    }
    let id = submit(s, admin, &["--account", "org/a", "--gpus", "1", "--checkpoint", "1s", "--", work, "600"]);
    let v = s.wait_for(admin, &id, 20, |v| state(v) == "running").await;
    let node = v["attempts"][0]["allocation"][0]["node"].as_str().expect("its node").to_string();

    b.visit("/fleet").await;
    let held = b.text(&format!("#node-{node} ul.gpus")).await;
    assert!(held.contains(&format!("org/a · {id}")), "the grid names its holder: {held}");
    b.shot("fleet").await;
    b.find(&format!("#node-{node} form button[aria-label=\"Drain {node}\"]")).await.click().await.expect("drain");
    let asked = b.client.get_alert_text().await.expect("a confirmation is asked");
    assert!(asked.starts_with(&format!("Drain {node}?")), "{asked}");
    b.client.accept_alert().await.expect("confirm");
    b.until("the drain confirmed", 10, async || {
        b.client.find(fantoccini::Locator::Css(".flash.ok")).await.ok()?.text().await.ok()
    })
    .await;
    let moved = s
        .wait_for(admin, &id, 30, |v| v["attempts"].as_array().is_some_and(|a| a.len() == 2) && state(v) == "running")
        .await;
    let first = &moved["attempts"][0];
    assert!(first["signal_reason"].as_str().is_some_and(|r| r.starts_with("MNT-1")), "preempted by the drain: {moved}");
    let other = moved["attempts"][1]["allocation"][0]["node"].as_str().expect("its new node").to_string();
    assert_ne!(other, node, "it moved: {moved}");
    // The grid shows it: the node drained, the workload on the other one.
    b.until("the grid refreshed in place", 20, async || {
        let here = b.text(&format!("#node-{node} .node-head")).await;
        let there = b.text(&format!("#node-{other} ul.gpus")).await;
        (here.contains("drained") && there.contains(&format!("org/a · {id}"))).then_some(())
    })
    .await;
    s.http("POST", &format!("/v1/nodes/{node}/undrain"), Some(admin), None).await;
    s.http("POST", &format!("/v1/workloads/{id}/cancel"), Some(admin), None).await;
}
