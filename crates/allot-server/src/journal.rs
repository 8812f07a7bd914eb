//! The journal: every step the engine took live, written in the same
//! transaction as the step's other writes (`scheduler::journal`), and its
//! replay. [`replay`] feeds a store's journal to the engine again
//! (`allot_sim::replay`); [`differences`] checks that the replay made what
//! the store holds: every attempt with its nodes and GPU indices, start,
//! signal, end, outcome and kept progress, and every workload's phase.

use std::collections::BTreeMap;

use allot_core::engine::Outcome;
use allot_core::{Phase, PolicyKind, Time};
use allot_sim::replay::{ReplayError, Replayed, ReplayedAttempt, Replayer};

use crate::store::{Store, StoreError};

/// Why a store's journal could not be replayed.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// The replay made something else than the store holds.
    #[error("the replay differs from the store in {count} places (the first 20 are listed above)")]
    Differs { count: usize },
}

/// Replays `store`'s journal: each engine on the fleet, tree and contract
/// its start recorded, under the policy it recorded, or under `policy`
/// when given. A compacted journal is replayed from its oldest snapshot.
pub async fn replay(store: &Store, policy: Option<PolicyKind>) -> Result<Replayed, JournalError> {
    let mut policy_for = |name: &str| -> Result<Box<dyn allot_core::Policy>, String> {
        let kind = match policy {
            Some(k) => k,
            None => PolicyKind::parse(name).ok_or_else(|| format!("the journal names an unknown policy {name:?}"))?,
        };
        Ok(kind.build())
    };
    let (mut replayer, after, _) = replayer(store, &mut policy_for, From::Oldest).await?;
    for (seq, json) in store.journal(after).await? {
        replayer.entry(seq, &json)?;
    }
    Ok(replayer.finish())
}

/// Which snapshot a replay starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum From {
    /// The oldest kept, once the journal was compacted (else the
    /// beginning): a check of all that is left.
    Oldest,
    /// The newest (recovery).
    Newest,
}

/// A replay of `store`'s journal ready for its entries: from the beginning
/// or from a snapshot; the journal seq after which its entries follow,
/// and the policy the snapshot names, if it starts from one.
pub async fn replayer<'p, 'a>(
    store: &Store,
    policy_for: &'p mut allot_sim::replay::PolicyFor<'a>,
    from: From,
) -> Result<(Replayer<'p, 'a>, i64, Option<String>), JournalError> {
    let compacted = store.journal_first().await?.is_none_or(|first| first > 1);
    let snapshot = match from {
        From::Newest => store.snapshot(false).await?,
        From::Oldest if compacted => store.snapshot(true).await?,
        From::Oldest => None,
    };
    let Some((after, t, data)) = snapshot else { return Ok((Replayer::new(policy_for), 0, None)) };
    let snap = allot_sim::replay::decode(&data).map_err(|message| ReplayError::Entry { seq: after, message })?;
    let t = time(t);
    let st = snap.engine.state();
    let mut open = BTreeMap::new();
    for &w in &st.running {
        let id = st.spec(w).id.clone();
        let attempt = st.run(w).attempts;
        let Ok(seq) = id.parse::<i64>() else { continue };
        let Some(a) = store.attempts_of(seq).await?.into_iter().find(|a| a.attempt == i64::from(attempt)) else {
            continue;
        };
        // As it was at the snapshot: open, signalled or not yet.
        let made = attempt_of(&a);
        let signal = made.signal.filter(|&s| s <= t);
        open.insert((id, attempt), ReplayedAttempt { signal, end: None, outcome: None, kept_s: None, ..made });
    }
    let name = snap.policy.clone();
    Ok((Replayer::from_snapshot(snap, t, open, policy_for)?, after, Some(name)))
}

/// A stored attempt as a replay makes it.
fn attempt_of(a: &crate::store::AttemptRow) -> ReplayedAttempt {
    let nodes: Vec<crate::views::NodeGpusView> = serde_json::from_str(&a.alloc).unwrap_or_default();
    ReplayedAttempt {
        nodes: nodes.into_iter().map(|n| (n.node, n.gpus)).collect(),
        start: time(a.start_t),
        signal: a.signal_t.map(time),
        end: a.end_t.map(time),
        outcome: a.outcome.as_deref().and_then(Outcome::parse),
        kept_s: a.kept_s.map(time),
    }
}

/// Where the replay and the store disagree, in words (empty: the replay
/// equals the store).
pub async fn differences(store: &Store, replayed: &Replayed) -> Result<Vec<String>, StoreError> {
    let mut out = Vec::new();
    let mut stored: BTreeMap<(String, u32), ReplayedAttempt> = BTreeMap::new();
    for a in store.all_attempts().await? {
        stored.insert((a.workload.to_string(), u32::try_from(a.attempt).unwrap_or(u32::MAX)), attempt_of(&a));
    }
    for (key, s) in &stored {
        match replayed.attempts.get(key) {
            // Started by the snapshot the replay started from, and not
            // open in it: it ended before.
            None if replayed.since.is_some_and(|t| s.start <= t) => {}
            None => out.push(format!("workload {} attempt {}: in the store, not made by the replay", key.0, key.1)),
            Some(r) if r != s => {
                out.push(format!("workload {} attempt {}: the store has {s:?}, the replay made {r:?}", key.0, key.1))
            }
            Some(_) => {}
        }
    }
    for key in replayed.attempts.keys().filter(|k| !stored.contains_key(*k)) {
        out.push(format!("workload {} attempt {}: made by the replay, not in the store", key.0, key.1));
    }
    let tried: std::collections::BTreeSet<&str> = stored.keys().map(|(id, _)| id.as_str()).collect();
    let workloads = store.all_workloads().await?;
    let rows: std::collections::BTreeSet<String> = workloads.iter().map(|w| w.seq.to_string()).collect();
    for id in replayed.phases.keys().filter(|id| !rows.contains(*id)) {
        out.push(format!("workload {id}: made by the replay, not in the store"));
    }
    for w in workloads {
        let id = w.seq.to_string();
        let phase = crate::states::parse_phase(&w.state);
        let made: Option<Phase> = replayed.phases.get(&id).copied();
        // Never the engine's (L-4): committed by the API (its 201 answered)
        // but not yet handed to the engine when the server stopped
        // (recovery queues it at the next start), or refused at the door
        // (a Kubernetes Job its checks refused; a stored
        // row recovery's validator no longer accepts).
        let never_taken =
            made.is_none() && matches!(phase, Some(Phase::Pending | Phase::Rejected)) && !tried.contains(id.as_str());
        if phase != made && !never_taken {
            out.push(format!(
                "workload {id}: the store has it {}, the replay {}",
                w.state,
                made.map_or("never saw it", Phase::as_str)
            ));
        }
    }
    Ok(out)
}

fn time(t: i64) -> Time {
    t.max(0) as Time
}
