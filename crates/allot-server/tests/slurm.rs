//! The Slurm executor against a real Slurm cluster on loopback (`.ci/slurm.sh`:
//! two fake nodes, node1 and node2, of four fake GPUs each), driven through
//! the real `allot serve --executor slurm` on SQLite: Allot decides, Slurm
//! runs exactly where Allot placed; preemption, failures and a crash of the
//! server behave as with the local executor.
//!
//! Without `ALLOT_TEST_SLURM_PARTITION` these tests fail, saying how to
//! start the cluster: they never pass without running.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{Backend, Fixture, RANK_SH, Server, WORK_SH, script, state, submit};

const HELP: &str = "ALLOT_TEST_SLURM_PARTITION is not set: the Slurm executor tests need a Slurm cluster. \
    Run `eval \"$(sudo .ci/slurm.sh)\"` (installs Slurm from Debian's packages if needed and starts a two-node \
    cluster on loopback), or set ALLOT_TEST_SLURM_PARTITION to a partition of a cluster whose nodes have GPUs";

/// Each test's server owns the Slurm nodes: one test at a time.
static SLURM: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The fake cluster's config (two nodes of two GPUs: Slurm's have four)
/// served with the Slurm executor.
/// (With an operator token in the server's environment, which no job may see.)
fn start(f: &Fixture) -> Server {
    let partition = std::env::var("ALLOT_TEST_SLURM_PARTITION").expect(HELP);
    cancel_allot_jobs();
    resume_drained_nodes();
    let args = ["--executor", "slurm", "--slurm-partition", &partition];
    Server::start_with(&f.dir, &f.db.url, &args, &[("ALLOT_TOKEN", SECRET)])
}

const SECRET: &str = "allot_operator_secret";

fn rank_files(s: &Server, id: &str, n: usize) -> Vec<Vec<String>> {
    let ck = s.dir.join("data/checkpoints").join(id);
    (0..n)
        .map(|r| {
            let text = std::fs::read_to_string(ck.join(format!("rank-{r}"))).expect("each node's task ran");
            text.trim().split('|').map(str::to_string).collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_runs_exactly_where_allot_places() {
    let _one_at_a_time = SLURM.lock().await;
    let f = Fixture::new(Backend::Sqlite, "slurm-place").await;
    let s = start(&f);
    let nodes = s.cli_json(&f.admin, &["nodes"]);
    let names: Vec<&str> = nodes.as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["node1", "node2"], "Allot's nodes take Slurm's names");
    let rank_sh = script(&f.dir, "rank.sh", RANK_SH);
    // 2 GPUs on one node; 4 over two nodes; 3 unevenly (2 + 1) over two.
    let one = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "2", "--nodes", "1", "--", &rank_sh]);
    let two = submit(&s, &f.admin, &["--account", "org/b", "--gpus", "4", "--nodes", "2", "--", &rank_sh]);
    let uneven = submit(&s, &f.admin, &["--account", "lab/x", "--gpus", "3", "--", &rank_sh]);
    for (id, n) in [(&one, 1), (&two, 2), (&uneven, 2)] {
        let done = s.wait_for(&f.admin, id, 60, |v| state(v) == "finished").await;
        let alloc = done["attempts"][0]["allocation"].as_array().unwrap().clone();
        assert_eq!(alloc.len(), n, "{done}");
        let ranks = rank_files(&s, id, n);
        let job = &ranks[0][6];
        assert!(job.parse::<u64>().is_ok(), "ran as a Slurm job: {ranks:?}");
        assert_eq!(done["attempts"][0]["pid"].as_i64().map(|p| p.to_string()).as_deref(), Some(job.as_str()));
        let env = std::fs::read_to_string(s.dir.join("data/checkpoints").join(id).join("env-0")).unwrap();
        assert!(!env.contains(SECRET) && env.contains("ALLOT_WORKLOAD_ID="), "no job sees the server's token: {env}");
        for (r, fields) in ranks.iter().enumerate() {
            let want_node = alloc[r]["node"].as_str().unwrap();
            let want_gpus = alloc[r]["gpus"].as_array().unwrap().len();
            assert_eq!(fields[0], want_node, "rank {r} on the node Allot chose: {fields:?} vs {done}");
            assert_eq!(fields[1], r.to_string());
            assert_eq!(fields[2], n.to_string());
            assert_eq!(fields[3].split(',').count(), want_gpus, "Slurm gave rank {r} its GPU count: {fields:?}");
            assert_eq!(&fields[6], job, "one job");
        }
    }
    drop(s);
    cancel_allot_jobs();
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_failures_and_preemption_follow_the_contract() {
    let _one_at_a_time = SLURM.lock().await;
    let f = Fixture::new(Backend::Sqlite, "slurm-preempt").await;
    let s = start(&f);
    let failing =
        submit(&s, &f.admin, &["--account", "org/b", "--gpus", "1", "--", "sh", "-c", "echo failing; exit 3"]);
    let failed = s.wait_for(&f.admin, &failing, 60, |v| state(v) == "failed").await;
    assert_eq!(failed["attempts"][0]["exit_code"], 3, "the command's exit code through Slurm: {failed}");
    // A two-node gang whose second node fails: the first is stopped, and
    // the code is the failed command's (Slurm's derived code), not srun's.
    let gang = submit(
        &s,
        &f.admin,
        &[
            "--account",
            "org/b",
            "--gpus",
            "4",
            "--nodes",
            "2",
            "--",
            "sh",
            "-c",
            "if [ \"$ALLOT_NODE_RANK\" = 1 ]; then exit 3; fi; sleep 60",
        ],
    );
    let failed = s.wait_for(&f.admin, &gang, 30, |v| state(v) == "failed").await;
    assert_eq!(failed["attempts"][0]["exit_code"], 3, "the failed member's code: {failed}");

    let work = script(&f.dir, "work.sh", WORK_SH);
    let victim = submit(
        &s,
        &f.admin,
        &["--account", "org/a", "--gpus", "4", "--checkpoint", "1s", "--duration", "8s", "--", &work, "8"],
    );
    s.wait_for(&f.admin, &victim, 60, |v| state(v) == "running" && v["attempts"][0]["pid"].is_number()).await;
    let ck = s.dir.join("data/checkpoints").join(&victim);
    wait_file(&ck.join("n"), 30).await;
    let inter = submit(
        &s,
        &f.admin,
        &["--account", "org/b", "--gpus", "4", "--class", "interactive", "--duration", "2s", "--", "sleep", "2"],
    );
    let v = s.wait_for(&f.admin, &victim, 60, |v| v["attempts"].as_array().is_some_and(|a| a.len() >= 2)).await;
    let first = &v["attempts"][0];
    assert_eq!(first["outcome"], "preempted", "{v}");
    assert!(first["signal_reason"].as_str().unwrap().starts_with("INT-1"), "{v}");
    let marker = std::fs::read_to_string(ck.join("marker")).expect("the victim saw SIGTERM");
    for rank in 0..2 {
        assert!(marker.contains(&format!("rank {rank} sigterm at")), "each node's task saw SIGTERM: {marker}");
    }
    let i = s.wait_for(&f.admin, &inter, 60, |v| state(v) == "finished").await;
    assert!(i["attempts"][0]["start_t"].as_i64() >= first["end_t"].as_i64(), "no GPU held by two workloads");
    let done = s.wait_for(&f.admin, &victim, 90, |v| state(v) == "finished").await;
    let log =
        std::fs::read_to_string(done["attempts"][1]["log_path"].as_str().map(|p| s.dir.join(p)).unwrap()).unwrap();
    assert!(log.contains("resumed from"), "the second attempt resumed from the checkpoint: {log}");
    assert!(!ck.join("DOUBLE").exists(), "never two attempts at once");
    drop(s);
    cancel_allot_jobs();
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_jobs_outliving_a_killed_server_are_stopped_and_requeued() {
    let _one_at_a_time = SLURM.lock().await;
    let f = Fixture::new(Backend::Sqlite, "slurm-crash").await;
    let mut s = start(&f);
    let work = script(&f.dir, "work.sh", WORK_SH);
    let id = submit(
        &s,
        &f.admin,
        &["--account", "org/a", "--gpus", "2", "--checkpoint", "1s", "--duration", "6s", "--", &work, "6"],
    );
    let v = s.wait_for(&f.admin, &id, 60, |v| state(v) == "running" && v["attempts"][0]["pid"].is_number()).await;
    let job = v["attempts"][0]["pid"].as_i64().unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    s.kill9();
    assert!(slurm_job_state(job).as_deref() == Some("RUNNING"), "the Slurm job outlived the server");
    s.restart();
    let done = s.wait_for(&f.admin, &id, 90, |v| state(v) == "finished").await;
    assert_eq!(done["attempts"][0]["outcome"], "lost", "{done}");
    assert_ne!(slurm_job_state(job).as_deref(), Some("RUNNING"), "the old job was stopped");
    let ck = s.dir.join("data/checkpoints").join(&id);
    let marker = std::fs::read_to_string(ck.join("marker")).unwrap_or_default();
    assert!(marker.contains("sigterm"), "the survivor was signalled before being requeued: {marker:?}");
    assert!(!ck.join("DOUBLE").exists(), "never two attempts at once");
    drop(s);
    cancel_allot_jobs();
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_node_states_reach_allot() {
    let _one_at_a_time = SLURM.lock().await;
    let f = Fixture::new(Backend::Sqlite, "slurm-nodes").await;
    let s = start(&f);
    let work = script(&f.dir, "work.sh", WORK_SH);
    let id = submit(
        &s,
        &f.admin,
        &["--account", "org/a", "--gpus", "2", "--nodes", "1", "--checkpoint", "1s", "--", &work, "30"],
    );
    let v = s.wait_for(&f.admin, &id, 60, |v| state(v) == "running" && v["attempts"][0]["pid"].is_number()).await;
    let node = v["attempts"][0]["allocation"][0]["node"].as_str().unwrap().to_string();
    wait_file(&s.dir.join("data/checkpoints").join(&id).join("n"), 30).await;
    // An operator drains the node in Slurm: Allot drains it too (MNT-1),
    // preempting the workload, which resumes on the other node.
    scontrol_node(&node, &["State=DRAIN", "Reason=allot-test"]);
    let v = s.wait_for(&f.admin, &id, 60, |v| v["attempts"].as_array().is_some_and(|a| a.len() >= 2)).await;
    assert!(v["attempts"][0]["signal_reason"].as_str().unwrap().starts_with("MNT-1"), "{v}");
    assert_eq!(v["attempts"][0]["outcome"], "preempted", "{v}");
    let v = s.wait_for(&f.admin, &id, 60, |v| v["attempts"][1]["pid"].is_number()).await;
    assert_ne!(v["attempts"][1]["allocation"][0]["node"], node.as_str(), "restarted elsewhere: {v}");
    let health = |s: &Server| -> String {
        let nodes = s.cli_json(&f.admin, &["nodes"]);
        let n = nodes.as_array().unwrap().iter().find(|n| n["name"] == node.as_str()).unwrap().clone();
        n["health"].as_str().unwrap().to_string()
    };
    assert!(matches!(health(&s).as_str(), "draining" | "drained"), "{}", health(&s));
    // Back in service in Slurm, back in Allot.
    scontrol_node(&node, &["State=RESUME"]);
    for _ in 0..100 {
        if health(&s) == "up" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(health(&s), "up");
    let (_, events) = s.http("GET", "/v1/workloads", Some(&f.admin), None).await;
    assert!(events.is_array());
    drop(s);
    cancel_allot_jobs();
    f.finish().await;
}

/// Waits until the job has checkpointed once.
async fn wait_file(path: &std::path::Path, secs: u64) {
    for _ in 0..secs * 10 {
        if path.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{} did not appear within {secs} s", path.display());
}

/// Cancels what earlier tests' servers left in Slurm (a stopped server
/// leaves its jobs to its next start) and waits until they are gone.
fn cancel_allot_jobs() {
    for _ in 0..100 {
        let out = std::process::Command::new("squeue").args(["--json", "--states=all"]).output().expect("run squeue");
        let v: Value = serde_json::from_slice(&out.stdout).expect("squeue --json");
        let live: Vec<String> = v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|j| j["name"].as_str().is_some_and(|n| n.starts_with("allot-")))
            .filter(|j| matches!(j["job_state"].as_str(), Some("PENDING" | "RUNNING" | "COMPLETING" | "CONFIGURING")))
            .map(|j| j["job_id"].to_string())
            .collect();
        if live.is_empty() {
            return;
        }
        let _ = std::process::Command::new("scancel").args(&live).output();
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("Slurm jobs of earlier tests would not go away");
}

/// Returns drained nodes to service (a failed test may leave one drained).
fn resume_drained_nodes() {
    let out = std::process::Command::new("sinfo")
        .args(["--noheader", "--Node", "--states=drain,draining,drained", "--format=%N"])
        .output()
        .expect("run sinfo");
    for node in String::from_utf8_lossy(&out.stdout).lines().map(str::trim).filter(|n| !n.is_empty()) {
        scontrol_node(node, &["State=RESUME"]);
    }
}

fn scontrol_node(node: &str, args: &[&str]) {
    let out = std::process::Command::new("scontrol")
        .args(["update", &format!("NodeName={node}")])
        .args(args)
        .output()
        .expect("run scontrol");
    assert!(out.status.success(), "scontrol update {node} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// What `squeue` says of a job now.
fn slurm_job_state(job: i64) -> Option<String> {
    let out = std::process::Command::new("squeue").args(["--json", "--states=all"]).output().ok()?;
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v["jobs"].as_array()?.iter().find(|j| j["job_id"] == job).and_then(|j| j["job_state"].as_str().map(str::to_string))
}
