//! The exit-code table of docs/cli.md through the real binary: at least one
//! case per code (0 ok, 1 failed while running, 2 bad usage or input,
//! 3 unavailable, 4 rejected, 5 authentication or permission, 6 not found).

mod cli_support;

use std::process::Command;

use cli_support::{CONFIG, Server, allot_in, code, free_port, spawn_serve, stderr, tmpdir};

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
        ("a server URL of another scheme", vec!["queue", "--server", "ftp://x"], "the scheme is \"ftp\""),
        ("a budget in days", vec!["budget", "set", "org/x", "10d"], "expected GPU-hours (NGH) per budget period"),
        ("--config without --db", vec!["token", "create", "--role", "admin", "--name", "n", "--config", cfg], "--db"),
    ];
    for (name, args, fragment) in cases {
        let o = allot_in(&home, &args, None);
        assert_eq!(code(&o), Some(2), "case {name}: {}", stderr(&o));
        assert!(stderr(&o).contains(fragment), "case {name}: {}", stderr(&o));
    }
    // A client config that does not parse.
    let mut c = Command::new(env!("CARGO_BIN_EXE_allot"));
    c.args(["queue"]).env("HOME", &*home).env("ALLOT_CLIENT_CONFIG", &bad_client).env_remove("ALLOT_SERVER");
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

#[test]
fn four_five_and_six_when_the_server_says_no() {
    let server = Server::start("refused", CONFIG);
    let (dir, db, url) = (&server.dir, &server.db, &server.url);
    let o = allot_in(dir, &["queue", "--server", url], Some("not-a-token"));
    assert_eq!(code(&o), Some(5), "a bad token: {}", stderr(&o));
    assert!(stderr(&o).contains("401"), "{}", stderr(&o));
    let o = allot_in(dir, &["queue", "--server", url], None);
    assert_eq!(code(&o), Some(5), "no token: {}", stderr(&o));

    let token = server.token(&["--role", "admin", "--name", "root"]);
    let token = token.as_str();
    let researcher = server.token(&["--role", "researcher", "--name", "bob", "--project", "org/x"]);
    let o = allot_in(dir, &["token", "list", "--server", url], Some(&researcher));
    assert_eq!(code(&o), Some(5), "a role that may not: {}", stderr(&o));
    assert!(stderr(&o).contains("403"), "{}", stderr(&o));

    let o = allot_in(dir, &["show", "--server", url, "999"], Some(token));
    assert_eq!(code(&o), Some(6), "not found: {}", stderr(&o));
    let o = allot_in(dir, &["token", "revoke", "--server", url, "nobody"], Some(token));
    assert_eq!(code(&o), Some(6), "no such token: {}", stderr(&o));

    let args = ["submit", "--server", url, "--account", "org/x", "--gpus", "3", "--nodes", "2", "--", "true"];
    let o = allot_in(dir, &args, Some(token));
    assert_eq!(code(&o), Some(4), "an invalid submission: {}", stderr(&o));
    assert!(stderr(&o).contains("gpus (3) is not a multiple of nodes (2)"), "{}", stderr(&o));
    let again = allot_in(dir, &["token", "create", "--db", db, "--role", "admin", "--name", "root"], None);
    assert_eq!(code(&again), Some(4), "a taken token name: {}", stderr(&again));
    let again = allot_in(dir, &["token", "create", "--server", url, "--role", "admin", "--name", "root"], Some(token));
    assert_eq!(code(&again), Some(4), "a taken token name through the server: {}", stderr(&again));

    // A second server on the same store is rejected before it touches it.
    let second = spawn_serve(dir, db, free_port()).wait_with_output().expect("second server");
    assert_eq!(second.status.code(), Some(4), "{}", String::from_utf8_lossy(&second.stderr));
    assert!(String::from_utf8_lossy(&second.stderr).contains("another server is serving this store"));
}

/// A reader that stops early (`allot … | head`) ends the command quietly,
/// as it ends `ls` or `cat`: killed by SIGPIPE, no panic, no backtrace.
#[test]
fn a_closed_pipe_ends_the_command_without_a_panic() {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    for args in [&["completions", "bash"][..], &["man"][..]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_allot"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run allot");
        let mut first = [0u8; 16];
        child.stdout.as_mut().unwrap().read_exact(&mut first).expect("some output");
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "allot {args:?} | head panicked: {err}");
        assert!(out.status.success() || out.status.signal() == Some(13), "allot {args:?}: {:?} {err}", out.status);
    }
}

/// A program given to `allot submit` without `--` is a usage error that
/// says where the program goes (not only "unexpected argument").
#[test]
fn a_program_without_the_separator_is_told_where_it_goes() {
    let home = tmpdir("separator");
    let o = allot_in(&home, &["submit", "--account", "org/a", "--gpus", "1", "true"], None);
    assert_eq!(code(&o), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "tip: put the program and its arguments after --, as in: allot submit --account PATH --gpus N -- true"
        ),
        "{}",
        stderr(&o)
    );
}
