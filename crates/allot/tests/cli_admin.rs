//! The administration verbs through the real binary against a live server
//! (`allot token list|create|revoke`, `allot audit`, `allot node
//! fail|repair`), and the shell completions and man pages generated from
//! the command line's definitions.

mod cli_support;

use std::process::Command;

use cli_support::{CONFIG, Server, allot, code, stderr, stdout, tmpdir};
use serde_json::Value;

fn json(o: &std::process::Output) -> Value {
    assert_eq!(code(o), Some(0), "{}", stderr(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

#[test]
fn tokens_are_created_listed_and_revoked_through_the_server() {
    let server = Server::start("admin-tokens", CONFIG);
    let home = &server.dir;
    let admin = server.token(&["--role", "admin", "--name", "root"]);
    let env = server.env(&admin);

    // Created through the server (no --db): printed once, and it works.
    let o = allot(home, &["token", "create", "--role", "researcher", "--name", "bob", "--project", "lab/bob"], &env);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    let bob = stdout(&o).trim().to_string();
    assert!(bob.starts_with("allot_") && bob.len() == 70, "{bob}");
    assert_eq!(stderr(&o), "created researcher token \"bob\"; it is shown only this once\n");
    let bob_env = server.env(&bob);
    let o = allot(home, &["accounts", "--json"], &bob_env);
    let seen: Vec<String> = json(&o).as_array().unwrap().iter().map(|a| a["path"].as_str().unwrap().into()).collect();
    assert_eq!(seen, ["lab/bob"]);

    let o = allot(home, &["token", "create", "--role", "manager", "--name", "mia", "--scope", "org", "--json"], &env);
    let created = json(&o);
    assert_eq!((created["name"].as_str(), created["role"].as_str()), (Some("mia"), Some("manager")));

    // Listed, never with their text.
    let o = allot(home, &["token", "list"], &env);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    let table = stdout(&o);
    let rows: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0][..4], ["NAME", "ROLE", "SCOPE/PROJECTS", "CREATED"]);
    let row = |name: &str| rows.iter().find(|r| r[0] == name).unwrap_or_else(|| panic!("{name}: {table}")).clone();
    assert_eq!(row("bob")[1..3], ["researcher", "lab/bob"]);
    assert_eq!(row("mia")[1..3], ["manager", "org"]);
    assert_eq!(row("root")[1..3], ["admin", "-"]);
    assert_eq!(*row("bob").last().unwrap(), "root", "created by");
    assert!(!table.contains(&bob), "no token's text: {table}");
    let listed = json(&allot(home, &["token", "list", "--json"], &env));
    assert_eq!(listed.as_array().unwrap().len(), 3, "{listed}");

    // Revoked: bob's token stops working at once.
    let o = allot(home, &["token", "revoke", "bob"], &env);
    assert_eq!((code(&o), stderr(&o).as_str()), (Some(0), "revoked token \"bob\"\n"));
    let o = allot(home, &["accounts"], &bob_env);
    assert_eq!(code(&o), Some(5), "a revoked token: {}", stderr(&o));

    // The audit log has each change, newest first, and --limit.
    let entries = json(&allot(home, &["audit", "--json"], &env));
    let actions: Vec<(&str, &str)> = entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["action"].as_str().unwrap(), e["target"].as_str().unwrap()))
        .collect();
    assert_eq!(
        actions,
        [("token.revoke", "bob"), ("token.create", "mia"), ("token.create", "bob"), ("token.create", "root")]
    );
    let last = json(&allot(home, &["audit", "--json", "--limit", "1"], &env));
    assert_eq!(last.as_array().unwrap().len(), 1);
    let o = allot(home, &["audit", "--limit", "2"], &env);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert_eq!(text.lines().count(), 3, "a head and two entries: {text}");
    let newest: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(newest[2..6], ["root", "token.revoke", "bob", "-"], "{text}");
}

/// Issue 30, point 10: a drain takes a reason (as Slurm's `scontrol update
/// … reason=`), which `allot nodes` shows, the audit log keeps with the
/// health before and after, and a restart does not forget; the audit log
/// and token list are aligned columns of words, not raw JSON.
#[test]
fn a_drain_has_a_reason_that_is_shown_audited_and_kept() {
    let mut server = Server::start("admin-drain", CONFIG);
    let admin = server.token(&["--role", "admin", "--name", "root"]);
    let home = server.dir.to_path_buf();
    let env: Vec<(&str, String)> = server.env(&admin).iter().map(|(k, v)| (*k, v.to_string())).collect();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();

    let o = allot(&home, &["node", "drain", "a-0", "--reason", "fan noise on GPU 3"], &env);
    assert_eq!((code(&o), stdout(&o).as_str()), (Some(0), "a-0 drained (fan noise on GPU 3)\n"), "{}", stderr(&o));
    let table = |env: &[(&str, &str)]| {
        let o = allot(&home, &["nodes"], env);
        assert_eq!(code(&o), Some(0), "{}", stderr(&o));
        stdout(&o)
    };
    let t = table(&env);
    let head = t.lines().next().unwrap();
    assert!(head.ends_with("REASON"), "{t}");
    let row = t.lines().find(|l| l.starts_with("a-0 ")).unwrap_or_else(|| panic!("{t}"));
    assert!(row.ends_with("fan noise on GPU 3") && row.contains(" drained "), "{t}");
    assert_eq!(row.find("fan"), head.find("REASON"), "the reason is under its head:\n{t}");
    let other = t.lines().find(|l| l.starts_with("a-1 ")).unwrap();
    assert!(other.ends_with(" -"), "a node with no reason shows -: {t}");

    // The audit log: who drained what, health and reason before → after.
    let entries = json(&allot(&home, &["audit", "--json", "--limit", "1"], &env));
    let e = &entries[0];
    assert_eq!(
        (e["action"].as_str(), e["target"].as_str(), e["principal"].as_str()),
        (Some("node.drain"), Some("a-0"), Some("root"))
    );
    let o = allot(&home, &["audit", "--limit", "1"], &env);
    let text = stdout(&o);
    assert!(!text.contains('{'), "words, not JSON: {text}");
    assert!(text.contains("health=up → health=drained reason=fan noise on GPU 3"), "{text}");

    // Kept across a crash and restart; undrain clears it.
    server.restart();
    let t = table(&env);
    assert!(t.lines().any(|l| l.starts_with("a-0 ") && l.ends_with("fan noise on GPU 3")), "after a restart: {t}");
    let o = allot(&home, &["node", "undrain", "a-0"], &env);
    assert_eq!((code(&o), stdout(&o).as_str()), (Some(0), "a-0 up\n"), "{}", stderr(&o));
    assert!(!table(&env).contains("REASON"), "no reason once undrained");

    // A reason that is not one line of text is refused, naming it.
    let o = allot(&home, &["node", "drain", "a-1", "--reason", "two\nlines"], &env);
    assert_eq!(code(&o), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("reason"), "{}", stderr(&o));
    let o = allot(&home, &["node", "drain", "a-1", "--reason", &"x".repeat(300)], &env);
    assert_eq!(code(&o), Some(4), "{}", stderr(&o));
}

#[test]
fn nodes_fail_and_are_repaired() {
    let server = Server::start("admin-nodes", CONFIG);
    let home = &server.dir;
    let admin = server.token(&["--role", "admin", "--name", "root"]);
    let env = server.env(&admin);
    let health = |node: &str| {
        let nodes = json(&allot(home, &["nodes", "--json"], &env));
        let n = nodes.as_array().unwrap().iter().find(|n| n["name"] == node).cloned();
        n.unwrap_or_else(|| panic!("{node}: {nodes}"))["health"].as_str().unwrap().to_string()
    };
    assert_eq!(health("a-0"), "up");
    let o = allot(home, &["node", "fail", "a-0"], &env);
    assert_eq!((code(&o), stdout(&o).as_str()), (Some(0), "a-0 down\n"), "{}", stderr(&o));
    assert_eq!(health("a-0"), "down");
    assert_eq!(health("a-1"), "up");
    let o = allot(home, &["node", "repair", "a-0", "--json"], &env);
    assert_eq!(json(&o)["health"], "up");
    assert_eq!(health("a-0"), "up");
}

/// Every subcommand name of `allot --help`'s list, and of `allot token --help`'s.
fn subcommands(home: &std::path::Path, of: &[&str]) -> Vec<String> {
    let o = allot(home, &[of, &["--help"]].concat(), &[]);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let list = text.split("Commands:\n").nth(1).expect("a Commands section");
    list.lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn completions_parse_and_name_every_command() {
    let home = tmpdir("admin-completions");
    let top = subcommands(&home, &[]);
    for expected in ["submit", "token", "audit", "node", "completions", "man"] {
        assert!(top.iter().any(|c| c == expected), "{expected} in {top:?}");
    }
    let token = subcommands(&home, &["token"]);
    assert_eq!(token, ["list", "create", "revoke"]);
    let node = subcommands(&home, &["node"]);
    assert_eq!(node, ["drain", "undrain", "fail", "repair"]);
    for shell in ["bash", "zsh", "fish"] {
        let o = allot(&home, &["completions", shell], &[]);
        assert_eq!(code(&o), Some(0), "{shell}: {}", stderr(&o));
        let script = stdout(&o);
        for c in top.iter().chain(&token).chain(&node) {
            assert!(script.contains(c.as_str()), "{shell}: {c} missing");
        }
        assert!(script.contains("server") && script.contains("project"), "{shell}: options");
    }
    // bash reads the script without a syntax error.
    let file = home.join("allot.bash");
    std::fs::write(&file, stdout(&allot(&home, &["completions", "bash"], &[]))).unwrap();
    let o = Command::new("bash").arg("-n").arg(&file).output().expect("run bash");
    assert!(o.status.success(), "bash -n: {}", stderr(&o));
    let o = allot(&home, &["completions", "tcsh"], &[]);
    assert_eq!(code(&o), Some(2), "an unknown shell: {}", stderr(&o));
    assert!(stderr(&o).contains("[possible values: bash, zsh, fish]"), "{}", stderr(&o));
}

#[test]
fn man_pages_render_and_name_every_command() {
    let home = tmpdir("admin-man");
    let o = allot(&home, &["man"], &[]);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    let page = stdout(&o);
    assert!(page.contains("\n.TH allot 1 "), "{page}");
    for c in subcommands(&home, &[]) {
        assert!(page.contains(&format!("allot\\-{c}(1)")), "{c} in the SUBCOMMANDS section");
    }
    // A page per command, each of which groff formats without a warning.
    let dir = home.join("man");
    let o = allot(&home, &["man", "--dir", dir.to_str().unwrap()], &[]);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    for page in ["allot.1", "allot-submit.1", "allot-token-create.1", "allot-audit.1", "allot-node-fail.1"] {
        let path = dir.join(page);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.contains(".SH NAME"), "{page}");
        let groff = Command::new("groff").args(["-k", "-man", "-Tutf8", "-ww", "-z"]).arg(&path).output();
        if let Ok(g) = groff {
            assert!(g.status.success() && g.stderr.is_empty(), "groff {page}: {}", String::from_utf8_lossy(&g.stderr));
        }
    }
    let create = std::fs::read_to_string(dir.join("allot-token-create.1")).unwrap();
    assert!(create.contains("straight into this store"), "the options' help: {create}");
}
