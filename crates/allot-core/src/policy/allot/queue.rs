//! The waiting queue of one rank tier, served in fair-share order as the
//! pass changes allocations (rules FS-1, FS-2).
//!
//! Every slot with waiting work sits in its parent's ordered set keyed by
//! its current FS-1 value (ties by slot id); every user with waiting work sits
//! in its slot's set keyed by its FS-2 value and its oldest waiting workload;
//! each user's workloads are FIFO by `(submit, id)`. Taking the next workload
//! descends from the root along the smallest keys, O(depth · log siblings).
//! After the workload was handled, [`Queue::done`] re-keys its user and the
//! slots on its path, so a start raises its account's value before the next
//! choice (as kueue recomputes DRS after each admission).

use std::collections::{BTreeSet, VecDeque};

use crate::Time;
use crate::state::State;
use crate::workload::WorkloadId;

use super::fairshare::{FairShare, ROOT, Share, Slot, Users};

type UserKey = (Share, (Time, WorkloadId), u32);

/// Waiting workloads of one tier, by fair share.
#[derive(Debug)]
pub(crate) struct Queue {
    kids: Vec<BTreeSet<(Share, Slot)>>,
    key: Vec<Option<Share>>,
    users: Vec<BTreeSet<UserKey>>,
    ukey: Vec<Option<UserKey>>,
    lists: Vec<VecDeque<WorkloadId>>,
    /// Per user: the smallest gang of each shape (GPU type, nodes, class)
    /// in its list, to tell when none of its workloads can be served.
    reps: Vec<Vec<WorkloadId>>,
}

impl Queue {
    /// Builds the queue from `(workload, user)` pairs given in FIFO order.
    pub(crate) fn build(state: &State, fs: &FairShare, users: &Users, items: &[(WorkloadId, u32)]) -> Queue {
        let mut q = Queue {
            kids: vec![BTreeSet::new(); fs.slots()],
            key: vec![None; fs.slots()],
            users: vec![BTreeSet::new(); fs.slots()],
            ukey: vec![None; users.len()],
            lists: vec![VecDeque::new(); users.len()],
            reps: vec![Vec::new(); users.len()],
        };
        for &(w, u) in items {
            q.lists[u as usize].push_back(w);
            let s = state.spec(w);
            let reps = &mut q.reps[u as usize];
            let same = |r: &WorkloadId| {
                let x = state.spec(*r);
                (x.gpu_type, x.nodes, x.class) == (s.gpu_type, s.nodes, s.class)
            };
            match reps.iter_mut().find(|r| same(r)) {
                Some(r) if state.spec(*r).gpus > s.gpus => *r = w,
                Some(_) => {}
                None => reps.push(w),
            }
        }
        for u in 0..users.len() as u32 {
            if !q.lists[u as usize].is_empty() {
                q.key_user(state, users, u);
            }
        }
        for u in 0..users.len() as u32 {
            if q.ukey[u as usize].is_some() {
                q.attach(fs, users.slot[u as usize]);
            }
        }
        q
    }

    fn key_user(&mut self, state: &State, users: &Users, u: u32) {
        let w = self.lists[u as usize][0];
        let k = (Share(users.alloc[u as usize]), (state.spec(w).submit, w), u);
        self.users[users.slot[u as usize] as usize].insert(k);
        self.ukey[u as usize] = Some(k);
    }

    /// Puts a slot and its ancestors into their parents' sets if absent.
    fn attach(&mut self, fs: &FairShare, slot: Slot) {
        let mut s = slot;
        while s != ROOT && self.key[s as usize].is_none() {
            let k = Share(fs.value(s));
            self.kids[fs.parent(s) as usize].insert((k, s));
            self.key[s as usize] = Some(k);
            s = fs.parent(s);
        }
    }

    fn has_work(&self, s: Slot) -> bool {
        !self.users[s as usize].is_empty() || !self.kids[s as usize].is_empty()
    }

    /// Takes the best-ranked waiting workload and its user. Call
    /// [`Queue::done`] after handling it.
    pub(crate) fn next(&mut self) -> Option<(WorkloadId, u32)> {
        let mut s = ROOT;
        while self.users[s as usize].is_empty() {
            s = self.kids[s as usize].first()?.1;
        }
        let k = self.users[s as usize].pop_first()?;
        let u = k.2;
        self.ukey[u as usize] = None;
        let w = self.lists[u as usize].pop_front()?;
        Some((w, u))
    }

    /// The smallest gang of each shape among the user's workloads (those
    /// already served included, so a lower bound for those left).
    pub(crate) fn reps(&self, u: u32) -> &[WorkloadId] {
        &self.reps[u as usize]
    }

    /// Drops the rest of user `u`'s workloads from this pass (none of them
    /// can be served). Call [`Queue::done`] afterwards as usual.
    pub(crate) fn drop_user(&mut self, u: u32) {
        self.lists[u as usize].clear();
    }

    /// Re-keys user `u` (just served) and the slots above it.
    pub(crate) fn done(&mut self, state: &State, fs: &FairShare, users: &Users, u: u32) {
        if !self.lists[u as usize].is_empty() {
            self.key_user(state, users, u);
        }
        self.rekey(fs, users.slot[u as usize]);
    }

    /// Re-keys a user whose allocation changed (a victim's user).
    pub(crate) fn refresh_user(&mut self, state: &State, users: &Users, u: u32) {
        if let Some(k) = self.ukey[u as usize].take() {
            self.users[users.slot[u as usize] as usize].remove(&k);
            self.key_user(state, users, u);
        }
    }

    /// Re-keys `slot` and its ancestors after their allocation changed;
    /// slots left without waiting work leave their parents' sets.
    pub(crate) fn rekey(&mut self, fs: &FairShare, slot: Slot) {
        let mut s = slot;
        while s != ROOT {
            let p = fs.parent(s);
            if let Some(k) = self.key[s as usize].take() {
                self.kids[p as usize].remove(&(k, s));
            }
            if self.has_work(s) {
                let k = Share(fs.value(s));
                self.kids[p as usize].insert((k, s));
                self.key[s as usize] = Some(k);
            }
            s = p;
        }
    }
}
