//! The queue: the pending work the viewer may see, grouped by account and
//! class (one aggregate query), what would start next (what the passes
//! preempted running work for, kept by the scheduler: `scheduler/next.rs`),
//! and the pending workloads, 50 a page, with their reasons.
//!
//! Nothing here runs a pass or explains the whole queue: the groups are
//! counted by the store, the list is one page of the API's listing, and
//! the scheduler answers "next" from what its passes already noted, so a
//! page over 10,000 pending workloads costs three bounded reads and the
//! scheduler's passes do not wait for it.

use std::collections::HashMap;

use allot_core::cluster::ClusterId;
use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::{Json, Router};
use maud::{Markup, html};
use serde::Deserialize;

use crate::api::{ApiError, App, Auth, ask, cluster_filter, workloads};
use crate::auth::within;
use crate::scheduler::{Msg, NextStart};
use crate::store::usage::PendingGroup;
use crate::store::{ClusterFilter, WorkloadFilter};
use crate::views::WorkloadView;

use super::layout::{self, Nav, Page, dur, reason, when};
use super::session::{Viewer, urlencode};
use super::work::{PAGE, workload_table};

pub fn routes() -> Router<App> {
    Router::new().route("/queue", get(queue))
}

/// The filters of the page, as its query string carries them.
#[derive(Clone, Debug, Default, Deserialize)]
struct QueueQuery {
    #[serde(default)]
    account: Option<String>,
    #[serde(default)]
    class: Option<String>,
    #[serde(default)]
    cluster: Option<String>,
    #[serde(default)]
    before: Option<String>,
}

impl QueueQuery {
    fn account(&self) -> Option<&str> {
        self.account.as_deref().map(str::trim).filter(|s| !s.is_empty())
    }

    fn class(&self) -> Option<&str> {
        self.class.as_deref().filter(|s| !s.is_empty())
    }

    fn cluster(&self) -> Option<&str> {
        self.cluster.as_deref().filter(|s| !s.is_empty())
    }

    /// This page's address with other filters or another `before`.
    fn href(&self, account: Option<&str>, class: Option<&str>, before: Option<&str>) -> String {
        let mut parts = Vec::new();
        for (k, v) in [("account", account), ("class", class), ("cluster", self.cluster()), ("before", before)] {
            if let Some(v) = v {
                parts.push(format!("{k}={}", urlencode(v)));
            }
        }
        if parts.is_empty() { "/queue".to_string() } else { format!("/queue?{}", parts.join("&")) }
    }
}

/// The store's filter of the clusters `names` (FLEET-1), as the API's
/// listing reads a `cluster=` parameter; `None`: every cluster.
fn clusters_of(app: &App, names: Option<&str>) -> Result<Option<Vec<ClusterFilter>>, ApiError> {
    let Some(names) = names else { return Ok(None) };
    let set = cluster_filter(app, names)?;
    let c = app.catalog.cluster();
    if !c.is_fleet() || set.is_any() {
        return Ok(None);
    }
    let of = |id: ClusterId| {
        let mut gpu_types: Vec<String> =
            c.pools.iter().filter(|p| p.cluster == id).map(|p| c.gpu_types[p.gpu.0 as usize].name.clone()).collect();
        gpu_types.sort();
        gpu_types.dedup();
        ClusterFilter { name: c.cluster_name(id).to_string(), gpu_types }
    };
    Ok(Some((0..c.clusters.len()).map(|i| ClusterId(i as u16)).filter(|&i| set.contains(i)).map(of).collect()))
}

async fn groups(app: &App, v: &Viewer, q: &QueueQuery) -> Result<Vec<PendingGroup>, ApiError> {
    let f = WorkloadFilter {
        visible: v.who.visible_roots(),
        account: q.account().map(String::from),
        class: q.class().map(String::from),
        clusters: clusters_of(app, q.cluster())?,
        ..Default::default()
    };
    Ok(app.store.pending_groups(&f).await?)
}

async fn page_rows(app: &App, v: &Viewer, q: &QueueQuery) -> Result<Vec<WorkloadView>, ApiError> {
    let mut api_q: HashMap<String, String> = HashMap::new();
    api_q.insert("state".into(), "pending".into());
    api_q.insert("limit".into(), (PAGE + 1).to_string());
    for (k, val) in [("account", q.account()), ("class", q.class()), ("cluster", q.cluster())] {
        if let Some(val) = val {
            api_q.insert(k.into(), val.to_string());
        }
    }
    if let Some(b) = q.before.as_deref().filter(|s| !s.is_empty()) {
        api_q.insert("before".into(), b.to_string());
    }
    let Json(rows) = workloads::list(State(app.clone()), Auth(v.who.clone()), Query(api_q)).await?;
    Ok(rows)
}

/// What the scheduler noted as next, that the viewer may see and the
/// filters keep, with reasons rewritten for the viewer (account paths it
/// may not see are not named).
async fn next_starts(app: &App, v: &Viewer, q: &QueueQuery) -> Option<Vec<NextStart>> {
    let all = ask(app, |reply| Msg::NextStarts { reply }).await.ok()?;
    let redact = |t: &str| v.who.redact(t, |p| app.catalog.account_exists(p));
    let keep = |n: &NextStart| {
        v.who.can_see(&n.account)
            && q.account().is_none_or(|a| within(&n.account, a))
            && q.class().is_none_or(|c| n.class == c)
    };
    Some(
        all.into_iter()
            .filter(keep)
            .map(|mut n| {
                for victim in &mut n.victims {
                    victim.reason = redact(&victim.reason);
                }
                n
            })
            .collect(),
    )
}

async fn queue(State(app): State<App>, v: Viewer, Query(q): Query<QueueQuery>) -> Response {
    let (groups, rows, next) = tokio::join!(groups(&app, &v, &q), page_rows(&app, &v, &q), next_starts(&app, &v, &q));
    let (groups, mut rows) = match (groups, rows) {
        (Ok(g), Ok(r)) => (g, r),
        (Err(e), _) | (_, Err(e)) => return layout::api_error(&v, e),
    };
    let more = rows.len() > PAGE;
    rows.truncate(PAGE);
    let now = crate::clock::now() as i64;
    let body = html! {
        h1 { "Queue" }
        (filters(&app, &q))
        (summary(&groups, now))
        h2 #next { "What would start next" }
        p.hint {
            "Every scheduling pass starts whatever fits the free GPUs, so next in line are the waiting workloads the scheduler preempted running work for: "
            "their GPUs are being released (CON-2), and each starts at the first pass after its victims' grace ends, in the order the scheduler chose them (its rank order). "
            "All other waiting work starts as running work ends, in the policy's rank order; a workload's page says where it stands."
        }
        @match &next {
            None => p.muted role="status" { "The scheduler is not answering just now; this part of the page is left out." },
            Some(n) if n.is_empty() => p.muted { "Nothing is being preempted for waiting work you may see." },
            Some(n) => (next_table(&v, n, now)),
        }
        h2 #by-account { "Waiting by account and class" }
        (groups_table(&q, &groups, now))
        h2 #waiting { "Waiting workloads" }
        @if rows.is_empty() {
            p.muted { "No waiting workload matches." }
        } @else {
            p.hint { "Each reason is the policy's explanation now, with its rule linked." }
            (workload_table(&rows, now))
        }
        nav.pager aria-label="Pages" {
            @if q.before.as_deref().is_some_and(|b| !b.is_empty()) { a href=(q.href(q.account(), q.class(), None)) { "← Newest" } }
            @if more { @if let Some(last) = rows.last() { a href=(q.href(q.account(), q.class(), Some(&last.id))) rel="next" { "Older →" } } }
        }
    };
    layout::page(&v, Page { title: "Queue".into(), nav: Nav::Queue, body, refresh: Some(5) })
}

fn filters(app: &App, q: &QueueQuery) -> Markup {
    let c = app.catalog.cluster();
    html! {
        form.filters method="get" action="/queue" aria-label="Filter the queue" {
            label { "Account (subtree)" input type="text" name="account" value=[q.account()] placeholder="e.g. lab/nlp"; }
            label { "Class" select name="class" {
                option value="" { "any" }
                @for k in ["batch", "interactive", "service"] {
                    option value=(k) selected[q.class() == Some(k)] { (k) }
                }
            } }
            @if c.is_fleet() {
                label { "Cluster" select name="cluster" {
                    option value="" { "any" }
                    @for name in &c.clusters {
                        option value=(name) selected[q.cluster() == Some(name.as_str())] { (name) }
                    }
                } }
            }
            button type="submit" { "Show" }
        }
    }
}

fn summary(groups: &[PendingGroup], now: i64) -> Markup {
    let n: i64 = groups.iter().map(|g| g.workloads).sum();
    let gpus: i64 = groups.iter().map(|g| g.gpus).sum();
    let oldest = groups.iter().map(|g| g.oldest_submit_t).min();
    html! {
        div.cards {
            div.card { div.v data-pending=(n) { (n) } div.k { "workloads waiting" } }
            div.card { div.v { (gpus) } div.k { "GPUs asked for" } }
            div.card { div.v { @match oldest { Some(t) => (dur(now - t)), None => "—" } } div.k { "longest wait" } }
        }
    }
}

fn next_table(v: &Viewer, next: &[NextStart], now: i64) -> Markup {
    html! {
        div.table-wrap { table.next {
            caption.muted { (next.len()) @if next.len() == 1 { " waiting workload" } @else { " waiting workloads" } " next in line, in the order chosen" }
            thead { tr {
                th.num scope="col" { "#" } th scope="col" { "Workload" } th scope="col" { "Account" } th scope="col" { "Class" }
                th.num scope="col" { "GPUs" } th scope="col" { "Waiting" } th scope="col" { "GPUs free" } th scope="col" { "Preempted for it, and why" }
            } }
            tbody { @for (i, n) in next.iter().enumerate() {
                tr {
                    td.num { (i + 1) }
                    td { a href={ "/workloads/" (n.seq) } { (n.seq) } " · " (n.user) }
                    td { code { (n.account) } }
                    td { (n.class) }
                    td.num { (n.gpus) }
                    td { (dur(now - n.submit_t)) }
                    td { @match n.victims.iter().filter_map(|v| v.stop_at).max() {
                        Some(t) => { "at " (when(t)) " (in " (dur(t - now)) ")" },
                        None => "released; at the next pass",
                    } }
                    td.reason { ul.victims { @for victim in &n.victims {
                        li {
                            @if v.who.can_see(&victim.account) {
                                a href={ "/workloads/" (victim.seq) } { (victim.seq) } " (" code { (victim.account) } ")"
                            } @else {
                                (victim.seq) " (another account)"
                            }
                            ": " (reason(&victim.reason))
                        }
                    } } }
                }
            } }
        } }
    }
}

fn groups_table(q: &QueueQuery, groups: &[PendingGroup], now: i64) -> Markup {
    html! {
        @if groups.is_empty() {
            p.muted { "Nothing waits." }
        } @else {
            div.table-wrap { table.groups {
                caption.muted { "Pending workloads per account (its own work) and class" }
                thead { tr {
                    th scope="col" { "Account" } th scope="col" { "Class" } th.num scope="col" { "Workloads" }
                    th.num scope="col" { "GPUs asked for" } th scope="col" { "Oldest waits" }
                } }
                tbody { @for g in groups {
                    tr data-group={ (g.account) "|" (g.class) } {
                        th scope="row" { a href=(q.href(Some(&g.account), q.class(), None)) { code { (g.account) } } }
                        td { a href=(q.href(q.account(), Some(&g.class), None)) { (g.class) } }
                        td.num { (g.workloads) }
                        td.num { (g.gpus) }
                        td { (dur(now - g.oldest_submit_t)) " (since " (when(g.oldest_submit_t)) ")" }
                    }
                } }
            } }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_survive_the_pager() {
        let q = QueueQuery { account: Some(" lab/x ".into()), class: Some(String::new()), ..Default::default() };
        assert_eq!(q.href(q.account(), q.class(), Some("41")), "/queue?account=lab/x&before=41");
        assert_eq!(QueueQuery::default().href(None, Some("batch"), None), "/queue?class=batch");
    }
}
