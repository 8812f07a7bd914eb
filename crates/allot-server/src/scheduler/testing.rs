//! Helpers of the scheduler task's unit tests: an executor that is never
//! asked (the tests read the commands the scheduler queued), a scheduler
//! on a store, and a batch workload.

use std::sync::Arc;
use std::time::Duration;

use allot_core::{AccountId, Class, Engine, Priority, Time, WorkloadSpec};

use super::{Paths, Scheduler};
use crate::executor::{AttemptKey, BoxFuture, Executor, Launch, Survivor};
use crate::store::Store;

/// Is never asked: the test reads the commands the scheduler queued.
pub(crate) struct Unused;

impl Executor for Unused {
    fn name(&self) -> &'static str {
        "fleet"
    }
    fn launch(&self, _job: Launch) {}
    fn signal(&self, _key: AttemptKey) {}
    fn kill(&self, _key: AttemptKey) {}
    fn terminate_survivors(&self, _s: Vec<Survivor>, _grace: Duration) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// The `allot` policy's scheduler task on `engine`, `store` and `dir`.
pub(crate) fn scheduler(engine: Engine, store: Store, dir: &std::path::Path) -> Scheduler {
    let book = allot_core::AccountBook::seed(&engine.state().accounts);
    Scheduler::new(
        engine,
        allot_core::PolicyKind::parse("allot").unwrap().build(),
        store,
        Arc::new(Unused),
        Arc::new(crate::metrics::Metrics::new()),
        Paths { data_dir: dir.to_path_buf() },
        book,
    )
}

/// A batch workload `id` of `gpus` GPUs on `nodes` nodes of `account`,
/// submitted at `now`: an hour of work, checkpointed every minute.
pub(crate) fn batch(id: &str, account: AccountId, gpus: u32, nodes: u32, now: Time) -> WorkloadSpec {
    WorkloadSpec {
        id: id.into(),
        submit: now,
        account,
        user: "u".into(),
        class: Class::Batch,
        gpus,
        nodes,
        gpu_type: None,
        clusters: Default::default(),
        work_s: 3600,
        checkpoint_s: 60,
        util: 1.0,
        priority: Priority::Normal,
        preemptible: true,
        time_limit_s: None,
        checkpoint_on_signal: false,
        after: Vec::new(),
        array: None,
        hold: false,
        billing: None,
    }
}
