//! A cluster of the fleet out of service and back (FLEET-3, FLEET-4),
//! applied as the engine's node events on each of its nodes: the one
//! node-event path ([`Scheduler::node_action`]), so availability, requeues
//! (MNT-2, CON-3) and the store's node history are what a failed node's
//! are.

use allot_core::{Health, NodeEventKind, NodeId, Reason, Rule, Time};

use super::Scheduler;

impl Scheduler {
    /// The executor of `cluster` cannot be reached: each of its nodes in
    /// service fails; the decisions this makes cite FLEET-3.
    pub(crate) fn cluster_down(&mut self, cluster: &str, why: &str, now: Time) {
        let st = &self.engine.state;
        let Some(c) = st.cluster.cluster_by_name(cluster) else {
            tracing::warn!(cluster, "an executor reported an unknown cluster down");
            return;
        };
        let nodes: Vec<NodeId> = (0..st.cluster.nodes.len() as u32)
            .map(NodeId)
            .filter(|&n| st.cluster.cluster_of(n) == c && st.health[n.0 as usize].in_service())
            .collect();
        let reason = Reason::new(Rule::FleetOutage, format!("cluster {cluster} is out of service: {why}"));
        tracing::error!(cluster, nodes = nodes.len(), %reason, "cluster out of service");
        let by = format!("{}: {reason}", self.exec.name());
        self.cause = Some(reason);
        for &n in &nodes {
            let name = self.engine.state.cluster.node(n).name.clone();
            if let Err(e) = self.node_action(&name, NodeEventKind::Fail, &by, now) {
                tracing::warn!(node = name, error = ?e, "cannot take the node out of service");
            }
        }
        self.cause = None;
        self.outages.entry(c).or_default().extend(nodes);
    }

    /// The cluster answers again and was reconciled: the nodes its outage
    /// took out are repaired (FLEET-4). Nodes that were out of service
    /// before it (drained, failed) stay as they were; the executor then
    /// reports the cluster's own node states afresh.
    pub(crate) fn cluster_up(&mut self, cluster: &str, now: Time) {
        let Some(c) = self.engine.state.cluster.cluster_by_name(cluster) else {
            tracing::warn!(cluster, "an executor reported an unknown cluster back");
            return;
        };
        let nodes = self.outages.remove(&c).unwrap_or_default();
        let reason = Reason::new(Rule::FleetReturn, format!("cluster {cluster} answers again and was reconciled"));
        tracing::warn!(cluster, nodes = nodes.len(), %reason, "cluster back in service");
        let by = format!("{}: {reason}", self.exec.name());
        for n in nodes {
            if self.engine.state.health[n.0 as usize] != Health::Down {
                continue;
            }
            let name = self.engine.state.cluster.node(n).name.clone();
            if let Err(e) = self.node_action(&name, NodeEventKind::Repair, &by, now) {
                tracing::warn!(node = name, error = ?e, "cannot return the node to service");
            }
        }
    }
}
