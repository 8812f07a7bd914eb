//! The README's *Live scheduler quick start*, run as a newcomer runs it:
//! its shell blocks in order, in one shell, in a fresh directory, each
//! command checked. The README is the only copy of the quick start
//! (docs/quickstart.md points to it), so a command that stops working, or
//! a comment that stops being true, fails here.
//!
//! The commands run unchanged but for what a person does between them and
//! the test cannot: the build is the one cargo made for this test (the
//! binary's directory first on `PATH`), a person waits before the next
//! line (here: until what it needs is there, bounded), and Ctrl-C ends
//! `--watch` (here: `timeout -s INT`). The shell runs as root in namespaces
//! of its own (`unshare --net --pid`): port 8080 is its own loopback's, and
//! every process the quick start leaves (the server, its workloads) dies
//! with the namespace. *A machine people share* runs as two Unix users and
//! is covered by tests/identity.rs in allot-server.

mod cli_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use cli_support::{repo, tmpdir};

/// The quick start's commands: the README's `sh` blocks between its two
/// headings, a here-document kept with the command that opens it.
fn quick_start(readme: &str) -> Vec<String> {
    let start = readme.find("## Live scheduler quick start").expect("the README has its quick start");
    let end = start + readme[start..].find("### A machine people share").expect("the README has its shared machine");
    let mut commands = Vec::new();
    let mut in_block = false;
    let mut heredoc: Option<(String, String)> = None;
    for line in readme[start..end].lines() {
        if let Some((text, eof)) = &mut heredoc {
            text.push('\n');
            text.push_str(line);
            if line == eof {
                commands.push(heredoc.take().expect("open").0);
            }
            continue;
        }
        match line.trim() {
            "```sh" => in_block = true,
            "```" => in_block = false,
            l if !in_block || l.is_empty() || l.starts_with('#') => {}
            _ => match line.split("<<").nth(1) {
                Some(tag) => {
                    let eof = tag.trim().trim_matches('\'').trim_matches('"').to_string();
                    heredoc = Some((line.to_string(), eof));
                }
                None => commands.push(line.to_string()),
            },
        }
    }
    assert!(heredoc.is_none(), "a here-document of the quick start is not closed");
    commands
}

/// What the test does for one command: run it as written, or in a form
/// that stands for what a person does, and what its output must hold.
struct Step {
    /// Shell run before the command: waiting as a person would.
    before: &'static str,
    /// The command as run, `{}` standing for the README's.
    run: &'static str,
    /// Exit statuses that are success here.
    ok: &'static [i32],
    /// Texts its output (stdout and stderr) must contain.
    says: &'static [&'static str],
}

const AS_WRITTEN: Step = Step { before: "", run: "{}", ok: &[0], says: &[] };

/// The steps that differ from running a command as written, by the
/// command's first words.
fn steps() -> BTreeMap<&'static str, Step> {
    BTreeMap::from([
        // The binary cargo built for this test, not a second release build.
        ("cargo build --release -p allot", Step { run: "true", ..AS_WRITTEN }),
        ("export PATH=", Step { run: "export PATH=\"$ALLOT_TEST_BIN:$PATH\"", ..AS_WRITTEN }),
        // A person waits for the server to listen before the next line.
        ("allot serve", Step { run: "{}\nserver=$!\nwait_for 60 allot queue", ..AS_WRITTEN }),
        ("allot submit --account lab/alice --gpus 4", Step { says: &["1\n"], ..AS_WRITTEN }),
        // "20 s later (past the batch slice)": until the slice is over.
        (
            "allot submit --account lab/bob --gpus 2 --class interactive",
            Step { before: "wait_for 60 allot queue --state running --json; sleep 21", says: &["2\n"], ..AS_WRITTEN },
        ),
        // The comment's promise: attempt 1 was stopped by INT-1.
        (
            "allot show 1",
            // "attempt 1 stopped": once 2 runs (grace is 5 s).
            Step {
                before: "wait_for 60 sh -c 'allot queue --all | grep -Eq \"^ *2 .* running \"'",
                says: &["INT-1"],
                ..AS_WRITTEN
            },
        ),
        ("allot queue --all", Step { says: &[" pending ", " running "], ..AS_WRITTEN }),
        // Attempt 2 starts when 2 ends (30 s) and resumes from the
        // checkpoint; following it to its end would take the 2 minutes of
        // the script, so the test stops following once it has resumed.
        (
            "allot logs 1 --attempt 2 --follow",
            Step { run: "timeout 90 {}", ok: &[0, 124], says: &["starting at step "], ..AS_WRITTEN },
        ),
        ("allot submit --account lab/alice --gpus 1 --array", Step { says: &["3\n"], ..AS_WRITTEN }),
        ("allot submit --account lab/alice --gpus 4 --dependency", AS_WRITTEN),
        ("allot submit --account lab/bob --gpus 1 --hold", AS_WRITTEN),
        // Ctrl-C after a few redraws.
        (
            "allot queue --watch",
            Step {
                run: "timeout -s INT 3 {}",
                ok: &[0, 124, 130],
                says: &["NODES", "ELAPSED", "TIME LEFT"],
                ..AS_WRITTEN
            },
        ),
        // bob's held workload is the one pending in lab/bob.
        ("allot cancel --account lab/bob --state pending", Step { says: &[" cancelled"], ..AS_WRITTEN }),
        ("allot history", Step { says: &["WAITED", "RAN"], ..AS_WRITTEN }),
        ("allot accounts ", Step { says: &["\nlab ", "  alice ", "  bob "], ..AS_WRITTEN }),
        ("allot budget set", Step { says: &["lab/alice"], ..AS_WRITTEN }),
        ("allot budget report", Step { says: &["lab/alice"], ..AS_WRITTEN }),
        ("allot accounts create", Step { says: &["lab/new"], ..AS_WRITTEN }),
        ("allot accounts export", Step { run: "{} && grep -q 'lab/new' tree.toml", ..AS_WRITTEN }),
        ("curl -s", Step { says: &["allot_queue_length"], ..AS_WRITTEN }),
        ("allot nodes", Step { says: &["local-0"], ..AS_WRITTEN }),
        // Draining while its workload stops under the contract, then drained.
        ("allot node drain", Step { says: &["local-0 drain"], ..AS_WRITTEN }),
        ("allot node undrain", Step { says: &["local-0 up"], ..AS_WRITTEN }),
        // The file is as the server read it: nothing to apply.
        ("allot admin reload", Step { says: &["cluster.toml: unchanged"], ..AS_WRITTEN }),
    ])
}

/// The step of `command`: the entry whose key is the longest prefix of it.
fn step_of<'a>(steps: &'a BTreeMap<&'static str, Step>, command: &str) -> &'a Step {
    steps.iter().filter(|(k, _)| command.starts_with(**k)).max_by_key(|(k, _)| k.len()).map_or(&AS_WRITTEN, |(_, s)| s)
}

/// The script the namespaced shell runs: each command between markers
/// with its exit status, then the server stopped and its workloads ended.
fn script(commands: &[String], steps: &BTreeMap<&'static str, Step>) -> String {
    let mut s = String::from(
        "ip link set lo up\n\
         wait_for() { t=$1; shift; n=0; until \"$@\" >/dev/null 2>&1; do n=$((n+1)); \
         [ $n -ge $((t*2)) ] && { echo \"gave up waiting for: $*\"; return 1; }; sleep 0.5; done; }\n",
    );
    for (i, c) in commands.iter().enumerate() {
        let step = step_of(steps, c);
        s.push_str(&format!("echo '@@step {i}'\n"));
        if !step.before.is_empty() {
            s.push_str(&format!("{} >/dev/null 2>&1 || echo '@@waited-in-vain {i}'\n", step.before));
        }
        s.push_str(&format!("{{\n{}\n}} 2>&1\necho \"@@rc {i} $?\"\n", step.run.replace("{}", c)));
    }
    // Stopped as an operator would: nothing left running, then SIGTERM.
    s.push_str(
        "echo '@@end'\n\
         allot cancel --state pending >/dev/null 2>&1; allot cancel --state running >/dev/null 2>&1\n\
         wait_for 60 sh -c '[ \"$(allot queue --state running,stopping --json)\" = \"[]\" ]' || echo '@@still-running'\n\
         kill \"$server\"; wait \"$server\"; echo \"@@server-stopped $?\"\n",
    );
    s
}

/// The output of each step, by index, and its exit status.
fn outputs(log: &str) -> BTreeMap<usize, (String, Option<i32>)> {
    let mut out: BTreeMap<usize, (String, Option<i32>)> = BTreeMap::new();
    let mut current: Option<usize> = None;
    for line in log.lines() {
        if line == "@@end" {
            current = None;
        } else if let Some(i) = line.strip_prefix("@@step ") {
            current = Some(i.parse().expect("step index"));
            out.entry(current.expect("set")).or_default();
        } else if let Some(rc) = line.strip_prefix("@@rc ") {
            let mut w = rc.split(' ');
            let i: usize = w.next().and_then(|v| v.parse().ok()).expect("rc index");
            out.entry(i).or_default().1 = w.next().and_then(|v| v.parse().ok());
        } else if let Some(i) = current {
            let o = &mut out.entry(i).or_default().0;
            o.push_str(line);
            o.push('\n');
        }
    }
    out
}

#[test]
fn the_readme_quick_start_runs_as_written() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let commands = quick_start(&readme);
    assert!(commands.len() > 25, "the quick start's commands: {commands:#?}");
    let steps = steps();
    for key in steps.keys() {
        assert!(commands.iter().any(|c| c.starts_with(key)), "the README no longer runs {key:?}: update this test");
    }
    let dir = tmpdir("readme");
    let script = script(&commands, &steps);
    std::fs::write(dir.join("quick-start.sh"), &script).expect("write the script");
    let bin = Path::new(env!("CARGO_BIN_EXE_allot")).parent().expect("the binary's directory").to_path_buf();
    let o = Command::new("unshare")
        .args(["--net", "--pid", "--fork", "--kill-child", "--mount-proc", "bash", "quick-start.sh"])
        .current_dir(&*dir)
        .env("ALLOT_TEST_BIN", &bin)
        .env("HOME", &*dir)
        .env_remove("ALLOT_SERVER")
        .env_remove("ALLOT_TOKEN")
        .env_remove("ALLOT_CLIENT_CONFIG")
        .env("ALLOT_LOG", "warn")
        .output()
        .expect("unshare (util-linux) runs the quick start in namespaces of its own: it needs root");
    let log = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(log.contains("@@end"), "the quick start did not run to its end ({}):\n{log}", o.status);
    assert!(!log.contains("@@still-running"), "the quick start's work did not end when cancelled:\n{log}");
    assert!(log.contains("@@server-stopped 0"), "allot serve did not stop cleanly on SIGTERM:\n{log}");
    let out = outputs(&log);
    for (i, c) in commands.iter().enumerate() {
        let step = step_of(&steps, c);
        let (text, rc) = out.get(&i).cloned().unwrap_or_default();
        assert!(!log.contains(&format!("@@waited-in-vain {i}\n")), "waited in vain before `{c}`:\n{log}");
        let rc = rc.unwrap_or_else(|| panic!("`{c}` gave no exit status:\n{log}"));
        assert!(step.ok.contains(&rc), "`{c}` exited {rc}:\n{text}\n--- the whole run:\n{log}");
        for want in step.says {
            assert!(text.contains(want), "`{c}` does not say {want:?}:\n{text}\n--- the whole run:\n{log}");
        }
    }
    // The interactive session stopped attempt 1, which resumed from its
    // checkpoint rather than from the start.
    let logs = commands.iter().position(|c| c.starts_with("allot logs 1 --attempt 2")).expect("the logs step");
    let resumed = out[&logs].0.lines().find_map(|l| l.trim().strip_prefix("GPUs 0,1,2,3, starting at step "));
    let step: u32 = resumed.and_then(|n| n.trim().parse().ok()).unwrap_or_else(|| panic!("{}", out[&logs].0));
    assert!(step > 0, "attempt 2 resumed from its checkpoint, not from step 0:\n{}", out[&logs].0);
}
