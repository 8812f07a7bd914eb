//! CON-9 end to end on the local executor: the real `allot serve` samples a
//! fake `nvidia-smi` every second; an interactive session whose GPUs go
//! idle is warned after the configured idle time (an attempt field and a
//! file in its checkpoint directory), the warning is withdrawn when they get
//! busy again, and a second idle spell ends the session after the warning
//! and grace, cancelled under CON-9 and not requeued.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Backend, CONFIG, Fixture, Server, fake_nvidia_smi, set_gpus, state, submit};

both_stores!(idle_reclaim_sqlite, idle_reclaim_postgres, idle_reclaim);

/// Every fake GPU at `util` %.
fn all_gpus(file: &std::path::Path, util: u32) {
    set_gpus(file, &[(0, util, 1000), (1, util, 1000)]);
}

fn attempt(v: &Value) -> &Value {
    &v["attempts"][0]
}

async fn idle_reclaim(backend: Backend) {
    let f = Fixture::new(backend, "idle-reclaim").await;
    let config = format!(
        "{CONFIG}idle_threshold = {{ interactive = 0.1 }}\nidle_after = {{ interactive = \"3s\" }}\n\
         idle_warning = {{ interactive = \"3s\" }}\n\n[telemetry]\ninterval = \"1s\"\n"
    );
    std::fs::write(f.dir.join("cluster.toml"), config).expect("write config");
    let (smi, gpus) = fake_nvidia_smi(&f.dir);
    all_gpus(&gpus, 80);
    let s = Server::start_with(&f.dir, &f.db.url, &[], &[("ALLOT_NVIDIA_SMI", &smi)]);
    let id =
        submit(&s, &f.admin, &["--account", "org/a", "--class", "interactive", "--gpus", "1", "--", "sleep", "120"]);
    let warning = f.dir.join("data/checkpoints").join(&id).join(".allot-idle-warning");

    // Busy: measured, never warned.
    s.wait_for(&f.admin, &id, 20, |v| attempt(v)["telemetry"]["samples"].as_u64() >= Some(4)).await;
    let v = s.wait_for(&f.admin, &id, 5, |_| true).await;
    assert!(attempt(&v)["idle_warning_t"].is_null(), "busy GPUs are not warned: {v}");

    // Idle: warned after the idle time, not before; the file appears.
    let idle_from = Instant::now();
    all_gpus(&gpus, 0);
    let v = s.wait_for(&f.admin, &id, 20, |v| attempt(v)["idle_warning_t"].is_i64()).await;
    let waited = idle_from.elapsed();
    // Samples are stamped in whole seconds: 3 s of them may be a little
    // less of the wall clock, never a whole second less.
    assert!(waited > Duration::from_secs(2), "CON-9: not before 3 s of idle GPUs ({waited:?}): {v}");
    assert!(waited < Duration::from_secs(8), "{waited:?}");
    let a = attempt(&v);
    assert_eq!(a["idle_reclaim_t"].as_i64(), Some(a["idle_warning_t"].as_i64().unwrap() + 3), "{v}");
    assert!(v["workload"]["reason"].as_str().unwrap_or("").starts_with("CON-9: GPUs below 10% for"), "{v}");
    assert_eq!(state(&v), "running");
    support::wait_file(&warning, 5).await;
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&warning).unwrap()).expect("json warning");
    assert_eq!(file["reclaim_t"], a["idle_reclaim_t"], "{file}");
    let shown = s.cli_ok(&f.admin, &["show", &id]);
    assert!(shown.contains("idle: warned at"), "{shown}");

    // Busy again: the warning is withdrawn, the file removed.
    all_gpus(&gpus, 50);
    let v = s.wait_for(&f.admin, &id, 10, |v| attempt(v)["idle_warning_t"].is_null()).await;
    assert!(v["workload"]["reason"].as_str().unwrap_or("").contains("warning is withdrawn"), "{v}");
    assert!(!warning.exists(), "the warning file is removed");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(state(&s.wait_for(&f.admin, &id, 5, |_| true).await), "running", "no reclaim while busy");

    // Idle again: warned afresh, then signalled at the warning's end and
    // ended after grace: cancelled under CON-9, one attempt.
    all_gpus(&gpus, 0);
    let v = s.wait_for(&f.admin, &id, 30, |v| state(v) == "cancelled").await;
    let a = attempt(&v);
    assert_eq!(v["attempts"].as_array().unwrap().len(), 1, "not requeued: {v}");
    assert_eq!(a["signal_t"], a["idle_reclaim_t"], "signalled when the warning ran out: {v}");
    assert!(a["signal_reason"].as_str().unwrap_or("").starts_with("CON-9: GPUs below 10% for"), "{v}");
    assert_eq!(
        v["workload"]["reason"].as_str().unwrap_or(""),
        "CON-9: idle GPUs reclaimed; ended, stopped after the signal"
    );
    drop(s);
    f.finish().await;
}
