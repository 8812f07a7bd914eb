//! What running workloads tell the scheduler, and what it tells them
//! (docs/contract.md, CON-7 to CON-9):
//! * a completed checkpoint, by touching `$ALLOT_CHECKPOINT_MARKER` (a
//!   file in its checkpoint directory that [`watch_markers`] polls) or by
//!   `POST /v1/workloads/{id}/checkpoint` with `$ALLOT_ATTEMPT_TOKEN`, a
//!   credential of that attempt alone that can do nothing else;
//! * an idle warning (CON-9), written to `$ALLOT_IDLE_WARNING` (a file in
//!   its checkpoint directory it can watch) and removed when withdrawn.
//!
//! Credentials live in memory only: a restarted server stops every attempt
//! that survived it, so none outlives the server that issued it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use allot_core::engine::{Answer, Input};
use allot_core::{Time, WorkloadId};
use tokio::sync::mpsc;

use super::{Msg, Refusal, Scheduler};
use crate::executor::AttemptKey;
use crate::store::Op;
use crate::views::CheckpointView;

/// The marker a workload touches after each checkpoint, in its checkpoint
/// directory.
pub const MARKER: &str = ".allot-checkpoint";
/// The idle warning Allot writes in a workload's checkpoint directory.
pub const IDLE_WARNING: &str = ".allot-idle-warning";
/// How often the markers of running attempts are looked at.
pub const MARKER_POLL: Duration = Duration::from_secs(2);

/// The attempt credentials issued, by the hash of their text.
#[derive(Debug, Default)]
pub(crate) struct Credentials {
    by_hash: HashMap<String, AttemptKey>,
    by_key: HashMap<AttemptKey, String>,
}

impl Credentials {
    /// A new credential for `key` (its text goes to the attempt only).
    pub(crate) fn issue(&mut self, key: AttemptKey) -> String {
        let token = format!("allot_attempt_{}", crate::secret::new_token_id());
        let hash = crate::secret::hash_token(&token);
        self.by_hash.insert(hash.clone(), key);
        self.by_key.insert(key, hash);
        token
    }

    pub(crate) fn revoke(&mut self, key: AttemptKey) {
        if let Some(h) = self.by_key.remove(&key) {
            self.by_hash.remove(&h);
        }
    }

    fn attempt_of(&self, token: &str) -> Option<AttemptKey> {
        self.by_hash.get(&crate::secret::hash_token(token)).copied()
    }
}

/// A marker being watched: its path, when its attempt started (a marker
/// older than that is an earlier attempt's) and the last time reported.
#[derive(Clone, Debug)]
pub(crate) struct Watched {
    pub path: PathBuf,
    pub since: Time,
    pub seen: Option<Time>,
}

/// The markers of running attempts, shared with [`watch_markers`].
pub(crate) type Markers = Arc<Mutex<BTreeMap<AttemptKey, Watched>>>;

/// Polls the markers of running attempts every [`MARKER_POLL`] and reports
/// each new touch to the scheduler as a checkpoint completed at the
/// marker's modification time. Ends when the scheduler's channel is
/// closed (`tx` is weak, so it never keeps the scheduler alive).
pub(crate) async fn watch_markers(markers: Markers, tx: mpsc::WeakSender<Msg>) {
    let mut tick = tokio::time::interval(MARKER_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if tx.strong_count() == 0 {
            return;
        }
        let watched: Vec<(AttemptKey, Watched)> =
            markers.lock().expect("markers").iter().map(|(k, w)| (*k, w.clone())).collect();
        if watched.is_empty() {
            continue;
        }
        let touched = tokio::task::spawn_blocking(move || {
            watched.into_iter().filter_map(|(k, w)| new_touch(&w).map(|t| (k, t))).collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        for (key, at) in touched {
            if let Some(w) = markers.lock().expect("markers").get_mut(&key) {
                w.seen = Some(at);
            }
            let Some(tx) = tx.upgrade() else { return };
            if tx.send(Msg::MarkerTouched { key, at }).await.is_err() {
                return;
            }
        }
    }
}

/// The marker's modification time if it was touched in this attempt and
/// after the last report.
fn new_touch(w: &Watched) -> Option<Time> {
    let modified = std::fs::metadata(&w.path).and_then(|m| m.modified()).ok()?;
    let t = modified.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    (t >= w.since && w.seen.is_none_or(|s| t > s)).then_some(t)
}

impl Scheduler {
    /// The variables an attempt is told by: its credential, its marker and
    /// its idle warning's path; the marker is watched from now on.
    pub(crate) fn report_env(
        &mut self,
        key: AttemptKey,
        checkpoint_dir: &Path,
        started: Time,
    ) -> [(String, String); 4] {
        let token = self.credentials.issue(key);
        let marker = checkpoint_dir.join(MARKER);
        self.markers.lock().expect("markers").insert(key, Watched { path: marker.clone(), since: started, seen: None });
        [
            ("ALLOT_ATTEMPT_TOKEN".into(), token),
            ("ALLOT_CHECKPOINT_MARKER".into(), marker.display().to_string()),
            ("ALLOT_IDLE_WARNING".into(), checkpoint_dir.join(IDLE_WARNING).display().to_string()),
            ("ALLOT_SERVER".into(), self.api_url.clone().unwrap_or_default()),
        ]
    }

    /// An attempt's processes are gone: its marker is read a last time, so
    /// that a checkpoint made just before it exited (on the signal, CON-8)
    /// counts even when the poll has not seen it.
    pub(crate) fn last_marker(&mut self, key: AttemptKey, now: Time) {
        let watched = self.markers.lock().expect("markers").get(&key).cloned();
        if let Some(at) = watched.as_ref().and_then(new_touch) {
            let _ = self.checkpointed(key, at, now);
        }
    }

    /// An attempt ended: its credential and marker are done with.
    pub(crate) fn forget_attempt(&mut self, key: AttemptKey) {
        self.credentials.revoke(key);
        self.markers.lock().expect("markers").remove(&key);
    }

    /// CON-7: a checkpoint of attempt `key` completed at `at`, as its
    /// marker or the API said; recorded with the progress it saved.
    pub(crate) fn checkpointed(&mut self, key: AttemptKey, at: Time, now: Time) -> Result<CheckpointView, Refusal> {
        let w = self.attempt(key)?;
        let attempt = u32::try_from(key.attempt).unwrap_or(0);
        let Answer::Checkpoint(saved) = self.feed(Input::Checkpoint { workload: w, attempt, at }, now) else {
            unreachable!("a checkpoint answers Checkpoint")
        };
        let saved = saved.map_err(|e| Refusal::Conflict(format!("workload {}: {e}", key.seq)))?;
        let at = at.min(now);
        tracing::info!(workload = key.seq, attempt = key.attempt, saved_s = saved, "checkpoint reported");
        self.ops.push(Op::AttemptCheckpoint {
            seq: key.seq,
            attempt: key.attempt,
            t: at as i64,
            saved_s: saved as i64,
        });
        Ok(CheckpointView { workload: key.seq.to_string(), attempt: key.attempt, t: at as i64, saved_s: saved as i64 })
    }

    /// `POST /v1/workloads/{seq}/checkpoint` with `token`: only the
    /// credential of the workload's current attempt is taken.
    pub(crate) fn checkpoint_report(&mut self, seq: i64, token: &str, now: Time) -> Result<CheckpointView, Refusal> {
        let key = self.credentials.attempt_of(token).ok_or_else(|| {
            Refusal::Unauthorized(
                "not an attempt credential of a running attempt: send the ALLOT_ATTEMPT_TOKEN Allot gave the attempt"
                    .into(),
            )
        })?;
        if key.seq != seq {
            return Err(Refusal::Forbidden(format!(
                "this credential is attempt {} of workload {}; it may report checkpoints of that workload only, not of {seq}",
                key.attempt, key.seq
            )));
        }
        self.checkpointed(key, now, now)
    }

    fn attempt(&self, key: AttemptKey) -> Result<WorkloadId, Refusal> {
        self.by_seq.get(&key.seq).copied().ok_or_else(|| Refusal::Conflict(format!("workload {} has ended", key.seq)))
    }

    /// CON-9: the warning written for the attempt to see (or removed when
    /// withdrawn), and recorded on the attempt.
    pub(crate) fn idle_warning(&mut self, w: WorkloadId, attempt: u32, reclaim_at: Option<Time>, now: Time) {
        let key = self.key(w, attempt);
        let id = self.engine.state().spec(w).id.clone();
        let dir = self.paths.checkpoint_dir(&id);
        let body = reclaim_at.map(|at| {
            let reason = self.engine.state().run(w).last_reason.as_ref().map(ToString::to_string).unwrap_or_default();
            let body = serde_json::json!({
                "workload": id, "attempt": attempt, "warned_t": now, "reclaim_t": at, "reason": reason,
            });
            format!("{body}\n")
        });
        // In the workload's own directory, which may hold links it
        // planted: never written through one, and off the scheduler task.
        let write = move || {
            let written = match body {
                Some(b) => crate::executor::runas::write_in(&dir, IDLE_WARNING, b.as_bytes()),
                None => crate::executor::runas::remove_in(&dir, IDLE_WARNING),
            };
            if let Err(e) = written {
                tracing::warn!(workload = key.seq, attempt = key.attempt, dir = %dir.display(), error = %e, "cannot write the idle warning file");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(write)),
            Err(_) => write(),
        }
        let (t, reclaim_t) = match reclaim_at {
            Some(at) => (Some(now as i64), Some(at as i64)),
            None => (None, None),
        };
        self.ops.push(Op::AttemptIdle { seq: key.seq, attempt: key.attempt, t, reclaim_t });
    }
}
