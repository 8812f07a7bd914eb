//! What running workloads report, driven through the engine as an
//! interpreter drives it, with the state's invariants checked after every
//! step: reported checkpoints (CON-7), checkpoints on the signal (CON-8)
//! and idle reclaim (CON-9).

use allot_core::engine::{Change, CheckpointRefused};
use allot_core::{
    Effect, Engine, Exit, IdleReclaim, NodeEvent, NodeEventKind, NodeId, Phase, Policy, PolicyKind, Rule, Time,
    WorkloadId,
};
use allot_testkit::{Drive, StateBuilder, Wl};

/// Grace 100 s; interactive work reclaimed below 10% after 600 s idle and
/// 300 s of warning.
const IDLE: IdleReclaim = IdleReclaim { threshold: 0.10, after: 600, warning: 300 };

struct Run {
    engine: Engine,
    policy: Box<dyn Policy>,
}

impl Run {
    fn new(nodes: u32) -> Run {
        let state = StateBuilder::new()
            .pool("p", "H100", nodes, 8)
            .account("org/a")
            .contract(|c| {
                c.grace = 100;
                c.idle_reclaim.interactive = Some(IDLE);
            })
            .build();
        Run { engine: Engine::new(state), policy: PolicyKind::FifoBackfill.build() }
    }

    fn effects(&mut self, t: Time) -> Vec<Effect> {
        self.engine.state().sanity_check(t).expect("invariants hold after every step");
        self.engine.take_effects()
    }

    /// Starts `wl` (8 GPUs of org/a) at `t`.
    fn start(&mut self, wl: Wl, t: Time) -> WorkloadId {
        let spec = wl.account("org/a").gpus(8).submit(t).build(self.engine.state());
        let w = self.engine.arrive(&mut *self.policy, spec, 0, t);
        self.engine.pass(self.policy.as_mut(), t);
        assert_eq!(changes(&self.effects(t)), [Change::Start]);
        w
    }

    fn expire(&mut self, t: Time) -> Vec<Effect> {
        self.engine.expire(t);
        self.effects(t)
    }

    fn util(&mut self, w: WorkloadId, util: f64, t: Time) -> Vec<Effect> {
        let attempt = self.engine.state().run(w).attempts;
        self.engine.gpu_util(w, attempt, util, t);
        self.effects(t)
    }

    fn checkpoint(&mut self, w: WorkloadId, at: Time, now: Time) -> Result<Time, CheckpointRefused> {
        let attempt = self.engine.state().run(w).attempts;
        let r = self.engine.checkpointed(w, attempt, at, now);
        self.effects(now);
        r
    }

    fn exited(&mut self, w: WorkloadId, exit: Exit, t: Time) -> Vec<Effect> {
        let attempt = self.engine.state().run(w).attempts;
        self.engine.exited(w, attempt, exit, t);
        self.effects(t)
    }

    fn drain(&mut self, t: Time) -> Vec<Effect> {
        self.engine.node_event(&NodeEvent { t, node: NodeId(0), kind: NodeEventKind::Drain });
        self.effects(t)
    }
}

fn changes(effects: &[Effect]) -> Vec<Change> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Record(t) => Some(t.change),
            _ => None,
        })
        .collect()
}

/// The last record's change, rule and detail.
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

fn idle_effect(effects: &[Effect]) -> Option<Option<Time>> {
    effects.iter().find_map(|e| match e {
        Effect::Idle { reclaim_at, .. } => Some(*reclaim_at),
        _ => None,
    })
}

#[test]
fn a_stop_keeps_the_progress_of_the_last_reported_checkpoint() {
    // Declared every 50 s; it reports at 130 s of progress instead.
    let mut r = Run::new(1);
    let w = r.start(Wl::new("a").work(1000).checkpoint(50), 0);
    assert_eq!(r.checkpoint(w, 130, 140), Ok(130));
    r.drain(170);
    r.expire(270);
    let fx = r.exited(w, Exit::KILLED, 270);
    let (change, _, detail) = last_record(&fx);
    assert_eq!(change, Change::Stop);
    assert!(detail.starts_with("grace over; 40 s of progress since the last checkpoint lost"), "{detail}");
    assert_eq!(r.engine.state().run(w).remaining, 870, "CON-7: kept 130 s, not the declared 150 s");
}

#[test]
fn a_workload_that_reports_keeps_nothing_in_an_attempt_without_a_report() {
    let mut r = Run::new(1);
    let w = r.start(Wl::new("a").work(1000).checkpoint(50), 0);
    r.checkpoint(w, 100, 100).expect("taken");
    r.drain(120);
    r.expire(220);
    r.exited(w, Exit::KILLED, 220);
    assert_eq!(r.engine.state().run(w).remaining, 900);
    // The next attempt reports nothing: its declared interval no longer counts.
    r.engine.node_event(&NodeEvent { t: 300, node: NodeId(0), kind: NodeEventKind::Undrain });
    r.engine.pass(r.policy.as_mut(), 300);
    r.effects(300);
    r.drain(500);
    r.expire(600);
    let fx = r.exited(w, Exit::KILLED, 600);
    assert!(last_record(&fx).2.contains("200 s of progress since the last checkpoint lost"), "{fx:?}");
    assert_eq!(r.engine.state().run(w).remaining, 900);
}

#[test]
fn a_checkpoint_reported_in_the_grace_loses_only_the_grace() {
    let mut r = Run::new(1);
    let w = r.start(Wl::new("a").work(1000).checkpoint(0).on_signal(), 0);
    r.drain(400);
    // Frozen at the signal: a report in the grace saves all 400 s.
    assert_eq!(r.checkpoint(w, 450, 450), Ok(400));
    let fx = r.exited(w, Exit::Status { code: Some(0), signal: None }, 460);
    let Some(Effect::Record(t)) = fx.iter().find(|e| matches!(e, Effect::Record(_))) else { panic!("a record") };
    let ended = t.ended.as_ref().expect("ended");
    assert_eq!(ended.stop.lost_progress_s, 0, "CON-8: nothing lost but the grace");
    assert_eq!(ended.stop.assigned_gpu_s - ended.stop.useful_gpu_s, 60 * 8, "the 60 s of grace it held");
    assert_eq!(r.engine.state().run(w).remaining, 600);
}

#[test]
fn a_report_from_before_the_signal_saves_only_what_it_had() {
    let mut r = Run::new(1);
    let w = r.start(Wl::new("a").work(1000).checkpoint(0), 0);
    r.drain(400);
    // Noticed in the grace, completed before the signal.
    assert_eq!(r.checkpoint(w, 380, 420), Ok(380));
    assert_eq!(r.checkpoint(w, 390, 430), Ok(390));
    assert_eq!(r.checkpoint(w, 300, 440), Ok(390), "an older report never moves it back");
}

#[test]
fn stale_checkpoint_reports_are_refused_and_change_nothing() {
    let mut r = Run::new(1);
    let w = r.start(Wl::new("a").work(100), 0);
    assert_eq!(r.engine.checkpointed(w, 2, 50, 50), Err(CheckpointRefused::StaleAttempt { asked: 2, current: 1 }));
    r.exited(w, Exit::Completed, 100);
    assert_eq!(r.checkpoint(w, 100, 100), Err(CheckpointRefused::NotRunning { phase: "finished" }));
    assert!(!r.engine.state().run(w).reports);
}

#[test]
fn victims_are_chosen_by_the_real_time_since_their_last_checkpoint() {
    // Two batch workloads past their slice at 3,500 s: "reported" declares
    // a checkpoint every 10,000 s (3,500 s unsaved) but may report one at
    // 3,490 s (10 s unsaved); "declared" checkpoints every 1,000 s (500 s
    // unsaved), or on the signal (nothing). An interactive workload of 8
    // GPUs takes the cheaper one (INT-1, CON-5).
    let cases = [(true, false, "reported"), (false, false, "declared"), (true, true, "declared")];
    for (report, on_signal, victim) in cases {
        let state = StateBuilder::new()
            .pool("p", "H100", 2, 8)
            .account("org/a")
            .contract(|c| {
                c.grace = 100;
                c.min_slice.batch = 0;
            })
            .build();
        let mut engine = Engine::new(state);
        let mut policy = PolicyKind::Allot.build();
        let a = Wl::new("reported").account("org/a").gpus(8).work(10_000).checkpoint(10_000);
        let mut b = Wl::new("declared").account("org/a").gpus(8).work(10_000).checkpoint(1000);
        if on_signal {
            b = b.on_signal();
        }
        let a = engine.arrive(&mut *policy, a.build(engine.state()), 0, 0);
        engine.arrive(&mut *policy, b.build(engine.state()), 0, 0);
        engine.pass(policy.as_mut(), 0);
        if report {
            engine.checkpointed(a, 1, 3490, 3490).expect("taken");
        }
        engine.take_effects();
        let i = Wl::new("i").account("org/a").class(allot_core::Class::Interactive).gpus(8).work(600).submit(3500);
        let i = engine.arrive(&mut *policy, i.build(engine.state()), 0, 3500);
        engine.pass(policy.as_mut(), 3500);
        let preempted: Vec<String> = engine
            .take_effects()
            .iter()
            .filter_map(|e| match e {
                Effect::Record(t) if t.change == Change::Preempt => Some(engine.state().spec(t.workload).id.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(preempted, [victim], "report {report}, on signal {on_signal}");
        assert_eq!(engine.state().run(i).phase, Phase::Pending, "it waits for the grace");
    }
}

#[test]
fn idle_gpus_are_warned_after_the_idle_time_and_reclaimed_after_the_warning() {
    let mut r = Run::new(1);
    let w = r.start(Wl::new("s").class(allot_core::Class::Interactive).work(7200), 0);
    assert!(r.util(w, 0.5, 0).is_empty(), "busy: nothing to do");
    r.util(w, 0.02, 100);
    assert_eq!(r.engine.idle_since(w), Some(100));
    assert_eq!(r.engine.next_deadline(), Some(700));
    assert!(r.expire(699).is_empty(), "CON-9: not before the idle time");
    let fx = r.expire(700);
    assert_eq!(changes(&fx), [Change::IdleWarning]);
    assert_eq!(idle_effect(&fx), Some(Some(1000)));
    assert!(last_record(&fx).2.contains("below 10% for 600 s; stopping at 1000"), "{fx:?}");
    assert_eq!(r.engine.state().run(w).phase, Phase::Running);
    assert!(r.expire(999).is_empty(), "not before the warning is over");
    let fx = r.expire(1000);
    assert_eq!(changes(&fx), [Change::Preempt]);
    assert!(fx.iter().any(|e| matches!(e, Effect::Signal { stop_at: 1100, .. })), "stopped under the contract: {fx:?}");
    assert_eq!(last_record(&fx).1, Rule::IdleReclaim);
    r.expire(1100);
    let fx = r.exited(w, Exit::KILLED, 1100);
    let (change, rule, detail) = last_record(&fx);
    assert_eq!((change, rule), (Change::Cancel, Rule::IdleReclaim));
    assert_eq!(detail, "idle GPUs reclaimed; ended, killed after grace");
    assert_eq!(r.engine.state().run(w).phase, Phase::Cancelled, "ended, not requeued");
    assert!(r.engine.reclaimed(w));
    assert_eq!(r.engine.next_deadline(), None);
}

#[test]
fn busy_gpus_end_the_idle_spell_and_withdraw_the_warning() {
    let mut r = Run::new(1);
    let w = r.start(Wl::new("s").class(allot_core::Class::Interactive).work(7200), 0);
    r.util(w, 0.0, 0);
    r.util(w, 0.09, 300);
    assert_eq!(r.engine.idle_since(w), Some(0), "still below the threshold");
    let fx = r.util(w, 0.10, 400);
    assert!(fx.is_empty(), "not warned yet: nothing to withdraw");
    assert_eq!((r.engine.idle_since(w), r.engine.next_deadline()), (None, None));
    r.util(w, 0.0, 500);
    r.expire(1100);
    let fx = r.util(w, 0.8, 1200);
    assert_eq!(changes(&fx), [Change::IdleCleared]);
    assert_eq!(idle_effect(&fx), Some(None));
    assert!(r.expire(1400).is_empty(), "the reclaim is off");
    r.util(w, 0.0, 1500);
    assert_eq!(r.engine.next_deadline(), Some(2100), "a new spell starts afresh");
}

#[test]
fn idle_reclaim_is_per_class_and_off_for_batch_by_default() {
    let mut r = Run::new(2);
    let b = r.start(Wl::new("b").work(100_000), 0);
    r.util(b, 0.0, 0);
    assert_eq!((r.engine.idle_since(b), r.engine.next_deadline()), (None, None), "batch: off by default");
    assert_eq!(allot_core::Contract::default().idle_reclaim.batch, None);
    assert_eq!(allot_core::Contract::default().idle_reclaim.interactive, Some(IdleReclaim::INTERACTIVE));
}

#[test]
fn a_new_attempt_starts_with_no_idle_spell() {
    let mut r = Run::new(1);
    let w = r.start(Wl::new("s").class(allot_core::Class::Interactive).work(7200), 0);
    r.util(w, 0.0, 0);
    r.drain(100);
    r.expire(200);
    r.exited(w, Exit::KILLED, 200);
    assert_eq!(r.engine.idle_since(w), None);
    assert!(r.expire(600).is_empty(), "the old spell's warning never comes");
    assert_eq!(r.engine.state().run(w).phase, Phase::Pending);
}
