//! [`Drive`]: the engine's inputs one at a time, by the names tests read
//! best. Each is one open [`Engine::step`] (no deadline, no pass unless
//! asked), so a test drives the engine only through its one way in.

use allot_core::cluster::{AddNodeError, ClusterId, NodeId, PoolId};
use allot_core::engine::{Answer, Cancelled, CheckpointRefused, Close, HoldRefused, Input, Later, Past, UsageSpan};
use allot_core::{AccountId, AccountTree, Allocation, Engine, Exit, NodeEvent, Policy, Time, WorkloadId, WorkloadSpec};

/// A policy for the inputs that never consult one.
struct Unused;

impl Policy for Unused {
    fn name(&self) -> &'static str {
        "unused"
    }

    fn admit(&self, _: &allot_core::State, _: &WorkloadSpec) -> Result<(), allot_core::Reason> {
        unreachable!("an input that needs no policy asked for an admission")
    }

    fn schedule(&mut self, _: &allot_core::State, _: Time) -> Vec<allot_core::Decision> {
        unreachable!("an input that needs no policy asked for a pass")
    }

    fn explain(&self, _: &allot_core::State, _: WorkloadId, _: Time) -> allot_core::Reason {
        unreachable!("an input that needs no policy asked for an explanation")
    }
}

/// The engine driven one input at a time.
pub trait Drive {
    /// One open step of one input (`policy` for arrivals and passes).
    fn input(&mut self, policy: &mut dyn Policy, input: Input, now: Time) -> Answer;

    /// An input that needs no policy.
    fn plain(&mut self, input: Input, now: Time) -> Answer {
        self.input(&mut Unused, input, now)
    }

    fn arrive(&mut self, policy: &mut dyn Policy, spec: WorkloadSpec, retries: u32, now: Time) -> WorkloadId {
        self.input(policy, Input::Arrive { spec, retries }, now).workload()
    }

    fn restore(&mut self, spec: WorkloadSpec, retries: u32, past: &Past, now: Time) -> WorkloadId {
        self.plain(Input::Restore { spec, retries, past: past.clone() }, now).workload()
    }

    fn adopt(
        &mut self,
        spec: WorkloadSpec,
        retries: u32,
        past: &Past,
        alloc: Allocation,
        started: Time,
        now: Time,
    ) -> WorkloadId {
        self.plain(Input::Adopt { spec, retries, past: past.clone(), alloc, started }, now).workload()
    }

    fn restore_usage(&mut self, spans: &[UsageSpan]) {
        self.plain(Input::Usage(spans.to_vec()), 0);
    }

    /// An unconditional pass at `now`.
    fn pass(&mut self, policy: &mut dyn Policy, now: Time) {
        self.input(policy, Input::Pass, now);
    }

    /// The deadlines due by `now`; how many acted.
    fn expire(&mut self, now: Time) -> usize {
        self.plain(Input::Time, now).count()
    }

    fn exited(&mut self, workload: WorkloadId, attempt: u32, exit: Exit, now: Time) {
        self.plain(Input::Exit { workload, attempt, exit }, now);
    }

    /// L-5: a restart lost the attempt.
    fn lost(&mut self, workload: WorkloadId, attempt: u32, now: Time) {
        self.plain(Input::Lost { workload, attempt }, now);
    }

    fn launched(&mut self, workload: WorkloadId, attempt: u32) {
        self.plain(Input::Launched { workload, attempt }, 0);
    }

    fn node_event(&mut self, e: &NodeEvent) {
        self.plain(Input::Node(e.clone()), e.t);
    }

    fn add_node(&mut self, pool: PoolId, name: impl Into<String>) -> Result<NodeId, AddNodeError> {
        match self.plain(Input::AddNode { pool, name: name.into() }, 0) {
            Answer::NodeAdded(r) => r,
            a => panic!("a node added answers NodeAdded, not {a:?}"),
        }
    }

    fn cluster_down(&mut self, cluster: ClusterId, why: &str, now: Time) -> usize {
        self.plain(Input::ClusterDown { cluster, why: why.into() }, now).count()
    }

    fn cluster_up(&mut self, cluster: ClusterId, now: Time) -> usize {
        self.plain(Input::ClusterUp { cluster }, now).count()
    }

    fn hold_outside(&mut self, node: NodeId, gpus: u32) -> u32 {
        self.plain(Input::Outside { node, gpus }, 0).count() as u32
    }

    fn cancel(&mut self, workload: WorkloadId, now: Time, detail: &str) -> Cancelled {
        match self.plain(Input::Cancel { workload, detail: detail.into() }, now) {
            Answer::Cancelled(c) => c,
            a => panic!("a cancel answers Cancelled, not {a:?}"),
        }
    }

    fn stop_accounts(&mut self, roots: &[AccountId], by: &str, now: Time) -> Vec<(WorkloadId, Cancelled)> {
        match self.plain(Input::StopAccounts { roots: roots.to_vec(), by: by.into() }, now) {
            Answer::Stopped(s) => s,
            a => panic!("a stop answers Stopped, not {a:?}"),
        }
    }

    fn set_accounts(&mut self, tree: AccountTree) {
        self.plain(Input::Accounts(tree), 0);
    }

    fn set_contract(&mut self, contract: allot_core::Contract, now: Time) {
        self.plain(Input::Contract(Box::new(contract)), now);
    }

    fn hold(&mut self, workload: WorkloadId, now: Time) -> Result<(), HoldRefused> {
        hold_answer(self.plain(Input::Hold { workload }, now))
    }

    fn release(&mut self, workload: WorkloadId, now: Time) -> Result<(), HoldRefused> {
        hold_answer(self.plain(Input::Release { workload }, now))
    }

    fn checkpointed(
        &mut self,
        workload: WorkloadId,
        attempt: u32,
        at: Time,
        now: Time,
    ) -> Result<Time, CheckpointRefused> {
        match self.plain(Input::Checkpoint { workload, attempt, at }, now) {
            Answer::Checkpoint(r) => r,
            a => panic!("a checkpoint answers Checkpoint, not {a:?}"),
        }
    }

    fn gpu_util(&mut self, workload: WorkloadId, attempt: u32, util: f64, now: Time) {
        self.plain(Input::GpuUtil { workload, attempt, util }, now);
    }
}

fn hold_answer(a: Answer) -> Result<(), HoldRefused> {
    match a {
        Answer::Hold(r) => r,
        a => panic!("a hold answers Hold, not {a:?}"),
    }
}

impl Drive for Engine {
    fn input(&mut self, policy: &mut dyn Policy, input: Input, now: Time) -> Answer {
        self.step(policy, now, vec![input], Close::Open, &mut Later).answers.pop().expect("one answer per input")
    }
}
