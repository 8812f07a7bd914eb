//! The exit-code table of docs/cli.md through the real binary: at least one
//! case per code (0 ok, 1 failed while running, 2 bad usage or input,
//! 3 unavailable, 4 refused).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("allot-exit-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `allot` with `args`, its client config and tokens isolated in `home`.
fn allot_in(home: &Path, args: &[&str], token: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_allot"));
    c.args(args).current_dir(repo()).env("HOME", home).env_remove("ALLOT_SERVER").env_remove("ALLOT_CLIENT_CONFIG");
    match token {
        Some(t) => c.env("ALLOT_TOKEN", t),
        None => c.env_remove("ALLOT_TOKEN"),
    };
    c.output().expect("run allot")
}

fn code(o: &Output) -> Option<i32> {
    o.status.code()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A port nothing listens on (as the kernel just gave it out).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

const CONFIG: &str = r#"
[cluster]
[[cluster.pools]]
name = "a"
gpu = "H100"
nodes = 2
gpus_per_node = 8
[[accounts]]
path = "org/x"
"#;

#[test]
fn zero_when_the_command_did_what_it_was_asked() {
    let home = tmpdir("ok");
    let o = allot_in(&home, &["sim", "--config", "examples/cluster.toml", "--trace", "examples/trace.csv"], None);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
}

#[test]
fn one_when_an_output_cannot_be_written() {
    let home = tmpdir("failed");
    let out = home.join("no-such-dir/report.json");
    let args = ["sim", "--config", "examples/cluster.toml", "--trace", "examples/trace.csv", "--json"];
    let o = allot_in(&home, &[&args[..], &[out.to_str().unwrap()]].concat(), None);
    assert_eq!(code(&o), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("failed to write"), "{}", stderr(&o));
}

#[test]
fn two_for_bad_usage_and_bad_input() {
    let home = tmpdir("usage");
    let cfg = home.join("c.toml");
    std::fs::write(&cfg, CONFIG).unwrap();
    let trace = home.join("t.csv");
    std::fs::write(&trace, "id,submit_s,account,gpus,work_s\nw1,0,org/nope,1,10\n").unwrap();
    let bad_client = home.join("client.toml");
    std::fs::write(&bad_client, "server = [").unwrap();
    let (cfg, trace) = (cfg.to_str().unwrap(), trace.to_str().unwrap());
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        ("unknown flag (clap)", vec!["sim", "--no-such-flag"], "--no-such-flag"),
        ("bad trace row", vec!["sim", "--config", cfg, "--trace", trace], "t.csv:2: field `account`"),
        ("missing config", vec!["sim", "--config", "no/such.toml", "--trace", trace], "cannot read the file"),
        ("bad option value", vec!["sim", "--config", cfg, "--trace", trace, "--until", "10q"], "invalid duration"),
        (
            "fraction out of range",
            vec!["trace", "gen", "--out", "-", "--high-share", "2"],
            "expected a value in [0, 1], got 2",
        ),
        ("unknown role", vec!["token", "create", "--role", "boss", "--name", "n"], "unknown role \"boss\""),
    ];
    for (name, args, fragment) in cases {
        let o = allot_in(&home, &args, None);
        assert_eq!(code(&o), Some(2), "case {name}: {}", stderr(&o));
        assert!(stderr(&o).contains(fragment), "case {name}: {}", stderr(&o));
    }
    // A client config that does not parse.
    let mut c = Command::new(env!("CARGO_BIN_EXE_allot"));
    c.args(["queue"]).env("HOME", &home).env("ALLOT_CLIENT_CONFIG", &bad_client).env_remove("ALLOT_SERVER");
    let o = c.output().expect("run allot");
    assert_eq!(code(&o), Some(2), "bad client config: {}", stderr(&o));
    assert!(stderr(&o).contains("client.toml"), "{}", stderr(&o));
}

#[test]
fn two_for_a_class_the_trace_loader_would_refuse() {
    let home = tmpdir("class");
    let args = ["trace", "import", "--format", "philly", "in.csv", "--out", "-", "--class", "gpu"];
    let o = allot_in(&home, &args, None);
    assert_eq!(code(&o), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("unknown class \"gpu\" (use batch, interactive or service)"), "{}", stderr(&o));
}

#[test]
fn three_when_the_server_cannot_be_reached() {
    let home = tmpdir("unavailable");
    let url = format!("http://127.0.0.1:{}", free_port());
    let o = allot_in(&home, &["queue", "--server", &url], Some("t"));
    assert_eq!(code(&o), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot reach the server"), "{}", stderr(&o));
}

/// A server started by the test, killed by its own handle when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(dir: &Path, db: &str, port: u16) -> Child {
    Command::new(env!("CARGO_BIN_EXE_allot"))
        .args(["serve", "--executor", "none", "--db", db, "--listen", &format!("127.0.0.1:{port}")])
        .arg("--config")
        .arg(dir.join("c.toml"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env("HOME", dir)
        .env("ALLOT_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start allot serve")
}

#[test]
fn four_when_the_server_refuses() {
    let dir = tmpdir("refused");
    std::fs::write(dir.join("c.toml"), CONFIG).unwrap();
    let db = format!("sqlite://{}", dir.join("allot.db").display());
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let _server = Server(serve(&dir, &db, port));
    // Up once an unauthenticated request is answered at all (401), not 3.
    let deadline = Instant::now() + Duration::from_secs(60);
    let o = loop {
        let o = allot_in(&dir, &["queue", "--server", &url], Some("not-a-token"));
        if code(&o) != Some(3) || Instant::now() > deadline {
            break o;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(code(&o), Some(4), "a bad token: {}", stderr(&o));
    assert!(stderr(&o).contains("401"), "{}", stderr(&o));

    let token = allot_in(&dir, &["token", "create", "--db", &db, "--role", "admin", "--name", "root"], None);
    assert_eq!(code(&token), Some(0), "{}", stderr(&token));
    let token = String::from_utf8(token.stdout).unwrap();
    let token = token.trim();
    let o = allot_in(&dir, &["show", "--server", &url, "999"], Some(token));
    assert_eq!(code(&o), Some(4), "not found: {}", stderr(&o));
    let args = ["submit", "--server", &url, "--account", "org/x", "--gpus", "3", "--nodes", "2", "--", "true"];
    let o = allot_in(&dir, &args, Some(token));
    assert_eq!(code(&o), Some(4), "an invalid submission: {}", stderr(&o));
    assert!(stderr(&o).contains("gpus (3) is not a multiple of nodes (2)"), "{}", stderr(&o));
    let again = allot_in(&dir, &["token", "create", "--db", &db, "--role", "admin", "--name", "root"], None);
    assert_eq!(code(&again), Some(4), "a taken token name: {}", stderr(&again));

    // A second server on the same store is refused before it touches it.
    let second = serve(&dir, &db, free_port()).wait_with_output().expect("second server");
    assert_eq!(second.status.code(), Some(4), "{}", String::from_utf8_lossy(&second.stderr));
    assert!(String::from_utf8_lossy(&second.stderr).contains("another server is serving this store"));
}
