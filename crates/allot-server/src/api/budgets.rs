//! Budget threshold events (docs/budgets.md, "Threshold events").

use axum::Json;
use axum::extract::State;

use super::{ApiError, ApiErrors, App, Auth};
use crate::store::budget::BudgetEventRow;

/// `GET /v1/budget-events`: the thresholds reached, oldest first, of the
/// accounts the caller sees (as `GET /v1/accounts`).
#[utoipa::path(get, path = "/v1/budget-events", summary = "budget thresholds reached (80 %, 100 %, …), once per account, period and threshold", description = "Roles: filtered to the accounts the caller sees.", security(("bearer" = [])), responses((status = 200, description = "success", body = Vec<BudgetEventRow>), ApiErrors))]
pub async fn list(State(app): State<App>, Auth(who): Auth) -> Result<Json<Vec<BudgetEventRow>>, ApiError> {
    let rows = app.store.budget_events().await?;
    Ok(Json(rows.into_iter().filter(|e| who.can_see(&e.account)).collect()))
}
