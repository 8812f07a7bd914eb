//! `allot`: budgets, hierarchical fair share and the time-slicing contract
//! (docs/design.md §2; the formulas and their rule ids are in `docs/budgets.md`,
//! `docs/fairshare.md` and `docs/contract.md`).
//!
//! * [`budget`]: BUD-1 status per account (in-budget work ranks first).
//! * [`fairshare`]: FS-1 entitlements and level values, FS-2 users, the
//!   after-swap comparison of CON-4.
//! * [`rank`]: the rank value type and the tiers (lane, in-budget, over-budget).
//! * [`waiting`]: the waiting work of a pass by tier, from the pending index.
//! * [`queue`]: serving a tier in fair-share order as allocations change.
//! * [`preempt`]: victim eligibility and choice (BUD-2, CON-1, CON-4, CON-5,
//!   INT-1, SVC-1).
//! * [`victim`]: the candidate victims and the preemptor of a search.
//! * [`bound`]: cheap necessary conditions for a victim search to succeed.
//! * [`pass`]: one scheduling pass (start, claim GPUs being released, preempt).
//! * [`contract`]: admission (INT-2, SVC-2) and time-based wake-ups.
//! * [`explain`]: reasons with rule ids and numbers; [`swap`]: the CON-4
//!   comparison in a preemption's reason.

mod bound;
mod budget;
mod contract;
mod explain;
mod fairshare;
mod pass;
mod policy;
mod preempt;
mod queue;
mod rank;
mod swap;
mod victim;
mod waiting;

pub use policy::{AllotPolicy, Standing};
