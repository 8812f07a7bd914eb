//! The engine, driven input by input as an interpreter drives it, with the
//! state's invariants checked after every step: what each input changes and
//! which effects it leaves (CON-2, CON-3, CON-6, ENG-1, MNT-1 … MNT-3,
//! cancels, retries, stale reports).

use allot_core::cluster::ClusterId;
use allot_core::engine::{Cancelled, Change, Close, LAUNCH_FAILURES_TO_DRAIN, Later, LaunchFault, Outcome};
use allot_core::{
    Effect, Engine, Exit, Health, NodeEvent, NodeEventKind, NodeId, Phase, Policy, PolicyKind, Rule, Time, WorkloadId,
};
use allot_testkit::{Drive, StateBuilder, Wl};

struct Run {
    engine: Engine,
    policy: Box<dyn Policy>,
}

impl Run {
    /// One pool of `nodes` nodes of 8 GPUs, grace 100 s, FIFO with backfill.
    fn new(nodes: u32) -> Run {
        let state =
            StateBuilder::new().pool("p", "H100", nodes, 8).account("org/a").contract(|c| c.grace = 100).build();
        Run { engine: Engine::new(state), policy: PolicyKind::FifoBackfill.build() }
    }

    /// The effects of the last steps; the state is checked first.
    fn effects(&mut self, t: Time) -> Vec<Effect> {
        self.engine.state().sanity_check(t).expect("invariants hold after every step");
        self.engine.take_effects()
    }

    fn submit(&mut self, id: &str, gpus: u32, work: Time, retries: u32, t: Time) -> WorkloadId {
        let spec =
            Wl::new(id).account("org/a").gpus(gpus).submit(t).work(work).checkpoint(50).build(self.engine.state());
        let w = self.engine.arrive(&mut *self.policy, spec, retries, t);
        self.effects(t);
        w
    }

    /// A workload of 8 GPUs with a time limit (CON-6), started at `t`.
    fn start_limited(&mut self, id: &str, work: Time, limit: Time, t: Time) -> WorkloadId {
        let spec =
            Wl::new(id).account("org/a").gpus(8).submit(t).work(work).time_limit(limit).build(self.engine.state());
        let w = self.engine.arrive(&mut *self.policy, spec, 0, t);
        self.effects(t);
        assert_eq!(changes(&self.pass(t)), [Change::Start]);
        w
    }

    fn expire(&mut self, t: Time) -> Vec<Effect> {
        self.engine.expire(t);
        self.effects(t)
    }

    fn pass(&mut self, t: Time) -> Vec<Effect> {
        self.engine.pass(self.policy.as_mut(), t);
        self.effects(t)
    }

    fn exited(&mut self, w: WorkloadId, exit: Exit, t: Time) -> Vec<Effect> {
        let attempt = self.engine.state().run(w).attempts;
        self.engine.exited(w, attempt, exit, t);
        self.effects(t)
    }

    fn node(&mut self, n: u32, kind: NodeEventKind, t: Time) -> Vec<Effect> {
        self.engine.node_event(&NodeEvent { t, node: NodeId(n), kind });
        self.effects(t)
    }
}

/// The changes recorded, in order.
fn changes(effects: &[Effect]) -> Vec<Change> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Record(t) => Some(t.change),
            _ => None,
        })
        .collect()
}

fn kills(effects: &[Effect]) -> usize {
    effects.iter().filter(|e| matches!(e, Effect::Kill { .. })).count()
}

#[test]
fn a_start_launches_and_a_completion_frees_the_gpus() {
    let mut r = Run::new(1);
    let w = r.submit("a", 8, 1000, 0, 0);
    let fx = r.pass(0);
    assert_eq!(changes(&fx), [Change::Start]);
    assert!(matches!(&fx[1], Effect::Launch { workload, attempt: 1 } if *workload == w));
    assert_eq!(r.engine.state().run(w).alloc.as_ref().map(|a| a.gpus()), Some(8));
    let fx = r.exited(w, Exit::Completed, 1000);
    assert_eq!(changes(&fx), [Change::Finish]);
    let Effect::Record(t) = &fx[0] else { panic!("a record") };
    let ended = t.ended.as_ref().expect("an attempt ended");
    assert_eq!((ended.outcome, ended.stop.useful_gpu_s, ended.started), (Outcome::Finished, 8000, 0));
    assert_eq!(r.engine.state().run(w).phase, Phase::Finished);
    assert_eq!(r.engine.state().free.free_on(NodeId(0)), 8);
    assert!(r.engine.dirty(), "released GPUs call for a pass");
}

#[test]
fn a_drain_signals_kills_after_grace_and_requeues_with_lost_progress() {
    let mut r = Run::new(1);
    let w = r.submit("a", 8, 1000, 0, 0);
    r.pass(0);
    let fx = r.node(0, NodeEventKind::Drain, 170);
    assert_eq!(changes(&fx), [Change::Preempt]);
    assert!(fx.iter().any(|e| matches!(e, Effect::Signal { stop_at: 270, .. })), "CON-2: killed after grace: {fx:?}");
    assert_eq!(r.engine.next_deadline(), Some(270));
    assert_eq!(r.engine.expire(269), 0);
    assert_eq!(r.engine.expire(270), 1);
    let fx = r.effects(270);
    assert_eq!(kills(&fx), 1);
    let fx = r.exited(w, Exit::KILLED, 270);
    assert_eq!(changes(&fx), [Change::Stop]);
    let Effect::Record(t) = &fx[0] else { panic!("a record") };
    // Progress frozen at the signal (170 s), checkpoints every 50 s.
    assert_eq!(t.reason.rule, Rule::Requeue);
    assert!(t.reason.detail.starts_with("grace over; 20 s of progress"), "{}", t.reason);
    assert_eq!(r.engine.state().run(w).remaining, 850);
    assert!(fx.iter().any(|e| matches!(e, Effect::Health { health: Health::Drained, .. })), "MNT-1 completes");
}

/// CFG-1: a reload's contract acts from its instant. The decayed usage is
/// continuous at the reload and then decays by the new half-life; a drain
/// after it signals with the new grace; the budget periods are kept (they
/// change only at a restart).
#[test]
fn a_contract_reload_acts_from_its_instant_and_keeps_the_periods() {
    let mut r = Run::new(1);
    let w = r.submit("a", 8, 100_000, 0, 0);
    assert_eq!(changes(&r.pass(0)), [Change::Start]);
    let a = r.engine.state().accounts.get("org/a").expect("org/a");
    let old = r.engine.state().contract;
    let before = r.engine.state().ledger.decayed_ngs_at(a, 1000);
    assert!(before > 0.0);
    let mut c = old;
    (c.usage_half_life, c.grace, c.budget_period) = (10, 5, old.budget_period + 3600);
    assert_eq!(old.restart_only(&c), ["contract.budget_period"]);
    c.budget_period = old.budget_period;
    assert!(old.restart_only(&c).is_empty());
    r.engine.set_contract(c, 1000);
    assert!(r.effects(1000).is_empty(), "a reload alone starts and stops nothing");
    let st = r.engine.state();
    assert_eq!((st.contract.grace, st.ledger.half_life), (5, 10));
    assert_eq!(st.ledger.decayed_ngs_at(a, 1000), before, "continuous at the reload");
    // 100 new half-lives later the usage is at its steady state for the
    // new half-life: held × h / ln 2.
    let held = st.ledger.at(a, 2000).alloc_ngpus;
    let steady = held * 10.0 / std::f64::consts::LN_2;
    assert!(
        (st.ledger.decayed_ngs_at(a, 2000) - steady).abs() < 1e-6,
        "{} vs {steady}",
        st.ledger.decayed_ngs_at(a, 2000)
    );
    let fx = r.node(0, NodeEventKind::Drain, 2000);
    assert_eq!(changes(&fx), [Change::Preempt]);
    assert!(fx.iter().any(|e| matches!(e, Effect::Signal { stop_at: 2005, .. })), "the new grace: {fx:?}");
    assert_eq!(r.engine.state().run(w).attempts, 1);
}

#[test]
fn a_node_failure_kills_at_once_and_requeues_under_mnt_2() {
    let mut r = Run::new(1);
    let w = r.submit("a", 8, 1000, 0, 0);
    r.pass(0);
    let fx = r.node(0, NodeEventKind::Fail, 100);
    assert_eq!(changes(&fx), [Change::Abort]);
    assert_eq!(kills(&fx), 1);
    assert_eq!(r.engine.next_deadline(), None, "no grace");
    let fx = r.exited(w, Exit::KILLED, 100);
    assert_eq!(changes(&fx), [Change::Fail]);
    let Effect::Record(t) = &fx[0] else { panic!("a record") };
    assert_eq!((t.reason.rule, t.ended.as_ref().map(|e| e.outcome)), (Rule::Failure, Some(Outcome::NodeFailed)));
    assert_eq!(r.engine.state().health[0], Health::Down);
}

#[test]
fn failed_exits_are_retried_then_fail_for_good() {
    let mut r = Run::new(1);
    let w = r.submit("a", 8, 1000, 1, 0);
    r.pass(0);
    let fx = r.exited(w, Exit::Status { code: Some(3), signal: None }, 10);
    assert_eq!(changes(&fx), [Change::Retry]);
    assert_eq!(r.engine.state().run(w).phase, Phase::Pending);
    r.pass(10);
    let fx = r.exited(w, Exit::Status { code: None, signal: Some(11) }, 20);
    assert_eq!(changes(&fx), [Change::Failed]);
    let Effect::Record(t) = &fx[0] else { panic!("a record") };
    assert_eq!(t.reason.detail, "killed by signal 11; failed (1 retries)");
    assert_eq!((r.engine.state().run(w).phase, r.engine.failures(w)), (Phase::Failed, 2));
}

#[test]
fn any_exit_after_the_signal_is_a_stop() {
    let mut r = Run::new(1);
    let w = r.submit("a", 8, 1000, 0, 0);
    r.pass(0);
    r.node(0, NodeEventKind::Drain, 100);
    let fx = r.exited(w, Exit::Status { code: Some(0), signal: None }, 150);
    assert_eq!(changes(&fx), [Change::Stop], "CON-3: exit 0 after the signal is a stop live");
    let Effect::Record(t) = &fx[0] else { panic!("a record") };
    assert!(t.reason.detail.starts_with("stopped after the signal"), "{}", t.reason);
    assert_eq!(r.engine.next_deadline(), None, "its deadline is gone");
}

#[test]
fn a_completion_during_grace_finishes_and_drops_the_deadline() {
    let mut r = Run::new(1);
    let w = r.submit("a", 8, 150, 0, 0);
    r.pass(0);
    r.node(0, NodeEventKind::Drain, 100);
    let fx = r.exited(w, Exit::Completed, 150);
    assert_eq!(changes(&fx), [Change::Finish]);
    assert_eq!(r.engine.next_deadline(), None);
    assert_eq!(r.engine.expire(200), 0);
}

#[test]
fn launch_failures_outside_the_workload_requeue_for_free_and_drain_the_node() {
    let mut r = Run::new(2);
    let w = r.submit("a", 8, 1000, 0, 0);
    for i in 0..LAUNCH_FAILURES_TO_DRAIN {
        let fx = r.pass(u64::from(i));
        assert_eq!(changes(&fx), [Change::Start]);
        let node = r.engine.state().run(w).alloc.as_ref().and_then(|a| a.nodes().next()).expect("placed");
        assert_eq!(node, NodeId(0), "best fit takes the first node while it is up");
        let exit = Exit::NotStarted { message: "no cgroup".into(), fault: LaunchFault::Infrastructure, node: None };
        let fx = r.exited(w, exit, u64::from(i));
        assert_eq!(changes(&fx)[0], Change::LaunchFailed);
        assert_eq!(r.engine.failures(w), 0, "no retry spent");
        let drained = fx.iter().any(|e| matches!(e, Effect::NodeAction { kind: NodeEventKind::Drain, .. }));
        assert_eq!(drained, i + 1 == LAUNCH_FAILURES_TO_DRAIN, "MNT-3 drains at the third failure in a row");
    }
    assert_eq!(r.engine.state().health[0], Health::Drained);
    let fx = r.pass(10);
    assert_eq!(changes(&fx), [Change::Start]);
    assert_eq!(r.engine.state().run(w).alloc.as_ref().and_then(|a| a.nodes().next()), Some(NodeId(1)));
}

/// MNT-4: a working directory missing on the node ends the workload at
/// once as failed: its retries are not spent (another attempt would fail
/// alike), it is not requeued, and the node is not blamed, however many
/// workloads make the same mistake on it.
#[test]
fn a_missing_setup_ends_the_workload_without_a_retry_or_blaming_the_node() {
    let mut r = Run::new(1);
    for i in 0..=LAUNCH_FAILURES_TO_DRAIN {
        let t = u64::from(i) * 10;
        let w = r.submit(&format!("w{i}"), 8, 1000, 3, t);
        assert_eq!(changes(&r.pass(t)), [Change::Start]);
        let message = "working directory /x does not exist on p-0".to_string();
        let fx = r.exited(w, Exit::NotStarted { message, fault: LaunchFault::Setup, node: Some(NodeId(0)) }, t + 1);
        assert_eq!(changes(&fx), [Change::Failed], "ended at once, not retried: {fx:?}");
        let Effect::Record(tr) = &fx[0] else { panic!("a record") };
        assert_eq!(tr.reason.rule, Rule::LaunchSetup);
        assert_eq!(
            tr.reason.to_string(),
            "MNT-4: could not start: working directory /x does not exist on p-0; not retried"
        );
        assert_eq!(tr.ended.as_ref().map(|e| e.outcome), Some(Outcome::LaunchFailed));
        assert!(!fx.iter().any(|e| matches!(e, Effect::NodeAction { .. })), "the node is not blamed: {fx:?}");
        assert_eq!((r.engine.state().run(w).phase, r.engine.failures(w)), (Phase::Failed, 0), "no retry spent");
        assert!(r.engine.state().pending.is_empty(), "not requeued");
        assert_eq!(r.engine.state().free.free_on(NodeId(0)), 8, "its GPUs are released");
    }
    assert_eq!(r.engine.state().health[0], Health::Up, "MNT-3 does not count a user's mistake");
    // Nor do they add to the node's count of launch failures in a row.
    let w = r.submit("infra", 8, 1000, 0, 100);
    let fail = Exit::NotStarted { message: "no cgroup".into(), fault: LaunchFault::Infrastructure, node: None };
    for t in 100..100 + u64::from(LAUNCH_FAILURES_TO_DRAIN) - 1 {
        r.pass(t);
        let fx = r.exited(w, fail.clone(), t);
        assert!(!fx.iter().any(|e| matches!(e, Effect::NodeAction { .. })), "not yet three in a row: {fx:?}");
    }
}

#[test]
fn a_started_launch_resets_the_count() {
    let mut r = Run::new(2);
    let w = r.submit("a", 8, 1000, 0, 0);
    let fail = Exit::NotStarted { message: "spawn".into(), fault: LaunchFault::Infrastructure, node: Some(NodeId(0)) };
    for t in 0..2 {
        r.pass(t);
        r.exited(w, fail.clone(), t);
    }
    r.pass(2);
    r.engine.launched(w, r.engine.state().run(w).attempts);
    r.exited(w, Exit::Status { code: Some(1), signal: None }, 3);
    r.pass(3);
    let fx = r.exited(w, fail, 3);
    assert!(!fx.iter().any(|e| matches!(e, Effect::NodeAction { .. })), "not three in a row: {fx:?}");
}

#[test]
fn cancels_end_pending_work_now_and_running_work_when_it_stops() {
    let mut r = Run::new(1);
    let a = r.submit("a", 8, 1000, 0, 0);
    let b = r.submit("b", 8, 1000, 0, 0);
    r.pass(0);
    assert_eq!(r.engine.cancel(b, 5, "cancelled by ann"), Cancelled::Ended);
    assert_eq!(changes(&r.effects(5)), [Change::Cancel]);
    assert_eq!(r.engine.cancel(a, 5, "cancelled by ann"), Cancelled::Stopping);
    assert_eq!(changes(&r.effects(5)), [Change::Preempt]);
    assert_eq!(r.engine.cancel(a, 6, "cancelled by bob"), Cancelled::Stopping, "asked twice");
    let fx = r.exited(a, Exit::KILLED, 105);
    assert_eq!(changes(&fx), [Change::Cancel]);
    assert_eq!(r.engine.state().run(a).phase, Phase::Cancelled);
    assert_eq!(r.engine.cancel(a, 200, "cancelled by ann"), Cancelled::AlreadyEnded);
}

#[test]
fn stale_reports_change_nothing() {
    let mut r = Run::new(1);
    let w = r.submit("a", 8, 1000, 0, 0);
    r.pass(0);
    r.engine.exited(w, 7, Exit::Completed, 10);
    assert!(r.effects(10).is_empty(), "another attempt's exit");
    r.exited(w, Exit::Completed, 1000);
    r.engine.exited(w, 1, Exit::Status { code: Some(1), signal: None }, 1001);
    assert!(r.effects(1001).is_empty(), "an exit after the end");
    assert_eq!(r.engine.state().run(w).phase, Phase::Finished);
}

#[test]
fn with_nothing_to_change_no_wake_up_is_planned() {
    let mut r = Run::new(1);
    let state = &r.engine.state();
    let big = Wl::new("x").account("org/a").gpus(8).nodes(1).submit(0).work(10).build(state);
    r.engine.arrive(&mut *r.policy, big, 0, 0);
    r.node(0, NodeEventKind::Fail, 0);
    r.pass(0);
    let mut periodic = PolicyKind::Allot.build();
    /// A replay's end: nothing more to come.
    struct Ended;
    impl allot_core::engine::Carry for Ended {
        fn carry(&mut self, _: &Engine, _: &[Effect], _: Time, _: &mut Vec<allot_core::engine::Input>) {}
        fn may_change(&self) -> bool {
            false
        }
    }
    r.engine.step(&mut *periodic, 0, vec![], Close::Pass, &mut Ended);
    assert_eq!(r.engine.wake(), None, "stuck: nothing runs and nothing can come");
    r.engine.step(&mut *periodic, 0, vec![], Close::Pass, &mut Later);
    assert!(r.engine.wake().is_some(), "inputs may still come: periodic passes go on");
}

/// The last record's change and reason.
fn last_record(effects: &[Effect]) -> (Change, Rule, String) {
    effects
        .iter()
        .rev()
        .find_map(|e| match e {
            Effect::Record(t) => Some((t.change, t.reason.rule, t.reason.detail.to_string())),
            _ => None,
        })
        .expect("a record")
}

#[test]
fn a_time_limit_signals_at_the_limit_kills_after_grace_and_fails_without_requeue() {
    let mut r = Run::new(1);
    let w = r.start_limited("a", 1000, 300, 0);
    assert_eq!(r.engine.next_deadline(), Some(300), "CON-6: the limit is a deadline");
    assert!(r.expire(299).is_empty(), "not before the limit");
    assert_eq!(r.engine.state().run(w).phase, Phase::Running);
    let fx = r.expire(300);
    assert_eq!(changes(&fx), [Change::Preempt]);
    assert!(fx.iter().any(|e| matches!(e, Effect::Signal { stop_at: 400, .. })), "CON-2 grace: {fx:?}");
    let (_, rule, detail) = last_record(&fx);
    assert_eq!(rule, Rule::TimeLimit);
    assert!(detail.contains("ran 300 s, its time limit"), "{detail}");
    assert!(r.engine.timed_out(w));
    assert_eq!(kills(&r.expire(399)), 0, "grace runs in full");
    assert_eq!(kills(&r.expire(400)), 1);
    let fx = r.exited(w, Exit::KILLED, 400);
    let (change, rule, detail) = last_record(&fx);
    assert_eq!((change, rule), (Change::Failed, Rule::TimeLimit));
    assert_eq!(detail, "time limit of 300 s reached; killed after grace");
    let run = r.engine.state().run(w);
    assert_eq!((run.phase, run.end), (Phase::Failed, Some(400)), "ends, not requeued");
    assert!(r.engine.state().pending.is_empty());
    assert_eq!(r.engine.next_deadline(), None);
}

#[test]
fn a_workload_that_stops_or_finishes_in_the_grace_after_its_limit() {
    let mut r = Run::new(2);
    let stops = r.start_limited("stops", 1000, 300, 0);
    let done = r.start_limited("done", 350, 300, 0);
    r.expire(300);
    let fx = r.exited(stops, Exit::Status { code: Some(0), signal: None }, 320);
    assert_eq!(last_record(&fx).0, Change::Failed, "a stop after the signal is the limit's end");
    assert_eq!(last_record(&fx).2, "time limit of 300 s reached; stopped after the signal");
    let fx = r.exited(done, Exit::Completed, 350);
    assert_eq!(last_record(&fx).0, Change::Finish, "work done within the grace finishes (CON-2)");
    assert_eq!(r.engine.state().run(done).phase, Phase::Finished);
    assert_eq!(r.engine.next_deadline(), None, "both deadlines are gone");
}

#[test]
fn a_limit_longer_than_the_work_changes_nothing() {
    let mut r = Run::new(1);
    let w = r.start_limited("a", 1000, 1001, 0);
    assert!(r.expire(1000).is_empty());
    let fx = r.exited(w, Exit::Completed, 1000);
    assert_eq!(changes(&fx), [Change::Finish]);
    assert_eq!(r.engine.next_deadline(), None, "the limit left with the attempt");
    assert!(!r.engine.timed_out(w));
}

#[test]
fn the_limit_counts_per_attempt() {
    let mut r = Run::new(1);
    let w = r.start_limited("a", 1000, 300, 0);
    r.node(0, NodeEventKind::Drain, 200);
    r.expire(300);
    assert!(!r.engine.timed_out(w), "a workload already stopping keeps its stop");
    r.exited(w, Exit::KILLED, 300);
    assert_eq!(r.engine.state().run(w).phase, Phase::Pending, "requeued by the drain (CON-3)");
    r.node(0, NodeEventKind::Undrain, 500);
    assert_eq!(changes(&r.pass(500)), [Change::Start]);
    assert_eq!(r.engine.next_deadline(), Some(800), "a fresh limit for the new attempt");
    assert!(r.expire(799).is_empty());
    assert_eq!(changes(&r.expire(800)), [Change::Preempt]);
}

/// K8S-10: an attempt adopted after a restart holds its GPUs as the next
/// attempt from its recorded start, launches nothing, and is charged once:
/// by the replay of its start, not again by the adoption.
#[test]
fn an_adopted_attempt_holds_its_gpus_from_its_start_without_a_launch() {
    let mut r = Run::new(1);
    let spec = Wl::new("k").account("org/a").gpus(8).submit(100).work(1000).build(r.engine.state());
    let (account, user) = (spec.account, spec.user.clone());
    // The server's replay of the open attempt's start, as at recovery.
    let span = allot_core::engine::UsageSpan {
        account: "org/a".into(),
        user: user.clone(),
        start: 400,
        end: None,
        gpus: 8,
        weight: 1.0,
    };
    r.engine.restore_usage(&[span]);
    let past = allot_core::engine::Past { kept_s: 100, attempts: 1, first_start: Some(200), ..Default::default() };
    let alloc = allot_core::Allocation { parts: vec![(NodeId(0), 0xff)] };
    assert!(r.engine.state().can_hold(&alloc));
    let w = r.engine.adopt(spec, 0, &past, alloc.clone(), 400, 1000);
    let effects = r.effects(1000);
    assert!(!effects.iter().any(|e| matches!(e, Effect::Launch { .. })), "nothing is launched: {effects:?}");
    let run = r.engine.state().run(w);
    assert_eq!((run.phase, run.attempts, run.started, run.first_start), (Phase::Running, 2, Some(400), Some(200)));
    assert_eq!(run.last_reason.as_ref().map(|x| x.rule), Some(Rule::Adopt));
    assert!(!r.engine.state().can_hold(&alloc), "its GPUs are held");
    // Another 8-GPU workload waits for them.
    let other = r.submit("o", 8, 100, 0, 1000);
    assert!(changes(&r.pass(1000)).is_empty());
    // It ends as any running attempt does; the ledger holds its whole interval once.
    assert_eq!(changes(&r.exited(w, Exit::Completed, 1300)), [Change::Finish]);
    assert_eq!(r.engine.state().ledger.at(account, 1300).charged_gpu_s, 8 * 900);
    assert_eq!(changes(&r.pass(1300)), [Change::Start]);
    assert_eq!(r.engine.state().run(other).phase, Phase::Running);
}

/// K8S-11: GPUs held outside Allot are neither free nor a workload's; what
/// Allot holds is set aside only once released; a lower count frees them.
#[test]
fn gpus_held_outside_allot_are_set_aside_as_they_are_free() {
    let mut r = Run::new(1);
    let a = r.submit("a", 4, 1000, 0, 0);
    assert_eq!(changes(&r.pass(0)), [Change::Start]);
    // 6 held outside, 4 free: 4 set aside now, the rest when `a` ends.
    assert_eq!(r.engine.hold_outside(NodeId(0), 6), 4);
    r.effects(0);
    let b = r.submit("b", 1, 100, 0, 1);
    assert!(changes(&r.pass(1)).is_empty(), "nothing free on the node");
    assert_eq!(changes(&r.exited(a, Exit::Completed, 1000)), [Change::Finish]);
    assert_eq!(r.engine.state().outside[0].count_ones(), 6, "set aside as released");
    assert_eq!(changes(&r.pass(1000)), [Change::Start], "b takes one of the 2 left");
    assert_eq!(r.engine.state().run(b).phase, Phase::Running);
    let c = r.submit("c", 4, 100, 0, 1001);
    assert!(changes(&r.pass(1001)).is_empty(), "1 free of 8");
    let why = r.engine.explain(&*r.policy, c, 1001).to_string();
    assert!(why.contains("; 6 held by pods Allot does not manage (K8S-11)"), "the reason says why: {why}");
    // The outside work ends: its GPUs are free again.
    assert_eq!(r.engine.hold_outside(NodeId(0), 0), 0);
    assert!(r.engine.dirty());
    r.effects(1002);
    assert_eq!(changes(&r.pass(1002)), [Change::Start]);
    assert_eq!(r.engine.state().run(c).phase, Phase::Running);
}

/// ACC-3: closing an account with stop cancels every workload of its
/// subtree that has not ended — queued, held (parked) and running (after
/// grace) — under the rule ACC-3, and nothing of any other account.
#[test]
fn stopping_an_account_cancels_its_queued_held_and_running_work_only() {
    let state = StateBuilder::new()
        .pool("p", "H100", 1, 8)
        .account("org/a")
        .account("org/b")
        .contract(|c| c.grace = 100)
        .build();
    let mut engine = Engine::new(state);
    let mut policy = PolicyKind::FifoBackfill.build();
    let arrive = |engine: &mut Engine, policy: &mut dyn Policy, id: &str, account: &str| {
        let spec = Wl::new(id).account(account).gpus(8).work(1000).build(engine.state());
        engine.arrive(policy, spec, 0, 0)
    };
    let run = arrive(&mut engine, &mut *policy, "run", "org/a");
    engine.pass(&mut *policy, 0);
    let queued = arrive(&mut engine, &mut *policy, "queued", "org/a");
    let held = arrive(&mut engine, &mut *policy, "held", "org/a");
    engine.hold(held, 0).expect("a queued workload can be held");
    let other = arrive(&mut engine, &mut *policy, "other", "org/b");
    assert_eq!(engine.state().run(run).phase, Phase::Running);
    let a = engine.state().accounts.get("org/a").expect("org/a");
    let stopped = engine.stop_accounts(&[a], "admin", 10);
    assert_eq!(stopped, [(run, Cancelled::Stopping), (queued, Cancelled::Ended), (held, Cancelled::Ended)]);
    let st = engine.state();
    st.sanity_check(10).expect("invariants hold");
    for w in [queued, held] {
        assert_eq!(st.run(w).phase, Phase::Cancelled);
        assert_eq!(st.run(w).last_reason.as_ref().map(|r| r.rule), Some(Rule::AccountStop), "cited as ACC-3");
    }
    assert_eq!(st.run(other).phase, Phase::Pending, "another account's work waits on");
    assert_eq!(st.run(run).phase, Phase::Stopping, "running work stops after grace (CON-2)");
    let effects = engine.take_effects();
    let signalled = effects.iter().any(|e| matches!(e, Effect::Signal { workload, .. } if *workload == run));
    let recorded = effects.iter().find_map(|e| match e {
        Effect::Record(t) if t.workload == run && t.change == Change::Preempt => Some(t.reason.rule),
        _ => None,
    });
    assert!(signalled && recorded == Some(Rule::AccountStop), "signalled, cited as ACC-3: {effects:?}");
}

/// FLEET-3, FLEET-4 in the engine: an outage fails the cluster's nodes in
/// service (each left as an `outage` node action before its workloads'
/// aborts, which cite FLEET-3 then MNT-2) and remembers them; the return
/// brings back those and only those: a node drained before stays drained,
/// and one an operator failed during the outage stays failed.
#[test]
fn an_outage_takes_the_nodes_in_service_and_its_return_gives_back_only_those() {
    let mut r = Run::new(3);
    let w = r.submit("a", 8, 1000, 0, 0);
    assert_eq!(changes(&r.pass(0)), [Change::Start]);
    let on = r.engine.state().run(w).alloc.as_ref().and_then(|a| a.nodes().next()).expect("placed");
    let others: Vec<u32> = (0..3).filter(|&n| n != on.0).collect();
    r.node(others[0], NodeEventKind::Drain, 1);

    r.engine.cluster_down(ClusterId(0), "no answer for 30 s", 10);
    let fx = r.effects(10);
    let actions: Vec<(NodeId, NodeEventKind)> = fx
        .iter()
        .filter_map(|e| match e {
            Effect::NodeAction { node, kind, cause } => {
                assert_eq!(cause.rule, Rule::FleetOutage);
                Some((*node, *kind))
            }
            _ => None,
        })
        .collect();
    let mut taken = vec![on, NodeId(others[1])];
    taken.sort();
    assert_eq!(actions, taken.iter().map(|&n| (n, NodeEventKind::Outage)).collect::<Vec<_>>(), "in service only");
    let abort = fx
        .iter()
        .find_map(|e| match e {
            Effect::Record(tr) if tr.change == Change::Abort => Some(tr.reason.to_string()),
            _ => None,
        })
        .expect("its running workload is aborted");
    assert!(abort.starts_with("FLEET-3: cluster test is out of service: no answer for 30 s; node "), "{abort}");
    assert!(abort.ends_with("failed (MNT-2)"), "{abort}");
    assert_eq!(r.engine.state().by_outage.iter().copied().collect::<Vec<_>>(), taken);
    assert_eq!(r.engine.clusters_out().into_iter().collect::<Vec<_>>(), [ClusterId(0)]);
    let fx = r.exited(w, Exit::Status { code: None, signal: Some(9) }, 11);
    let Some(Effect::Record(tr)) = fx.first() else { panic!("a record: {fx:?}") };
    assert_eq!((tr.change, tr.ended.as_ref().map(|e| e.outcome)), (Change::Fail, Some(Outcome::NodeFailed)));
    assert_eq!(r.engine.state().run(w).phase, Phase::Pending, "requeued (CON-3)");

    // An operator fails one of the outage's nodes: that outlasts it.
    r.node(others[1], NodeEventKind::Fail, 20);
    r.engine.cluster_up(ClusterId(0), 30);
    let fx = r.effects(30);
    let returned: Vec<NodeId> = fx
        .iter()
        .filter_map(|e| match e {
            Effect::NodeAction { node, kind: NodeEventKind::Return, cause } => {
                assert_eq!(cause.rule, Rule::FleetReturn);
                Some(*node)
            }
            _ => None,
        })
        .collect();
    assert_eq!(returned, [on]);
    let health = &r.engine.state().health;
    assert_eq!(
        (health[on.0 as usize], health[others[0] as usize], health[others[1] as usize]),
        (Health::Up, Health::Drained, Health::Down)
    );
    assert!(r.engine.state().by_outage.is_empty());
    assert_eq!(r.engine.cluster_up(ClusterId(0), 40), 0, "a second return changes nothing");
}

/// CON-3, CON-7 at a server restart: an attempt closed by
/// `closed_at_restart` keeps exactly what the engine keeps when the same
/// attempt is stopped at the same instant: by its declared interval, by
/// its reported checkpoint, and nothing when the workload reported in an
/// earlier attempt but not in this one (recovery once kept the declared
/// interval's multiples there: a second derivation of the rule).
#[test]
fn a_restart_keeps_what_the_engine_keeps() {
    use allot_core::engine::{OpenAttempt, closed_at_restart};
    // (name, a checkpoint reported in attempt 1 at, in attempt 2 at)
    let cases: [(&str, Option<Time>, Option<Time>); 4] = [
        ("never reports: by the declared interval", None, None),
        ("reports in this attempt", None, Some(1130)),
        ("reported before, not in this attempt", Some(40), None),
        ("reported in both", Some(40), Some(1110)),
    ];
    for (name, first, second) in cases {
        // A first attempt drained at 100; a second one from 1000,
        // signalled at 1170 (a cancel) and stopped at 1180.
        let mut r = Run::new(1);
        let w = r.submit("a", 8, 1000, 0, 0);
        r.pass(0);
        if let Some(at) = first {
            r.engine.checkpointed(w, 1, at, at).expect("a report");
        }
        let node = NodeEvent { t: 100, node: NodeId(0), kind: NodeEventKind::Drain };
        r.engine.node_event(&node);
        r.effects(100);
        r.exited(w, Exit::KILLED, 100);
        r.node(0, NodeEventKind::Undrain, 1000);
        assert_eq!(changes(&r.pass(1000)), [Change::Start], "{name}");
        let remaining = r.engine.state().run(w).remaining;
        if let Some(at) = second {
            r.engine.checkpointed(w, 2, at, at).expect("a report");
        }
        r.engine.cancel(w, 1170, "test");
        r.effects(1170);
        let fx = r.exited(w, Exit::KILLED, 1180);
        let engine_kept = fx
            .iter()
            .find_map(|e| match e {
                Effect::Record(tr) => tr.ended.as_ref().map(|e| e.kept_s),
                _ => None,
            })
            .expect("the attempt ended");
        let closed = closed_at_restart(
            &OpenAttempt {
                attempt: 2,
                started: 1000,
                signalled: Some(1170),
                remaining,
                checkpoint_s: 50,
                reports: first.is_some() || second.is_some(),
                reported: second.map(|at| at - 1000),
                cancel: true,
            },
            1180,
        );
        assert_eq!(closed.kept_s, engine_kept, "case {name}");
        assert_eq!((closed.outcome, closed.phase), (Outcome::Cancelled, Phase::Cancelled), "case {name}");
        assert_eq!(closed.lost_s, 170 - engine_kept, "case {name}");
    }
    let open = OpenAttempt {
        attempt: 1,
        started: 0,
        signalled: None,
        remaining: 1000,
        checkpoint_s: 50,
        reports: false,
        reported: None,
        cancel: false,
    };
    let lost = closed_at_restart(&open, 170);
    assert_eq!((lost.outcome, lost.phase, lost.kept_s, lost.lost_s), (Outcome::Lost, Phase::Pending, 150, 20));
    assert!(lost.reason.to_string().starts_with("CON-3: the server restarted while attempt 1 held GPUs"));
    let signalled = closed_at_restart(&OpenAttempt { signalled: Some(120), ..open }, 170);
    assert_eq!((signalled.outcome, signalled.kept_s, signalled.lost_s), (Outcome::Preempted, 100, 20));
}

/// L-5 in the engine: an attempt a restart lost ends as
/// `closed_at_restart` closes it, and only that attempt: running, it is
/// lost (kept by its declared interval) and requeued with its GPUs free;
/// signalled, it was preempted (progress frozen at the signal); with a
/// cancel asked, it is cancelled for good; a report naming another attempt
/// changes nothing.
#[test]
fn an_attempt_a_restart_lost_ends_as_closed_at_restart_says() {
    use allot_core::engine::closed_at_restart;
    // (name, signalled at, cancel asked, outcome, phase)
    let cases = [
        ("running", None, false, Outcome::Lost, Phase::Pending),
        ("signalled", Some(120), false, Outcome::Preempted, Phase::Pending),
        ("cancel asked", Some(120), true, Outcome::Cancelled, Phase::Cancelled),
    ];
    for (name, signal, cancel, outcome, phase) in cases {
        let mut r = Run::new(1);
        let w = r.submit("a", 8, 1000, 0, 0);
        assert_eq!(changes(&r.pass(0)), [Change::Start], "{name}");
        if let Some(at) = signal {
            if cancel {
                r.engine.cancel(w, at, "test");
            } else {
                r.node(0, NodeEventKind::Drain, at);
            }
            r.effects(at);
        }
        let open = r.engine.open_attempt(w).expect("open");
        r.engine.lost(w, 2, 170);
        assert!(r.effects(170).is_empty(), "case {name}: a stale attempt changes nothing");
        r.engine.lost(w, 1, 170);
        let fx = r.effects(170);
        let ended = fx
            .iter()
            .find_map(|e| match e {
                Effect::Record(tr) => tr.ended.clone().map(|e| (tr.change, e)),
                _ => None,
            })
            .expect("the attempt ended");
        let closed = closed_at_restart(&open, 170);
        assert_eq!((ended.1.outcome, ended.1.kept_s), (closed.outcome, closed.kept_s), "case {name}");
        assert_eq!((closed.outcome, r.engine.state().run(w).phase), (outcome, phase), "case {name}");
        let st = r.engine.state();
        assert!(!st.running.contains(&w), "case {name}: it holds no GPUs");
        assert_eq!(st.pending.contains(&(0, w)), phase == Phase::Pending, "case {name}: queued again or not");
        assert_eq!(st.run(w).remaining, 1000 - closed.kept_s, "case {name}");
        r.engine.lost(w, 1, 171);
        assert!(r.effects(171).is_empty(), "case {name}: a second loss changes nothing");
    }
}
