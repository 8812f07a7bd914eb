//! Applying decisions and executor events to the state, mirroring
//! `allot_sim::sim` (`pass`, `preempt`, `timed`, `after_release`), and
//! queueing the store writes and executor commands they imply.

use std::time::Instant;

use allot_core::placement::full_mask;
use allot_core::workload::saved;
use allot_core::{
    Action, Allocation, Class, Decision, Health, NodeEventKind, NodeId, Phase, Reason, Rule, Time, WorkloadId,
};

use super::Scheduler;
use crate::executor::{AttemptKey, ExecEvent, ExitStatus, Launch, LaunchError, LaunchFault, NodeGpus};
use crate::metrics::{ClassLabel, labels};
use crate::store::{AttemptRow, Op};
use crate::views::NodeGpusView;

/// MNT-3: launch failures in a row outside the workloads that take a node
/// out of service.
pub(crate) const LAUNCH_FAILURES_TO_DRAIN: u32 = 3;

impl Scheduler {
    pub(crate) fn key(&self, w: WorkloadId) -> AttemptKey {
        let l = &self.live[w.0 as usize];
        AttemptKey { seq: l.seq, attempt: l.attempt }
    }

    fn account_class(&self, w: WorkloadId) -> crate::metrics::AccountClass {
        let spec = self.state.spec(w);
        labels(&self.state.accounts.account(spec.account).path, spec.class.as_str())
    }

    /// One scheduling pass: the policy's decisions, applied in order.
    pub(crate) fn pass(&mut self, now: Time) {
        let t0 = Instant::now();
        let decisions = self.policy.schedule(&self.state, now);
        for Decision { action, reason } in decisions {
            match action {
                Action::Start { workload: w, alloc } => self.start(w, alloc, now, reason),
                Action::Preempt { workload: w, by } => {
                    if self.state.run(w).phase == Phase::Running {
                        let by = by.map(|b| self.state.spec(b).id.clone());
                        tracing::info!(workload = %self.state.spec(w).id, by = ?by, reason = %reason, "preempt");
                        self.preempt(w, now, reason);
                    }
                }
                Action::Reject { workload: w } => {
                    let seq = self.live[w.0 as usize].seq;
                    self.ops.push(Op::WorkloadState {
                        seq,
                        state: "rejected",
                        reason: reason.to_string(),
                        end_t: Some(now as i64),
                    });
                    self.state.end_pending(w, now, Phase::Rejected, reason);
                }
            }
        }
        self.metrics.pass_seconds.observe(t0.elapsed().as_secs_f64());
    }

    fn allocation_view(&self, alloc: &Allocation) -> Vec<NodeGpusView> {
        alloc
            .parts
            .iter()
            .map(|(n, m)| NodeGpusView {
                node: self.state.cluster.node(*n).name.clone(),
                gpus: Allocation::indices(*m).collect(),
            })
            .collect()
    }

    /// `Start`: the state first, then the attempt recorded as `starting`;
    /// the process is launched after the commit.
    fn start(&mut self, w: WorkloadId, alloc: Allocation, now: Time, reason: Reason) {
        let nodes = self.allocation_view(&alloc);
        let weight =
            alloc.parts.first().map_or(1.0, |(n, _)| self.state.cluster.weight(self.state.cluster.node(*n).gpu));
        let first_start = self.state.run(w).first_start.is_none();
        self.state.start(w, alloc, now, reason.clone());
        let i = w.0 as usize;
        self.live[i].attempt += 1;
        let (seq, attempt) = (self.live[i].seq, self.live[i].attempt);
        let spec = self.state.spec(w);
        let id = spec.id.clone();
        let log_path = self.paths.log_path(&id, attempt);
        tracing::info!(workload = %id, attempt, gpus = spec.gpus, reason = %reason, "start");
        self.ops.push(Op::AttemptStart {
            row: AttemptRow {
                workload: seq,
                attempt,
                alloc: serde_json::to_string(&nodes).expect("serialisable"),
                gpus: i64::from(spec.gpus),
                weight,
                state: "starting".into(),
                start_t: now as i64,
                start_reason: reason.to_string(),
                signal_t: None,
                signal_reason: None,
                end_t: None,
                outcome: None,
                exit_code: None,
                kept_s: None,
                pid: None,
                log_path: log_path.display().to_string(),
            },
        });
        self.ops.push(Op::WorkloadState { seq, state: "running", reason: reason.to_string(), end_t: None });
        let l = &self.live[i];
        self.launches.push(Launch {
            key: AttemptKey { seq, attempt },
            workload_id: id.clone(),
            command: l.command.clone(),
            env: l.env.clone(),
            gpus: nodes.into_iter().map(|n| NodeGpus { node: n.node, indices: n.gpus }).collect(),
            checkpoint_dir: self.paths.checkpoint_dir(&id),
            log_path,
        });
        let ac = self.account_class(w);
        self.metrics.starts.get_or_create(&ac).inc();
        if first_start {
            let spec = self.state.spec(w);
            let waited = now.saturating_sub(spec.submit) as f64;
            self.metrics.queue_time.get_or_create(&ClassLabel { class: spec.class.as_str().into() }).observe(waited);
        }
    }

    /// `Preempt` (and drains, cancels): signal now, kill after `grace`.
    pub(crate) fn preempt(&mut self, w: WorkloadId, now: Time, reason: Reason) {
        self.signal_with(w, now, self.state.contract.grace, reason);
    }

    pub(crate) fn signal_with(&mut self, w: WorkloadId, now: Time, grace: Time, reason: Reason) {
        let stop_at = self.state.signal(w, now, grace, reason.clone());
        let key = self.key(w);
        self.ops.push(Op::AttemptSignal {
            seq: key.seq,
            attempt: key.attempt,
            t: now as i64,
            reason: reason.to_string(),
        });
        self.ops.push(Op::WorkloadState { seq: key.seq, state: "stopping", reason: reason.to_string(), end_t: None });
        self.metrics.preemptions.get_or_create(&self.account_class(w)).inc();
        if grace == 0 {
            self.kills.push(key);
        } else {
            self.signals.push(key);
            self.kill_at.insert((stop_at, w, key.attempt));
        }
    }

    /// An executor event.
    pub(crate) fn exec_event(&mut self, e: ExecEvent) {
        let now = self.now.max(crate::clock::now());
        self.now = now;
        match e {
            ExecEvent::Started { key, pid } => {
                self.ops.push(Op::AttemptRunning { seq: key.seq, attempt: key.attempt, pid: i64::from(pid) });
                for n in self.attempt_nodes(key) {
                    self.launch_failures.remove(&n);
                }
            }
            ExecEvent::LaunchFailed { key, error } => match error.fault {
                LaunchFault::Workload => self.ended(key, None, Some(error.message), now),
                LaunchFault::Infrastructure => self.launch_failed(key, error, now),
            },
            ExecEvent::Exited { key, status } => self.ended(key, Some(status), None, now),
            ExecEvent::Node { node, kind, by } => {
                if let Err(e) = self.node_action(&node, kind, &by, now) {
                    tracing::warn!(node, error = ?e, "cannot apply the engine's node state");
                }
            }
        }
    }

    /// The nodes of a current attempt (none when it is stale).
    fn attempt_nodes(&self, key: AttemptKey) -> Vec<NodeId> {
        let Some(&w) = self.by_seq.get(&key.seq) else { return Vec::new() };
        if self.live[w.0 as usize].attempt != key.attempt {
            return Vec::new();
        }
        self.state.run(w).alloc.as_ref().map(|a| a.nodes().collect()).unwrap_or_default()
    }

    /// MNT-3: an attempt that could not start for a reason outside the
    /// workload is closed as `launch-failed` and its workload requeued
    /// without spending a retry (a cancelled or signalled one stops as it
    /// would have); the launch counts against its nodes.
    fn launch_failed(&mut self, key: AttemptKey, error: LaunchError, now: Time) {
        let Some(&w) = self.by_seq.get(&key.seq) else { return };
        if self.live[w.0 as usize].attempt != key.attempt || !self.state.run(w).phase.holds_gpus() {
            return; // stale
        }
        let nodes = self.attempt_nodes(key);
        let how = format!("could not start: {}", error.message);
        if self.state.run(w).phase == Phase::Stopping {
            self.stopped(w, now, None, &how);
        } else {
            let reason = Reason::new(Rule::LaunchFailure, format!("{how}; requeued without spending a retry"));
            tracing::warn!(workload = key.seq, attempt = key.attempt, %reason, "launch failed outside the workload");
            let o = self.state.stop(w, now, reason.clone());
            let gpus = u64::from(self.state.spec(w).gpus);
            self.close_attempt(w, now, "launch-failed", None, o.useful_gpu_s / gpus.max(1), o.assigned_gpu_s);
            self.keep_some_work(w);
            self.ops.push(Op::WorkloadState {
                seq: key.seq,
                state: "pending",
                reason: reason.to_string(),
                end_t: None,
            });
        }
        self.after_release(&nodes, now);
        let blamed = match error.node.as_deref().and_then(|n| self.state.cluster.node_by_name(n)) {
            Some(n) => vec![n],
            None => nodes,
        };
        for n in blamed {
            self.count_launch_failure(n, &error.message, now);
        }
    }

    /// MNT-3: the [`LAUNCH_FAILURES_TO_DRAIN`]th launch failure in a row on
    /// a node drains it, as an operator's drain does (MNT-1).
    fn count_launch_failure(&mut self, n: NodeId, error: &str, now: Time) {
        let count = self.launch_failures.entry(n).or_insert(0);
        *count += 1;
        let count = *count;
        if count < LAUNCH_FAILURES_TO_DRAIN || self.state.health[n.0 as usize] != Health::Up {
            return;
        }
        self.launch_failures.remove(&n);
        let name = self.state.cluster.node(n).name.clone();
        let by = format!("{}: MNT-3: {count} launches in a row failed on {name} (last: {error})", self.exec.name());
        tracing::warn!(node = %name, principal = %by, "taking the node out of service");
        if let Err(e) = self.node_action(&name, NodeEventKind::Drain, &by, now) {
            tracing::error!(node = %name, error = ?e, "cannot drain the node");
        }
    }

    /// The attempt's process is gone: stop or finish the workload.
    fn ended(&mut self, key: AttemptKey, status: Option<ExitStatus>, error: Option<String>, now: Time) {
        let Some(&w) = self.by_seq.get(&key.seq) else { return };
        let i = w.0 as usize;
        if self.live[i].attempt != key.attempt || !self.state.run(w).phase.holds_gpus() {
            return; // stale
        }
        let nodes: Vec<NodeId> = self.state.run(w).alloc.as_ref().map(|a| a.nodes().collect()).unwrap_or_default();
        let code = status.and_then(|s| s.code).map(i64::from);
        let how = match (status, &error) {
            (_, Some(e)) => format!("could not start: {e}"),
            (Some(ExitStatus { code: Some(c), .. }), _) => format!("exited with code {c}"),
            (Some(ExitStatus { signal: Some(s), .. }), _) => format!("killed by signal {s}"),
            _ => "ended".to_string(),
        };
        let ok = status.is_some_and(ExitStatus::success);
        if self.state.run(w).phase == Phase::Stopping {
            self.stopped(w, now, code, &how);
        } else if ok {
            self.finished(w, now);
        } else {
            self.failed(w, now, code, &how);
        }
        self.after_release(&nodes, now);
    }

    fn close_attempt(
        &mut self,
        w: WorkloadId,
        now: Time,
        outcome: &str,
        code: Option<i64>,
        kept_s: u64,
        assigned: u64,
    ) {
        let key = self.key(w);
        let gpus = u64::from(self.state.spec(w).gpus);
        self.ops.push(Op::AttemptEnd {
            seq: key.seq,
            attempt: key.attempt,
            end_t: now as i64,
            outcome: outcome.to_string(),
            exit_code: code,
            kept_s: kept_s as i64,
        });
        let ac = self.account_class(w);
        self.metrics.assigned_gpu_seconds.get_or_create(&ac).inc_by(assigned);
        self.metrics.useful_gpu_seconds.get_or_create(&ac).inc_by(kept_s * gpus);
        self.metrics.lost_gpu_seconds.get_or_create(&ac).inc_by(assigned.saturating_sub(kept_s * gpus));
    }

    /// A signalled workload stopped: requeued (CON-3), or ended if cancelled.
    fn stopped(&mut self, w: WorkloadId, now: Time, code: Option<i64>, how: &str) {
        let i = w.0 as usize;
        let run = self.state.run(w);
        let progress = run.progress(now);
        let why = run.last_reason.as_ref().map_or(Rule::Grace, |r| r.rule);
        let lost = progress - saved(progress, self.state.spec(w).checkpoint_s);
        let outcome = if self.live[i].cancel {
            "cancelled"
        } else if why == Rule::Failure {
            "node-failed"
        } else {
            "preempted"
        };
        let reason = Reason::new(
            Rule::Requeue,
            format!("{how} after the stop signal; {lost} s of progress since the last checkpoint lost ({})", why.id()),
        );
        let o = self.state.stop(w, now, reason.clone());
        let gpus = u64::from(self.state.spec(w).gpus);
        self.close_attempt(w, now, outcome, code, o.useful_gpu_s / gpus.max(1), o.assigned_gpu_s);
        self.keep_some_work(w);
        let seq = self.live[i].seq;
        if self.live[i].cancel {
            let r = Reason::new(why, "cancelled");
            self.state.end_pending(w, now, Phase::Cancelled, r.clone());
            self.ops.push(Op::WorkloadState {
                seq,
                state: "cancelled",
                reason: r.to_string(),
                end_t: Some(now as i64),
            });
            self.metrics.cancelled.get_or_create(&self.account_class(w)).inc();
        } else {
            tracing::info!(workload = seq, %reason, "requeued");
            self.ops.push(Op::WorkloadState { seq, state: "pending", reason: reason.to_string(), end_t: None });
        }
    }

    /// A live workload's remaining work is only an estimate: one that ran
    /// past it and was stopped keeps at least a second to do.
    fn keep_some_work(&mut self, w: WorkloadId) {
        let r = &mut self.state.runs[w.0 as usize];
        if r.phase == Phase::Pending && r.remaining == 0 {
            r.remaining = 1;
        }
    }

    fn finished(&mut self, w: WorkloadId, now: Time) {
        let started = self.state.run(w).started.unwrap_or(now);
        let o = self.state.finish(w, now, Reason::new(Rule::Completed, "exited with code 0"));
        self.close_attempt(w, now, "finished", Some(0), now - started, o.assigned_gpu_s);
        let seq = self.live[w.0 as usize].seq;
        self.ops.push(Op::WorkloadState {
            seq,
            state: "finished",
            reason: "ENG-1: exited with code 0".into(),
            end_t: Some(now as i64),
        });
        self.metrics.completed.get_or_create(&self.account_class(w)).inc();
        tracing::info!(workload = seq, "finished");
    }

    /// A non-zero exit without a stop signal: retried while retries are left.
    fn failed(&mut self, w: WorkloadId, now: Time, code: Option<i64>, how: &str) {
        let i = w.0 as usize;
        self.live[i].failures += 1;
        let (seq, failures, retries) = (self.live[i].seq, self.live[i].failures, self.live[i].retries);
        self.ops.push(Op::Failures { seq, failures });
        let retry = failures <= retries;
        let detail = if retry {
            format!("{how}; retry {failures} of {retries}")
        } else {
            format!("{how}; failed ({retries} retries)")
        };
        let o = self.state.stop(w, now, Reason::new(Rule::Requeue, detail.clone()));
        let gpus = u64::from(self.state.spec(w).gpus);
        self.close_attempt(w, now, "failed", code, o.useful_gpu_s / gpus.max(1), o.assigned_gpu_s);
        self.keep_some_work(w);
        if retry {
            let reason = Reason::new(Rule::Requeue, detail);
            self.ops.push(Op::WorkloadState { seq, state: "pending", reason: reason.to_string(), end_t: None });
        } else {
            let reason = Reason::new(Rule::Completed, detail);
            self.ops.push(Op::WorkloadState {
                seq,
                state: "failed",
                reason: reason.to_string(),
                end_t: Some(now as i64),
            });
            self.state.end_pending(w, now, Phase::Failed, reason);
            self.metrics.failed.get_or_create(&self.account_class(w)).inc();
        }
        tracing::info!(workload = seq, failures, retry, "{how}");
    }

    /// GPUs were released on `nodes`: finish drains that are now empty.
    pub(crate) fn after_release(&mut self, nodes: &[NodeId], _now: Time) {
        self.dirty = true;
        for &n in nodes {
            if self.state.health[n.0 as usize] == Health::Draining && self.node_idle(n) {
                self.state.set_health(n, Health::Drained);
            }
        }
    }

    pub(crate) fn node_idle(&self, n: NodeId) -> bool {
        let i = n.0 as usize;
        self.state.free.free[i] == full_mask(self.state.cluster.nodes[i].gpus)
    }
}

/// Refreshes the gauges from the state.
pub(crate) fn gauges(s: &Scheduler, now: Time) {
    let st = &s.state;
    let m = &s.metrics;
    let mut queue = [0i64; 3];
    for (_, w) in &st.pending {
        queue[st.spec(*w).class as usize] += 1;
    }
    for c in Class::ALL {
        m.queue_length.get_or_create(&ClassLabel { class: c.as_str().into() }).set(queue[c as usize]);
    }
    m.running.clear();
    m.allocated_gpus.clear();
    let mut util = 0.0;
    for &w in &st.running {
        let spec = st.spec(w);
        let ac = labels(&st.accounts.account(spec.account).path, spec.class.as_str());
        m.running.get_or_create(&ac).inc();
        m.allocated_gpus.get_or_create(&ac).inc_by(i64::from(spec.gpus));
        util += f64::from(spec.gpus) * spec.util;
    }
    let total = st.cluster.total_gpus();
    let in_service: u64 =
        st.cluster.nodes.iter().zip(&st.health).filter(|(_, h)| h.in_service()).map(|(n, _)| u64::from(n.gpus)).sum();
    let allocated: u64 = st.running.iter().map(|w| u64::from(st.spec(*w).gpus)).sum();
    m.gpus_total.set(total as i64);
    m.gpus_in_service.set(in_service as i64);
    m.availability.set(if total > 0 { in_service as f64 / total as f64 } else { 0.0 });
    let denom = in_service.max(1) as f64;
    m.occupancy.set(allocated as f64 / denom);
    m.utilization.set(util / denom);
    for v in crate::accounts::views(st, now, true) {
        let l = crate::metrics::AccountLabel { account: v.path.clone() };
        if let Some(b) = v.budget_gpu_hours {
            m.budget_gpu_hours.get_or_create(&l).set(b);
        }
        m.used_gpu_hours.get_or_create(&l).set(v.used_gpu_hours);
        if let Some(f) = v.fair_share {
            m.fair_share.get_or_create(&l).set(f);
        }
    }
}
