//! The Slurm executor: Allot decides, a real Slurm cluster runs.
//!
//! * Inventory: the config's nodes, in order, are the partition's Slurm
//!   nodes in natural name order (`sinfo`); each must have at least the
//!   GPUs its config node declares. Allot's nodes take the Slurm names, so
//!   `allot nodes`, drains and allocations speak Slurm's language.
//! * Launch: one `sbatch` per attempt, exactly where Allot placed it:
//!   `--nodelist` of its nodes, one task per node, `--gres=gpu:K` when every
//!   node has K GPUs; an uneven allocation is a heterogeneous job of one
//!   component per node (`--nodelist=NODE -N1 --ntasks=1 --gres=gpu:K`;
//!   Slurm starts those from its backfill scheduler). The batch script
//!   starts the command on every node with `srun` (one task per node,
//!   `--kill-on-bad-exit`), with `ALLOT_NODE` / `ALLOT_NODE_RANK` from
//!   Slurm's node name and id; Slurm sets `CUDA_VISIBLE_DEVICES`. The
//!   script ends only once Slurm has recorded the srun step's end (at
//!   most 10 s), so that the step's exit code is kept.
//!   Output is appended to the attempt's log file.
//! * Preemption (CON-2): `scancel --signal=TERM JOB` (the job's steps, i.e.
//!   the command on every node); at the end of grace `scancel
//!   --signal=KILL --full JOB` and `scancel JOB`.
//! * State: every poll interval one `squeue --jobs=<tracked ids>` (text
//!   output: Slurm 22.05's `--json` ignores filters); a job seen running is
//!   `Started` (its "pid" is the Slurm job id), a job in a final state is
//!   `Exited`: success for `COMPLETED`; otherwise the command's exit code
//!   where Slurm derived one, else the batch script's, read from the full
//!   `squeue --json` listing only then.
//! * Node health: `sinfo` every 2 s; a node Slurm marks down (or not
//!   responding) fails in Allot (MNT-2), a drained one is drained (MNT-1),
//!   and it comes back when Slurm returns it to service.
//! * Environment: `sbatch` runs with the server's own environment (less
//!   its `ALLOT_*` variables), never the workload's: the workload's `env`
//!   and Allot's `ALLOT_*` variables are set by `env` on the task's command
//!   line inside the batch script, so nothing a submitter writes can steer
//!   `sbatch` or `srun` (sbatch(1): environment options apply unless the
//!   command line overrides them).
//! * Reachability (FLEET-3, FLEET-4): when every `sinfo` has failed for
//!   the outage threshold, the cluster is taken out of service as a whole
//!   (`ExecEvent::ClusterDown`; its tracked attempts are reported lost, so
//!   their workloads are requeued elsewhere); at the first answer after
//!   that, every job of this store still alive there is stopped before the
//!   cluster returns (`ExecEvent::ClusterUp`). A separate Slurm cluster is
//!   named by its own `slurm.conf` (`SLURM_CONF` on every command); in a
//!   fleet, Allot's node names are `<cluster>/<Slurm node>`.
//! * Telemetry: every sampling interval, one `srun --overlap
//!   --jobid=<job> -w <node> -n1` step per node of each running job runs
//!   `nvidia-smi` inside the job's allocation and keeps the job's own GPUs
//!   (`telemetry`).
//! * Ownership: jobs are named `allot-<store instance>-<seq>.<attempt>` and
//!   carry `--comment=allot-store=<store instance>`. A restarted server
//!   stops every job that is its own by submitting user and comment (the
//!   survivors', and any left by a cluster outage) before it serves: a job
//!   of the same name that another user (or another store) submitted is
//!   left alone.
//!
//! One module per concern: `executor` (the [`Executor`](super::Executor)
//! itself), `launch` (the batch script and the `sbatch` command), `jobs`
//! (`squeue` polling, exit codes, `scancel`, which jobs are this store's),
//! `health` (`sinfo` node states as node events), `outage` (the cluster
//! unreachable and back), `telemetry` (GPU samples from inside the jobs)
//! and `inventory` (the
//! partition's nodes as the config's).

mod error;
mod executor;
mod health;
mod inventory;
mod jobs;
mod launch;
mod outage;
mod telemetry;

pub use error::{SlurmError, SlurmErrorKind};
pub use executor::{DEFAULT_OUTAGE_AFTER, SlurmExecutor, SlurmOptions};
pub use health::health;
pub use inventory::{SlurmNode, map_nodes, nodes, parse_sinfo};
pub use jobs::{
    ForeignJob, SqueueJob, Users, has_started, is_final, job_states, parse_job_states, parse_squeue, split_owned,
    squeue,
};
