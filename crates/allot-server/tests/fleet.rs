//! One `allot serve` for a fleet, against real executors at once: this
//! host's local executor beside a loopback Slurm cluster, and two separate
//! loopback Slurm clusters (`.ci/slurm.sh` and `.ci/slurm.sh start b`: two
//! slurmctld with their own ports, munge and `slurm.conf`, nodes `node1`
//! and `node2` each, four fake GPUs per node). Fleet-wide fair share
//! decides between accounts whose work runs on different clusters; a
//! pinned workload waits for its cluster while others run elsewhere; a
//! cluster whose slurmctld is stopped mid-run is taken out of service
//! (FLEET-3), its workload runs on the other cluster, and when it returns
//! it is reconciled (FLEET-4) and nothing ran twice.
//!
//! Without both clusters' variables these tests fail, saying how to start
//! them: they never pass without running.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Backend, Fixture, Server, WORK_SH, script, state, store_instance, submit, wait_file};

const HELP: &str = "ALLOT_TEST_SLURM_CONF / ALLOT_TEST_SLURM_CONF_B (and their _PARTITION) are not set: the fleet tests \
    run only against the two private clusters `.ci/slurm.sh` starts (loopback, their own configs, munge and state \
    directories; the host's Slurm is never touched). Run `eval \"$(sudo .ci/slurm.sh)\"; eval \"$(sudo .ci/slurm.sh \
    start b)\"` first (`.ci/test` does)";

/// Each test's server owns both clusters' nodes: one test at a time.
static CLUSTERS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One of the private clusters: its `slurm.conf` and partition.
#[derive(Clone, Debug)]
struct Private {
    /// `""` for the first, `"b"` for the second (`.ci/slurm.sh` instance).
    instance: &'static str,
    conf: String,
    partition: String,
}

/// The private cluster of `.ci/slurm.sh` `instance`, and nothing else: the
/// tests stop its slurmctld and run jobs on it.
fn private(instance: &'static str) -> Private {
    let suffix = if instance.is_empty() { String::new() } else { format!("_{}", instance.to_uppercase()) };
    let (Ok(conf), Ok(partition)) = (
        std::env::var(format!("ALLOT_TEST_SLURM_CONF{suffix}")),
        std::env::var(format!("ALLOT_TEST_SLURM_PARTITION{suffix}")),
    ) else {
        panic!("{HELP}")
    };
    let text = std::fs::read_to_string(&conf).unwrap_or_else(|e| panic!("cannot read {conf}: {e}"));
    assert!(
        text.starts_with("# Allot's private test cluster"),
        "{conf} is not a cluster .ci/slurm.sh made: the fleet tests refuse to run on it"
    );
    Private { instance, conf, partition }
}

impl Private {
    /// A Slurm command against this cluster only.
    fn command(&self, program: &str) -> std::process::Command {
        let mut c = std::process::Command::new(program);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// `.ci/slurm.sh CMD [instance]`: its daemons by their recorded PIDs.
    fn script(&self, cmd: &str) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ci/slurm.sh");
        let mut c = std::process::Command::new("bash");
        c.arg(path).arg(cmd);
        if !self.instance.is_empty() {
            c.arg(self.instance);
        }
        let out = c.output().expect("run .ci/slurm.sh");
        assert!(out.status.success(), ".ci/slurm.sh {cmd} {}: {}", self.instance, String::from_utf8_lossy(&out.stderr));
    }

    /// Jobs of this store that Slurm lists alive, as `ID|STATE`.
    fn live_jobs(&self, comment: &str) -> Vec<String> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let uid = unsafe { libc::geteuid() }.to_string();
        let out = self
            .command("squeue")
            .args(["--noheader", "--states=PENDING,RUNNING,COMPLETING,CONFIGURING,SUSPENDED", "--format=%A|%T|%U|%k"])
            .output()
            .expect("run squeue");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.trim().splitn(4, '|').collect();
                (f.len() == 4 && f[2] == uid && f[3] == comment).then(|| format!("{}|{}", f[0], f[1]))
            })
            .collect()
    }

    fn cancel(&self, comment: &str) {
        for j in self.live_jobs(comment) {
            let id = j.split('|').next().unwrap_or_default().to_string();
            let _ = self.command("scancel").arg(id).output();
        }
    }
}

/// Cleans up after a test, whatever its outcome: a stopped slurmctld is
/// started again, and the store's jobs left on either cluster cancelled.
struct Own {
    comment: String,
    clusters: Vec<Private>,
    stopped: Vec<Private>,
}

impl Own {
    fn stop_ctld(&mut self, c: &Private) {
        self.stopped.push(c.clone());
        c.script("ctld-stop");
    }

    fn start_ctld(&mut self, c: &Private) {
        self.stopped.retain(|s| s.instance != c.instance);
        c.script("ctld-start");
    }
}

impl Drop for Own {
    fn drop(&mut self) {
        for c in std::mem::take(&mut self.stopped) {
            c.script("ctld-start");
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for c in &self.clusters {
            while !c.live_jobs(&self.comment).is_empty() && Instant::now() < deadline {
                c.cancel(&self.comment);
                std::thread::sleep(Duration::from_millis(300));
            }
        }
    }
}

/// The accounts and contract of the tests' one-cluster config.
fn accounts() -> String {
    let (_, rest) = support::CONFIG.split_once("[[accounts]]").expect("the test config has accounts");
    format!("[[accounts]]{rest}")
}

/// A `[[clusters]]` run by a private Slurm cluster: two nodes of two GPUs
/// (Slurm's have four).
fn slurm_cluster(name: &str, c: &Private) -> String {
    format!(
        "[[clusters]]\nname = \"{name}\"\n[[clusters.pools]]\nname = \"gpu\"\ngpu = \"H100\"\nnodes = 2\n\
         gpus_per_node = 2\n[clusters.executor]\nkind = \"slurm\"\npartition = \"{}\"\nslurm_conf = \"{}\"\n\n",
        c.partition, c.conf
    )
}

/// The comment on the store's Slurm jobs.
async fn store_comment(db: &str) -> String {
    format!("allot-store={}", store_instance(db).await)
}

fn nodes_of(v: &Value, attempt: usize) -> Vec<String> {
    v["attempts"][attempt]["allocation"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["node"].as_str().map(str::to_string))
        .collect()
}

fn all_on(v: &Value, cluster: &str) -> bool {
    let prefix = format!("{cluster}/");
    v["attempts"]
        .as_array()
        .is_some_and(|a| !a.is_empty() && (0..a.len()).all(|i| nodes_of(v, i).iter().all(|n| n.starts_with(&prefix))))
}

fn t(v: &Value, attempt: usize, field: &str) -> i64 {
    v["attempts"][attempt][field].as_i64().unwrap_or_else(|| panic!("attempt {attempt} has no {field}: {v}"))
}

/// Polls `allot nodes` until `pred` holds for every node of `cluster`.
async fn wait_nodes(s: &Server, token: &str, cluster: &str, secs: u64, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let prefix = format!("{cluster}/");
    loop {
        let nodes = s.cli_json(token, &["nodes"]);
        let mine: Vec<&Value> = nodes
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| n["name"].as_str().is_some_and(|x| x.starts_with(&prefix)))
            .collect();
        if !mine.is_empty() && mine.iter().all(|n| pred(n)) {
            return nodes;
        }
        assert!(
            Instant::now() < deadline,
            "the nodes of {cluster} did not reach the state in {secs} s: {nodes}\n{}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn checkpoints(s: &Server, id: &str) -> PathBuf {
    s.dir.join("data/checkpoints").join(id)
}

/// This host (local executor, one node of two GPUs) and the first private
/// Slurm cluster in one fleet: org/a's work on `here` counts in the fleet's
/// one ledger, so on cluster `a` org/b's later submission starts before
/// org/a's earlier one (FS-1 across clusters); a workload pinned to `here`
/// waits for it while others run on `a`; nothing runs off its cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_local_and_slurm_one_ledger_and_pinned_work() {
    let _one_at_a_time = CLUSTERS.lock().await;
    let a = private("");
    let f = Fixture::new(Backend::Sqlite, "fleet-local-slurm").await;
    let here = "[[clusters]]\nname = \"here\"\n[[clusters.pools]]\nname = \"gpu\"\ngpu = \"H100\"\nnodes = 1\n\
                gpus_per_node = 2\n[clusters.executor]\nkind = \"local\"\n\n";
    let config = format!("{here}{}{}", slurm_cluster("a", &a), accounts());
    std::fs::write(f.dir.join("cluster.toml"), config).expect("write config");
    let s = Server::start_with(&f.dir, &f.db.url, &[], &[]);
    let _own = Own { comment: store_comment(&f.db.url).await, clusters: vec![a.clone()], stopped: Vec::new() };
    let nodes = s.cli_json(&f.admin, &["nodes"]);
    let names: Vec<&str> = nodes.as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["here/gpu-0", "a/node1", "a/node2"], "Slurm's nodes as <cluster>/<Slurm node>");

    let work = script(&f.dir, "work.sh", WORK_SH);
    let sub = |account: &str, cluster: &str, gpus: &str, secs: &str| {
        let d = format!("{secs}s");
        let args = [
            "--account",
            account,
            "--cluster",
            cluster,
            "--gpus",
            gpus,
            "--checkpoint",
            "1s",
            "--duration",
            &d,
            "--",
            &work,
            secs,
        ];
        submit(&s, &f.admin, &args)
    };
    // org/a holds `here`; lab/x holds `a`.
    let a1 = sub("org/a", "here", "2", "15");
    s.wait_for(&f.admin, &a1, 60, |v| state(v) == "running").await;
    let blocker = sub("lab/x", "a", "4", "4");
    s.wait_for(&f.admin, &blocker, 60, |v| state(v) == "running").await;
    // Pinned to `here`, behind org/a's own earlier work (FIFO within the account: no preemption).
    let pinned = sub("org/a", "here", "1", "1");
    // org/a first, org/b second, both for all of `a`.
    let a2 = sub("org/a", "a", "4", "2");
    let b1 = sub("org/b", "a", "4", "2");

    let b1v = s.wait_for(&f.admin, &b1, 120, |v| state(v) == "finished").await;
    let a2v = s.wait_for(&f.admin, &a2, 120, |v| state(v) == "finished").await;
    let a1v = s.wait_for(&f.admin, &a1, 120, |v| state(v) == "finished").await;
    let pv = s.wait_for(&f.admin, &pinned, 120, |v| state(v) == "finished").await;
    let bv = s.wait_for(&f.admin, &blocker, 120, |v| state(v) == "finished").await;
    for (v, cluster) in [(&a1v, "here"), (&pv, "here"), (&a2v, "a"), (&b1v, "a"), (&bv, "a")] {
        assert!(all_on(v, cluster), "ran only on {cluster}: {v}");
    }
    // Fleet-wide fair share: org/a's use of `here` puts org/b first on `a`.
    let last = |v: &Value| v["attempts"].as_array().map_or(0, |a| a.len() - 1);
    assert!(
        t(&b1v, 0, "start_t") <= t(&a2v, 0, "start_t")
            && t(&b1v, last(&b1v), "end_t") <= t(&a2v, last(&a2v), "start_t"),
        "org/b's workload ran before org/a's earlier one (FS-1, one ledger):\n{b1v}\n{a2v}"
    );
    // The pinned workload waited for `here` while others ran on `a`.
    assert!(t(&pv, 0, "start_t") >= t(&a1v, last(&a1v), "end_t"), "it waited for its cluster: {pv}\n{a1v}");
    assert!(t(&b1v, 0, "start_t") < t(&pv, 0, "start_t"), "others ran elsewhere meanwhile: {b1v}\n{pv}");
    for id in [&a1, &pinned, &a2, &b1, &blocker] {
        assert!(!checkpoints(&s, id).join("DOUBLE").exists(), "{id} ran twice at once");
    }
    assert!(a.live_jobs(&_own.comment).is_empty(), "no job of the store is left on a");
    drop(s);
    drop(_own);
    f.finish().await;
}

/// Two private Slurm clusters: a workload runs on `b` (first in config
/// order, FLEET-2); `b`'s slurmctld is stopped. Its task fences itself,
/// Allot takes `b` out of service after the outage threshold (FLEET-3,
/// cited), the workload resumes on `a` from its checkpoint; when `b`'s
/// slurmctld is back, `b` is reconciled and returns (FLEET-4). Nothing ran
/// twice: no overlap of attempts, no job of the store left on either
/// cluster, no two tasks of the workload at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_outage_requeues_elsewhere_and_reconciles() {
    let _one_at_a_time = CLUSTERS.lock().await;
    let (a, b) = (private(""), private("b"));
    let f = Fixture::new(Backend::Sqlite, "fleet-outage").await;
    let config = format!("{}{}{}", slurm_cluster("b", &b), slurm_cluster("a", &a), accounts());
    std::fs::write(f.dir.join("cluster.toml"), config).expect("write config");
    let s = Server::start_with(&f.dir, &f.db.url, &["--slurm-outage-after", "12s"], &[]);
    let mut own =
        Own { comment: store_comment(&f.db.url).await, clusters: vec![a.clone(), b.clone()], stopped: Vec::new() };
    let nodes = s.cli_json(&f.admin, &["nodes"]);
    let names: Vec<&str> = nodes.as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["b/node1", "b/node2", "a/node1", "a/node2"], "two Slurm clusters' node1 stay apart");

    let work = script(&f.dir, "work.sh", WORK_SH);
    let w = submit(
        &s,
        &f.admin,
        &["--account", "org/a", "--gpus", "2", "--checkpoint", "1s", "--duration", "20s", "--", &work, "20"],
    );
    let v = s.wait_for(&f.admin, &w, 60, |v| state(v) == "running" && v["attempts"][0]["pid"].is_number()).await;
    assert!(all_on(&v, "b"), "placed on b, first in config order: {v}");
    wait_file(&checkpoints(&s, &w).join("n"), 60).await;
    assert_eq!(b.live_jobs(&own.comment).len(), 1, "its job runs on b");

    own.stop_ctld(&b);
    let v = s
        .wait_for(&f.admin, &w, 120, |v| {
            v["attempts"].as_array().is_some_and(|a| a.len() >= 2) && v["attempts"][1]["pid"].is_number()
        })
        .await;
    let first = &v["attempts"][0];
    assert!(nodes_of(&v, 1).iter().all(|n| n.starts_with("a/")), "resumed on the other cluster: {v}");
    let reason = first["signal_reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("FLEET-3") && reason.contains("cluster b"), "the outage is cited: {v}");
    assert!(t(&v, 0, "end_t") <= t(&v, 1, "start_t"), "the first attempt ended before the second started: {v}");
    let down = wait_nodes(&s, &f.admin, "b", 10, |n| n["health"] == "down").await;
    let a_nodes: Vec<&Value> =
        down.as_array().unwrap().iter().filter(|n| n["name"].as_str().is_some_and(|x| x.starts_with("a/"))).collect();
    assert!(a_nodes.iter().all(|n| n["health"] == "up"), "the other cluster keeps scheduling: {down}");

    own.start_ctld(&b);
    wait_nodes(&s, &f.admin, "b", 120, |n| n["health"] == "up").await;
    assert!(
        b.live_jobs(&own.comment).is_empty(),
        "reconciled: no job of the store runs on b: {:?}",
        b.live_jobs(&own.comment)
    );
    let done = s.wait_for(&f.admin, &w, 120, |v| state(v) == "finished").await;
    let log = std::fs::read_to_string(done["attempts"][1]["log_path"].as_str().map(|p| s.dir.join(p)).unwrap())
        .unwrap_or_default();
    assert!(log.contains("rank 0 resumed from"), "resumed from its checkpoint: {log}");
    assert!(!checkpoints(&s, &w).join("DOUBLE").exists(), "two tasks of the workload never ran at once");
    assert!(a.live_jobs(&own.comment).is_empty() && b.live_jobs(&own.comment).is_empty(), "no job left on a or b");
    drop(s);
    drop(own);
    f.finish().await;
}
