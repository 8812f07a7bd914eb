//! The History page's table of ended work: the rows `allot history`
//! prints, read as it reads them (the API's `GET /v1/workloads` of the
//! ended states, called in-process with the viewer's principal, so the page
//! shows exactly what the API and the CLI would show that principal: a
//! researcher its projects' work, a manager its subtrees', never others'),
//! and written cell for cell as the CLI writes them
//! ([`crate::client::columns::Col::cell`]): RAN and WAITED are sacct's sense
//! over every attempt, not a second derivation.
//!
//! Newest first, [`PAGE`] a page with an "Older" link (`before=`, the API's
//! paging by id); filters `state`, `user` and `account` (a subtree) as the
//! query string carries them. One bounded read of the store per request.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Query, State};
use maud::{Markup, html};

use crate::api::{ApiError, App, Auth, workloads};
use crate::client::columns::Col;
use crate::views::WorkloadView;

use super::super::layout::{reason, state};
use super::super::session::Viewer;
use super::super::work::PAGE;
use super::HistoryQuery;

/// The ended states, as `allot history` asks for them by default.
pub const ENDED: [&str; 4] = ["finished", "failed", "cancelled", "rejected"];

/// The table's columns: the CLI's column and the page's header.
const COLUMNS: [(Col, &str); 15] = [
    (Col::Id, "Id"),
    (Col::Name, "Name"),
    (Col::User, "User"),
    (Col::Account, "Account"),
    (Col::State, "State"),
    (Col::Gpus, "GPUs"),
    (Col::Submitted, "Submitted (UTC)"),
    (Col::Started, "First started (UTC)"),
    (Col::Ended, "Ended (UTC)"),
    (Col::Waited, "Waited"),
    (Col::Ran, "Ran"),
    (Col::Attempts, "Attempts"),
    (Col::GpuHours, "GPU-hours"),
    (Col::Util, "Measured GPU util"),
    (Col::Reason, "Why it ended (exit, reason)"),
];

/// The `state` filter: ended states only, comma-separated; all of them
/// when none is asked. Anything else names the field.
pub fn states(q: &HistoryQuery) -> Result<String, String> {
    let Some(asked) = q.state() else { return Ok(ENDED.join(",")) };
    for s in asked.split(',').map(str::trim) {
        if !ENDED.contains(&s) {
            return Err(format!("state: {s:?} is not an ended state (the table lists {})", ENDED.join(", ")));
        }
    }
    Ok(asked.to_string())
}

/// One page of ended work and whether older work follows, through the
/// API's listing with the viewer's principal.
pub async fn rows(
    app: &App,
    v: &Viewer,
    q: &HistoryQuery,
    states: String,
) -> Result<(Vec<WorkloadView>, bool), ApiError> {
    let mut api_q: HashMap<String, String> = HashMap::new();
    api_q.insert("state".into(), states);
    api_q.insert("limit".into(), (PAGE + 1).to_string());
    for (k, val) in [("user", q.user()), ("account", q.account()), ("before", q.before())] {
        if let Some(val) = val {
            api_q.insert(k.into(), val.to_string());
        }
    }
    let Json(mut rows) = workloads::list(State(app.clone()), Auth(v.who.clone()), Query(api_q)).await?;
    let more = rows.len() > PAGE;
    rows.truncate(PAGE);
    Ok((rows, more))
}

/// The section: what it lists, its filters, the table and the pager.
pub fn section(q: &HistoryQuery, rows: &[WorkloadView], more: bool, now: i64) -> Markup {
    html! {
        h2 #ended { "Ended work" }
        p.hint {
            "The workloads you may see that ended, newest first: the rows " code { "allot history" } " prints, whatever \
             the window above. " strong { "Waited" } " is its life from submission to its end less the time its attempts \
             held GPUs (its first wait and each wait after a requeue or preemption); " strong { "ran" } " is the time \
             its attempts held GPUs, summed (sacct's wait and Elapsed over every attempt). Measured GPU utilization is \
             GPU telemetry's, over its attempts."
        }
        (filters(q))
        @if rows.is_empty() {
            p.muted { "No ended workload matches." }
        } @else {
            (table(rows, now))
        }
        nav.pager aria-label="Pages of ended work" {
            @if q.before().is_some() { a href=(q.href_ended(None)) { "← Newest" } }
            @if more { @if let Some(last) = rows.last() { a href=(q.href_ended(Some(&last.id))) rel="next" { "Older →" } } }
        }
    }
}

fn filters(q: &HistoryQuery) -> Markup {
    html! {
        form.filters method="get" action="/history#ended" aria-label="Filter ended work" {
            @for (k, val) in q.window_params() { input type="hidden" name=(k) value=(val); }
            label { "State" select name="state" {
                option value="" { "any ended" }
                @for s in ENDED { option value=(s) selected[q.state() == Some(s)] { (s) } }
            } }
            label { "User" input type="text" name="user" value=[q.user()] placeholder="e.g. ann"; }
            label { "Account (subtree)" input type="text" name="account" value=[q.account()] placeholder="e.g. lab/nlp"; }
            button type="submit" { "Show" }
        }
    }
}

/// A cell of the table: the CLI's text, with links, times and rule ids
/// marked up.
fn cell(c: Col, w: &WorkloadView, now: i64) -> Markup {
    let text = c.cell(w, now);
    let instant = match c {
        Col::Submitted => Some(w.submit_t),
        Col::Started => w.first_start_t,
        Col::Ended => w.end_t,
        _ => None,
    };
    html! {
        @match (c, instant) {
            (Col::Id, _) => a href={ "/workloads/" (w.id) } { (text) },
            (Col::Account, _) => code { (text) },
            (Col::State, _) => (state(&text)),
            (Col::Util, _) if w.measured_util.is_none() => span.muted { "not measured" },
            (Col::Reason, _) => (reason(&text)),
            (_, Some(t)) => time datetime=(allot_core::calendar::format_instant(t.max(0) as u64)) { (text) },
            _ => (text),
        }
    }
}

fn table(rows: &[WorkloadView], now: i64) -> Markup {
    let numeric = |c: Col| matches!(c, Col::Gpus | Col::Waited | Col::Ran | Col::Attempts | Col::GpuHours | Col::Util);
    html! {
        div.table-wrap { table.ended {
            caption.muted { (allot_core::words::count(rows.len() as u64, "ended workload")) ", newest first" }
            thead { tr { @for (c, head) in COLUMNS {
                th.num[numeric(c)] scope="col" { (head) }
            } } }
            tbody { @for w in rows {
                tr data-id=(w.id) { @for (c, _) in COLUMNS {
                    td.num[numeric(c)] .reason[c == Col::Reason] data-col=(c.name()) { (cell(c, w, now)) }
                } }
            } }
        } }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(state: Option<&str>) -> HistoryQuery {
        HistoryQuery { state: state.map(Into::into), ..Default::default() }
    }

    #[test]
    fn the_state_filter_takes_ended_states_only() {
        assert_eq!(states(&q(None)).unwrap(), "finished,failed,cancelled,rejected");
        assert_eq!(states(&q(Some(""))).unwrap(), "finished,failed,cancelled,rejected", "empty: any ended");
        assert_eq!(states(&q(Some("failed,cancelled"))).unwrap(), "failed,cancelled");
        let e = states(&q(Some("failed,running"))).unwrap_err();
        assert!(e.starts_with("state: \"running\" is not an ended state"), "{e}");
    }
}
