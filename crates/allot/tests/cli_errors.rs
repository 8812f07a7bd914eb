//! Every bad input of the client commands through the real binary, with
//! its exact message and exit code (docs/cli.md, *Errors*): the message
//! says what was wrong and how to fix it: the token's variable and file
//! and how to get one, the server tried and how to set another, the units
//! of a value, the valid choices of a name.

mod cli_support;

use std::path::Path;

use cli_support::{CONFIG, Server, allot, code, free_port, stderr, tmpdir};

/// One bad input: its arguments, environment, and exact stderr and code.
struct Case<'a> {
    name: &'a str,
    args: Vec<&'a str>,
    env: Vec<(&'a str, &'a str)>,
    stderr: String,
    code: i32,
}

fn check(home: &Path, cases: Vec<Case<'_>>) {
    for c in cases {
        let o = allot(home, &c.args, &c.env);
        assert_eq!(stderr(&o), c.stderr, "case {}: the message", c.name);
        assert_eq!(code(&o), Some(c.code), "case {}: the exit code", c.name);
    }
}

/// `args` (with `env`) against a server nobody listens on at `url`: the
/// message names the URL once, where it came from (`from`), and how to set
/// another (naming the client config file `file`); exit 3.
fn unreachable<'a>(
    args: Vec<&'a str>,
    env: Vec<(&'a str, &'a str)>,
    what: &str,
    url: &str,
    from: &str,
    file: &str,
) -> Case<'a> {
    Case {
        name: "unreachable",
        args,
        env,
        stderr: format!(
            "error: failed to {what}: cannot reach the server at {url} ({from}): connection refused; is `allot \
             serve` running there? Set another server with --server URL, ALLOT_SERVER=URL or server = \"URL\" in \
             {file}\n"
        ),
        code: 3,
    }
}

#[test]
fn without_a_server_the_message_names_the_url_its_source_and_how_to_set_another() {
    let home = tmpdir("errors-offline");
    let home_s = home.display().to_string();
    let default_file = format!("{home_s}/.config/allot/client.toml");
    let other_file = home.join("other.toml");
    let other_s = other_file.display().to_string();
    let port = free_port();
    std::fs::write(&other_file, format!("server = \"127.0.0.1:{port}\"\n")).unwrap();
    std::fs::write(home.join("c.toml"), CONFIG).unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let bare = format!("127.0.0.1:{port}");
    let db = format!("sqlite://{home_s}/allot.db");
    let config = format!("{home_s}/c.toml");
    let cases = vec![
        unreachable(vec!["queue", "--server", &url], vec![], "list workloads", &url, "from --server", &default_file),
        unreachable(
            vec!["nodes"],
            vec![("ALLOT_SERVER", &bare)],
            "list nodes",
            &url,
            "from ALLOT_SERVER",
            &default_file,
        ),
        unreachable(
            vec!["accounts"],
            vec![("ALLOT_CLIENT_CONFIG", &other_s)],
            "list accounts",
            &url,
            &format!("from {other_s}"),
            &other_s,
        ),
        Case {
            name: "a scheme that is not http",
            args: vec!["queue", "--server", "ftp://host:8080"],
            env: vec![],
            stderr: "error: --server \"ftp://host:8080\": the scheme is \"ftp\", not http or https; give the server \
                     as http://HOST:PORT\n"
                .into(),
            code: 2,
        },
        Case {
            name: "not a URL",
            args: vec!["queue"],
            env: vec![("ALLOT_SERVER", "host:99999")],
            stderr: "error: ALLOT_SERVER=\"host:99999\": not a URL (invalid port number); give the server as \
                     http://HOST:PORT\n"
                .into(),
            code: 2,
        },
        Case {
            name: "a budget in days",
            args: vec!["budget", "set", "lab/alice", "10d"],
            env: vec![],
            stderr: "error: VALUE for lab/alice: expected GPU-hours (NGH) per budget period, such as 10, 10h, \
                     2.5NGH, or \"default\", got \"10d\"\n"
                .into(),
            code: 2,
        },
        Case {
            name: "a share with a unit",
            args: vec!["share", "set", "lab/alice", "2h"],
            env: vec![],
            stderr: "error: VALUE for lab/alice: expected a share: a weight such as 2 or 0.5 (no unit), or \
                     \"default\", got \"2h\"\n"
                .into(),
            code: 2,
        },
        Case {
            name: "token create --db with a project the config does not have",
            args: vec![
                "token",
                "create",
                "--db",
                &db,
                "--config",
                &config,
                "--role",
                "researcher",
                "--name",
                "bob",
                "--project",
                "lab/bobb",
            ],
            env: vec![],
            stderr: format!(
                "error: --project: unknown account \"lab/bobb\" (accounts of {config}: lab/bob, lab, lab/alice, \
                 org, org/x, … (the 5 nearest of 17))\n"
            ),
            code: 2,
        },
        Case {
            name: "token create --db, a manager without a scope",
            args: vec!["token", "create", "--db", &db, "--role", "manager", "--name", "m"],
            env: vec![],
            stderr: "error: --scope: a manager token needs a scope (an account path)\n".into(),
            code: 2,
        },
    ];
    check(&home, cases);
}

#[test]
fn a_live_server_s_refusals_name_the_fix() {
    let server = Server::start("errors-live", CONFIG);
    let home = &server.dir;
    let home_s = home.display().to_string();
    let file = format!("{home_s}/.config/allot/client.toml");
    let admin = server.token(&["--role", "admin", "--name", "root"]);
    let bob = server.token(&["--role", "researcher", "--name", "bob", "--project", "lab/bob"]);
    let token_file = home.join("token.toml");
    std::fs::write(&token_file, "token = \"allot_revoked\"\n").unwrap();
    let token_file_s = token_file.display().to_string();
    let bare = format!("127.0.0.1:{}", server.port);
    let admin_env = [("ALLOT_SERVER", bare.as_str()), ("ALLOT_TOKEN", admin.as_str())];
    let bob_env = [("ALLOT_SERVER", bare.as_str()), ("ALLOT_TOKEN", bob.as_str())];
    let get_a_token = "an admin creates one with `allot token create`";
    let cases = vec![
        Case {
            name: "no token",
            args: vec!["queue"],
            env: vec![("ALLOT_SERVER", &bare)],
            stderr: format!(
                "error: failed to list workloads: 401 Unauthorized: no token given: sign in with `allot login`, or \
                 set ALLOT_TOKEN, or token = \"…\" in {file} ({get_a_token})\n"
            ),
            code: 5,
        },
        Case {
            name: "an unknown token from ALLOT_TOKEN",
            args: vec!["queue"],
            env: vec![("ALLOT_SERVER", &bare), ("ALLOT_TOKEN", "allot_nope")],
            stderr: format!(
                "error: failed to list workloads: 401 Unauthorized: unknown or revoked token; the token came from \
                 ALLOT_TOKEN: set a valid one there; {get_a_token}\n"
            ),
            code: 5,
        },
        Case {
            name: "an unknown token from the client config file",
            args: vec!["queue"],
            env: vec![("ALLOT_SERVER", &bare), ("ALLOT_CLIENT_CONFIG", &token_file_s)],
            stderr: format!(
                "error: failed to list workloads: 401 Unauthorized: unknown or revoked token; the token came from \
                 token in {token_file_s}: set a valid one there; {get_a_token}\n"
            ),
            code: 5,
        },
        Case {
            name: "a researcher lists tokens",
            args: vec!["token", "list"],
            env: bob_env.to_vec(),
            stderr: "error: failed to list tokens: 403 Forbidden: only admins may list tokens; bob is a researcher\n"
                .into(),
            code: 5,
        },
        Case {
            name: "no such workload",
            args: vec!["show", "999"],
            env: admin_env.to_vec(),
            stderr: "error: failed to show 999: 404 Not Found: no workload 999\n".into(),
            code: 6,
        },
        Case {
            name: "an unknown account among many: the nearest",
            args: vec!["submit", "--account", "lab/alicee", "--gpus", "1", "--", "true"],
            env: admin_env.to_vec(),
            stderr: "error: failed to submit: 400 Bad Request: unknown account \"lab/alicee\" (accounts root sees: \
                     lab/alice, lab/bob, lab, org/team01, org/team02, … (the 5 nearest of 17)) (field `account`)\n"
                .into(),
            code: 4,
        },
        Case {
            name: "an unknown account: only the researcher's own",
            args: vec!["submit", "--account", "lab/alice", "--gpus", "1", "--", "true"],
            env: bob_env.to_vec(),
            stderr: "error: failed to submit: 400 Bad Request: unknown account \"lab/alice\" (accounts bob sees: \
                     lab/bob) (field `account`)\n"
                .into(),
            code: 4,
        },
        Case {
            name: "an unknown GPU type",
            args: vec!["submit", "--account", "lab/alice", "--gpus", "1", "--gpu-type", "B200", "--", "true"],
            env: admin_env.to_vec(),
            stderr: "error: failed to submit: 400 Bad Request: unknown gpu type \"B200\" (pools have H100) (field \
                     `gpu_type`)\n"
                .into(),
            code: 4,
        },
        Case {
            name: "an unknown class",
            args: vec!["submit", "--account", "lab/alice", "--gpus", "1", "--class", "gpu", "--", "true"],
            env: admin_env.to_vec(),
            stderr: "error: failed to submit: 400 Bad Request: unknown class \"gpu\" (use batch, interactive or \
                     service) (field `class`)\n"
                .into(),
            code: 4,
        },
        Case {
            name: "an unknown cluster",
            args: vec!["submit", "--account", "lab/alice", "--gpus", "1", "--cluster", "c9", "--", "true"],
            env: admin_env.to_vec(),
            stderr: "error: failed to submit: 400 Bad Request: unknown cluster \"c9\" (the fleet has cluster) (field \
                     `clusters`)\n"
                .into(),
            code: 4,
        },
        Case {
            name: "the budget of an unknown account",
            args: vec!["budget", "set", "org/team1", "10h"],
            env: admin_env.to_vec(),
            stderr: "error: failed to set the budget of org/team1: 404 Not Found: unknown account \"org/team1\" \
                     (accounts root sees: org/team01, org/team10, org/team11, org/team12, org/team02, … (the 5 \
                     nearest of 17))\n"
                .into(),
            code: 6,
        },
        Case {
            name: "token create blames --project, not --projects",
            args: vec!["token", "create", "--role", "researcher", "--name", "bobb", "--project", "lab/bobb"],
            env: admin_env.to_vec(),
            stderr: "error: failed to create token \"bobb\": 400 Bad Request: --project: unknown account \"lab/bobb\" \
                     (accounts root sees: lab/bob, lab, lab/alice, org, org/x, … (the 5 nearest of 17))\n"
                .into(),
            code: 4,
        },
        Case {
            name: "a token name taken",
            args: vec!["token", "create", "--role", "admin", "--name", "root"],
            env: admin_env.to_vec(),
            stderr: "error: failed to create token \"root\": 409 Conflict: a token named \"root\" already exists\n"
                .into(),
            code: 4,
        },
        Case {
            name: "revoke no such token",
            args: vec!["token", "revoke", "nobody"],
            env: admin_env.to_vec(),
            stderr: "error: failed to revoke \"nobody\": 404 Not Found: no token named \"nobody\"\n".into(),
            code: 6,
        },
        Case {
            name: "fail no such node",
            args: vec!["node", "fail", "a-9"],
            env: admin_env.to_vec(),
            stderr: "error: failed to fail node a-9: 404 Not Found: unknown node \"a-9\" (nodes: a-0, a-1)\n".into(),
            code: 6,
        },
    ];
    check(home, cases);
    // A budget in hours is GPU-hours (NGH).
    let o = allot(home, &["budget", "set", "lab/alice", "10h", "--json"], &admin_env);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("the account as JSON");
    assert_eq!(v["budget_gpu_hours"], 10.0, "{v}");
}

/// `allot serve`'s own output, which must end (a failed start) within 30 s.
fn serve_fails(dir: &Path, db: &str, port: u16) -> String {
    let mut child = cli_support::spawn_serve(dir, db, port);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("allot serve --db {db} did not stop");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    String::from_utf8(out.stderr).unwrap()
}

/// Issue 30 #12: a port in use is said once, with the option that changes
/// it, before anything is made; a second store pointed at the data
/// directory of another is told so (once), with a directory of its own
/// to use instead of the other's.
#[test]
fn first_run_errors_say_their_cause_once_and_name_the_fix() {
    let dir = tmpdir("first-run");
    std::fs::write(dir.join("c.toml"), CONFIG).unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let db = format!("sqlite://{}", dir.join("a.db").display());
    let err = serve_fails(&dir, &db, port);
    assert_eq!(err.matches("in use").count(), 1, "the cause once: {err}");
    assert!(err.contains(&format!("cannot listen on 127.0.0.1:{port}")), "{err}");
    assert!(err.contains("another process listens there: stop it, or give this server another address with --listen"));
    assert!(!dir.join("a.db").exists(), "no store made before the port was had");
    assert!(!dir.join("data").exists(), "no data directory made before the port was had");
    drop(taken);

    // Store a, served once in `data`; store b started beside it with the same data directory.
    let init = allot(&dir, &["db", "init", "--db", &db, "--data-dir", &dir.join("data").display().to_string()], &[]);
    assert_eq!(code(&init), Some(0), "{}", stderr(&init));
    let b = format!("sqlite://{}", dir.join("b.db").display());
    let err = serve_fails(&dir, &b, free_port());
    let a_file = dir.join("a.db").display().to_string();
    assert_eq!(err.matches("belongs to another store").count(), 1, "said once: {err}");
    assert!(err.contains(&format!("belongs to another store, {a_file}")), "{err}");
    assert!(err.contains(&format!("say {}", dir.join("b-data").display())), "its own directory: {err}");
    assert!(err.contains(&format!("or serve that store with --db sqlite:{a_file}")), "{err}");
    assert!(!dir.join("b.db").exists(), "store b was not made");
}

/// Issue 30, point 13: a server stopped with work running says so on
/// screen, how many, and what its next start does with them.
#[test]
fn a_stopped_server_says_what_it_leaves_running() {
    let server = Server::start("stop-running", CONFIG);
    let token = server.token(&["--role", "admin", "--name", "root"]);
    let env = server.env(&token);
    for _ in 0..2 {
        let o = allot(&server.dir, &["submit", "--account", "lab/alice", "--gpus", "1", "--", "sleep", "600"], &env);
        assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let o = allot(&server.dir, &["queue", "--state", "running", "--json"], &env);
        let running: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        if running.as_array().is_some_and(|a| a.len() == 2) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "two workloads did not start: {running}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let err = server.stop();
    assert!(err.contains("stopped with 2 workloads running"), "{err}");
    assert!(err.contains("the next allot serve on this store stops and requeues"), "{err}");
    assert!(err.contains("cancel them or drain their nodes"), "{err}");
}
