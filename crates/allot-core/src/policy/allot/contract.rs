//! Admission, caps and the time-based conditions of the contract (rules
//! INT-2, SVC-2, CON-1, BUD-1; see `docs/contract.md`).

use crate::Time;
use crate::account::AccountId;
use crate::rule::{Reason, Rule};
use crate::state::{Holding, State};
use crate::words::count;
use crate::workload::{Class, Phase, WorkloadSpec};

use super::budget;
use super::rank::in_lane;

/// INT-2: why an interactive workload over the lane limits is rejected.
pub(crate) fn lane_reject(state: &State, spec: &WorkloadSpec) -> Reason {
    let c = &state.contract;
    Reason::new(
        Rule::InteractiveLimit,
        format!(
            "interactive workload asks {} GPUs for {} s; the interactive lane allows at most {} GPUs for {} s \
             (submit it as batch)",
            spec.gpus, spec.work_s, c.interactive_max_gpus, c.interactive_max_duration
        ),
    )
}

/// SVC-2: the first account on the path (leaf first) whose service cap the
/// service would exceed, with the service GPUs it holds and its cap.
pub(crate) fn service_cap(state: &State, held: &[u32], spec: &WorkloadSpec) -> Option<(AccountId, u32, u32)> {
    service_cap_for(state, held, spec.class, spec.account, spec.gpus)
}

/// [`service_cap`] for a workload of this class, account and size.
pub(crate) fn service_cap_for(
    state: &State,
    held: &[u32],
    class: Class,
    account: AccountId,
    gpus: u32,
) -> Option<(AccountId, u32, u32)> {
    if class != Class::Service {
        return None;
    }
    state.accounts.ancestry(account).find_map(|a| {
        let cap = state.accounts.account(a).max_service_gpus?;
        let h = held[a.0 as usize];
        (h + gpus > cap).then_some((a, h, cap))
    })
}

/// Admission: lane limits (INT-2), a service bigger than a cap on its path
/// (SVC-2), and a shape no pool can ever hold (PLACE-1, PLACE-2).
pub(crate) fn admit(state: &State, spec: &WorkloadSpec) -> Result<(), Reason> {
    if spec.class == Class::Interactive && !in_lane(&state.contract, spec) {
        return Err(lane_reject(state, spec));
    }
    let none = vec![0u32; state.accounts.len()];
    if let Some((a, _, cap)) = service_cap(state, &none, spec) {
        return Err(Reason::new(
            Rule::ServiceCap,
            format!(
                "service asks {} GPUs; account {} caps its services at {} GPUs",
                spec.gpus,
                state.accounts.account(a).path,
                cap
            ),
        ));
    }
    if spec.gpus == 0 || !state.cluster.fits_anywhere(spec.gpus, spec.nodes, spec.gpu_type, spec.clusters) {
        let (rule, shape) = if spec.nodes > 0 {
            (Rule::PlaceNodes, format!("{} on exactly {}", count(spec.gpus, "GPU"), count(spec.nodes, "node")))
        } else {
            (Rule::PlaceGang, count(spec.gpus, "GPU"))
        };
        return Err(Reason::new(rule, format!("{shape} never fit in any one pool of the cluster")));
    }
    Ok(())
}

/// When a running workload's slice ends (CON-1). Services (SVC-1) and
/// interactive work (INT-1) are not time-sliced: they have none.
pub(crate) fn slice_end(state: &State, w: crate::workload::WorkloadId) -> Option<Time> {
    let (spec, run) = (state.spec(w), state.run(w));
    if run.phase != Phase::Running || spec.class != Class::Batch {
        return None;
    }
    Some(run.started? + state.contract.min_slice.get(spec.class))
}

/// CON-12: when running batch work `h` has its next checkpoint, if a swap
/// waits for it: it is due within the contract's `checkpoint_wait` of
/// `now` (never when that is 0), and sooner than the progress a stop now
/// would lose (so a wait never costs more time than it saves, and work
/// just past a checkpoint is never waited for).
pub(crate) fn checkpoint_due(state: &State, now: Time, h: &Holding) -> Option<Time> {
    let wait = state.contract.checkpoint_wait;
    if wait == 0 || h.phase != Phase::Running || h.class != Class::Batch {
        return None;
    }
    let next = h.next_checkpoint(now)?;
    (next - now <= wait && next - now < h.unsaved_progress(now)).then_some(next)
}

/// The next time after `now` a time-based condition may change decisions
/// while work waits: a slice ending (CON-1), a grace ending (CON-2), a
/// budget period rolling over or an account reaching its budget (BUD-1).
/// (A swap that waits for a checkpoint, CON-12, is made at the first
/// periodic pass after it: a wake-up at every due checkpoint of every
/// running workload made replays several times slower for no more than
/// `scheduling_interval` of progress saved.)
pub(crate) fn next_wakeup(state: &State, now: Time) -> Option<Time> {
    if state.pending.is_empty() {
        return None;
    }
    let mut next = budget::next_change(state, now);
    let mut consider = |t: Time| {
        if t > now {
            next = Some(next.map_or(t, |x: Time| x.min(t)));
        }
    };
    let slice = state.contract.min_slice.get(Class::Batch);
    for h in state.holding() {
        // As `slice_end`: running batch work only.
        if h.phase == Phase::Running && h.class == Class::Batch {
            consider(h.started + slice);
        }
        if let Some(t) = h.stop_at {
            consider(t);
        }
    }
    next
}
