//! Node health: the states `sinfo` gives Allot's nodes, turned into node
//! events (MNT-1 drain, MNT-2 failure, and back).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::SlurmOptions;
use super::error::SlurmError;
use super::jobs::Slots;
use super::outage::{Reach, reconcile, take_down};
use crate::executor::ExecEvent;
use crate::executor::health::{NodeHealth, transition};

/// How often `sinfo` is asked for node states.
const NODE_POLL: Duration = Duration::from_secs(2);

/// Classifies `sinfo --format=%T` (`idle`, `mixed`, `drained`,
/// `down*`, `allocated+drain`…).
pub fn health(state: &str) -> NodeHealth {
    let s = state.to_ascii_lowercase();
    if s.contains("down") || s.contains("fail") || s.ends_with('*') || s.contains("not_responding") {
        NodeHealth::Down
    } else if s.contains("drain") {
        NodeHealth::Drain
    } else {
        NodeHealth::Up
    }
}

/// Follows the health Slurm gives Allot's nodes. A node first seen out of
/// service is taken out in Allot too; from then on every change is sent.
/// `sinfo` is also the probe of whether Slurm can be reached: failing for
/// the outage threshold takes the cluster out of service (FLEET-3), and
/// the first answer after that reconciles its jobs, returns it
/// (FLEET-4) and sends its nodes' states afresh.
pub(super) async fn poll_nodes(
    opts: Arc<SlurmOptions>,
    watch: Watch,
    nodes: Vec<String>,
    events: mpsc::UnboundedSender<ExecEvent>,
) {
    let nodes: HashSet<String> = nodes.into_iter().collect();
    let mut seen: HashMap<String, NodeHealth> = HashMap::new();
    let mut reach = Reach::default();
    let mut fenced: Vec<u64> = Vec::new();
    loop {
        if events.is_closed() {
            return;
        }
        match node_states(&opts).await {
            Ok(states) => {
                if reach.answered() {
                    tracing::warn!(cluster = %watch.cluster, jobs = ?fenced, "Slurm answers again: reconciling before its nodes return");
                    reconcile(&opts, &watch.instance, &watch.slots).await;
                    fenced.clear();
                    let _ = events.send(ExecEvent::ClusterUp { cluster: watch.cluster.clone() });
                    seen.clear();
                }
                for (slurm_name, state) in states {
                    let name = opts.allot_name(&slurm_name);
                    if !nodes.contains(&name) {
                        continue;
                    }
                    let now = health(&state);
                    let before = seen.insert(name.clone(), now).unwrap_or(NodeHealth::Up);
                    for kind in transition(before, now) {
                        tracing::info!(node = %name, slurm_state = %state, "Slurm changed the node: {}", kind.as_str());
                        let by = format!("slurm: node state {state}");
                        let _ = events.send(ExecEvent::Node { node: name.clone(), kind, by });
                    }
                }
            }
            Err(error) => {
                let now = Instant::now();
                tracing::warn!(cluster = %watch.cluster, error = &error as &dyn std::error::Error, "cannot read Slurm node states");
                if reach.failed(now, opts.outage_after()) {
                    let reason = format!(
                        "Slurm has not answered for {} s: {}",
                        reach.failing_for(now).as_secs(),
                        crate::executor::with_sources(&error)
                    );
                    fenced.extend(take_down(&watch.cluster, reason, &watch.slots, &events));
                }
            }
        }
        tokio::time::sleep(NODE_POLL).await;
    }
}

/// What the node poller needs to take its cluster down and back.
pub(super) struct Watch {
    /// The fleet's name of the cluster.
    pub(super) cluster: String,
    /// The store instance (the comment on this store's jobs).
    pub(super) instance: String,
    pub(super) slots: Slots,
}

/// `(node, state)` of the partition's nodes (`sinfo --format=%N|%T`).
async fn node_states(opts: &SlurmOptions) -> Result<Vec<(String, String)>, SlurmError> {
    let text = sinfo(opts, "read the states of Slurm's nodes", "%N|%T").await?;
    Ok(text.lines().filter_map(|l| l.trim().split_once('|')).map(|(n, s)| (n.to_string(), s.to_string())).collect())
}

/// `sinfo --Node` with `format`, while doing `action`.
pub(super) async fn sinfo(opts: &SlurmOptions, action: &str, format: &str) -> Result<String, SlurmError> {
    let mut cmd = opts.command("sinfo");
    cmd.args(["--noheader", "--Node"]).arg(format!("--format={format}"));
    if let Some(p) = &opts.partition {
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
        use NodeHealth::*;
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
    }
}
