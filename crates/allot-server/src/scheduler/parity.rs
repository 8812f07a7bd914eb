//! Parity: the simulator and this scheduler task, fed the same inputs
//! (submissions, node events, cancels, exits and times), make the same
//! decisions: every start, preempt, stop, fail, finish, reject, cancel and
//! retry at the same time, on the same GPUs, for the same reason, and the
//! store ends with the same attempts.
//!
//! The task runs with a test executor (processes are virtual, as in the
//! simulator: one ends when its work is done, or at once when killed) and a
//! test clock the harness sets; nothing sleeps. Its store is a real SQLite
//! file, so every step's writes are committed before the executor hears of
//! them, as live.
//!
//! One difference is by design (`docs/architecture.md`, L-1): the
//! simulator knows when a signalled workload's work completes during its
//! grace and finishes it; live, an exit after the signal cannot tell "done"
//! from "checkpointed and stopped" and requeues it. The harness notes the
//! first time that happens and compares the logs up to that instant.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use allot_core::engine::Change;
use allot_core::{
    Class, Engine, NodeEvent, NodeEventKind, NodeId, Phase, PolicyKind, Priority, State, Time, WorkloadSpec,
};
use allot_sim::{AttemptEnd, Request, RequestKind, SimOptions, simulate_with_accounts};
use allot_testkit::{StateBuilder, Wl};
use proptest::prelude::*;
use tokio::sync::oneshot;

use super::{Clock, Msg, Paths, Scheduler};
use crate::executor::{AttemptKey, BoxFuture, ExecEvent, Executor, ExitStatus, Launch, Survivor};
use crate::metrics::Metrics;
use crate::store::{NewWorkload, Store};

/// One line of the decision log: time, change, workload, nodes, reason,
/// preemptor.
pub(crate) type Line = (Time, String, String, Vec<String>, String, Option<String>);

#[derive(Debug)]
enum Cmd {
    Launch(Launch),
    Signal(AttemptKey),
    Kill(AttemptKey),
}

/// Records the commands; the harness plays the processes. At a restart
/// it adopts every attempt offered (K8S-10) when `adopts`, else none, and
/// records the survivors it was asked to stop.
#[derive(Default)]
struct TestExec {
    cmds: Mutex<Vec<Cmd>>,
    adopts: std::sync::atomic::AtomicBool,
    stopped: Mutex<Vec<AttemptKey>>,
}

impl Executor for TestExec {
    fn name(&self) -> &'static str {
        "test"
    }

    fn launch(&self, job: Launch) {
        self.cmds.lock().unwrap().push(Cmd::Launch(job));
    }

    // A signalled virtual process runs on until its work is done or it is
    // killed, as in the simulator; one that checkpoints on the signal
    // reports it at once (CON-8).
    fn signal(&self, key: AttemptKey) {
        self.cmds.lock().unwrap().push(Cmd::Signal(key));
    }

    fn kill(&self, key: AttemptKey) {
        self.cmds.lock().unwrap().push(Cmd::Kill(key));
    }

    fn adopt(&self, attempts: Vec<crate::executor::Adoption>) -> Vec<AttemptKey> {
        if self.adopts.load(Ordering::SeqCst) { attempts.into_iter().map(|a| a.key).collect() } else { Vec::new() }
    }

    fn terminate_survivors(&self, survivors: Vec<Survivor>, _grace: Duration) -> BoxFuture<'_, ()> {
        self.stopped.lock().unwrap().extend(survivors.into_iter().map(|s| s.key));
        Box::pin(async {})
    }
}

/// What both sides are fed.
#[derive(Clone, Debug)]
struct Case {
    state: State,
    /// Sorted by submit time; ids are the store's sequence numbers.
    specs: Vec<WorkloadSpec>,
    events: Vec<NodeEvent>,
    requests: Vec<Request>,
    /// Account tree edits (ACC-1) at their times: the server gets them
    /// through the API's message, the simulator as trees in force.
    edits: Vec<(Time, allot_core::AccountEdit)>,
    policy: PolicyKind,
    /// When the server restarts (L-5: it carries on from its journal's
    /// replay), and whether its executor adopts the running attempts then
    /// (K8S-10; else they are lost). A restart that adopts waits for an
    /// instant at which no attempt is stopping (a stopping attempt is not
    /// offered), and changes no decision.
    restarts: Vec<Time>,
    adopt: bool,
    /// Journal entries between snapshots of the run (0: none), two kept:
    /// a restart restores the newest and replays what followed it, and the
    /// final check replays the compacted journal from the oldest.
    snapshot_every: u64,
}

/// Workload id, start, end and outcome of an attempt.
type AttemptLine = (String, Time, Time, AttemptEnd);

/// The simulator's run of `case`.
fn simulate_case(case: &Case, opts: &SimOptions) -> (State, allot_sim::SimOutput) {
    let mut policy = case.policy.build();
    let (specs, events, requests) = (case.specs.clone(), case.events.clone(), case.requests.clone());
    let mut book = allot_core::AccountBook::seed(&case.state.accounts);
    let mut trees: Vec<(Time, allot_core::AccountTree)> = Vec::new();
    for (i, (t, e)) in case.edits.iter().enumerate() {
        book = book.apply(e).expect("a valid edit");
        if case.edits.get(i + 1).is_none_or(|(n, _)| n != t) {
            trees.push((*t, book.tree().clone()));
        }
    }
    simulate_with_accounts(case.state.clone(), specs, events, requests, trees, policy.as_mut(), opts)
}

fn sim_side(case: &Case) -> (Vec<Line>, Vec<AttemptLine>, Vec<(String, &'static str)>) {
    let opts = SimOptions { check_invariants: true, keep_log: true, ..Default::default() };
    let (state, out) = simulate_case(case, &opts);
    // Budget threshold events (BUD-1 alerts) are in the simulator's log but
    // are not decisions: the server records them apart (`budget_events`).
    let log = out
        .log
        .into_iter()
        .filter(|e| e.event != "budget")
        .map(|e| (e.t, e.event.to_string(), e.workload, e.nodes, e.reason, e.by))
        .collect();
    let cancelled = |o| if o == AttemptEnd::IdleReclaimed { AttemptEnd::Cancelled } else { o };
    let attempts = out
        .attempts
        .iter()
        .map(|a| (state.spec(a.workload).id.clone(), a.start, a.end, cancelled(a.outcome)))
        .collect();
    let phases = state.specs.iter().zip(&state.runs).map(|(s, r)| (s.id.clone(), r.phase.as_str())).collect();
    (log, attempts, phases)
}

struct Server {
    sched: Scheduler,
    exec: Arc<TestExec>,
    clock: Arc<AtomicU64>,
    /// Natural ends of launched processes: (time, seq, attempt).
    ends: BinaryHeap<Reverse<(Time, i64, i64)>>,
    /// Processes alive, by attempt.
    alive: HashMap<i64, i64>,
    /// When a natural end met a signalled attempt (L-1).
    diverged: Option<Time>,
    /// When a restart first lost an attempt (the simulator never
    /// restarts: the decisions part there, by design).
    parted: Option<Time>,
    /// Restarts done.
    restarted: usize,
}

impl Server {
    /// Plays the executor's commands: launched processes start and will end
    /// when their work is done; killed ones end now.
    async fn play(&mut self, t: Time) {
        loop {
            let cmds = std::mem::take(&mut *self.exec.cmds.lock().unwrap());
            if cmds.is_empty() {
                return;
            }
            for c in cmds {
                match c {
                    Cmd::Launch(job) => {
                        let w = self.sched.by_seq[&job.key.seq];
                        let remaining = self.sched.engine.state().run(w).remaining;
                        self.ends.push(Reverse((t + remaining, job.key.seq, job.key.attempt)));
                        self.alive.insert(job.key.seq, job.key.attempt);
                        self.sched.exec_event(ExecEvent::Started { key: job.key, pid: 1 });
                        // Its GPUs at the trace's util throughout, as the
                        // simulator reads it (CON-9).
                        let util = self.sched.engine.state().spec(w).util;
                        let gpus = job
                            .gpus
                            .iter()
                            .flat_map(|n| n.indices.iter().map(move |&index| (n.node.clone(), index)))
                            .map(|(node, index)| crate::executor::GpuSample {
                                node,
                                index,
                                util,
                                mem_used_mib: 0,
                                mem_total_mib: 0,
                            })
                            .collect();
                        self.sched.exec_event(ExecEvent::Telemetry { key: job.key, t, gpus });
                    }
                    Cmd::Signal(key) => {
                        let w = self.sched.by_seq[&key.seq];
                        let on_signal = self.sched.engine.state().spec(w).checkpoint_on_signal;
                        if on_signal && self.alive.get(&key.seq) == Some(&key.attempt) {
                            let _ = self.sched.checkpointed(key, t, t);
                        }
                    }
                    Cmd::Kill(key) => {
                        if self.alive.get(&key.seq) == Some(&key.attempt) {
                            self.alive.remove(&key.seq);
                            let status = ExitStatus { code: None, signal: Some(9) };
                            self.sched.exec_event(ExecEvent::Exited { key, status });
                        }
                    }
                }
            }
            self.sched.flush().await.expect("flush");
        }
    }

    /// L-5: the server stops and starts again at `t`: recovery replays the
    /// journal and the run carries on with the engine and policy the
    /// replay left, its executor adopting the running attempts or not.
    async fn restart(&mut self, case: &Case, store: &Store, dir: &std::path::Path, t: Time) {
        self.sched.flush().await.expect("flush");
        let decisions = self.sched.decisions.take();
        self.exec.adopts.store(case.adopt, Ordering::SeqCst);
        let mut cfg = allot_trace::config::parse_config(
            "[cluster]\n[[cluster.pools]]\nname = \"a\"\ngpu = \"H100\"\nnodes = 1\ngpus_per_node = 1\n[[accounts]]\npath = \"org/x\"\n",
            "parity.toml",
        )
        .expect("config");
        (cfg.cluster, cfg.accounts, cfg.contract) =
            (case.state.cluster.clone(), case.state.accounts.clone(), case.state.contract);
        let run = crate::identity::RunPolicy::new(true, 1000);
        let mut policy = case.policy.build();
        let rec = crate::recovery::recover(&cfg, store, &*self.exec, &run, &mut *policy, t).await.expect("recovery");
        let carried = rec.carried.expect("L-5: the restart carries on from the journal's replay");
        let lost = carried.inputs.iter().filter(|i| matches!(i, allot_core::engine::Input::Lost { .. })).count();
        let mut sched = Scheduler::new(
            rec.engine,
            carried.policy,
            store.clone(),
            self.exec.clone(),
            Arc::new(Metrics::new()),
            Paths { data_dir: dir.to_path_buf() },
            rec.book,
        );
        sched.set_clock(Clock::Manual(self.clock.clone()));
        sched.decisions = decisions;
        sched.snapshots = super::Snapshots { every: case.snapshot_every, keep: 2 };
        sched.carry_on(carried.lives, carried.inputs, carried.end);
        assert!(rec.workloads.is_empty(), "every submission was the engine's");
        sched.resume_after_outages(t);
        self.sched = sched;
        self.sched.flush().await.expect("flush");
        for key in std::mem::take(&mut *self.exec.stopped.lock().unwrap()) {
            if self.alive.get(&key.seq) == Some(&key.attempt) {
                self.alive.remove(&key.seq);
            }
        }
        if lost > 0 {
            self.parted.get_or_insert(t);
        }
        self.restarted += 1;
    }

    fn exit(&mut self, seq: i64, code: i32) {
        if let Some(attempt) = self.alive.remove(&seq) {
            let status = ExitStatus { code: Some(code), signal: None };
            self.sched.exec_event(ExecEvent::Exited { key: AttemptKey { seq, attempt }, status });
        }
    }
}

async fn server_side(case: &Case, dir: &std::path::Path) -> (Vec<Line>, Option<Time>, Store, usize) {
    let store = Store::open(&format!("sqlite://{}", dir.join("allot.db").display())).await.expect("store");
    let exec = Arc::new(TestExec::default());
    let clock = Arc::new(AtomicU64::new(0));
    let mut sched = Scheduler::new(
        Engine::new(case.state.clone()),
        case.policy.build(),
        store.clone(),
        exec.clone(),
        Arc::new(Metrics::new()),
        Paths { data_dir: dir.to_path_buf() },
        allot_core::AccountBook::seed(&case.state.accounts),
    );
    sched.set_clock(Clock::Manual(clock.clone()));
    sched.decisions = Some(Vec::new());
    sched.snapshots = super::Snapshots { every: case.snapshot_every, keep: 2 };
    sched.journal_start();
    let mut s = Server {
        sched,
        exec,
        clock,
        ends: BinaryHeap::new(),
        alive: HashMap::new(),
        diverged: None,
        parted: None,
        restarted: 0,
    };
    let mut restarts = case.restarts.iter().peekable();
    let mut arrivals = case.specs.iter().peekable();
    let mut events = case.events.iter().peekable();
    let mut requests = case.requests.iter().peekable();
    let mut edits = case.edits.iter().peekable();
    // Set when the executor's reports after a step changed the state: the
    // live loop steps again at once, as the simulator does at a deadline
    // that falls due at the same instant.
    let mut again: Option<Time> = None;
    loop {
        let inputs =
            arrivals.peek().is_some() || events.peek().is_some() || requests.peek().is_some() || edits.peek().is_some();
        let st = s.sched.engine.state();
        // As the simulator: with nothing running, no input to come and no
        // process left to end, nothing can change any more.
        if !inputs
            && again.is_none()
            && s.ends.is_empty()
            && st.running.is_empty()
            && s.sched.engine.next_deadline().is_none()
        {
            break;
        }
        let next = [
            s.ends.peek().map(|Reverse((t, _, _))| *t),
            s.sched.next_deadline(),
            events.peek().map(|e| e.t),
            arrivals.peek().map(|w| w.submit),
            requests.peek().map(|r| r.t),
            edits.peek().map(|(t, _)| *t),
            again.take(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(t) = next else { break };
        s.clock.store(t, Ordering::SeqCst);
        while let Some(&Reverse((tt, seq, attempt))) = s.ends.peek() {
            if tt != t {
                break;
            }
            s.ends.pop();
            if s.alive.get(&seq) != Some(&attempt) {
                continue; // killed before
            }
            let w = s.sched.by_seq[&seq];
            if s.sched.engine.state().run(w).phase == Phase::Stopping {
                s.diverged.get_or_insert(t);
            }
            s.exit(seq, 0);
        }
        // Exits first, as the engine takes an instant's inputs
        // (`Engine::step`); cancels after the arrivals.
        let mut cancels = Vec::new();
        while requests.peek().is_some_and(|r| r.t == t) {
            let r = requests.next().expect("peeked");
            let seq: i64 = r.workload.parse().expect("numeric id");
            match &r.kind {
                RequestKind::Exit { code } if s.sched.by_seq.contains_key(&seq) => s.exit(seq, *code),
                RequestKind::Exit { .. } => {}
                RequestKind::Cancel { by } => cancels.push((seq, by.clone())),
            }
        }
        s.sched.expire(t);
        s.sched.flush().await.expect("flush");
        s.play(t).await;
        while events.peek().is_some_and(|e| e.t == t) {
            let e = events.next().expect("peeked");
            let name = s.sched.engine.state().cluster.node(e.node).name.clone();
            let (reply, rx) = oneshot::channel();
            s.sched
                .handle(Msg::Node { name, kind: e.kind, by: "operator".into(), reason: None, reply })
                .await
                .expect("node");
            rx.await.expect("answer").expect("node action");
            s.play(t).await;
        }
        let mut now_edits = Vec::new();
        while edits.peek().is_some_and(|(et, _)| *et == t) {
            now_edits.push(edits.next().expect("peeked").1.clone());
        }
        if !now_edits.is_empty() {
            let (reply, rx) = oneshot::channel();
            let msg = Msg::EditAccounts { edits: now_edits, stop: false, dry_run: false, by: "admin".into(), reply };
            s.sched.handle(msg).await.expect("edit");
            rx.await.expect("answer").expect("the edits apply");
            s.play(t).await;
        }
        while arrivals.peek().is_some_and(|w| w.submit == t) {
            let spec = arrivals.next().expect("peeked");
            let seq = store.insert_workload(&new_row(s.sched.engine.state(), spec)).await.expect("insert");
            assert_eq!(seq.to_string(), spec.id, "the store numbers workloads in arrival order");
            let (accepted, rx) = oneshot::channel();
            let live = super::Live {
                seq,
                command: vec!["work".into()],
                env: BTreeMap::new(),
                workdir: None,
                run_as: crate::identity::RunAs::Server,
                after: Vec::new(),
            };
            let msg = Msg::Submitted(Box::new(super::Submission { spec: spec.clone(), live, retries: 0, accepted }));
            s.sched.handle(msg).await.expect("submit");
            rx.await.expect("accepted");
        }
        for (seq, by) in cancels {
            if !s.sched.by_seq.contains_key(&seq) {
                continue;
            }
            let (reply, rx) = oneshot::channel();
            s.sched.handle(Msg::Cancel { seq, by, reply }).await.expect("cancel");
            let _ = rx.await.expect("answer");
            s.play(t).await;
        }
        s.sched.step().await.expect("step");
        s.play(t).await;
        if restarts.peek().is_some_and(|&&r| r <= t) && !s.sched.engine.dirty() {
            let st = s.sched.engine.state();
            let stopping = st.running.iter().any(|&w| st.run(w).phase == Phase::Stopping);
            if !(case.adopt && stopping) {
                restarts.next();
                s.restart(case, &store, dir, t).await;
                s.play(t).await;
            }
        }
        if s.sched.engine.dirty() {
            again = Some(t);
        }
        if s.diverged.is_some() {
            break;
        }
    }
    let log = s.sched.decisions.take().unwrap_or_default();
    let diverged = match (s.diverged, s.parted) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    (log, diverged, store, s.restarted)
}

fn new_row(state: &State, spec: &WorkloadSpec) -> NewWorkload {
    NewWorkload {
        run_as: None,
        owner: None,
        submit_t: spec.submit as i64,
        account: state.accounts.account(spec.account).path.clone(),
        submitter: spec.user.clone(),
        class: spec.class.as_str().into(),
        gpus: i64::from(spec.gpus),
        nodes: i64::from(spec.nodes),
        gpu_type: spec.gpu_type.map(|g| state.cluster.gpu_types[g.0 as usize].name.clone()),
        clusters: None,
        work_s: spec.work_s as i64,
        checkpoint_s: spec.checkpoint_s as i64,
        util: spec.util,
        priority: spec.priority.as_str().into(),
        preemptible: spec.preemptible,
        name: None,
        command: "[\"work\"]".into(),
        env: "{}".into(),
        retries: 0,
        time_limit_s: spec.time_limit_s.map(|l| l as i64),
        workdir: None,
        checkpoint_on_signal: spec.checkpoint_on_signal,
        conditions: Default::default(),
    }
}

/// Runs both sides and compares; returns when (if ever) they parted by
/// design (L-1).
fn check(case: &Case) -> Result<Option<Time>, TestCaseError> {
    check_restarts(case).map(|c| c.diverged)
}

/// [`check`], with how many restarts the server went through.
fn check_restarts(case: &Case) -> Result<Checked, TestCaseError> {
    let dir = tempdir();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let (live, diverged, store, restarted) = rt.block_on(server_side(case, &dir));
    // The store's journal, replayed, makes exactly what the store holds,
    // whether or not the simulator parted from the server (L-1).
    let differences = rt.block_on(async {
        let replayed = crate::journal::replay(&store, None).await;
        crate::journal::differences(&store, &replayed.expect("the journal replays")).await.expect("store")
    });
    prop_assert!(differences.is_empty(), "the replay of the journal differs from the store: {differences:#?}");
    let first = rt.block_on(store.journal_first()).expect("journal");
    prop_assert!(case.snapshot_every > 0 || first == Some(1), "a journal without snapshots is never compacted");
    let (sim, sim_attempts, phases) = sim_side(case);
    let before = |l: &&Line| diverged.is_none_or(|d| l.0 < d);
    let sim_cut: Vec<&Line> = sim.iter().filter(before).collect();
    let live_cut: Vec<&Line> = live.iter().filter(before).collect();
    for (i, (a, b)) in sim_cut.iter().zip(&live_cut).enumerate() {
        prop_assert_eq!(a, b, "decision {} differs (simulator, then server)", i);
    }
    prop_assert_eq!(sim_cut.len(), live_cut.len(), "as many decisions");
    if diverged.is_none() {
        // The store holds the same attempts and final states.
        let (rows, attempts) = rt.block_on(async { (store.all_workloads().await, store.all_attempts().await) });
        let (rows, attempts) = (rows.expect("workloads"), attempts.expect("attempts"));
        let mut stored: Vec<AttemptLine> = attempts
            .iter()
            .map(|a| {
                let outcome = match a.outcome.as_deref() {
                    Some("finished") => AttemptEnd::Finished,
                    Some("preempted") => AttemptEnd::Preempted,
                    // The store says "cancelled" for a cancel and for an
                    // idle reclaim (CON-9) alike; the simulator tells them apart.
                    Some("cancelled") => AttemptEnd::Cancelled,
                    _ => AttemptEnd::Failed,
                };
                (a.workload.to_string(), a.start_t as Time, a.end_t.expect("ended") as Time, outcome)
            })
            .collect();
        let mut expected = sim_attempts;
        stored.sort_by(|a, b| (&a.0, a.1, a.2).cmp(&(&b.0, b.1, b.2)));
        expected.sort_by(|a, b| (&a.0, a.1, a.2).cmp(&(&b.0, b.1, b.2)));
        prop_assert_eq!(stored, expected, "stored attempts");
        let stored: Vec<(String, String)> = rows.iter().map(|r| (r.seq.to_string(), r.state.clone())).collect();
        let expected: Vec<(String, String)> = phases.into_iter().map(|(id, p)| (id, p.to_string())).collect();
        prop_assert_eq!(stored, expected, "stored workload states");
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Checked { diverged, restarted, compacted: first.is_some_and(|f| f > 1) })
}

/// What [`check_restarts`] saw besides the decisions.
#[derive(Debug, PartialEq)]
struct Checked {
    /// When the server parted from the simulator by design (L-1, a lost
    /// attempt).
    diverged: Option<Time>,
    restarted: usize,
    /// The journal was compacted (snapshots taken).
    compacted: bool,
}

fn tempdir() -> std::path::PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let d =
        std::env::temp_dir().join(format!("allot-parity-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst)));
    std::fs::create_dir_all(&d).expect("tempdir");
    d
}

/// submit, gpus, exact nodes, work, checkpoint, priority, preemptible,
/// account, interactive, idle GPUs (util 0, CON-9), checkpoints on the
/// signal (CON-8).
type Job = (u64, u32, bool, u64, u64, u8, bool, usize, bool, bool, bool);

#[derive(Clone, Debug)]
struct Scenario {
    pools: Vec<(u32, u32, u32)>,
    grace: u64,
    slice: u64,
    jobs: Vec<Job>,
    events: Vec<(u64, usize, u8)>,
    /// (t, job, 0 = cancel, else exit with that code)
    requests: Vec<(u64, usize, i32)>,
    policy: u8,
    restarts: Vec<u64>,
    adopt: bool,
    snapshot_every: u64,
    /// CON-10, CON-11 and CON-12.
    keep_claims: bool,
    swap_margin: f64,
    checkpoint_wait: u64,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let pools = prop::collection::vec((1u32..4, prop::sample::select(vec![1u32, 2, 4, 8]), 1u32..3), 1..3);
    let job = (
        (0u64..4000, 1u32..17, any::<bool>(), 1u64..3000),
        (prop::sample::select(vec![0u64, 100, 500]), 0u8..4, any::<bool>(), 0usize..3, prop::bool::weighted(0.25)),
        (prop::bool::weighted(0.3), prop::bool::weighted(0.3)),
    )
        .prop_map(|((s, g, e, w), (c, p, pre, a, i), (idle, sig))| (s, g, e, w, c, p, pre, a, i, idle, sig));
    let jobs = prop::collection::vec(job, 1..30);
    let events = prop::collection::vec((0u64..5000, 0usize..20, 0u8..4), 0..5);
    let requests = prop::collection::vec((0u64..5000, 0usize..30, prop::sample::select(vec![0, 0, 1, 3])), 0..5);
    let restarts = (
        prop::collection::vec(0u64..5000, 0..3),
        prop::bool::weighted(0.7),
        prop::sample::select(vec![0u64, 3, 20]),
        (any::<bool>(), prop::sample::select(vec![0.0f64, 0.3]), prop::sample::select(vec![0u64, 0, 200])),
    );
    (pools, 0u64..120, prop::sample::select(vec![0u64, 300, 1800]), jobs, events, requests, 0u8..3, restarts).prop_map(
        |(pools, grace, slice, jobs, events, requests, policy, (restarts, adopt, snapshot_every, knobs))| Scenario {
            pools,
            grace,
            slice,
            jobs,
            events,
            requests,
            policy,
            restarts,
            adopt,
            snapshot_every,
            keep_claims: knobs.0,
            swap_margin: knobs.1,
            checkpoint_wait: knobs.2,
        },
    )
}

fn build(s: &Scenario) -> Case {
    let mut b = StateBuilder::new();
    for (i, &(n, g, r)) in s.pools.iter().enumerate() {
        b = b.pool(&format!("p{i}"), "H100", n, g).racks_of(r);
        if i == 0 {
            b = b.shared();
        }
    }
    b = b.account("org/a").account("org/b/x").account("org/c").legacy("org/b", &["p0"]);
    let state = b
        .contract(|c| {
            c.grace = s.grace;
            c.min_slice.batch = s.slice;
            // CON-9 within the traces' horizon, for both classes.
            let idle = allot_core::IdleReclaim { threshold: 0.05, after: 400, warning: 100 };
            c.idle_reclaim.interactive = Some(idle);
            c.idle_reclaim.batch = Some(allot_core::IdleReclaim { after: 900, ..idle });
            c.keep_claims = s.keep_claims;
            c.swap_margin = s.swap_margin;
            c.checkpoint_wait = s.checkpoint_wait;
        })
        .build();
    let accounts = ["org/a", "org/b/x", "org/c"];
    let mut jobs = s.jobs.clone();
    jobs.sort_by_key(|j| j.0);
    let gpn = s.pools.iter().map(|p| p.1).max().unwrap_or(1);
    let specs: Vec<WorkloadSpec> = jobs
        .iter()
        .enumerate()
        .map(|(i, &(submit, gpus, exact, work, ckpt, prio, pre, acct, interactive, idle, on_signal))| {
            let mut gpus = gpus;
            let mut nodes = 0;
            if exact && gpus > gpn && gpus % gpn == 0 {
                nodes = gpus / gpn;
            }
            while !state.cluster.fits_anywhere(gpus, nodes, None, allot_core::cluster::ClusterSet::ANY) {
                gpus -= 1;
                nodes = 0;
            }
            let mut w = Wl::new((i + 1).to_string())
                .account(accounts[acct])
                .user(if i % 3 == 0 { "ann" } else { "bob" })
                .gpus(gpus)
                .nodes(nodes)
                .submit(submit)
                .work(work)
                .checkpoint(ckpt)
                .priority(Priority::ALL[prio as usize])
                .class(if interactive { Class::Interactive } else { Class::Batch });
            if pre {
                w = w.preemptible();
            }
            if idle {
                w = w.util(0.0);
            }
            if on_signal {
                w = w.on_signal();
            }
            w.build(&state)
        })
        .collect();
    let n = state.cluster.nodes.len();
    let kinds = [NodeEventKind::Fail, NodeEventKind::Repair, NodeEventKind::Drain, NodeEventKind::Undrain];
    let mut events: Vec<NodeEvent> = s
        .events
        .iter()
        .map(|&(t, node, k)| NodeEvent { t, node: NodeId((node % n) as u32), kind: kinds[k as usize] })
        .collect();
    events.sort_by_key(|e| e.t);
    let mut requests: Vec<Request> = s
        .requests
        .iter()
        .map(|&(t, j, code)| Request {
            t,
            workload: (j % specs.len() + 1).to_string(),
            kind: if code == 0 { RequestKind::Cancel { by: "ann".into() } } else { RequestKind::Exit { code } },
        })
        .collect();
    requests.sort_by_key(|r| r.t);
    let policy = [PolicyKind::Allot, PolicyKind::Priority, PolicyKind::FifoBackfill][s.policy as usize % 3];
    let restarts = {
        let mut r: Vec<Time> = s.restarts.clone();
        r.sort_unstable();
        r
    };
    Case {
        state,
        specs,
        events,
        requests,
        edits: Vec::new(),
        policy,
        restarts,
        adopt: s.adopt,
        snapshot_every: s.snapshot_every,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random small traces: gangs, interactive work past slices, drains,
    /// failures, cancels and failing exits, idle GPUs (CON-9) and
    /// checkpoints on the signal (CON-8), under three policies.
    #[test]
    fn the_server_decides_as_the_simulator(s in scenario()) {
        check(&build(&s))?;
    }
}

/// The shipped example (its cluster, trace and node events).
fn example(grace: Option<Time>) -> Case {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let cfg = allot_trace::config::load_config(&root.join("cluster.toml")).expect("config");
    let mut contract = cfg.contract;
    if let Some(g) = grace {
        contract.grace = g;
    }
    let state = State::new(cfg.cluster.clone(), cfg.accounts.clone(), contract);
    let mut specs = allot_trace::trace::load_trace(&root.join("trace.csv"), &cfg).expect("trace");
    specs.sort_by_key(|w| w.submit);
    let ids: HashMap<String, String> =
        specs.iter().enumerate().map(|(i, w)| (w.id.clone(), (i + 1).to_string())).collect();
    for w in &mut specs {
        w.id = ids[&w.id].clone();
    }
    let events = allot_trace::events::load_events(&root.join("events.csv"), &cfg).expect("events");
    assert!(events.added.is_empty(), "the example adds no node");
    let mut events = events.changes;
    events.sort_by_key(|e| e.t);
    Case {
        state,
        specs,
        events,
        requests: Vec::new(),
        edits: Vec::new(),
        policy: PolicyKind::Allot,
        restarts: Vec::new(),
        adopt: true,
        snapshot_every: 0,
    }
}

/// The shipped example as it is: the same decisions up to the first
/// workload whose work completes during its grace (L-1).
#[test]
fn the_shipped_example_decides_alike() {
    let case = example(None);
    let (sim, _, _) = sim_side(&case);
    let diverged = check(&case).expect("same decisions");
    let compared = diverged.map_or(sim.len(), |d| sim.iter().filter(|l| l.0 < d).count());
    eprintln!("compared {compared} of {} decisions (L-1 at {diverged:?})", sim.len());
    assert!(compared > 0, "nothing compared");
}

/// The shipped example without grace, where L-1 cannot happen: every
/// decision, every stored attempt and every final state are equal.
#[test]
fn the_shipped_example_without_grace_decides_alike_to_the_end() {
    let diverged = check(&example(Some(0))).expect("same decisions");
    assert_eq!(diverged, None);
}

/// The shipped example without grace while the tree changes (ACC-1,
/// ACC-2): a budget halved, a share raised, an account created, one
/// renamed and one closed mid-run — every decision, attempt and final state
/// equal, the closed account's later arrivals rejected on both sides.
#[test]
fn the_shipped_example_with_account_changes_decides_alike_to_the_end() {
    use allot_core::{AccountEdit, AccountField, AccountSpec};
    let mut case = example(Some(0));
    let tree = &case.state.accounts;
    let leaves: Vec<String> =
        tree.ids().map(|i| tree.account(i)).filter(|a| a.children.is_empty()).map(|a| a.path.clone()).collect();
    let budgeted = tree.ids().map(|i| tree.account(i)).find(|a| a.budget_gpu_hours.is_some()).expect("a budget");
    let end = case.specs.last().expect("workloads").submit;
    let (closed, renamed) = (leaves[0].clone(), leaves[1].clone());
    let to = format!("{renamed}-v2");
    let new = format!("{}/new", renamed.rsplit_once('/').map_or("x", |(p, _)| p));
    case.edits = vec![
        (
            end / 5,
            AccountEdit::Set {
                path: budgeted.path.clone(),
                field: AccountField::Budget,
                value: budgeted.budget_gpu_hours.map(|b| b / 2.0),
            },
        ),
        (end / 4, AccountEdit::Set { path: leaves[2].clone(), field: AccountField::Share, value: Some(3.0) }),
        (end / 3, AccountEdit::Create(AccountSpec { path: new, share: Some(2.0), ..Default::default() })),
        (end / 3, AccountEdit::Rename { path: renamed, to }),
        (end / 2, AccountEdit::Close { path: closed.clone() }),
    ];
    let (_, _, phases) = sim_side(&case);
    let closed_id = case.state.accounts.get(&closed).expect("closed account");
    let rejected = case
        .specs
        .iter()
        .filter(|w| w.account == closed_id && w.submit > end / 2)
        .filter(|w| phases.iter().any(|(id, p)| *id == w.id && *p == "rejected"))
        .count();
    assert!(rejected > 0, "the closed account's later arrivals are rejected (ACC-2)");
    assert_eq!(check(&case).expect("same decisions"), None);
}

/// L-5: the shipped example without grace, its server restarted three
/// times with its executor adopting every running attempt (K8S-10) and a
/// snapshot every 25 journal entries: the run carries on with the engine
/// that stopped (the newest snapshot and the journal after it), so every
/// decision, attempt and final state is the simulator's, as without
/// restarts; the compacted journal, replayed from its oldest snapshot,
/// equals the store.
#[test]
fn restarts_that_adopt_change_no_decision() {
    let mut case = example(Some(0));
    let end = case.specs.last().expect("workloads").submit;
    case.restarts = vec![end / 4, end / 2, 3 * end / 4];
    case.snapshot_every = 25;
    let checked = check_restarts(&case).expect("same decisions");
    assert_eq!(checked, Checked { diverged: None, restarted: 3, compacted: true });
}

/// L-5: restarted with an executor that adopts nothing, the attempts that
/// held GPUs are lost and requeued by the engine (`Input::Lost`): the same
/// decisions up to the first restart that lost one, and the journal's
/// replay still equals the store (in `check`).
#[test]
fn restarts_that_lose_attempts_are_replayed_exactly() {
    let mut case = example(Some(0));
    let end = case.specs.last().expect("workloads").submit;
    case.restarts = vec![end / 3, 2 * end / 3];
    case.adopt = false;
    let Checked { diverged, restarted, compacted } = check_restarts(&case).expect("same decisions before");
    assert_eq!((restarted, compacted), (2, false));
    assert!(diverged.is_some_and(|d| d >= end / 3), "a restart lost running work: {diverged:?}");
}

/// L-1, the one difference by design: a workload whose work completes
/// during its grace finishes in the simulator and is requeued live (its
/// exit after the signal reads as "checkpointed and stopped").
#[test]
fn completion_during_grace_is_the_documented_difference() {
    let state = StateBuilder::new()
        .pool("p", "H100", 1, 8)
        .account("org/a")
        .account("org/b")
        .contract(|c| {
            c.grace = 600;
            c.min_slice.batch = 0;
        })
        .build();
    let a = Wl::new("1").account("org/a").gpus(8).submit(0).work(1000).preemptible().build(&state);
    let b = Wl::new("2").account("org/b").gpus(8).submit(900).work(100).class(Class::Interactive).build(&state);
    let case = Case {
        state,
        specs: vec![a, b],
        events: Vec::new(),
        requests: Vec::new(),
        edits: Vec::new(),
        policy: PolicyKind::Allot,
        restarts: Vec::new(),
        adopt: true,
        snapshot_every: 0,
    };
    let (sim, _, _) = sim_side(&case);
    let finish = sim.iter().find(|l| l.1 == Change::Finish.as_str() && l.2 == "1").expect("finishes in the simulator");
    assert_eq!(finish.0, 1000, "its work completes during the grace that started at 900");
    let diverged = check(&case).expect("same decisions before");
    assert_eq!(diverged, Some(1000), "the server requeues it at its exit");
}

/// The budget statement of the same history is the same from the
/// server's store (`crate::report`, as `GET /v1/budget-report` computes
/// it) and from the simulator's record (`allot sim --budget-report`):
/// every period of the shipped example, without grace (no L-1), with
/// carry-over so that BUD-5 is compared too, as CSV (three decimals, so
/// float sums taken in another order compare equal).
#[test]
fn the_server_states_budgets_as_the_simulator() {
    let mut case = example(Some(0));
    case.state.contract.budget_carry_over = 0.5;
    let dir = tempdir();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let (_, diverged, store, _) = rt.block_on(server_side(&case, &dir));
    assert_eq!(diverged, None);
    let history = rt.block_on(crate::report::History::load(&store)).expect("history");
    let (state, out) = simulate_case(&case, &SimOptions::default());
    let sim = allot_sim::statement::budget_statement(&state, &out, &case.state.accounts, &[]);
    assert!(sim.periods.len() > 1, "several periods compared: {}", sim.periods.len());
    let periods = case.state.contract.periods();
    let ks = periods.index(sim.periods[0].start as Time)..=periods.index(sim.periods.last().unwrap().start as Time);
    let live = crate::report::statement_of(&case.state, &history, out.horizon_end, ks);
    let (live, sim) = (allot_core::statement::to_csv(&live), allot_core::statement::to_csv(&sim));
    assert!(sim.contains(",org/"), "accounts stated: {sim}");
    for (i, (a, b)) in sim.lines().zip(live.lines()).enumerate() {
        assert_eq!(a, b, "line {i} differs (simulator, then server)");
    }
    assert_eq!(sim.lines().count(), live.lines().count());
    let _ = std::fs::remove_dir_all(&dir);
}
