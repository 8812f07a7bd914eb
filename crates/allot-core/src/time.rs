//! Time.

/// Time in whole seconds since the start of the trace (simulator) or the Unix
/// epoch (server). Integer time keeps every decision reproducible.
pub type Time = u64;
