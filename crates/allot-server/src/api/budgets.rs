//! Budget threshold events and statements (docs/budgets.md, "Threshold
//! events" and "Statements").

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};

use allot_core::statement::{Format, Statement, period_index, to_csv, to_markdown};

use super::{ApiError, ApiErrors, App, Auth};
use crate::report::{History, statement_of};
use crate::store::budget::BudgetEventRow;

/// `GET /v1/budget-events`: the thresholds reached, oldest first, of the
/// accounts the caller sees (as `GET /v1/accounts`).
#[utoipa::path(get, path = "/v1/budget-events", summary = "budget thresholds reached (80 %, 100 %, …), once per account, period and threshold", description = "Roles: filtered to the accounts the caller sees.", security(("bearer" = [])), responses((status = 200, description = "success", body = Vec<BudgetEventRow>), ApiErrors))]
pub async fn list(State(app): State<App>, Auth(who): Auth) -> Result<Json<Vec<BudgetEventRow>>, ApiError> {
    let rows = app.store.budget_events().await?;
    Ok(Json(rows.into_iter().filter(|e| who.can_see(&e.account)).collect()))
}

/// `GET /v1/budget-report?period=…&format=…`: one budget period's
/// statement, computed from the store's history (attempts and the audit
/// log's budget changes), of the accounts the caller sees. Rendered here
/// so `curl` gets the CSV a spreadsheet opens, and the CLI and the
/// simulator's `--budget-report` share one renderer.
#[utoipa::path(get, path = "/v1/budget-report", summary = "a budget period's statement: budget, carried, used, over budget, GPU-hours by type, attainment, queue times per account", description = "Roles: filtered to the accounts the caller sees.", security(("bearer" = [])), params(("period" = Option<String>, Query, description = "current (default), previous, or the period's start date, e.g. 2026-11-01"), ("format" = Option<String>, Query, description = "json (default), csv or md")), responses((status = 200, description = "success", content((Statement = "application/json"), (String = "text/csv"), (String = "text/markdown"))), ApiErrors))]
pub async fn report(
    State(app): State<App>,
    Auth(who): Auth,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let (mut period, mut format) = ("current", Format::Json);
    for (k, v) in &q {
        match k.as_str() {
            "period" => period = v,
            "format" => {
                format = Format::parse(v)
                    .ok_or_else(|| ApiError::field("format", format!("expected one of {}, got {v:?}", Format::NAMES)))?
            }
            other => return Err(ApiError::field(other, "unknown query parameter (use period, format)")),
        }
    }
    let now = crate::clock::now();
    let template = app.catalog.template().clone();
    let template = &template;
    let k = period_index(&template.contract.periods(), now, period).map_err(|e| ApiError::field("period", e))?;
    let history = History::load(&app.store).await?;
    let mut s = statement_of(template, &history, now, k..=k);
    for p in &mut s.periods {
        p.accounts.retain(|a| who.can_see(&a.account));
    }
    Ok(rendered(&s, format))
}

/// The statement as the response of `format`.
fn rendered(s: &Statement, format: Format) -> Response {
    match format {
        Format::Json => Json(s).into_response(),
        Format::Csv => ([(header::CONTENT_TYPE, "text/csv; charset=utf-8")], to_csv(s)).into_response(),
        Format::Markdown => ([(header::CONTENT_TYPE, "text/markdown; charset=utf-8")], to_markdown(s)).into_response(),
    }
}
