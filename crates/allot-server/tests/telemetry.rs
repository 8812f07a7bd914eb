//! GPU telemetry end to end on the local executor: the real `allot serve`
//! with a fake `nvidia-smi` whose GPUs the test makes busy, then idle,
//! sampled every second. An attempt whose GPU the program does not report
//! is not measured (and not failed); once reported, `allot show`, the API,
//! the metrics and the trace export show the scripted utilization.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Backend, CONFIG, Fixture, Server, fake_nvidia_smi, metric, set_gpus, state};

both_stores!(telemetry_local_sqlite, telemetry_local_postgres, telemetry_local);

/// Runs until `$1` exists.
const UNTIL_SH: &str = "#!/bin/sh\nwhile [ ! -e \"$1\" ]; do sleep 0.2; done\n";

/// The first attempt's telemetry once `pred` holds for it (polls the API).
async fn telemetry_when(s: &Server, token: &str, id: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let v = s.wait_for(token, id, 20, |v| pred(&v["attempts"][0]["telemetry"])).await;
    v["attempts"][0]["telemetry"].clone()
}

/// `/metrics` once the series `series` has the value `want` (gauges follow
/// samples within a second or two).
async fn metric_when(s: &Server, token: &str, series: &str, want: f64) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, text) = s.http("GET", "/metrics", Some(token), None).await;
        let text = text.as_str().unwrap_or_default().to_string();
        if metric(&text, series).is_some_and(|v| (v - want).abs() < 1e-6) {
            return text;
        }
        assert!(Instant::now() < deadline, "{series} is not {want} after 10 s:\n{text}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The `util` column of the exported trace's row `id`.
fn exported_util(csv: &Path, id: &str) -> f64 {
    let text = std::fs::read_to_string(csv).expect("the exported trace");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let col = header.iter().position(|h| *h == "util").expect("a util column");
    let row = lines.map(|l| l.split(',').collect::<Vec<_>>()).find(|r| r[0] == id).expect("the workload's row");
    row[col].parse().expect("a number")
}

async fn telemetry_local(backend: Backend) {
    let f = Fixture::new(backend, "telemetry").await;
    let config = format!("{CONFIG}\n[telemetry]\ninterval = \"1s\"\nidle_threshold = 0.1\n");
    std::fs::write(f.dir.join("cluster.toml"), config).expect("write config");
    let (smi, gpus) = fake_nvidia_smi(&f.dir);
    // GPU 1 is missing: an attempt holding it cannot be measured.
    set_gpus(&gpus, &[(0, 80, 1000)]);
    let s = Server::start_with(&f.dir, &f.db.url, &[], &[("ALLOT_NVIDIA_SMI", &smi)]);
    let t = Some(f.admin.as_str());
    let until = support::script(&f.dir, "until.sh", UNTIL_SH);
    let done = f.dir.join("done");
    let body = serde_json::json!({
        "account": "org/a", "gpus": 2, "nodes": 1, "util": 0.5, "command": [until, done.display().to_string()]
    });
    let (status, v) = s.http("POST", "/v1/workloads", t, Some(&body.to_string())).await;
    assert_eq!(status, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let running = s.wait_for(&f.admin, &id, 20, |v| state(v) == "running").await;
    assert_eq!(running["attempts"][0]["allocation"][0]["gpus"], serde_json::json!([0, 1]), "{running}");

    // Not measured: declared utilization in the gauge, "not measured" shown, the attempt runs on.
    metric_when(&s, &f.admin, "allot_utilization{source=\"declared\"}", 2.0 * 0.5 / 4.0).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let shown = s.cli_ok(&f.admin, &["show", &id]);
    assert!(shown.contains("gpu: not measured"), "{shown}");
    assert!(!shown.contains("gpu util"), "{shown}");
    let log = s.log();
    let warned = log.matches("failed to sample the attempt's GPUs").count();
    assert_eq!(warned, 1, "one warning for the attempt, the rest throttled:\n{log}");
    assert!(log.contains("reports no GPU 1, which the attempt holds"), "{log}");
    let v = s.wait_for(&f.admin, &id, 1, |v| state(v) == "running").await;
    assert!(v["attempts"][0]["telemetry"].is_null() && v["workload"]["measured_util"].is_null(), "{v}");

    // Busy: every sample is 0.8.
    set_gpus(&gpus, &[(0, 80, 1000), (1, 80, 3000)]);
    let busy = telemetry_when(&s, &f.admin, &id, |g| g["samples"].as_u64().is_some_and(|n| n >= 3)).await;
    assert_eq!(busy["util_mean"], 0.8, "{busy}");
    assert_eq!((busy["idle_s"].as_u64(), busy["mem_max_mib"].as_u64()), (Some(0), Some(3000)), "{busy}");
    let text = metric_when(&s, &f.admin, "allot_utilization{source=\"measured\"}", 2.0 * 0.8 / 4.0).await;
    assert_eq!(metric(&text, "allot_utilization{source=\"declared\"}"), Some(0.0), "{text}");
    let group = "allot_gpu_utilization_measured{cluster=\"test\",account=\"org/a\",class=\"batch\"}";
    assert_eq!(metric(&text, group), Some(0.8), "{text}");

    // Idle: samples below the threshold count as idle time, the mean falls.
    set_gpus(&gpus, &[(0, 0, 1000), (1, 4, 3000)]);
    let idle = telemetry_when(&s, &f.admin, &id, |g| g["idle_s"].as_u64().is_some_and(|n| n >= 2)).await;
    assert!(idle["util_mean"].as_f64().unwrap() < 0.8, "{idle}");
    metric_when(&s, &f.admin, group, 0.02).await;

    // Over: the summary is final; the workload's mean is its one attempt's.
    std::fs::write(&done, "").unwrap();
    let over = s.wait_for(&f.admin, &id, 20, |v| state(v) == "finished").await;
    let g = &over["attempts"][0]["telemetry"];
    let (mean, samples) = (g["util_mean"].as_f64().unwrap(), g["samples"].as_u64().unwrap());
    assert!(samples >= 5 && mean > 0.02 && mean < 0.8, "{over}");
    assert!((over["workload"]["measured_util"].as_f64().unwrap() - mean).abs() < 1e-9, "{over}");
    let shown = s.cli_ok(&f.admin, &["show", &id]);
    let line = format!("gpu: measured mean util {:.0}% over {samples} samples", mean * 100.0);
    assert!(shown.contains(&line), "{line} in:\n{shown}");
    assert!(shown.contains(&format!("gpu util   {:.0}% measured", mean * 100.0)), "{shown}");
    // The dashboard charts its utilization over time from the stored points.
    let page = support::Browser::sign_in(&s, &f.admin).await.get(&format!("/workloads/{id}")).await;
    assert!(page.body.contains(r#"<svg id="util""#) && page.body.contains("<title>attempt 1</title>"), "{}", page.body);
    drop(s);
    let out = f.dir.join("trace.csv");
    allot_server::export_trace(&f.db.url, &out).await.expect("export");
    let util = exported_util(&out, &id);
    let want = allot_trace::write::round_util(mean);
    assert_eq!(util, want, "the exported util is the measured mean {mean} (three decimals), not the declared 0.5");
    f.finish().await;
}
