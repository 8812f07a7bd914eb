//! The node model every executor that watches its own nodes shares (the
//! Slurm executor's `sinfo`, the Kubernetes executor's Nodes): a node's
//! health as Allot cares about it, the node events that take Allot's view
//! from one health to another (MNT-1, MNT-2), and the order nodes are named
//! in.

use allot_core::NodeEventKind;

/// A node's health as far as Allot cares.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum NodeHealth {
    Up,
    /// No new work; what runs is preempted (MNT-1): Slurm's `DRAINING`,
    /// `DRAINED`, a cordoned Kubernetes Node.
    Drain,
    /// What runs is lost (MNT-2): Slurm's `DOWN`, `FAIL`, not responding;
    /// a Kubernetes Node not Ready or deleted.
    Down,
}

/// The node events that take Allot's view of a node from `from` to `to`.
pub fn transition(from: NodeHealth, to: NodeHealth) -> Vec<NodeEventKind> {
    use NodeHealth::*;
    match (from, to) {
        (a, b) if a == b => vec![],
        (_, Down) => vec![NodeEventKind::Fail],
        (Down, Drain) => vec![NodeEventKind::Repair, NodeEventKind::Drain],
        (_, Drain) => vec![NodeEventKind::Drain],
        (Down, Up) => vec![NodeEventKind::Repair],
        (_, Up) => vec![NodeEventKind::Undrain],
    }
}

/// `node10` after `node9`: the order nodes are laid out in.
pub fn natural_key(s: &str) -> (String, u64, String) {
    let digits_at = s.find(|c: char| c.is_ascii_digit()).unwrap_or(s.len());
    let (head, rest) = s.split_at(digits_at);
    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    (head.to_string(), rest[..end].parse().unwrap_or(0), rest[end..].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_change_of_health_is_its_node_events() {
        use NodeHealth::*;
        assert!(transition(Up, Up).is_empty());
        assert_eq!(transition(Up, Drain), [NodeEventKind::Drain]);
        assert_eq!(transition(Drain, Up), [NodeEventKind::Undrain]);
        assert_eq!(transition(Drain, Down), [NodeEventKind::Fail]);
        assert_eq!(transition(Down, Up), [NodeEventKind::Repair]);
        assert_eq!(transition(Down, Drain), [NodeEventKind::Repair, NodeEventKind::Drain]);
    }

    #[test]
    fn node_names_sort_naturally() {
        let mut names = ["node10", "node9", "gpu-2", "node1"];
        names.sort_by_key(|n| natural_key(n));
        assert_eq!(names, ["gpu-2", "node1", "node9", "node10"]);
    }
}
