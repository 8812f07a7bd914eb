//! Allot's file formats and trace sources.
//!
//! * [`bounds`]: the bounds of every numeric input, shared with the server;
//! * [`choices`]: the valid choices an error names after an unknown name;
//! * [`config`]: the cluster + accounts + contract TOML (docs/design.md §4);
//! * [`decl`]: an account's declaration as a document (export, import, API, store);
//! * [`trace`]: workload traces in CSV or JSON Lines;
//! * [`workload`]: the one validator of a workload's fields, for traces, the API and the store;
//! * [`events`]: node event files (fail / repair / drain / undrain);
//! * [`write`](mod@write): writing traces and configs back out;
//! * [`import`]: importers for public GPU-cluster traces;
//! * [`generate`]: synthetic workload generators.

pub mod bounds;
pub mod changes;
pub mod choices;
pub mod conditions;
pub mod config;
pub mod decl;
pub mod duration;
pub mod error;
pub mod events;
pub mod generate;
pub mod import;
mod lines;
pub mod trace;
pub mod vary;
pub mod workload;
pub mod write;
