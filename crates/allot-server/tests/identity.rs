//! Every workload runs as its submitter's Unix user (ID-1,
//! docs/security.md), through the real `allot serve` as root with the
//! local executor and its cgroups, and people sign in with a real munge
//! credential (the private munged of `.ci/slurm.sh`).
//!
//! The people are made in a private mount namespace: `unshare --mount`
//! bind-mounts copies of the host's `/etc/passwd` and `/etc/group` with
//! alice (group nlp), bob (group vision) and carol (granted nothing) added
//! over the originals, for the server and for each command run as them;
//! the host's own files are never written.
//!
//! What is checked, each as a researcher's workload or command would try:
//! the workload runs as alice with her groups and HOME, never sees the
//! server's environment (a secret set for `allot serve`), cannot read the
//! server's `/proc/PID/environ`, the store, bob's checkpoints or
//! `/etc/shadow`, and cannot move itself out of its cgroup; its checkpoint
//! directory and log are hers and private; a workdir she cannot enter
//! fails the launch; a workload submitted from her own 0700 project
//! directory resumes from its checkpoint after a preemption; a token with
//! no Unix user cannot submit; alice cannot
//! cancel bob's work nor signal his processes; `allot login` as alice
//! (munge) opens a session the next commands use, her work runs as her; a
//! replayed, expired or foreign-realm credential, one made for another
//! server, and carol (granted nothing) are refused, and audited;
//! `allot logout` ends the session; on the server's host, `allot login`
//! signs alice in through the login socket (`SO_PEERCRED`) and refuses
//! carol.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Backend, Server, TestDb, allot_bin, remove_store_cgroups, script, state, temp_dir};

/// Uids and gids no host is likely to have (checked: the test refuses to
/// run over a host's own).
const ALICE: u32 = 61_001;
const BOB: u32 = 61_002;
const CAROL: u32 = 61_003;
const NLP: u32 = 61_011;
const VISION: u32 = 61_012;

const CONFIG: &str = r#"
[cluster]
name = "identity"
[[cluster.pools]]
name = "gpu"
gpu = "H100"
nodes = 1
gpus_per_node = 4

[[accounts]]
path = "org/nlp"
share = 1
[[accounts]]
path = "org/vision"
share = 1

[contract]
scheduling_interval = "1s"
grace = "1s"
min_slice = { batch = "0s", interactive = "0s", service = "0s" }

[[grants]]
group = "nlp"
role = "researcher"
accounts = ["org/nlp"]
[[grants]]
group = "vision"
role = "researcher"
accounts = ["org/vision"]
"#;

/// What a researcher's workload tries; each line says whether it could.
const PROBE_SH: &str = r#"#!/bin/sh
out="$ALLOT_CHECKPOINT_DIR/probe"
{
  echo "uid=$(id -u) gid=$(id -g) user=$(id -un) groups=$(id -Gn | tr ' ' ',')"
  echo "home=$HOME"
  if env | grep -q '^ALLOT_TEST_SECRET='; then echo "secret=seen"; else echo "secret=unseen"; fi
  if cat "/proc/$SERVER_PID/environ" >/dev/null 2>&1; then echo "environ=read"; else echo "environ=denied"; fi
  if cat "$STORE" >/dev/null 2>&1; then echo "store=read"; else echo "store=denied"; fi
  if ls "$OTHER" >/dev/null 2>&1; then echo "other=read"; else echo "other=denied"; fi
  if cat /etc/shadow >/dev/null 2>&1; then echo "shadow=read"; else echo "shadow=denied"; fi
  if kill -0 "$OTHER_PID" 2>/dev/null; then echo "signal=sent"; else echo "signal=denied"; fi
  if echo $$ > "$ROOT_CGROUP/cgroup.procs" 2>/dev/null; then echo "cgroup=left"; else echo "cgroup=stayed"; fi
  echo "own=$(stat -c %u:%a "$ALLOT_CHECKPOINT_DIR")"
} > "$out.tmp"
mv "$out.tmp" "$out"
"#;

/// Sleeps until cancelled, after saying it runs.
const SLEEP_SH: &str = r#"#!/bin/sh
echo $$ > "$ALLOT_CHECKPOINT_DIR/started.tmp"
mv "$ALLOT_CHECKPOINT_DIR/started.tmp" "$ALLOT_CHECKPOINT_DIR/started"
exec sleep 1000
"#;

/// The root of the cgroup2 hierarchy, wherever it is mounted.
fn cgroup2_root() -> PathBuf {
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    for line in info.lines() {
        let Some((left, right)) = line.split_once(" - ") else { continue };
        if right.starts_with("cgroup2 ") {
            let mount = left.split(' ').nth(4).expect("mount point");
            return PathBuf::from(mount);
        }
    }
    panic!("no cgroup2 mount: the local executor's containment needs one");
}

/// The private namespace: a script that bind-mounts the test's passwd and
/// group over the host's, then runs its arguments; the prefix that runs a
/// command inside it.
fn namespace(dir: &Path) -> Vec<String> {
    let host_passwd = std::fs::read_to_string("/etc/passwd").expect("read /etc/passwd");
    let host_group = std::fs::read_to_string("/etc/group").expect("read /etc/group");
    for id in [ALICE, BOB, CAROL, NLP, VISION] {
        let taken = |text: &str| text.lines().any(|l| l.split(':').nth(2) == Some(&id.to_string()));
        assert!(!taken(&host_passwd) && !taken(&host_group), "uid or gid {id} exists on this host: pick another");
    }
    for name in ["alice", "bob", "carol", "nlp", "vision"] {
        let named = |text: &str| text.lines().any(|l| l.split(':').next() == Some(name));
        assert!(!named(&host_passwd) && !named(&host_group), "{name} exists on this host: pick another");
    }
    let home = |n: &str| dir.join("home").join(n);
    let mut passwd = host_passwd.clone();
    for (n, uid, gid) in [("alice", ALICE, NLP), ("bob", BOB, VISION), ("carol", CAROL, CAROL)] {
        passwd.push_str(&format!("{n}:x:{uid}:{gid}:{n}:{}:/bin/sh\n", home(n).display()));
        std::fs::create_dir_all(home(n)).unwrap();
        nix::unistd::chown(&home(n), Some(uid.into()), Some(gid.into())).unwrap();
        std::fs::set_permissions(home(n), std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let mut group = host_group;
    group.push_str(&format!("nlp:x:{NLP}:alice\nvision:x:{VISION}:bob\ncarol:x:{CAROL}:\n"));
    std::fs::write(dir.join("passwd"), passwd).unwrap();
    std::fs::write(dir.join("group"), group).unwrap();
    for f in ["passwd", "group"] {
        std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let ns = script(
        dir,
        "ns.sh",
        &format!(
            "#!/bin/sh\nmount --bind {d}/passwd /etc/passwd && mount --bind {d}/group /etc/group || exit 97\nexec \"$@\"\n",
            d = dir.display()
        ),
    );
    ["unshare", "--mount", "--propagation", "private", "--", &ns].map(String::from).to_vec()
}

/// Runs `args` inside the namespace as `uid` (root: `None`), with `envs`.
fn run_in(ns: &[String], uid: Option<u32>, cwd: &Path, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(&ns[0]);
    cmd.args(&ns[1..]);
    if let Some(u) = uid {
        let gid = match u {
            ALICE => NLP,
            BOB => VISION,
            other => other,
        };
        cmd.args(["setpriv", &format!("--reuid={u}"), &format!("--regid={gid}"), "--init-groups", "--"]);
    }
    cmd.args(args).current_dir(cwd).env_remove("ALLOT_TOKEN").env("NO_COLOR", "1");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().expect("run a command in the namespace")
}

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Polls for `path` for up to `secs`.
fn wait_file(path: &Path, secs: u64, seen: impl Fn() -> String) -> String {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Ok(t) = std::fs::read_to_string(path) {
            return t;
        }
        assert!(Instant::now() < deadline, "{} did not appear within {secs} s:\n{}", path.display(), seen());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `key=value` lines as a lookup.
fn field<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines().find_map(|l| l.strip_prefix(&format!("{key}="))).unwrap_or_else(|| panic!("no {key} in:\n{text}"))
}

async fn submit_json(s: &Server, token: &str, body: Value) -> (u16, Value) {
    s.http("POST", "/v1/workloads", Some(token), Some(&body.to_string())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workloads_run_as_their_submitters_and_people_sign_in_with_munge() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test runs `allot serve` as root (it starts work as other users and makes cgroups): run it as root"
    );
    let socket = std::env::var("ALLOT_TEST_MUNGE_SOCKET").expect(
        "ALLOT_TEST_MUNGE_SOCKET is not set: the munge sign-in is tested against the private munged of \
         .ci/slurm.sh (run the tests with .ci/test, or eval \"$(bash .ci/slurm.sh)\" first)",
    );
    assert!(Path::new(&socket).exists(), "ALLOT_TEST_MUNGE_SOCKET={socket}: no such socket (is munged running?)");

    let dir = temp_dir("identity");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ns = namespace(&dir);
    std::fs::write(dir.join("cluster.toml"), format!("{CONFIG}\n[identity]\nmunge_socket = \"{socket}\"\n")).unwrap();
    let db = TestDb::new(Backend::Sqlite, &dir).await;
    let bin = allot_bin().display().to_string();
    let token = |role: &str, name: &str, extra: &[&str]| {
        let mut args = vec![bin.as_str(), "token", "create", "--db", &db.url, "--role", role, "--name", name];
        args.extend_from_slice(extra);
        ok(&run_in(&ns, None, &dir, &args, &[]), &format!("token create {name}"))
    };
    let admin = token("admin", "ops", &[]);
    let alice = token("researcher", "alice-svc", &["--project", "org/nlp", "--user", "alice"]);
    let bob = token("researcher", "bob-svc", &["--project", "org/vision", "--user", "bob"]);
    let nobody = token("researcher", "no-user", &["--project", "org/nlp"]);
    // root is never a workload's user.
    let out = run_in(
        &ns,
        None,
        &dir,
        &[
            &bin,
            "token",
            "create",
            "--db",
            &db.url,
            "--role",
            "researcher",
            "--name",
            "r",
            "--project",
            "org/nlp",
            "--user",
            "root",
        ],
        &[],
    );
    assert!(!out.status.success(), "a token that runs work as root was made");

    let prefix: Vec<&str> = ns.iter().map(String::as_str).collect();
    let secrets = [("ALLOT_TEST_SECRET", "s3cret"), ("AWS_SECRET_ACCESS_KEY", "also-secret")];
    let s = Server::start_multi_user(&dir, &db.url, &prefix, &[], &secrets);
    let data = dir.join("data");
    let probe = script(&dir, "probe.sh", PROBE_SH);
    let sleeper = script(&dir, "sleep.sh", SLEEP_SH);
    let store_file = db.url.trim_start_matches("sqlite://").split('?').next().unwrap().to_string();

    // bob's work runs; alice's probe then tries to reach it and the rest.
    let (st, v) = submit_json(
        &s,
        &bob,
        serde_json::json!({"account": "org/vision", "gpus": 1, "command": [sleeper], "workdir": dir}),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let bob_id = v["id"].as_str().unwrap().to_string();
    let bob_ck = data.join("checkpoints").join(&bob_id);
    let bob_pid = wait_file(&bob_ck.join("started"), 30, || s.log()).trim().to_string();
    let env = serde_json::json!({
        "OTHER_PID": bob_pid,
        "SERVER_PID": s.pid().to_string(),
        "STORE": store_file,
        "OTHER": bob_ck,
        "ROOT_CGROUP": cgroup2_root(),
    });
    let (st, v) = submit_json(
        &s,
        &alice,
        serde_json::json!({"account": "org/nlp", "gpus": 1, "command": [probe], "env": env, "workdir": dir}),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let done = s.wait_for(&alice, &id, 60, |v| state(v) == "finished" || state(v) == "failed").await;
    assert_eq!(state(&done), "finished", "{done}\n{}", s.log());
    let ck = data.join("checkpoints").join(&id);
    let seen = std::fs::read_to_string(ck.join("probe")).expect("the probe's report");
    assert_eq!(field(&seen, "uid"), format!("{ALICE} gid={NLP} user=alice groups=nlp"), "{seen}");
    assert_eq!(field(&seen, "home"), dir.join("home/alice").display().to_string(), "{seen}");
    for (what, want) in [
        ("secret", "unseen"),
        ("environ", "denied"),
        ("store", "denied"),
        ("other", "denied"),
        ("shadow", "denied"),
        ("signal", "denied"),
        ("cgroup", "stayed"),
        ("own", &format!("{ALICE}:700")),
    ] {
        assert_eq!(field(&seen, what), want, "{what}:\n{seen}");
    }
    let log = data.join("logs").join(&id).join("attempt-1.log");
    let meta = std::fs::metadata(&log).expect("the attempt's log");
    assert_eq!((meta.uid(), meta.mode() & 0o777), (ALICE, 0o600), "the log is alice's and private");
    let store_meta = std::fs::metadata(&store_file).unwrap();
    assert_eq!(store_meta.mode() & 0o077, 0, "the store is the server's only");

    // Submitted from alice's project directory (hers, 0700: the server
    // enters it as her), a workload resumes from its checkpoint after a
    // preemption (the node drained, then back).
    let proj = dir.join("home/alice/proj");
    std::fs::create_dir(&proj).unwrap();
    nix::unistd::chown(&proj, Some(ALICE.into()), Some(NLP.into())).unwrap();
    std::fs::set_permissions(&proj, std::fs::Permissions::from_mode(0o700)).unwrap();
    let work = script(&dir, "work.sh", support::WORK_SH);
    let (st, v) = submit_json(
        &s,
        &alice,
        serde_json::json!({"account": "org/nlp", "gpus": 1, "command": [work, "5"], "workdir": proj}),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let wid = v["id"].as_str().unwrap().to_string();
    let wck = data.join("checkpoints").join(&wid);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(wck.join("n")).ok().and_then(|n| n.trim().parse::<u32>().ok()).unwrap_or(0) < 2 {
        assert!(Instant::now() < deadline, "no checkpoint of 2 s:\n{}", s.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = std::process::Command::new(allot_bin())
        .args(["node", "drain", "gpu-0"])
        .env("ALLOT_SERVER", &s.url)
        .env("ALLOT_TOKEN", &admin)
        .output()
        .unwrap();
    ok(&out, "allot node drain gpu-0");
    wait_file(&wck.join("marker"), 30, || s.log());
    s.wait_for(&alice, &wid, 30, |v| state(v) == "pending").await;
    let out = std::process::Command::new(allot_bin())
        .args(["node", "undrain", "gpu-0"])
        .env("ALLOT_SERVER", &s.url)
        .env("ALLOT_TOKEN", &admin)
        .output()
        .unwrap();
    ok(&out, "allot node undrain gpu-0");
    let done = s.wait_for(&alice, &wid, 60, |v| state(v) == "finished" || state(v) == "failed").await;
    assert_eq!(state(&done), "finished", "{done}\n{}", s.log());
    let second = std::fs::read_to_string(data.join("logs").join(&wid).join("attempt-2.log")).unwrap();
    let resumed: u32 = second
        .lines()
        .find_map(|l| l.strip_prefix("rank 0 resumed from "))
        .unwrap_or_else(|| panic!("the second attempt did not resume: {second}"))
        .trim()
        .parse()
        .unwrap();
    assert!(resumed >= 2, "resumed from {resumed}: {second}");
    assert!(second.contains("rank 0 done 5"), "{second}");

    // A workdir alice cannot enter: the launch fails, nothing runs.
    let (st, v) = submit_json(
        &s,
        &alice,
        serde_json::json!({"account": "org/nlp", "gpus": 1, "command": ["/bin/true"], "workdir": "/root"}),
    )
    .await;
    if st == 201 {
        let rid = v["id"].as_str().unwrap();
        let end = s.wait_for(&alice, rid, 30, |v| state(v) == "failed" || state(v) == "finished").await;
        assert_eq!(state(&end), "failed", "a workdir alice cannot enter ran: {end}");
        assert!(end.to_string().contains("/root"), "the reason names the directory: {end}");
    } else {
        assert!((400..500).contains(&st), "{st} {v}");
    }

    // A token with no Unix user cannot start work; alice cannot touch bob's.
    let (st, v) =
        submit_json(&s, &nobody, serde_json::json!({"account": "org/nlp", "gpus": 1, "command": ["/bin/true"]})).await;
    assert_eq!(st, 403, "{v}");
    assert!(v["error"].as_str().unwrap().contains("allot login"), "{v}");
    let (st, _) = s.http("POST", &format!("/v1/workloads/{bob_id}/cancel"), Some(&alice), None).await;
    assert!(st == 403 || st == 404, "alice cancelled bob's workload: {st}");

    // alice signs in with munge; her next commands use the session.
    let alice_cfg = dir.join("home/alice/.config/allot/client.toml");
    let as_alice = |args: &[&str]| {
        let mut a = vec![bin.as_str()];
        a.extend_from_slice(args);
        run_in(
            &ns,
            Some(ALICE),
            &dir,
            &a,
            &[
                ("HOME", &dir.join("home/alice").display().to_string()),
                ("ALLOT_SERVER", &s.url),
                ("ALLOT_CLIENT_CONFIG", &alice_cfg.display().to_string()),
            ],
        )
    };
    let said = ok(&as_alice(&["login", "--munge", "--munge-socket", &socket]), "allot login as alice (munge)");
    assert!(said.contains("as alice (researcher)"), "{said}");
    let sessions = dir.join("home/alice/.config/allot/sessions");
    let files: Vec<_> = std::fs::read_dir(&sessions).unwrap().flatten().collect();
    assert_eq!(files.len(), 1, "one session saved");
    let meta = files[0].metadata().unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (ALICE, 0o600), "the session is alice's only");
    let queue = ok(&as_alice(&["queue", "--all", "--json"]), "allot queue as alice");
    let listed: Value = serde_json::from_str(&queue).unwrap();
    assert!(listed.as_array().unwrap().iter().all(|w| w["account"] == "org/nlp"), "alice sees her project's: {listed}");
    let probe2 = script(&dir, "probe2.sh", PROBE_SH);
    let sub = ok(
        &as_alice(&[
            "submit",
            "--account",
            "org/nlp",
            "--gpus",
            "1",
            "--env",
            &format!("SERVER_PID={}", s.pid()),
            "--",
            &probe2,
        ]),
        "allot submit as alice (session)",
    );
    let id2 = sub.trim().to_string();
    let done = s.wait_for(&admin, &id2, 60, |v| state(v) == "finished" || state(v) == "failed").await;
    assert_eq!(state(&done), "finished", "{done}\n{}", s.log());
    let seen = std::fs::read_to_string(data.join("checkpoints").join(&id2).join("probe")).unwrap();
    assert!(seen.starts_with(&format!("uid={ALICE} ")), "{seen}");

    // A credential is good once; carol is granted nothing.
    let payload = format!("allot-login:{}", support::store_instance(&db.url).await);
    let cred = ok(
        &run_in(&ns, Some(CAROL), &dir, &["munge", "--socket", &socket, "--string", &payload], &[]),
        "munge as carol",
    );
    let body = serde_json::json!({"credential": cred}).to_string();
    let (st, v) = s.http("POST", "/v1/login/munge", None, Some(&body)).await;
    assert_eq!(st, 403, "{v}");
    assert!(v["error"].as_str().unwrap().contains("carol"), "{v}");
    let (st, v) = s.http("POST", "/v1/login/munge", None, Some(&body)).await;
    assert_eq!(st, 401, "a replayed credential: {v}");
    let other = ok(
        &run_in(&ns, Some(CAROL), &dir, &["munge", "--socket", &socket, "--string", "allot-login:another-server"], &[]),
        "munge for another server",
    );
    let (st, v) =
        s.http("POST", "/v1/login/munge", None, Some(&serde_json::json!({"credential": other}).to_string())).await;
    assert_eq!(st, 401, "a credential for another server: {v}");
    // An expired credential, and one of another munge realm (the second
    // private cluster's munged, its own key).
    let short = ok(
        &run_in(&ns, Some(ALICE), &dir, &["munge", "--socket", &socket, "--ttl=1", "--string", &payload], &[]),
        "a munge credential of 1 s",
    );
    std::thread::sleep(Duration::from_millis(2_500));
    let (st, v) =
        s.http("POST", "/v1/login/munge", None, Some(&serde_json::json!({"credential": short}).to_string())).await;
    assert_eq!(st, 401, "an expired credential: {v}");
    assert!(v["error"].as_str().unwrap().contains("expired"), "{v}");
    let foreign_socket = std::env::var("ALLOT_TEST_MUNGE_SOCKET_B").expect(
        "ALLOT_TEST_MUNGE_SOCKET_B is not set: the second private cluster (.ci/slurm.sh start b) has the other realm",
    );
    let foreign = ok(
        &run_in(&ns, Some(ALICE), &dir, &["munge", "--socket", &foreign_socket, "--string", &payload], &[]),
        "a credential of another realm",
    );
    let (st, v) =
        s.http("POST", "/v1/login/munge", None, Some(&serde_json::json!({"credential": foreign}).to_string())).await;
    assert_eq!(st, 401, "a credential of another munge key: {v}");
    assert!(v["error"].as_str().unwrap().contains("another munge realm"), "{v}");
    let (_, audit) = s.http("GET", "/v1/audit?limit=50", Some(&admin), None).await;
    let signins = audit.as_array().unwrap().iter().filter(|e| e["action"] == "signin").count();
    assert!(signins >= 6, "every sign-in attempt is audited: {audit}");

    // Signing out ends the session on the server.
    ok(&as_alice(&["logout"]), "allot logout as alice");
    assert_eq!(std::fs::read_dir(&sessions).unwrap().count(), 0, "the session file is gone");
    let out = as_alice(&["queue"]);
    assert!(!out.status.success(), "signed out, yet allowed");

    // On the server's host, its login socket: the kernel says who calls.
    let said = ok(&as_alice(&["login"]), "allot login as alice (login socket)");
    assert!(said.contains("as alice (researcher)"), "{said}");
    ok(&as_alice(&["queue"]), "allot queue as alice after signing in on the socket");
    let carol_cfg = dir.join("home/carol/client.toml");
    let carol_login = || {
        run_in(
            &ns,
            Some(CAROL),
            &dir,
            &[&bin, "login"],
            &[("ALLOT_SERVER", &s.url), ("ALLOT_CLIENT_CONFIG", &carol_cfg.display().to_string())],
        )
    };
    let out = carol_login();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("carol") && err.contains("[[grants]]"), "carol: {err}");
    let (_, audit) = s.http("GET", "/v1/audit?limit=50", Some(&admin), None).await;
    let by_socket = audit.as_array().unwrap().iter().filter(|e| e.to_string().contains("peercred")).count();
    assert!(by_socket >= 2, "both socket sign-ins are audited: {audit}");
    // alice lists her own session; an admin lists everyone's and ends hers.
    let mine: Value = serde_json::from_str(&ok(&as_alice(&["session", "list", "--json"]), "session list")).unwrap();
    assert_eq!(mine.as_array().unwrap().len(), 1, "{mine}");
    assert_eq!((mine[0]["unix_user"].as_str(), mine[0]["method"].as_str()), (Some("alice"), Some("peercred")));
    let admin_cli = |args: &[&str]| {
        std::process::Command::new(allot_bin())
            .args(args)
            .env("ALLOT_SERVER", &s.url)
            .env("ALLOT_TOKEN", &admin)
            .env("ALLOT_CLIENT_CONFIG", dir.join("no-client.toml"))
            .output()
            .unwrap()
    };
    let all = ok(&admin_cli(&["session", "list"]), "session list (admin)");
    assert!(all.contains(mine[0]["id"].as_str().unwrap()), "{all}");
    ok(&admin_cli(&["session", "end", mine[0]["id"].as_str().unwrap()]), "session end (admin)");
    let out = as_alice(&["queue"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("allot login"), "an ended session still works: {err}");

    // CFG-1: a grant added to the config and reloaded lets carol in, with
    // no restart.
    let config = dir.join("cluster.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("\n[[grants]]\nuser = \"carol\"\nrole = \"researcher\"\naccounts = [\"org/vision\"]\n");
    std::fs::write(&config, text).unwrap();
    let said = ok(&admin_cli(&["admin", "reload"]), "allot admin reload (a grant for carol)");
    assert!(said.contains("identity.grants"), "{said}");
    let said = ok(&carol_login(), "allot login as carol after the reload");
    assert!(said.contains("as carol (researcher)"), "{said}");
    ok(&as_alice(&["logout"]), "allot logout as alice");

    let (st, _) = s.http("POST", &format!("/v1/workloads/{bob_id}/cancel"), Some(&bob), None).await;
    assert_eq!(st, 200);
    s.wait_for(&bob, &bob_id, 30, |v| state(v) == "cancelled").await;
    drop(s);

    // Work stored by a --single-user server has no user: a root server
    // that runs work as its submitters never runs it (as root).
    let single = Server::start_with(&dir, &db.url, &[], &[]);
    let marker = dir.join("ran-as-root");
    let cmd = serde_json::json!(["/bin/sh", "-c", format!("id -u > {}", marker.display())]);
    let (st, v) = submit_json(
        &single,
        &admin,
        serde_json::json!({"account": "org/nlp", "gpus": 1, "command": cmd, "hold": true, "workdir": dir}),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let held = v["id"].as_str().unwrap().to_string();
    drop(single);
    let s = Server::start_multi_user(&dir, &db.url, &prefix, &[], &[]);
    let (st, v) = s.http("POST", &format!("/v1/workloads/{held}/release"), Some(&admin), None).await;
    assert_eq!(st, 200, "{v}");
    let end = s.wait_for(&admin, &held, 60, |v| state(v) == "failed").await;
    assert!(end.to_string().contains("submit it again"), "the reason says what to do: {end}");
    assert!(!marker.exists(), "work with no user ran on a multi-user server");
    drop(s);
    remove_store_cgroups(&db.url).await;
    db.drop_db().await;
    let _ = std::fs::remove_dir_all(&dir);
}
