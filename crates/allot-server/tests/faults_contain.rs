//! Kernel containment of the local executor, through the real `allot
//! serve` (SQLite), as root:
//!
//! * processes that escape their process group (`setsid -f`, a double fork
//!   into a new session, `env -u ALLOT_TAG setsid`) cannot keep a GPU: when
//!   the workload's own process exits, what it left behind is killed, and
//!   the attempt ends (its GPU goes to the next workload) only once they
//!   are gone; cancel kills them; after kill -9 of the server, the
//!   restarted server finds them by cgroup and kills them;
//! * an attempt may open only its own GPU's device (v1 devices controller);
//! * a launch that fails outside the workload (its log file cannot be
//!   opened) spends no retry, and three in a row drain the node (MNT-3);
//! * logs and checkpoint directories are private (0600 / 0700).
//!
//! Every wait has a deadline and prints what it saw.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Backend, Fixture, Server, script, state, submit};

/// One node with one GPU, so that two workloads can only follow each other.
const ONE_GPU: &str = r#"
[cluster]
name = "contain"
[[cluster.pools]]
name = "gpu"
gpu = "H100"
nodes = 1
gpus_per_node = 1

[[accounts]]
path = "org/a"
share = 1

[contract]
scheduling_interval = "1s"
grace = "1s"
min_slice = { batch = "0s", interactive = "0s", service = "0s" }
"#;

/// Starts a `sleep` that escapes its process group the way `$1` says,
/// writes its pid to `escaped-<attempt>`, then exits 0 at once (`$2` =
/// `exit`) or sleeps itself (`stay`).
const ESCAPE_SH: &str = r#"#!/bin/sh
ck="$ALLOT_CHECKPOINT_DIR"
out="$ck/escaped-$ALLOT_ATTEMPT"
case "$1" in
  setsid) setsid -f sh -c 'echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 1000' "$out" ;;
  double-fork) ( setsid sh -c 'sleep 1000 & echo $! > "$0.tmp"; mv "$0.tmp" "$0"' "$out" & ) ;;
  no-tag) env -u ALLOT_TAG setsid -f sh -c 'echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 1000' "$out" ;;
  *) echo "unknown escape $1" >&2; exit 9 ;;
esac
echo $$ > "$ck/leader-$ALLOT_ATTEMPT"
[ "$2" = stay ] && exec sleep 1000
# Exit once the escaped process has written its pid.
i=0
while [ ! -s "$out" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
exit 0
"#;

/// Runs on the GPU after the escaper: notes every pid of `$@` (pid files)
/// still alive when it starts.
const CHECK_SH: &str = r#"#!/bin/sh
for f in "$@"; do
  [ -s "$f" ] || continue
  p=$(cat "$f")
  [ -r "/proc/$p/stat" ] || continue
  s=$(sed 's/.*) //' "/proc/$p/stat" | cut -c1)
  [ "$s" = Z ] || [ "$s" = X ] || echo "overlap $p" >> "$ALLOT_CHECKPOINT_DIR/overlap"
done
echo checked > "$ALLOT_CHECKPOINT_DIR/checked"
"#;

/// Whether `pid` is a live (not zombie) process.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// Polls `probe` every 100 ms until it returns `Some`, or panics after
/// `secs` with what `seen` says.
fn wait_until<T>(secs: u64, what: &str, mut probe: impl FnMut() -> Option<T>, seen: impl Fn() -> String) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {secs} s; saw:\n{}", seen());
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Every pid written to an `escaped-*` file under the checkpoints.
fn escaped_pids(data: &Path) -> Vec<(PathBuf, i32)> {
    let mut out = Vec::new();
    for w in std::fs::read_dir(data.join("checkpoints")).into_iter().flatten().flatten() {
        for f in std::fs::read_dir(w.path()).into_iter().flatten().flatten() {
            let name = f.file_name().to_string_lossy().to_string();
            if name.starts_with("escaped-")
                && !name.ends_with(".tmp")
                && let Some(p) = read_pid(&f.path())
            {
                out.push((f.path(), p));
            }
        }
    }
    out
}

/// Kills what the test's workloads left, by their recorded pids, whatever
/// the outcome (a failed assertion must not leave sleeps behind).
struct Reap(PathBuf);

impl Drop for Reap {
    fn drop(&mut self) {
        for (_, pid) in escaped_pids(&self.0) {
            if alive(pid) {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }
}

/// The v1 devices controller's mount point, if any.
fn devices_mount() -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|l| {
        let (head, tail) = l.split_once(" - ")?;
        let mut t = tail.split(' ');
        let (fstype, opts) = (t.next()?, t.nth(1)?);
        let point = head.split(' ').nth(4)?;
        (fstype == "cgroup" && opts.split(',').any(|o| o == "devices")).then(|| PathBuf::from(point))
    })
}

async fn detail(s: &Server, token: &str, id: &str) -> Value {
    s.http("GET", &format!("/v1/workloads/{id}"), Some(token), None).await.1
}

/// Pairs of attempts that held the same GPU at the same time, from the
/// API's attempt records (`[start_t, end_t)`; an open attempt runs on).
async fn double_allocations(s: &Server, token: &str, ids: &[&str]) -> Vec<String> {
    let mut held: Vec<(String, String, u64, i64, i64)> = Vec::new();
    for id in ids {
        let d = detail(s, token, id).await;
        for a in d["attempts"].as_array().into_iter().flatten() {
            let (start, end) = (a["start_t"].as_i64().unwrap(), a["end_t"].as_i64().unwrap_or(i64::MAX));
            for part in a["allocation"].as_array().into_iter().flatten() {
                for g in part["gpus"].as_array().into_iter().flatten() {
                    let who = format!("{id}#{}", a["attempt"]);
                    held.push((who, part["node"].as_str().unwrap().to_string(), g.as_u64().unwrap(), start, end));
                }
            }
        }
    }
    let mut out = Vec::new();
    for (i, a) in held.iter().enumerate() {
        for b in &held[i + 1..] {
            if a.1 == b.1 && a.2 == b.2 && a.3 < b.4 && b.3 < a.4 {
                out.push(format!("{} and {} on {} GPU {}", a.0, b.0, a.1, a.2));
            }
        }
    }
    out
}

/// One way of escaping, end to end.
async fn escape_case(kind: &str) {
    let f = Fixture::new(Backend::Sqlite, &format!("escape-{kind}")).await;
    std::fs::write(f.dir.join("cluster.toml"), ONE_GPU).unwrap();
    let data = f.dir.join("data");
    let _reap = Reap(data.clone());
    let mut s = Server::start(&f.dir, &f.db.url);
    let esc = script(&f.dir, "escape.sh", ESCAPE_SH);
    let check = script(&f.dir, "check.sh", CHECK_SH);
    let log = |s: &Server| s.log();

    // 1. The escaper's leader exits 0: what it left behind is killed, and
    // only then does the attempt end and the GPU go to the next workload.
    let e1 = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "1", "--", &esc, kind, "exit"]);
    let ck1 = data.join("checkpoints").join(&e1);
    let pidfile = ck1.join("escaped-1").display().to_string();
    let w2 = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "1", "--", &check, &pidfile]);
    let v = s.wait_for(&f.admin, &e1, 20, |v| state(v) == "finished").await;
    let p1 = read_pid(&ck1.join("escaped-1")).unwrap_or_else(|| panic!("{kind}: the escaped process ran: {v}"));
    assert!(!alive(p1), "{kind}: the attempt ended but escaped pid {p1} lives: {v}");
    s.wait_for(&f.admin, &w2, 20, |v| state(v) == "finished").await;
    let ck2 = data.join("checkpoints").join(&w2);
    assert!(ck2.join("checked").exists(), "{kind}: the checker ran");
    let overlap = std::fs::read_to_string(ck2.join("overlap")).unwrap_or_default();
    assert_eq!(overlap, "", "{kind}: the next workload got the GPU while the escaped process ran");

    // 2. Cancel kills every process of the attempt before it ends.
    let e2 = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "1", "--", &esc, kind, "stay"]);
    let ck = data.join("checkpoints").join(&e2);
    let p2 = wait_until(20, "the escaped process wrote its pid", || read_pid(&ck.join("escaped-1")), || log(&s));
    s.cli_ok(&f.admin, &["cancel", &e2]);
    let v = s.wait_for(&f.admin, &e2, 20, |v| state(v) == "cancelled").await;
    assert!(!alive(p2), "{kind}: the attempt ended but escaped pid {p2} lives: {v}");

    // 3. kill -9 of the server: the escaped process survives it; the
    // restarted server finds it by its cgroup and kills it.
    let e3 = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "1", "--", &esc, kind, "stay"]);
    let ck3 = data.join("checkpoints").join(&e3);
    let p3 = wait_until(20, "the third escaper's pid", || read_pid(&ck3.join("escaped-1")), || log(&s));
    s.wait_for(&f.admin, &e3, 20, |v| state(v) == "running").await;
    s.kill9();
    assert!(alive(p3), "{kind}: pid {p3} died with the server: nothing to recover");
    s.restart();
    wait_until(
        30,
        "the restarted server killed the survivor",
        || (!alive(p3)).then_some(()),
        || format!("pid {p3} alive\n{}", s.log()),
    );
    // Requeued, it escapes again on its next attempt; cancel ends that one.
    s.wait_for(&f.admin, &e3, 20, |v| state(v) == "running" && v["attempts"].as_array().is_some_and(|a| a.len() == 2))
        .await;
    wait_until(20, "the second attempt's escaped pid", || read_pid(&ck3.join("escaped-2")), || log(&s));
    s.cli_ok(&f.admin, &["cancel", &e3]);
    s.wait_for(&f.admin, &e3, 20, |v| state(v) == "cancelled").await;

    let doubles = double_allocations(&s, &f.admin, &[&e1, &w2, &e2, &e3]).await;
    assert!(doubles.is_empty(), "{kind}: GPU double allocations: {doubles:?}");
    let left: Vec<_> = escaped_pids(&data).into_iter().filter(|(_, p)| alive(*p)).collect();
    assert!(left.is_empty(), "{kind}: escaped processes alive at the end: {left:?}");
    drop(s);
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setsid_process_cannot_keep_a_gpu() {
    escape_case("setsid").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_double_forked_daemon_cannot_keep_a_gpu() {
    escape_case("double-fork").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_drops_its_tag_is_still_found_by_cgroup() {
    escape_case("no-tag").await;
}

/// Tries to open its own GPU's device and the other one (fake device nodes
/// of major 195 in `$1`), and copies its devices group's rules (`$2`: the
/// devices controller's mount).
const DEVICES_SH: &str = r#"#!/bin/sh
ck="$ALLOT_CHECKPOINT_DIR"
echo "$CUDA_VISIBLE_DEVICES" > "$ck/visible"
for i in 0 1; do cat "$1/nvidia$i" 2> "$ck/open-$i"; done
g=$(sed -n 's/^[0-9]*:devices://p' /proc/self/cgroup)
cat "$2$g/devices.list" > "$ck/devices.list"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_may_open_only_its_own_gpu_device() {
    let Some(devices) = devices_mount() else {
        eprintln!("no v1 devices controller on this host: device constraint not testable here");
        return;
    };
    let f = Fixture::new(Backend::Sqlite, "devices").await;
    std::fs::write(f.dir.join("cluster.toml"), ONE_GPU.replace("gpus_per_node = 1", "gpus_per_node = 2")).unwrap();
    let dev = f.dir.join("dev");
    std::fs::create_dir(&dev).unwrap();
    for minor in 0..2 {
        let out = std::process::Command::new("mknod")
            .arg(dev.join(format!("nvidia{minor}")))
            .args(["c", "195", &minor.to_string()])
            .output()
            .expect("run mknod");
        assert!(out.status.success(), "mknod (the test runs as root): {}", String::from_utf8_lossy(&out.stderr));
    }
    let s = Server::start(&f.dir, &f.db.url);
    let sh = script(&f.dir, "devices.sh", DEVICES_SH);
    let (d, m) = (dev.display().to_string(), devices.display().to_string());
    let id = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "1", "--", &sh, &d, &m]);
    s.wait_for(&f.admin, &id, 20, |v| state(v) == "finished").await;
    let ck = s.dir.join("data/checkpoints").join(&id);
    let read = |name: &str| std::fs::read_to_string(ck.join(name)).unwrap_or_default();
    let own: u32 = read("visible").trim().parse().expect("one GPU index");
    let other = 1 - own;
    let list = read("devices.list");
    assert!(list.contains(&format!("c 195:{own} rwm")) && list.contains("c 195:255 rwm"), "{list}");
    assert!(!list.contains(&format!("c 195:{other} ")) && !list.contains("a *:*"), "{list}");
    // No driver behind the fake nodes: the own GPU is let through to the
    // kernel (ENXIO), the other is refused by the devices controller.
    let (mine, theirs) = (read(&format!("open-{own}")), read(&format!("open-{other}")));
    assert!(mine.contains("No such device or address"), "own GPU {own}: {mine}");
    assert!(theirs.contains("Operation not permitted"), "other GPU {other}: {theirs}");
    drop(s);
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launch_failures_spend_no_retry_and_three_drain_the_node() {
    let f = Fixture::new(Backend::Sqlite, "launchfail").await;
    std::fs::write(f.dir.join("cluster.toml"), ONE_GPU).unwrap();
    let s = Server::start(&f.dir, &f.db.url);
    // The first workload of a fresh store is "1": its first three log files
    // cannot be opened (they are directories).
    let logs = f.dir.join("data/logs/1");
    for a in 1..=3 {
        std::fs::create_dir_all(logs.join(format!("attempt-{a}.log"))).unwrap();
    }
    let cmd = ["sh", "-c", "echo ran > \"$ALLOT_CHECKPOINT_DIR/ran\""];
    let id = submit(&s, &f.admin, &[&["--account", "org/a", "--gpus", "1", "--retries", "0", "--"][..], &cmd].concat());
    assert_eq!(id, "1", "the test relies on the first id");
    // The store is written after the scheduler's state changes: wait for
    // the third attempt's record, then look at the node.
    let v = s
        .wait_for(&f.admin, &id, 20, |v| {
            let a = v["attempts"].as_array();
            a.is_some_and(|a| a.len() >= 3 && a.iter().all(|a| !a["outcome"].is_null())) || state(v) == "failed"
        })
        .await;
    let nodes = s.cli_json(&f.admin, &["nodes"]);
    assert_eq!(nodes[0]["health"], "drained", "three launch failures in a row drain the node: {nodes}\n{v}");
    assert_eq!(state(&v), "pending", "requeued, not failed: {v}\n{nodes}");
    assert_eq!(v["workload"]["failures"], 0, "no retry spent: {v}");
    let outcomes: Vec<&str> =
        v["attempts"].as_array().unwrap().iter().map(|a| a["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["launch-failed"; 3], "{v}");
    assert!(v["workload"]["reason"].as_str().unwrap().starts_with("MNT-3: could not start: cannot open"), "{v}");

    // The drain went through the node events, naming the rule.
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let mut c = sqlx::AnyConnection::connect(&f.db.url).await.unwrap();
    let events: Vec<(String, String)> =
        sqlx::query_as("SELECT kind, principal FROM node_events ORDER BY seq").fetch_all(&mut c).await.unwrap();
    let _ = c.close().await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "drain");
    assert!(
        events[0].1.starts_with("local: MNT-3: 3 launches in a row failed on gpu-0 (last: cannot open"),
        "{events:?}"
    );

    // Back in service, the fourth attempt runs: its retries were never spent.
    s.cli_ok(&f.admin, &["node", "undrain", "gpu-0"]);
    let v = s.wait_for(&f.admin, &id, 20, |v| state(v) == "finished").await;
    assert_eq!(v["workload"]["failures"], 0, "{v}");
    assert_eq!(v["attempts"].as_array().unwrap().len(), 4, "{v}");

    // Its files are private to the server's user.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let ck = s.dir.join("data/checkpoints/1");
    assert_eq!(mode(&ck), 0o700, "checkpoint directory");
    // Its parent is only traversable: each workload's user reaches its own
    // directory and lists no one else's (docs/security.md).
    assert_eq!(mode(&ck.join("..")), 0o711, "checkpoints directory");
    assert_eq!(mode(&logs.join("attempt-4.log")), 0o600, "log file");
    drop(s);
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_cannot_run_is_the_workloads_own_failure() {
    let f = Fixture::new(Backend::Sqlite, "badcmd").await;
    std::fs::write(f.dir.join("cluster.toml"), ONE_GPU).unwrap();
    let s = Server::start(&f.dir, &f.db.url);
    let args = ["--account", "org/a", "--gpus", "1", "--retries", "1", "--", "/nonexistent/program"];
    let id = submit(&s, &f.admin, &args);
    let v = s.wait_for(&f.admin, &id, 20, |v| state(v) == "failed").await;
    assert_eq!(v["workload"]["failures"], 2, "each attempt spent a retry: {v}");
    let outcomes: Vec<&str> =
        v["attempts"].as_array().unwrap().iter().map(|a| a["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["failed", "failed"], "{v}");
    let nodes = s.cli_json(&f.admin, &["nodes"]);
    assert_eq!(nodes[0]["health"], "up", "the node is not blamed for the workload's command: {nodes}");
    drop(s);
    f.finish().await;
}
