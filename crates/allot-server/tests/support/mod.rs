//! Test support: the real `allot` binary on a temporary store (SQLite file
//! or a fresh PostgreSQL database), a small fake-GPU config, and helpers to
//! drive it through the CLI and HTTP.

#![allow(dead_code, reason = "each test crate uses a part of the support module")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

/// Two nodes of two fake GPUs; a 1 s scheduling interval, 1 s grace and a
/// 2 s batch slice so that sleep-based tests take seconds.
pub const CONFIG: &str = r#"
[cluster]
name = "test"
[[cluster.pools]]
name = "gpu"
gpu = "H100"
nodes = 2
gpus_per_node = 2

[[accounts]]
path = "org/a"
share = 1
[[accounts]]
path = "org/b"
share = 1
[[accounts]]
path = "lab/x"
share = 1

[contract]
scheduling_interval = "1s"
grace = "1s"
min_slice = { batch = "2s", interactive = "0s", service = "0s" }
interactive_max_gpus = 4
interactive_max_duration = "1h"
"#;

/// Counts `$1` seconds of work, checkpointing each second to
/// `$ALLOT_CHECKPOINT_DIR/n`; on SIGTERM writes a marker and exits; notes
/// in `DOUBLE` if another attempt of the same workload is running. Each
/// node of a multi-node allocation runs it (`ALLOT_NODE_RANK`); rank 0 keeps
/// the checkpoint.
pub const WORK_SH: &str = r#"#!/bin/sh
ck="$ALLOT_CHECKPOINT_DIR"
r="$ALLOT_NODE_RANK"
mkdir "$ck/running-$r" 2>/dev/null || echo "attempt $ALLOT_ATTEMPT rank $r" >> "$ck/DOUBLE"
n=0
[ -f "$ck/n" ] && n=$(cat "$ck/n") && echo "rank $r resumed from $n"
trap 'echo "rank $r sigterm at $n" >> "$ck/marker"; rmdir "$ck/running-$r"; exit 0' TERM
while [ "$n" -lt "$1" ]; do sleep 1 & wait $!; n=$((n+1)); [ "$r" = 0 ] && echo "$n" > "$ck/n"; done
rmdir "$ck/running-$r"
echo "rank $r done $n"
"#;

/// Writes what each node's process was given to `rank-<n>` in the
/// checkpoint directory, and its whole environment to `env-<n>`.
pub const RANK_SH: &str = r#"#!/bin/sh
echo "$ALLOT_NODE|$ALLOT_NODE_RANK|$ALLOT_NUM_NODES|$CUDA_VISIBLE_DEVICES|$ALLOT_GPUS|$CUDA_DEVICE_ORDER|$SLURM_JOB_ID" \
  > "$ALLOT_CHECKPOINT_DIR/rank-$ALLOT_NODE_RANK"
env > "$ALLOT_CHECKPOINT_DIR/env-$ALLOT_NODE_RANK"
"#;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub const PG_HELP: &str = "ALLOT_TEST_PG_URL is not set: the PostgreSQL store tests need a PostgreSQL server. \
    Run `eval \"$(sudo .ci/postgres.sh)\"` (starts a private throwaway cluster on a free loopback port, never the \
    host's own), or set ALLOT_TEST_PG_URL=postgres://USER:PASSWORD@HOST:PORT/DB for a role that may CREATE DATABASE";

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root")
}

fn newest_source(dir: &Path, newest: &mut SystemTime) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            newest_source(&p, newest);
        } else if let Ok(m) = e.metadata().and_then(|m| m.modified()) {
            *newest = (*newest).max(m);
        }
    }
}

/// The `allot` binary next to this test, rebuilt when a source is newer.
pub fn allot_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("ALLOT_BIN") {
            return PathBuf::from(p);
        }
        let exe = std::env::current_exe().expect("test executable");
        let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>").to_path_buf();
        let bin = profile_dir.join("allot");
        let ws = workspace();
        let mut newest = SystemTime::UNIX_EPOCH;
        for c in std::fs::read_dir(ws.join("crates")).expect("crates").flatten() {
            newest_source(&c.path().join("src"), &mut newest);
        }
        let built = std::fs::metadata(&bin).and_then(|m| m.modified()).ok();
        if built.is_none_or(|b| b < newest) {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let target = profile_dir.parent().expect("target dir");
            let status = Command::new(cargo)
                .args(["build", "-p", "allot", "--bin", "allot"])
                .env("CARGO_TARGET_DIR", target)
                .current_dir(&ws)
                .status()
                .expect("run cargo build");
            assert!(status.success(), "building the allot binary failed");
        }
        bin
    })
    .clone()
}

/// A fresh directory under the system temp dir.
pub fn temp_dir(name: &str) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let d = std::env::temp_dir().join(format!("allot-test-{}-{n}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// A fresh, empty store for one test.
pub struct TestDb {
    pub url: String,
    pg: Option<(String, String)>,
}

impl TestDb {
    pub async fn new(backend: Backend, dir: &Path) -> TestDb {
        match backend {
            Backend::Sqlite => TestDb { url: format!("sqlite://{}", dir.join("allot.db").display()), pg: None },
            Backend::Postgres => {
                let base = std::env::var("ALLOT_TEST_PG_URL").unwrap_or_else(|_| panic!("{PG_HELP}"));
                let n = COUNTER.fetch_add(1, Ordering::SeqCst);
                let name = format!("allot_t_{}_{n}", std::process::id());
                admin_sql(&base, &format!("DROP DATABASE IF EXISTS {name}")).await;
                admin_sql(&base, &format!("CREATE DATABASE {name}")).await;
                TestDb { url: with_db(&base, &name), pg: Some((base, name)) }
            }
        }
    }

    pub async fn drop_db(self) {
        if let Some((base, name)) = self.pg {
            admin_sql(&base, &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
        }
    }
}

fn with_db(url: &str, db: &str) -> String {
    let (head, query) = url.split_once('?').map_or((url, None), |(h, q)| (h, Some(q)));
    let base = head.rsplit_once('/').map_or(head, |(b, _)| b);
    match query {
        Some(q) => format!("{base}/{db}?{q}"),
        None => format!("{base}/{db}"),
    }
}

async fn admin_sql(url: &str, sql: &str) {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let mut c =
        sqlx::AnyConnection::connect(url).await.unwrap_or_else(|e| panic!("cannot connect to {url}: {e}\n{PG_HELP}"));
    sqlx::query(sql).execute(&mut c).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    let _ = c.close().await;
}

/// A loopback port free now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// A running `allot serve`.
pub struct Server {
    pub dir: PathBuf,
    pub db: String,
    pub url: String,
    pub config: PathBuf,
    child: Option<Child>,
    port: u16,
    /// More `allot serve` arguments and environment.
    args: Vec<String>,
    envs: Vec<(String, String)>,
    /// A command `allot serve …` is run under (e.g. a private mount
    /// namespace).
    prefix: Vec<String>,
    /// `--single-user`: every workload runs as the server's user (all
    /// tests but those of identities).
    single_user: bool,
}

impl Server {
    /// Starts the server on `db` with [`CONFIG`] (or the config already in
    /// `dir`) and waits until it answers.
    pub fn start(dir: &Path, db: &str) -> Server {
        Server::start_with(dir, db, &[], &[])
    }

    /// [`Server::start`] with more `allot serve` arguments and environment.
    pub fn start_with(dir: &Path, db: &str, args: &[&str], envs: &[(&str, &str)]) -> Server {
        Server::start_at(dir, db, free_port(), args, envs)
    }

    /// [`Server::start_with`] on `port` (a config that names the server's
    /// own URL needs it first).
    pub fn start_at(dir: &Path, db: &str, port: u16, args: &[&str], envs: &[(&str, &str)]) -> Server {
        let config = dir.join("cluster.toml");
        if !config.exists() {
            std::fs::write(&config, CONFIG).expect("write config");
        }
        let mut s = Server {
            dir: dir.to_path_buf(),
            db: db.to_string(),
            url: format!("http://127.0.0.1:{port}"),
            config,
            child: None,
            port,
            args: args.iter().map(|a| a.to_string()).collect(),
            envs: envs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            prefix: Vec::new(),
            single_user: true,
        };
        s.spawn();
        s
    }

    /// [`Server::start_with`] run as `prefix allot serve …`, every workload
    /// as its submitter's Unix user (not `--single-user`).
    pub fn start_multi_user(dir: &Path, db: &str, prefix: &[&str], args: &[&str], envs: &[(&str, &str)]) -> Server {
        let config = dir.join("cluster.toml");
        assert!(config.exists(), "a multi-user server's test writes its config with its [[grants]]");
        let port = free_port();
        let mut s = Server {
            dir: dir.to_path_buf(),
            db: db.to_string(),
            url: format!("http://127.0.0.1:{port}"),
            config,
            child: None,
            port,
            args: args.iter().map(|a| a.to_string()).collect(),
            envs: envs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            prefix: prefix.iter().map(|a| a.to_string()).collect(),
            single_user: false,
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("server.log")).expect("log");
        let mut cmd = match self.prefix.split_first() {
            None => Command::new(allot_bin()),
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(allot_bin());
                c
            }
        };
        cmd.arg("serve");
        if self.single_user {
            cmd.arg("--single-user");
        }
        let child = cmd
            .arg("--config")
            .arg(&self.config)
            .args(["--db", &self.db, "--listen", &format!("127.0.0.1:{}", self.port), "--data-dir"])
            .arg(self.dir.join("data"))
            .args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.dir)
            .env("ALLOT_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start allot serve");
        // Its own "listening" line (the log is appended to across
        // restarts): a connection alone could reach another process that
        // took the port between `free_port` and the server's bind.
        let listening = if self.args.iter().any(|a| a == "json") {
            format!(r#""message":"listening","addr":"127.0.0.1:{}""#, self.port)
        } else {
            format!("listening addr=127.0.0.1:{}", self.port)
        };
        let before = self.log().matches(&listening).count();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.log().matches(&listening).count() > before
                && std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            {
                return;
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("allot serve exited with {status}:\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "allot serve did not listen within 30 s:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGKILL: no shutdown of any kind.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().expect("kill -9");
            c.wait().expect("reap");
        }
    }

    /// SIGTERM, then waits for the server to exit (a clean stop); returns
    /// whether it exited with success.
    pub fn stop(&mut self) -> bool {
        let Some(mut c) = self.child.take() else { return true };
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(c.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = c.try_wait().expect("wait") {
                return status.success();
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                panic!("allot serve did not stop within 30 s of SIGTERM:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts it again on the same store and port.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// The CLI against this server, run in the server's directory.
    pub fn cli(&self, token: &str, args: &[&str]) -> Output {
        self.cli_in(&self.dir, token, args)
    }

    /// The CLI against this server, run in `dir`.
    pub fn cli_in(&self, dir: &Path, token: &str, args: &[&str]) -> Output {
        Command::new(allot_bin())
            .args(args)
            .env("ALLOT_SERVER", &self.url)
            .env("ALLOT_TOKEN", token)
            .env("ALLOT_CLIENT_CONFIG", self.dir.join("no-client.toml"))
            .current_dir(dir)
            .output()
            .expect("run allot")
    }

    /// The CLI, which must succeed; returns stdout.
    pub fn cli_ok(&self, token: &str, args: &[&str]) -> String {
        let out = self.cli(token, args);
        assert!(
            out.status.success(),
            "allot {args:?} failed: {}\n--- server log ---\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        String::from_utf8(out.stdout).expect("utf-8")
    }

    /// The CLI with `--json`, parsed.
    pub fn cli_json(&self, token: &str, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.push("--json");
        serde_json::from_str(&self.cli_ok(token, &a)).expect("json output")
    }

    /// One HTTP call: (status, body as JSON or a string).
    pub async fn http(&self, method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> (u16, Value) {
        let client = reqwest::Client::new();
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = client.request(m, format!("{}{path}", self.url));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b.to_string());
        }
        let resp = req.send().await.expect("http call");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    /// Polls `GET /v1/workloads/{id}` until `pred` holds (or panics after `secs`).
    pub async fn wait_for(&self, token: &str, id: &str, secs: u64, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let (s, v) = self.http("GET", &format!("/v1/workloads/{id}"), Some(token), None).await;
            if s == 200 && pred(&v) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "workload {id} did not reach the expected state in {secs} s: {v}\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `allot token create` straight into the store.
pub fn token(db: &str, role: &str, name: &str, extra: &[&str]) -> String {
    let out = Command::new(allot_bin())
        .args(["token", "create", "--db", db, "--role", role, "--name", name])
        .args(extra)
        .output()
        .expect("run allot token create");
    assert!(out.status.success(), "token create failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8").trim().to_string()
}

/// Writes an executable script into `dir`; returns its path.
pub fn script(dir: &Path, name: &str, text: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write script");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    p.display().to_string()
}

/// `allot submit ARGS` through the CLI; returns the new workload's id.
pub fn submit(s: &Server, token: &str, args: &[&str]) -> String {
    s.cli_ok(token, &[&["submit"], args].concat()).trim().to_string()
}

pub fn state(v: &Value) -> &str {
    v["workload"]["state"].as_str().unwrap_or("")
}

/// Asserts that the workload `v` (`GET /v1/workloads/{id}`) ended under
/// MNT-4 because `dir` was missing on a node whose name starts with
/// `node`: failed at once, its one attempt `launch-failed`, no retry spent.
pub fn assert_workdir_missing(v: &Value, dir: &Path, node: &str) {
    let w = &v["workload"];
    let reason = w["reason"].as_str().unwrap_or("");
    let want = format!("MNT-4: could not start: working directory {} does not exist on {node}", dir.display());
    assert!(reason.starts_with(&want) && reason.ends_with("; not retried"), "{v}");
    assert_eq!((state(v), &w["failures"]), ("failed", &Value::from(0)), "failed, no retry spent: {v}");
    let attempts = v["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 1, "not requeued: {v}");
    assert_eq!(attempts[0]["outcome"], "launch-failed", "{v}");
}

/// Asserts that every node is up (none drained by MNT-3).
pub fn assert_nodes_up(s: &Server, token: &str) {
    let nodes = s.cli_json(token, &["nodes"]);
    for n in nodes.as_array().expect("nodes") {
        assert_eq!(n["health"], "up", "a user's missing directory never drains a node (MNT-3): {nodes}");
    }
}

/// The store's journal, replayed through the engine (`allot db replay`),
/// makes exactly what the store holds: every attempt with its nodes, GPU
/// indices, start, signal, end, outcome and kept progress, and every
/// workload's state. Run once the server is stopped.
pub fn assert_replay_equals_store(db: &str) {
    let out = Command::new(allot_bin()).args(["db", "replay", "--db", db]).output().expect("run allot db replay");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the replay of the journal differs from the store:\n{stdout}{stderr}");
    assert!(stdout.contains("the replay equals the store"), "{stdout}{stderr}");
}

/// A test's directory, store and admin token.
pub struct Fixture {
    pub dir: PathBuf,
    pub db: TestDb,
    pub admin: String,
}

impl Fixture {
    pub async fn new(backend: Backend, name: &str) -> Fixture {
        let dir = temp_dir(name);
        let db = TestDb::new(backend, &dir).await;
        let admin = token(&db.url, "admin", "root", &[]);
        Fixture { dir, db, admin }
    }

    /// Ends the test: the store's journal replays to exactly what the store
    /// holds ([`assert_replay_equals_store`], when a server ran on it),
    /// then everything it started is removed.
    pub async fn finish(self) {
        if self.dir.join("cluster.toml").exists() {
            assert_replay_equals_store(&self.db.url);
        }
        assert_restarts_replayed(&self.dir);
        remove_store_cgroups(&self.db.url).await;
        self.db.drop_db().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// L-5: no restart of a server of this test fell back from its journal's
/// replay because the journal did not replay or differed from the store
/// (a first start or a changed config rebuilds from the rows, by design).
pub fn assert_restarts_replayed(dir: &Path) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "log") {
                let log = std::fs::read_to_string(&path).unwrap_or_default();
                for bad in ["the journal's replay differs from the store", "the journal does not replay"] {
                    if let Some(line) = log.lines().find(|l| l.contains(bad)) {
                        panic!("a restart could not carry on from its journal ({}): {line}\n{log}", path.display());
                    }
                }
            }
        }
    }
}

/// Declares one test per backend running `$body(Backend)`.
#[macro_export]
macro_rules! both_stores {
    ($sqlite:ident, $postgres:ident, $body:path) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $sqlite() {
            $body($crate::support::Backend::Sqlite).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $postgres() {
            $body($crate::support::Backend::Postgres).await;
        }
    };
}

/// Kills what is left in the cgroups of this test's store (a killed
/// server leaves its workloads running in them) and removes the groups:
/// `allot-<store id>` under every cgroup mount, and nothing else.
pub async fn remove_store_cgroups(db: &str) {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let Ok(mut c) = sqlx::AnyConnection::connect(db).await else { return };
    let id: Option<String> =
        sqlx::query_scalar("SELECT value FROM meta WHERE key = 'instance'").fetch_optional(&mut c).await.ok().flatten();
    let _ = c.close().await;
    let Some(id) = id else { return };
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    // cgroup2 first (it can kill); then the v1 controllers' copies.
    let mut mounts: Vec<&str> = mountinfo.lines().filter(|l| l.contains(" - cgroup")).collect();
    mounts.sort_by_key(|l| !l.contains(" - cgroup2 "));
    for line in mounts {
        if let Some(point) = line.split(' ').nth(4) {
            let root = Path::new(point).join(format!("allot-{id}"));
            if root.is_dir() {
                remove_group(&root);
            }
        }
    }
}

/// Depth first: kills a cgroup2 group's processes, waits (bounded) until
/// it is empty, then removes it.
fn remove_group(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_group(&e.path());
            }
        }
    }
    let _ = std::fs::write(dir.join("cgroup.kill"), "1");
    for _ in 0..50 {
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The store's id (its jobs carry it in their name and comment).
pub async fn store_instance(url: &str) -> String {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let mut c = sqlx::AnyConnection::connect(url).await.expect("open the test store");
    let id: String = sqlx::query_scalar("SELECT value FROM meta WHERE key = 'instance'")
        .fetch_one(&mut c)
        .await
        .expect("the server recorded its store id");
    let _ = c.close().await;
    id
}

/// Waits until `path` exists (e.g. a job's first checkpoint); panics after `secs`.
pub async fn wait_file(path: &std::path::Path, secs: u64) {
    for _ in 0..secs * 10 {
        if path.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{} did not appear within {secs} s", path.display());
}

/// A fake `nvidia-smi`: answers the telemetry query
/// (`--query-gpu=index,utilization.gpu,memory.used,memory.total
/// --format=csv,noheader,nounits`) and the inventory's (`index,name,uuid`)
/// from a file of `index util% mem_used_mib mem_total_mib` lines, which a
/// test rewrites ([`set_gpus`]) to make GPUs busy or idle; a line `raw
/// TEXT` is printed as `TEXT`. Any other arguments fail. Returns the
/// program's and the file's paths (absolute: a Slurm node, which is this
/// host, runs the same program).
pub fn fake_nvidia_smi(dir: &Path) -> (String, PathBuf) {
    let file = dir.join("gpus.txt");
    std::fs::write(&file, "").expect("write the fake GPUs");
    let text = format!(
        r#"#!/bin/sh
f='{}'
case "$*" in
  *--query-gpu=index,utilization.gpu,memory.used,memory.total*--format=csv,noheader,nounits*)
    while read -r i u m t; do if [ "$i" = raw ]; then echo "$u $m $t"; else echo "$i, $u, $m, $t"; fi; done < "$f" ;;
  *--query-gpu=index,name,uuid*)
    while read -r i _; do [ "$i" = raw ] || echo "$i, NVIDIA H100 80GB HBM3, GPU-$i"; done < "$f" ;;
  *) echo "unexpected arguments: $*" >&2; exit 9 ;;
esac
"#,
        file.display()
    );
    (script(dir, "nvidia-smi", &text), file)
}

/// Rewrites the fake GPUs of [`fake_nvidia_smi`] at once (a reader never
/// sees half a file): `(index, utilization %, memory used MiB)`, of 81559
/// MiB each.
pub fn set_gpus(file: &Path, gpus: &[(u32, u32, u64)]) {
    let text: String = gpus.iter().map(|(i, u, m)| format!("{i} {u} {m} 81559\n")).collect();
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write the fake GPUs");
    std::fs::rename(&tmp, file).expect("replace the fake GPUs");
}

/// The value of the Prometheus series `series` (name and labels exactly
/// as exposed) in `text`, if present.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A signed-in dashboard session: its cookie and CSRF token, and plain
/// HTTP calls with them (redirects are not followed, so a test sees them).
pub struct Browser {
    pub url: String,
    /// The session cookie (`allot_session=…`).
    pub cookie: String,
    pub csrf: String,
    client: reqwest::Client,
    /// Other cookies the server set (the one-shot message after a change).
    jar: std::sync::Mutex<std::collections::BTreeMap<String, String>>,
}

/// A page's answer: status, `Location`, `Set-Cookie` values and body.
#[derive(Debug)]
pub struct PageAnswer {
    pub status: u16,
    pub location: Option<String>,
    pub set_cookies: Vec<String>,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

/// A client that does not follow redirects.
pub fn page_client() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client")
}

/// Sends one request; `cookie` and `form` (urlencoded) when given.
pub async fn page_request(
    client: &reqwest::Client,
    method: &str,
    url: &str,
    cookie: Option<&str>,
    form: Option<&[(&str, &str)]>,
    headers: &[(&str, &str)],
) -> PageAnswer {
    let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut req = client.request(m, url);
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    if let Some(f) = form {
        let body: Vec<String> = f.iter().map(|(k, v)| format!("{k}={}", form_encode(v))).collect();
        req = req.header("content-type", "application/x-www-form-urlencoded").body(body.join("&"));
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.expect("http call");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let location = headers.get("location").and_then(|v| v.to_str().ok()).map(String::from);
    let set_cookies = headers.get_all("set-cookie").iter().filter_map(|v| v.to_str().ok()).map(String::from).collect();
    let body = resp.text().await.expect("body");
    PageAnswer { status, location, set_cookies, headers, body }
}

fn form_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            b' ' => "+".to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The value of the page's first `name="csrf"` field.
pub fn csrf_of(page: &str) -> Option<String> {
    let at = page.find(r#"name="csrf" value=""#)? + r#"name="csrf" value=""#.len();
    page[at..].split('"').next().map(String::from)
}

impl Browser {
    /// Signs in at `/login` with `token`; panics unless it succeeds.
    pub async fn sign_in(server: &Server, token: &str) -> Browser {
        let client = page_client();
        let a =
            page_request(&client, "POST", &format!("{}/login", server.url), None, Some(&[("token", token)]), &[]).await;
        assert_eq!(a.status, 303, "sign-in: {a:?}");
        let set = a.set_cookies.iter().find(|c| c.starts_with("allot_session=")).expect("a session cookie");
        let cookie = set.split(';').next().expect("name=value").to_string();
        let home = page_request(&client, "GET", &format!("{}/", server.url), Some(&cookie), None, &[]).await;
        assert_eq!(home.status, 200, "home after sign-in: {home:?}");
        let csrf = csrf_of(&home.body).expect("a CSRF field on the page");
        Browser { url: server.url.clone(), cookie, csrf, client, jar: Default::default() }
    }

    /// The `Cookie` header: the session and whatever else the server set.
    fn cookies(&self) -> String {
        let jar = self.jar.lock().expect("jar");
        std::iter::once(self.cookie.clone())
            .chain(jar.iter().map(|(k, v)| format!("{k}={v}")))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Keeps the cookies an answer sets (a `Max-Age=0` one is dropped).
    fn keep(&self, a: &PageAnswer) {
        let mut jar = self.jar.lock().expect("jar");
        for c in &a.set_cookies {
            let Some((k, v)) = c.split(';').next().and_then(|kv| kv.split_once('=')) else { continue };
            if k == "allot_session" {
                continue;
            }
            if c.contains("Max-Age=0") {
                jar.remove(k);
            } else {
                jar.insert(k.to_string(), v.to_string());
            }
        }
    }

    pub async fn get(&self, path: &str) -> PageAnswer {
        let a =
            page_request(&self.client, "GET", &format!("{}{path}", self.url), Some(&self.cookies()), None, &[]).await;
        self.keep(&a);
        a
    }

    /// POSTs a form with this session's CSRF token added.
    pub async fn post(&self, path: &str, fields: &[(&str, &str)]) -> PageAnswer {
        let mut f = fields.to_vec();
        f.push(("csrf", &self.csrf));
        self.post_raw(path, &f, &[]).await
    }

    /// POSTs a form exactly as given (no CSRF token added).
    pub async fn post_raw(&self, path: &str, fields: &[(&str, &str)], headers: &[(&str, &str)]) -> PageAnswer {
        let url = format!("{}{path}", self.url);
        let a = page_request(&self.client, "POST", &url, Some(&self.cookies()), Some(fields), headers).await;
        self.keep(&a);
        a
    }
}
