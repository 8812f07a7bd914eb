//! A live run, replayed: a server's journal ([`Entry`]) fed to the engine
//! step by step, exactly as the server fed it. Nothing is simulated: every
//! exit, report and request is the one the server received, so the replay
//! makes the server's decisions again, byte for byte, and what it records
//! (attempts with their GPUs, ends, outcomes and kept progress; each
//! workload's last phase; the decision log) can be checked against the
//! server's store.

use std::collections::BTreeMap;

use allot_core::engine::{Carry, Close, Entry, Input, Outcome, Snapshot, SnapshotOf, Start};
use allot_core::{Effect, Engine, Phase, Policy, State, Time, Transition};

use crate::record::LogEvent;

/// One attempt as the replay made it, keyed by its workload's id (the
/// server's seq) and its number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayedAttempt {
    /// Each node it held, by name, with the indices of its GPUs there.
    pub nodes: Vec<(String, Vec<u32>)>,
    pub start: Time,
    /// When it was signalled (CON-2), if it was.
    pub signal: Option<Time>,
    /// `None`: it still held its GPUs when the journal ends.
    pub end: Option<Time>,
    pub outcome: Option<Outcome>,
    /// Progress it kept (seconds), once ended.
    pub kept_s: Option<Time>,
}

/// What a replay made.
#[derive(Clone, Debug, Default)]
pub struct Replayed {
    /// (workload id, attempt number) → the attempt.
    pub attempts: BTreeMap<(String, u32), ReplayedAttempt>,
    /// Each workload's phase at the end of the journal.
    pub phases: BTreeMap<String, Phase>,
    /// The decision log, as `allot sim --log` writes it.
    pub log: Vec<LogEvent>,
    /// Engines started (the server's first start and its restarts).
    pub starts: u32,
    /// Steps replayed.
    pub steps: u64,
    /// The state of the last engine at the journal's end.
    pub state: Option<State>,
    /// The instant of the snapshot the replay started from (the journal
    /// before it compacted): attempts that ended by then are not made
    /// again.
    pub since: Option<Time>,
}

/// Why a journal cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("journal entry {seq}: {message}")]
    Entry { seq: i64, message: String },
    #[error("journal entry {seq}: a step before any start: the journal is cut at its beginning")]
    NoStart { seq: i64 },
    #[error("journal entry {seq}: {message}")]
    Policy { seq: i64, message: String },
}

/// Builds the policy a start names (or another), or says why not.
pub type PolicyFor<'a> = dyn FnMut(&str) -> Result<Box<dyn Policy>, String> + 'a;

/// Replays `entries` ((journal seq, entry as JSON), in order): a new
/// engine at each start, on the fleet, tree and contract it records, under
/// the policy `policy_for` builds from the name it records (or another, to
/// replay the same inputs under other rules; the live run's exits then
/// stay as they came).
pub fn replay(
    entries: impl IntoIterator<Item = (i64, String)>,
    policy_for: &mut PolicyFor<'_>,
) -> Result<Replayed, ReplayError> {
    let mut r = Replayer::new(policy_for);
    for (seq, json) in entries {
        r.entry(seq, &json)?;
    }
    Ok(r.finish())
}

/// A run's engine with its policy.
pub type Run = (Engine, Box<dyn Policy>);

/// A replay entry by entry, whose last engine can be taken over: a
/// restart recovers by replaying its journal (L-5).
pub struct Replayer<'p, 'a> {
    out: Replayed,
    run: Option<Run>,
    policy_for: &'p mut PolicyFor<'a>,
}

impl<'p, 'a> Replayer<'p, 'a> {
    pub fn new(policy_for: &'p mut PolicyFor<'a>) -> Self {
        Replayer { out: Replayed::default(), run: None, policy_for }
    }

    /// A replay that starts from a snapshot taken at `t` (the journal
    /// before it compacted): its engine, under the policy `policy_for`
    /// builds from the name it records, with that policy's memory. `open`:
    /// the attempts it holds GPUs for, as recorded up to `t` (their nodes,
    /// start and any signal), which the replay ends.
    pub fn from_snapshot(
        snapshot: Snapshot,
        t: Time,
        open: BTreeMap<(String, u32), ReplayedAttempt>,
        policy_for: &'p mut PolicyFor<'a>,
    ) -> Result<Self, ReplayError> {
        let Snapshot { policy: name, engine, memory } = snapshot;
        let mut policy = policy_for(&name).map_err(|message| ReplayError::Policy { seq: 0, message })?;
        if let Some(m) = memory.filter(|_| policy.name() == name) {
            policy.remember(m);
        }
        let out = Replayed { attempts: open, since: Some(t), ..Replayed::default() };
        Ok(Replayer { out, run: Some((engine, policy)), policy_for })
    }

    /// The run now, between entries, encoded ([`encode`]).
    pub fn snapshot(&self) -> Option<Vec<u8>> {
        self.run.as_ref().map(|(engine, policy)| encode(engine, &**policy))
    }

    /// Replays one entry (journal seq, entry as JSON).
    pub fn entry(&mut self, seq: i64, json: &str) -> Result<(), ReplayError> {
        let entry: Entry =
            serde_json::from_str(json).map_err(|e| ReplayError::Entry { seq, message: e.to_string() })?;
        let out = &mut self.out;
        match entry {
            Entry::Start(start) => {
                let Start { policy, cluster, accounts, contract } = *start;
                if let Some((engine, _)) = self.run.take() {
                    out.ended(engine);
                }
                let policy = (self.policy_for)(&policy).map_err(|message| ReplayError::Policy { seq, message })?;
                self.run = Some((Engine::new(State::new(cluster, accounts, contract)), policy));
                out.starts += 1;
            }
            Entry::Lost { end, attempts } => {
                // L-5: the engine closes them, as the inputs a restart
                // gives it now.
                let Some((engine, policy)) = self.run.as_mut() else { return Err(ReplayError::NoStart { seq }) };
                let inputs = lost_inputs(engine, &attempts).map_err(|message| ReplayError::Entry { seq, message })?;
                engine.step(&mut **policy, end, inputs, Close::Open, &mut Recorder { out });
            }
            Entry::Step { t, close, inputs } => {
                let Some((engine, policy)) = self.run.as_mut() else { return Err(ReplayError::NoStart { seq }) };
                check_ids(engine.state(), &inputs).map_err(|message| ReplayError::Entry { seq, message })?;
                engine.step(&mut **policy, t, inputs, close, &mut Recorder { out });
                out.steps += 1;
            }
        }
        Ok(())
    }

    /// What the replay made, the last engine's state with it.
    pub fn finish(mut self) -> Replayed {
        if let Some((engine, _)) = self.run.take() {
            self.out.ended(engine);
        }
        self.out
    }

    /// What the replay made (without a state) and the last engine with its
    /// policy, as the live run left them, to carry on from.
    pub fn take_over(mut self) -> (Replayed, Option<Run>) {
        if let Some((engine, _)) = &self.run {
            self.out.phases_of(engine.state());
        }
        (self.out, self.run)
    }
}

/// The layout of a snapshot's engine and memory, written first in every
/// snapshot. The encoding names no fields, so a field added to the state
/// (a contract option, say) would read an older snapshot shifted, without
/// an error: a snapshot of another layout is refused instead (recovery
/// then rebuilds the engine from the store's rows, as for a store without
/// a journal). Raise it whenever a type in a snapshot changes.
/// (Snapshots written before the tag begin with the policy name's length,
/// a small number, never this one.)
pub const SNAPSHOT_FORMAT: u32 = 0x5A_0001;

/// A live run's engine and its policy's memory, encoded for the store
/// (compact and exact: floats keep every bit). Taken between steps, when
/// the engine holds no effect.
pub fn encode(engine: &Engine, policy: &dyn Policy) -> Vec<u8> {
    let snap = SnapshotOf { policy: policy.name(), engine, memory: policy.memory() };
    postcard::to_allocvec(&(SNAPSHOT_FORMAT, snap)).expect("a snapshot encodes")
}

/// A snapshot [`encode`] made, or why it cannot be read.
pub fn decode(bytes: &[u8]) -> Result<Snapshot, String> {
    let (format, rest) =
        postcard::take_from_bytes::<u32>(bytes).map_err(|e| format!("the snapshot cannot be read: {e}"))?;
    if format != SNAPSHOT_FORMAT {
        return Err(format!(
            "the snapshot was written in another layout (format {format:#x}; this allot reads {SNAPSHOT_FORMAT:#x})"
        ));
    }
    postcard::from_bytes(rest).map_err(|e| format!("the snapshot cannot be read: {e}"))
}

/// Every workload the inputs name exists when they are taken (arrivals
/// of the step first): a journal that names another is not this
/// engine's.
fn check_ids(state: &State, inputs: &[Input]) -> Result<(), String> {
    let arriving =
        inputs.iter().filter(|i| matches!(i, Input::Arrive { .. } | Input::Restore { .. } | Input::Adopt { .. }));
    let arrived = state.specs.len() + arriving.count();
    for i in inputs {
        // Exits come before the step's arrivals (`Engine::step`).
        let known = if matches!(i, Input::Exit { .. } | Input::Lost { .. }) { state.specs.len() } else { arrived };
        if let Some(w) = i.workload().filter(|w| w.0 as usize >= known) {
            return Err(format!("an input names workload {} of an engine that has {known}", w.0));
        }
    }
    Ok(())
}

/// L-5: the attempts a restart lost, as the engine's inputs; each must be
/// open in this engine.
fn lost_inputs(engine: &Engine, attempts: &[(String, u32)]) -> Result<Vec<Input>, String> {
    let st = engine.state();
    let by_id: BTreeMap<&str, allot_core::WorkloadId> =
        st.specs.iter().enumerate().map(|(i, s)| (s.id.as_str(), allot_core::WorkloadId(i as u32))).collect();
    attempts
        .iter()
        .map(|(id, attempt)| {
            let Some(&w) = by_id.get(id.as_str()) else {
                return Err(format!("workload {id}, lost at the restart, is not the engine's"));
            };
            if engine.open_attempt(w).is_none_or(|o| o.attempt != *attempt) {
                return Err(format!("workload {id} attempt {attempt}, lost at the restart, was not open"));
            }
            Ok(Input::Lost { workload: w, attempt: *attempt })
        })
        .collect()
}

impl Replayed {
    /// An engine's run is over (a restart, the journal's end): its
    /// workloads' phases are the last known.
    fn ended(&mut self, engine: Engine) {
        let state = engine.into_state();
        self.phases_of(&state);
        self.state = Some(state);
    }

    fn phases_of(&mut self, state: &State) {
        for (spec, run) in state.specs.iter().zip(&state.runs) {
            self.phases.insert(spec.id.clone(), run.phase);
        }
    }
}

/// The replay's side of a step: it records, and feeds nothing back (every
/// exit and report is in the journal, as the server received it).
struct Recorder<'a> {
    out: &'a mut Replayed,
}

impl Carry for Recorder<'_> {
    fn carry(&mut self, engine: &Engine, effects: &[Effect], _: Time, _: &mut Vec<Input>) {
        for e in effects {
            if let Effect::Record(tr) = e {
                self.record(engine, tr);
            }
        }
    }
}

impl Recorder<'_> {
    fn record(&mut self, engine: &Engine, tr: &Transition) {
        let st = engine.state();
        let id = st.spec(tr.workload).id.clone();
        let key = (id.clone(), tr.attempt);
        let held = |alloc: &allot_core::Allocation| -> Vec<(String, Vec<u32>)> {
            alloc
                .parts
                .iter()
                .map(|(n, mask)| (st.cluster.node(*n).name.clone(), allot_core::Allocation::indices(*mask).collect()))
                .collect()
        };
        match (&tr.ended, tr.change) {
            (Some(ended), _) => {
                let a = self.out.attempts.entry(key).or_insert_with(|| ReplayedAttempt {
                    nodes: held(&ended.alloc),
                    start: ended.started,
                    signal: None,
                    end: None,
                    outcome: None,
                    kept_s: None,
                });
                a.end = Some(tr.t);
                a.outcome = Some(ended.outcome);
                a.kept_s = Some(ended.kept_s);
            }
            (None, allot_core::engine::Change::Start) => {
                let alloc = st.run(tr.workload).alloc.as_ref().expect("a started workload holds GPUs");
                let a = ReplayedAttempt {
                    nodes: held(alloc),
                    start: tr.t,
                    signal: None,
                    end: None,
                    outcome: None,
                    kept_s: None,
                };
                self.out.attempts.insert(key, a);
            }
            (None, allot_core::engine::Change::Preempt | allot_core::engine::Change::Abort) => {
                if let Some(a) = self.out.attempts.get_mut(&key) {
                    a.signal.get_or_insert(tr.t);
                }
            }
            _ => {}
        }
        self.out.phases.insert(id.clone(), tr.phase);
        if tr.change != allot_core::engine::Change::Abort {
            self.out.log.push(LogEvent::of(st, tr));
        }
    }
}

#[cfg(test)]
mod tests {
    use allot_core::PolicyKind;
    use allot_core::engine::{Engine, SnapshotOf};
    use allot_testkit::StateBuilder;

    use super::{SNAPSHOT_FORMAT, decode, encode};

    /// A snapshot of another layout (here: one written before the layout
    /// tag) is refused by name, never read shifted; its own reads back.
    #[test]
    fn a_snapshot_of_another_layout_is_refused() {
        let state = StateBuilder::new().pool("p", "H100", 1, 8).account("org/a").build();
        let engine = Engine::new(state);
        let policy = PolicyKind::Allot.build();
        let back = decode(&encode(&engine, &*policy)).unwrap();
        assert_eq!(back.policy, policy.name());
        let untagged =
            postcard::to_allocvec(&SnapshotOf { policy: policy.name(), engine: &engine, memory: policy.memory() })
                .unwrap();
        let err = decode(&untagged).unwrap_err();
        assert!(err.contains("another layout") && err.contains(&format!("{SNAPSHOT_FORMAT:#x}")), "{err}");
        let mut newer = encode(&engine, &*policy);
        newer[0] ^= 1;
        assert!(decode(&newer).unwrap_err().contains("another layout"));
    }
}
