//! Filled in by its page's change.

use axum::Router;

use crate::api::App;

pub fn routes() -> Router<App> {
    Router::new()
}
