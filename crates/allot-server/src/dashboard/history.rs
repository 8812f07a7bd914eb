//! History: occupancy, utilization (declared and measured apart, with
//! measures.md's combination), queue length, queue-time percentiles and
//! preemptions over a window of time (`?window=6h|1d|7d|30d`, or
//! `?from=&to=` in Unix seconds), computed from the store with the
//! definitions of docs/measures.md (`history/series.rs`,
//! `history/summary.rs`); the table of ended work `allot history` prints
//! (`history/ended.rs`); and the trace export for a what-if replay
//! (`GET /history/export`).
//!
//! * **The window fits the data.** When the store's history begins inside
//!   the window asked (a server that ran 8 minutes, shown a day), the
//!   measures cover the span it recorded, from its first submission or
//!   node event ([`crate::store::Store::history_since`]), in buckets fit
//!   for that span, and the page says so ("since … UTC, 8m of data"), so
//!   the charts are not a sliver at the edge of an empty day.
//! * **Who sees what.** Admins see the fleet. Anyone else sees the work
//!   of the accounts it may see (the API's visibility, `Principal::can_see`)
//!   against the whole fleet's capacity: its occupancy is its GPU-time
//!   over the fleet's available GPU-time, so the series of every team add
//!   up to the fleet's. Availability is always the fleet's.
//! * **The export** is what `allot trace export` writes
//!   ([`crate::export::export_store`]): it holds every account's workloads,
//!   node events and account changes, so only admins may download it.
//! * The store is read for the window only ([`crate::store::history`]);
//!   the page refreshes itself every minute.

mod ended;
mod series;
mod summary;

use std::time::Instant;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use maud::{Markup, PreEscaped, html};
use serde::Deserialize;

use allot_report::svg::{Axis, Line, LineChart, Shape, line_chart};

use crate::api::App;

use super::layout::{self, Nav, Page, dur, num};
use super::session::{Viewer, urlencode};
use series::{NodeCap, QueueStats, Series, Window, ratio};

/// The windows offered: name, span and bucket (48 to 200 buckets each).
pub const WINDOWS: [(&str, i64, i64); 4] =
    [("6h", 6 * 3600, 300), ("1d", 86_400, 900), ("7d", 7 * 86_400, 3600), ("30d", 30 * 86_400, 21_600)];

/// The longest window asked with `from` and `to`.
pub const MAX_SPAN_S: i64 = 92 * 86_400;

/// Bucket sizes a window of `from` and `to` may take: the smallest that
/// gives at most 200 buckets.
const BUCKETS: [i64; 17] = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200];

pub fn routes() -> Router<App> {
    Router::new().route("/history", get(show)).route("/history/export", get(export))
}

/// The page's query: its window, and the filters and page of its table
/// of ended work.
#[derive(Clone, Debug, Default, Deserialize)]
struct HistoryQuery {
    #[serde(default)]
    window: Option<String>,
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    to: Option<String>,
    /// Ended states, comma-separated (the table's filter).
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    user: Option<String>,
    /// An account's subtree.
    #[serde(default)]
    account: Option<String>,
    /// The table's page: workloads with an id below this one.
    #[serde(default)]
    before: Option<String>,
}

fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

impl HistoryQuery {
    fn state(&self) -> Option<&str> {
        given(&self.state)
    }

    fn user(&self) -> Option<&str> {
        given(&self.user)
    }

    fn account(&self) -> Option<&str> {
        given(&self.account)
    }

    fn before(&self) -> Option<&str> {
        given(&self.before)
    }

    /// The window's parameters as asked (kept by the table's links).
    fn window_params(&self) -> Vec<(&'static str, &str)> {
        [("window", given(&self.window)), ("from", given(&self.from)), ("to", given(&self.to))]
            .into_iter()
            .filter_map(|(k, v)| Some((k, v?)))
            .collect()
    }

    /// This page with the table's page `before` (`None`: the newest).
    fn href_ended(&self, before: Option<&str>) -> String {
        let mut parts: Vec<String> =
            self.window_params().into_iter().map(|(k, v)| format!("{k}={}", urlencode(v))).collect();
        for (k, v) in [("state", self.state()), ("user", self.user()), ("account", self.account()), ("before", before)]
        {
            if let Some(v) = v {
                parts.push(format!("{k}={}", urlencode(v)));
            }
        }
        let query = if parts.is_empty() { String::new() } else { format!("?{}", parts.join("&")) };
        format!("/history{query}#ended")
    }
}

/// The window a query asks for, ending no later than `now`; or what was
/// wrong with it.
fn window_of(q: &HistoryQuery, now: i64) -> Result<(Window, String), String> {
    let instant = |field: &str, v: &Option<String>| -> Result<Option<i64>, String> {
        match v.as_deref().filter(|s| !s.is_empty()) {
            None => Ok(None),
            Some(s) => s
                .parse::<i64>()
                .ok()
                .filter(|t| *t >= 0)
                .map(Some)
                .ok_or_else(|| format!("{field}: expected Unix seconds, got {s:?}")),
        }
    };
    let to = instant("to", &q.to)?.unwrap_or(now).min(now);
    if let Some(from) = instant("from", &q.from)? {
        let span = to - from;
        if span <= 0 {
            return Err(format!("from: must be before to ({from} ≥ {to})"));
        }
        if span > MAX_SPAN_S {
            return Err(format!("from: a window spans at most {} days", MAX_SPAN_S / 86_400));
        }
        return Ok((Window::ending(to, span, bucket_for(span)), format!("{} to {}", fmt_t(from), fmt_t(to))));
    }
    let name = q.window.as_deref().filter(|s| !s.is_empty()).unwrap_or("1d");
    let (name, span, bucket) = WINDOWS
        .into_iter()
        .find(|(n, _, _)| *n == name)
        .ok_or_else(|| format!("window: unknown window {name:?} (use {})", WINDOWS.map(|w| w.0).join(", ")))?;
    Ok((Window::ending(to, span, bucket), format!("the {name} to {}", fmt_t(to))))
}

/// The smallest bucket that cuts `span` seconds into at most 200.
fn bucket_for(span: i64) -> i64 {
    BUCKETS.into_iter().find(|b| (span + b - 1) / b <= 200).unwrap_or(86_400)
}

/// The window cut to the store's history when that begins inside it
/// (`since`: its first submission or node event): the span from there to
/// the window's end, in buckets fit for it, and the words that say so.
/// `None`: the store covers the whole window (or recorded nothing in it).
fn fit(w: &Window, since: Option<i64>) -> Option<(Window, String)> {
    let first = since.filter(|t| *t > w.from && *t < w.to)?;
    let span = w.to - first;
    let fitted = Window::ending(w.to, span, bucket_for(span));
    Some((fitted, format!("since {} UTC, {} of data", fmt_t(first).trim_end_matches('Z'), dur(span))))
}

fn fmt_t(t: i64) -> String {
    allot_core::calendar::format_instant(t.max(0) as u64).replacen('T', " ", 1)
}

async fn show(State(app): State<App>, v: Viewer, Query(q): Query<HistoryQuery>) -> Response {
    let now = crate::clock::now() as i64;
    let (w, label) = match window_of(&q, now) {
        Ok(w) => w,
        Err(e) => return layout::error_page(Some(&v), StatusCode::BAD_REQUEST, "Refused", &e),
    };
    let states = match ended::states(&q) {
        Ok(s) => s,
        Err(e) => return layout::error_page(Some(&v), StatusCode::BAD_REQUEST, "Refused", &e),
    };
    let started = Instant::now();
    let since = match app.store.history_since().await {
        Ok(t) => t,
        Err(e) => return layout::api_error(&v, e.into()),
    };
    let fitted = fit(&w, since);
    let w = fitted.as_ref().map_or(w, |f| f.0);
    let roots = v.who.visible_roots();
    let (rows, ended) =
        tokio::join!(app.store.history(w.from, w.to, roots.as_deref()), ended::rows(&app, &v, &q, states));
    let (rows, (ended, more)) = match (rows, ended) {
        (Ok(r), Ok(e)) => (r, e),
        (Err(e), _) => return layout::api_error(&v, e.into()),
        (_, Err(e)) => return layout::api_error(&v, e),
    };
    let nodes: Vec<NodeCap> =
        app.catalog.cluster().nodes.iter().map(|n| NodeCap { name: n.name.clone(), gpus: n.gpus }).collect();
    let s = Series::compute(&rows, &nodes, &w, &|a| v.who.can_see(a));
    tracing::debug!(
        attempts = rows.attempts.len(),
        workloads = rows.workloads.len(),
        ms = started.elapsed().as_millis() as u64,
        "dashboard: history"
    );
    let fleet = roots.is_none();
    let body = html! {
        h1 { "History" }
        (window_form(&q, &w, fitted.is_some()))
        p {
            @match &fitted {
                Some((_, data)) => {
                    "Over " strong.data-span { (data) } ": the store's history begins inside " (label) ", so the \
                     measures cover the span it recorded, in buckets of " (dur(w.bucket)) ". "
                }
                None => { "Over " (label) ", in buckets of " (dur(w.bucket)) ". " }
            }
            @if fleet {
                "The whole fleet's work."
            } @else {
                "The work of the accounts you may see ("
                @for (i, r) in roots.iter().flatten().enumerate() { @if i > 0 { ", " } code { (r) } }
                @if roots.as_ref().is_some_and(Vec::is_empty) { "none" }
                "), against the whole fleet's capacity: occupancy and utilization are your GPU-time over the \
                 fleet's available GPU-time (every team's add up to the fleet's); availability is the fleet's."
            }
        }
        (summary::summary(&s, &w))
        div.charts {
            (occupancy_chart(&s, &w))
            (queue_length_chart(&s, &w))
            (queue_time_chart(&s, &w))
            (preemption_chart(&s, &w))
        }
        (definitions())
        (ended::section(&q, &ended, more, now))
        h2 #export { "Trace export for a what-if replay" }
        @if v.who.is_admin() {
            p { "The store's whole history as " code { "allot trace export" } " writes it, to replay under another \
                 policy or budget with " code { "allot compare" } " (docs/server.md, \"Trace export\"):" }
            ul {
                li { a href="/history/export" download { "trace (CSV)" } }
                li { a href="/history/export?part=attempts" download { "attempts" } " — where each attempt ran" }
                li { a href="/history/export?part=events" download { "node events" } " — drains, failures, repairs" }
                li { a href="/history/export?part=accounts" download { "account changes" } " — budgets and shares set" }
            }
            p.muted { "A file of which nothing was recorded is not written by the export, and answers 404 here." }
        } @else {
            p.muted { "Only admins may download the trace export: it holds every account's workloads." }
        }
    };
    layout::page(&v, Page { title: "History".into(), nav: Nav::History, body, refresh: Some(60) })
}

/// The window's choice, and links to the windows before (none before the
/// store's history, `fitted`) and after.
fn window_form(q: &HistoryQuery, w: &Window, fitted: bool) -> Markup {
    let name = q.window.as_deref().filter(|s| !s.is_empty()).unwrap_or("1d");
    let span = w.to - w.from;
    let keep = if q.from.is_some() { String::new() } else { format!("window={name}&") };
    let earlier = if q.from.is_some() {
        format!("/history?from={}&to={}", w.from - span, w.from)
    } else {
        format!("/history?{keep}to={}", w.from)
    };
    let later_to = w.to + span;
    html! {
        form.filters method="get" action="/history" aria-label="Window" {
            label { "Window" select name="window" {
                @for (n, _, _) in WINDOWS { option value=(n) selected[q.from.is_none() && n == name] { "last " (n) } }
            } }
            button type="submit" { "Show" }
        }
        nav.pager aria-label="Windows" {
            @if !fitted { a href=(earlier) { "← Earlier" } }
            @if q.to.is_some() {
                @if q.from.is_some() {
                    a href={ "/history?from=" (w.to) "&to=" (later_to) } { "Later →" }
                } @else {
                    a href={ "/history?" (keep) "to=" (later_to) } { "Later →" }
                }
                a href={ "/history?window=" (name) } { "Now" }
            }
        }
    }
}

/// The time axis: the window's end at 0, earlier times negative, in the
/// unit that suits its span.
fn time_axis(w: &Window) -> (Axis, f64) {
    let span = (w.to - w.from) as f64;
    let (unit, div) = if span > 3.0 * 86_400.0 {
        ("days", 86_400.0)
    } else if span > 3.0 * 3600.0 {
        ("hours", 3600.0)
    } else if span > 180.0 {
        ("minutes", 60.0)
    } else {
        ("seconds", 1.0)
    };
    let label = format!("{unit} before {}", fmt_t(w.to));
    (Axis::linear(label, -span / div, 0.0, num), div)
}

/// A step line of per-bucket values.
fn steps(w: &Window, div: f64, name: &str, color: &str, dashed: bool, value: impl Fn(usize) -> f64) -> Line {
    let x = |t: i64| (t - w.to) as f64 / div;
    let n = w.buckets();
    let mut points: Vec<(f64, f64)> = (0..n).map(|i| (x(w.start(i)), value(i))).collect();
    if n > 0 {
        points.push((0.0, value(n - 1)));
    }
    Line { name: name.into(), color: color.into(), points, shape: Shape::Step, dashed }
}

fn chart(c: LineChart, definition: Markup) -> Markup {
    html! {
        figure.history-chart {
            (PreEscaped(line_chart(&c)))
            figcaption.definition { (definition) }
        }
    }
}

fn occupancy_chart(s: &Series, w: &Window) -> Markup {
    let (x, div) = time_axis(w);
    let cap = s.total_gpus as f64 * w.bucket as f64;
    let measured = s.measured_assigned_s.iter().any(|v| *v > 0.0);
    let mut lines = vec![
        steps(w, div, "availability", "#5b636d", true, |i| 100.0 * ratio(s.available_s[i], cap)),
        steps(w, div, "occupancy (GPUs allocated)", "#1f5fbf", false, |i| {
            100.0 * ratio(s.assigned_s[i], s.available_s[i])
        }),
        steps(w, div, "utilization, declared", "#1b7a3a", true, |i| 100.0 * ratio(s.declared_s[i], s.available_s[i])),
    ];
    if measured {
        lines.push(steps(w, div, "utilization, measured", "#9a5b00", false, |i| {
            100.0 * ratio(s.used_measured_s[i], s.available_s[i])
        }));
    }
    let c = LineChart {
        id: "history-occupancy".into(),
        title: "Occupancy and utilization".into(),
        x,
        y: Axis::fixed("% of available GPU-time", 0.0, 100.0, 20.0, num),
        lines,
        rules: Vec::new(),
        empty_note: None,
    };
    chart(
        c,
        html! {
            a href="#m-occupancy" { code { "occupancy" } } " = GPU-time allocated / available GPU-time; "
            a href="#m-utilization-declared" { "utilization, " strong { "declared" } } " = Σ allocated × the workload's \
             declared " code { "util" } " / available; "
            a href="#m-utilization-measured" { "utilization, " strong { "measured" } } " = Σ allocated × the attempt's \
             mean GPU utilization that GPU telemetry reported / available"
            @if !measured { " (not drawn: " (summary::NOT_MEASURED) " in this window)" }
            "; " a href="#m-availability" { code { "availability" } } " = available / the fleet's GPUs × time."
        },
    )
}

fn queue_length_chart(s: &Series, w: &Window) -> Markup {
    let (x, div) = time_axis(w);
    let top = s.waiting_s.iter().map(|v| v / w.bucket as f64).fold(0.0, f64::max);
    let c = LineChart {
        id: "history-queue".into(),
        title: "Queue length".into(),
        x,
        y: Axis::linear("workloads waiting (mean)", 0.0, top.max(1.0), num),
        lines: vec![steps(w, div, "waiting", "#1f5fbf", false, |i| s.waiting_s[i] / w.bucket as f64)],
        rules: Vec::new(),
        empty_note: (top == 0.0).then(|| "nothing waited".to_string()),
    };
    chart(
        c,
        html! {
            a href="#m-queue-length" { "Queue length" } ": workloads submitted, not ended and holding no GPUs (before \
             their first start, and between attempts once requeued), averaged over each bucket."
        },
    )
}

fn queue_time_chart(s: &Series, w: &Window) -> Markup {
    let (x, div) = time_axis(w);
    let stats: Vec<(f64, QueueStats)> = s
        .queue_times
        .iter()
        .enumerate()
        .filter_map(|(i, v)| QueueStats::of(v).map(|q| ((w.start(i) - w.to) as f64 / div, q)))
        .collect();
    let width = w.bucket as f64 / div;
    let top = stats.iter().map(|(_, q)| q.p99).max().unwrap_or(0) as f64;
    let line = |name: &str, color: &str, dashed: bool, f: fn(&QueueStats) -> i64| Line {
        name: name.into(),
        color: color.into(),
        // Each bucket's value across its bucket (a lone bucket is seen too).
        points: stats.iter().flat_map(|(x, q)| [(*x, f(q) as f64), (x + width, f(q) as f64)]).collect(),
        shape: Shape::Line,
        dashed,
    };
    let c = LineChart {
        id: "history-queue-time".into(),
        title: "Queue time by first start".into(),
        x,
        y: Axis::log_duration("queue time (log)", top),
        lines: vec![
            line("p50", "#1f5fbf", false, |q| q.p50),
            line("p90", "#9a5b00", false, |q| q.p90),
            line("p99", "#b3261e", true, |q| q.p99),
        ],
        rules: Vec::new(),
        empty_note: stats.is_empty().then(|| "nothing started".to_string()),
    };
    chart(
        c,
        html! {
            a href="#m-queue-time" { "Queue time" } " = first start − submit, of the workloads whose first attempt \
             started in the bucket (a requeued workload keeps its first start); nearest-rank percentiles."
        },
    )
}

fn preemption_chart(s: &Series, w: &Window) -> Markup {
    let (x, div) = time_axis(w);
    let top = s.preemptions.iter().copied().max().unwrap_or(0) as f64;
    let c = LineChart {
        id: "history-preemptions".into(),
        title: "Preemptions".into(),
        x,
        y: Axis::linear("attempts preempted per bucket", 0.0, top.max(1.0), num),
        lines: vec![steps(w, div, "preempted", "#b3261e", false, |i| s.preemptions[i] as f64)],
        rules: Vec::new(),
        empty_note: (top == 0.0).then(|| "no preemption".to_string()),
    };
    chart(
        c,
        html! {
            a href="#m-preemptions" { code { "preemptions" } } " = attempts that ended " code { "preempted" }
            " (policy preemption or drain), by the bucket they ended in."
        },
    )
}

/// The measures' definitions (docs/measures.md), each the target of the
/// links under the charts.
fn definitions() -> Markup {
    html! {
        h2 #definitions { "Definitions" }
        p.muted { "As docs/measures.md defines them for the simulator's report, computed from the store's attempts, \
                   workloads and node events; per bucket, and over the window." }
        dl.facts.definitions {
            dt #m-availability { code { "availability" } }
            dd { "Available GPU-time / (the fleet's GPUs × time). Available GPU-time is ∫ in-service GPUs: a node is in \
                  service while up, and while draining until the last attempt it held at the drain ends (MNT-1); \
                  failed (MNT-2) or drained it is not; from the node events (drain, undrain, fail, repair)." }
            dt #m-occupancy { code { "occupancy" } }
            dd { "Assigned GPU-time / available GPU-time. Assigned: Σ over attempts of the time they held GPUs in the \
                  bucket × their GPUs (an attempt still running counts until now)." }
            dt #m-utilization-declared { "utilization, declared" }
            dd { "Σ over attempts of GPU-time allocated × the workload's declared " code { "util" } " (the submitter's \
                  estimate, 1 unless given) / available GPU-time: what the work said it would use." }
            dt #m-utilization-measured { "utilization, measured" }
            dd { "Σ over the attempts GPU telemetry sampled of GPU-time allocated × their measured mean utilization \
                  (the driver's share of time a kernel ran) / available GPU-time; beside it the share of the allocated \
                  GPU-time telemetry covered (what is not covered is not in the measured figure). Where no telemetry \
                  was reported it reads \"" (summary::NOT_MEASURED) "\", never 0 %; "
                 code { "allot history" } "'s MEASURED UTIL column is the same telemetry per workload." }
            dt #m-utilization { code { "utilization" } " (measured where reported, else declared)" }
            dd { "docs/measures.md's utilization, as the simulator's report and the trace export use it: Σ over attempts \
                  of GPU-time allocated × utilization / available GPU-time, with the attempt's measured mean where \
                  telemetry sampled it and its declared " code { "util" } " where not (\"Live utilization: measured vs \
                  declared\")." }
            dt #m-queue-length { "queue length" }
            dd { "Not a measure of the report: the number of workloads waiting (submitted, not ended, holding no GPUs), \
                  averaged over the bucket." }
            dt #m-queue-time { "queue time" }
            dd { "First start − submit, over the workloads whose first attempt started in the bucket (or window); \
                  percentiles by nearest rank (the value of rank ⌈p/100 × n⌉)." }
            dt #m-preemptions { code { "preemptions" } }
            dd { "Attempts that ended " code { "preempted" } " (policy preemption or drain) in the bucket." }
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
struct ExportQuery {
    #[serde(default)]
    part: Option<String>,
}

/// `GET /history/export[?part=attempts|events|accounts]`: a file of the
/// trace export (admins only), as an attachment.
async fn export(State(app): State<App>, v: Viewer, Query(q): Query<ExportQuery>) -> Response {
    if !v.who.is_admin() {
        return layout::error_page(
            Some(&v),
            StatusCode::FORBIDDEN,
            "Not allowed",
            &format!(
                "only admins may download the trace export (it holds every account's workloads); {} is a {}",
                v.who.name,
                v.who.role.as_str()
            ),
        );
    }
    let part = q.part.as_deref().unwrap_or("trace");
    if !["trace", "attempts", "events", "accounts"].contains(&part) {
        return layout::error_page(
            Some(&v),
            StatusCode::BAD_REQUEST,
            "Refused",
            &format!("part: unknown part {part:?} (use trace, attempts, events or accounts)"),
        );
    }
    let dir = std::env::temp_dir().join(format!("allot-export-{}", &crate::auth::new_token()[..16]));
    let file = async {
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let out = dir.join("trace.csv");
        let sum = crate::export::export_store(&app.store, &out).await.map_err(|e| e.to_string())?;
        let path = match part {
            "attempts" => sum.attempts_path,
            "events" => sum.events_path,
            "accounts" => sum.account_changes_path,
            _ => Some(out),
        };
        match path {
            None => Ok(None),
            Some(p) => {
                std::fs::read(&p).map(|b| Some((b, sum.t0))).map_err(|e| format!("cannot read {}: {e}", p.display()))
            }
        }
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    match file {
        Ok(Some((bytes, t0))) => {
            let name = if part == "trace" { "allot-trace.csv".to_string() } else { format!("allot-trace.{part}.csv") };
            let mut r = bytes.into_response();
            let h = r.headers_mut();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/csv; charset=utf-8"));
            h.insert(
                header::CONTENT_DISPOSITION,
                HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")).expect("an ASCII file name"),
            );
            h.insert("x-allot-trace-t0", HeaderValue::from(t0));
            super::html::security_headers(h);
            r
        }
        Ok(None) => layout::error_page(
            Some(&v),
            StatusCode::NOT_FOUND,
            "Nothing recorded",
            &format!("the export writes no {part} file: nothing of that kind was recorded"),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "dashboard: trace export failed");
            layout::error_page(
                Some(&v),
                StatusCode::SERVICE_UNAVAILABLE,
                "Unavailable",
                &format!("the export failed: {e}"),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(window: Option<&str>, from: Option<&str>, to: Option<&str>) -> HistoryQuery {
        HistoryQuery {
            window: window.map(Into::into),
            from: from.map(Into::into),
            to: to.map(Into::into),
            ..Default::default()
        }
    }

    /// A day asked of a store that recorded 8 minutes: the 8 minutes, in
    /// buckets fit for them, said; a store older than the window, or with
    /// nothing in it, leaves the window as asked.
    #[test]
    fn the_window_fits_the_store_history() {
        let now = 10_000_000;
        let (w, _) = window_of(&q(Some("1d"), None, None), now).unwrap();
        let (f, words) = fit(&w, Some(now - 480)).expect("cut to the data");
        assert_eq!((f.to, f.from, f.bucket), (now, now - 480, 5), "96 buckets of 5 s");
        assert_eq!(words, format!("since {} UTC, 8m of data", fmt_t(now - 480).trim_end_matches('Z')));
        assert_eq!(fit(&w, Some(now - 2 * 86_400)), None, "the store covers the window");
        assert_eq!(fit(&w, None), None, "nothing recorded");
        assert_eq!(fit(&w, Some(now)), None, "nothing recorded in the window");
    }

    #[test]
    fn the_table_links_keep_the_window_and_filters() {
        let mut x = q(Some("6h"), None, None);
        x.state = Some("failed".into());
        x.account = Some(" lab/x ".into());
        assert_eq!(x.href_ended(Some("41")), "/history?window=6h&state=failed&account=lab/x&before=41#ended");
        assert_eq!(q(None, None, None).href_ended(None), "/history#ended");
    }

    /// Every offered window has 48 to 200 buckets; `from`/`to` pick a
    /// bucket giving at most 200; bad values name their field.
    #[test]
    fn windows_and_their_buckets() {
        for (name, span, bucket) in WINDOWS {
            let n = span / bucket;
            assert!((48..=200).contains(&n), "{name}: {n} buckets");
        }
        let now = 10_000_000;
        let (w, _) = window_of(&q(None, None, None), now).unwrap();
        assert_eq!((w.to, w.to - w.from, w.bucket), (now, 86_400, 900), "the default is the last day");
        let (w, _) = window_of(&q(Some("6h"), None, Some("9000000")), now).unwrap();
        assert_eq!((w.from, w.to), (9_000_000 - 6 * 3600, 9_000_000));
        let (w, _) = window_of(&q(None, Some("9999990"), Some("99999999")), now).unwrap();
        assert_eq!((w.from, w.to, w.bucket), (9_999_990, now, 1), "the end is at most now");
        let e = window_of(&q(None, Some("0"), None), now).unwrap_err();
        assert!(e.starts_with("from:") && e.contains("at most 92 days"), "{e}");
        let (w, _) = window_of(&q(None, Some(&(now - MAX_SPAN_S).to_string()), None), now).unwrap();
        assert!(w.buckets() <= 200 && w.buckets() >= 48, "{w:?}");
        for (bad, field) in [
            (q(Some("2h"), None, None), "window:"),
            (q(None, Some("x"), None), "from:"),
            (q(None, None, Some("-1")), "to:"),
            (q(None, Some("9999999"), Some("9999999")), "from:"),
        ] {
            let e = window_of(&bad, now).unwrap_err();
            assert!(e.starts_with(field), "{bad:?}: {e}");
        }
    }
}
