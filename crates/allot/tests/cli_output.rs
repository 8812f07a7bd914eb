//! What the command line prints of what users wrote: on a terminal the
//! text tables and `allot show` escape control characters (a workload's
//! command or working directory cannot clear the screen or set the
//! window title of whoever lists it); `--json` is the API's text exactly.

mod cli_support;

use cli_support::{CONFIG, Server, allot, code, stderr, stdout};

/// The OSC "set title" and "clear screen" sequences.
const EVIL: &str = "\x1b]0;pwned\x07\x1b[2J";

#[test]
fn user_text_is_escaped_in_text_and_exact_in_json() {
    let server = Server::start("output-escapes", CONFIG);
    let admin = server.token(&["--role", "admin", "--name", "root"]);
    let env = server.env(&admin);
    let workdir = format!("/tmp/{EVIL}");
    let o = allot(
        &server.dir,
        &["submit", "--account", "org/x", "--gpus", "1", "--chdir", &workdir, "--", "echo", EVIL],
        &env,
    );
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    let id = stdout(&o).trim().to_string();
    for args in [vec!["show", id.as_str()], vec!["queue"], vec!["queue", "--format", "id,name,reason"]] {
        let o = allot(&server.dir, &args, &env);
        assert_eq!(code(&o), Some(0), "{args:?}: {}", stderr(&o));
        let bad: Vec<u8> = o.stdout.iter().copied().filter(|b| b.is_ascii_control() && *b != b'\n').collect();
        assert!(bad.is_empty(), "{args:?} printed control bytes {bad:?}: {:?}", stdout(&o));
        if args[0] == "show" {
            let text = stdout(&o);
            assert!(text.contains(r"echo \e]0;pwned\a\e[2J"), "{text}");
            assert!(text.contains(r"workdir    /tmp/\e]0;pwned\a\e[2J"), "{text}");
        }
    }
    let o = allot(&server.dir, &["show", &id, "--json"], &env);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["workload"]["command"][1], EVIL, "--json is exact");
    assert_eq!(v["workload"]["workdir"], workdir.as_str());
}
