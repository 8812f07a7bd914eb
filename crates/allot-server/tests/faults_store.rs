//! Store and lease faults against real `allot serve` processes: a second
//! server on a live store, kill -9 of the active server under concurrent
//! submissions (restarted, or taken over by a standby), a paused server,
//! PostgreSQL restarted under load, budget changes and token creations
//! racing submissions on SQLite, SQLite on a full or read-only file system,
//! and the database file deleted while serving.
//!
//! Every case checks the guarantees of docs/reliability.md from the
//! store's own records: no acknowledged submission lost, no workload with
//! two attempts at once, no GPU in two attempts at once, no process of a
//! workload running twice (the `DOUBLE` marker of `WORK_SH`), and, where
//! the server is left running, the ledger equals the recorded allocation
//! time. Failover times are printed (`failover:` lines).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use allot_server::store::Store;
use rand::Rng;
use serde_json::{Value, json};
use support::{Backend, CONFIG, Fixture, WORK_SH, allot_bin, script};

/// Short lease timings so that takeovers take seconds.
const LEASE: [&str; 6] = ["--lease-duration", "3s", "--lease-renew-deadline", "2s", "--lease-retry", "250ms"];

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// One `allot serve` process of a test (several may share a store and a
/// data directory, as an active server and its standby would).
struct Proc {
    name: String,
    child: Option<Child>,
    port: u16,
    log: PathBuf,
}

impl Proc {
    /// Starts `allot serve` on `db` with the data directory `dir/data`; does not wait.
    fn spawn(dir: &Path, db: &str, name: &str, extra: &[&str]) -> Proc {
        Proc::spawn_on(dir, db, name, free_port(), extra)
    }

    fn spawn_on(dir: &Path, db: &str, name: &str, port: u16, extra: &[&str]) -> Proc {
        let config = dir.join("cluster.toml");
        if !config.exists() {
            std::fs::write(&config, CONFIG).expect("write config");
        }
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::OpenOptions::new().create(true).append(true).open(&log).expect("log");
        let child = Command::new(allot_bin())
            .args(["serve", "--single-user", "--config"])
            .arg(&config)
            .args(["--db", db, "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
            .arg(dir.join("data"))
            .args(extra)
            .current_dir(dir)
            .env("ALLOT_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .expect("start allot serve");
        Proc { name: name.into(), child: Some(child), port, log }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().expect("try_wait"))
    }

    /// Waits until it answers `/v1/health`; returns how long that took.
    async fn wait_serving(&mut self, secs: u64) -> Duration {
        let t0 = Instant::now();
        let client = reqwest::Client::builder().timeout(Duration::from_millis(500)).build().expect("client");
        loop {
            if let Ok(r) = client.get(format!("{}/v1/health", self.url())).send().await
                && r.status().is_success()
            {
                return t0.elapsed();
            }
            if let Some(status) = self.exited() {
                panic!("{} exited with {status} instead of serving:\n{}", self.name, self.log());
            }
            assert!(
                t0.elapsed() < Duration::from_secs(secs),
                "{} not serving after {secs} s:\n{}",
                self.name,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Waits until the process exits; returns its status.
    async fn wait_exit(&mut self, secs: u64) -> ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(secs),
                "{} still running after {secs} s:\n{}",
                self.name,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: a signal to the child this test started.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0, "signal {sig} to {}", self.name);
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().expect("kill -9");
            c.wait().expect("reap");
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

async fn http(url: &str, method: &str, path: &str, token: &str, body: Option<Value>) -> Result<(u16, Value), String> {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().expect("client");
    let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut req = client.request(m, format!("{url}{path}")).bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let retry_after = resp.headers().contains_key("retry-after");
    let text = resp.text().await.map_err(|e| e.to_string())?;
    if status == 503 && !retry_after {
        return Err(format!("503 without Retry-After: {text}"));
    }
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::String(text))))
}

/// Concurrent submissions against whichever of `urls` answers: what was
/// acknowledged (201) and how the others were answered.
#[derive(Default)]
struct Tally {
    acked: Vec<i64>,
    answers: BTreeMap<String, usize>,
    /// Answers other than 201, 503 with Retry-After or a refused connection.
    unexpected: Vec<String>,
}

impl Tally {
    /// Prints the figures; every submission was acknowledged, and every
    /// other answer was a 503 with Retry-After or a refused connection.
    fn check(&self, total: usize, log: &str) {
        println!("load: {} acknowledged, other answers {:?}", self.acked.len(), self.answers);
        assert!(self.unexpected.is_empty(), "unexpected answers: {:#?}\n{log}", self.unexpected);
        assert_eq!(self.acked.len(), total, "every submission is eventually acknowledged: {:?}\n{log}", self.answers);
    }
}

fn submission(work: &str, i: usize) -> Value {
    let account = ["org/a", "org/b", "lab/x"][i % 3];
    json!({"account": account, "gpus": 1 + (i % 2) as u32, "command": [work, "1"],
           "expected_duration_s": 1, "checkpoint_interval_s": 1})
}

/// `total` submissions from `clients` concurrent clients; each is sent
/// until it gets an answer other than a connection error or 503 (trying
/// the next url after a failure), or `secs` have passed.
fn load(
    urls: Vec<String>,
    token: &str,
    work: &str,
    total: usize,
    clients: usize,
    secs: u64,
) -> tokio::task::JoinHandle<Tally> {
    let tally = Arc::new(Mutex::new(Tally::default()));
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (token, work) = (token.to_string(), work.to_string());
    tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut tasks = tokio::task::JoinSet::new();
        for c in 0..clients {
            let (urls, token, work, tally, next) =
                (urls.clone(), token.clone(), work.clone(), tally.clone(), next.clone());
            tasks.spawn(async move {
                let mut u = c % urls.len();
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if i >= total {
                        return;
                    }
                    loop {
                        let r = http(&urls[u], "POST", "/v1/workloads", &token, Some(submission(&work, i))).await;
                        let key = match &r {
                            Ok((201, v)) => {
                                let id = v["id"].as_str().and_then(|s| s.parse().ok()).expect("id");
                                tally.lock().unwrap().acked.push(id);
                                break;
                            }
                            Ok((s, _)) => format!("http {s}"),
                            Err(e) if e.contains("Retry-After") => e.clone(),
                            Err(_) => "connection error".to_string(),
                        };
                        {
                            let mut t = tally.lock().unwrap();
                            *t.answers.entry(key.clone()).or_default() += 1;
                            if key != "http 503" && key != "connection error" {
                                t.unexpected.push(format!("submission {i}: {r:?}"));
                            }
                        }
                        if Instant::now() > deadline {
                            return;
                        }
                        u = (u + 1) % urls.len();
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        std::mem::take(&mut *tally.lock().unwrap())
    })
}

/// What the store's records say about the guarantees.
#[derive(Debug, Default, PartialEq, Eq)]
struct Verdict {
    acked_lost: usize,
    workloads_twice_at_once: usize,
    gpu_double_allocations: usize,
    processes_twice_at_once: usize,
}

const CLEAN: Verdict =
    Verdict { acked_lost: 0, workloads_twice_at_once: 0, gpu_double_allocations: 0, processes_twice_at_once: 0 };

async fn verdict(db: &str, acked: &[i64], data: &Path) -> Verdict {
    let store = Store::open(db).await.expect("open the store to check it");
    let seqs: BTreeSet<i64> = store.all_workloads().await.expect("workloads").iter().map(|w| w.seq).collect();
    let attempts = store.all_attempts().await.expect("attempts");
    store.close().await;
    let mut v = Verdict { acked_lost: acked.iter().filter(|a| !seqs.contains(a)).count(), ..Default::default() };
    let open = |e: Option<i64>| e.unwrap_or(i64::MAX);
    let mut by_workload: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
    let mut by_gpu: BTreeMap<(String, i64), Vec<(i64, i64)>> = BTreeMap::new();
    for a in &attempts {
        by_workload.entry(a.workload).or_default().push((a.start_t, open(a.end_t)));
        let alloc: Value = serde_json::from_str(&a.alloc).expect("alloc json");
        for n in alloc.as_array().expect("alloc") {
            for g in n["gpus"].as_array().expect("gpus") {
                let key = (n["node"].as_str().expect("node").to_string(), g.as_i64().expect("gpu"));
                by_gpu.entry(key).or_default().push((a.start_t, open(a.end_t)));
            }
        }
    }
    let overlaps = |mut spans: Vec<(i64, i64)>| {
        spans.sort();
        spans.windows(2).filter(|w| w[0].1 > w[1].0).count()
    };
    v.workloads_twice_at_once = by_workload.into_values().map(overlaps).sum();
    v.gpu_double_allocations = by_gpu.into_values().map(overlaps).sum();
    if let Ok(dirs) = std::fs::read_dir(data.join("checkpoints")) {
        v.processes_twice_at_once = dirs.flatten().filter(|d| d.path().join("DOUBLE").exists()).count();
    }
    v
}

/// Drains both nodes (every running workload is stopped under the
/// contract), waits until no attempt is open, then compares each account's
/// ledger with Σ (end − start) × GPUs of its subtree's attempts.
async fn assert_ledger(url: &str, token: &str, db: &str) {
    for n in ["gpu-0", "gpu-1"] {
        let r = http(url, "POST", &format!("/v1/nodes/{n}/drain"), token, None).await.expect("drain");
        assert_eq!(r.0, 200, "drain {n}: {r:?}");
    }
    let store = Store::open(db).await.expect("open");
    let deadline = Instant::now() + Duration::from_secs(30);
    let attempts = loop {
        let a = store.all_attempts().await.expect("attempts");
        let open: Vec<_> = a.iter().filter(|a| a.end_t.is_none()).map(|a| (a.workload, a.attempt)).collect();
        if open.is_empty() {
            break a;
        }
        assert!(Instant::now() < deadline, "attempts still open 30 s after draining: {open:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let owner: BTreeMap<i64, String> =
        store.all_workloads().await.expect("workloads").into_iter().map(|w| (w.seq, w.account)).collect();
    store.close().await;
    let mut recorded: BTreeMap<String, i64> = BTreeMap::new();
    for a in &attempts {
        let acct = &owner[&a.workload];
        for (i, _) in acct.match_indices('/').chain([(acct.len(), "")]) {
            *recorded.entry(acct[..i].to_string()).or_default() += (a.end_t.unwrap() - a.start_t) * a.gpus;
        }
    }
    let (_, accounts) = http(url, "GET", "/v1/accounts", token, None).await.expect("accounts");
    for a in accounts.as_array().expect("accounts") {
        let path = a["path"].as_str().unwrap();
        let charged = (a["charged_gpu_hours"].as_f64().unwrap() * 3600.0).round() as i64;
        assert_eq!(charged, recorded.get(path).copied().unwrap_or(0), "ledger of {path}: {accounts}");
    }
}

/// PostgreSQL cases share the server one case restarts: they run while
/// it is up (read), the restart case alone (write).
static PG: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

async fn pg_or_panic(backend: Backend) -> Option<tokio::sync::RwLockReadGuard<'static, ()>> {
    if backend != Backend::Postgres {
        return None;
    }
    if std::env::var_os("ALLOT_TEST_PG_URL").is_none() {
        panic!("{}", support::PG_HELP);
    }
    Some(PG.read().await)
}

both_stores!(second_server_refused_sqlite, second_server_refused_postgres, second_server_refused);

/// A second `allot serve` on a live store refuses to start, naming the
/// server that holds it, and touches nothing: the first server's running
/// workload keeps its attempt and the first server goes on scheduling.
async fn second_server_refused(backend: Backend) {
    let _pg = pg_or_panic(backend).await;
    let f = Fixture::new(backend, "second").await;
    let work = script(&f.dir, "work.sh", WORK_SH);
    let mut a = Proc::spawn(&f.dir, &f.db.url, "first", &LEASE);
    a.wait_serving(30).await;
    let body = json!({"account": "org/a", "gpus": 2, "command": [&work, "20"], "expected_duration_s": 20});
    let (s, v) = http(&a.url(), "POST", "/v1/workloads", &f.admin, Some(body)).await.unwrap();
    assert_eq!(s, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let running = wait_workload(&a.url(), &f.admin, &id, 20, |v| v["attempts"][0]["pid"].is_number()).await;

    // Same store, same data directory, another port (as an accidental
    // second start would be).
    let mut b = Proc::spawn(&f.dir, &f.db.url, "second", &LEASE);
    let status = b.wait_exit(20).await;
    let log = b.log();
    assert!(!status.success(), "the second server must refuse: {log}");
    for part in ["another server is serving this store", &format!("pid {}", a.pid()), &format!("127.0.0.1:{}", a.port)]
    {
        assert!(log.contains(part), "the refusal names {part:?}:\n{log}");
    }
    assert!(!log.contains("recovered"), "the second server must refuse before recovery:\n{log}");

    let now = wait_workload(&a.url(), &f.admin, &id, 5, |_| true).await;
    assert_eq!(now["workload"]["state"], "running", "{now}");
    assert_eq!(now["attempts"].as_array().unwrap().len(), 1, "no new attempt: {now}");
    assert_eq!(now["attempts"][0]["pid"], running["attempts"][0]["pid"], "{now}");
    let body = json!({"account": "org/b", "gpus": 1, "command": ["true"], "expected_duration_s": 1});
    let (s, v) = http(&a.url(), "POST", "/v1/workloads", &f.admin, Some(body)).await.unwrap();
    assert_eq!(s, 201, "{v}");
    let quick = v["id"].as_str().unwrap().to_string();
    wait_workload(&a.url(), &f.admin, &quick, 20, |v| v["workload"]["state"] == "finished").await;
    assert_eq!(verdict(&f.db.url, &[], &f.dir.join("data")).await, CLEAN);
    drop((a, b));
    f.finish().await;
}

async fn wait_workload(url: &str, token: &str, id: &str, secs: u64, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let r = http(url, "GET", &format!("/v1/workloads/{id}"), token, None).await;
        if let Ok((200, v)) = &r
            && pred(v)
        {
            return v.clone();
        }
        assert!(Instant::now() < deadline, "workload {id} not as expected after {secs} s: {r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

both_stores!(kill9_restart_under_load_sqlite, kill9_restart_under_load_postgres, kill9_restart_under_load);

/// kill -9 of the only server at a random moment under 2,000 concurrent
/// submissions, then a restart on the same store: nothing acknowledged is
/// lost, nothing ran twice, the ledger equals the attempts.
async fn kill9_restart_under_load(backend: Backend) {
    let _pg = pg_or_panic(backend).await;
    let f = Fixture::new(backend, "kill9").await;
    let work = script(&f.dir, "work.sh", WORK_SH);
    let mut a = Proc::spawn(&f.dir, &f.db.url, "active", &LEASE);
    a.wait_serving(30).await;
    let url = a.url();
    let port = a.port;
    let job = load(vec![url.clone()], &f.admin, &work, 2000, 32, 90);
    let at = rand::thread_rng().gen_range(200..1500);
    tokio::time::sleep(Duration::from_millis(at)).await;
    a.kill9();
    let t0 = Instant::now();
    // The restart keeps the port, so the clients find it again.
    let mut b = Proc::spawn_on(&f.dir, &f.db.url, "restarted", port, &LEASE);
    let took = b.wait_serving(30).await;
    println!(
        "restart: kill -9 at {at} ms into the load, serving again after {:.2} s ({:?})",
        t0.elapsed().as_secs_f64(),
        took
    );
    let tally = job.await.expect("load");
    tally.check(2000, &b.log());
    assert_eq!(verdict(&f.db.url, &tally.acked, &f.dir.join("data")).await, CLEAN);
    assert_ledger(&b.url(), &f.admin, &f.db.url).await;
    drop(b);
    f.finish().await;
}

/// kill -9 of the active PostgreSQL server under load with a hot standby,
/// three times in a row (each survivor's new standby takes the next turn):
/// the standby takes over through recovery; the failover times are printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_standby_takes_over_postgres() {
    let _pg = pg_or_panic(Backend::Postgres).await;
    let f = Fixture::new(Backend::Postgres, "standby").await;
    let work = script(&f.dir, "work.sh", WORK_SH);
    let mut active = Proc::spawn(&f.dir, &f.db.url, "server-0", &LEASE);
    active.wait_serving(30).await;
    let standby_args: Vec<&str> = LEASE.iter().copied().chain(["--standby"]).collect();
    let mut acked = Vec::new();
    let mut times = Vec::new();
    for round in 1..=3 {
        let mut standby = Proc::spawn(&f.dir, &f.db.url, &format!("server-{round}"), &standby_args);
        wait_log(&standby, "standing by", 20).await;
        let total = if round == 1 { 2000 } else { 300 };
        let job = load(vec![active.url(), standby.url()], &f.admin, &work, total, 32, 90);
        let at = rand::thread_rng().gen_range(200..1200);
        tokio::time::sleep(Duration::from_millis(at)).await;
        active.kill9();
        let took = standby.wait_serving(30).await;
        times.push(took.as_secs_f64());
        println!(
            "failover: round {round}, kill -9 at {at} ms into the load, standby serving after {:.2} s",
            took.as_secs_f64()
        );
        let tally = job.await.expect("load");
        tally.check(total, &standby.log());
        acked.extend(tally.acked);
        assert!(standby.log().contains("took over the store's lease"), "{}", standby.log());
        active = standby;
    }
    println!("failover: kill -9 -> standby serving, {} runs: {:?} s", times.len(), times);
    assert_eq!(verdict(&f.db.url, &acked, &f.dir.join("data")).await, CLEAN);
    assert_ledger(&active.url(), &f.admin, &f.db.url).await;
    drop(active);
    f.finish().await;
}

async fn wait_log(p: &Proc, what: &str, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !p.log().contains(what) {
        assert!(Instant::now() < deadline, "{} did not log {what:?} within {secs} s:\n{}", p.name, p.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The active server is paused (SIGSTOP) for longer than its lease: the
/// standby takes over; when the old one resumes it writes nothing more and
/// stops, saying why; nothing ran twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_is_fenced_postgres() {
    let _pg = pg_or_panic(Backend::Postgres).await;
    let f = Fixture::new(Backend::Postgres, "paused").await;
    let work = script(&f.dir, "work.sh", WORK_SH);
    let mut old = Proc::spawn(&f.dir, &f.db.url, "old", &LEASE);
    old.wait_serving(30).await;
    let standby_args: Vec<&str> = LEASE.iter().copied().chain(["--standby"]).collect();
    let mut new = Proc::spawn(&f.dir, &f.db.url, "new", &standby_args);
    wait_log(&new, "standing by", 20).await;
    let job = load(vec![old.url()], &f.admin, &work, 300, 8, 60);
    let first = job.await.expect("load");
    first.check(300, &old.log());
    old.signal(libc::SIGSTOP);
    let t0 = Instant::now();
    let took = new.wait_serving(30).await;
    println!("failover: SIGSTOP (lease 3 s) -> standby serving after {:.2} s", took.as_secs_f64());
    // Work keeps coming to the new server while the old one is paused.
    let second = load(vec![new.url()], &f.admin, &work, 300, 8, 60).await.expect("load");
    second.check(300, &new.log());
    let paused = Duration::from_secs(5).saturating_sub(t0.elapsed());
    tokio::time::sleep(paused).await;
    old.signal(libc::SIGCONT);
    let status = old.wait_exit(20).await;
    assert!(!status.success(), "the fenced server exits with an error");
    let log = old.log();
    assert!(log.contains("superseded"), "the old server says why it stopped:\n{log}");
    let acked: Vec<i64> = first.acked.iter().chain(&second.acked).copied().collect();
    assert_eq!(acked.len(), 600);
    assert_eq!(verdict(&f.db.url, &acked, &f.dir.join("data")).await, CLEAN);
    assert_ledger(&new.url(), &f.admin, &f.db.url).await;
    drop(new);
    f.finish().await;
}

/// PostgreSQL restarted under load (down for over 5 s, longer than the
/// renew deadline): submissions get 503 with Retry-After within seconds
/// while it is down, the server does not exit, and everything resumes when
/// it is back. Needs ALLOT_TEST_PG_CTL (a pg_ctl command prefix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restart_under_load() {
    if std::env::var_os("ALLOT_TEST_PG_URL").is_none() {
        panic!("{}", support::PG_HELP);
    }
    let _alone = PG.write().await;
    let ctl = std::env::var("ALLOT_TEST_PG_CTL").unwrap_or_else(|_| {
        panic!(
            "ALLOT_TEST_PG_CTL is not set: this test restarts PostgreSQL and needs a pg_ctl command prefix for the \
             test cluster, e.g. ALLOT_TEST_PG_CTL='runuser -u postgres -- pg_ctl -D /path/to/data' (see .ci/postgres.sh)"
        )
    });
    let f = Fixture::new(Backend::Postgres, "pgrestart").await;
    let work = script(&f.dir, "work.sh", WORK_SH);
    let mut a = Proc::spawn(&f.dir, &f.db.url, "active", &LEASE);
    a.wait_serving(30).await;
    let job = load(vec![a.url()], &f.admin, &work, 2000, 32, 120);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pg = PgCtl { ctl, stopped: false };
    let mut pg = pg;
    pg.run("stop -m fast");
    pg.stopped = true;
    let down = Instant::now();
    // While it is down, a submission is answered, and with a 503.
    let probe = http(&a.url(), "POST", "/v1/workloads", &f.admin, Some(submission(&work, 0))).await;
    println!(
        "pg restart: a submission while PostgreSQL is down answered after {:.1} s: {probe:?}",
        down.elapsed().as_secs_f64()
    );
    assert!(
        matches!(probe, Ok((503, _))),
        "while PostgreSQL is down a submission gets 503 with Retry-After: {probe:?}"
    );
    tokio::time::sleep(Duration::from_secs(3).saturating_sub(down.elapsed())).await;
    assert!(a.exited().is_none(), "the server exited while PostgreSQL was down:\n{}", a.log());
    let (s, _) = http(&a.url(), "GET", "/v1/health", &f.admin, None).await.expect("the server answers");
    assert_eq!(s, 200);
    pg.run("start");
    pg.stopped = false;
    let tally = job.await.expect("load");
    println!("pg restart: submissions done {:.1} s after the stop", down.elapsed().as_secs_f64());
    tally.check(2000, &a.log());
    assert!(a.exited().is_none(), "{}", a.log());
    assert_eq!(verdict(&f.db.url, &tally.acked, &f.dir.join("data")).await, CLEAN);
    assert_ledger(&a.url(), &f.admin, &f.db.url).await;
    drop(a);
    f.finish().await;
}

/// Runs `ALLOT_TEST_PG_CTL <action>`; starts PostgreSQL again if a test
/// ends while it is stopped.
struct PgCtl {
    ctl: String,
    stopped: bool,
}

impl PgCtl {
    fn status(&self, action: &str) -> std::io::Result<ExitStatus> {
        Command::new("sh")
            .args(["-c", &format!("{} {action}", self.ctl)])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
    }

    fn run(&self, action: &str) {
        let status = self.status(action).expect("run ALLOT_TEST_PG_CTL");
        assert!(status.success(), "`{} {action}` failed: {status}", self.ctl);
    }
}

impl Drop for PgCtl {
    fn drop(&mut self) {
        if self.stopped {
            let _ = self.status("start");
        }
    }
}

/// Budget changes and token creations while users submit (SQLite): every
/// change is answered 200/201 (none fails on `database is locked`), and the
/// scheduler keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_changes_and_tokens_during_submissions_sqlite() {
    let f = Fixture::new(Backend::Sqlite, "patch").await;
    let work = script(&f.dir, "work.sh", WORK_SH);
    let mut a = Proc::spawn(&f.dir, &f.db.url, "active", &LEASE);
    a.wait_serving(30).await;
    let job = load(vec![a.url()], &f.admin, &work, 2000, 32, 90);
    let mut failures = Vec::new();
    for i in 0..40 {
        let path = ["org/a", "org/b", "lab/x"][i % 3];
        let body = json!({"budget_gpu_hours": 100 + i});
        match http(&a.url(), "PATCH", &format!("/v1/accounts/{path}"), &f.admin, Some(body)).await {
            Ok((200, _)) => {}
            other => failures.push(format!("PATCH {path}: {other:?}")),
        }
        let body = json!({"name": format!("user-{i}"), "role": "researcher", "projects": ["org/a"]});
        match http(&a.url(), "POST", "/v1/tokens", &f.admin, Some(body)).await {
            Ok((201, _)) => {}
            other => failures.push(format!("token {i}: {other:?}")),
        }
    }
    let tally = job.await.expect("load");
    assert!(failures.is_empty(), "{} of 80 changes failed: {failures:#?}\n{}", failures.len(), a.log());
    assert!(a.exited().is_none(), "the server died:\n{}", a.log());
    tally.check(2000, &a.log());
    assert_eq!(verdict(&f.db.url, &tally.acked, &f.dir.join("data")).await, CLEAN);
    assert_ledger(&a.url(), &f.admin, &f.db.url).await;
    drop(a);
    f.finish().await;
}

/// A tmpfs of `size` mounted in a private directory; unmounted on drop.
struct SmallFs(PathBuf);

impl SmallFs {
    fn mount(dir: &Path, size: &str) -> SmallFs {
        let m = dir.join("mnt");
        std::fs::create_dir_all(&m).expect("mount point");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&m)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "this test mounts a small tmpfs (as root): mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SmallFs(m)
    }

    /// The same files through a read-only bind mount (unmounted on drop).
    fn read_only_view(&self, dir: &Path) -> SmallFs {
        let m = dir.join("ro");
        std::fs::create_dir_all(&m).expect("mount point");
        let out = Command::new("mount").args(["--bind", "-o", "ro"]).arg(&self.0).arg(&m).output().expect("mount");
        assert!(out.status.success(), "read-only bind mount: {}", String::from_utf8_lossy(&out.stderr));
        SmallFs(m)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Submits until an answer other than 201 comes (or `n` were acknowledged).
async fn submit_until_refused(url: &str, token: &str, work: &str, n: usize, acked: &mut Vec<i64>) -> Option<u16> {
    for i in 0..n {
        match http(url, "POST", "/v1/workloads", token, Some(submission(work, i))).await {
            Ok((201, v)) => acked.push(v["id"].as_str().unwrap().parse().unwrap()),
            Ok((s, v)) => {
                assert_eq!(s, 503, "a full or read-only store answers 503: {v}");
                return Some(s);
            }
            Err(e) => panic!("submission: {e}"),
        }
    }
    None
}

/// SQLite on a small file system that fills up: submissions get 503 with
/// Retry-After, the server logs why and keeps answering (no exit, no
/// SIGBUS), and everything resumes when space returns. Then the same files
/// read-only: the start fails with a clear error (no signal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_full_and_read_only_file_system() {
    let f = Fixture::new(Backend::Sqlite, "full").await;
    let work = script(&f.dir, "work.sh", WORK_SH);
    let fs = SmallFs::mount(&f.dir, "16m");
    let db = format!("sqlite://{}", fs.0.join("allot.db").display());
    let admin = support::token(&db, "admin", "root", &[]);
    let mut a = Proc::spawn(&f.dir, &db, "active", &LEASE);
    a.wait_serving(30).await;
    let mut acked = Vec::new();
    assert_eq!(submit_until_refused(&a.url(), &admin, &work, 20, &mut acked).await, None);
    // Fill the file system.
    let filler = fs.0.join("filler");
    let mut file = std::fs::File::create(&filler).expect("filler");
    let chunk = vec![0u8; 64 * 1024];
    while std::io::Write::write_all(&mut file, &chunk).is_ok() {}
    drop(file);
    let refused = submit_until_refused(&a.url(), &admin, &work, 5000, &mut acked).await;
    assert_eq!(refused, Some(503), "a full disk refuses submissions");
    assert!(a.exited().is_none(), "the server exited on a full disk:\n{}", a.log());
    let (s, _) = http(&a.url(), "GET", "/v1/health", &admin, None).await.expect("answers");
    assert_eq!(s, 200);
    std::fs::remove_file(&filler).expect("free the space");
    let deadline = Instant::now() + Duration::from_secs(20);
    while submit_until_refused(&a.url(), &admin, &work, 1, &mut acked).await.is_some() {
        assert!(Instant::now() < deadline, "no recovery after space returned:\n{}", a.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The scheduler went on: the last submission runs to its end.
    let last = acked.last().unwrap().to_string();
    wait_workload(&a.url(), &admin, &last, 60, |v| v["attempts"][0]["end_t"].is_number()).await;
    let log = a.log();
    assert!(log.contains("the store is unavailable") || log.contains("store error"), "the outage is logged:\n{log}");
    assert_eq!(verdict(&db, &acked, &f.dir.join("data")).await, CLEAN);
    assert_ledger(&a.url(), &admin, &db).await;
    a.kill9();
    // The same files, read-only: a clear error at the start, no signal.
    let ro = fs.read_only_view(&f.dir);
    let ro_db = format!("sqlite://{}", ro.0.join("allot.db").display());
    let mut b = Proc::spawn(&f.dir, &ro_db, "read-only", &LEASE);
    let status = b.wait_exit(20).await;
    assert_eq!(status.code(), Some(3), "the store is unavailable (docs/cli.md), not a signal: {status}\n{}", b.log());
    assert!(b.log().contains("Read-only file system"), "{}", b.log());
    drop(ro);
    let mut c = Proc::spawn(&f.dir, &db, "writable-again", &LEASE);
    c.wait_serving(30).await;
    assert_eq!(submit_until_refused(&c.url(), &admin, &work, 1, &mut acked).await, None);
    assert_eq!(verdict(&db, &acked, &f.dir.join("data")).await, CLEAN);
    drop(c);
    drop(fs);
    f.finish().await;
}

/// The SQLite file deleted while serving: the server stops with a clear
/// error after copying everything committed aside; the next start refuses
/// instead of creating an empty store; `allot db init` starts afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_file_deleted_while_serving() {
    let f = Fixture::new(Backend::Sqlite, "deleted").await;
    let work = script(&f.dir, "work.sh", WORK_SH);
    let mut a = Proc::spawn(&f.dir, &f.db.url, "active", &LEASE);
    a.wait_serving(30).await;
    let mut acked = Vec::new();
    assert_eq!(submit_until_refused(&a.url(), &f.admin, &work, 30, &mut acked).await, None);
    let file = f.dir.join("allot.db");
    std::fs::remove_file(&file).expect("delete the database file");
    let status = a.wait_exit(15).await;
    assert!(!status.success());
    let log = a.log();
    assert!(log.contains("was deleted or replaced while serving"), "{log}");
    let rescued = std::fs::read_dir(&f.dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.display().to_string().contains("allot.db.rescued-"))
        .unwrap_or_else(|| panic!("no rescued copy beside the file:\n{log}"));
    let copy = format!("sqlite://{}", rescued.display());
    assert_eq!(
        verdict(&copy, &acked, &f.dir.join("data")).await.acked_lost,
        0,
        "the copy has every acknowledged submission"
    );

    let mut b = Proc::spawn(&f.dir, &f.db.url, "again", &LEASE);
    b.wait_exit(15).await;
    assert!(b.log().contains("does not exist, but the data directory"), "{}", b.log());
    assert!(!file.exists(), "no empty store was created");

    let out = Command::new(allot_bin())
        .args(["db", "init", "--db", &f.db.url, "--data-dir"])
        .arg(f.dir.join("data"))
        .output()
        .expect("allot db init");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let admin = support::token(&f.db.url, "admin", "fresh", &[]);
    let mut c = Proc::spawn(&f.dir, &f.db.url, "fresh", &LEASE);
    c.wait_serving(30).await;
    let (s, v) = http(&c.url(), "GET", "/v1/workloads", &admin, None).await.unwrap();
    assert_eq!((s, v), (200, json!([])), "a fresh, empty store");
    drop(c);
    f.finish().await;
}

both_stores!(writes_are_fenced_by_the_epoch_sqlite, writes_are_fenced_by_the_epoch_postgres, writes_are_fenced);

/// Once another process took the lease over, every write of the old holder
/// fails in the database (the epoch check), whatever its clock says; the
/// new holder's writes go through.
async fn writes_are_fenced(backend: Backend) {
    use allot_server::store::lease::{LeaseConfig, LeaseHolder, Takeover};
    let _pg = pg_or_panic(backend).await;
    let f = Fixture::new(backend, "fence").await;
    let cfg = LeaseConfig::default();
    let old = Store::open(&f.db.url).await.expect("open");
    let me = LeaseHolder { host: "old-host".into(), pid: 1, listen: "127.0.0.1:1".into() };
    let first = old.try_acquire_lease(&me, &cfg, Takeover::IfExpired).await.unwrap().expect("free lease");
    let row = |n: i64| allot_server::store::NewWorkload {
        run_as: None,
        owner: None,
        submit_t: n,
        account: "org/a".into(),
        submitter: "ann".into(),
        class: "batch".into(),
        gpus: 1,
        nodes: 0,
        gpu_type: None,
        clusters: None,
        work_s: 1,
        checkpoint_s: 0,
        util: 1.0,
        priority: "normal".into(),
        preemptible: false,
        name: None,
        command: "[\"true\"]".into(),
        env: "{}".into(),
        retries: 0,
        time_limit_s: None,
        workdir: None,
        checkpoint_on_signal: false,
        conditions: Default::default(),
    };
    old.insert_workload(&row(1)).await.expect("the holder writes");

    let new = Store::open(&f.db.url).await.expect("open");
    let other = LeaseHolder { host: "new-host".into(), pid: 2, listen: "127.0.0.1:2".into() };
    let held = new.try_acquire_lease(&other, &cfg, Takeover::IfExpired).await.unwrap();
    assert_eq!(held.map_err(|r| r.holder), Err(me.clone()), "a live lease is not taken");
    let second = new.try_acquire_lease(&other, &cfg, Takeover::Epoch(first)).await.unwrap().expect("takeover");
    assert_eq!(second, first + 1);

    let e = old.insert_workload(&row(2)).await.expect_err("the old holder is fenced");
    assert!(e.is_fenced() && e.is_unavailable(), "{e}");
    assert!(e.to_string().contains("superseded"), "{e}");
    let ops = [allot_server::store::Op::Failures { seq: 1, failures: 1 }];
    assert!(old.apply(&ops).await.expect_err("every later write too").is_fenced());
    assert!(!old.renew_lease(&cfg).await.unwrap(), "nor can it renew");
    new.insert_workload(&row(3)).await.expect("the new holder writes");
    let all = new.all_workloads().await.unwrap();
    assert_eq!(
        all.iter().map(|w| w.submit_t).collect::<Vec<_>>(),
        [1, 3],
        "nothing of the old holder after the takeover"
    );
    assert_eq!(new.lease().await.unwrap().holder, other);
    old.close().await;
    new.close().await;
    f.finish().await;
}

/// A standby on SQLite waits for the file lock: a graceful stop of the
/// active server (which releases its lease) and a kill -9 both hand over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_takes_over_sqlite() {
    let f = Fixture::new(Backend::Sqlite, "standby-sqlite").await;
    let work = script(&f.dir, "work.sh", WORK_SH);
    let standby_args: Vec<&str> = LEASE.iter().copied().chain(["--standby"]).collect();
    let mut active = Proc::spawn(&f.dir, &f.db.url, "server-0", &LEASE);
    active.wait_serving(30).await;
    let mut acked = Vec::new();
    for (round, how) in [(1, libc::SIGTERM), (2, libc::SIGKILL)] {
        let mut standby = Proc::spawn(&f.dir, &f.db.url, &format!("server-{round}"), &standby_args);
        wait_log(&standby, "standing by", 20).await;
        let tally = load(vec![active.url()], &f.admin, &work, 100, 4, 30).await.expect("load");
        tally.check(100, &active.log());
        acked.extend(tally.acked);
        active.signal(how);
        let status = active.wait_exit(20).await;
        let took = standby.wait_serving(30).await;
        println!(
            "failover: SQLite standby, signal {how}, serving {:.2} s after the old server exited ({status})",
            took.as_secs_f64()
        );
        active = standby;
    }
    assert_eq!(verdict(&f.db.url, &acked, &f.dir.join("data")).await, CLEAN);
    assert_ledger(&active.url(), &f.admin, &f.db.url).await;
    drop(active);
    f.finish().await;
}
