//! Rebuilding the scheduler at startup from the config and the store.
//!
//! 1. Accounts: the stored tree (ACC-1; the store is the truth). The first
//!    start of a store without one seeds it from the config's
//!    `[[accounts]]` and the budget/share overrides of older versions.
//! 2. Nodes: operator events replayed through the engine in order (a
//!    drained node stays out of service; a failed one stays down until
//!    repaired).
//! 3. Attempts recorded as `starting` or `running`, not signalled, on a
//!    cluster that keeps them running through a restart (Kubernetes), on
//!    nodes in service, of workloads the config still accepts, are offered
//!    to their executor, which adopts them (K8S-10): they keep their GPUs
//!    and attempt number, and are charged from their recorded start.
//!    The other attempts recorded as `starting`, `running` or `stopping`
//!    belong to the previous server process. Their processes, if any survived, are found
//!    by their tag, signalled, given `grace`, then killed; only once none is
//!    left are the attempts closed (at the recovery time, as `lost`, or
//!    `preempted` / `cancelled` when they had been signalled) and their
//!    workloads requeued. So no workload is ever run twice at once, and the
//!    GPU-time the survivors held up to now is charged.
//! 4. The ledger is replayed from every recorded attempt interval, so the
//!    budget ledger equals the recorded allocation time.
//! 5. Pending workloads are resubmitted in (submit time, id) order with their
//!    remaining work (expected duration − progress kept by past attempts).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use allot_core::engine::{Close, Entry, Input, Later, OpenAttempt, Outcome, Past, Start, closed_at_restart};
use allot_core::{Engine, NodeEvent, NodeEventKind, Phase, State, Time, WorkloadSpec};
use allot_trace::workload::{RawWorkload, Validator};

use allot_core::{AccountBook, AccountEdit, AccountField};

use crate::accounts::{restore_book, stored_rows};
use crate::executor::{Adoption, AttemptKey, Executor, Survivor};
use crate::scheduler::{Adopted, Live};
use crate::states::AttemptState;
use crate::store::{AttemptRow, Op, Store, StoreError, WorkloadRow};

/// Why recovery failed.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the stored account tree does not fit the config: {0}")]
    Accounts(String),
    #[error("the store does not hold what its journal says: {0}")]
    Journal(String),
}

/// The state and workloads to hand to the scheduler.
pub struct Recovered {
    /// The engine with the cluster, accounts, node health and ledger (no
    /// workloads yet).
    pub engine: Engine,
    /// The live account tree (ACC-1).
    pub book: AccountBook,
    /// Live workloads with their retries and past.
    pub workloads: Vec<(WorkloadSpec, Live, u32, Past)>,
    /// Workloads whose running attempt was adopted (K8S-10).
    pub adopted: Vec<Adopted>,
    /// Survivors that were found and stopped (for logs and tests).
    pub closed_attempts: usize,
    /// Every recorded workload and attempt, as read once after the
    /// survivors were closed (the metrics are restored from them).
    pub history: (Vec<WorkloadRow>, Vec<AttemptRow>),
    /// Why each node out of service was taken out, as its operator said.
    pub node_reasons: HashMap<allot_core::NodeId, String>,
    /// Recovered by replaying the journal (L-5): the engine holds every
    /// workload of its run already, and this says how to carry on.
    pub carried: Option<Carried>,
}

/// A live run carried on after a restart: the engine the journal's replay
/// left (L-5), with what the scheduler needs besides.
pub struct Carried {
    /// The policy as the replay left it (a policy keeps its view of the
    /// queue between passes).
    pub policy: Box<dyn allot_core::Policy>,
    /// Each of the engine's workloads, in id order: what its processes run.
    pub lives: Vec<Live>,
    /// What the engine takes at `end`: the open attempts its executors did
    /// not adopt, whose processes were stopped ([`Input::Lost`]), then the
    /// config's contract where it differs from the run's
    /// ([`Input::Contract`], CFG-1: a config edited while the server was
    /// down applies as a reload at the start).
    pub inputs: Vec<Input>,
    pub end: Time,
    pub adopted: usize,
}

pub async fn recover(
    cfg: &allot_trace::config::Config,
    store: &Store,
    exec: &dyn Executor,
    run: &crate::identity::RunPolicy,
    policy: &mut dyn allot_core::Policy,
    now: Time,
) -> Result<Recovered, RecoveryError> {
    let book = account_book(cfg, store, now).await?;
    match replayed(cfg, store, &book, policy.name()).await? {
        Ok((engine, policy)) => return carry_on(cfg, store, exec, run, engine, policy, book, now).await,
        Err(why) => tracing::info!(%why, "the engine is rebuilt from the store's rows (a new start in the journal)"),
    }
    let mut engine = Engine::new(State::new(cfg.cluster.clone(), book.tree().clone(), cfg.contract));
    // The journal records this engine's start and every input recovery
    // feeds it, with the writes recovery commits at its end.
    let start = Entry::Start(Box::new(Start {
        policy: policy.name().into(),
        cluster: cfg.cluster.clone(),
        accounts: book.tree().clone(),
        contract: cfg.contract,
    }));
    let mut journal = vec![crate::scheduler::journal(now, &start)];
    let mut feed = |engine: &mut Engine, policy: &mut dyn allot_core::Policy, t: Time, input: Input| {
        journal.push(crate::scheduler::journal(t, &Entry::Step { t, close: Close::Open, inputs: vec![input.clone()] }));
        engine.step(policy, t, vec![input], Close::Open, &mut Later);
    };
    let node_reasons = replay_node_events(&mut engine, policy, store, &mut feed).await?;

    let live_rows = store.live_workloads().await?;
    // The attempts of every workload holding GPUs, read once for both
    // the adoption and the closing of what is not adopted.
    let mut holding = BTreeMap::new();
    for row in live_rows.iter().filter(|r| r.phase().is_some_and(Phase::holds_gpus)) {
        holding.insert(row.seq, store.attempts_of(row.seq).await?);
    }
    let mut offered = adoptable(engine.state(), &live_rows, &holding);
    let taken: BTreeSet<AttemptKey> = if offered.is_empty() {
        BTreeSet::new()
    } else {
        exec.adopt(offered.iter().map(|(key, _, nodes, _)| Adoption { key: *key, nodes: nodes.clone() }).collect())
            .into_iter()
            .collect()
    };
    offered.retain(|(key, _, _, _)| taken.contains(key));
    let adopting: BTreeMap<i64, (AttemptKey, allot_core::Allocation, Time)> =
        offered.into_iter().map(|(key, alloc, _, start)| (key.seq, (key, alloc, start))).collect();
    let closed = close_open_attempts(store, exec, &live_rows, holding, &adopting, cfg.contract.grace, now).await?;
    let all_workloads = store.all_workloads().await?;
    let all_attempts = store.all_attempts().await?;
    feed(&mut engine, policy, now, Input::Usage(usage_spans(&all_workloads, &all_attempts, &taken)));

    let mut attempts: BTreeMap<i64, Vec<&AttemptRow>> = BTreeMap::new();
    for a in &all_attempts {
        attempts.entry(a.workload).or_default().push(a);
    }
    let states: BTreeMap<i64, Phase> =
        all_workloads.iter().filter_map(|w| Some((w.seq, crate::states::parse_phase(&w.state)?))).collect();
    let mut out = Vec::new();
    let mut adopted = Vec::new();
    let mut ops = Vec::new();
    for row in store.live_workloads().await? {
        match spec_of(engine.state(), &row) {
            Ok(spec) => {
                let spec = with_conditions(spec, &row);
                let mut list = attempts.remove(&row.seq).unwrap_or_default();
                let running = adopting.get(&row.seq);
                if let Some((key, _, _)) = running {
                    list.retain(|a| a.attempt != key.attempt);
                }
                let mut past = past(&list);
                past.failures = u32::try_from(row.failures.max(0)).unwrap_or(u32::MAX);
                past.cancel = row.cancel_requested;
                let live = live_of(&row, run, &states);
                let retries = u32::try_from(row.retries.max(0)).unwrap_or(u32::MAX);
                match running {
                    Some(&(_, ref alloc, started)) => {
                        tracing::info!(
                            workload = row.seq,
                            attempt = past.attempts + 1,
                            "K8S-10: adopted, running since {started}"
                        );
                        adopted.push(Adopted { spec, live, retries, past, alloc: alloc.clone(), started });
                    }
                    None => out.push((spec, live, retries, past)),
                }
            }
            Err(why) => {
                tracing::warn!(workload = row.seq, %why, "rejected at recovery");
                ops.push(Op::WorkloadState {
                    seq: row.seq,
                    state: Phase::Rejected,
                    reason: why,
                    end_t: Some(now as i64),
                });
            }
        }
    }
    journal.extend(ops);
    store.apply(&journal).await?;
    engine.take_effects();
    Ok(Recovered {
        engine,
        book,
        workloads: out,
        adopted,
        closed_attempts: closed,
        history: (all_workloads, all_attempts),
        node_reasons,
        carried: None,
    })
}

/// The engine and policy as the live run left them, by the replay of the
/// store's journal (L-5), when the replay makes exactly what the store
/// holds and the run's fleet, budget periods, policy and account tree are
/// this start's; else why not (a first start, a store written before the
/// journal, a changed fleet or budget period: recovery then rebuilds from
/// the rows).
async fn replayed(
    cfg: &allot_trace::config::Config,
    store: &Store,
    book: &AccountBook,
    policy: &str,
) -> Result<Result<(Engine, Box<dyn allot_core::Policy>), String>, StoreError> {
    let Some(kind) = allot_core::PolicyKind::parse(policy) else {
        return Ok(Err(format!("policy {policy} cannot be replayed")));
    };
    let mut policy_for = |_: &str| -> Result<Box<dyn allot_core::Policy>, String> { Ok(kind.build()) };
    // From the newest snapshot, if there is one: only what followed it.
    let (mut replayer, after, mut last_policy) =
        match crate::journal::replayer(store, &mut policy_for, crate::journal::From::Newest).await {
            Ok(r) => r,
            Err(crate::journal::JournalError::Store(e)) => return Err(e),
            Err(e) => return Ok(Err(format!("the newest snapshot cannot be restored: {e}"))),
        };
    let entries = store.journal(after).await?;
    if entries.is_empty() && last_policy.is_none() {
        return Ok(Err("the store has no journal yet".into()));
    }
    for (seq, json) in &entries {
        if let Ok(Entry::Start(s)) = serde_json::from_str::<Entry>(json) {
            last_policy = Some(s.policy);
        }
        if let Err(e) = replayer.entry(*seq, json) {
            return Ok(Err(format!("the journal does not replay: {e}")));
        }
    }
    let (made, run) = replayer.take_over();
    let Some((engine, replayed_policy)) = run else { return Ok(Err("the journal has no start".into())) };
    let st = engine.state();
    let why = if last_policy.as_deref() != Some(policy) {
        format!("the run's policy was {}, this start's is {policy}", last_policy.unwrap_or_default())
    } else if st.cluster != cfg.cluster {
        "the fleet's nodes differ from the run's".into()
    } else if let Some(key) = st.contract.restart_only(&cfg.contract).first() {
        // Any other change of the contract is carried on as a reload
        // (CFG-1, `carry_on`).
        format!("the contract's {key} differs from the run's (the ledger is charged again under the new periods)")
    } else if st.accounts != *book.tree() {
        "the stored account tree differs from the run's".into()
    } else {
        let differ = crate::journal::differences(store, &made).await?;
        if differ.is_empty() {
            return Ok(Ok((engine, replayed_policy)));
        }
        for d in differ.iter().take(20) {
            tracing::error!(difference = %d, "the journal's replay differs from the store");
        }
        format!("the journal's replay differs from the store in {} places", differ.len())
    };
    Ok(Err(why))
}

/// L-5: carries on the replayed run. The attempts it left holding GPUs are
/// offered to their executors (K8S-10: a running attempt, no cancel asked,
/// on a cluster that keeps it through a restart); the others' processes,
/// if any survived, are stopped, and they are [`Input::Lost`] then.
/// Workloads the API committed but the engine never took (L-4) are queued.
#[allow(clippy::too_many_arguments)]
async fn carry_on(
    cfg: &allot_trace::config::Config,
    store: &Store,
    exec: &dyn Executor,
    run: &crate::identity::RunPolicy,
    engine: Engine,
    policy: Box<dyn allot_core::Policy>,
    book: AccountBook,
    now: Time,
) -> Result<Recovered, RecoveryError> {
    let node_reasons = node_reasons(&engine, store).await?;
    let all_workloads = store.all_workloads().await?;
    let states: BTreeMap<i64, Phase> =
        all_workloads.iter().filter_map(|w| Some((w.seq, crate::states::parse_phase(&w.state)?))).collect();
    let rows: BTreeMap<i64, &WorkloadRow> = all_workloads.iter().map(|w| (w.seq, w)).collect();
    let st = engine.state();
    let mut lives = Vec::with_capacity(st.specs.len());
    for spec in &st.specs {
        let row = spec.id.parse::<i64>().ok().and_then(|seq| rows.get(&seq));
        let Some(row) = row else {
            // The replay was checked against the store (`differences`).
            return Err(RecoveryError::Journal(format!("the journal's workload {} has no row in the store", spec.id)));
        };
        lives.push(live_of(row, run, &states));
    }
    // The open attempts: offered, else stopped and lost.
    let open: Vec<(allot_core::WorkloadId, u32)> = st.running.iter().map(|&w| (w, st.run(w).attempts)).collect();
    let key =
        |w: allot_core::WorkloadId, attempt: u32| AttemptKey { seq: lives[w.0 as usize].seq, attempt: attempt.into() };
    let offered: Vec<Adoption> = open
        .iter()
        .filter(|&&(w, _)| st.run(w).phase == Phase::Running && !engine.cancel_requested(w))
        .map(|&(w, attempt)| {
            let alloc = st.run(w).alloc.as_ref().expect("a running workload holds GPUs");
            let nodes = alloc.parts.iter().map(|(n, _)| st.cluster.node(*n).name.clone()).collect();
            Adoption { key: key(w, attempt), nodes }
        })
        .collect();
    let taken: BTreeSet<AttemptKey> =
        if offered.is_empty() { BTreeSet::new() } else { exec.adopt(offered).into_iter().collect() };
    let lost: Vec<(allot_core::WorkloadId, u32)> =
        open.iter().copied().filter(|&(w, a)| !taken.contains(&key(w, a))).collect();
    let mut end = now;
    if !lost.is_empty() {
        let mut survivors = Vec::new();
        for &(w, attempt) in &lost {
            let k = key(w, attempt);
            let pid = store.attempts_of(k.seq).await?.into_iter().find(|a| a.attempt == k.attempt).and_then(|a| a.pid);
            survivors.push(Survivor { key: k, pid: pid.map(|p| p as u32) });
        }
        // They end once stopped: `now` plus the time that took (the
        // engine's time, not read from the clock again).
        let stopping = std::time::Instant::now();
        exec.terminate_survivors(survivors, Duration::from_secs(cfg.contract.grace.max(1))).await;
        end = now + stopping.elapsed().as_secs();
    }
    for k in &taken {
        tracing::info!(workload = k.seq, attempt = k.attempt, "K8S-10: adopted");
    }
    // L-4: committed, never taken.
    let known: BTreeSet<&str> = st.specs.iter().map(|s| s.id.as_str()).collect();
    let mut out = Vec::new();
    let mut ops = Vec::new();
    for row in store.live_workloads().await? {
        if known.contains(row.seq.to_string().as_str()) {
            continue;
        }
        match spec_of(st, &row) {
            Ok(spec) => {
                let spec = with_conditions(spec, &row);
                let mut past = past(&[]);
                past.cancel = row.cancel_requested;
                let retries = u32::try_from(row.retries.max(0)).unwrap_or(u32::MAX);
                out.push((spec, live_of(&row, run, &states), retries, past));
            }
            Err(why) => ops.push(Op::WorkloadState {
                seq: row.seq,
                state: Phase::Rejected,
                reason: why,
                end_t: Some(now as i64),
            }),
        }
    }
    store.apply(&ops).await?;
    let all_attempts = store.all_attempts().await?;
    tracing::info!(
        workloads = st.specs.len(),
        adopted = taken.len(),
        lost = lost.len(),
        "L-5: the live run carried on from its journal's replay"
    );
    let mut inputs: Vec<Input> = lost.iter().map(|&(workload, attempt)| Input::Lost { workload, attempt }).collect();
    if engine.state().contract != cfg.contract {
        tracing::info!(
            rule = "CFG-1",
            "the config's contract differs from the run's: it applies from this start, as a reload"
        );
        inputs.push(Input::Contract(Box::new(cfg.contract)));
    }
    Ok(Recovered {
        closed_attempts: lost.len(),
        carried: Some(Carried { policy, lives, inputs, end, adopted: taken.len() }),
        engine,
        book,
        workloads: out,
        adopted: Vec::new(),
        history: (all_workloads, all_attempts),
        node_reasons,
    })
}

/// Why each node out of service was taken out, as its operator said last.
async fn node_reasons(engine: &Engine, store: &Store) -> Result<HashMap<allot_core::NodeId, String>, StoreError> {
    let mut reasons = HashMap::new();
    for e in store.node_events().await? {
        let (Some(n), Some(kind)) = (engine.state().cluster.node_by_name(&e.node), NodeEventKind::parse(&e.kind))
        else {
            continue;
        };
        crate::scheduler::note_node_reason(&mut reasons, n, kind, e.reason);
    }
    Ok(reasons)
}

/// Its conditions as stored (HOLD-1, DEP-1 by the scheduler, ARR-1).
fn with_conditions(mut spec: WorkloadSpec, row: &WorkloadRow) -> WorkloadSpec {
    let c = &row.conditions;
    spec.hold = c.held;
    spec.array = c.array_id.zip(c.array_index).map(|(id, index)| allot_core::ArrayPart {
        array: id.max(0) as u64,
        index: index.max(0) as u32,
        count: c.array_count.unwrap_or(0).max(0) as u32,
        limit: c.array_limit.map(|l| l.max(1) as u32),
    });
    spec
}

/// What a stored workload's processes run.
fn live_of(row: &WorkloadRow, run: &crate::identity::RunPolicy, states: &BTreeMap<i64, Phase>) -> Live {
    let after = crate::api::conditions::stored_dependencies(row.conditions.depends_on.as_deref(), &|seq| {
        states.get(&seq).copied()
    });
    Live {
        seq: row.seq,
        command: serde_json::from_str(&row.command).unwrap_or_default(),
        env: serde_json::from_str(&row.env).unwrap_or_default(),
        workdir: row.workdir.as_ref().map(std::path::PathBuf::from),
        run_as: run.stored(row.run_as.as_deref()),
        after,
    }
}

/// The live account tree: the store's, or, at the first start of a store
/// without one, the config's with the overrides older versions stored
/// (written to the store at once).
async fn account_book(
    cfg: &allot_trace::config::Config,
    store: &Store,
    now: Time,
) -> Result<AccountBook, RecoveryError> {
    let rows = store.accounts().await?;
    if !rows.is_empty() {
        let book = restore_book(&cfg.accounts, &rows, &cfg.cluster).map_err(RecoveryError::Accounts)?;
        let differ: Vec<&str> = {
            let have: BTreeMap<&str, &allot_core::AccountSpec> = book.specs().map(|s| (s.path.as_str(), s)).collect();
            let mut d: Vec<&str> = cfg
                .accounts
                .declared()
                .iter()
                .filter(|s| have.get(s.path.as_str()) != Some(s))
                .map(|s| s.path.as_str())
                .collect();
            let seeded: std::collections::BTreeSet<&str> =
                cfg.accounts.declared().iter().map(|s| s.path.as_str()).collect();
            d.extend(have.keys().filter(|p| !seeded.contains(*p)));
            d
        };
        if !differ.is_empty() {
            tracing::warn!(
                accounts = %differ.join(", "),
                "the config's [[accounts]] differ from the store's tree, which is the truth (ACC-1): \
                 change accounts with `allot accounts`, or apply a file with `allot accounts import`"
            );
        }
        return Ok(book);
    }
    let mut book = AccountBook::seed(&cfg.accounts);
    for (path, budget, share) in store.legacy_overrides().await? {
        if book.spec(&path).is_none() {
            let spec = allot_core::AccountSpec { path: path.clone(), ..Default::default() };
            book = book.apply(&AccountEdit::Create(spec)).map_err(|e| RecoveryError::Accounts(e.to_string()))?;
        }
        for (field, value) in [(AccountField::Budget, budget), (AccountField::Share, share)] {
            if value.is_some() {
                let edit = AccountEdit::Set { path: path.clone(), field, value };
                book = book.apply(&edit).map_err(|e| RecoveryError::Accounts(e.to_string()))?;
            }
        }
    }
    store.save_accounts(&stored_rows(&book, &cfg.cluster), &[], &[], "config", now as i64).await?;
    tracing::info!(accounts = book.specs().count(), "account tree seeded from the config (ACC-1)");
    Ok(book)
}

/// The recorded node events, through the engine (no workload holds GPUs
/// yet, so a drain is complete at once; the engine remembers the nodes a
/// cluster outage took out, FLEET-3); returns why each node out of service
/// was taken out, where that was said.
async fn replay_node_events(
    engine: &mut Engine,
    policy: &mut dyn allot_core::Policy,
    store: &Store,
    feed: &mut impl FnMut(&mut Engine, &mut dyn allot_core::Policy, Time, Input),
) -> Result<HashMap<allot_core::NodeId, String>, StoreError> {
    let mut reasons = HashMap::new();
    for e in store.node_events().await? {
        let (Some(n), Some(kind)) = (engine.state().cluster.node_by_name(&e.node), NodeEventKind::parse(&e.kind))
        else {
            continue;
        };
        let t = e.t.max(0) as Time;
        feed(engine, policy, t, Input::Node(NodeEvent { t, node: n, kind }));
        crate::scheduler::note_node_reason(&mut reasons, n, kind, e.reason);
    }
    Ok(reasons)
}

/// The attempts an executor may adopt (K8S-10): of a workload holding GPUs
/// with no cancel asked, whose spec the config still accepts, recorded as
/// `starting` or `running` and not signalled, as the workload's latest
/// attempt, on nodes in service whose GPUs no other such attempt holds.
/// Each with its allocation, its nodes' names and its start.
fn adoptable(
    state: &State,
    rows: &[WorkloadRow],
    attempts: &BTreeMap<i64, Vec<AttemptRow>>,
) -> Vec<(AttemptKey, allot_core::Allocation, Vec<String>, Time)> {
    let mut out = Vec::new();
    let mut held: BTreeMap<allot_core::NodeId, u64> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.phase().is_some_and(Phase::holds_gpus) && !r.cancel_requested) {
        if spec_of(state, row).is_err() {
            continue;
        }
        let Some(list) = attempts.get(&row.seq) else { continue };
        let Some(a) = list.iter().find(|a| a.attempt_state() != Some(AttemptState::Ended)) else { continue };
        let open = matches!(a.attempt_state(), Some(AttemptState::Starting | AttemptState::Running));
        if !open || a.signal_t.is_some() || a.attempt != list.len() as i64 {
            continue;
        }
        let Ok(parts) = serde_json::from_str::<Vec<crate::views::NodeGpusView>>(&a.alloc) else { continue };
        let mut alloc = allot_core::Allocation::default();
        for p in &parts {
            let Some(n) = state.cluster.node_by_name(&p.node) else { break };
            let mask = p.gpus.iter().filter(|&&i| i < 64).fold(0u64, |m, &i| m | (1 << i));
            alloc.parts.push((n, mask));
        }
        let whole = alloc.parts.len() == parts.len()
            && alloc.gpus() as usize == parts.iter().map(|p| p.gpus.len()).sum::<usize>();
        let free = alloc.parts.iter().all(|(n, m)| held.get(n).copied().unwrap_or(0) & m == 0);
        if !whole || alloc.gpus() as i64 != row.gpus || !free || !state.can_hold(&alloc) {
            tracing::warn!(workload = row.seq, attempt = a.attempt, allocation = %a.alloc, "K8S-10: not adoptable: its allocation is not on free GPUs of nodes in service");
            continue;
        }
        for (n, m) in &alloc.parts {
            *held.entry(*n).or_default() |= m;
        }
        let key = AttemptKey { seq: row.seq, attempt: a.attempt };
        out.push((key, alloc, parts.into_iter().map(|p| p.node).collect(), a.start_t.max(0) as Time));
    }
    out
}

/// Stops whatever survived of the previous server's attempts, then closes
/// them and requeues (or cancels) their workloads.
async fn close_open_attempts(
    store: &Store,
    exec: &dyn Executor,
    rows: &[WorkloadRow],
    mut attempts: BTreeMap<i64, Vec<AttemptRow>>,
    adopted: &BTreeMap<i64, (AttemptKey, allot_core::Allocation, Time)>,
    grace: Time,
    now: Time,
) -> Result<usize, StoreError> {
    let mut open = Vec::new();
    let mut ops = Vec::new();
    for row in rows.iter().filter(|r| r.phase().is_some_and(Phase::holds_gpus) && !adopted.contains_key(&r.seq)) {
        let list = attempts.remove(&row.seq).unwrap_or_default();
        let kept: i64 = list.iter().filter_map(|a| a.kept_s).sum();
        let reports = list.iter().any(|a| a.checkpoints > 0);
        match list.into_iter().find(|a| a.attempt_state() != Some(AttemptState::Ended)) {
            Some(a) => open.push((row.clone(), a, kept, reports)),
            None => ops.push(Op::WorkloadState {
                seq: row.seq,
                state: Phase::Pending,
                reason: "requeued at server restart".into(),
                end_t: None,
            }),
        }
    }
    if open.is_empty() {
        store.apply(&ops).await?;
        return Ok(0);
    }
    let survivors = open
        .iter()
        .map(|(_, a, _, _)| Survivor {
            key: AttemptKey { seq: a.workload, attempt: a.attempt },
            pid: a.pid.map(|p| p as u32),
        })
        .collect();
    exec.terminate_survivors(survivors, Duration::from_secs(grace.max(1))).await;
    let end = crate::clock::now().max(now);
    // The journal says which attempts the restart lost and when, with the
    // writes that close them: a replay closes them as its engine would.
    let lost =
        open.iter().map(|(_, a, _, _)| (a.workload.to_string(), u32::try_from(a.attempt).unwrap_or(0))).collect();
    ops.push(crate::scheduler::journal(end, &Entry::Lost { end, attempts: lost }));
    for (row, a, kept_before, reports) in &open {
        let closed = closed_at_restart(
            &OpenAttempt {
                attempt: u32::try_from(a.attempt).unwrap_or(0),
                started: a.start_t.max(0) as Time,
                signalled: a.signal_t.map(|t| t.max(0) as Time),
                remaining: (row.work_s - kept_before).max(1) as Time,
                checkpoint_s: row.checkpoint_s.max(0) as Time,
                reports: *reports,
                reported: a.checkpoint_saved_s.filter(|_| a.checkpoints > 0).map(|s| s.max(0) as Time),
                cancel: row.cancel_requested,
            },
            end,
        );
        ops.push(Op::AttemptEnd {
            seq: row.seq,
            attempt: a.attempt,
            end_t: end as i64,
            outcome: closed.outcome.as_str().into(),
            exit_code: None,
            kept_s: closed.kept_s as i64,
        });
        let end_t = closed.phase.is_terminal().then_some(end as i64);
        ops.push(Op::WorkloadState { seq: row.seq, state: closed.phase, reason: closed.reason.to_string(), end_t });
    }
    store.apply(&ops).await?;
    tracing::warn!(attempts = open.len(), "closed attempts of the previous server and requeued their workloads");
    Ok(open.len())
}

/// Charges the ledger (accounts and their users) with every recorded
/// attempt interval, in time order; an adopted attempt (K8S-10) from its
/// start on, as it still holds its GPUs.
/// The recorded attempts as the ledger counts them: each from its start to
/// its end, an adopted one (still holding GPUs) to now; an attempt left
/// open and not adopted was closed before this is read.
fn usage_spans(
    workloads: &[WorkloadRow],
    attempts: &[AttemptRow],
    adopted: &BTreeSet<AttemptKey>,
) -> Vec<allot_core::engine::UsageSpan> {
    let owners: BTreeMap<i64, (&str, &str)> =
        workloads.iter().map(|w| (w.seq, (w.account.as_str(), w.submitter.as_str()))).collect();
    attempts
        .iter()
        .filter_map(|a| {
            let &(account, user) = owners.get(&a.workload)?;
            let running = adopted.contains(&AttemptKey { seq: a.workload, attempt: a.attempt });
            if a.end_t.is_none() && !running {
                return None;
            }
            Some(allot_core::engine::UsageSpan {
                account: account.to_string(),
                user: user.to_string(),
                start: a.start_t.max(0) as Time,
                end: a.end_t.map(|e| e.max(0) as Time),
                gpus: u32::try_from(a.gpus.max(0)).unwrap_or(u32::MAX),
                weight: a.weight,
            })
        })
        .collect()
}

fn past(list: &[&AttemptRow]) -> Past {
    let mut f = Past { attempts: list.len() as u32, ..Default::default() };
    for a in list {
        f.kept_s += a.kept_s.unwrap_or(0).max(0) as Time;
        f.first_start = Some(f.first_start.map_or(a.start_t as Time, |s: Time| s.min(a.start_t as Time)));
        if a.ended_as().is_some_and(Outcome::interrupted) {
            f.preemptions += 1;
        }
        f.reports |= a.checkpoints > 0;
        if let Some(end) = a.end_t {
            let held = (end - a.start_t).max(0) as u64 * a.gpus as u64;
            f.lost_gpu_s += held.saturating_sub(a.kept_s.unwrap_or(0).max(0) as u64 * a.gpus as u64);
        }
    }
    f
}

/// The core spec of a stored workload, checked against the current config
/// by the validator of traces and submissions; the error is the reason it
/// is rejected.
fn spec_of(state: &State, row: &WorkloadRow) -> Result<WorkloadSpec, String> {
    let uint = |v: i64| u64::try_from(v).unwrap_or(0);
    let id = row.seq.to_string();
    let raw = RawWorkload {
        id: &id,
        submit: uint(row.submit_t),
        account: &row.account,
        user: &row.submitter,
        class: Some(&row.class),
        gpus: uint(row.gpus),
        nodes: uint(row.nodes),
        gpu_type: row.gpu_type.as_deref(),
        work_s: Some(uint(row.work_s)),
        checkpoint_s: uint(row.checkpoint_s),
        util: row.util,
        priority: Some(&row.priority),
        preemptible: row.preemptible,
        clusters: row.clusters.as_deref(),
        time_limit_s: row.time_limit_s.map(uint),
        checkpoint_on_signal: row.checkpoint_on_signal,
        billing: None,
    };
    Validator::for_state(state)
        .check(&raw)
        .map_err(|e| format!("field `{}` no longer valid under the config: {e}", e.field))
}

#[cfg(test)]
mod spec_of_tests {
    use super::*;

    const CONFIG: &str = "[cluster]\n[[cluster.pools]]\nname = \"a\"\ngpu = \"H100\"\nnodes = 2\ngpus_per_node = 4\n\
                          [[accounts]]\npath = \"org/x\"\n";

    fn row() -> WorkloadRow {
        WorkloadRow {
            run_as: None,
            seq: 7,
            owner: None,
            submit_t: 100,
            account: "org/x".into(),
            submitter: "ann".into(),
            class: "batch".into(),
            gpus: 2,
            nodes: 0,
            gpu_type: None,
            clusters: None,
            work_s: 60,
            checkpoint_s: 0,
            util: 1.0,
            priority: "normal".into(),
            preemptible: false,
            name: None,
            command: "[]".into(),
            env: "{}".into(),
            retries: 0,
            time_limit_s: None,
            workdir: None,
            checkpoint_on_signal: false,
            conditions: Default::default(),
            failures: 0,
            cancel_requested: false,
            state: "pending".into(),
            reason: None,
            end_t: None,
            last_cluster: None,
            measured_util: None,
            last_alloc: None,
            last_start_t: None,
            attempts: 0,
            ended_gpu_s: 0,
            first_start_t: None,
        }
    }

    /// A stored row is checked like a trace row or a submission: an unknown
    /// class or priority is a rejection naming it, not a silent default,
    /// and a shape the config no longer takes says why.
    #[test]
    fn a_stored_row_the_config_no_longer_accepts_is_rejected_naming_its_field() {
        let cfg = allot_trace::config::parse_config(CONFIG, "c.toml").unwrap();
        let state = State::new(cfg.cluster, cfg.accounts, cfg.contract);
        let spec = spec_of(&state, &row()).expect("valid");
        assert_eq!((spec.id.as_str(), spec.gpus, spec.user.as_str()), ("7", 2, "ann"));
        let cases = [
            ("account", WorkloadRow { account: "org/gone".into(), ..row() }, "unknown account \"org/gone\""),
            ("class", WorkloadRow { class: "gpu".into(), ..row() }, "unknown class \"gpu\""),
            ("priority", WorkloadRow { priority: "max".into(), ..row() }, "unknown priority \"max\""),
            ("gpu_type", WorkloadRow { gpu_type: Some("B200".into()), ..row() }, "pools have H100"),
            ("nodes", WorkloadRow { gpus: 3, nodes: 2, ..row() }, "not a multiple of nodes"),
            ("gpus", WorkloadRow { gpus: 16, ..row() }, "larger than any pool: asks 16 GPUs"),
            ("clusters", WorkloadRow { clusters: Some("gone".into()), ..row() }, "unknown cluster \"gone\""),
        ];
        for (field, r, fragment) in cases {
            let why = spec_of(&state, &r).expect_err(field);
            assert!(why.starts_with(&format!("field `{field}` no longer valid under the config")), "{why}");
            assert!(why.contains(fragment), "case {field}: {why}");
        }
    }
}
