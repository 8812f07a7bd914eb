//! Fleet: every node's GPUs as a grid, per cluster of the fleet — free,
//! held by which account (and workload), idle-looking by GPU telemetry,
//! draining, drained or down — read from `GET /v1/nodes` in-process, so a
//! caller sees exactly what the API shows it: on GPUs held by workloads it
//! may not see, "another account" without an id or a name. Admins drain,
//! undrain and repair nodes from the grid (POST forms, CSRF-checked,
//! applied by the API's `node_action`, MNT-1/MNT-2).

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use maud::{Markup, html};
use serde::Deserialize;

use crate::api::{App, Auth, admin};
use crate::views::{NodeHold, NodeView};

use super::layout::{self, Nav, Page, csrf, pct, state};
use super::session::{Flash, Viewer, after_change};

pub fn routes() -> Router<App> {
    Router::new().route("/fleet", get(show)).route("/fleet/node", post(act))
}

/// What one GPU of the grid shows.
#[derive(Copy, Clone, Debug, PartialEq)]
enum Cell<'a> {
    Free,
    /// Held by a workload (or, anonymous, by workloads the caller may not see).
    Held(&'a NodeHold),
    /// Free, on a draining node: it takes no new work.
    Draining,
    Drained,
    Down,
}

impl Cell<'_> {
    fn class(&self) -> &'static str {
        match self {
            Cell::Free => "gpu free",
            Cell::Held(h) if h.idle => "gpu idle",
            Cell::Held(h) if h.workload.is_none() => "gpu held other",
            Cell::Held(_) => "gpu held",
            Cell::Draining => "gpu draining",
            Cell::Drained => "gpu drained",
            Cell::Down => "gpu down",
        }
    }

    fn word(&self) -> &'static str {
        match self {
            Cell::Free => "free",
            Cell::Held(h) if h.idle => "idle",
            Cell::Held(_) => "held",
            Cell::Draining => "draining",
            Cell::Drained => "drained",
            Cell::Down => "down",
        }
    }
}

/// Each GPU of `n`, by index: out of service with the node, else held by
/// the entry naming its index, else free.
fn cells(n: &NodeView) -> Vec<Cell<'_>> {
    (0..n.gpus)
        .map(|i| match n.health.as_str() {
            "down" => Cell::Down,
            "drained" => Cell::Drained,
            health => match n.held.iter().find(|h| h.indices.contains(&i)) {
                Some(h) => Cell::Held(h),
                None if health == "draining" => Cell::Draining,
                None => Cell::Free,
            },
        })
        .collect()
}

async fn show(State(app): State<App>, v: Viewer) -> Response {
    let nodes = match admin::nodes(State(app.clone()), Auth(v.who.clone()), Query(HashMap::new())).await {
        Ok(Json(n)) => n,
        Err(e) => return layout::api_error(&v, e),
    };
    // Clusters in the config's order (the nodes come in it).
    let fleet = app.catalog.cluster().name.clone();
    let mut clusters: Vec<(String, Vec<&NodeView>)> = Vec::new();
    for n in &nodes {
        let c = n.cluster.clone().unwrap_or_else(|| fleet.clone());
        match clusters.iter_mut().find(|(name, _)| *name == c) {
            Some((_, list)) => list.push(n),
            None => clusters.push((c, vec![n])),
        }
    }
    let operator = v.who.is_admin();
    let body = html! {
        h1 { "Fleet" }
        p.muted {
            "Every node's GPUs, refreshed every 5 s. "
            @if !operator { "GPUs held by workloads of accounts you may not see show as held by another account. " }
            @if operator { "Draining a node preempts its workloads under the contract (MNT-1) and takes no new work on it." }
        }
        (legend())
        @for (name, list) in &clusters {
            section aria-labelledby={ "cluster-" (name) } {
                h2 id={ "cluster-" (name) } { "Cluster " (name) }
                (cluster_cards(list))
                @for n in list { (node_row(&v, n, operator)) }
            }
        }
        @if nodes.is_empty() { p.muted { "The fleet has no nodes." } }
    };
    layout::page(&v, Page { title: "Fleet".into(), nav: Nav::Fleet, body, refresh: Some(5) })
}

fn legend() -> Markup {
    let items = [
        ("gpu free", "free", "in service, not held"),
        ("gpu held", "held", "held by the account (and workload) written in it"),
        ("gpu idle", "idle", "held, but its last GPU telemetry sample is below the idle threshold"),
        ("gpu draining", "draining", "free on a draining node: takes no new work"),
        ("gpu drained", "drained", "drained for maintenance: out of service"),
        ("gpu down", "down", "failed: out of service until repaired"),
    ];
    html! {
        h2.vh { "Legend" }
        ul.legend aria-label="Legend" {
            @for (class, word, what) in items { li { span class=(class) { (word) } " " (what) } }
        }
    }
}

/// Counts over a cluster's nodes: GPUs, free, held, idle-looking, out of service.
fn cluster_cards(list: &[&NodeView]) -> Markup {
    let mut n = [0u32; 5];
    for node in list {
        for c in cells(node) {
            n[0] += 1;
            match c {
                Cell::Free => n[1] += 1,
                Cell::Held(h) => {
                    n[2] += 1;
                    n[3] += u32::from(h.idle);
                }
                Cell::Draining => {}
                Cell::Drained | Cell::Down => n[4] += 1,
            }
        }
    }
    html! {
        div.cards {
            div.card { div.k { "GPUs" } div.v { (n[0]) } div.k { (allot_core::words::count(list.len() as u64, "node")) } }
            div.card { div.k { "Free" } div.v { (n[1]) } }
            div.card { div.k { "Held" } div.v { (n[2]) } div.k { (n[3]) " idle-looking" } }
            div.card { div.k { "Out of service" } div.v { (n[4]) } }
        }
    }
}

fn node_row(v: &Viewer, n: &NodeView, operator: bool) -> Markup {
    let cells = cells(n);
    let running = n.held.iter().filter(|h| h.workload.is_some()).count();
    html! {
        div.grid-node id={ "node-" (n.name) } {
            div.node-head {
                strong { (n.name) } " " (state(&n.health))
                div.muted { "pool " (n.pool) " · " (n.gpu_type) " · rack " (n.rack) }
                @if let Some(r) = &n.reason { div.muted.reason { "reason: " (r) } }
                div.muted {
                    @match n.health.as_str() {
                        "down" | "drained" => { (allot_core::words::count(n.gpus, "GPU")) " out of service" },
                        _ => { (n.free_gpus) " of " (allot_core::words::count(n.gpus, "GPU")) " free" },
                    }
                }
                @if operator { (actions(v, n, running)) }
            }
            ul.gpus aria-label={ "GPUs of " (n.name) } {
                @for (i, c) in cells.iter().enumerate() { (cell(n, i, c)) }
            }
        }
    }
}

fn cell(n: &NodeView, i: usize, c: &Cell) -> Markup {
    let title = match c {
        Cell::Held(h) => match (&h.account, &h.workload) {
            (Some(a), Some(w)) => format!(
                "GPU {i} of {}: {} by {a}, workload {w}{}",
                n.name,
                c.word(),
                h.util
                    .map_or_else(|| ", utilization not measured".into(), |u| format!(", last measured at {}", pct(u)))
            ),
            _ => format!("GPU {i} of {}: held by another account", n.name),
        },
        _ => format!("GPU {i} of {}: {}", n.name, c.word()),
    };
    html! {
        li class=(c.class()) title=(title) {
            span.idx { "GPU " (i) } " " span.word { (c.word()) }
            @if let Cell::Held(h) = c {
                span.holder {
                    @match (&h.account, &h.workload) {
                        (Some(a), Some(w)) => {
                            (a) " · " a href={ "/workloads/" (w) } { (w) }
                            @if let Some(u) = h.util { " · " (pct(u)) }
                        }
                        _ => "another account",
                    }
                }
            }
        }
    }
}

/// The operator's buttons for a node in its health.
fn actions(v: &Viewer, n: &NodeView, running: usize) -> Markup {
    let (action, label, confirm) = match n.health.as_str() {
        "up" => {
            let what = match running {
                0 => "It runs no workload".to_string(),
                1 => "Its running workload is preempted under the contract (MNT-1)".to_string(),
                k => format!("Its {k} running workloads are preempted under the contract (MNT-1)"),
            };
            ("drain", "Drain", format!("Drain {}? {what}, and it takes no new work until undrained.", n.name))
        }
        "draining" | "drained" => ("undrain", "Undrain", format!("Undrain {}? It takes new work again.", n.name)),
        "down" => ("repair", "Repair", format!("Mark {} repaired? It takes new work again.", n.name)),
        _ => return html! {},
    };
    html! {
        form.inline method="post" action="/fleet/node" data-confirm=(confirm) {
            (csrf(v))
            input type="hidden" name="node" value=(n.name);
            input type="hidden" name="action" value=(action);
            @if action == "drain" {
                input type="text" name="reason" maxlength="256" placeholder="reason (optional)"
                    aria-label={ "Why drain " (n.name) };
            }
            button.secondary type="submit" aria-label={ (label) " " (n.name) } { (label) }
        }
    }
}

#[derive(Deserialize)]
struct NodeForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    node: String,
    #[serde(default)]
    action: String,
    /// Why (drain, fail): kept with the node and in the audit log.
    #[serde(default)]
    reason: Option<String>,
}

/// `POST /fleet/node`: a node action through the API (admins; anyone
/// else is refused by the API with its 403).
async fn act(State(app): State<App>, v: Viewer, Form(f): Form<NodeForm>) -> Response {
    if let Err(r) = v.check_csrf(&f.csrf) {
        return r;
    }
    let to = format!("/fleet#node-{}", super::session::urlencode(&f.node));
    let reason = f.reason.iter().filter(|r| !r.trim().is_empty()).map(|r| ("reason".to_string(), r.clone())).collect();
    match admin::node_action(State(app), Auth(v.who.clone()), Path((f.node.clone(), f.action.clone())), Query(reason))
        .await
    {
        Ok(Json(n)) => {
            let text = match f.action.as_str() {
                "drain" if !n.workloads.is_empty() => format!(
                    "node {} is {}: its workloads {} are being preempted (MNT-1)",
                    n.name,
                    n.health,
                    n.workloads.join(", ")
                ),
                _ => format!("node {} is {}", n.name, n.health),
            };
            after_change(&v, &to, Flash { ok: true, text })
        }
        Err(e) if e.status() == StatusCode::FORBIDDEN => layout::api_error(&v, e),
        Err(e) => after_change(&v, &to, Flash { ok: false, text: e.error }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(health: &str, held: Vec<NodeHold>) -> NodeView {
        NodeView {
            name: "gpu-0".into(),
            cluster: None,
            pool: "gpu".into(),
            rack: 0,
            gpu_type: "H100".into(),
            gpus: 4,
            free_gpus: 4 - held.iter().map(|h| h.gpus).sum::<u32>(),
            health: health.into(),
            reason: None,
            workloads: vec![],
            workload_accounts: vec![],
            held,
        }
    }

    fn hold(id: Option<&str>, indices: &[u32], idle: bool) -> NodeHold {
        NodeHold {
            workload: id.map(Into::into),
            account: id.map(|_| "org/a".into()),
            gpus: indices.len() as u32,
            indices: indices.to_vec(),
            util: idle.then_some(0.01),
            idle,
        }
    }

    /// Each GPU's word by the node's health and its holdings.
    #[test]
    fn cells_by_health_and_holdings() {
        let words = |n: &NodeView| cells(n).iter().map(Cell::word).collect::<Vec<_>>();
        let cases = [
            (
                "up, one held, one idle",
                node("up", vec![hold(Some("7"), &[1], false), hold(Some("8"), &[3], true)]),
                ["free", "held", "free", "idle"],
            ),
            (
                "draining: free GPUs take no work",
                node("draining", vec![hold(Some("7"), &[0, 1], false)]),
                ["held", "held", "draining", "draining"],
            ),
            ("drained", node("drained", vec![]), ["drained"; 4]),
            ("down hides holdings", node("down", vec![hold(Some("7"), &[0], false)]), ["down"; 4]),
            (
                "anonymous holdings are held",
                node("up", vec![hold(None, &[2, 3], false)]),
                ["free", "free", "held", "held"],
            ),
        ];
        for (name, n, want) in cases {
            assert_eq!(words(&n), want, "case {name}");
        }
    }

    /// A GPU of a workload the caller may not see names neither it nor its
    /// account; a visible one links the workload.
    #[test]
    fn hidden_holders_are_another_account() {
        let n = node("up", vec![hold(None, &[0], false), hold(Some("12"), &[1], false)]);
        let c = cells(&n);
        let hidden = cell(&n, 0, &c[0]).into_string();
        assert!(
            hidden.contains("another account") && !hidden.contains("/workloads/") && !hidden.contains("org/a"),
            "{hidden}"
        );
        let seen = cell(&n, 1, &c[1]).into_string();
        assert!(
            seen.contains(r#"href="/workloads/12""#) && seen.contains("org/a") && seen.contains(r#"class="gpu held""#),
            "{seen}"
        );
    }
}
