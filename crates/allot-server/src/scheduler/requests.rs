//! Requests from the API: submissions, cancels, explanations, account and
//! node changes, and the read-only views of the live state.

use allot_core::engine::Cancelled;
use allot_core::{Health, NodeEvent, NodeEventKind, NodeId, Phase, Reason, Time, WorkloadId};

use super::{AccountField, Live, Msg, Refusal, Scheduler};
use crate::store::{Op, StoreError};
use crate::views::{AccountView, NodeView};

impl Scheduler {
    pub(crate) async fn handle(&mut self, m: Msg) -> Result<(), StoreError> {
        let now = self.tick_now();
        match m {
            Msg::Submitted { seq, mut spec, command, env, retries, accepted } => {
                spec.id = seq.to_string();
                let labels =
                    crate::metrics::labels(&self.engine.state.accounts.account(spec.account).path, spec.class.as_str());
                self.metrics.submissions.get_or_create(&labels).inc();
                let retries = u32::try_from(retries.max(0)).unwrap_or(u32::MAX);
                self.arrive(spec, Live { seq, command, env }, retries, now);
                let _ = accepted.send(());
            }
            Msg::Cancel { seq, by, reply } => {
                if let Some(busy) = self.unavailable() {
                    let _ = reply.send(Err(busy));
                    return Ok(());
                }
                let r = self.cancel(seq, &by, now);
                let _ = reply.send(self.committed(r).await?);
            }
            Msg::Explain { seq, reply } => {
                let _ = reply.send(self.explain(seq, now));
            }
            Msg::Accounts { reply } => {
                let _ = reply.send(crate::accounts::views(&self.engine.state, now, true));
            }
            Msg::Nodes { reply } => {
                let _ = reply.send(
                    self.engine
                        .state
                        .cluster
                        .nodes
                        .iter()
                        .enumerate()
                        .map(|(i, _)| self.node_view(NodeId(i as u32)))
                        .collect(),
                );
            }
            Msg::SetAccount { path, field, value, by, reply } => {
                if let Some(busy) = self.unavailable() {
                    let _ = reply.send(Err(busy));
                    return Ok(());
                }
                let r = self.set_account(&path, field, value, &by, now).await?;
                let _ = reply.send(r);
            }
            Msg::Node { name, kind, by, reply } => {
                if let Some(busy) = self.unavailable() {
                    let _ = reply.send(Err(busy));
                    return Ok(());
                }
                let r = self.node_action(&name, kind, &by, now);
                let _ = reply.send(self.committed(r).await?);
            }
        }
        Ok(())
    }

    /// A change cannot be accepted now: earlier writes wait for the store.
    fn unavailable(&self) -> Option<Refusal> {
        self.outage.map(|since| {
            Refusal::Unavailable(format!(
                "the store is unavailable (for {} s); the scheduler is paused, try again",
                since.elapsed().as_secs()
            ))
        })
    }

    /// A change's answer once its writes are committed; "unavailable" when
    /// they could not be yet (they are kept and committed when the store is
    /// back, so a retry finds the change made).
    async fn committed<T>(&mut self, r: Result<T, Refusal>) -> Result<Result<T, Refusal>, StoreError> {
        if self.flush().await? || self.ops.is_empty() {
            return Ok(r);
        }
        Ok(Err(self
            .unavailable()
            .unwrap_or_else(|| Refusal::Unavailable("the store is unavailable; try again".into()))))
    }

    fn cancel(&mut self, seq: i64, by: &str, now: Time) -> Result<String, Refusal> {
        let Some(&w) = self.by_seq.get(&seq) else {
            return Err(Refusal::Conflict(format!("workload {seq} has already ended")));
        };
        let r = match self.engine.cancel(w, now, &format!("cancelled by {by}")) {
            Cancelled::Ended => Ok(Phase::Cancelled.as_str().into()),
            Cancelled::Stopping => {
                self.ops.push(Op::CancelRequested { seq });
                Ok(Phase::Stopping.as_str().into())
            }
            Cancelled::AlreadyEnded => Err(Refusal::Conflict(format!("workload {seq} has already ended"))),
        };
        self.apply(now);
        r
    }

    fn account_of(&self, w: WorkloadId) -> &str {
        let st = &self.engine.state;
        &st.accounts.account(st.spec(w).account).path
    }

    fn explain(&self, seq: i64, now: Time) -> Option<String> {
        let &w = self.by_seq.get(&seq)?;
        let run = self.engine.state.run(w);
        if run.phase == Phase::Pending {
            return Some(self.policy.explain(&self.engine.state, w, now).to_string());
        }
        run.last_reason.as_ref().map(Reason::to_string)
    }

    pub(crate) fn node_view(&self, n: NodeId) -> NodeView {
        let st = &self.engine.state;
        let node = st.cluster.node(n);
        let health = match st.health[n.0 as usize] {
            Health::Up => "up",
            Health::Draining => "draining",
            Health::Drained => "drained",
            Health::Down => "down",
        };
        NodeView {
            name: node.name.clone(),
            cluster: st.cluster.is_fleet().then(|| st.cluster.cluster_name(st.cluster.cluster_of(n)).to_string()),
            pool: st.cluster.pool(node.pool).name.clone(),
            rack: node.rack,
            gpu_type: st.cluster.gpu_types[node.gpu.0 as usize].name.clone(),
            gpus: node.gpus,
            free_gpus: st.free.free[n.0 as usize].count_ones(),
            health: health.into(),
            workloads: st.workloads_on(n).iter().map(|w| st.spec(*w).id.clone()).collect(),
            workload_accounts: st.workloads_on(n).iter().map(|w| self.account_of(*w).to_string()).collect(),
        }
    }

    /// Budget or share change: checked by rebuilding the tree, committed
    /// with its audit entry, then applied.
    async fn set_account(
        &mut self,
        path: &str,
        field: AccountField,
        value: Option<f64>,
        by: &str,
        now: Time,
    ) -> Result<Result<AccountView, Refusal>, StoreError> {
        let Some(id) = self.engine.state.accounts.get(path).filter(|id| id.0 != 0) else {
            return Ok(Err(Refusal::NotFound(format!("unknown account {path:?}"))));
        };
        let key = match field {
            AccountField::Budget => "budget_gpu_hours",
            AccountField::Share => "share",
        };
        if let Some(v) = value
            && !(v.is_finite() && v > 0.0)
        {
            return Ok(Err(Refusal::Invalid {
                field: key.into(),
                message: format!("must be a finite number > 0, got {v}"),
            }));
        }
        let mut overrides = self.overrides.clone();
        match field {
            AccountField::Budget => overrides.budget.insert(path.to_string(), value),
            AccountField::Share => overrides.share.insert(path.to_string(), value),
        };
        let tree = match crate::accounts::build_tree(&self.base_accounts, &overrides) {
            Ok(t) => t,
            Err(e) => return Ok(Err(Refusal::Invalid { field: key.into(), message: e.to_string() })),
        };
        let a = self.engine.state.accounts.account(id);
        let before = serde_json::json!({"budget_gpu_hours": a.budget_gpu_hours, "share": a.share});
        let b = tree.account(id);
        // `set`: the value given (null: back to the config's), which
        // `allot trace export` replays (docs/server.md).
        let after = serde_json::json!({"budget_gpu_hours": b.budget_gpu_hours, "share": b.share, "set": value});
        match self.store.set_override(path, field.as_str(), value, by, now as i64, &before, &after).await {
            Ok(()) => {}
            Err(e) if e.is_fenced() => return Err(e),
            Err(e) => {
                tracing::warn!(account = path, error = %e, "account change not recorded");
                return Ok(Err(Refusal::Unavailable(format!("the change could not be recorded: {e}"))));
            }
        }
        tracing::info!(account = path, principal = by, %before, %after, "account {} changed", field.as_str());
        self.overrides = overrides;
        self.engine.set_accounts(tree);
        let view = crate::accounts::views(&self.engine.state, now, true).into_iter().find(|v| v.path == path);
        Ok(view.ok_or_else(|| Refusal::NotFound(path.to_string())))
    }

    /// Drain, undrain, fail or repair a node: recorded with its principal,
    /// then the engine's node event (MNT-1, MNT-2).
    pub(crate) fn node_action(
        &mut self,
        name: &str,
        kind: NodeEventKind,
        by: &str,
        now: Time,
    ) -> Result<NodeView, Refusal> {
        let Some(n) = self.engine.state.cluster.node_by_name(name) else {
            return Err(Refusal::NotFound(format!("unknown node {name:?}")));
        };
        self.ops.push(Op::NodeEvent {
            t: now as i64,
            node: name.into(),
            kind: kind.as_str().into(),
            principal: by.into(),
        });
        tracing::info!(node = name, principal = by, "node {}", kind.as_str());
        self.engine.node_event(&NodeEvent { t: now, node: n, kind });
        self.apply(now);
        Ok(self.node_view(n))
    }
}
