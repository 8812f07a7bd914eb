//! The local executor through the real `allot serve` (SQLite): multi-node
//! gangs get one process per node with that node's GPUs, a gang with a
//! failed member stops, and `--gpu-inventory hardware` builds the inventory
//! from `nvidia-smi` (a fake one here) or refuses to start, saying why; a
//! server that cannot make cgroups refuses to start unless
//! `--allow-uncontained`.

mod support;

use std::process::Command;

use support::{Backend, Fixture, RANK_SH, Server, allot_bin, script, state, submit};

/// Node 1 fails at once; node 0 would run for a minute.
const GANG_FAIL_SH: &str = r#"#!/bin/sh
if [ "$ALLOT_NODE_RANK" = 1 ]; then exit 3; fi
sleep 60
"#;

/// Answers `--query-gpu=index,name,uuid --format=csv,noheader` like the
/// NVIDIA driver's tool on a host with four H100s.
const FAKE_NVIDIA_SMI: &str = r#"#!/bin/sh
case "$*" in
  *--query-gpu=index,name,uuid*) ;;
  *) echo "unexpected arguments: $*" >&2; exit 9 ;;
esac
for i in 0 1 2 3; do echo "$i, NVIDIA H100 80GB HBM3, GPU-0000000$i-aaaa-bbbb-cccc-dddddddddddd"; done
"#;

/// The host declared as one pool of one node of (nominally) one GPU.
const ONE_HOST: &str = r#"
[cluster]
name = "host"
[[cluster.pools]]
name = "local"
gpu = "A100"
nodes = 1
gpus_per_node = 1

[gpu_types]
A100 = 1.0
H100 = 2.0

[[accounts]]
path = "org/a"
share = 1

[contract]
scheduling_interval = "1s"
grace = "1s"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_node_gang_gets_one_process_per_node_with_its_own_gpus() {
    let f = Fixture::new(Backend::Sqlite, "gang").await;
    let s = Server::start(&f.dir, &f.db.url);
    let rank_sh = script(&f.dir, "rank.sh", RANK_SH);
    let id = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "4", "--nodes", "2", "--", &rank_sh]);
    let done = s.wait_for(&f.admin, &id, 20, |v| state(v) == "finished").await;
    let ck = s.dir.join("data/checkpoints").join(&id);
    let ranks: Vec<Vec<String>> = (0..2)
        .map(|r| {
            let text = std::fs::read_to_string(ck.join(format!("rank-{r}"))).expect("each node's process ran");
            text.trim().split('|').map(str::to_string).collect()
        })
        .collect();
    let alloc = done["attempts"][0]["allocation"].as_array().expect("allocation").clone();
    assert_eq!(alloc.len(), 2, "{done}");
    for (r, fields) in ranks.iter().enumerate() {
        let node = alloc[r]["node"].as_str().unwrap();
        let gpus: Vec<String> = alloc[r]["gpus"].as_array().unwrap().iter().map(|g| g.to_string()).collect();
        assert_eq!(fields[0], node, "rank {r} runs as node {node}: {fields:?}");
        assert_eq!(fields[1], r.to_string());
        assert_eq!(fields[2], "2");
        assert_eq!(fields[3], gpus.join(","), "rank {r} sees its own node's GPUs: {fields:?}");
        assert_eq!(fields[5], "PCI_BUS_ID");
    }
    assert_ne!(ranks[0][0], ranks[1][0], "two different nodes");
    assert_eq!(ranks[0][4], ranks[1][4], "every rank sees the whole allocation in ALLOT_GPUS");
    assert_eq!(ranks[0][4].split(';').count(), 2);
    drop(s);
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workloads_do_not_inherit_the_servers_token() {
    let f = Fixture::new(Backend::Sqlite, "noleak").await;
    let envs = [("ALLOT_TOKEN", "allot_operator_secret"), ("ALLOT_LOG", "info"), ("SLURM_JOB_ID", "77")];
    let s = Server::start_with(&f.dir, &f.db.url, &[], &envs);
    let id = submit(
        &s,
        &f.admin,
        &["--account", "org/a", "--gpus", "1", "--", "sh", "-c", "env > \"$ALLOT_CHECKPOINT_DIR/env\""],
    );
    s.wait_for(&f.admin, &id, 20, |v| state(v) == "finished").await;
    let env = std::fs::read_to_string(s.dir.join("data/checkpoints").join(&id).join("env")).unwrap();
    assert!(!env.contains("allot_operator_secret") && !env.contains("ALLOT_LOG="), "{env}");
    assert!(!env.contains("SLURM_JOB_ID="), "the server's Slurm job context: {env}");
    assert!(env.contains(&format!("ALLOT_WORKLOAD_ID={id}")), "{env}");
    drop(s);
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_with_a_failed_member_stops_and_fails() {
    let f = Fixture::new(Backend::Sqlite, "gangfail").await;
    let s = Server::start(&f.dir, &f.db.url);
    let sh = script(&f.dir, "fail.sh", GANG_FAIL_SH);
    let id = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "4", "--nodes", "2", "--", &sh]);
    // Node 0 sleeps a minute: ending within seconds means it was stopped.
    let failed = s.wait_for(&f.admin, &id, 15, |v| state(v) == "failed").await;
    assert_eq!(failed["attempts"][0]["exit_code"], 3, "the failed member's code: {failed}");
    assert_eq!(failed["attempts"][0]["outcome"], "failed");
    let nodes = s.cli_json(&f.admin, &["nodes"]);
    let free: u64 = nodes.as_array().unwrap().iter().map(|n| n["free_gpus"].as_u64().unwrap()).sum();
    assert_eq!(free, 4, "every GPU is free again: {nodes}");
    drop(s);
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hardware_inventory_replaces_the_configs_node() {
    let f = Fixture::new(Backend::Sqlite, "hwinv").await;
    std::fs::write(f.dir.join("cluster.toml"), ONE_HOST).unwrap();
    let smi = script(&f.dir, "nvidia-smi", FAKE_NVIDIA_SMI);
    let s = Server::start_with(&f.dir, &f.db.url, &["--gpu-inventory", "hardware"], &[("ALLOT_NVIDIA_SMI", &smi)]);
    let nodes = s.cli_json(&f.admin, &["nodes"]);
    let nodes = nodes.as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    assert_eq!(nodes[0]["gpus"], 4, "the host's four GPUs, not the config's one: {nodes:?}");
    assert_eq!(nodes[0]["gpu_type"], "H100", "the configured type the model names: {nodes:?}");
    let rank_sh = script(&f.dir, "rank.sh", RANK_SH);
    let id = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "2", "--", &rank_sh]);
    s.wait_for(&f.admin, &id, 20, |v| state(v) == "finished").await;
    let text = std::fs::read_to_string(s.dir.join("data/checkpoints").join(&id).join("rank-0")).unwrap();
    let visible = text.trim().split('|').nth(3).unwrap().to_string();
    let uuids: Vec<&str> = visible.split(',').collect();
    assert_eq!(uuids.len(), 2, "{text}");
    assert!(uuids.iter().all(|u| u.starts_with("GPU-0000000")), "GPUs named by UUID: {text}");
    drop(s);
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hardware_inventory_refuses_to_start_without_a_driver_or_with_a_multi_node_config() {
    let f = Fixture::new(Backend::Sqlite, "hwrefuse").await;
    let smi = script(&f.dir, "nvidia-smi", FAKE_NVIDIA_SMI);
    let serve = |config: &str, smi: &str| {
        let cfg = f.dir.join("refuse.toml");
        std::fs::write(&cfg, config).unwrap();
        let out = Command::new(allot_bin())
            .args(["serve", "--single-user", "--gpu-inventory", "hardware", "--listen", "127.0.0.1:0", "--config"])
            .arg(&cfg)
            .args(["--db", &f.db.url, "--data-dir"])
            .arg(f.dir.join("data"))
            .env("ALLOT_NVIDIA_SMI", smi)
            .output()
            .expect("run allot serve");
        assert!(!out.status.success(), "allot serve must refuse");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let err = serve(ONE_HOST, "/nonexistent/nvidia-smi");
    assert!(err.contains("failed to read the host's GPUs") && err.contains("/nonexistent/nvidia-smi"), "{err}");
    let err = serve(support::CONFIG, &smi);
    assert!(err.contains("one pool of one node") && err.contains("2 nodes"), "{err}");
    let b200 = ONE_HOST.replace("H100 = 2.0", "B200 = 2.0");
    let err = serve(&b200, &smi);
    assert!(err.contains("names none of the config's GPU types (A100, B200)"), "{err}");
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_make_cgroups_runs_uncontained_only_when_told() {
    let f = Fixture::new(Backend::Sqlite, "uncontained").await;
    // An unprivileged user owns the store and the data directory, and may
    // not create cgroups.
    for e in std::fs::read_dir(&f.dir).unwrap().flatten() {
        std::os::unix::fs::chown(e.path(), Some(65534), Some(65534)).unwrap();
    }
    std::os::unix::fs::chown(&f.dir, Some(65534), Some(65534)).unwrap();
    std::fs::write(f.dir.join("cluster.toml"), support::CONFIG).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let serve = |extra: &[&str]| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(allot_bin())
            .args(["serve", "--single-user", "--listen", &format!("127.0.0.1:{port}"), "--config"])
            .arg(f.dir.join("cluster.toml"))
            .args(["--db", &f.db.url, "--data-dir"])
            .arg(f.dir.join("data"))
            .args(extra)
            .env("NO_COLOR", "1")
            .current_dir(&f.dir);
        c
    };
    let log = f.dir.join("refused.log");
    let mut child = serve(&[]).stderr(std::fs::File::create(&log).unwrap()).spawn().expect("start allot serve");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("an unprivileged server must refuse to start:\n{}", std::fs::read_to_string(&log).unwrap());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let err = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "{err}");
    assert!(err.contains("cannot contain workloads") && err.contains("--allow-uncontained"), "{err}");

    let log = f.dir.join("uncontained.log");
    let mut child = serve(&["--allow-uncontained"])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start allot serve");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(child.try_wait().unwrap().is_none(), "allot serve --allow-uncontained exited:\n{text}");
        assert!(std::time::Instant::now() < deadline, "not listening within 30 s:\n{text}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("running UNCONTAINED"), "the weaker guarantee is said at startup:\n{text}");
    f.finish().await;
}
