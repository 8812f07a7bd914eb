//! The webhook against a receiver on a free local port: an event arrives
//! with the fleet's name; a receiver that fails twice gets it at the third
//! try; a receiver that never answers does not hold the scheduler.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use tokio::sync::mpsc as chan;

use super::*;

fn event(account: &str) -> BudgetEventRow {
    BudgetEventRow {
        t: 1_000,
        account: account.into(),
        period_start_t: 0,
        threshold: 0.8,
        used_gpu_hours: 8.0,
        budget_gpu_hours: 10.0,
    }
}

/// Serves `router` on a free port of 127.0.0.1; returns its URL.
async fn serve(router: Router) -> reqwest::Url {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    reqwest::Url::parse(&format!("http://{addr}/hook")).unwrap()
}

/// A receiver answering `fail` 500s first, then 200; each body it got,
/// with the try's number, goes to the returned channel.
async fn receiver(fail: u32) -> (reqwest::Url, chan::UnboundedReceiver<(u32, serde_json::Value)>) {
    let (tx, rx) = chan::unbounded_channel();
    let tries = Arc::new(AtomicU32::new(0));
    let handler = move |body: axum::Json<serde_json::Value>| {
        let (tx, tries) = (tx.clone(), tries.clone());
        async move {
            let n = tries.fetch_add(1, Ordering::SeqCst) + 1;
            tx.send((n, body.0)).unwrap();
            if n <= fail { StatusCode::INTERNAL_SERVER_ERROR } else { StatusCode::OK }
        }
    };
    (serve(Router::new().route("/hook", post(handler))).await, rx)
}

fn target(url: reqwest::Url, timeout: Duration) -> Target {
    Target { url, timeout, tries: TRIES, first_backoff: Duration::from_millis(20) }
}

async fn next<T>(rx: &mut chan::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), rx.recv()).await.expect("the receiver got nothing").unwrap()
}

#[tokio::test]
async fn an_event_arrives_with_the_fleet_name() {
    let (url, mut rx) = receiver(0).await;
    let hook = Webhook::start(target(url, Duration::from_secs(5)), "lab".into());
    hook.send(&event("org/a"));
    let (n, body) = next(&mut rx).await;
    assert_eq!(n, 1);
    assert_eq!(
        body,
        serde_json::json!({"cluster": "lab", "t": 1000, "account": "org/a", "period_start_t": 0, "threshold": 0.8,
                           "used_gpu_hours": 8.0, "budget_gpu_hours": 10.0})
    );
}

#[tokio::test]
async fn a_receiver_failing_twice_gets_it_at_the_third_try() {
    let (url, mut rx) = receiver(2).await;
    let http = reqwest::Client::new();
    let p = Payload { cluster: "lab".into(), event: event("org/b") };
    assert!(deliver(&http, &target(url, Duration::from_secs(5)), &p).await, "delivered after retries");
    let got: Vec<(u32, serde_json::Value)> = (0..3).map(|_| rx.try_recv().unwrap()).collect();
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), [1, 2, 3]);
    assert!(got.iter().all(|g| g.1["account"] == "org/b"), "the same event each time");
    assert!(rx.try_recv().is_err(), "no try after the success");
}

#[tokio::test]
async fn a_dead_url_gives_up_after_the_tries() {
    // A port that was free a moment ago: connections are refused.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let url = reqwest::Url::parse(&format!("http://{addr}/hook")).unwrap();
    let http = reqwest::Client::new();
    let p = Payload { cluster: "lab".into(), event: event("org/a") };
    assert!(!deliver(&http, &target(url, Duration::from_secs(2)), &p).await);
}

struct NoProcesses;

impl crate::executor::Executor for NoProcesses {
    fn name(&self) -> &'static str {
        "none"
    }
    fn launch(&self, _job: crate::executor::Launch) {}
    fn signal(&self, _key: crate::executor::AttemptKey) {}
    fn kill(&self, _key: crate::executor::AttemptKey) {}
    fn terminate_survivors(
        &self,
        _s: Vec<crate::executor::Survivor>,
        _grace: Duration,
    ) -> crate::executor::BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// A receiver that takes the request and never answers (timeout 300 s):
/// the scheduler records the threshold events, hands them over and goes
/// on starting work while the delivery hangs.
#[tokio::test]
async fn a_hanging_receiver_does_not_hold_the_scheduler() {
    use allot_core::{Class, Engine, Phase, Priority, State, WorkloadSpec};

    let (tx, mut rx) = chan::unbounded_channel();
    let handler = move |body: axum::Json<serde_json::Value>| {
        let tx = tx.clone();
        async move {
            tx.send(body.0).unwrap();
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::OK
        }
    };
    let url = serve(Router::new().route("/hook", post(handler))).await;
    let cfg = allot_trace::config::parse_config(
        "[cluster]\nname = \"lab\"\n[[cluster.pools]]\nname = \"p\"\ngpu = \"H100\"\nnodes = 1\ngpus_per_node = 8\n\
         [[accounts]]\npath = \"org/a\"\nbudget_gpu_hours = 1\n[contract]\nbudget_period = \"7d\"\n",
        "hook.toml",
    )
    .unwrap();
    let dir = std::env::temp_dir().join(format!("allot-webhook-hang-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = crate::store::Store::open(&format!("sqlite://{}", dir.join("allot.db").display())).await.unwrap();
    let state = State::new(cfg.cluster.clone(), cfg.accounts.clone(), cfg.contract);
    let mut s = crate::scheduler::Scheduler::new(
        Engine::new(state),
        allot_core::PolicyKind::Allot.build(),
        store.clone(),
        Arc::new(NoProcesses),
        Arc::new(crate::metrics::Metrics::new()),
        crate::scheduler::Paths { data_dir: dir.clone() },
        allot_core::AccountBook::seed(&cfg.accounts),
    );
    let clock = Arc::new(AtomicU64::new(0));
    s.clock = crate::scheduler::Clock::Manual(clock.clone());
    s.now = 0;
    s.webhook = Some(Webhook::start(target(url, Duration::from_secs(300)), "lab".into()));
    let spec = |id: &str, submit| WorkloadSpec {
        id: id.into(),
        submit,
        account: cfg.accounts.get("org/a").unwrap(),
        user: "u".into(),
        class: Class::Batch,
        gpus: 4,
        nodes: 1,
        gpu_type: None,
        clusters: Default::default(),
        work_s: 100_000,
        checkpoint_s: 60,
        util: 1.0,
        priority: Priority::Normal,
        preemptible: true,
        time_limit_s: None,
        checkpoint_on_signal: false,
        after: Vec::new(),
        array: None,
        hold: false,
        billing: None,
    };
    let row = |submit_t| crate::store::NewWorkload {
        run_as: None,
        owner: None,
        submit_t,
        account: "org/a".into(),
        submitter: "u".into(),
        class: "batch".into(),
        gpus: 4,
        nodes: 1,
        gpu_type: None,
        clusters: None,
        work_s: 100_000,
        checkpoint_s: 60,
        util: 1.0,
        priority: "normal".into(),
        preemptible: true,
        name: None,
        command: "[\"work\"]".into(),
        env: "{}".into(),
        retries: 0,
        time_limit_s: None,
        workdir: None,
        checkpoint_on_signal: false,
        conditions: Default::default(),
    };
    // Stored, then handed to the scheduler, as the API does.
    async fn submit(
        s: &mut crate::scheduler::Scheduler,
        store: &crate::store::Store,
        r: crate::store::NewWorkload,
        spec: WorkloadSpec,
    ) -> allot_core::WorkloadId {
        let seq = store.insert_workload(&r).await.unwrap();
        let (accepted, rx) = tokio::sync::oneshot::channel();
        let spec = WorkloadSpec { id: seq.to_string(), ..spec };
        let live = crate::scheduler::Live {
            seq,
            command: vec!["work".into()],
            env: Default::default(),
            workdir: None,
            run_as: crate::identity::RunAs::Server,
            after: Vec::new(),
        };
        let msg = crate::scheduler::Msg::Submitted(Box::new(crate::scheduler::Submission {
            spec,
            live,
            retries: 0,
            accepted,
        }));
        s.handle(msg).await.unwrap();
        rx.await.unwrap();
        s.by_seq[&seq]
    }
    let guarded = async {
        let a = submit(&mut s, &store, row(0), spec("1", 0)).await;
        s.step().await.unwrap();
        assert_eq!(s.engine.state().run(a).phase, Phase::Running);
        // 4 GPUs for an hour: 4 NGH, past 80 % and 100 % of 1 NGH.
        clock.store(3600, Ordering::SeqCst);
        s.step().await.unwrap();
        let first = next(&mut rx).await;
        assert_eq!((first["account"].as_str(), first["cluster"].as_str()), (Some("org/a"), Some("lab")));
        // The delivery hangs; the scheduler goes on.
        clock.store(3601, Ordering::SeqCst);
        let b = submit(&mut s, &store, row(3601), spec("2", 3601)).await;
        s.step().await.unwrap();
        assert_eq!(s.engine.state().run(b).phase, Phase::Running, "started while the webhook hangs");
    };
    tokio::time::timeout(Duration::from_secs(30), guarded).await.expect("the scheduler was held by the webhook");
    assert_eq!(store.budget_events().await.unwrap().len(), 2, "both thresholds recorded");
    let _ = std::fs::remove_dir_all(&dir);
}
