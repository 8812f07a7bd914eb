//! Server benchmarks (prints figures; recorded in docs/server.md):
//!
//! 1. submission throughput through the HTTP API (workloads/s), SQLite and,
//!    when `ALLOT_TEST_PG_URL` is set, PostgreSQL: `ALLOT_BENCH_N`
//!    submissions (default 10,000) from 16 concurrent clients to a server
//!    with the `none` executor on 1,024 GPUs;
//! 2. scheduling-pass latency with those 10,000 workloads pending on 1,024
//!    busy GPUs: the server's own pass histogram, and the `allot` policy's
//!    pass timed directly on the same state;
//! 3. the dashboard with those 10,000 workloads pending: each page's
//!    answer time (median and 95th percentile of 20, on loopback: server
//!    time), and the pass latency while four dashboards poll their pages
//!    (`ALLOT_BENCH_DASHBOARD=0` skips it).
//!
//!
//! The same for a fleet of three clusters (`ALLOT_BENCH_FLEET=1`): the same
//! 1,024 GPUs as clusters of 512, 384 and 128, every third workload pinned
//! to one of them.
//!
//! With `ALLOT_BENCH_ATTACK=1`, only this (issue 30, points 15–18; SQLite):
//! 16 honest researchers (a principal each) submit 10 workloads a second
//! each, first alone, then beside one principal's attacks: a manager's
//! `PATCH` of 1,000 users' shares in a loop, a researcher's submissions
//! naming one 10,000-element array 300 times (`afterok:A:0A:00A…`, six at
//! once) and the same researcher's tight loop of `GET /v1/workloads`
//! (eight at once, waiting as a 429's `Retry-After` says, as `allot`
//! does; the other attackers send again at once). It prints the honest submissions' p50 and p99 latency
//! in both phases and what became of the attackers' requests
//! (`ALLOT_BENCH_ATTACK_S` seconds a phase, default 15;
//! `ALLOT_BENCH_ATTACKS=patch,deps,loop` chooses the attacks).
//!
//! `cargo bench -p allot-server --bench server`

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use allot_server::auth::{Role, TokenSpec, create_token};
use allot_server::store::Store;
use allot_server::views::SubmitRequest;
use allot_server::{ExecutorKind, GpuInventory, ServeOptions};

const CONFIG: &str = r#"
[cluster]
name = "bench"
[[cluster.pools]]
name = "h100"
gpu = "H100"
nodes = 128
gpus_per_node = 8
rack_size = 16

[[accounts]]
path = "org/llm"
share = 3
budget_gpu_hours = 50000
[[accounts]]
path = "org/llm/pretrain"
[[accounts]]
path = "org/llm/post"
[[accounts]]
path = "org/vision"
share = 2
[[accounts]]
path = "org/vision/det"
[[accounts]]
path = "org/vision/gen"
[[accounts]]
path = "org/rl"
share = 1
[[accounts]]
path = "org/rl/sim"

[contract]
scheduling_interval = "1s"
grace = "10s"
"#;

/// [`CONFIG`]'s GPUs and accounts as a fleet of three clusters.
fn fleet_config() -> String {
    let (_, accounts) = CONFIG.split_once("\n[[accounts]]").expect("accounts");
    let mut c = String::from("name = \"bench\"\n");
    for (name, nodes) in [("c1", 64), ("c2", 48), ("c3", 16)] {
        c.push_str(&format!(
            "[[clusters]]\nname = \"{name}\"\n[[clusters.pools]]\nname = \"h100\"\ngpu = \"H100\"\nnodes = {nodes}\n\
             gpus_per_node = 8\nrack_size = 16\n"
        ));
    }
    c.push_str("\n[[accounts]]");
    c.push_str(accounts);
    c
}

/// Whether the bench runs the fleet (`ALLOT_BENCH_FLEET=1`).
fn fleet() -> bool {
    std::env::var("ALLOT_BENCH_FLEET").is_ok_and(|v| v == "1")
}

fn config() -> String {
    if fleet() { fleet_config() } else { CONFIG.to_string() }
}

const PROJECTS: [&str; 6] =
    ["org/llm/pretrain", "org/llm/post", "org/vision/det", "org/vision/gen", "org/rl/sim", "org/llm/pretrain"];
const SIZES: [u32; 6] = [1, 2, 4, 8, 8, 16];

fn request(i: usize) -> SubmitRequest {
    SubmitRequest {
        account: PROJECTS[i % PROJECTS.len()].into(),
        gpus: SIZES[(i / 7) % SIZES.len()],
        command: vec!["true".into()],
        expected_duration_s: Some(3600 + (i as u64 % 13) * 600),
        checkpoint_interval_s: Some(600),
        clusters: match (fleet(), i % 3) {
            (true, 0) => vec![format!("c{}", (i / 3) % 3 + 1)],
            _ => vec![],
        },
        ..Default::default()
    }
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("allot-bench-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("bench dir");
    d
}

async fn fresh_pg(base: &str) -> String {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let name = format!("allot_bench_{}", std::process::id());
    let mut c = sqlx::AnyConnection::connect(base).await.expect("connect to ALLOT_TEST_PG_URL");
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut c).await.expect("drop");
    sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut c).await.expect("create");
    let (head, _) = base.rsplit_once('/').expect("a database in the url");
    format!("{head}/{name}")
}

/// Submits `n` workloads with 16 clients; returns workloads/s.
async fn throughput(url: &str, token: &str, n: usize) -> f64 {
    let client = reqwest::Client::new();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (client, next, url, token) = (client.clone(), next.clone(), url.to_string(), token.to_string());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let r = client.post(format!("{url}/v1/workloads")).bearer_auth(&token).json(&request(i)).send().await;
                assert_eq!(r.expect("submit").status().as_u16(), 201);
            }
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
    n as f64 / t0.elapsed().as_secs_f64()
}

/// Mean and max of the server's pass histogram, from `/metrics`.
async fn pass_latency(url: &str, token: &str) -> (f64, u64) {
    let text = reqwest::Client::new()
        .get(format!("{url}/metrics"))
        .bearer_auth(token)
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let value = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let (sum, count) = (value("allot_scheduling_pass_seconds_sum"), value("allot_scheduling_pass_seconds_count"));
    (if count > 0.0 { sum / count } else { 0.0 }, count as u64)
}

/// The mean of the passes between two readings of [`pass_latency`] (the
/// later mean when none ran between them).
fn mean_since((before_mean, before_count): (f64, u64), (mean, count): (f64, u64)) -> f64 {
    if count > before_count {
        (mean * count as f64 - before_mean * before_count as f64) / (count - before_count) as f64
    } else {
        mean
    }
}

async fn run_backend(label: &str, db: String, n: usize) {
    let d = dir(label);
    std::fs::write(d.join("cluster.toml"), config()).expect("config");
    let store = Store::open(&db).await.expect("open store");
    let spec = TokenSpec {
        name: "bench".into(),
        role: Role::Admin,
        scope: None,
        projects: vec![],
        unix_user: None,
        expires_in_s: None,
    };
    let token = create_token(&store, &spec, "bench").await.expect("token");
    store.close().await;
    let opts = ServeOptions {
        config: d.join("cluster.toml"),
        db,
        listen: "127.0.0.1:0".parse().expect("addr"),
        executor: ExecutorKind::None,
        policy: "allot".into(),
        data_dir: d.join("data"),
        gpu_inventory: GpuInventory::Config,
        slurm: Default::default(),
        standby: false,
        lease: Default::default(),
        allow_uncontained: false,
        single_user: true,
        edge: Default::default(),
        snapshots: Default::default(),
    };
    let running = allot_server::start(&opts).await.expect("start the server");
    let url = format!("http://{}", running.addr);
    let rate = throughput(&url, &token, n).await;
    println!("{label}: {n} submissions through HTTP, 16 clients: {rate:.0} workloads/s");
    // Let the periodic passes run with everything submitted.
    let (before_mean, before_count) = pass_latency(&url, &token).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (mean, count) = pass_latency(&url, &token).await;
    let steady = mean_since((before_mean, before_count), (mean, count));
    println!(
        "{label}: scheduling pass with ~{n} pending on 1024 busy GPUs (server histogram): mean {:.1} ms over {} passes",
        steady * 1000.0,
        count - before_count
    );
    if std::env::var("ALLOT_BENCH_DASHBOARD").map_or(true, |v| v != "0") {
        dashboard(label, &url, &token, n).await;
    }
    running.stop().await.expect("stop");
    let _ = std::fs::remove_dir_all(&d);
}

/// The dashboard's pages over `n` pending workloads, and the passes while
/// dashboards poll.
async fn dashboard(label: &str, url: &str, token: &str, n: usize) {
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let login = client
        .post(format!("{url}/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .expect("sign in");
    let cookie = login
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("allot_session="))
        .and_then(|c| c.split(';').next())
        .expect("a session cookie")
        .to_string();
    let pages =
        ["/?who=all", "/?who=all&state=pending", "/workloads/1", "/queue", "/budgets", "/fleet", "/history?window=1d"];
    for page in pages {
        let mut times = Vec::new();
        let mut status = 0;
        for _ in 0..20 {
            let t0 = Instant::now();
            let r = client.get(format!("{url}{page}")).header("cookie", &cookie).send().await.expect("page");
            status = r.status().as_u16();
            let _ = r.bytes().await.expect("body");
            times.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "{label}: dashboard {page} over {n} pending: median {:.1} ms, p95 {:.1} ms (HTTP {status})",
            times[times.len() / 2],
            times[times.len() * 95 / 100]
        );
    }
    // The passes while four dashboards refresh their pages back to back.
    let (before_mean, before_count) = pass_latency(url, token).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut pollers = Vec::new();
    for i in 0..4 {
        let (client, url, cookie, stop) = (client.clone(), url.to_string(), cookie.clone(), stop.clone());
        pollers.push(tokio::spawn(async move {
            let mut served = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let page = pages[(i + served as usize) % pages.len()];
                let r = client.get(format!("{url}{page}")).header("cookie", &cookie).send().await.expect("page");
                let _ = r.bytes().await;
                served += 1;
            }
            served
        }));
    }
    tokio::time::sleep(Duration::from_secs(6)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut served = 0;
    for p in pollers {
        served += p.await.expect("poller");
    }
    let (mean, count) = pass_latency(url, token).await;
    let during = mean_since((before_mean, before_count), (mean, count));
    println!(
        "{label}: scheduling pass while 4 dashboards polled ({served} pages in 6 s): mean {:.1} ms over {} passes",
        during * 1000.0,
        count - before_count
    );
}

/// The `allot` policy's pass on a state with `n` pending and the cluster full.
fn core_pass(n: usize) {
    use allot_core::{Action, PolicyKind};
    let cfg = allot_trace::config::parse_config(&config(), "bench.toml").expect("config");
    let mut state = allot_core::State::new(cfg.cluster.clone(), cfg.accounts.clone(), cfg.contract);
    let now = 1_000_000;
    for i in 0..n {
        let r = request(i);
        let spec = allot_core::WorkloadSpec {
            id: i.to_string(),
            submit: now - 1000 + (i as u64 % 1000),
            account: state.accounts.get(&r.account).expect("account"),
            user: format!("u{}", i % 17),
            class: allot_core::Class::Batch,
            gpus: r.gpus,
            nodes: 0,
            gpu_type: None,
            clusters: match r.clusters.first() {
                Some(c) => allot_core::cluster::ClusterSet::of([cfg.cluster.cluster_by_name(c).expect("cluster")]),
                None => allot_core::cluster::ClusterSet::ANY,
            },
            work_s: r.expected_duration_s.unwrap_or(3600),
            checkpoint_s: 600,
            util: 1.0,
            priority: allot_core::Priority::Normal,
            preemptible: false,
            time_limit_s: None,
            checkpoint_on_signal: false,
            after: Vec::new(),
            array: None,
            hold: false,
            billing: None,
        };
        state.submit(spec);
    }
    let mut policy = PolicyKind::Allot.build();
    // Fill the cluster with the first decisions, as the server would.
    for d in policy.schedule(&state, now - 100) {
        if let Action::Start { workload, alloc } = d.action {
            state.start(workload, alloc, now - 100, d.reason);
        }
    }
    let mut times = Vec::new();
    for k in 0..15 {
        let t0 = Instant::now();
        let out = policy.schedule(&state, now + k);
        times.push(t0.elapsed());
        std::hint::black_box(out);
    }
    times.sort();
    println!(
        "core: allot pass with {} pending, {} running on 1024 GPUs in {} cluster(s): median {:.1} ms, max {:.1} ms (15 passes)",
        state.pending.len(),
        state.running.len(),
        state.cluster.clusters.len(),
        times[times.len() / 2].as_secs_f64() * 1000.0,
        times[times.len() - 1].as_secs_f64() * 1000.0
    );
}

/// A token of `role` named `name` (a principal of its own).
async fn token_of(store: &Store, name: &str, role: Role, scope: Option<&str>, projects: &[&str]) -> String {
    let spec = TokenSpec {
        name: name.into(),
        role,
        scope: scope.map(str::to_string),
        projects: projects.iter().map(|p| p.to_string()).collect(),
        unix_user: None,
        expires_in_s: None,
    };
    create_token(store, &spec, "bench").await.expect("token")
}

/// Statuses of the attackers' requests, by kind.
#[derive(Default)]
struct Tally(std::sync::Mutex<std::collections::BTreeMap<(&'static str, u16), u64>>);

impl Tally {
    fn add(&self, kind: &'static str, status: u16) {
        *self.0.lock().unwrap().entry((kind, status)).or_default() += 1;
    }

    fn print(&self) {
        for ((kind, status), n) in self.0.lock().unwrap().iter() {
            println!("attack:   {kind}: {n} answered {status}");
        }
    }
}

/// Honest submissions for `secs`: 16 principals, one every 100 ms each;
/// returns their latencies, sorted.
async fn honest(url: &str, tokens: &[String], secs: u64) -> Vec<Duration> {
    let client = reqwest::Client::new();
    let until = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for (k, t) in tokens.iter().enumerate() {
        let (client, url, t) = (client.clone(), url.to_string(), t.clone());
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut i = k;
            while Instant::now() < until {
                tick.tick().await;
                let mut req = request(i);
                req.account = "org/rl/sim".into();
                let t0 = Instant::now();
                let r = client.post(format!("{url}/v1/workloads")).bearer_auth(&t).json(&req).send().await;
                let status = r.expect("submit").status().as_u16();
                out.push(t0.elapsed());
                assert_eq!(status, 201, "an honest submission");
                i += 16;
            }
            out
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("honest client"));
    }
    all.sort();
    all
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

/// Issue 30, points 15–18: honest submissions' latency alone and beside
/// one principal's attacks (see the module docs).
async fn attack() {
    let secs: u64 = std::env::var("ALLOT_BENCH_ATTACK_S").ok().and_then(|v| v.parse().ok()).unwrap_or(15);
    let d = dir("attack");
    std::fs::write(d.join("cluster.toml"), CONFIG).expect("config");
    let db = format!("sqlite://{}", d.join("bench.db").display());
    let store = Store::open(&db).await.expect("open store");
    let admin = token_of(&store, "bench", Role::Admin, None, &[]).await;
    let mut tokens = Vec::new();
    for k in 0..16 {
        tokens.push(token_of(&store, &format!("honest{k}"), Role::Researcher, None, &["org/rl/sim"]).await);
    }
    let manager = token_of(&store, "manager", Role::Manager, Some("org"), &[]).await;
    let mallory = token_of(&store, "mallory", Role::Researcher, None, &["org/llm/pretrain"]).await;
    store.close().await;
    let opts = ServeOptions {
        config: d.join("cluster.toml"),
        db,
        listen: "127.0.0.1:0".parse().expect("addr"),
        executor: ExecutorKind::None,
        policy: "allot".into(),
        data_dir: d.join("data"),
        gpu_inventory: GpuInventory::Config,
        slurm: Default::default(),
        standby: false,
        lease: Default::default(),
        allow_uncontained: false,
        single_user: true,
        edge: Default::default(),
        snapshots: Default::default(),
    };
    let running = allot_server::start(&opts).await.expect("start the server");
    let url = format!("http://{}", running.addr);
    let client = reqwest::Client::new();
    // The array the aliases name: 10,000 elements, held.
    let mut arr = request(0);
    arr.account = "org/llm/pretrain".into();
    arr.array = Some("0-9999".into());
    arr.hold = Some(true);
    let r = client.post(format!("{url}/v1/workloads")).bearer_auth(&admin).json(&arr).send().await.expect("array");
    assert_eq!(r.status().as_u16(), 201, "the array");
    let v: serde_json::Value = r.json().await.expect("json");
    let a = v["id"].as_str().expect("id").split('_').next().expect("array id").to_string();
    let aliases: Vec<String> = (0..300).map(|z| format!("{}{a}", "0".repeat(z % 12))).collect();
    let dependency = format!("afterok:{}", aliases.join(":"));

    let alone = honest(&url, &tokens, secs).await;
    println!(
        "attack: honest submissions alone ({} in {secs} s, 16 principals at 10/s): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        alone.len(),
        percentile(&alone, 0.5),
        percentile(&alone, 0.99),
        percentile(&alone, 1.0)
    );

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let mut attackers = Vec::new();
    let which = std::env::var("ALLOT_BENCH_ATTACKS").unwrap_or_else(|_| "patch,deps,loop".into());
    let on = |a: &str| which.split(',').any(|w| w.trim() == a);
    // 15: a manager's PATCH of 1,000 users' shares, again and again.
    if on("patch") {
        let (client, url, t, stop, tally) = (client.clone(), url.clone(), manager.clone(), stop.clone(), tally.clone());
        attackers.push(tokio::spawn(async move {
            let mut round = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                round += 1;
                let users: serde_json::Map<String, serde_json::Value> =
                    (0..1000).map(|i| (format!("u{i}"), serde_json::json!(1 + (i + round) % 5))).collect();
                let body = serde_json::json!({ "users": users });
                let r = client.patch(format!("{url}/v1/accounts/org/vision/det")).bearer_auth(&t).json(&body).send();
                match r.await {
                    Ok(r) => tally.add("PATCH 1,000 users", r.status().as_u16()),
                    Err(_) => tally.add("PATCH 1,000 users", 0),
                }
            }
        }));
    }
    // 16: six at once, each naming the array 300 times.
    for _ in 0..if on("deps") { 6 } else { 0 } {
        let (client, url, t, stop, tally) = (client.clone(), url.clone(), mallory.clone(), stop.clone(), tally.clone());
        let mut req = request(1);
        req.account = "org/llm/pretrain".into();
        req.dependency = Some(dependency.clone());
        attackers.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let r = client.post(format!("{url}/v1/workloads")).bearer_auth(&t).json(&req).send().await;
                let status = r.map_or(0, |r| r.status().as_u16());
                tally.add("dependency aliases", status);
                if status == 429 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }));
    }
    // 18: the same principal's tight loop, eight at once.
    for _ in 0..if on("loop") { 8 } else { 0 } {
        let (client, url, t, stop, tally) = (client.clone(), url.clone(), mallory.clone(), stop.clone(), tally.clone());
        attackers.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let r = client.get(format!("{url}/v1/workloads?limit=200")).bearer_auth(&t).send().await;
                let status = r.as_ref().map_or(0, |r| r.status().as_u16());
                tally.add("GET loop", status);
                // As `allot` does (API-1): wait as the 429 says.
                if status == 429 {
                    let after = r.ok().and_then(|r| r.headers().get("retry-after")?.to_str().ok()?.parse().ok());
                    tokio::time::sleep(Duration::from_secs(after.unwrap_or(1))).await;
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let beside = honest(&url, &tokens, secs).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    println!(
        "attack: honest submissions beside the attacks ({} in {secs} s): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        beside.len(),
        percentile(&beside, 0.5),
        percentile(&beside, 0.99),
        percentile(&beside, 1.0)
    );
    tally.print();
    for a in attackers {
        let _ = tokio::time::timeout(Duration::from_secs(120), a).await;
    }
    running.stop().await.expect("stop");
    let _ = std::fs::remove_dir_all(&d);
}

fn main() {
    if std::env::var("ALLOT_BENCH_ATTACK").is_ok_and(|v| v == "1") {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
        rt.block_on(attack());
        return;
    }
    let n: usize = std::env::var("ALLOT_BENCH_N").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    core_pass(n);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let d = dir("sqlite-db");
        run_backend("sqlite", format!("sqlite://{}", d.join("bench.db").display()), n).await;
        match std::env::var("ALLOT_TEST_PG_URL") {
            Ok(base) => {
                let db = fresh_pg(&base).await;
                run_backend("postgres", db, n).await;
            }
            Err(_) => println!("postgres: skipped (set ALLOT_TEST_PG_URL, e.g. eval \"$(.ci/postgres.sh)\")"),
        }
    });
}
