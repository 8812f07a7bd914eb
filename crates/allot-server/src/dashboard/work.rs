//! "My work": the caller's workloads, newest first, with why the pending
//! ones wait; a workload's page (attempts, preemptions and why,
//! utilization over time, the tail of its log); cancelling from there.
//! Everything is read and changed through the API's handlers.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use maud::{Markup, html};
use serde::Deserialize;

use crate::api::extract::Path;
use crate::api::{App, Auth, workloads};
use crate::auth::Role;
use crate::client::columns::{display_id, shown_name};
use crate::views::{AttemptView, WorkloadDetail, WorkloadView};

use super::layout::{self, Nav, Page, csrf, dur, reason, state, when};
use super::session::{Flash, Viewer, after_change};

/// Workloads per page of the list.
pub const PAGE: usize = 50;

pub fn routes() -> Router<App> {
    Router::new()
        .route("/", get(list))
        .route("/workloads/{id}", get(show))
        .route("/workloads/{id}/log", get(log))
        .route("/workloads/{id}/cancel", post(cancel))
}

/// The filters of the list, as its query string carries them.
#[derive(Clone, Debug, Default, Deserialize)]
struct ListQuery {
    /// `mine` (what the caller submitted) or `all` (everything it sees).
    #[serde(default)]
    who: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    account: Option<String>,
    #[serde(default)]
    class: Option<String>,
    /// The elements of this array (ARR-1).
    #[serde(default)]
    array: Option<String>,
    #[serde(default)]
    before: Option<String>,
}

impl ListQuery {
    fn mine(&self, role: Role) -> bool {
        match self.who.as_deref() {
            Some("all") => false,
            Some("mine") => true,
            _ => role == Role::Researcher,
        }
    }

    /// This query with `before` replaced (the pager's links).
    fn with_before(&self, before: Option<&str>) -> String {
        let mut parts = Vec::new();
        let filters = [
            ("who", &self.who),
            ("state", &self.state),
            ("account", &self.account),
            ("class", &self.class),
            ("array", &self.array),
        ];
        for (k, v) in filters {
            if let Some(v) = v.as_deref().filter(|v| !v.is_empty()) {
                parts.push(format!("{k}={}", super::session::urlencode(v)));
            }
        }
        if let Some(b) = before {
            parts.push(format!("before={b}"));
        }
        if parts.is_empty() { "/".to_string() } else { format!("/?{}", parts.join("&")) }
    }
}

async fn list(State(app): State<App>, v: Viewer, Query(q): Query<ListQuery>) -> Response {
    let mine = q.mine(v.who.role);
    let mut api_q: HashMap<String, String> = HashMap::new();
    api_q.insert("limit".into(), (PAGE + 1).to_string());
    if mine {
        api_q.insert("user".into(), v.who.name.clone());
    }
    let filters =
        [("state", &q.state), ("account", &q.account), ("class", &q.class), ("array", &q.array), ("before", &q.before)];
    for (k, val) in filters {
        if let Some(val) = val.as_deref().filter(|s| !s.is_empty()) {
            api_q.insert(k.into(), val.to_string());
        }
    }
    let rows = match workloads::list(State(app.clone()), Auth(v.who.clone()), Query(api_q)).await {
        Ok(Json(rows)) => rows,
        Err(e) => return layout::api_error(&v, e),
    };
    let more = rows.len() > PAGE;
    let rows = &rows[..rows.len().min(PAGE)];
    let now = crate::clock::now() as i64;
    let title = if mine { "My work" } else { "Work" };
    let body = html! {
        h1 { (title) }
        form.filters method="get" action="/" aria-label="Filter workloads" {
            label { "Whose" select name="who" {
                option value="mine" selected[mine] { "Mine" }
                option value="all" selected[!mine] { "Everything I may see" }
            } }
            label { "State" select name="state" {
                option value="" { "any" }
                @for s in crate::states::PHASES {
                    option value=(s.as_str()) selected[q.state.as_deref() == Some(s.as_str())] { (s.as_str()) }
                }
            } }
            label { "Account (subtree)" input type="text" name="account" value=[q.account.as_deref()] placeholder="e.g. lab/nlp"; }
            label { "Class" select name="class" {
                option value="" { "any" }
                @for c in ["batch", "interactive", "service"] {
                    option value=(c) selected[q.class.as_deref() == Some(c)] { (c) }
                }
            } }
            button type="submit" { "Show" }
        }
        @if rows.is_empty() {
            p.muted { "No workloads match." }
        } @else {
            (workload_table(rows, now))
        }
        nav.pager aria-label="Pages" {
            @if q.before.is_some() { a href=(q.with_before(None)) { "← Newest" } }
            @if more { @if let Some(last) = rows.last() { a href=(q.with_before(Some(&last.id))) rel="next" { "Older →" } } }
        }
    };
    layout::page(&v, Page { title: title.into(), nav: Nav::Work, body, refresh: Some(5) })
}

/// Seconds a workload has run in its current attempt, or has waited.
fn elapsed(w: &WorkloadView, now: i64) -> Markup {
    match (w.state.as_str(), w.started_t) {
        ("running" | "stopping", Some(t)) => html! { "running " (dur(now - t)) },
        ("pending", _) => html! { "waiting " (dur(now - w.submit_t)) },
        (_, _) => match w.end_t {
            Some(e) => html! { "took " (dur(e - w.submit_t)) },
            None => html! { "—" },
        },
    }
}

/// The table of workloads shared by the work and queue pages.
pub fn workload_table(rows: &[WorkloadView], now: i64) -> Markup {
    html! {
        div.table-wrap { table {
            caption.muted { (allot_core::words::count(rows.len() as u64, "workload")) ", newest first" }
            thead { tr {
                th scope="col" { "Id" } th scope="col" { "Name" } th scope="col" { "Account" } th scope="col" { "User" }
                th scope="col" { "Class" } th scope="col" { "State" } th.num scope="col" { "GPUs" }
                th scope="col" { "Cluster / nodes" } th scope="col" { "Elapsed" } th scope="col" { "Why" }
            } }
            tbody {
                @for w in rows {
                    tr {
                        td { a href={ "/workloads/" (w.id) } { (display_id(w)) } }
                        td { (shown_name(w)) }
                        td { code { (w.account) } }
                        td { (w.user) }
                        td { (w.class) }
                        td { (state(&w.state)) }
                        td.num { (w.gpus) }
                        td {
                            @if let Some(c) = &w.cluster { (c) ": " }
                            (w.on_nodes.join(", "))
                        }
                        td { (elapsed(w, now)) }
                        td.reason { @if let Some(r) = &w.reason { (reason(r)) } }
                    }
                }
            }
        } }
    }
}

async fn detail(app: &App, v: &Viewer, id: &str) -> Result<WorkloadDetail, Response> {
    match workloads::show(State(app.clone()), Auth(v.who.clone()), Path(id.to_string())).await {
        Ok(Json(d)) => Ok(d),
        Err(e) => Err(layout::api_error(v, e)),
    }
}

async fn show(State(app): State<App>, v: Viewer, Path(id): Path<String>) -> Response {
    let d = match detail(&app, &v, &id).await {
        Ok(d) => d,
        Err(r) => return r,
    };
    let w = &d.workload;
    let now = crate::clock::now() as i64;
    let samples = match id.parse::<i64>() {
        Ok(seq) => app.store.gpu_samples_of(seq).await.unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    // The API decides (a researcher cancels only what its own token
    // submitted); the button is offered where it can succeed.
    let can_cancel = !is_ended(&w.state)
        && !w.cancel_requested
        && (v.who.can_cancel(&w.account, None) || (v.who.role == Role::Researcher && w.user == v.who.name));
    let title = format!("Workload {}", display_id(w));
    let body = html! {
        h1 { "Workload " (display_id(w)) " · " (shown_name(w)) " " (state(&w.state)) }
        @if let Some(why) = &d.why { p.reason { strong { "Why: " } (reason(why)) } }
        dl.facts {
            dt { "Account" } dd { code { (w.account) } }
            dt { "User" } dd { (w.user) }
            dt { "Class" } dd { (w.class) }
            dt { "Shape" } dd { (allot_core::words::count(w.gpus, "GPU")) @if w.nodes > 0 { " on " (allot_core::words::count(w.nodes, "node")) } @if let Some(t) = &w.gpu_type { " of " (t) } }
            @if !w.clusters.is_empty() { dt { "May run on" } dd { (w.clusters.join(", ")) } }
            dt { "Submitted" } dd { (when(w.submit_t)) " (" (elapsed(w, now)) ")" }
            @if let Some(e) = w.end_t { dt { "Ended" } dd { (when(e)) } }
            dt { "Expected run time" } dd { (dur(w.expected_duration_s as i64)) }
            dt { "Time limit" } dd { @if let Some(l) = w.time_limit_s { (dur(l as i64)) " per attempt" } @else { "none" } }
            dt { "Checkpoints" } dd {
                @if w.checkpoint_interval_s > 0 { "every " (dur(w.checkpoint_interval_s as i64)) } @else { "none declared" }
                @if w.checkpoint_on_signal { "; saves when signalled (CON-8)" }
            }
            dt { "Measured GPU utilization" } dd { @match w.measured_util { Some(u) => (layout::pct(u)), None => "not measured" } }
            dt { "Command" } dd { code { (w.command.join(" ")) } }
            @if let Some(d) = &w.workdir { dt { "Directory" } dd { code { (d) } } }
            dt { "Failures" } dd { (w.failures) " of " (w.retries) " retries" }
            @if let Some(a) = &w.array {
                dt { "Array" } dd {
                    a href={ "/?array=" (a.id) } { (a.id) } ": element " (a.index) " of " (a.count)
                    @if let Some(l) = a.limit { ", at most " (l) " at once (" a href="/rules#ARR-1" { "ARR-1" } ")" }
                }
            }
            @if let Some(dep) = &w.dependency { dt { "After" } dd { code { (dep) } " (" a href="/rules#DEP-1" { "DEP-1" } ")" } }
            @if w.held { dt { "Held" } dd { "until released: " code { "allot release " (w.id) } " (" a href="/rules#HOLD-1" { "HOLD-1" } ")" } }
        }
        @if can_cancel {
            form.inline method="post" action={ "/workloads/" (w.id) "/cancel" } data-confirm={ "Cancel workload " (w.id) "?" } {
                (csrf(&v))
                button.danger type="submit" { "Cancel workload" }
            }
        }
        h2 { "Attempts" }
        @if d.attempts.is_empty() { p.muted { "It has not started yet." } } @else { (attempt_table(&d.attempts, now)) }
        h2 { "GPU utilization over time" }
        (util_chart(&samples, &d.attempts))
        @if let Some(a) = d.attempts.last() {
            h2 #log-heading { "Log of attempt " (a.attempt) " " span.muted id="log-status" { @if a.end_t.is_some() { "ended" } @else { "following" } } }
            pre.log id="log" tabindex="0" aria-labelledby="log-heading"
                data-follow={ "/workloads/" (w.id) "/log?attempt=" (a.attempt) } data-offset="0" {}
        }
    };
    layout::page(&v, Page { title, nav: Nav::Work, body, refresh: Some(5) })
}

fn is_ended(s: &str) -> bool {
    matches!(s, "finished" | "failed" | "cancelled" | "rejected")
}

fn attempt_table(attempts: &[AttemptView], now: i64) -> Markup {
    html! {
        div.table-wrap { table {
            thead { tr {
                th.num scope="col" { "#" } th scope="col" { "State" } th scope="col" { "Where" } th scope="col" { "Started" }
                th scope="col" { "Ran" } th scope="col" { "Why it started" } th scope="col" { "Stopped, and why" }
                th scope="col" { "Outcome" } th scope="col" { "GPU use" }
            } }
            tbody { @for a in attempts { tr {
                td.num { (a.attempt) }
                td { (state(&a.state)) }
                td { @if let Some(c) = &a.cluster { (c) ": " }
                    @for (i, n) in a.allocation.iter().enumerate() { @if i > 0 { ", " } (n.node) " [" (n.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",")) "]" } }
                td { (when(a.start_t)) }
                td { (dur(a.end_t.unwrap_or(now) - a.start_t)) }
                td.reason { (reason(&a.start_reason)) }
                td.reason { @if let Some(r) = &a.signal_reason { (reason(r)) } @if let Some(t) = a.signal_t { " (" (when(t)) ")" } }
                td { (a.outcome.as_deref().unwrap_or("—")) @if let Some(c) = a.exit_code { ", exit " (c) } }
                td { @match &a.telemetry { Some(t) => { (layout::pct(t.util_mean)) " mean, idle " (dur(t.idle_s as i64)) }, None => "not measured" } }
            } } }
        } }
    }
}

/// Utilization over time, one line per attempt, from the stored samples.
fn util_chart(samples: &[crate::store::GpuSample], attempts: &[AttemptView]) -> Markup {
    use allot_report::svg::{Axis, Line, LineChart, Shape, line_chart};
    if samples.is_empty() {
        return html! { p.muted { "No GPU telemetry for this workload (none was sampled, or its GPUs do not report it)." } };
    }
    let t0 = attempts.first().map_or(samples[0].t, |a| a.start_t).min(samples[0].t);
    let t1 = samples.iter().map(|s| s.t).max().unwrap_or(t0).max(t0 + 60);
    let span = (t1 - t0) as f64;
    let (unit, div) = layout::time_unit(span);
    let palette = ["#1f5fbf", "#b3261e", "#1b7a3a", "#9a5b00", "#6b3fa0"];
    let lines: Vec<Line> = attempts
        .iter()
        .enumerate()
        .map(|(i, a)| Line {
            name: format!("attempt {}", a.attempt),
            color: palette[i % palette.len()].to_string(),
            shape: Shape::Line,
            dashed: false,
            points: samples
                .iter()
                .filter(|s| s.attempt == a.attempt)
                .map(|s| ((s.t - t0) as f64 / div, s.util * 100.0))
                .collect(),
        })
        .filter(|l| !l.points.is_empty())
        .collect();
    let chart = LineChart {
        id: "util".into(),
        title: "Mean GPU utilization of its GPUs".into(),
        x: Axis::linear(format!("{unit} since the first start"), 0.0, span / div, layout::num),
        y: Axis::fixed("utilization (%)", 0.0, 100.0, 20.0, layout::num),
        lines,
        rules: Vec::new(),
        empty_note: None,
    };
    html! { div.charts { (maud::PreEscaped(line_chart(&chart))) } }
}

#[derive(Deserialize)]
struct LogQuery {
    #[serde(default)]
    attempt: Option<String>,
    #[serde(default)]
    offset: Option<String>,
}

async fn log(State(app): State<App>, v: Viewer, Path(id): Path<String>, Query(q): Query<LogQuery>) -> Response {
    let mut api_q = HashMap::new();
    if let Some(a) = q.attempt {
        api_q.insert("attempt".to_string(), a);
    }
    if let Some(o) = q.offset {
        api_q.insert("offset".to_string(), o);
    }
    match workloads::log(State(app), Auth(v.who.clone()), Path(id), Query(api_q)).await {
        Ok(chunk) => chunk.into_response(),
        Err(e) => e.into_response(),
    }
}

#[derive(Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

async fn cancel(State(app): State<App>, v: Viewer, Path(id): Path<String>, Form(f): Form<CsrfForm>) -> Response {
    if let Err(r) = v.check_csrf(&f.csrf) {
        return r;
    }
    let to = format!("/workloads/{}", super::session::urlencode(&id));
    match workloads::cancel(State(app), Auth(v.who.clone()), Path(id.clone())).await {
        Ok(_) => after_change(&v, &to, Flash { ok: true, text: format!("workload {id} is cancelled") }),
        Err(e) => after_change(&v, &to, Flash { ok: false, text: e.error }),
    }
}
