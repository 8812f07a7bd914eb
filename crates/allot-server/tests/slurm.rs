//! The Slurm executor against a real Slurm cluster on loopback (`.ci/slurm.sh`:
//! two fake nodes, node1 and node2, of four fake GPUs each), driven through
//! the real `allot serve --executor slurm` on SQLite: Allot decides, Slurm
//! runs exactly where Allot placed; preemption, failures and a crash of the
//! server behave as with the local executor.
//!
//! Without `ALLOT_TEST_SLURM_PARTITION` these tests fail, saying how to
//! start the cluster: they never pass without running.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use support::{
    Backend, CONFIG, Fixture, RANK_SH, Server, WORK_SH, assert_nodes_up, assert_workdir_missing, fake_nvidia_smi,
    script, set_gpus, state, store_instance, submit, wait_file,
};

const HELP: &str = "SLURM_CONF or ALLOT_TEST_SLURM_PARTITION is not set: the Slurm executor tests run only \
    against the private cluster `.ci/slurm.sh` starts (two fake nodes on free loopback ports, its own config, munge \
    and state directory; the host's Slurm is never touched). Run `eval \"$(sudo .ci/slurm.sh)\"` first";

/// Each test's server owns the Slurm nodes: one test at a time.
static SLURM: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The private cluster of `.ci/slurm.sh`, and nothing else: the tests
/// drain and resume nodes and run jobs, which they must never do on a
/// cluster people use.
fn private_cluster() -> String {
    let (Ok(conf), Ok(partition)) = (std::env::var("SLURM_CONF"), std::env::var("ALLOT_TEST_SLURM_PARTITION")) else {
        panic!("{HELP}")
    };
    let text = std::fs::read_to_string(&conf).unwrap_or_else(|e| panic!("cannot read SLURM_CONF={conf}: {e}"));
    assert!(
        text.starts_with("# Allot's private test cluster"),
        "SLURM_CONF={conf} is not a cluster .ci/slurm.sh made: the Slurm tests refuse to run on it"
    );
    partition
}

/// The fake cluster's config (two nodes of two GPUs: Slurm's have four)
/// served with the Slurm executor, and the guard that cleans up after the
/// test, whatever its outcome.
/// (With an operator token in the server's environment, which no job may see.)
async fn start(f: &Fixture) -> (Server, Own) {
    start_env(f, &[]).await
}

/// [`start`] with more environment for the server.
async fn start_env(f: &Fixture, env: &[(&str, &str)]) -> (Server, Own) {
    let partition = private_cluster();
    let args = ["--executor", "slurm", "--slurm-partition", &partition];
    let s = Server::start_with(&f.dir, &f.db.url, &args, &[&[("ALLOT_TOKEN", SECRET)], env].concat());
    let own = Own { comment: format!("allot-store={}", store_instance(&f.db.url).await), drained: Vec::new() };
    (s, own)
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
    let (s, mut own) = start(&f).await;
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
        let mode = |p: &std::path::Path| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(p).map(|m| m.permissions().mode() & 0o777).unwrap_or(0)
        };
        let log = done["attempts"][0]["log_path"].as_str().map(|p| s.dir.join(p)).unwrap();
        assert_eq!(mode(&log), 0o600, "the job's log is private: {}", log.display());
        assert_eq!(mode(&s.dir.join("data/checkpoints").join(id)), 0o700, "the checkpoint directory is private");
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
    own.clean();
    f.finish().await;
}

/// Says who it runs as and with what environment, then runs until `$1`
/// exists (so that `squeue` sees it).
const WHO_SH: &str = r#"#!/bin/sh
{ echo "user=$(id -un) uid=$(id -u) home=$HOME"; env; } > "$ALLOT_CHECKPOINT_DIR/who.tmp"
mv "$ALLOT_CHECKPOINT_DIR/who.tmp" "$ALLOT_CHECKPOINT_DIR/who"
i=0
while [ ! -e "$1" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
"#;

/// ID-1 on Slurm: a root server submits a person's job as that person
/// (`sbatch --uid/--gid`), Slurm runs and lists it as theirs, and the
/// job's environment is the workload's only. The person is `nobody`
/// (uid 65534, on every Debian host: Slurm's nodes resolve it as the
/// server does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_runs_a_persons_job_as_that_person() {
    let _one_at_a_time = SLURM.lock().await;
    assert!(nix::unistd::geteuid().is_root(), "a server that submits jobs as people runs as root: run as root");
    let partition = private_cluster();
    let f = Fixture::new(Backend::Sqlite, "slurm-person").await;
    std::fs::write(f.dir.join("cluster.toml"), CONFIG).unwrap();
    let person = support::token(&f.db.url, "researcher", "svc-nobody", &["--project", "org/a", "--user", "nobody"]);
    let args = ["--executor", "slurm", "--slurm-partition", &partition];
    let secrets = [("ALLOT_TOKEN", SECRET), ("AWS_SECRET_ACCESS_KEY", "server-secret")];
    let s = Server::start_multi_user(&f.dir, &f.db.url, &[], &args, &secrets);
    let mut own = Own { comment: format!("allot-store={}", store_instance(&f.db.url).await), drained: Vec::new() };
    let who = script(&f.dir, "who.sh", WHO_SH);
    let release = f.dir.join("release");
    let id = submit(
        &s,
        &person,
        &["--account", "org/a", "--gpus", "1", "--env", "MINE=yes", "--", &who, &release.display().to_string()],
    );
    let running = s.wait_for(&person, &id, 60, |v| state(v) == "running" && v["attempts"][0]["pid"].is_i64()).await;
    let job = running["attempts"][0]["pid"].as_i64().unwrap();
    let ck = s.dir.join("data/checkpoints").join(&id);
    wait_file(&ck.join("who"), 60).await;
    let out = std::process::Command::new("squeue")
        .args(["--noheader", "--states=all", "--format=%u", &format!("--jobs={job}")])
        .output()
        .expect("run squeue");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "nobody", "Slurm lists the job as the person's");
    std::fs::write(&release, "").unwrap();
    let done = s.wait_for(&person, &id, 60, |v| state(v) == "finished" || state(v) == "failed").await;
    assert_eq!(state(&done), "finished", "{done}\n{}", s.log());
    let seen = std::fs::read_to_string(ck.join("who")).unwrap();
    assert!(seen.starts_with("user=nobody uid=65534 "), "the job ran as the person: {seen}");
    assert!(seen.contains("MINE=yes"), "the workload's own environment: {seen}");
    for secret in [SECRET, "server-secret"] {
        assert!(!seen.contains(secret), "the server's environment reached the job: {seen}");
    }
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&ck).unwrap().uid(), 65534, "the checkpoint directory is the person's");
    drop(s);
    own.clean();
    f.finish().await;
}

/// Notes the GPUs Slurm gave its node (`CUDA_VISIBLE_DEVICES`), then runs
/// until `$1` exists.
const HOLD_SH: &str = r#"#!/bin/sh
echo "$CUDA_VISIBLE_DEVICES" > "$ALLOT_CHECKPOINT_DIR/cvd-$ALLOT_NODE_RANK"
while [ ! -e "$1" ]; do sleep 0.2; done
"#;

/// GPU telemetry from inside the jobs: one `srun --overlap` step per node
/// runs the fake `nvidia-smi` (this host's, named by its absolute path:
/// the loopback nodes are this host) and keeps the GPUs Slurm gave the
/// job, on one node and on an uneven (heterogeneous) job; the jobs end as
/// their commands do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_measures_the_jobs_gpus_from_inside_the_job() {
    let _one_at_a_time = SLURM.lock().await;
    let f = Fixture::new(Backend::Sqlite, "slurm-telemetry").await;
    std::fs::write(f.dir.join("cluster.toml"), format!("{CONFIG}\n[telemetry]\ninterval = \"1s\"\n")).unwrap();
    let (smi, gpus) = fake_nvidia_smi(&f.dir);
    // Each GPU of a node has its own utilization: the mean says which were kept.
    let util = [0.9, 0.7, 0.3, 0.1];
    set_gpus(&gpus, &[(0, 90, 100), (1, 70, 200), (2, 30, 300), (3, 10, 400)]);
    let (s, mut own) = start_env(&f, &[("ALLOT_NVIDIA_SMI", &smi)]).await;
    let (hold, done) = (script(&f.dir, "hold.sh", HOLD_SH), f.dir.join("done"));
    let done_arg = done.display().to_string();
    let one = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "1", "--nodes", "1", "--", &hold, &done_arg]);
    let uneven = submit(&s, &f.admin, &["--account", "org/b", "--gpus", "3", "--", &hold, &done_arg]);
    for (id, nodes) in [(&one, 1), (&uneven, 2)] {
        let measured = |v: &Value| v["attempts"][0]["telemetry"]["samples"].as_u64().is_some_and(|n| n >= 2);
        let v = wait_slurm(&s, &f.admin, id, 60, measured).await;
        assert_eq!(v["attempts"][0]["allocation"].as_array().map(Vec::len), Some(nodes), "{v}");
        let ck = s.dir.join("data/checkpoints").join(id);
        let visible: Vec<usize> = (0..nodes)
            .flat_map(|r| {
                let text = std::fs::read_to_string(ck.join(format!("cvd-{r}"))).expect("each node's task ran");
                text.trim().split(',').map(|i| i.parse::<usize>().expect("an index")).collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(visible.len(), if nodes == 1 { 1 } else { 3 }, "{visible:?}");
        let want = visible.iter().map(|&i| util[i]).sum::<f64>() / visible.len() as f64;
        let got = v["attempts"][0]["telemetry"]["util_mean"].as_f64().unwrap();
        assert!((got - want).abs() < 1e-9, "GPUs {visible:?} of the job: mean {want}, measured {got}: {v}");
    }
    std::fs::write(&done, "").unwrap();
    for id in [&one, &uneven] {
        let v = wait_slurm(&s, &f.admin, id, 60, |v| state(v) == "finished").await;
        assert_eq!(v["attempts"][0]["exit_code"], 0, "the telemetry steps never change how a job ends: {v}");
        assert!(v["workload"]["measured_util"].as_f64().is_some(), "{v}");
    }
    assert!(!s.log().contains("failed to sample"), "{}", s.log());
    drop(s);
    own.clean();
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_failures_and_preemption_follow_the_contract() {
    let _one_at_a_time = SLURM.lock().await;
    let f = Fixture::new(Backend::Sqlite, "slurm-preempt").await;
    let (s, mut own) = start(&f).await;
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
    let submitted = std::time::Instant::now();
    let failed = wait_slurm(&s, &f.admin, &gang, 30, |v| state(v) == "failed").await;
    eprintln!("the gang failed {:.1} s after its submission", submitted.elapsed().as_secs_f64());
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
    own.clean();
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_jobs_outliving_a_killed_server_are_stopped_and_requeued() {
    let _one_at_a_time = SLURM.lock().await;
    let f = Fixture::new(Backend::Sqlite, "slurm-crash").await;
    let (mut s, mut own) = start(&f).await;
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
    // Another user's job with exactly the survivor's name: not Allot's to stop.
    let name = job_name(job).expect("the survivor's name");
    let foreign = Foreign::submit(&name);
    s.restart();
    let done = wait_slurm(&s, &f.admin, &id, 90, |v| state(v) == "finished").await;
    assert_eq!(done["attempts"][0]["outcome"], "lost", "{done}");
    assert_ne!(slurm_job_state(job).as_deref(), Some("RUNNING"), "the old job was stopped");
    assert_eq!(
        slurm_job_state(foreign.0).as_deref(),
        Some("RUNNING"),
        "the foreign job of the same name survived recovery\n{}",
        s.log()
    );
    assert!(s.log().contains("is not its own: left alone"), "recovery said why it left the job alone");
    let ck = s.dir.join("data/checkpoints").join(&id);
    let marker = std::fs::read_to_string(ck.join("marker")).unwrap_or_default();
    assert!(marker.contains("sigterm"), "the survivor was signalled before being requeued: {marker:?}");
    assert!(!ck.join("DOUBLE").exists(), "never two attempts at once");
    drop(s);
    own.clean();
    assert_eq!(slurm_job_state(foreign.0).as_deref(), Some("RUNNING"), "the foreign job survived the clean-up");
    drop(foreign);
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_node_states_reach_allot() {
    let _one_at_a_time = SLURM.lock().await;
    let f = Fixture::new(Backend::Sqlite, "slurm-nodes").await;
    let (s, mut own) = start(&f).await;
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
    own.drain(&node);
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
    own.resume(&node);
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
    own.clean();
    f.finish().await;
}

/// Where a workload runs under Slurm: `--chdir` reaches sbatch and srun,
/// and each task enters the directory on its node, where a relative
/// program is found. A directory missing on the compute node ends the
/// workload as MNT-4 (launch-failed, no retry spent) and never drains the
/// node, however many times in a row (the nodes' file system is this
/// host's: the cluster runs on loopback).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_runs_in_the_workdir_and_a_missing_one_fails_at_launch() {
    let _one_at_a_time = SLURM.lock().await;
    let f = Fixture::new(Backend::Sqlite, "slurm-workdir").await;
    let (s, mut own) = start(&f).await;
    let proj = f.dir.join("proj");
    std::fs::create_dir_all(&proj).unwrap();
    script(&proj, "run.sh", "#!/bin/sh\necho \"$(pwd -P)\" > \"$ALLOT_CHECKPOINT_DIR/where-$ALLOT_NODE_RANK\"\n");
    let id = submit(
        &s,
        &f.admin,
        &["--account", "org/a", "--gpus", "4", "--nodes", "2", "--chdir", "proj", "--", "./run.sh"],
    );
    let done = wait_slurm(&s, &f.admin, &id, 60, |v| state(v) == "finished").await;
    assert_eq!(done["workload"]["workdir"], proj.display().to_string(), "{done}");
    let real = proj.canonicalize().unwrap().display().to_string();
    for rank in 0..2 {
        let p = s.dir.join("data/checkpoints").join(&id).join(format!("where-{rank}"));
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}\n{done}", p.display()));
        assert_eq!(text.trim(), real, "rank {rank} ran in the workload's directory");
    }
    // Missing on the node: found at launch, not at submission.
    let gone = f.dir.join("gone");
    for i in 0..4 {
        let id = submit(
            &s,
            &f.admin,
            &["--account", "org/a", "--gpus", "2", "--nodes", "1", "--retries", "2", "--chdir", "gone", "--", "true"],
        );
        let v = wait_slurm(&s, &f.admin, &id, 60, |v| state(v) == "failed").await;
        assert_workdir_missing(&v, &gone, "node");
        let record =
            v["attempts"][0]["log_path"].as_str().map(|p| format!("{}.exit", s.dir.join(p).display())).unwrap();
        assert!(!Path::new(&record).exists(), "try {i}: the executor removed the exit record it read");
    }
    assert_nodes_up(&s, &f.admin);
    let after = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "2", "--nodes", "1", "--", "true"]);
    wait_slurm(&s, &f.admin, &after, 60, |v| state(v) == "finished").await;
    drop(s);
    own.clean();
    f.finish().await;
}

/// What one test did to the cluster, undone when it ends (also when it
/// fails, so one failure never cascades into the next test): its own jobs
/// (submitted by this user with its store's comment) cancelled, the nodes
/// it drained resumed. Nothing else on the cluster is touched.
struct Own {
    comment: String,
    drained: Vec<String>,
}

impl Own {
    fn drain(&mut self, node: &str) {
        self.drained.push(node.to_string());
        scontrol_node(node, &["State=DRAIN", "Reason=allot-test"]);
    }

    fn resume(&mut self, node: &str) {
        self.drained.retain(|n| n != node);
        scontrol_node(node, &["State=RESUME"]);
    }

    /// This test's jobs that have not ended (its store's comment: whoever
    /// they run as).
    fn live_jobs(&self) -> Vec<String> {
        let out = std::process::Command::new("squeue")
            .args(["--noheader", "--states=PENDING,RUNNING,COMPLETING,CONFIGURING", "--format=%A|%U|%k"])
            .output()
            .expect("run squeue");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let mut f = l.trim().splitn(3, '|');
                let (id, _user, comment) = (f.next()?, f.next()?, f.next()?);
                (comment == self.comment).then(|| id.to_string())
            })
            .collect()
    }

    /// Cancels this test's jobs and waits until they are gone; resumes
    /// what it drained. Panics (outside a panic) if they will not go.
    fn clean(&mut self) {
        for node in std::mem::take(&mut self.drained) {
            scontrol_node(node.as_str(), &["State=RESUME"]);
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let live = self.live_jobs();
            if live.is_empty() {
                return;
            }
            if std::time::Instant::now() > deadline {
                let msg = format!("this test's Slurm jobs {live:?} would not go away:\n{}", squeue_all());
                if std::thread::panicking() {
                    eprintln!("{msg}");
                    return;
                }
                panic!("{msg}");
            }
            let _ = std::process::Command::new("scancel").args(&live).output();
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Own {
    fn drop(&mut self) {
        self.clean();
    }
}

/// A job of another user (`nobody`), cancelled by its id when dropped.
struct Foreign(i64);

impl Foreign {
    fn submit(name: &str) -> Foreign {
        let out = std::process::Command::new("runuser")
            .args(["-u", "nobody", "--", "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null"])
            .arg(format!("--job-name={name}"))
            .args(["--gres=gpu:1", "--wrap=sleep 600"])
            .output()
            .expect("run sbatch as nobody");
        assert!(out.status.success(), "sbatch as nobody: {}", String::from_utf8_lossy(&out.stderr));
        let id: i64 = String::from_utf8_lossy(&out.stdout).trim().parse().expect("a job id");
        for _ in 0..100 {
            if slurm_job_state(id).as_deref() == Some("RUNNING") {
                return Foreign(id);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the foreign job {id} did not start:\n{}", squeue_all());
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        let _ = std::process::Command::new("scancel").arg(self.0.to_string()).output();
    }
}

/// `wait_for` that prints what Slurm says when the deadline passes.
async fn wait_slurm(s: &Server, token: &str, id: &str, secs: u64, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let (code, v) = s.http("GET", &format!("/v1/workloads/{id}"), Some(token), None).await;
        if code == 200 && pred(&v) {
            return v;
        }
        if std::time::Instant::now() > deadline {
            let jobs: Vec<String> = v["attempts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| a["pid"].as_i64())
                .map(|j| {
                    let out = std::process::Command::new("scontrol").args(["show", "job", &j.to_string()]).output();
                    out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default()
                })
                .collect();
            panic!(
                "workload {id} did not reach the expected state in {secs} s\n--- allot ---\n{v}\n--- squeue ---\n{}\n\
                 --- its jobs ---\n{}\n--- server log ---\n{}",
                squeue_all(),
                jobs.join("\n"),
                s.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn squeue_all() -> String {
    let out = std::process::Command::new("squeue").args(["--states=all", "--format=%A %j %T %u %k %R %M"]).output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default()
}

/// The job's name.
fn job_name(job: i64) -> Option<String> {
    let out = std::process::Command::new("squeue")
        .args(["--noheader", "--states=all", "--format=%j", &format!("--jobs={job}")])
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string()).filter(|n| !n.is_empty())
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
