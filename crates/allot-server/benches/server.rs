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

fn main() {
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
