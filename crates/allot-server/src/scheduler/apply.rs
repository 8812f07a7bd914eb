//! Carrying out the engine's effects live: the store writes, executor
//! commands and metrics each transition implies, and executor reports fed
//! back to the engine.

use allot_core::engine::{Change, Ended, Input};
use allot_core::{Allocation, Class, Effect, Exit, Time, Transition, WorkloadId};

use super::Scheduler;
use crate::executor::{AttemptKey, ExecEvent, LaunchFault, NodeGpus};
use crate::metrics::{ClassLabel, labels};
use crate::states::AttemptState;
use crate::store::{AttemptRow, Op};
use crate::views::NodeGpusView;

impl Scheduler {
    pub(crate) fn key(&self, w: WorkloadId, attempt: u32) -> AttemptKey {
        AttemptKey { seq: self.live[w.0 as usize].seq, attempt: i64::from(attempt) }
    }

    fn account_class(&self, w: WorkloadId) -> crate::metrics::AccountClass {
        let spec = self.engine.state().spec(w);
        labels(&self.engine.state().accounts.account(spec.account).path, spec.class.as_str())
    }

    /// One scheduling pass at `now` whatever changed, applied (tests).
    #[cfg(test)]
    pub(crate) fn pass(&mut self, now: Time) {
        self.feed(allot_core::engine::Input::Pass, now);
        self.apply(now);
    }

    /// The deadlines due by `now` act, applied (tests).
    #[cfg(test)]
    pub(crate) fn expire(&mut self, now: Time) {
        self.feed(allot_core::engine::Input::Time, now);
        self.apply(now);
    }

    /// Carries out the effects the engine left: writes and commands are
    /// queued for the next commit, metrics counted.
    pub(crate) fn apply(&mut self, now: Time) {
        let effects = self.engine.take_effects();
        for e in &effects {
            match e {
                Effect::Launch { workload, attempt } => self.launch(*workload, *attempt),
                Effect::Signal { workload, attempt, stop_at } => {
                    // Without grace there is nothing to ask: the kill follows.
                    if *stop_at > now {
                        self.signals.push(self.key(*workload, *attempt));
                    }
                }
                Effect::Kill { workload, attempt } => {
                    let key = self.key(*workload, *attempt);
                    tracing::info!(workload = key.seq, attempt = key.attempt, "killing");
                    self.kills.push(key);
                }
                Effect::Record(tr) => self.record(tr),
                Effect::Health { .. } => {}
                Effect::Idle { workload, attempt, reclaim_at } => {
                    self.idle_warning(*workload, *attempt, *reclaim_at, now);
                }
                Effect::NodeAction { node, kind, cause } => {
                    let name = self.engine.state().cluster.node(*node).name.clone();
                    let by = format!("{}: {cause}", self.exec.name());
                    tracing::warn!(node = %name, principal = %by, "node {}", kind.as_str());
                    self.ops.push(Op::NodeEvent {
                        t: now as i64,
                        node: name,
                        kind: kind.as_str().into(),
                        principal: by,
                        reason: Some(cause.to_string()),
                    });
                    crate::scheduler::note_node_reason(&mut self.node_reasons, *node, *kind, Some(cause.to_string()));
                }
            }
        }
        self.engine.recycle(effects);
        self.publish_shape();
    }

    /// Hands the API's admission check the engine's new admission view
    /// when the engine's shape moved (a node added, an account edit).
    pub(crate) fn publish_shape(&mut self) {
        if self.engine.shape() == self.published_shape {
            return;
        }
        self.published_shape = self.engine.shape();
        if let Some(c) = &self.catalog {
            c.publish(self.engine.admission_view());
        }
    }

    fn allocation_view(&self, alloc: &Allocation) -> Vec<NodeGpusView> {
        alloc
            .parts
            .iter()
            .map(|(n, m)| NodeGpusView {
                node: self.engine.state().cluster.node(*n).name.clone(),
                gpus: Allocation::indices(*m).collect(),
            })
            .collect()
    }

    /// A start: the attempt recorded as `starting`; its process is launched
    /// after the commit.
    fn launch(&mut self, w: WorkloadId, attempt: u32) {
        let st = self.engine.state();
        let alloc = st.run(w).alloc.as_ref().expect("a launched attempt holds its GPUs until its effects are applied");
        let nodes = self.allocation_view(alloc);
        let weight = alloc.parts.first().map_or(1.0, |(n, _)| st.cluster.weight(st.cluster.node(*n).gpu));
        let key = self.key(w, attempt);
        let spec = st.spec(w);
        let id = spec.id.clone();
        let log_path = self.paths.log_path(&id, key.attempt);
        let reason = st.run(w).last_reason.as_ref().map(ToString::to_string).unwrap_or_default();
        self.ops.push(Op::AttemptStart {
            row: Box::new(AttemptRow {
                workload: key.seq,
                attempt: key.attempt,
                alloc: serde_json::to_string(&nodes).expect("serialisable"),
                cluster: alloc
                    .nodes()
                    .next()
                    .filter(|_| st.cluster.is_fleet())
                    .map(|n| st.cluster.cluster_name(st.cluster.cluster_of(n)).to_string()),
                gpus: i64::from(spec.gpus),
                weight,
                state: AttemptState::Starting.as_str().into(),
                start_t: st.run(w).started.unwrap_or_default() as i64,
                start_reason: reason,
                signal_t: None,
                signal_reason: None,
                end_t: None,
                outcome: None,
                exit_code: None,
                kept_s: None,
                pid: None,
                log_path: log_path.display().to_string(),
                ..AttemptRow::default()
            }),
        });
        let checkpoint_dir = self.paths.checkpoint_dir(&id);
        let started = self.engine.state().run(w).started.unwrap_or_default();
        let mut env = self.live[w.0 as usize].env.clone();
        env.extend(self.report_env(key, &checkpoint_dir, started));
        let l = &self.live[w.0 as usize];
        self.launches.push(crate::executor::Launch {
            key,
            workload_id: id.clone(),
            command: l.command.clone(),
            env,
            gpus: nodes.into_iter().map(|n| NodeGpus { node: n.node, indices: n.gpus }).collect(),
            checkpoint_dir,
            log_path,
            workdir: l.workdir.clone(),
            run_as: l.run_as.clone(),
        });
    }

    /// The store writes and metrics of a transition.
    fn record(&mut self, tr: &Transition) {
        let w = tr.workload;
        let key = self.key(w, tr.attempt);
        let seq = key.seq;
        let reason = tr.reason.to_string();
        let t = tr.t as i64;
        // The decision line: with --log-format json, one object whose
        // `workload`, `attempt`, `change` and `rule` are fields of their own
        // (docs/operations.md, "Logs").
        tracing::info!(workload = seq, attempt = key.attempt, change = tr.change.as_str(), rule = tr.reason.rule.id(), %reason);
        #[cfg(test)]
        self.log_decision(tr);
        if let Some(ended) = &tr.ended {
            self.close_attempt(w, key, tr.t, ended);
        }
        let ac = self.account_class(w);
        match tr.change {
            Change::Start => {
                self.metrics.starts.get_or_create(&ac).inc();
                let spec = self.engine.state().spec(w);
                if self.engine.state().run(w).first_start == Some(tr.t) && tr.attempt == 1 {
                    let waited = tr.t.saturating_sub(spec.submit) as f64;
                    self.metrics
                        .queue_time
                        .get_or_create(&ClassLabel { class: spec.class.as_str().into() })
                        .observe(waited);
                }
            }
            Change::Preempt | Change::Abort => {
                self.ops.push(Op::AttemptSignal { seq, attempt: key.attempt, t, reason: reason.clone() });
                self.metrics.preemptions.get_or_create(&ac).inc();
            }
            Change::Retry => {
                self.ops.push(Op::Failures { seq, failures: i64::from(self.engine.failures(w)) });
            }
            Change::Failed => {
                self.ops.push(Op::Failures { seq, failures: i64::from(self.engine.failures(w)) });
                self.metrics.failed.get_or_create(&ac).inc();
            }
            Change::Finish => {
                self.metrics.completed.get_or_create(&ac).inc();
            }
            Change::Cancel => {
                self.metrics.cancelled.get_or_create(&ac).inc();
            }
            Change::Stop
            | Change::Fail
            | Change::LaunchFailed
            | Change::Reject
            | Change::IdleWarning
            | Change::IdleCleared => {}
        }
        let state = tr.phase;
        let end_t = state.is_terminal().then_some(t);
        self.ops.push(Op::WorkloadState { seq, state, reason, end_t });
    }

    #[cfg(test)]
    fn log_decision(&mut self, tr: &Transition) {
        if self.decisions.is_none() || tr.change == Change::Abort {
            return;
        }
        let st = self.engine.state();
        let alloc = tr.ended.as_ref().map(|e| &e.alloc).or(st.run(tr.workload).alloc.as_ref());
        let nodes = alloc.map(|a| a.nodes().map(|n| st.cluster.node(n).name.clone()).collect()).unwrap_or_default();
        let line = (
            tr.t,
            tr.change.as_str().to_string(),
            st.spec(tr.workload).id.clone(),
            nodes,
            tr.reason.to_string(),
            tr.by.map(|b| st.spec(b).id.clone()),
        );
        self.decisions.as_mut().expect("kept").push(line);
    }

    fn close_attempt(&mut self, w: WorkloadId, key: AttemptKey, t: Time, ended: &Ended) {
        self.forget_attempt(key);
        let gpus = u64::from(self.engine.state().spec(w).gpus);
        let kept_s = ended.kept_s;
        self.ops.push(Op::AttemptEnd {
            seq: key.seq,
            attempt: key.attempt,
            end_t: t as i64,
            outcome: ended.outcome.as_str().to_string(),
            exit_code: ended.exit_code.map(i64::from),
            kept_s: kept_s as i64,
        });
        self.telemetry.forget(key);
        let ac = self.account_class(w);
        let assigned = ended.stop.assigned_gpu_s;
        self.metrics.assigned_gpu_seconds.get_or_create(&ac).inc_by(assigned);
        self.metrics.useful_gpu_seconds.get_or_create(&ac).inc_by(kept_s * gpus);
        self.metrics.lost_gpu_seconds.get_or_create(&ac).inc_by(assigned.saturating_sub(kept_s * gpus));
    }

    /// An executor report, fed to the engine.
    pub(crate) fn exec_event(&mut self, e: ExecEvent) {
        let now = self.tick_now();
        self.metrics.executor_event(&e);
        let attempt_of = |s: &Scheduler, key: AttemptKey| {
            let w = *s.by_seq.get(&key.seq)?;
            u32::try_from(key.attempt).ok().map(|a| (w, a))
        };
        match e {
            ExecEvent::Started { key, pid } => {
                self.ops.push(Op::AttemptRunning { seq: key.seq, attempt: key.attempt, pid: i64::from(pid) });
                if let Some((w, a)) = attempt_of(self, key) {
                    self.feed(Input::Launched { workload: w, attempt: a }, now);
                }
            }
            ExecEvent::LaunchFailed { key, error } => {
                if let Some((w, a)) = attempt_of(self, key) {
                    let node = error.node.as_deref().and_then(|n| self.engine.state().cluster.node_by_name(n));
                    let fault = error.fault;
                    if fault != LaunchFault::Workload {
                        tracing::warn!(workload = key.seq, attempt = key.attempt, error = %error.message, ?fault, "launch failed outside the workload's command");
                    }
                    let exit = Exit::NotStarted { message: error.message, fault, node };
                    self.feed(Input::Exit { workload: w, attempt: a, exit }, now);
                }
            }
            ExecEvent::Exited { key, status } => {
                self.last_marker(key, now);
                if let Some((w, a)) = attempt_of(self, key) {
                    let exit = Exit::Status { code: status.code, signal: status.signal };
                    self.feed(Input::Exit { workload: w, attempt: a, exit }, now);
                }
            }
            ExecEvent::Node { node, kind, by } => {
                if let Err(e) = self.node_action(&node, kind, &by, None, now) {
                    tracing::warn!(node, error = ?e, "cannot apply the engine's node state");
                }
            }
            ExecEvent::ClusterDown { cluster, reason } => self.cluster_down(&cluster, &reason, now),
            ExecEvent::ClusterUp { cluster } => self.cluster_up(&cluster, now),
            ExecEvent::Outside { node, gpus } => match self.engine.state().cluster.node_by_name(&node) {
                Some(n) => {
                    let held = self.feed(Input::Outside { node: n, gpus }, now).count();
                    tracing::info!(node, gpus, set_aside = held, "GPUs held by work Allot does not manage (K8S-11)");
                }
                None => tracing::warn!(node, "GPUs held outside Allot on a node it does not know"),
            },
            ExecEvent::NodeAdded { cluster, node, gpus, product } => {
                self.node_added(&cluster, &node, gpus, product.as_deref())
            }
            ExecEvent::Telemetry { key, t, gpus } => self.on_telemetry(key, t, &gpus, now),
        }
        self.apply(now);
    }
}

/// Refreshes the gauges from the state.
pub(crate) fn gauges(s: &Scheduler, now: Time) {
    let st = s.engine.state();
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
    for &w in &st.running {
        let spec = st.spec(w);
        let ac = labels(&st.accounts.account(spec.account).path, spec.class.as_str());
        m.running.get_or_create(&ac).inc();
        m.allocated_gpus.get_or_create(&ac).inc_by(i64::from(spec.gpus));
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
    crate::metrics::set_utilization(m, &super::telemetry::utilization(s, now), in_service);
    m.set_clusters(st);
    m.set_accounts(&crate::accounts::views(st, now, true));
}
