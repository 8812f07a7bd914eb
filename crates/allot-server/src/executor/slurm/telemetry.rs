//! Telemetry of Slurm jobs, from inside their allocations: every sampling
//! interval, one step per node of each running job,
//! `srun --overlap --jobid=<job> [--het-group=<i>] -w <node> -N1 -n1`,
//! runs `nvidia-smi` (`ALLOT_NVIDIA_SMI`, else `nvidia-smi` on the node's
//! `PATH`: the program must be there on every compute node) with
//! [`QUERY`] and prints the job's GPUs on that node as Slurm gave them
//! (`SLURM_STEP_GPUS`).
//!
//! * The job's GPUs: where the step sees every GPU of the node (no cgroup
//!   device constraint), those whose index Slurm gave the job; where it sees
//!   only the job's (`ConstrainDevices=yes`, renumbered from 0), all of
//!   them. A sample's `index` is the GPU's index as the step's
//!   `nvidia-smi` numbers it: Slurm, not Allot, picks the indices on a node.
//! * The step always ends with code 0 (`nvidia-smi`'s own status is
//!   printed and read): Slurm's derived exit code of a job is the highest
//!   of its steps', and a failed sample must never change how the attempt
//!   ends. `--overlap` shares the job's CPUs and GPUs with its running
//!   step instead of waiting for them.
//! * Why not Slurm's own GPU accounting: 22.05 gathers `gres/gpuutil` and
//!   `gres/gpumem` (TRES usage in `sstat` / `sacct`) only when slurmd is
//!   built with NVML (the `gpu/nvml` plugin; Debian's packages ship
//!   `gpu/generic` only), `AccountingStorageTRES` names them and a
//!   `jobacct_gather` plugin runs; `sacct` also needs slurmdbd. A step
//!   works on any cluster whose nodes have `nvidia-smi`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::SlurmOptions;
use super::jobs::Slots;
use crate::executor::telemetry::{
    GpuSample, GpuUsage, QUERY, SampleError, Throttle, parse_usage, query_timeout, select,
};
use crate::executor::{AttemptKey, ExecEvent};

/// The step's program (`sh -c`, `$0` the `nvidia-smi` program, then its
/// arguments): the job's GPUs on the node, `nvidia-smi`'s answer, its
/// status; the step itself always succeeds.
const STEP_SH: &str =
    "echo \"allot-gpus ${SLURM_STEP_GPUS-${SLURM_JOB_GPUS-}}\"; \"$0\" \"$@\"; echo \"allot-exit $?\"; exit 0";

/// What one telemetry step printed.
#[derive(Clone, Debug, PartialEq)]
pub struct StepOutput {
    /// The job's GPU indices on the node as Slurm gave them (empty: not said).
    pub job_gpus: Vec<u32>,
    /// `nvidia-smi`'s lines.
    pub smi: String,
    /// `nvidia-smi`'s exit code.
    pub exit: i32,
}

/// Reads a step's output; `None` when it is not what [`STEP_SH`] prints.
pub fn parse_step(stdout: &str) -> Option<StepOutput> {
    let mut lines = stdout.lines();
    let gpus = lines.next()?.strip_prefix("allot-gpus")?.trim();
    let job_gpus = if gpus.is_empty() {
        Vec::new()
    } else {
        gpus.split(',').map(|i| i.trim().parse().ok()).collect::<Option<Vec<u32>>>()?
    };
    let rest: Vec<&str> = lines.collect();
    let (last, smi) = rest.split_last()?;
    let exit = last.strip_prefix("allot-exit ")?.trim().parse().ok()?;
    Some(StepOutput { job_gpus, smi: smi.join("\n"), exit })
}

/// The job's GPUs among those the step's `nvidia-smi` reports (see the
/// module docs): those of Slurm's indices where all are reported, else
/// all of them where the step sees exactly as many (renumbered), else an
/// error naming the first missing one.
pub fn job_gpus(
    node: &str,
    job: &[u32],
    usage: &[GpuUsage],
    bad: &[SampleError],
) -> Result<Vec<GpuSample>, SampleError> {
    let all: Vec<u32> = usage.iter().map(|g| g.index).collect();
    if job.is_empty() {
        if all.is_empty() && !bad.is_empty() {
            let text = bad.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
            return Err(SampleError::Step { node: node.to_string(), text });
        }
        return select(node, &all, usage, bad);
    }
    match select(node, job, usage, bad) {
        Ok(s) => Ok(s),
        Err(_) if usage.len() == job.len() && bad.is_empty() => select(node, &all, usage, bad),
        Err(e) => Err(e),
    }
}

/// The `srun` step that samples `node` (Allot's name) of `job`.
fn step_command(
    opts: &SlurmOptions,
    program: &str,
    job: u64,
    het: Option<usize>,
    node: &str,
) -> tokio::process::Command {
    let mut cmd = opts.command("srun");
    for k in crate::executor::server_only_env(true) {
        cmd.env_remove(k);
    }
    cmd.arg("--overlap").arg(format!("--jobid={job}"));
    if let Some(g) = het {
        cmd.arg(format!("--het-group={g}"));
    }
    cmd.args(["-w", opts.slurm_name(node), "-N1", "-n1", "--quiet", "/bin/sh", "-c", STEP_SH, program])
        .args(QUERY)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// One node's sample of one job.
async fn sample_node(
    opts: &SlurmOptions,
    program: &str,
    job: u64,
    het: Option<usize>,
    node: &str,
    timeout: Duration,
) -> Result<Vec<GpuSample>, SampleError> {
    let srun = || format!("srun --overlap --jobid={job} -w {}", opts.slurm_name(node));
    let out = match tokio::time::timeout(timeout, step_command(opts, program, job, het, node).output()).await {
        Err(_) => return Err(SampleError::Timeout { program: srun(), after: timeout }),
        Ok(Err(source)) => return Err(SampleError::Spawn { program: srun(), source }),
        Ok(Ok(o)) => o,
    };
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if !out.status.success() {
        return Err(SampleError::Exit { program: srun(), status: out.status.to_string(), stderr });
    }
    step_result(program, node, &String::from_utf8_lossy(&out.stdout), stderr)
}

/// What a step that ran printed, as the node's GPUs of the job: the
/// program's exit code 127 (the shell did not find it) is
/// [`SampleError::no_program`], any other non-zero code an error with its
/// `stderr`.
fn step_result(program: &str, node: &str, stdout: &str, stderr: String) -> Result<Vec<GpuSample>, SampleError> {
    let step =
        parse_step(stdout).ok_or_else(|| SampleError::Step { node: node.to_string(), text: stdout.to_string() })?;
    let on_node = || format!("{program} on node {node}");
    match step.exit {
        0 => {}
        127 => {
            let source = std::io::Error::new(std::io::ErrorKind::NotFound, stderr);
            return Err(SampleError::Spawn { program: on_node(), source });
        }
        code => return Err(SampleError::Exit { program: on_node(), status: format!("exit status: {code}"), stderr }),
    }
    let (usage, bad) = parse_usage(&step.smi);
    job_gpus(node, &step.job_gpus, &usage, &bad)
}

/// A running job to sample: its attempt, workload, job id, nodes, and
/// whether it is heterogeneous (one component per node).
struct Sampled {
    key: AttemptKey,
    workload: String,
    job: u64,
    nodes: Vec<String>,
    het: bool,
}

/// The Slurm executor's sampler: every `every`, each started job not
/// being killed, all its nodes at once; a job whose every node answered is
/// reported, others logged (throttled) and skipped. Ends when the
/// scheduler is gone.
pub(super) async fn sample(
    opts: Arc<SlurmOptions>,
    slots: Slots,
    every: Duration,
    events: mpsc::UnboundedSender<ExecEvent>,
) {
    let program = crate::executor::inventory::program();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut throttle = Throttle::default();
    let mut without: std::collections::BTreeSet<String> = Default::default();
    loop {
        tick.tick().await;
        if events.is_closed() {
            return;
        }
        let jobs = running_jobs(&slots, &mut throttle);
        let results = sample_jobs(&opts, &program, &jobs, query_timeout(every)).await;
        let t = crate::clock::now();
        for (s, parts) in jobs.iter().zip(results) {
            let mut gpus = Vec::new();
            let mut failed = parts.len() != s.nodes.len();
            for (node, got) in parts {
                match got {
                    Ok(g) => gpus.extend(g),
                    Err(e) if e.no_program() => {
                        if without.insert(node.clone()) {
                            tracing::info!(node, %program, "no nvidia-smi on the node: attempts there are not measured");
                        }
                        failed = true;
                        break;
                    }
                    Err(e) => {
                        throttle.warn(s.key, &s.workload, Some(&node), &e);
                        failed = true;
                        break;
                    }
                }
            }
            if !failed {
                let _ = events.send(ExecEvent::Telemetry { key: s.key, t, gpus });
            }
        }
    }
}

/// The jobs to sample now: started and not being killed (the throttle
/// forgets the attempts no longer tracked).
fn running_jobs(slots: &Slots, throttle: &mut Throttle) -> Vec<Sampled> {
    let s = slots.lock().expect("slurm slots");
    throttle.retain(|k| s.contains_key(k));
    s.iter()
        .filter(|(_, slot)| slot.started && !slot.kill)
        .filter_map(|(k, slot)| {
            let (workload, nodes, het) = (slot.workload.clone(), slot.nodes.clone(), slot.het);
            Some(Sampled { key: *k, workload, job: slot.job?, nodes, het })
        })
        .collect()
}

/// One node's answer: its name and its GPUs of the job, or why not.
type NodeSample = (String, Result<Vec<GpuSample>, SampleError>);

/// Every node of every job at once: per job, its nodes' answers in node
/// order.
async fn sample_jobs(
    opts: &Arc<SlurmOptions>,
    program: &str,
    jobs: &[Sampled],
    timeout: Duration,
) -> Vec<Vec<NodeSample>> {
    let mut steps = JoinSet::new();
    for (j, s) in jobs.iter().enumerate() {
        for (i, node) in s.nodes.iter().enumerate() {
            let (opts, program, node, het, job) = (opts.clone(), program.to_string(), node.clone(), s.het, s.job);
            steps.spawn(async move {
                let got = sample_node(&opts, &program, job, het.then_some(i), &node, timeout).await;
                (j, i, (node, got))
            });
        }
    }
    let mut results: Vec<Vec<(usize, NodeSample)>> = jobs.iter().map(|_| Vec::new()).collect();
    while let Some(done) = steps.join_next().await {
        if let Ok((j, i, answer)) = done {
            results[j].push((i, answer));
        }
    }
    results
        .into_iter()
        .map(|mut parts| {
            parts.sort_by_key(|(i, _)| *i);
            parts.into_iter().map(|(_, a)| a).collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_steps_output() {
        let out = "allot-gpus 1,3\n1, 80, 100, 200\n3, 40, 50, 200\nallot-exit 0\n";
        let step = parse_step(out).unwrap();
        assert_eq!(step, StepOutput { job_gpus: vec![1, 3], smi: "1, 80, 100, 200\n3, 40, 50, 200".into(), exit: 0 });
        let failed = parse_step("allot-gpus \nallot-exit 127\n").unwrap();
        assert_eq!((failed.job_gpus.len(), failed.exit), (0, 127));
        for bad in ["", "0, 1, 2, 3\n", "allot-gpus 0\n0, 1, 2, 3\n", "allot-gpus x\nallot-exit 0\n"] {
            assert_eq!(parse_step(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_step_without_the_program_is_nothing_to_measure_and_other_failures_are_errors() {
        let ok = step_result("smi", "node1", "allot-gpus 1\n0, 5, 1, 8\n1, 60, 2, 8\nallot-exit 0\n", String::new());
        assert_eq!(ok.unwrap().iter().map(|g| (g.index, g.util)).collect::<Vec<_>>(), [(1, 0.6)]);
        let missing = step_result("smi", "node1", "allot-gpus 1\nallot-exit 127\n", "sh: 1: smi: not found".into());
        let e = missing.unwrap_err();
        assert!(e.no_program() && e.to_string().contains("smi on node node1"), "{e}");
        let failed = step_result("smi", "node1", "allot-gpus 1\nallot-exit 6\n", "NVML: unknown error".into());
        let e = failed.unwrap_err();
        assert!(!e.no_program() && e.to_string().contains("exit status: 6: NVML: unknown error"), "{e}");
        let e = step_result("smi", "node1", "something else\n", String::new()).unwrap_err().to_string();
        assert!(e.contains("telemetry step on node node1 printed \"something else"), "{e}");
    }

    #[test]
    fn keeps_the_jobs_gpus_whether_or_not_the_step_sees_the_whole_node() {
        let whole = parse_usage("0, 10, 1, 8\n1, 20, 1, 8\n2, 90, 1, 8\n3, 70, 1, 8\n");
        let picked = |job: &[u32], (usage, bad): &(Vec<GpuUsage>, Vec<SampleError>)| {
            job_gpus("node1", job, usage, bad).map(|g| g.iter().map(|s| (s.index, s.util)).collect::<Vec<_>>())
        };
        assert_eq!(picked(&[2, 3], &whole).unwrap(), [(2, 0.9), (3, 0.7)], "the whole node: Slurm's indices");
        let constrained = parse_usage("0, 55, 1, 8\n1, 65, 1, 8\n");
        assert_eq!(picked(&[2, 3], &constrained).unwrap(), [(0, 0.55), (1, 0.65)], "only the job's, renumbered");
        assert_eq!(picked(&[], &constrained).unwrap().len(), 2, "Slurm did not say: what the step sees");
        let err = picked(&[2, 3], &parse_usage("0, 55, 1, 8\n")).unwrap_err().to_string();
        assert!(err.contains("node node1 reports no GPU 2"), "{err}");
        let err = picked(&[], &parse_usage("garbage\n")).unwrap_err().to_string();
        assert!(err.contains("garbage"), "a step whose every line is bad is an error naming it: {err}");
    }

    #[test]
    fn the_step_shares_the_jobs_allocation_on_one_node_and_always_succeeds() {
        let opts = SlurmOptions { cluster: Some("c1".into()), ..Default::default() };
        let cmd = step_command(&opts, "/opt/nvidia-smi", 42, Some(1), "c1/node2");
        let args: Vec<String> = cmd.as_std().get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        let head =
            ["--overlap", "--jobid=42", "--het-group=1", "-w", "node2", "-N1", "-n1", "--quiet", "/bin/sh", "-c"];
        assert_eq!(&args[..head.len()], head, "{args:?}");
        assert!(args[head.len()].ends_with("exit 0"), "the step never fails the job: {args:?}");
        assert_eq!(&args[head.len() + 1..], ["/opt/nvidia-smi", QUERY[0], QUERY[1]]);
        let plain = step_command(&SlurmOptions::default(), "nvidia-smi", 7, None, "node1");
        assert!(!plain.as_std().get_args().any(|a| a.to_string_lossy().starts_with("--het-group")));
    }
}
