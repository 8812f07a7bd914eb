//! `allot serve`'s log: plain text when stderr is not a terminal (no ANSI
//! colour codes in a log file, whatever NO_COLOR says), and one JSON object
//! per line with `--log-format json`.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{CONFIG, allot_bin, temp_dir};

/// Starts `allot serve` with `args`, its stderr piped, until it logs that
/// it listens; returns the lines up to then.
fn first_lines(name: &str, args: &[&str]) -> Vec<String> {
    let dir = temp_dir(name);
    std::fs::write(dir.join("cluster.toml"), CONFIG).expect("config");
    let mut child = Command::new(allot_bin())
        .args([
            "serve",
            "--single-user",
            "--config",
            "cluster.toml",
            "--db",
            "sqlite://allot.db",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--executor", "none"])
        .args(args)
        .current_dir(&dir)
        .env_remove("NO_COLOR")
        .env("ALLOT_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start allot serve");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut lines = Vec::new();
    while Instant::now() < deadline {
        let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) else { continue };
        let done = line.contains("listening");
        lines.push(line);
        if done {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(lines.iter().any(|l| l.contains("listening")), "no `listening` line: {lines:?}");
    lines
}

#[test]
fn a_log_that_is_not_a_terminal_has_no_colour() {
    let lines = first_lines("log-text", &[]);
    for l in &lines {
        assert!(!l.contains('\u{1b}'), "an ANSI escape in a piped log: {l:?}");
    }
}

#[test]
fn json_logs_are_one_object_per_line() {
    let lines = first_lines("log-json", &["--log-format", "json"]);
    for l in &lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}"));
        assert!(v["level"].is_string() && v["timestamp"].is_string() && v["target"].is_string(), "{v}");
    }
    let listening: serde_json::Value =
        serde_json::from_str(lines.iter().find(|l| l.contains("listening")).expect("listening")).expect("json");
    assert!(listening["addr"].as_str().is_some_and(|a| a.starts_with("127.0.0.1:")), "{listening}");
}
