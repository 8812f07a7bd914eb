//! Allot's live scheduler: `allot serve` runs the same `allot-core`
//! policies as the simulator against live state.
//!
//! * [`scheduler`]: the one task that owns the state; everything else talks
//!   to it by messages (docs/design.md §5, docs/style.md rule 5);
//! * [`store`]: SQLite (default) or PostgreSQL, written before any decision
//!   is acted on; [`recovery`] rebuilds the state from it at startup;
//! * [`executor`]: the trait and the local process-group executor;
//! * [`api`]: the JSON HTTP API under `/v1` with its OpenAPI document,
//!   served by [`listener`] within its connection and time limits;
//!   [`auth`]: bearer tokens and roles; [`signin`]: the limit, audit and
//!   session bound of every sign-in; [`metrics`]: Prometheus;
//! * [`export`]: the recorded history as a simulator trace; [`report`]:
//!   budget statements from it;
//! * [`client`]: the HTTP client behind the `allot` CLI commands;
//! * [`webhook`]: budget threshold events posted to `[alerts] webhook_url`.
//!
//! See `docs/server.md`.

#![recursion_limit = "256"]

pub mod accounts;
pub mod api;
pub mod auth;
pub mod client;
pub mod clock;
pub mod dashboard;
pub mod executor;
pub mod export;
pub mod headers;
pub mod identity;
pub mod journal;
pub mod listener;
pub mod metrics;
pub mod munge;
pub mod oidc;
pub mod peercred;
pub mod recovery;
pub mod report;
pub mod scheduler;
pub mod secret;
pub mod server;
pub mod signin;
pub mod states;
pub mod store;
pub mod submission;
pub mod views;
pub mod webhook;

pub use executor::inventory::GpuInventory;
pub use executor::slurm::SlurmOptions;
pub use export::{ExportError, ExportSummary, export_trace};
pub use listener::EdgeOptions;
pub use server::{ExecutorKind, Running, ServeOptions, ServerError, serve, start};
