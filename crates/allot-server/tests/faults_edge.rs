//! Faults at the HTTP edge, against real `allot serve` processes: idle
//! sockets on a server limited to systemd's 1,024 descriptors, connections
//! reset mid-submission, retries with an `Idempotency-Key`, error answers
//! in the documented JSON shape, and a store that turns read-only while
//! submissions arrive. Every wait is bounded and prints what it saw.

mod support;

use std::collections::BTreeSet;
use std::io::Write;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Backend, Fixture, Server, submit, token};

/// Starting a server with a lowered descriptor limit changes this whole
/// process's limit for a moment: no other server starts meanwhile.
static SPAWN: Mutex<()> = Mutex::new(());

fn nofile() -> (u64, u64) {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct it is given.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) }, 0, "getrlimit");
    (r.rlim_cur, r.rlim_max)
}

fn set_soft_nofile(soft: u64) {
    let (_, hard) = nofile();
    let r = libc::rlimit { rlim_cur: soft.min(hard), rlim_max: hard };
    // SAFETY: setrlimit reads the struct it is given.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) }, 0, "setrlimit");
}

/// A server that inherits a soft `RLIMIT_NOFILE` of `soft` (its hard limit
/// stays: systemd's default for services is 1024:524288).
fn start_with_nofile(f: &Fixture, soft: u64, args: &[&str]) -> Server {
    let _one = SPAWN.lock().unwrap_or_else(|e| e.into_inner());
    let (before, _) = nofile();
    set_soft_nofile(soft);
    let s = std::panic::catch_unwind(|| Server::start_with(&f.dir, &f.db.url, args, &[]));
    set_soft_nofile(before);
    s.unwrap_or_else(|e| std::panic::resume_unwind(e))
}

fn start(f: &Fixture, args: &[&str]) -> Server {
    let _one = SPAWN.lock().unwrap_or_else(|e| e.into_inner());
    Server::start_with(&f.dir, &f.db.url, args, &[])
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(5)).build().expect("client")
}

/// One call with a 5 s timeout: (status, body, headers) or what failed.
async fn call(
    base: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Result<(u16, Value, reqwest::header::HeaderMap), String> {
    let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut req = client().request(m, format!("{base}{path}"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req.body(b.to_string());
    }
    let resp = req.send().await.map_err(|e| format!("{method} {path}: {e}"))?;
    let status = resp.status().as_u16();
    let hdrs = resp.headers().clone();
    let text = resp.text().await.map_err(|e| format!("{method} {path}: reading the answer: {e}"))?;
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::String(text)), hdrs))
}

const JSON: (&str, &str) = ("content-type", "application/json");

fn body(account: &str, gpus: u32, command: &[&str]) -> String {
    json!({"account": account, "gpus": gpus, "command": command}).to_string()
}

/// Polls until `check` returns `Ok`, or panics after `secs` with its last
/// complaint and the server log.
async fn eventually<T>(s: &Server, secs: u64, what: &str, mut check: impl AsyncFnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        match check().await {
            Ok(v) => return v,
            Err(saw) if Instant::now() >= deadline => {
                let log = s.log();
                let tail: String =
                    log.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
                panic!("{what}: not within {secs} s; last saw: {saw}\n--- server log (end) ---\n{tail}");
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

async fn workload_state(s: &Server, token: &str, id: &str) -> Result<String, String> {
    let (status, v, _) = call(&s.url, "GET", &format!("/v1/workloads/{id}"), Some(token), &[], None).await?;
    match v["workload"]["state"].as_str() {
        Some(st) if status == 200 => Ok(st.to_string()),
        _ => Err(format!("{status} {v}")),
    }
}

async fn finished(s: &Server, token: &str, id: &str, secs: u64) {
    eventually(s, secs, &format!("workload {id} finishes"), async || match workload_state(s, token, id).await? {
        st if st == "finished" => Ok(()),
        st => Err(st),
    })
    .await
}

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// Finding 4: 1,100 sockets that send nothing against a server with 1,024
/// descriptors. The API still answers, a submission made during the flood
/// is accepted, and queued workloads still start (their log files open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sockets_leave_the_api_and_workloads_their_descriptors() {
    let (_, hard) = nofile();
    set_soft_nofile(hard);
    let f = Fixture::new(Backend::Sqlite, "idle").await;
    let s = start_with_nofile(&f, 1024, &[]);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", s.pid())).unwrap_or_default();
    assert!(limits.lines().any(|l| l.starts_with("Max open files") && l.contains(" 1024 ")), "{limits}");
    let long = submit(&s, &f.admin, &["--account", "org/a", "--gpus", "4", "--", "sleep", "3"]);
    let queued = submit(&s, &f.admin, &["--account", "org/b", "--gpus", "4", "--", "sh", "-c", "echo queued-ran"]);

    let addr = s.url.trim_start_matches("http://").parse().expect("addr");
    let mut idle = Vec::new();
    let mut refused = 0;
    for _ in 0..1100 {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(c) => idle.push(c),
            Err(_) => refused += 1,
        }
    }
    println!("idle sockets open: {}, not connected: {refused}", idle.len());
    let during = eventually(&s, 30, "a submission is answered during the flood", async || {
        let b = body("org/a", 1, &["true"]);
        match call(&s.url, "POST", "/v1/workloads", Some(&f.admin), &[JSON], Some(&b)).await? {
            (201, v, _) => Ok(v["id"].as_str().unwrap_or_default().to_string()),
            (st, v, _) => Err(format!("{st} {v}")),
        }
    })
    .await;
    println!("server descriptors during the flood: {}", open_descriptors(s.pid()));
    for id in [&long, &queued, &during] {
        finished(&s, &f.admin, id, 60).await;
    }
    let log = std::fs::read_to_string(s.dir.join(format!("data/logs/{queued}/attempt-1.log"))).unwrap_or_default();
    assert!(log.contains("queued-ran"), "the queued workload's log: {log:?}");
    assert!(!s.log().contains("Too many open files"), "the server ran out of descriptors:\n{}", s.log());
    drop(idle);
    f.finish().await;
}

/// Sets SO_LINGER to 0 so that dropping the socket sends a reset.
fn reset_on_drop(c: &TcpStream) {
    let l = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: setsockopt reads `l` for its size; the descriptor is open.
    let rc = unsafe {
        libc::setsockopt(
            c.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_LINGER");
}

/// Sends a whole submission and resets the connection `after` later,
/// without reading the answer.
fn submit_then_reset(addr: &str, token: &str, key: Option<&str>, body: &str, after: Duration) {
    let Ok(mut c) = TcpStream::connect(addr) else { return };
    let key = key.map(|k| format!("Idempotency-Key: {k}\r\n")).unwrap_or_default();
    let req = format!(
        "POST /v1/workloads HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n\
         {key}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = c.write_all(req.as_bytes());
    std::thread::sleep(after);
    reset_on_drop(&c);
}

/// Every stored workload that has not ended is known to the scheduler: it
/// runs, or it is pending with the policy's explanation (`why`), which
/// only the scheduler's state gives.
async fn all_known(s: &Server, token: &str) -> Result<usize, String> {
    let (status, list, _) = call(&s.url, "GET", "/v1/workloads?limit=10000", Some(token), &[], None).await?;
    let list = list.as_array().ok_or_else(|| format!("{status} {list}"))?.clone();
    let mut unknown = Vec::new();
    for w in &list {
        let id = w["id"].as_str().unwrap_or_default();
        let (_, d, _) = call(&s.url, "GET", &format!("/v1/workloads/{id}"), Some(token), &[], None).await?;
        if d["workload"]["state"] == "pending" && d["why"].is_null() {
            unknown.push(id.to_string());
        }
    }
    if unknown.is_empty() {
        Ok(list.len())
    } else {
        Err(format!("{} of {} stored workloads unknown to the scheduler: {unknown:?}", unknown.len(), list.len()))
    }
}

/// Finding 7: 300 submissions whose connections are reset at moments spread
/// over the handler's work. Every workload that was stored is known to the
/// scheduler without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_reset_mid_submission_leave_no_workload_behind() {
    let f = Fixture::new(Backend::Sqlite, "resets").await;
    let s = start(&f, &["--executor", "none"]);
    let addr = s.url.trim_start_matches("http://").to_string();
    let b = body("org/a", 1, &["true"]);
    std::thread::scope(|scope| {
        for t in 0..6u64 {
            let (addr, token, b) = (&addr, &f.admin, &b);
            scope.spawn(move || {
                for i in 0..50u64 {
                    // 0 to 20 ms, a different moment for each request.
                    let after = Duration::from_micros(((t * 50 + i) * 7919) % 20_000);
                    submit_then_reset(addr, token, None, b, after);
                }
            });
        }
    });
    let stored =
        eventually(&s, 30, "every stored workload is known to the scheduler", async || all_known(&s, &f.admin).await)
            .await;
    println!("300 reset submissions: {stored} stored, all known to the scheduler");
    f.finish().await;
}

both_stores!(idempotent_retries_sqlite, idempotent_retries_postgres, idempotent_retries);

/// Retries with an `Idempotency-Key` (at once, concurrently, after a reset,
/// after a restart) return one workload; a reused key with another request
/// is 422; keys are per principal.
async fn idempotent_retries(backend: Backend) {
    let f = Fixture::new(backend, "idempotency").await;
    let mut s = start(&f, &["--executor", "none"]);
    let other = token(&f.db.url, "researcher", "rae", &["--project", "org/a"]);
    let b = body("org/a", 1, &["sleep", "1"]);
    let url = s.url.clone();
    let post = |tok: String, key: &'static str, b: String| {
        let url = url.clone();
        async move {
            let (st, v, h) =
                call(&url, "POST", "/v1/workloads", Some(&tok), &[JSON, ("idempotency-key", key)], Some(&b)).await?;
            Ok::<_, String>((st, v["id"].as_str().unwrap_or_default().to_string(), v, h))
        }
    };
    let answers = futures_join((0..8).map(|_| post(f.admin.clone(), "job-1", b.clone())).collect::<Vec<_>>()).await;
    let ids: BTreeSet<String> = answers
        .iter()
        .map(|a| a.as_ref().map(|(st, id, _, _)| format!("{st} {id}")).unwrap_or_else(|e| e.clone()))
        .collect();
    assert_eq!(ids.len(), 1, "8 concurrent submissions with one key: {ids:?}");
    let (st, id1, _, _) = answers[0].clone().expect("answer");
    assert_eq!(st, 201);
    let (st, again, _, h) = post(f.admin.clone(), "job-1", b.clone()).await.expect("retry");
    assert_eq!((st, again.as_str()), (201, id1.as_str()));
    assert_eq!(h.get("idempotent-replayed").map(|v| v.to_str().unwrap_or("")), Some("true"));

    let (st, _, v, _) = post(f.admin.clone(), "job-1", body("org/a", 2, &["sleep", "1"])).await.expect("reuse");
    assert_eq!((st, &v["field"]), (422, &json!("Idempotency-Key")), "{v}");
    let (st, theirs, _, _) = post(other.clone(), "job-1", b.clone()).await.expect("other principal");
    assert!(st == 201 && theirs != id1, "another principal's key is theirs: {st} {theirs}");

    // A submission whose connection is reset, then retried with its key.
    let addr = s.url.trim_start_matches("http://").to_string();
    submit_then_reset(&addr, &f.admin, Some("job-2"), &b, Duration::from_millis(2));
    let (st, id2, _, _) = post(f.admin.clone(), "job-2", b.clone()).await.expect("retry after reset");
    assert_eq!(st, 201);
    let (st, id2b, _, _) = post(f.admin.clone(), "job-2", b.clone()).await.expect("second retry");
    assert_eq!((st, &id2b), (201, &id2));

    s.restart();
    let (st, after, _, _) = post(f.admin.clone(), "job-1", b.clone()).await.expect("retry after restart");
    assert_eq!((st, after.as_str()), (201, id1.as_str()), "keys survive a restart");
    let (_, list, _) = call(&s.url, "GET", "/v1/workloads?limit=1000", Some(&f.admin), &[], None).await.expect("list");
    let mine: Vec<&Value> = list.as_array().expect("list").iter().filter(|w| w["user"] == "root").collect();
    assert_eq!(mine.len(), 2, "one workload per key: {list}");
    drop(s);
    f.finish().await;
}

/// Runs futures as tasks at once; their outputs in order.
async fn futures_join<F>(fs: Vec<F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let mut out = Vec::new();
    let handles: Vec<_> = fs.into_iter().map(tokio::spawn).collect();
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}

/// Finding 12: error answers of the edge and of axum's extractors are all
/// `{"error", "field"}` with a JSON content type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_has_the_documented_shape() {
    let f = Fixture::new(Backend::Sqlite, "shapes").await;
    let s = start(&f, &["--executor", "none"]);
    let t = Some(f.admin.as_str());
    let ok = body("org/a", 1, &["true"]);
    let long_query = format!("/v1/workloads?account={}", "a".repeat(9000));
    let big_header = "b".repeat(17_000);
    let many: Vec<(String, &str)> = (0..101).map(|i| (format!("x-h{i}"), "1")).collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let too_big = body("org/a", 1, &[&"c".repeat(300_000)]);
    // (case, method, path, headers, body, status, field)
    type Case<'a> = (&'a str, &'a str, &'a str, Vec<(&'a str, &'a str)>, Option<&'a str>, u16, Option<&'a str>);
    let cases: Vec<Case> = vec![
        ("unknown path", "GET", "/v1/nope", vec![], None, 404, None),
        ("wrong method", "PUT", "/v1/workloads", vec![], None, 405, None),
        (
            "text body",
            "POST",
            "/v1/workloads",
            vec![("content-type", "text/plain")],
            Some(&ok),
            415,
            Some("Content-Type"),
        ),
        ("no content type", "POST", "/v1/workloads", vec![], Some(&ok), 415, Some("Content-Type")),
        (
            "form body",
            "PATCH",
            "/v1/accounts/org/a",
            vec![("content-type", "application/x-www-form-urlencoded")],
            Some("share=2"),
            415,
            Some("Content-Type"),
        ),
        ("long target", "GET", &long_query, vec![], None, 414, None),
        ("large header", "GET", "/v1/health", vec![("x-big", &big_header)], None, 431, None),
        ("many headers", "GET", "/v1/health", many, None, 431, None),
        ("undecodable path", "GET", "/v1/workloads/%FF%FE", vec![], None, 400, Some("id")),
        ("undecodable query", "GET", "/v1/workloads?state=%FF", vec![], None, 400, Some("state")),
        ("malformed json", "POST", "/v1/workloads", vec![JSON], Some("{\"account\": "), 400, Some("account")),
        (
            "wrong type",
            "POST",
            "/v1/workloads",
            vec![JSON],
            Some(r#"{"account": "org/a", "gpus": "x", "command": ["a"]}"#),
            400,
            Some("gpus"),
        ),
        ("body over the limit", "POST", "/v1/workloads", vec![JSON], Some(&too_big), 400, None),
        (
            "bad idempotency key",
            "POST",
            "/v1/workloads",
            vec![JSON, ("idempotency-key", "")],
            Some(&ok),
            400,
            Some("Idempotency-Key"),
        ),
    ];
    let mut wrong = Vec::new();
    for (name, method, path, headers, b, want, field) in &cases {
        let (st, v, h) =
            call(&s.url, method, path, t, headers, *b).await.unwrap_or_else(|e| panic!("case {name}: {e}"));
        let ct = h.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("");
        let shaped = v["error"].as_str().is_some_and(|e| !e.is_empty())
            && v.as_object().is_some_and(|o| o.keys().all(|k| k == "error" || k == "field"))
            && ct.starts_with("application/json");
        if st != *want || !shaped || v["field"].as_str() != *field {
            wrong.push(format!("{name}: {st} {ct} {v}"));
        }
        if *want == 405 && h.get("allow").is_none() {
            wrong.push(format!("{name}: no Allow header"));
        }
    }
    assert!(wrong.is_empty(), "answers not in the documented shape:\n{}", wrong.join("\n"));
    f.finish().await;
}

/// The acknowledged workloads (id, name) the server does not have.
async fn absent(url: &str, token: &str, acked: &[(String, String)]) -> Vec<String> {
    let mut missing = Vec::new();
    for (id, name) in acked {
        match call(url, "GET", &format!("/v1/workloads/{id}"), Some(token), &[], None).await {
            Ok((200, v, _)) if v["workload"]["name"] == name.as_str() => {}
            other => missing.push(format!("{id} ({name}): {other:?}")),
        }
    }
    missing
}

fn chattr(flag: &str, files: &[&Path]) {
    for p in files.iter().filter(|p| p.exists()) {
        let out = std::process::Command::new("chattr").arg(flag).arg(p).output().expect("run chattr");
        assert!(out.status.success(), "chattr {flag} {}: {}", p.display(), String::from_utf8_lossy(&out.stderr));
    }
}

/// Finding 6: the store turns read-only (its files immutable) while
/// submissions arrive. Every 201 names a workload that is in the store
/// afterwards; refused submissions are fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_201_without_a_durable_row() {
    let f = Fixture::new(Backend::Sqlite, "durable").await;
    let mut s = start(&f, &["--executor", "none"]);
    let db = f.dir.join("allot.db");
    let wal = f.dir.join("allot.db-wal");
    let files = [db.as_path(), wal.as_path()];
    let url = s.url.clone();
    let token = f.admin.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..6 {
        let (url, token, stop) = (url.clone(), token.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let http = client();
            let (mut acked, mut refused) = (Vec::new(), 0u32);
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && i < 400 {
                i += 1;
                let name = format!("c{c}-{i}");
                let b = json!({"account": "org/a", "gpus": 1, "command": ["true"], "name": name}).to_string();
                let r = http
                    .post(format!("{url}/v1/workloads"))
                    .bearer_auth(&token)
                    .header("content-type", "application/json")
                    .body(b)
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status() == 201 => {
                        let v: Value = r.json().await.unwrap_or_default();
                        acked.push((v["id"].as_str().unwrap_or_default().to_string(), name));
                    }
                    _ => {
                        refused += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
            (acked, refused)
        }));
    }
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        chattr("+i", &files);
        let write = std::fs::OpenOptions::new().append(true).open(&wal);
        assert!(write.is_err(), "the immutable WAL opens for writing: the fault is not injected");
        tokio::time::sleep(Duration::from_millis(800)).await;
        chattr("-i", &files);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut acked, mut refused) = (Vec::new(), 0);
    for c in clients {
        let (a, r) = c.await.expect("client");
        acked.extend(a);
        refused += r;
    }
    println!("store made read-only 3 times: {} submissions acknowledged, {refused} refused", acked.len());
    // Should the server have stopped, a new one reads the same store.
    if call(&s.url, "GET", "/v1/health", None, &[], None).await.is_err() {
        s.restart();
    }
    let missing = absent(&s.url, &f.admin, &acked).await;
    assert!(
        missing.is_empty(),
        "{} acknowledged workloads are not in the store:\n{}",
        missing.len(),
        missing.join("\n")
    );
    s.restart();
    let lost = absent(&s.url, &f.admin, &acked).await;
    assert!(lost.is_empty(), "{} acknowledged workloads are gone after a restart:\n{}", lost.len(), lost.join("\n"));
    drop(s);
    f.finish().await;
}

/// Finding 4, the slow client: a body that never arrives is 408 in the
/// JSON shape after `--body-timeout`, and a connection that sends nothing is
/// closed after `--header-timeout` (read with a 10 s bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_silent_clients_are_timed_out() {
    use std::io::Read;
    let f = Fixture::new(Backend::Sqlite, "timeouts").await;
    let s = start(&f, &["--executor", "none", "--body-timeout", "1s", "--header-timeout", "2s"]);
    let addr = s.url.trim_start_matches("http://").to_string();
    let mut slow = TcpStream::connect(&addr).expect("connect");
    slow.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let head = format!(
        "POST /v1/workloads HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{{",
        f.admin
    );
    slow.write_all(head.as_bytes()).expect("send");
    let mut answer = vec![0; 4096];
    let n = slow.read(&mut answer).unwrap_or_else(|e| panic!("no answer to a stalled body within 10 s: {e}"));
    let answer = String::from_utf8_lossy(&answer[..n]).to_string();
    assert!(answer.starts_with("HTTP/1.1 408") && answer.contains(r#"{"error":"#), "{answer}");

    let mut silent = TcpStream::connect(&addr).expect("connect");
    silent.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut buf = [0u8; 64];
    match silent.read(&mut buf) {
        Ok(0) => {}
        other => panic!("a silent connection is still open after 10 s (or got data): {other:?}"),
    }
    f.finish().await;
}
