//! Requests from the API: submissions, cancels, explanations, account and
//! node changes, and the read-only views of the live state.

use allot_core::engine::{Answer, Cancelled, Input};
use allot_core::{
    AccountBook, AccountEdit, Allocation, Health, NodeEvent, NodeEventKind, NodeId, Phase, Reason, Time, WorkloadId,
};

use super::{Msg, Refusal, Scheduler};
use crate::store::accounts::AccountAudit;
use crate::store::{Op, StoreError};
use crate::views::{AccountEdits, AccountView, NodeHold, NodeView};

impl Scheduler {
    pub(crate) async fn handle(&mut self, m: Msg) -> Result<(), StoreError> {
        let now = self.tick_now();
        match m {
            Msg::Submitted(sub) => {
                if !self.dependencies_known(&sub.live) {
                    self.early.push(*sub);
                    return Ok(());
                }
                self.submitted(*sub, now);
                while let Some(i) = self.early.iter().position(|s| self.dependencies_known(&s.live)) {
                    let sub = self.early.remove(i);
                    self.submitted(sub, now);
                }
            }
            Msg::Hold { seqs, hold, reply } => {
                if let Some(busy) = self.unavailable() {
                    let _ = reply.send(Err(busy));
                    return Ok(());
                }
                let r = seqs.iter().map(|&seq| self.hold(seq, hold, now)).collect();
                let _ = reply.send(self.committed(Ok(r)).await?);
            }
            Msg::CancelMany { seqs, by, reply } => {
                if let Some(busy) = self.unavailable() {
                    let _ = reply.send(Err(busy));
                    return Ok(());
                }
                let r = seqs.iter().map(|&seq| self.cancel(seq, &by, now)).collect();
                let _ = reply.send(self.committed(Ok(r)).await?);
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
            Msg::ExplainPending { seqs, reply } => {
                let _ = reply.send(self.explain_pending(&seqs, now));
            }
            Msg::Accounts { reply } => {
                let _ = reply.send(crate::accounts::views(self.engine.state(), now, true));
            }
            Msg::Nodes { reply } => {
                let _ = reply.send(
                    self.engine
                        .state()
                        .cluster
                        .nodes
                        .iter()
                        .enumerate()
                        .map(|(i, _)| self.node_view(NodeId(i as u32), now))
                        .collect(),
                );
            }
            Msg::AccountDecls { reply } => {
                let c = &self.engine.state().cluster;
                let _ = reply.send(self.book.specs().map(|s| crate::accounts::decl_of(s, c)).collect());
            }
            Msg::ImportAccounts { specs, reply } => {
                let _ = reply.send(self.book.diff(&specs));
            }
            Msg::EditAccounts { edits, stop, dry_run, by, reply } => {
                if let Some(busy) = self.unavailable() {
                    let _ = reply.send(Err(busy));
                    return Ok(());
                }
                let r = self.edit_accounts(&edits, stop, dry_run, &by, now).await?;
                let r = match r {
                    Ok(out) if out.stopped > 0 => self.committed(Ok(out)).await?,
                    r => r,
                };
                let _ = reply.send(r);
            }
            Msg::Reload { plan, by, reply } => {
                if let Some(busy) = self.unavailable() {
                    let _ = reply.send(Err(busy));
                    return Ok(());
                }
                let r = self.reload(*plan, &by, now).await?;
                let _ = reply.send(self.committed(r).await?);
            }
            Msg::Node { name, kind, by, reason, reply } => {
                if let Some(busy) = self.unavailable() {
                    let _ = reply.send(Err(busy));
                    return Ok(());
                }
                let r = self.node_action(&name, kind, &by, reason, now);
                let _ = reply.send(self.committed(r).await?);
            }
            Msg::MarkerTouched { key, at } => {
                if let Err(e) = self.checkpointed(key, at, now) {
                    tracing::debug!(workload = key.seq, attempt = key.attempt, error = ?e, "stale checkpoint marker");
                }
            }
            Msg::CheckpointReport { seq, token, reply } => {
                if let Some(busy) = self.unavailable() {
                    let _ = reply.send(Err(busy));
                    return Ok(());
                }
                let r = self.checkpoint_report(seq, &token, now);
                let _ = reply.send(self.committed(r).await?);
            }
            Msg::NextStarts { reply } => {
                let _ = reply.send(self.next_starts());
            }
        }
        Ok(())
    }

    /// The waiting workloads the passes preempted running work for, in the
    /// order chosen, with their victims (`scheduler/next.rs`).
    pub(crate) fn next_starts(&self) -> Vec<super::NextStart> {
        let st = self.engine.state();
        let chosen = super::next::lock(&self.chosen);
        chosen
            .choices
            .iter()
            .filter(|c| st.run(c.w).phase == Phase::Pending)
            .map(|c| {
                let spec = st.spec(c.w);
                let victims = c
                    .victims
                    .iter()
                    .map(|(v, attempt, reason)| super::Victim {
                        seq: self.live[v.0 as usize].seq,
                        account: self.account_of(*v).to_string(),
                        stop_at: super::next::releasing(st, *v, *attempt)
                            .then(|| st.run(*v).stop_at.map(|t| t as i64))
                            .flatten(),
                        reason: reason.to_string(),
                    })
                    .collect();
                super::NextStart {
                    seq: self.live[c.w.0 as usize].seq,
                    account: self.account_of(c.w).to_string(),
                    user: spec.user.clone(),
                    class: spec.class.as_str().to_string(),
                    gpus: spec.gpus,
                    submit_t: spec.submit as i64,
                    chosen_t: c.t as i64,
                    victims,
                }
            })
            .collect()
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

    /// A committed submission arrives.
    fn submitted(&mut self, sub: super::Submission, now: Time) {
        let super::Submission { mut spec, live, retries, accepted } = sub;
        spec.id = live.seq.to_string();
        let labels =
            crate::metrics::labels(&self.engine.state().accounts.account(spec.account).path, spec.class.as_str());
        self.metrics.submissions.get_or_create(&labels).inc();
        let retries = u32::try_from(retries.max(0)).unwrap_or(u32::MAX);
        self.arrive(spec, live, retries, now);
        let _ = accepted.send(());
    }

    /// HOLD-1: holds or releases one workload; its state after, or why not.
    fn hold(&mut self, seq: i64, hold: bool, now: Time) -> Result<String, String> {
        let Some(&w) = self.by_seq.get(&seq) else {
            return Err(format!("workload {seq} has already ended"));
        };
        let input = if hold { Input::Hold { workload: w } } else { Input::Release { workload: w } };
        let Answer::Hold(r) = self.feed(input, now) else { unreachable!("a hold answers Hold") };
        match r {
            Ok(()) => {
                let held = self.engine.held(w);
                self.ops.push(Op::Held { seq, held });
                self.apply(now);
                Ok(if held { "held".to_string() } else { self.engine.state().run(w).phase.as_str().to_string() })
            }
            Err(e) => Err(format!("workload {seq}: {e}")),
        }
    }

    fn cancel(&mut self, seq: i64, by: &str, now: Time) -> Result<String, Refusal> {
        let Some(&w) = self.by_seq.get(&seq) else {
            return Err(Refusal::Conflict(format!("workload {seq} has already ended")));
        };
        let Answer::Cancelled(c) = self.feed(Input::Cancel { workload: w, detail: format!("cancelled by {by}") }, now)
        else {
            unreachable!("a cancel answers Cancelled")
        };
        let r = match c {
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
        let st = self.engine.state();
        &st.accounts.account(st.spec(w).account).path
    }

    fn explain(&self, seq: i64, now: Time) -> Option<String> {
        let &w = self.by_seq.get(&seq)?;
        let run = self.engine.state().run(w);
        if run.phase == Phase::Pending {
            return Some(crate::views::for_people(&self.engine.explain(&*self.policy, w, now), now as i64));
        }
        run.last_reason.as_ref().map(Reason::to_string)
    }

    /// [`Policy::explain_all`] of those of `seqs` that are pending.
    fn explain_pending(&self, seqs: &[i64], now: Time) -> Vec<Option<String>> {
        let st = self.engine.state();
        let pending = |seq: &i64| self.by_seq.get(seq).copied().filter(|&w| st.run(w).phase == Phase::Pending);
        let ws: Vec<WorkloadId> = seqs.iter().filter_map(pending).collect();
        let mut reasons = self.engine.explain_all(&*self.policy, &ws, now).into_iter();
        seqs.iter()
            .map(|seq| pending(seq).and_then(|_| reasons.next()).map(|r| crate::views::for_people(&r, now as i64)))
            .collect()
    }

    /// A node as the API shows it, with every workload on it (the API
    /// filters them by caller, [`NodeView::retain_visible`]): which of its
    /// GPUs each holds and, from the attempt's last GPU telemetry sample,
    /// whether it leaves them idle (`[telemetry] idle_threshold`).
    pub(crate) fn node_view(&self, n: NodeId, now: Time) -> NodeView {
        let st = self.engine.state();
        let node = st.cluster.node(n);
        let health = match st.health[n.0 as usize] {
            Health::Up => "up",
            Health::Draining => "draining",
            Health::Drained => "drained",
            Health::Down => "down",
        };
        let on = st.workloads_on(n);
        let held = on
            .iter()
            .filter_map(|&w| {
                let run = st.run(w);
                let mask = run.alloc.as_ref()?.parts.iter().find(|(m, _)| *m == n)?.1;
                let util = self.telemetry.current(self.key(w, run.attempts), now);
                Some(NodeHold {
                    workload: Some(st.spec(w).id.clone()),
                    account: Some(self.account_of(w).to_string()),
                    gpus: mask.count_ones(),
                    indices: Allocation::indices(mask).collect(),
                    util,
                    idle: util.is_some_and(|u| u < self.telemetry.config.idle_threshold),
                })
            })
            .collect();
        NodeView {
            name: node.name.clone(),
            cluster: st.cluster.is_fleet().then(|| st.cluster.cluster_name(st.cluster.cluster_of(n)).to_string()),
            pool: st.cluster.pool(node.pool).name.clone(),
            rack: node.rack,
            gpu_type: st.cluster.gpu_types[node.gpu.0 as usize].name.clone(),
            gpus: node.gpus,
            free_gpus: st.free.free[n.0 as usize].count_ones(),
            health: health.into(),
            reason: (health != "up").then(|| self.node_reasons.get(&n).cloned()).flatten(),
            workloads: on.iter().map(|w| st.spec(*w).id.clone()).collect(),
            workload_accounts: on.iter().map(|w| self.account_of(*w).to_string()).collect(),
            held,
        }
    }

    /// Account tree edits (ACC-1): checked by the book in order, all
    /// committed in one transaction, then applied to the engine and the
    /// API's catalog. One audit entry per edit, but a run of users' shares
    /// (or budgets) of one account is one edit of the book and one entry
    /// whose `set` names every user: the task's work is linear in the
    /// number of users, not quadratic (issue 30, point 15). A close with
    /// `stop` cancels the closed subtrees' workloads (ACC-3).
    pub(crate) async fn edit_accounts(
        &mut self,
        edits: &[AccountEdit],
        stop: bool,
        dry_run: bool,
        by: &str,
        now: Time,
    ) -> Result<Result<AccountEdits, Refusal>, StoreError> {
        let cluster = &self.engine.state().cluster;
        let decl = |b: &AccountBook, p: &str| -> serde_json::Value {
            b.spec(p).map_or(serde_json::Value::Null, |s| serde_json::json!(crate::accounts::decl_of(s, cluster)))
        };
        let mut book = self.book.clone();
        let (mut audit, mut renames, mut changes) = (Vec::new(), Vec::new(), Vec::new());
        let (mut touched, mut closed): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
        for group in batches(edits) {
            let e = &group[0];
            let next = match book.apply_all(group) {
                Ok(b) => b,
                Err(err) => return Ok(Err(Refusal::Invalid { field: err.field().into(), message: err.to_string() })),
            };
            let path = e.path().to_string();
            let now_at = match e {
                AccountEdit::Rename { to, .. } => to.clone(),
                _ => path.clone(),
            };
            let mut after = decl(&next, &now_at);
            // `set`: the value given (null: back to the config's), which
            // `allot trace export` replays (docs/server.md).
            match e {
                AccountEdit::Set { value, .. } => after["set"] = serde_json::json!(value),
                AccountEdit::SetUser { .. } | AccountEdit::SetUserBudget { .. } => {
                    let set: serde_json::Map<String, serde_json::Value> = group
                        .iter()
                        .filter_map(|g| match g {
                            AccountEdit::SetUser { user, share, .. } => Some((user.clone(), serde_json::json!(share))),
                            AccountEdit::SetUserBudget { user, budget_gpu_hours, .. } => {
                                Some((user.clone(), serde_json::json!(budget_gpu_hours)))
                            }
                            _ => None,
                        })
                        .collect();
                    after["set"] = serde_json::Value::Object(set);
                }
                AccountEdit::Rename { to, .. } => renames.push((path.clone(), to.clone())),
                AccountEdit::Close { .. } => closed.push(path.clone()),
                _ => {}
            }
            audit.push(AccountAudit { action: e.action(), target: path.clone(), before: decl(&book, &path), after });
            changes.extend(group.iter().map(crate::accounts::describe));
            touched.retain(|p| *p != path);
            if let AccountEdit::Rename { to, .. } = e {
                for t in &mut touched {
                    if t.starts_with(&format!("{path}/")) {
                        *t = format!("{to}{}", &t[path.len()..]);
                    }
                }
                for c in &mut closed {
                    if *c == path || c.starts_with(&format!("{path}/")) {
                        *c = format!("{to}{}", &c[path.len()..]);
                    }
                }
            }
            touched.push(now_at);
            book = next;
        }
        let views = |state: &allot_core::State| -> Vec<AccountView> {
            crate::accounts::views(state, now, true).into_iter().filter(|v| touched.contains(&v.path)).collect()
        };
        if dry_run {
            let mut state = self.engine.state().clone();
            state.ledger.grow(book.tree().len());
            state.accounts = book.tree().clone();
            return Ok(Ok(AccountEdits { changes, applied: false, accounts: views(&state), stopped: 0 }));
        }
        let rows = crate::accounts::stored_rows(&book, cluster);
        match self.store.save_accounts(&rows, &audit, &renames, by, now as i64).await {
            Ok(()) => {}
            Err(e) if e.is_fenced() => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "account change not recorded");
                return Ok(Err(Refusal::Unavailable(format!("the change could not be recorded: {e}"))));
            }
        }
        for c in &changes {
            tracing::info!(principal = by, "account tree: {c}");
        }
        self.book = book;
        self.feed(Input::Accounts(self.book.tree().clone()), now);
        self.publish_shape();
        let mut stopped = 0;
        if stop {
            stopped = self.stop_closed(&closed, by, now);
        }
        Ok(Ok(AccountEdits { changes, applied: true, accounts: views(self.engine.state()), stopped }))
    }

    /// CFG-1: a config reload's part in the scheduler (`crate::api::reload`):
    /// the account edits first (refused: nothing changes), then the seed,
    /// the contract (an engine input), the webhook and the telemetry
    /// settings. One line per account change.
    async fn reload(
        &mut self,
        plan: super::ReloadPlan,
        by: &str,
        now: Time,
    ) -> Result<Result<Vec<String>, Refusal>, StoreError> {
        let mut changes = Vec::new();
        if !plan.edits.is_empty() {
            match self.edit_accounts(&plan.edits, false, false, by, now).await? {
                Ok(done) => changes.extend(done.changes.into_iter().map(|c| format!("accounts: {c}"))),
                Err(r) => return Ok(Err(r)),
            }
        }
        self.book.reseed(&plan.seed);
        if let Some(contract) = plan.contract {
            self.feed(Input::Contract(Box::new(contract)), now);
            self.publish_shape();
        }
        if let Some(target) = plan.alerts {
            let cluster = self.engine.state().cluster.name.clone();
            self.webhook = target.map(|t| crate::webhook::Webhook::start(t, cluster));
        }
        if let Some(t) = plan.telemetry {
            self.telemetry.config = t;
        }
        Ok(Ok(changes))
    }

    /// ACC-3: the engine cancels the work of the subtrees of `closed`
    /// (pending and parked at once, running after grace, CON-2); returns
    /// how many.
    fn stop_closed(&mut self, closed: &[String], by: &str, now: Time) -> u64 {
        let st = self.engine.state();
        let roots: Vec<allot_core::AccountId> = closed.iter().filter_map(|p| st.accounts.get(p)).collect();
        let Answer::Stopped(stopped) = self.feed(Input::StopAccounts { roots, by: by.into() }, now) else {
            unreachable!("a stop answers Stopped")
        };
        for &(w, how) in &stopped {
            if how == Cancelled::Stopping {
                let seq = self.live[w.0 as usize].seq;
                self.ops.push(Op::CancelRequested { seq });
            }
        }
        self.apply(now);
        stopped.len() as u64
    }

    /// Drain, undrain, fail or repair a node: recorded with its principal,
    /// then the engine's node event (MNT-1, MNT-2).
    pub(crate) fn node_action(
        &mut self,
        name: &str,
        kind: NodeEventKind,
        by: &str,
        reason: Option<String>,
        now: Time,
    ) -> Result<NodeView, Refusal> {
        let Some(n) = self.engine.state().cluster.node_by_name(name) else {
            let known: Vec<&str> = self.engine.state().cluster.nodes.iter().map(|n| n.name.as_str()).collect();
            let known = allot_trace::choices::list(name, &known);
            return Err(Refusal::NotFound(format!("unknown node {name:?} (nodes: {known})")));
        };
        let before = self.node_view(n, now);
        self.ops.push(Op::NodeEvent {
            t: now as i64,
            node: name.into(),
            kind: kind.as_str().into(),
            principal: by.into(),
            reason: reason.clone(),
        });
        tracing::info!(
            node = name,
            principal = by,
            reason = reason.as_deref().unwrap_or("-"),
            "node {}",
            kind.as_str()
        );
        self.feed(Input::Node(NodeEvent { t: now, node: n, kind }), now);
        crate::scheduler::note_node_reason(&mut self.node_reasons, n, kind, reason);
        self.apply(now);
        let after = self.node_view(n, now);
        // MNT-1: every operator's node action is in the audit log, with
        // the node's health before and after and the reason given.
        let state = |v: &NodeView| serde_json::json!({ "health": v.health, "reason": v.reason }).to_string();
        self.ops.push(Op::Audit {
            t: now as i64,
            principal: by.into(),
            action: format!("node.{}", kind.as_str()),
            target: name.into(),
            before: Some(state(&before)),
            after: Some(state(&after)),
        });
        Ok(after)
    }
}

/// `edits` cut into the runs the book applies at once: consecutive users'
/// shares of one account, consecutive users' budgets of one account, and
/// every other edit alone.
fn batches(edits: &[AccountEdit]) -> impl Iterator<Item = &[AccountEdit]> {
    fn kind(e: &AccountEdit) -> Option<(u8, &str)> {
        match e {
            AccountEdit::SetUser { path, .. } => Some((0, path)),
            AccountEdit::SetUserBudget { path, .. } => Some((1, path)),
            _ => None,
        }
    }
    edits.chunk_by(|a, b| kind(a).is_some() && kind(a) == kind(b))
}
