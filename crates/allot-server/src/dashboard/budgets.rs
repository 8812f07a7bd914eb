//! Budgets: the account tree the viewer may see, each account's budget,
//! use, remaining, burn rate and projected exhaustion this period (BUD-1,
//! BUD-3..BUD-5) and its fair-share standing (FS-1); an account's page with
//! its burn-down from the store, and the form with which admins and
//! managers (strictly inside their scope) change its budget, share and
//! researchers' allocations (FS-2 shares, BUD-6 budgets).
//!
//! Everything is read through the API's handlers (`GET /v1/accounts`) and
//! changed through `PATCH /v1/accounts/{path}`'s, called in-process with
//! the viewer's principal: the same checks, bounds and audit as the API.

use std::collections::{BTreeMap, HashMap};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::{Form, Json, Router};
use maud::{Markup, PreEscaped, html};

use crate::api::extract::Path;
use crate::api::{ApiError, App, Auth, Body, admin};
use crate::store::usage::{UsageSpan, burn_down};
use crate::views::{AccountChange, AccountView};

use super::layout::{self, Nav, Page, csrf, dur, ngh, num, when};
use super::session::{Flash, Viewer, after_change, urlencode};

/// Most points of a burn-down curve (the store's spans are sampled beyond).
const CURVE_POINTS: usize = 200;

pub fn routes() -> Router<App> {
    Router::new().route("/budgets", get(tree)).route("/budgets/{*path}", get(show).post(change))
}

/// The page of an account.
fn href(path: &str) -> String {
    format!("/budgets/{}", urlencode(path))
}

async fn accounts(app: &App, v: &Viewer) -> Result<Vec<AccountView>, Response> {
    match admin::accounts(State(app.clone()), Auth(v.who.clone())).await {
        Ok(Json(list)) => Ok(list),
        Err(e) => Err(layout::api_error(v, e)),
    }
}

async fn account(app: &App, v: &Viewer, path: &str) -> Result<AccountView, Response> {
    match admin::account(State(app.clone()), Auth(v.who.clone()), axum::extract::Path(path.to_string())).await {
        Ok(Json(a)) => Ok(a),
        Err(e) => Err(layout::api_error(v, e)),
    }
}

async fn tree(State(app): State<App>, v: Viewer) -> Response {
    let list = match accounts(&app, &v).await {
        Ok(l) => l,
        Err(r) => return r,
    };
    let now = crate::clock::now() as i64;
    let body = html! {
        h1 { "Budgets" }
        @match list.first() {
            None => p.muted { "You may not see any account." },
            Some(first) => {
                (period_note(first, now))
                h2 #use { "Use this period" }
                (use_table(&list, &v))
                h2 #standing { "Fair-share standing and work" }
                (standing_table(&list))
            }
        }
    };
    layout::page(&v, Page { title: "Budgets".into(), nav: Nav::Budgets, body, refresh: Some(5) })
}

/// The budget period every account shares (BUD-4).
fn period_note(a: &AccountView, now: i64) -> Markup {
    html! {
        p.hint {
            "Budget period: " (when(a.period_start_t)) " to " (when(a.period_end_t))
            ", renews in " (dur(a.period_end_t - now)) ". Amounts are normalised GPU-hours (NGH, BUD-3); "
            "the burn rate is this period's average so far."
        }
    }
}

/// The fraction of budget plus carry-over used, when there is a budget.
fn used_fraction(a: &AccountView) -> Option<(f64, f64)> {
    let total = a.budget_gpu_hours? + a.carried_gpu_hours;
    Some((if total > 0.0 { a.used_gpu_hours / total } else { f64::INFINITY }, total))
}

/// A percentage as people read it: whole from 10 %, one decimal below.
fn percent(f: f64) -> String {
    if !f.is_finite() {
        "all".to_string()
    } else if f * 100.0 >= 10.0 {
        format!("{:.0} %", f * 100.0)
    } else {
        format!("{:.1} %", f * 100.0)
    }
}

/// The used-against-budget bar, with its text (over budget: said, and
/// striped, never colour alone).
fn bar(a: &AccountView) -> Markup {
    let Some((f, total)) = used_fraction(a) else { return html! { span.muted { "no budget" } } };
    let over = f > 1.0;
    let text = format!("{} of {} NGH", percent(f), ngh(total));
    html! {
        div.budget-bar {
            div.bar.over[over] aria-hidden="true" {
                span style={ "width: " (format!("{:.1}", f.clamp(0.0, 1.0) * 100.0)) "%" } {}
            }
            span.bar-text { @if over { strong { "Over budget: " } } (text) }
        }
    }
}

/// Remaining NGH, or by how much it is over.
fn remaining(a: &AccountView) -> Markup {
    match a.remaining_gpu_hours {
        None => html! { span.muted { "—" } },
        Some(r) if r < 0.0 => html! { strong { "over by " (ngh(-r)) } },
        Some(r) => html! { (ngh(r)) },
    }
}

/// When the budget runs out at the current burn rate.
fn exhaustion(a: &AccountView) -> Markup {
    match (a.budget_gpu_hours, a.remaining_gpu_hours, a.projected_exhaustion_t) {
        (None, _, _) => html! { span.muted { "no budget" } },
        (_, Some(r), _) if r <= 0.0 => html! { strong { "ran out" } },
        (_, _, None) => html! { "not at the current rate" },
        (_, _, Some(t)) if t > a.period_end_t => {
            html! { span title={ "at this rate: " (allot_core::calendar::format_instant(t.max(0) as u64)) } { "after the period renews" } }
        }
        (_, _, Some(t)) => html! { (when(t)) },
    }
}

/// FS-1 standing in words: what the account uses, what it is entitled to
/// now and what that means for its waiting work (issue 30, point 3: one
/// notion, not a ratio beside a static percentage), the ratio on hover.
fn standing(a: &AccountView) -> Markup {
    match (a.standing_words(), a.fair_share) {
        (Some(words), Some(v)) if v.is_finite() => {
            html! { span title={ "usage/entitlement " (format!("{v:.2}")) " (FS-1; 1 is at its share)" } { (words) } }
        }
        (Some(words), _) => html! { span.muted { (words) } },
        (None, _) => html! { span.muted { "—" } },
    }
}

/// An account's path, indented by depth, linked to its page.
fn account_cell(a: &AccountView) -> Markup {
    html! {
        th scope="row" style={ "padding-left: " (format!("{:.2}", 0.55 + f64::from(a.depth.saturating_sub(1)) * 1.1)) "rem" } {
            a href=(href(&a.path)) { code { (a.path) } }
            @if a.closed { " " span.state.st-cancelled { "closed" } }
        }
    }
}

fn use_table(list: &[AccountView], v: &Viewer) -> Markup {
    html! {
        div.table-wrap { table.budgets {
            caption.muted { "Budget, use and projection per account; a parent's use includes its children's." }
            thead { tr {
                th scope="col" { "Account" } th.num scope="col" { "Budget" } th.num scope="col" { "Used" }
                th.num scope="col" { "Remaining" } th scope="col" { "Used of budget" } th.num scope="col" { "Carried over" }
                th.num scope="col" { "Burn rate (NGH/h)" } th scope="col" { "Runs out" } th scope="col" { span.vh { "Actions" } }
            } }
            tbody { @for a in list {
                tr data-account=(a.path) {
                    (account_cell(a))
                    td.num data-budget=[a.budget_gpu_hours] { @match a.budget_gpu_hours { Some(b) => (ngh(b)), None => span.muted { "none" } } }
                    td.num data-used=(a.used_gpu_hours) { (ngh(a.used_gpu_hours)) }
                    td.num { (remaining(a)) }
                    td { (bar(a)) }
                    td.num { (ngh(a.carried_gpu_hours)) }
                    td.num { (ngh(a.burn_gpu_hours_per_hour)) }
                    td data-exhaustion=[a.projected_exhaustion_t] { (exhaustion(a)) }
                    td { @if v.who.can_change(&a.path) { a href={ (href(&a.path)) "#change" } { "Change" span.vh { " " (a.path) } } } }
                }
            } }
        } }
    }
}

fn standing_table(list: &[AccountView]) -> Markup {
    html! {
        div.table-wrap { table.standing {
            caption.muted { "Fair share (FS-1): an account's recent use and GPUs held against what it is entitled to now (its share among accounts with work); work of accounts below their share ranks ahead." }
            thead { tr {
                th scope="col" { "Account" } th scope="col" { "Standing" } th.num scope="col" { "Share" }
                th.num scope="col" { "Entitled when all have work" } th.num scope="col" { "Impact" } th.num scope="col" { "Pending" }
                th.num scope="col" { "Running" } th.num scope="col" { "GPUs held" }
            } }
            tbody { @for a in list {
                tr {
                    (account_cell(a))
                    td { (standing(a)) @if a.over_budget == Some(true) { " · over budget (BUD-1)" } }
                    td.num { (num(a.share)) @if !a.explicit_share { span.muted { " (default)" } } }
                    td.num { (layout::pct(a.entitled_share)) }
                    td.num { (num(a.impact)) }
                    td.num { (a.pending) }
                    td.num { (a.running) }
                    td.num { (a.allocated_gpus) }
                }
            } }
        } }
    }
}

async fn show(State(app): State<App>, v: Viewer, Path(path): Path<String>) -> Response {
    let a = match account(&app, &v, &path).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let now = crate::clock::now() as i64;
    let spans = match app.store.usage_spans(&a.path, a.period_start_t, now + 1).await {
        Ok(s) => s,
        Err(e) => return layout::api_error(&v, ApiError::from(e)),
    };
    let title = format!("Budget of {}", a.path);
    let can_change = v.who.can_change(&a.path);
    let body = html! {
        p { a href="/budgets" { "← All budgets" } }
        h1 { "Budget of " code { (a.path) } @if a.closed { " " span.state.st-cancelled { "closed" } } }
        (period_note(&a, now))
        dl.facts {
            dt { "Budget" } dd { @match a.budget_gpu_hours { Some(b) => { (ngh(b)) " NGH per period" }, None => "none (the use is only counted)" } }
            dt { "Used this period" } dd { (ngh(a.used_gpu_hours)) " NGH" }
            dt { "Carried over" } dd { (ngh(a.carried_gpu_hours)) " NGH (BUD-5)" }
            dt { "Remaining" } dd { (remaining(&a)) }
            dt { "Used of budget" } dd { (bar(&a)) }
            dt { "Burn rate" } dd { (ngh(a.burn_gpu_hours_per_hour)) " NGH per hour" }
            dt { "Runs out" } dd data-exhaustion=[a.projected_exhaustion_t] { (exhaustion(&a)) }
            dt { "Fair share" } dd { (standing(&a)) }
            dt { "Share" } dd { (num(a.share)) " (entitled to " (layout::pct(a.entitled_share)) " of the cluster when every account has work)" }
            dt { "Impact" } dd { (num(a.impact)) }
            dt { "Work" } dd { (a.pending) " pending, " (a.running) " running, " (allot_core::words::count(a.allocated_gpus, "GPU")) " held" }
        }
        h2 { "Burn-down this period" }
        (burn_down_section(&a, &spans, now))
        h2 { "Researchers' allocations" }
        (allocations(&a))
        @if can_change {
            h2 #change { "Change " code { (a.path) } }
            (change_form(&v, &a))
        }
    };
    // The script leaves <main> as it is while a form in it holds unsaved
    // input, so the page with the form refreshes too.
    layout::page(&v, Page { title, nav: Nav::Budgets, body, refresh: Some(5) })
}

/// The curve and its table: cumulative NGH used from the period's start,
/// the budget (and carry-over) as reference lines, and the projection to
/// the period's end at the current burn rate.
fn burn_down_section(a: &AccountView, spans: &[UsageSpan], now: i64) -> Markup {
    use allot_report::svg::{Axis, Line, LineChart, Rule, Shape, line_chart};
    let (start, end) = (a.period_start_t, a.period_end_t.max(a.period_start_t + 1));
    let now = now.clamp(start, end);
    let curve = burn_down(spans, start, now, CURVE_POINTS);
    let used = curve.last().map_or(0.0, |p| p.1);
    let projected = used + a.burn_gpu_hours_per_hour * (end - now) as f64 / 3600.0;
    let span = (end - start) as f64;
    let (unit, div) = layout::time_unit(span);
    let x = |t: i64| (t - start) as f64 / div;
    let mut rules = Vec::new();
    let mut top = used.max(projected);
    if let Some(b) = a.budget_gpu_hours {
        rules.push(Rule { value: b, label: format!("budget {} NGH", ngh(b)) });
        top = top.max(b);
        if a.carried_gpu_hours > 0.0 {
            let with = b + a.carried_gpu_hours;
            rules.push(Rule { value: with, label: format!("budget with carry-over {} NGH", ngh(with)) });
            top = top.max(with);
        }
    }
    let chart = LineChart {
        id: "burn-down".into(),
        title: format!("NGH used by {} this period", a.path),
        x: Axis::fixed(
            format!("{unit} since the period began"),
            0.0,
            span / div,
            allot_report::svg::nice_step(span / div, 6),
            layout::num,
        ),
        y: Axis::linear("normalised GPU-hours", 0.0, (top * 1.05).max(1e-3), layout::num),
        lines: vec![
            Line {
                name: "used so far".into(),
                color: "#1f5fbf".into(),
                shape: Shape::Line,
                dashed: false,
                points: curve.iter().map(|&(t, v)| (x(t), v)).collect(),
            },
            Line {
                name: "projected at the current burn rate".into(),
                color: "#9a5b00".into(),
                shape: Shape::Line,
                dashed: true,
                points: vec![(x(now), used), (x(end), projected)],
            },
        ],
        rules,
        empty_note: None,
    };
    html! {
        div.charts { figure.burn-down {
            (PreEscaped(line_chart(&chart)))
            figcaption.muted { "Solid: NGH used since the period began (from the attempts in the store). Dashed: where the use ends up at this period's average burn rate. Flat dashed lines: the budget, and with carry-over." }
        } }
        div.table-wrap { table.burn-down-table {
            caption.muted { "The burn-down in numbers" }
            tbody {
                tr { th scope="row" { "Period began" } td { (when(start)) } td.num { "0" } }
                tr { th scope="row" { "Used until now" } td { (when(now)) } td.num data-used-ngh=(format!("{used:.9}")) { (ngh(used)) " NGH" } }
                tr { th scope="row" { "Projected at the period's end" } td { (when(end)) } td.num data-projected-ngh=(format!("{projected:.9}")) { (ngh(projected)) " NGH" } }
                @if let Some(b) = a.budget_gpu_hours {
                    tr { th scope="row" { "Budget with carry-over" } td { "—" } td.num { (ngh(b + a.carried_gpu_hours)) " NGH" } }
                }
            }
        } }
        details {
            summary { "Every point of the curve (" (curve.len()) ")" }
            div.table-wrap { table {
                thead { tr { th scope="col" { "Time" } th.num scope="col" { "NGH used since the period began" } } }
                tbody { @for (t, v) in &curve { tr { td { (when(*t)) } td.num { (ngh(*v)) } } } }
            } }
        }
    }
}

/// The researchers of the account's own work with a share or budget set.
fn allocations(a: &AccountView) -> Markup {
    let users = researchers(a);
    html! {
        @if users.is_empty() {
            p.muted { "No researcher has a share or budget of its own here: each has share 1 (FS-2) and no budget of its own (BUD-6)." }
        } @else {
            div.table-wrap { table.allocations {
                caption.muted { "Researchers' FS-2 shares (others: 1) and BUD-6 budgets within this account's own work" }
                thead { tr { th scope="col" { "Researcher" } th.num scope="col" { "Share" } th.num scope="col" { "Budget (NGH per period)" } } }
                tbody { @for (u, (share, budget)) in &users {
                    tr {
                        th scope="row" { (u) }
                        td.num { @match share { Some(s) => (num(*s)), None => span.muted { "1 (default)" } } }
                        td.num { @match budget { Some(b) => (ngh(*b)), None => span.muted { "none" } } }
                    }
                } }
            } }
        }
    }
}

/// Every researcher with a share or a budget set: (share, budget).
fn researchers(a: &AccountView) -> BTreeMap<String, (Option<f64>, Option<f64>)> {
    let mut out: BTreeMap<String, (Option<f64>, Option<f64>)> = BTreeMap::new();
    for (u, s) in &a.users {
        out.entry(u.clone()).or_default().0 = Some(*s);
    }
    for (u, b) in &a.user_budgets {
        out.entry(u.clone()).or_default().1 = Some(*b);
    }
    out
}

/// A number as an input's value: the shortest text that reads back the same.
fn input_value(v: f64) -> String {
    format!("{v}")
}

fn change_form(v: &Viewer, a: &AccountView) -> Markup {
    let users = researchers(a);
    html! {
        form.stack.account-change method="post" action=(href(&a.path)) {
            (csrf(v))
            p.hint { "Changes apply together and are audited, with the API's checks. A field left as it is is not changed; a field emptied returns to the config's value. The page stops refreshing itself once you type here, until the form is sent." }
            label for="budget_gpu_hours" { "Budget (NGH per period)" }
            input #budget_gpu_hours type="number" name="budget_gpu_hours" min="0" step="any"
                value=[a.budget_gpu_hours.map(input_value)];
            label for="share" { "Share among its siblings (FS-1)" }
            input #share type="number" name="share" min="0" step="any" value=(input_value(a.share));
            fieldset {
                legend { "Researchers' allocations" }
                div.table-wrap { table {
                    thead { tr { th scope="col" { "Researcher" } th scope="col" { "Share (FS-2)" } th scope="col" { "Budget, NGH per period (BUD-6)" } } }
                    tbody {
                        @for (i, (u, (share, budget))) in users.iter().enumerate() {
                            tr {
                                th scope="row" { (u) input type="hidden" name={ "user." (i) ".name" } value=(u); }
                                td {
                                    label.vh for={ "user-" (i) "-share" } { "Share of " (u) }
                                    input id={ "user-" (i) "-share" } type="number" name={ "user." (i) ".share" } min="0" step="any" value=[share.map(input_value)];
                                }
                                td {
                                    label.vh for={ "user-" (i) "-budget" } { "Budget of " (u) }
                                    input id={ "user-" (i) "-budget" } type="number" name={ "user." (i) ".budget" } min="0" step="any" value=[budget.map(input_value)];
                                }
                            }
                        }
                        @let i = users.len();
                        tr {
                            td {
                                label.vh for="user-new-name" { "New researcher's name" }
                                input #user-new-name type="text" name={ "user." (i) ".name" } placeholder="another researcher" autocomplete="off";
                            }
                            td {
                                label.vh for="user-new-share" { "New researcher's share" }
                                input #user-new-share type="number" name={ "user." (i) ".share" } min="0" step="any";
                            }
                            td {
                                label.vh for="user-new-budget" { "New researcher's budget" }
                                input #user-new-budget type="number" name={ "user." (i) ".budget" } min="0" step="any";
                            }
                        }
                    }
                } }
                label.check {
                    input #new-users type="checkbox" name="new_users" value="true";
                    " The new researcher is new here (not yet signed in, no work of theirs): set it anyway"
                }
            }
            button type="submit" { "Save changes" }
        }
    }
}

/// What a form asks for, or the field (as the API names it) whose value is
/// not a number and why.
type Asked = Result<AccountChange, (String, String)>;

/// What the form asks to change, against the account as it is: only the
/// fields that differ; `Err((field, message))` for a value that is not a
/// number.
fn requested(a: &AccountView, form: &HashMap<String, String>) -> Asked {
    let number = |field: &str, key: &str| -> Result<Option<f64>, (String, String)> {
        match form.get(key).map(|s| s.trim()).filter(|s| !s.is_empty()) {
            None => Ok(None),
            Some(s) => match s.parse::<f64>() {
                Ok(v) if v.is_finite() => Ok(Some(v)),
                _ => Err((field.to_string(), format!("{s:?} is not a number"))),
            },
        }
    };
    let mut change = AccountChange::default();
    if form.contains_key("budget_gpu_hours") {
        let want = number("budget_gpu_hours", "budget_gpu_hours")?;
        if want != a.budget_gpu_hours {
            change.budget_gpu_hours = Some(want);
        }
    }
    if form.contains_key("share") {
        match number("share", "share")? {
            Some(s) if s != a.share => change.share = Some(Some(s)),
            None if a.explicit_share => change.share = Some(None),
            _ => {}
        }
    }
    let current = researchers(a);
    for i in 0.. {
        let Some(name) = form.get(&format!("user.{i}.name")) else { break };
        let name = name.trim();
        if name.is_empty() {
            continue;
        }
        let (share_now, budget_now) = current.get(name).copied().unwrap_or_default();
        let share = number(&format!("users.{name}"), &format!("user.{i}.share"))?;
        if share != share_now {
            change.users.insert(name.to_string(), share);
        }
        let budget = number(&format!("user_budgets.{name}"), &format!("user.{i}.budget"))?;
        if budget != budget_now {
            change.user_budgets.insert(name.to_string(), budget);
        }
    }
    Ok(change)
}

/// The label of a field of [`AccountChange`] as the form shows it.
fn field_label(field: &str) -> String {
    match field {
        "budget_gpu_hours" => "Budget".to_string(),
        "share" => "Share".to_string(),
        f => match (f.strip_prefix("users."), f.strip_prefix("user_budgets.")) {
            (Some(u), _) => format!("Share of researcher {u}"),
            (_, Some(u)) => format!("Budget of researcher {u}"),
            _ => f.to_string(),
        },
    }
}

/// What a change did, in a line.
fn describe(c: &AccountChange) -> String {
    let val = |v: &Option<f64>| v.map_or_else(|| "the config's".to_string(), input_value);
    let mut parts = Vec::new();
    if let Some(b) = &c.budget_gpu_hours {
        parts.push(format!("budget {} NGH", val(b)));
    }
    if let Some(s) = &c.share {
        parts.push(format!("share {}", val(s)));
    }
    for (u, s) in &c.users {
        parts.push(format!("share of {u} {}", val(s)));
    }
    for (u, b) in &c.user_budgets {
        parts.push(format!("budget of {u} {} NGH", val(b)));
    }
    parts.join(", ")
}

async fn change(
    State(app): State<App>,
    v: Viewer,
    Path(path): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if let Err(r) = v.check_csrf(form.get("csrf").map_or("", String::as_str)) {
        return r;
    }
    let a = match account(&app, &v, &path).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let to = format!("{}#change", href(&a.path));
    let change = match requested(&a, &form) {
        Ok(c) => c,
        Err((field, m)) => {
            return after_change(&v, &to, Flash { ok: false, text: format!("{}: {m}", field_label(&field)) });
        }
    };
    if change == AccountChange::default() {
        return after_change(&v, &to, Flash { ok: false, text: "no field was changed".into() });
    }
    let what = describe(&change);
    let r = admin::change_account(
        State(app.clone()),
        Auth(v.who.clone()),
        axum::extract::Path(a.path.clone()),
        axum::extract::Query(
            form.iter().filter(|(k, _)| *k == "new_users").map(|(k, v)| (k.clone(), v.clone())).collect(),
        ),
        Body(change),
    )
    .await;
    match r {
        Ok(Json(now)) => after_change(&v, &href(&now.path), Flash { ok: true, text: format!("{}: {what}", now.path) }),
        // Refused outright (a crafted request): the API's status and words.
        Err(e) if matches!(e.status(), StatusCode::FORBIDDEN | StatusCode::NOT_FOUND) => layout::api_error(&v, e),
        Err(e) => {
            let text = match &e.field {
                Some(f) => format!("{}: {}", field_label(f), e.error),
                None => e.error.clone(),
            };
            after_change(&v, &to, Flash { ok: false, text })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> AccountView {
        AccountView {
            path: "org/a".into(),
            parent: Some("org".into()),
            depth: 2,
            share: 1.0,
            explicit_share: false,
            budget_gpu_hours: Some(500.0),
            used_gpu_hours: 310.0,
            carried_gpu_hours: 0.0,
            remaining_gpu_hours: Some(190.0),
            burn_gpu_hours_per_hour: 2.0,
            projected_exhaustion_t: Some(1000),
            charged_gpu_hours: 310.0,
            allocated_gpus: 2,
            entitled_share: 0.5,
            fair_share: Some(1.3),
            entitled_now: Some(0.5),
            using_share: Some(0.65),
            over_budget: Some(false),
            pending: 1,
            running: 1,
            period_start_t: 0,
            period_end_t: 2000,
            impact: 1.0,
            users: BTreeMap::from([("ana".to_string(), 2.0)]),
            user_budgets: BTreeMap::new(),
            closed: false,
        }
    }

    fn form(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// Only what differs from the account is asked for; an emptied field
    /// goes back to the config's value; a value that is not a number names
    /// its field.
    #[test]
    fn a_form_asks_for_what_differs() {
        let a = view();
        type Case = (&'static str, Vec<(&'static str, &'static str)>, Asked);
        let cases: Vec<Case> = vec![
            (
                "as shown: nothing",
                vec![("budget_gpu_hours", "500"), ("share", "1"), ("user.0.name", "ana"), ("user.0.share", "2")],
                Ok(AccountChange::default()),
            ),
            (
                "a new budget",
                vec![("budget_gpu_hours", "750"), ("share", "1")],
                Ok(AccountChange { budget_gpu_hours: Some(Some(750.0)), ..Default::default() }),
            ),
            (
                "emptied budget: the config's",
                vec![("budget_gpu_hours", " "), ("share", "1")],
                Ok(AccountChange { budget_gpu_hours: Some(None), ..Default::default() }),
            ),
            ("emptied share that was not set: nothing", vec![("share", "")], Ok(AccountChange::default())),
            (
                "a researcher's share emptied, a new one's budget",
                vec![
                    ("user.0.name", "ana"),
                    ("user.0.share", ""),
                    ("user.1.name", " ben "),
                    ("user.1.share", ""),
                    ("user.1.budget", "40"),
                ],
                Ok(AccountChange {
                    users: BTreeMap::from([("ana".to_string(), None)]),
                    user_budgets: BTreeMap::from([("ben".to_string(), Some(40.0))]),
                    ..Default::default()
                }),
            ),
            (
                "not a number",
                vec![("budget_gpu_hours", "lots")],
                Err(("budget_gpu_hours".into(), "\"lots\" is not a number".into())),
            ),
            (
                "a researcher's budget not a number",
                vec![("user.0.name", "ana"), ("user.0.budget", "inf")],
                Err(("user_budgets.ana".into(), "\"inf\" is not a number".into())),
            ),
        ];
        for (name, pairs, want) in cases {
            assert_eq!(requested(&a, &form(&pairs)), want, "{name}");
        }
        assert_eq!(field_label("user_budgets.ana"), "Budget of researcher ana");
        assert_eq!(field_label("budget_gpu_hours"), "Budget");
    }

    /// Over budget is said in words and striped, not only coloured; a
    /// projection past the period's end says the period renews first.
    #[test]
    fn over_budget_and_renewal_are_said_in_words() {
        let mut a = view();
        let ok = bar(&a).into_string();
        assert!(ok.contains("62 % of 500 NGH") && !ok.contains("over"), "{ok}");
        a.used_gpu_hours = 560.0;
        a.remaining_gpu_hours = Some(-60.0);
        let over = bar(&a).into_string();
        assert!(
            over.contains(r#"class="bar over""#) && over.contains("Over budget: ") && over.contains("112 %"),
            "{over}"
        );
        assert_eq!(remaining(&a).into_string(), "<strong>over by 60</strong>");
        assert_eq!(exhaustion(&a).into_string(), "<strong>ran out</strong>");
        let mut b = view();
        b.projected_exhaustion_t = Some(5000);
        assert!(exhaustion(&b).into_string().contains("after the period renews"));
        // Issue 30, point 3: one notion in words, the ratio on hover.
        let words = |fs: f64, now: f64, using: f64| {
            let mut a = view();
            (a.fair_share, a.entitled_now, a.using_share) = (Some(fs), Some(now), Some(using));
            standing(&a).into_string()
        };
        let w = words(1.3, 0.5, 0.65);
        assert!(w.contains("recent use and GPUs held come to 65 % of the GPUs, entitled to 50 % now: above its share, so its waiting work ranks behind"), "{w}");
        assert!(w.contains("usage/entitlement 1.30"), "{w}");
        let w = words(0.5, 1.0, 0.5);
        assert!(
            w.contains("recent use and GPUs held come to 50 % of the GPUs, entitled to 100 % now (50 % when all have work): below its share, so its waiting work ranks ahead"),
            "{w}"
        );
        assert!(words(1.01, 0.5, 0.505).contains(": at its share"));
        assert!(words(f64::INFINITY, 0.0, 0.0).contains("no work now, so no entitlement"));
    }
}
