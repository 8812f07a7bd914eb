//! Requests from the API: submissions, cancels, explanations, account and
//! node changes, and the read-only views of the live state.

use allot_core::{Health, NodeEventKind, NodeId, Phase, Reason, Rule, Time, WorkloadId};

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
                    crate::metrics::labels(&self.state.accounts.account(spec.account).path, spec.class.as_str());
                self.metrics.submissions.get_or_create(&labels).inc();
                let live = Live { seq, command, env, retries, failures: 0, cancel: false, attempt: 0 };
                self.add(spec, live);
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
                let _ = reply.send(crate::accounts::views(&self.state, now, true));
            }
            Msg::Nodes { reply } => {
                let _ = reply.send(
                    self.state
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
        let i = w.0 as usize;
        match self.state.run(w).phase {
            Phase::Pending => {
                let reason = Reason::new(Rule::Grace, format!("cancelled by {by}"));
                self.ops.push(Op::WorkloadState {
                    seq,
                    state: "cancelled",
                    reason: reason.to_string(),
                    end_t: Some(now as i64),
                });
                self.state.end_pending(w, now, Phase::Cancelled, reason);
                self.metrics.cancelled.get_or_create(&self.account_class_of(w)).inc();
                self.dirty = true;
                Ok("cancelled".into())
            }
            Phase::Running => {
                self.live[i].cancel = true;
                self.ops.push(Op::CancelRequested { seq });
                self.preempt(w, now, Reason::new(Rule::Grace, format!("cancelled by {by}; stopping after grace")));
                Ok("stopping".into())
            }
            Phase::Stopping => {
                self.live[i].cancel = true;
                self.ops.push(Op::CancelRequested { seq });
                Ok("stopping".into())
            }
            _ => Err(Refusal::Conflict(format!("workload {seq} has already ended"))),
        }
    }

    fn account_of(&self, w: WorkloadId) -> &str {
        &self.state.accounts.account(self.state.spec(w).account).path
    }

    fn account_class_of(&self, w: WorkloadId) -> crate::metrics::AccountClass {
        let spec = self.state.spec(w);
        crate::metrics::labels(&self.state.accounts.account(spec.account).path, spec.class.as_str())
    }

    fn explain(&self, seq: i64, now: Time) -> Option<String> {
        let &w = self.by_seq.get(&seq)?;
        let run = self.state.run(w);
        if run.phase == Phase::Pending {
            return Some(self.policy.explain(&self.state, w, now).to_string());
        }
        run.last_reason.as_ref().map(Reason::to_string)
    }

    pub(crate) fn node_view(&self, n: NodeId) -> NodeView {
        let node = self.state.cluster.node(n);
        let health = match self.state.health[n.0 as usize] {
            Health::Up => "up",
            Health::Draining => "draining",
            Health::Drained => "drained",
            Health::Down => "down",
        };
        NodeView {
            name: node.name.clone(),
            pool: self.state.cluster.pool(node.pool).name.clone(),
            rack: node.rack,
            gpu_type: self.state.cluster.gpu_types[node.gpu.0 as usize].name.clone(),
            gpus: node.gpus,
            free_gpus: self.state.free.free[n.0 as usize].count_ones(),
            health: health.into(),
            workloads: self.state.workloads_on(n).iter().map(|w| self.state.spec(*w).id.clone()).collect(),
            workload_accounts: self.state.workloads_on(n).iter().map(|w| self.account_of(*w).to_string()).collect(),
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
        let Some(id) = self.state.accounts.get(path).filter(|id| id.0 != 0) else {
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
        let a = self.state.accounts.account(id);
        let before = serde_json::json!({"budget_gpu_hours": a.budget_gpu_hours, "share": a.share});
        let b = tree.account(id);
        let after = serde_json::json!({"budget_gpu_hours": b.budget_gpu_hours, "share": b.share});
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
        self.state.accounts = tree;
        self.dirty = true;
        let view = crate::accounts::views(&self.state, now, true).into_iter().find(|v| v.path == path);
        Ok(view.ok_or_else(|| Refusal::NotFound(path.to_string())))
    }

    /// Drain, undrain, fail or repair a node, as the simulator's node events.
    pub(crate) fn node_action(
        &mut self,
        name: &str,
        kind: NodeEventKind,
        by: &str,
        now: Time,
    ) -> Result<NodeView, Refusal> {
        let Some(n) = self.state.cluster.node_by_name(name) else {
            return Err(Refusal::NotFound(format!("unknown node {name:?}")));
        };
        let health = self.state.health[n.0 as usize];
        self.ops.push(Op::NodeEvent {
            t: now as i64,
            node: name.into(),
            kind: kind.as_str().into(),
            principal: by.into(),
        });
        self.dirty = true;
        tracing::info!(node = name, principal = by, "node {}", kind.as_str());
        match kind {
            NodeEventKind::Fail => {
                self.state.set_health(n, Health::Down);
                for w in self.state.workloads_on(n) {
                    let reason = Reason::new(Rule::Failure, format!("node {name} failed"));
                    match self.state.run(w).phase {
                        Phase::Running => self.signal_with(w, now, 0, reason),
                        _ => self.kills.push(self.key(w)),
                    }
                }
            }
            NodeEventKind::Drain => {
                if health != Health::Down {
                    self.state.set_health(n, Health::Draining);
                    for w in self.state.workloads_on(n) {
                        if self.state.run(w).phase == Phase::Running {
                            self.preempt(
                                w,
                                now,
                                Reason::new(Rule::Drain, format!("node {name} drained for maintenance")),
                            );
                        }
                    }
                    if self.node_idle(n) {
                        self.state.set_health(n, Health::Drained);
                    }
                }
            }
            NodeEventKind::Repair | NodeEventKind::Undrain => {
                if !(kind == NodeEventKind::Undrain && health == Health::Down) {
                    self.state.set_health(n, Health::Up);
                }
            }
        }
        Ok(self.node_view(n))
    }
}

impl Scheduler {
    /// A recovered workload whose cancel was requested before the restart.
    pub(crate) fn cancel_recovered(&mut self, w: WorkloadId, now: Time) {
        let seq = self.live[w.0 as usize].seq;
        let reason = Reason::new(Rule::Grace, "cancelled (requested before the server restarted)");
        self.ops.push(Op::WorkloadState {
            seq,
            state: "cancelled",
            reason: reason.to_string(),
            end_t: Some(now as i64),
        });
        self.state.end_pending(w, now, Phase::Cancelled, reason);
    }
}
