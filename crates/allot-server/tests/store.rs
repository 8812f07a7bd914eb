//! The store on its own, against SQLite and PostgreSQL: migrations are
//! idempotent, the scheduler's batched writes round-trip, listings filter
//! by subtree exactly (`_` in paths is not a wildcard), tokens, overrides
//! and the audit log.

mod support;

use allot_core::Phase;
use allot_server::store::{AttemptRow, ClusterFilter, GpuSummary, NewWorkload, Op, Store, TokenRow, WorkloadFilter};
use support::{Backend, TestDb, temp_dir};

both_stores!(store_roundtrip_sqlite, store_roundtrip_postgres, roundtrip);

fn workload(account: &str) -> NewWorkload {
    NewWorkload {
        run_as: None,
        owner: None,
        submit_t: 1000,
        account: account.into(),
        submitter: "ann".into(),
        class: "batch".into(),
        gpus: 2,
        nodes: 0,
        gpu_type: None,
        clusters: None,
        work_s: 60,
        checkpoint_s: 10,
        util: 0.5,
        priority: "normal".into(),
        preemptible: false,
        name: Some("w".into()),
        command: r#"["sleep","1"]"#.into(),
        env: "{}".into(),
        retries: 1,
        time_limit_s: None,
        workdir: None,
        checkpoint_on_signal: false,
        conditions: Default::default(),
    }
}

/// A started attempt on one node's GPUs 0 and 1.
fn attempt_row(workload: i64, attempt: i64, node: &str) -> AttemptRow {
    AttemptRow {
        workload,
        attempt,
        alloc: format!(r#"[{{"node":"{node}","gpus":[0,1]}}]"#),
        cluster: node.split_once('/').map(|(c, _)| c.to_string()),
        gpus: 2,
        weight: 1.0,
        state: "starting".into(),
        start_t: 1010,
        start_reason: "FS-1: test".into(),
        signal_t: None,
        signal_reason: None,
        end_t: None,
        outcome: None,
        exit_code: None,
        kept_s: None,
        pid: None,
        log_path: "/tmp/x.log".into(),
        ..AttemptRow::default()
    }
}

/// An attempt's GPU telemetry after `samples` samples of 10 s.
fn gpu(samples: i64, util_mean: f64) -> GpuSummary {
    GpuSummary {
        samples,
        measured_s: 10 * samples,
        util_mean,
        idle_s: 0,
        mem_max_mib: 2048,
        last_t: 1010 + 10 * samples,
    }
}

async fn roundtrip(backend: Backend) {
    let dir = temp_dir("store");
    let db = TestDb::new(backend, &dir).await;
    let store = Store::open(&db.url).await.expect("open");
    let id = store.instance_id().await.unwrap();
    store.close().await;
    let store = Store::open(&db.url).await.expect("migrations run twice");
    assert_eq!(store.instance_id().await.unwrap(), id, "the instance id is kept");

    let a = store.insert_workload(&workload("org/a_b")).await.unwrap();
    let b = store.insert_workload(&workload("org/axb")).await.unwrap();
    let c = store.insert_workload(&workload("org/a_b/sub")).await.unwrap();
    assert!(a < b && b < c);
    let list = |visible: Option<Vec<&str>>, states: &[&str]| {
        let f = WorkloadFilter {
            visible: visible.map(|v| v.into_iter().map(String::from).collect()),
            states: states.iter().map(|s| s.to_string()).collect(),
            limit: 100,
            ..Default::default()
        };
        let store = store.clone();
        async move { store.workloads(&f).await.unwrap().into_iter().map(|w| w.seq).collect::<Vec<_>>() }
    };
    assert_eq!(list(None, &[]).await, [c, b, a]);
    assert_eq!(list(Some(vec!["org/a_b"]), &[]).await, [c, a], "`_` is not a wildcard");
    assert_eq!(list(Some(vec![]), &[]).await, Vec::<i64>::new());
    // A workload's eligible clusters (FLEET-1) round-trip; NULL is any.
    let pinned =
        store.insert_workload(&NewWorkload { clusters: Some("c2,c1".into()), ..workload("org/p") }).await.unwrap();
    assert_eq!(store.workload(pinned).await.unwrap().unwrap().clusters.as_deref(), Some("c2,c1"));
    assert_eq!(store.workload(a).await.unwrap().unwrap().clusters, None);
    let pinned_row = store.all_workloads().await.unwrap().into_iter().find(|w| w.seq == pinned).unwrap();
    assert_eq!(pinned_row.clusters.as_deref(), Some("c2,c1"), "every read has the column");
    // Its working directory (migration 10) round-trips; NULL is the server's.
    let placed = NewWorkload { workdir: Some("/home/ann/proj x".into()), ..workload("org/p") };
    let placed = store.insert_workload(&placed).await.unwrap();
    assert_eq!(store.workload(placed).await.unwrap().unwrap().workdir.as_deref(), Some("/home/ann/proj x"));
    assert_eq!(store.workload(a).await.unwrap().unwrap().workdir, None);
    let live = store.live_workloads().await.unwrap();
    assert_eq!(live.iter().find(|w| w.seq == placed).and_then(|w| w.workdir.as_deref()), Some("/home/ann/proj x"));

    let start = attempt_row(a, 1, "gpu-0");
    store
        .apply(&[
            Op::AttemptStart { row: Box::new(start.clone()) },
            Op::WorkloadState { seq: a, state: Phase::Running, reason: "FS-1: test".into(), end_t: None },
            Op::AttemptRunning { seq: a, attempt: 1, pid: 4242 },
            Op::AttemptTelemetry { seq: a, attempt: 1, summary: gpu(1, 0.9) },
            Op::AttemptSignal { seq: a, attempt: 1, t: 1020, reason: "INT-1: test".into() },
            // The last summary of a step wins.
            Op::AttemptTelemetry { seq: a, attempt: 1, summary: gpu(2, 0.6) },
            Op::AttemptEnd {
                seq: a,
                attempt: 1,
                end_t: 1021,
                outcome: "preempted".into(),
                exit_code: None,
                kept_s: 10,
            },
            Op::WorkloadState { seq: a, state: Phase::Pending, reason: "CON-3: test".into(), end_t: None },
            Op::Failures { seq: a, failures: 1 },
            Op::CancelRequested { seq: a },
            Op::NodeEvent {
                t: 1030,
                node: "gpu-0".into(),
                kind: "drain".into(),
                principal: "root".into(),
                reason: None,
            },
        ])
        .await
        .unwrap();
    let got = store.attempts_of(a).await.unwrap();
    let want = AttemptRow {
        state: "ended".into(),
        signal_t: Some(1020),
        signal_reason: Some("INT-1: test".into()),
        end_t: Some(1021),
        outcome: Some("preempted".into()),
        kept_s: Some(10),
        pid: Some(4242),
        telemetry: Some(gpu(2, 0.6)),
        ..start
    };
    assert_eq!(got, [want]);
    let w = store.workload(a).await.unwrap().unwrap();
    assert_eq!(w.measured_util, Some(0.6), "one measured attempt: its mean");
    assert_eq!(store.workload(b).await.unwrap().unwrap().measured_util, None, "never measured");
    // Over attempts: weighted by GPUs × measured seconds (10 s at 0.2, 30 s at 0.6).
    let tries = [(1, gpu(1, 0.2)), (2, gpu(3, 0.6))];
    for (n, g) in tries {
        let row = Box::new(attempt_row(c, n, "gpu-1"));
        store
            .apply(&[Op::AttemptStart { row }, Op::AttemptTelemetry { seq: c, attempt: n, summary: g }])
            .await
            .unwrap();
    }
    let weighted = store.all_workloads().await.unwrap().into_iter().find(|w| w.seq == c).unwrap().measured_util;
    assert!(weighted.is_some_and(|m| (m - 0.5).abs() < 1e-9), "{weighted:?}");
    assert_eq!((w.state.as_str(), w.failures, w.cancel_requested, w.util), ("pending", 1, true, 0.5));
    assert_eq!(list(None, &["pending"]).await, [placed, pinned, c, b, a]);
    assert_eq!(store.live_workloads().await.unwrap().len(), 5);
    assert_eq!(store.node_events().await.unwrap()[0].kind, "drain");

    let token = TokenRow {
        unix_user: None,
        expires_t: None,
        id: "t1".into(),
        name: "ann".into(),
        hash: "h1".into(),
        role: "researcher".into(),
        scope: None,
        created_t: 1,
        created_by: "root".into(),
    };
    assert!(store.insert_token(&token, &["org/a_b".into()]).await.unwrap());
    assert!(!store.insert_token(&TokenRow { hash: "h2".into(), ..token.clone() }, &[]).await.unwrap(), "name taken");
    let (t, grants) = store.token_by_hash("h1").await.unwrap().unwrap();
    assert_eq!((t, grants), (token, vec!["org/a_b".to_string()]));
    assert!(store.token_by_hash("h2").await.unwrap().is_none());
    assert!(store.delete_token("ann", "root", 2).await.unwrap());
    assert!(store.token_by_hash("h1").await.unwrap().is_none());

    let before = serde_json::json!({"budget_gpu_hours": null});
    let after = serde_json::json!({"budget_gpu_hours": 5.0});
    store.set_override("org/a_b", "budget", Some(5.0), "root", 3, &before, &after).await.unwrap();
    store.set_override("org/a_b", "share", None, "root", 4, &after, &after).await.unwrap();
    let o = store.overrides().await.unwrap();
    assert_eq!(o.len(), 1);
    // `None` returns the share to the config's value: no longer an override.
    assert_eq!((o[0].budget_gpu_hours, o[0].share), (Some(Some(5.0)), None));
    let audit = store.audit(10).await.unwrap();
    let actions: Vec<&str> = audit.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["account.share", "account.budget", "token.revoke", "token.create"]);
    assert_eq!(audit[1].after.as_deref(), Some(r#"{"budget_gpu_hours":5.0}"#));
    store.close().await;
    db.drop_db().await;
    let _ = std::fs::remove_dir_all(&dir);
}

both_stores!(cluster_filter_sqlite, cluster_filter_postgres, cluster_filter);

/// `WorkloadFilter::clusters`: a pending workload is of a cluster it may
/// run on (not pinned elsewhere, of a GPU type the cluster has); one that
/// ran is of the cluster its last attempt ran on.
async fn cluster_filter(backend: Backend) {
    let dir = temp_dir("store-clusters");
    let db = TestDb::new(backend, &dir).await;
    let store = Store::open(&db.url).await.expect("open");
    let any = store.insert_workload(&workload("org/a")).await.unwrap();
    let pinned_c2 =
        store.insert_workload(&NewWorkload { clusters: Some("c2".into()), ..workload("org/a") }).await.unwrap();
    let pinned_both =
        store.insert_workload(&NewWorkload { clusters: Some("c1,c2".into()), ..workload("org/a") }).await.unwrap();
    let b200 =
        store.insert_workload(&NewWorkload { gpu_type: Some("B200".into()), ..workload("org/a") }).await.unwrap();
    let ran = store.insert_workload(&NewWorkload { clusters: Some("c2".into()), ..workload("org/a") }).await.unwrap();
    let attempt = |seq, n, node| AttemptRow { state: "running".into(), ..attempt_row(seq, n, node) };
    // `ran` ran on c_1 first (a cluster whose name holds `_`), now on c2.
    store
        .apply(&[
            Op::AttemptStart { row: Box::new(attempt(ran, 1, "c_1/h-0")) },
            Op::AttemptStart { row: Box::new(attempt(ran, 2, "c2/h-0")) },
            Op::WorkloadState { seq: ran, state: Phase::Running, reason: "FS-1: test".into(), end_t: None },
        ])
        .await
        .unwrap();
    let of = |clusters: &[(&str, &[&str])]| {
        let f = WorkloadFilter {
            clusters: Some(
                clusters
                    .iter()
                    .map(|(n, t)| ClusterFilter {
                        name: n.to_string(),
                        gpu_types: t.iter().map(|s| s.to_string()).collect(),
                    })
                    .collect(),
            ),
            limit: 100,
            ..Default::default()
        };
        let store = store.clone();
        async move {
            let mut seqs: Vec<i64> = store.workloads(&f).await.unwrap().into_iter().map(|w| w.seq).collect();
            seqs.sort();
            seqs
        }
    };
    let row = store.workloads(&WorkloadFilter { limit: 100, ..Default::default() }).await.unwrap();
    let last = row.iter().find(|w| w.seq == ran).unwrap().last_cluster.clone();
    assert_eq!(last.as_deref(), Some("c2"), "the last attempt's cluster");
    let attempts = store.attempts_of(ran).await.unwrap();
    let clusters: Vec<Option<&str>> = attempts.iter().map(|a| a.cluster.as_deref()).collect();
    assert_eq!(clusters, [Some("c_1"), Some("c2")], "each attempt's cluster round-trips");
    assert_eq!(of(&[("c1", &["H100"])]).await, [any, pinned_both], "not pinned elsewhere, not of a type c1 lacks");
    assert_eq!(of(&[("c2", &["H100", "B200"])]).await, [any, pinned_c2, pinned_both, b200, ran]);
    assert_eq!(of(&[("c_1", &["H100"])]).await, [any], "`_` is not a wildcard; `ran` runs on c2 now");
    assert_eq!(of(&[("cx1", &["H100"])]).await, [any]);
    assert_eq!(of(&[("c1", &["H100"]), ("c9", &["B200"])]).await, [any, pinned_both, b200], "either cluster");
    store.close().await;
    db.drop_db().await;
    let _ = std::fs::remove_dir_all(&dir);
}

both_stores!(sessions_bounded_sqlite, sessions_bounded_postgres, sessions_bounded);

/// Dashboard sessions: a token keeps at most `keep` (its newest, also
/// opened within one second), and expired ones are swept without a new
/// sign-in; sign-in attempts are audit entries of their own.
async fn sessions_bounded(backend: Backend) {
    use allot_server::store::sessions::SessionRow;
    let dir = temp_dir("store-sessions");
    let db = TestDb::new(backend, &dir).await;
    let store = Store::open(&db.url).await.expect("open");
    let row = |i: usize, token: &str, t: i64| SessionRow {
        hash: format!("s{i:02}"),
        token_hash: token.into(),
        csrf: "c".into(),
        created_t: t * 1000,
        expires_t: t + 100,
    };
    for i in 0..5 {
        store.insert_session(&row(i, "tok", 1000 + i as i64), 16).await.unwrap();
    }
    // The same second: the one just opened is kept whatever its hash.
    assert_eq!(store.insert_session(&row(99, "tok", 1004), 3).await.unwrap(), 3, "5 + 1, keep 3");
    // Within a second (created_t is in milliseconds): the older goes.
    let newer = SessionRow { created_t: 1_004_500, ..row(0, "tok", 1004) };
    assert_eq!(store.insert_session(&newer, 3).await.unwrap(), 1);
    let live = |h: &str| {
        let (store, h) = (&store, h.to_string());
        async move { store.session(&h, 1050).await.unwrap().is_some() }
    };
    assert!(live("s00").await && live("s99").await && live("s04").await, "the newest 3");
    assert!(!live("s03").await && !live("s01").await);
    store.insert_session(&row(50, "other", 1000), 3).await.unwrap();
    assert!(live("s50").await, "another token's sessions are its own");
    assert_eq!(store.sweep_sessions(1100).await.unwrap(), 1, "expired by 1100: s50 alone");
    assert!(!live("s50").await && live("s00").await);
    assert_eq!(store.sweep_sessions(2000).await.unwrap(), 3, "then the rest");

    let after = serde_json::json!({"how": "token", "from": "192.0.2.1", "refused": "unknown or revoked token"});
    store.insert_audit(1000, "unknown", "signin", "192.0.2.1", &after).await.unwrap();
    let a = store.audit(10).await.unwrap();
    assert_eq!((a[0].action.as_str(), a[0].target.as_str()), ("signin", "192.0.2.1"));
    assert_eq!(serde_json::from_str::<serde_json::Value>(a[0].after.as_deref().unwrap()).unwrap(), after);
    store.close().await;
    db.drop_db().await;
    let _ = std::fs::remove_dir_all(&dir);
}
