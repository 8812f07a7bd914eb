//! The stored vocabulary of a workload's state, an attempt's state and an
//! attempt's outcome: one enum each, written to the store as the text it
//! has always held (`as_str`) and read back with `parse`.
//!
//! A workload's state is its engine [`Phase`]; an attempt's outcome is the
//! engine's [`Outcome`](allot_core::engine::Outcome) (`Outcome::ALL`, `Outcome::parse`).

use allot_core::Phase;

/// Every workload state, in lifecycle order.
pub const PHASES: [Phase; 7] = [
    Phase::Pending,
    Phase::Running,
    Phase::Stopping,
    Phase::Finished,
    Phase::Failed,
    Phase::Cancelled,
    Phase::Rejected,
];

/// The workload state stored as `s` (the engine's own names).
pub fn parse_phase(s: &str) -> Option<Phase> {
    s.parse().ok()
}

/// Where an attempt is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AttemptState {
    /// Recorded; its process not yet confirmed.
    Starting,
    Running,
    /// Signalled; it holds its GPUs until it exits or grace ends.
    Stopping,
    Ended,
}

impl AttemptState {
    pub const ALL: [AttemptState; 4] =
        [AttemptState::Starting, AttemptState::Running, AttemptState::Stopping, AttemptState::Ended];

    pub fn as_str(self) -> &'static str {
        match self {
            AttemptState::Starting => "starting",
            AttemptState::Running => "running",
            AttemptState::Stopping => "stopping",
            AttemptState::Ended => "ended",
        }
    }

    pub fn parse(s: &str) -> Option<AttemptState> {
        AttemptState::ALL.into_iter().find(|a| a.as_str() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text each value is stored as: the store's format, which existing
    /// stores hold and must keep reading.
    #[test]
    fn stored_text_is_unchanged_and_round_trips() {
        let phases: Vec<&str> = PHASES.iter().map(|p| p.as_str()).collect();
        assert_eq!(phases, ["pending", "running", "stopping", "finished", "failed", "cancelled", "rejected"]);
        let states: Vec<&str> = AttemptState::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(states, ["starting", "running", "stopping", "ended"]);
        let outcomes: Vec<&str> = allot_core::engine::Outcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(outcomes, ["finished", "preempted", "node-failed", "cancelled", "failed", "launch-failed", "lost"]);
        for p in PHASES {
            assert_eq!(parse_phase(p.as_str()), Some(p));
            assert_eq!(serde_json::to_value(p).unwrap(), p.as_str(), "the API's JSON is the stored text");
        }
        for s in AttemptState::ALL {
            assert_eq!(AttemptState::parse(s.as_str()), Some(s));
        }
        for o in allot_core::engine::Outcome::ALL {
            assert_eq!(allot_core::engine::Outcome::parse(o.as_str()), Some(o));
        }
        assert_eq!(parse_phase("Running"), None);
    }
}
