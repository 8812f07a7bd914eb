//! Node health: the states `sinfo` gives Allot's nodes, turned into node
//! events (MNT-1 drain, MNT-2 failure, and back).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use allot_core::NodeEventKind;
use tokio::process::Command;
use tokio::sync::mpsc;

use super::error::SlurmError;
use crate::executor::ExecEvent;

/// How often `sinfo` is asked for node states.
const NODE_POLL: Duration = Duration::from_secs(2);

/// A node's health as far as Allot cares.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SlurmHealth {
    Up,
    /// `DRAINING`, `DRAINED`: no new work; what runs is preempted (MNT-1).
    Drain,
    /// `DOWN`, `FAIL`, not responding (`*`): what runs is lost (MNT-2).
    Down,
}

/// Classifies `sinfo --format=%T` (`idle`, `mixed`, `drained`,
/// `down*`, `allocated+drain`…).
pub fn health(state: &str) -> SlurmHealth {
    let s = state.to_ascii_lowercase();
    if s.contains("down") || s.contains("fail") || s.ends_with('*') || s.contains("not_responding") {
        SlurmHealth::Down
    } else if s.contains("drain") {
        SlurmHealth::Drain
    } else {
        SlurmHealth::Up
    }
}

/// The node events that take Allot's view of a node from `from` to `to`.
pub fn transition(from: SlurmHealth, to: SlurmHealth) -> Vec<NodeEventKind> {
    use SlurmHealth::*;
    match (from, to) {
        (a, b) if a == b => vec![],
        (_, Down) => vec![NodeEventKind::Fail],
        (Down, Drain) => vec![NodeEventKind::Repair, NodeEventKind::Drain],
        (_, Drain) => vec![NodeEventKind::Drain],
        (Down, Up) => vec![NodeEventKind::Repair],
        (_, Up) => vec![NodeEventKind::Undrain],
    }
}

/// Follows the health Slurm gives Allot's nodes. A node first seen out of
/// service is taken out in Allot too; from then on every change is sent.
pub(super) async fn poll_nodes(
    partition: Option<String>,
    nodes: Vec<String>,
    events: mpsc::UnboundedSender<ExecEvent>,
) {
    let nodes: HashSet<String> = nodes.into_iter().collect();
    let mut seen: HashMap<String, SlurmHealth> = HashMap::new();
    loop {
        if events.is_closed() {
            return;
        }
        match node_states(partition.as_deref()).await {
            Ok(states) => {
                for (name, state) in states.into_iter().filter(|(n, _)| nodes.contains(n)) {
                    let now = health(&state);
                    let before = seen.insert(name.clone(), now).unwrap_or(SlurmHealth::Up);
                    for kind in transition(before, now) {
                        tracing::info!(node = %name, slurm_state = %state, "Slurm changed the node: {}", kind.as_str());
                        let by = format!("slurm: node state {state}");
                        let _ = events.send(ExecEvent::Node { node: name.clone(), kind, by });
                    }
                }
            }
            Err(error) => tracing::warn!(error = &error as &dyn std::error::Error, "cannot read Slurm node states"),
        }
        tokio::time::sleep(NODE_POLL).await;
    }
}

/// `(node, state)` of the partition's nodes (`sinfo --format=%N|%T`).
async fn node_states(partition: Option<&str>) -> Result<Vec<(String, String)>, SlurmError> {
    let text = sinfo("read the states of Slurm's nodes", partition, "%N|%T").await?;
    Ok(text.lines().filter_map(|l| l.trim().split_once('|')).map(|(n, s)| (n.to_string(), s.to_string())).collect())
}

/// `sinfo --Node` with `format`, while doing `action`.
pub(super) async fn sinfo(action: &str, partition: Option<&str>, format: &str) -> Result<String, SlurmError> {
    let mut cmd = Command::new("sinfo");
    cmd.args(["--noheader", "--Node"]).arg(format!("--format={format}"));
    if let Some(p) = partition {
        cmd.arg(format!("--partition={p}"));
    }
    let out = SlurmError::command(action, "sinfo", cmd.output().await)?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_slurm_node_states() {
        use SlurmHealth::*;
        let cases = [
            ("idle", Up),
            ("mixed", Up),
            ("allocated", Up),
            ("completing", Up),
            ("draining", Drain),
            ("drained", Drain),
            ("mixed+drain", Drain),
            ("down", Down),
            ("down*", Down),
            ("idle*", Down),
            ("fail", Down),
            ("drained*", Down),
        ];
        for (state, want) in cases {
            assert_eq!(health(state), want, "{state}");
        }
        assert!(transition(Up, Up).is_empty());
        assert_eq!(transition(Up, Drain), [NodeEventKind::Drain]);
        assert_eq!(transition(Drain, Up), [NodeEventKind::Undrain]);
        assert_eq!(transition(Drain, Down), [NodeEventKind::Fail]);
        assert_eq!(transition(Down, Up), [NodeEventKind::Repair]);
        assert_eq!(transition(Down, Drain), [NodeEventKind::Repair, NodeEventKind::Drain]);
    }
}
