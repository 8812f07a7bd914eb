//! The History page against a real `allot serve` (SQLite): its table of
//! ended work is `allot history`'s rows, cell for cell (ids with arrays as
//! ID_INDEX, states, WAITED, RAN, …), scoped as the API scopes them, paged
//! and filtered; a window longer than the store's history covers what it
//! recorded and says so; utilization is declared and measured apart, and
//! "not measured" without telemetry.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Backend, CONFIG, Fixture, Server, fake_nvidia_smi, set_gpus, state, submit, token};

const NOT_MEASURED: &str = "not measured (no GPU telemetry reported)";

/// The table of ended work on a page: each row's id and its cells by
/// column name, their text with the markup removed.
fn ended_rows(html: &str) -> Vec<(String, BTreeMap<String, String>)> {
    let Some(at) = html.find(r#"<table class="ended">"#) else { return Vec::new() };
    let table = &html[at..at + html[at..].find("</table>").expect("the table's end")];
    table
        .split(r#"<tr data-id=""#)
        .skip(1)
        .map(|row| {
            let id = row[..row.find('"').unwrap()].to_string();
            let cells = row
                .split(r#"data-col=""#)
                .skip(1)
                .map(|c| {
                    let name = c[..c.find('"').unwrap()].to_string();
                    let inner = &c[c.find('>').unwrap() + 1..c.find("</td>").unwrap()];
                    (name, text(inner))
                })
                .collect();
            (id, cells)
        })
        .collect()
}

/// `html` without its tags, entities of the text decoded.
fn text(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").trim().to_string()
}

/// `allot history -o COLUMNS` of `token` as rows of whitespace-free cells.
fn cli_rows(s: &Server, token: &str, cols: &str, extra: &[&str]) -> Vec<Vec<String>> {
    let out = s.cli_ok(token, &[&["history", "--limit", "1000", "-o", cols], extra].concat());
    out.lines().skip(1).map(|l| l.split_whitespace().map(String::from).collect()).collect()
}

/// Polls `GET /v1/workloads?state=…&limit=1000` of `token` until `n` ended.
async fn wait_ended(s: &Server, token: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let path = "/v1/workloads?state=finished,failed,cancelled,rejected&limit=1000";
        let (_, v) = s.http("GET", path, Some(token), None).await;
        let list = v.as_array().cloned().unwrap_or_default();
        if list.len() >= n {
            return list;
        }
        assert!(Instant::now() < deadline, "{} of {n} ended:\n{}", list.len(), s.log());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The cells of the CLI's columns `id,state,waited,ran,attempts,gpus,user`
/// for the page's rows, in the page's order.
fn page_cells(rows: &[(String, BTreeMap<String, String>)]) -> Vec<Vec<String>> {
    let cols = ["id", "state", "waited", "ran", "attempts", "gpus", "user"];
    rows.iter().map(|(_, c)| cols.iter().map(|k| c.get(*k).cloned().unwrap_or_default()).collect()).collect()
}

const COLS: &str = "id,state,waited,ran,attempts,gpus,user";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_table_is_allot_history_scoped_paged_and_filtered() {
    let f = Fixture::new(Backend::Sqlite, "dash-history-table").await;
    std::fs::write(f.dir.join("cluster.toml"), CONFIG).unwrap();
    let ann = token(&f.db.url, "researcher", "ann", &["--project", "org/a"]);
    let lee = token(&f.db.url, "researcher", "lee", &["--project", "lab/x"]);
    let s = Server::start(&f.dir, &f.db.url);
    // ann's: one that completes, one that fails, one cancelled while it
    // runs, an array of 50 that complete; lee's: one that completes.
    let done = submit(&s, &ann, &["--account", "org/a", "--gpus", "1", "--name", "done", "--", "sleep", "1"]);
    let failed = submit(&s, &ann, &["--account", "org/a", "--gpus", "2", "--name", "bad", "--", "false"]);
    let cancelled = submit(&s, &ann, &["--account", "org/a", "--gpus", "1", "--", "sleep", "300"]);
    s.wait_for(&f.admin, &cancelled, 30, |v| state(v) == "running").await;
    s.cli_ok(&ann, &["cancel", &cancelled]);
    let array = submit(&s, &ann, &["--account", "org/a", "--gpus", "1", "--array", "0-49", "--", "true"]);
    let theirs = submit(&s, &lee, &["--account", "lab/x", "--gpus", "1", "--", "true"]);
    let all = wait_ended(&s, &f.admin, 54).await;
    let by_id: BTreeMap<String, &Value> = all.iter().map(|w| (w["id"].as_str().unwrap().to_string(), w)).collect();
    assert_eq!(by_id[&done]["state"], "finished");
    assert_eq!(by_id[&failed]["state"], "failed");
    assert_eq!(by_id[&cancelled]["state"], "cancelled");

    let (admin_b, ann_b, lee_b) = (
        support::Browser::sign_in(&s, &f.admin).await,
        support::Browser::sign_in(&s, &ann).await,
        support::Browser::sign_in(&s, &lee).await,
    );
    // The admin's first page: the newest 50, the CLI's rows cell for cell.
    let page = admin_b.get("/history").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let rows = ended_rows(&page.body);
    let cli = cli_rows(&s, &f.admin, COLS, &[]);
    assert_eq!(rows.len(), 50, "one page: {}", page.body);
    assert_eq!(page_cells(&rows), cli[..50].to_vec(), "the page's rows are allot history's");
    assert!(rows[0].0 == theirs && rows[0].1["user"] == "lee", "newest first: {:?}", rows[0]);
    assert!(cli.iter().any(|r| r[0] == format!("{array}_49")), "arrays as ID_INDEX: {cli:?}");
    // Times are the API's, the failure's exit named as the CLI names it.
    for (id, cells) in &rows {
        let w = by_id[id];
        let ended = w["end_t"].as_i64().unwrap();
        assert!(page.body.contains(&format!(r#"<tr data-id="{id}""#)));
        assert_eq!(cells["ended"].len(), "2026-12-06 05:12:03".len(), "{cells:?}");
        assert!(ended >= w["submit_t"].as_i64().unwrap());
    }
    // The older page holds the rest, the pager's link going there.
    let older = format!("/history?before={}#ended", rows.last().unwrap().0);
    assert!(page.body.contains(&older.replace('&', "&amp;")), "an Older link: {}", page.body);
    let next = ended_rows(&admin_b.get(&older).await.body);
    assert_eq!(page_cells(&next), cli[50..].to_vec());

    // Filters: state, user, account, as the CLI's.
    let failed_rows = ended_rows(&admin_b.get("/history?state=failed").await.body);
    assert_eq!(page_cells(&failed_rows), cli_rows(&s, &f.admin, COLS, &["--state", "failed"]));
    assert_eq!(failed_rows.len(), 1);
    assert!(failed_rows[0].1["reason"].contains("exited with code 1"), "{:?}", failed_rows[0]);
    let cancelled_rows = ended_rows(&admin_b.get("/history?state=cancelled&account=org/a").await.body);
    assert_eq!(cancelled_rows.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), [cancelled.as_str()]);
    let lees = ended_rows(&admin_b.get("/history?user=lee").await.body);
    assert_eq!(page_cells(&lees), cli_rows(&s, &f.admin, COLS, &["--user", "lee"]));
    let bad = admin_b.get("/history?state=running").await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("state: &quot;running&quot; is not an ended state"), "{}", bad.body);

    // Scoping: each researcher sees its project's rows, as its CLI does, never the other's.
    let mine = ended_rows(&lee_b.get("/history").await.body);
    assert_eq!(page_cells(&mine), cli_rows(&s, &lee, COLS, &[]));
    assert_eq!(mine.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), [theirs.as_str()]);
    let page = ann_b.get("/history").await.body;
    let anns = ended_rows(&page);
    assert_eq!(page_cells(&anns), cli_rows(&s, &ann, COLS, &[])[..50].to_vec());
    assert!(!page.contains(&format!(r#"data-id="{theirs}""#)) && !page.contains("lab/x"), "{page}");
    let asked = ended_rows(&ann_b.get("/history?user=lee").await.body);
    assert!(asked.is_empty(), "another project's user's work stays unseen: {asked:?}");
    drop(s);
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_window_fits_the_data_and_says_what_is_measured() {
    let f = Fixture::new(Backend::Sqlite, "dash-history-fit").await;
    let config = format!("{CONFIG}\n[telemetry]\ninterval = \"1s\"\nidle_threshold = 0.1\n");
    std::fs::write(f.dir.join("cluster.toml"), config).unwrap();
    let (smi, gpus) = fake_nvidia_smi(&f.dir);
    set_gpus(&gpus, &[(0, 80, 1000), (1, 80, 1000)]);
    let s = Server::start_with(&f.dir, &f.db.url, &[], &[("ALLOT_NVIDIA_SMI", &smi)]);
    let b = support::Browser::sign_in(&s, &f.admin).await;

    // Nothing recorded: the window asked, no data span claimed.
    let empty = b.get("/history?window=1d").await.body;
    assert!(empty.contains("Over the 1d to") && !empty.contains("of data"), "{empty}");

    let id = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "1", "--", "sleep", "300"]);
    let v = s.wait_for(&f.admin, &id, 20, |v| state(v) == "running").await;
    let submitted = v["workload"]["submit_t"].as_i64().unwrap();
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    while now() < submitted + 3 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A day asked, a few seconds recorded: the measures cover since the
    // first submission, and say so.
    let page = b.get("/history?window=1d").await.body;
    let since = allot_core::calendar::format_instant(submitted as u64).replacen('T', " ", 1).replace('Z', "");
    assert!(page.contains(&format!("since {since} UTC, ")), "since {since}: {page}");
    assert!(page.contains(" of data</strong>: the store's history begins inside the 1d"), "{page}");
    assert!(!page.contains("← Earlier"), "nothing recorded before: {page}");
    assert!(!page.contains("in buckets of 15m"), "buckets fit the span, not the day's: {page}");

    // Measured once telemetry sampled the attempt; declared apart.
    let deadline = Instant::now() + Duration::from_secs(30);
    let measured = loop {
        let page = b.get(&format!("/history?from={submitted}")).await.body;
        let cell = summary_cell(&page, "utilization, measured");
        if cell != NOT_MEASURED {
            break page;
        }
        assert!(Instant::now() < deadline, "never measured: {page}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let cell = summary_cell(&measured, "utilization, measured");
    let v: f64 = cell.trim_end_matches(" %").parse().unwrap_or_else(|_| panic!("a percentage: {cell}"));
    assert!(v > 0.0 && v <= 20.0, "1 GPU of 4 at 80 % at most: {cell}");
    let covered = summary_cell(&measured, "allocated GPU-time measured");
    assert!(covered.ends_with(" %") && covered != "0.0 %", "{covered}");
    let declared = summary_cell(&measured, "utilization, declared");
    assert!(declared.ends_with(" %") && declared != NOT_MEASURED, "{declared}");
    assert!(measured.contains("<title>utilization, measured</title>"), "the measured line drawn: {measured}");
    drop(s);
    f.finish().await;
}

/// The "Window" (last) cell of the History summary's row `name`.
fn summary_cell(html: &str, name: &str) -> String {
    let row = &html[html.find(&format!(">{name}</a></th>")).unwrap_or_else(|| panic!("no row {name}: {html}"))..];
    let row = &row[..row.find("</tr>").unwrap()];
    let cells: Vec<&str> = row.split("<td class=\"num\">").skip(1).map(|c| &c[..c.find("</td>").unwrap()]).collect();
    cells[1].to_string()
}
