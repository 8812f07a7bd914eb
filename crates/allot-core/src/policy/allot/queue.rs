//! The waiting queue of one rank tier, served in fair-share order as the
//! pass changes allocations (rules FS-1, FS-2).
//!
//! Every slot with waiting work sits in its parent's ordered set keyed by
//! its current FS-1 value (ties by slot id), in the over-budget tier after
//! its impact, highest first (IMP-1, [`slot_key`]); every user with waiting work sits
//! in its slot's set keyed by its FS-2 value and its oldest waiting workload;
//! each user's workloads are FIFO by `(submit, id)`, read from the groups of
//! the pending index ([`crate::pending`]) rather than copied. Taking the next workload
//! descends from the root along the smallest keys, O(depth · log siblings).
//! After the workload was handled, [`Queue::done`] re-keys its user and the
//! slots on its path, so a start raises its account's value before the next
//! choice (as kueue recomputes DRS after each admission).

use std::borrow::Cow;
use std::collections::{BTreeSet, btree_set};
use std::iter::Peekable;

use crate::account::AccountId;
use crate::pending::{Entry, Shape};
use crate::workload::{Class, WorkloadId};

use super::fairshare::{FairShare, ROOT, Share, Slot, Users};
use super::rank::{SlotKey, Tier, slot_key};

type UserKey = (Share, Entry, u32);

/// A FIFO group of waiting workloads of one class and shape.
#[derive(Clone, Debug)]
pub(crate) struct Group<'a> {
    pub(crate) class: Class,
    pub(crate) shape: Shape,
    pub(crate) set: Cow<'a, BTreeSet<Entry>>,
}

/// One user's waiting work of a tier: its member's groups of the classes
/// the tier holds, by class and shape, served merged in FIFO order.
#[derive(Clone, Debug)]
pub(crate) struct Work<'a> {
    pub(crate) user: u32,
    pub(crate) account: AccountId,
    /// Non-empty, ordered by class and shape.
    pub(crate) groups: Vec<Group<'a>>,
}

impl Work<'_> {
    /// Every workload, in no particular order.
    pub(crate) fn workloads(&self) -> impl Iterator<Item = WorkloadId> + '_ {
        self.groups.iter().flat_map(|g| g.set.iter().map(|e| e.1))
    }

    /// The groups of the smallest gang of each (class, GPU type, clusters, nodes):
    /// groups are ordered by class and shape, and a shape by size last, so
    /// the first of each run.
    pub(crate) fn reps(&self) -> impl Iterator<Item = &Group<'_>> {
        let mut last = None;
        self.groups.iter().filter(move |g| {
            let key = (g.class, g.shape.gpu_type, g.shape.clusters, g.shape.nodes);
            let first = last != Some(key);
            last = Some(key);
            first
        })
    }
}

/// A FIFO merge of a user's groups: a range of the queue's parts.
#[derive(Copy, Clone, Debug, Default)]
struct Stream {
    start: usize,
    end: usize,
}

/// One group of a user's work being merged: (group index, the rest of the
/// group).
type Part<'q> = (usize, Peekable<btree_set::Iter<'q, Entry>>);

impl Stream {
    /// The part holding the earliest workload, and that workload.
    fn first(self, parts: &mut [Part<'_>]) -> Option<(usize, Entry)> {
        let mut best: Option<(usize, Entry)> = None;
        for (i, (_, p)) in parts[self.start..self.end].iter_mut().enumerate() {
            if let Some(&&e) = p.peek()
                && best.is_none_or(|(_, b)| e < b)
            {
                best = Some((self.start + i, e));
            }
        }
        best
    }

    fn head(self, parts: &mut [Part<'_>]) -> Option<Entry> {
        self.first(parts).map(|(_, e)| e)
    }

    /// The earliest workload and the index of its group.
    fn pop(self, parts: &mut [Part<'_>]) -> Option<(Entry, usize)> {
        let (i, e) = self.first(parts)?;
        let (g, part) = &mut parts[i];
        part.next();
        Some((e, *g))
    }
}

/// Buffers of a [`Queue`] kept from one tier and pass to the next: every
/// set empty and every key `None` between uses.
#[derive(Clone, Debug, Default)]
pub(crate) struct QueueBuffers {
    kids: Vec<BTreeSet<(SlotKey, Slot)>>,
    key: Vec<Option<SlotKey>>,
    users: Vec<BTreeSet<UserKey>>,
    ukey: Vec<Option<UserKey>>,
    /// Per user: its index in the tier's work, or `NONE`.
    at: Vec<u32>,
}

const NONE: u32 = u32::MAX;

/// Waiting workloads of one tier, by fair share.
#[derive(Debug)]
pub(crate) struct Queue<'q> {
    /// The tier served, for the slot keys (IMP-1).
    tier: Tier,
    kids: Vec<BTreeSet<(SlotKey, Slot)>>,
    key: Vec<Option<SlotKey>>,
    users: Vec<BTreeSet<UserKey>>,
    ukey: Vec<Option<UserKey>>,
    /// Per user: its index in `work` and `lists`, or `NONE`.
    at: Vec<u32>,
    /// Per user with work (as `work`): its merge.
    lists: Vec<Stream>,
    parts: Vec<Part<'q>>,
    /// The users' work, for the smallest gang of each shape (GPU type,
    /// nodes, class) in its list, to tell when none of it can be served.
    work: &'q [Work<'q>],
}

impl<'q> Queue<'q> {
    /// Builds the queue from the users' waiting work, in the buffers of an
    /// earlier queue ([`Queue::into_buffers`]).
    pub(crate) fn build(fs: &FairShare, users: &Users, tier: Tier, work: &'q [Work<'q>], b: QueueBuffers) -> Queue<'q> {
        let QueueBuffers { mut kids, mut key, users: mut sets, mut ukey, mut at } = b;
        if kids.len() < fs.slots() {
            kids.resize_with(fs.slots(), BTreeSet::new);
            key.resize(fs.slots(), None);
            sets.resize_with(fs.slots(), BTreeSet::new);
        }
        if ukey.len() < users.len() {
            ukey.resize(users.len(), None);
            at.resize(users.len(), NONE);
        }
        let mut q = Queue {
            tier,
            kids,
            key,
            users: sets,
            ukey,
            at,
            lists: Vec::with_capacity(work.len()),
            parts: Vec::new(),
            work,
        };
        for (i, wk) in work.iter().enumerate() {
            q.at[wk.user as usize] = i as u32;
            let start = q.parts.len();
            q.parts.extend(wk.groups.iter().enumerate().map(|(i, g)| (i, g.set.iter().peekable())));
            q.lists.push(Stream { start, end: q.parts.len() });
        }
        for wk in work {
            q.key_user(users, wk.user);
        }
        for wk in work {
            if q.ukey[wk.user as usize].is_some() {
                q.attach(fs, users.slot[wk.user as usize]);
            }
        }
        q
    }

    /// The buffers, emptied, for the next queue.
    pub(crate) fn into_buffers(self) -> QueueBuffers {
        let Queue { mut kids, mut key, mut users, mut ukey, mut at, work, .. } = self;
        // Most sets are empty already (clearing one frees nothing).
        kids.iter_mut().filter(|s| !s.is_empty()).for_each(BTreeSet::clear);
        users.iter_mut().filter(|s| !s.is_empty()).for_each(BTreeSet::clear);
        key.fill(None);
        for wk in work {
            ukey[wk.user as usize] = None;
            at[wk.user as usize] = NONE;
        }
        QueueBuffers { kids, key, users, ukey, at }
    }

    /// User `u`'s merge.
    fn list(&self, u: u32) -> Stream {
        let i = self.at[u as usize];
        if i == NONE { Stream::default() } else { self.lists[i as usize] }
    }

    /// Keys user `u` by its FS-2 value and its earliest waiting workload
    /// (if any is left).
    fn key_user(&mut self, users: &Users, u: u32) {
        let Some(head) = self.list(u).head(&mut self.parts) else { return };
        let k = (Share(users.value(u)), head, u);
        self.users[users.slot[u as usize] as usize].insert(k);
        self.ukey[u as usize] = Some(k);
    }

    /// Puts a slot and its ancestors into their parents' sets if absent.
    fn attach(&mut self, fs: &FairShare, slot: Slot) {
        let mut s = slot;
        while s != ROOT && self.key[s as usize].is_none() {
            let k = slot_key(fs, s, self.tier);
            self.kids[fs.parent(s) as usize].insert((k, s));
            self.key[s as usize] = Some(k);
            s = fs.parent(s);
        }
    }

    fn has_work(&self, s: Slot) -> bool {
        !self.users[s as usize].is_empty() || !self.kids[s as usize].is_empty()
    }

    /// Takes the best-ranked waiting workload, its user and its group (see
    /// [`Queue::group`]). Call [`Queue::done`] after handling it.
    pub(crate) fn next(&mut self) -> Option<(WorkloadId, u32, usize)> {
        let mut s = ROOT;
        while self.users[s as usize].is_empty() {
            s = self.kids[s as usize].first()?.1;
        }
        let k = self.users[s as usize].pop_first()?;
        let u = k.2;
        self.ukey[u as usize] = None;
        let ((_, w), g) = self.list(u).pop(&mut self.parts)?;
        Some((w, u, g))
    }

    /// After user `u`'s workload (just taken) changed nothing, neither an
    /// allocation nor a key: takes `u`'s next workload (and its group) if
    /// [`Queue::done`] then [`Queue::next`] would take it. With every slot
    /// key unchanged the descent from the root reaches `u`'s slot again,
    /// where `u` comes first if its new key is below every other user's.
    pub(crate) fn pop_again(&mut self, users: &Users, u: u32) -> Option<(WorkloadId, usize)> {
        let head = self.list(u).head(&mut self.parts)?;
        let k = (Share(users.value(u)), head, u);
        if self.users[users.slot[u as usize] as usize].first().is_some_and(|f| *f < k) {
            return None;
        }
        let ((_, w), g) = self.list(u).pop(&mut self.parts)?;
        Some((w, g))
    }

    /// User `u`'s work in this tier.
    pub(crate) fn work(&self, u: u32) -> &'q Work<'q> {
        let i = self.at[u as usize];
        assert_ne!(i, NONE, "a user with work in this tier");
        &self.work[i as usize]
    }

    /// Group `g` of user `u`'s work.
    pub(crate) fn group(&self, u: u32, g: usize) -> &'q Group<'q> {
        &self.work(u).groups[g]
    }

    /// The groups of the smallest gang of each shape among the user's
    /// workloads (those already served included, so a lower bound for those
    /// left).
    pub(crate) fn reps(&self, u: u32) -> impl Iterator<Item = &'q Group<'q>> {
        let i = self.at[u as usize];
        let work = self.work;
        (i != NONE).then(|| &work[i as usize]).into_iter().flat_map(|w| w.reps())
    }

    /// Drops the rest of user `u`'s workloads from this pass (none of them
    /// can be served). Call [`Queue::done`] afterwards as usual.
    pub(crate) fn drop_user(&mut self, u: u32) {
        let i = self.at[u as usize];
        if i != NONE {
            let l = &mut self.lists[i as usize];
            l.end = l.start;
        }
    }

    /// Re-keys user `u` (just served) and the slots above it.
    pub(crate) fn done(&mut self, fs: &FairShare, users: &Users, u: u32) {
        self.key_user(users, u);
        self.rekey(fs, users.slot[u as usize]);
    }

    /// Re-keys a user whose allocation changed (a victim's user).
    pub(crate) fn refresh_user(&mut self, users: &Users, u: u32) {
        if let Some(k) = self.ukey[u as usize].take() {
            self.users[users.slot[u as usize] as usize].remove(&k);
            self.key_user(users, u);
        }
    }

    /// Re-keys `slot` and its ancestors after their allocation changed;
    /// slots left without waiting work leave their parents' sets. A slot
    /// whose key is unchanged (compared in the set's own order) stays put.
    pub(crate) fn rekey(&mut self, fs: &FairShare, slot: Slot) {
        let mut s = slot;
        while s != ROOT {
            let p = fs.parent(s);
            let new = self.has_work(s).then(|| slot_key(fs, s, self.tier));
            let old = self.key[s as usize];
            if old.cmp(&new) != std::cmp::Ordering::Equal {
                if let Some(k) = old {
                    self.kids[p as usize].remove(&(k, s));
                }
                if let Some(k) = new {
                    self.kids[p as usize].insert((k, s));
                }
                self.key[s as usize] = new;
            }
            s = p;
        }
    }
}
