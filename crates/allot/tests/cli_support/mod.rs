//! Support for the command line's tests: the built `allot` with its client
//! setup isolated (its own HOME, no ALLOT_SERVER, ALLOT_TOKEN or
//! ALLOT_CLIENT_CONFIG unless a test gives them), and a live `allot serve`
//! of a test's own on a free port, stopped by its own handle.

#![allow(dead_code, reason = "each test crate uses a part of the support module")]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// One pool of two 8-GPU nodes (`a-0`, `a-1`); `lab/alice`, `lab/bob`,
/// `org/x` and twelve `org/team…` accounts: more than an error lists in
/// full.
pub const CONFIG: &str = r#"
accounts = [
  { path = "org/x" }, { path = "lab/alice" }, { path = "lab/bob" },
  { path = "org/team01" }, { path = "org/team02" }, { path = "org/team03" }, { path = "org/team04" },
  { path = "org/team05" }, { path = "org/team06" }, { path = "org/team07" }, { path = "org/team08" },
  { path = "org/team09" }, { path = "org/team10" }, { path = "org/team11" }, { path = "org/team12" },
]

[cluster]
pools = [{ name = "a", gpu = "H100", nodes = 2, gpus_per_node = 8 }]
"#;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A fresh directory of a test's own (`allot-cli-<name>-…` in the temp
/// directory): removed when dropped, kept and named on stderr when the
/// test panics (what it held is what went wrong).
pub struct TestDir(Option<tempfile::TempDir>);

pub fn tmpdir(name: &str) -> TestDir {
    let d = tempfile::Builder::new().prefix(&format!("allot-cli-{name}-")).tempdir().expect("temp dir");
    TestDir(Some(d))
}

impl std::ops::Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.as_ref().expect("not dropped").path()
    }
}

impl AsRef<Path> for TestDir {
    fn as_ref(&self) -> &Path {
        self
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(d) = self.0.take()
        {
            eprintln!("kept for a look: {}", d.keep().display());
        }
    }
}

/// `allot` with `args` in the repository, HOME at `home`, the client's
/// variables cleared, then `env` set.
pub fn allot(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_allot"));
    c.args(args)
        .current_dir(repo())
        .env("HOME", home)
        .env_remove("ALLOT_SERVER")
        .env_remove("ALLOT_TOKEN")
        .env_remove("ALLOT_CLIENT_CONFIG");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run allot")
}

/// `allot` with `args` and, if given, `ALLOT_TOKEN`.
pub fn allot_in(home: &Path, args: &[&str], token: Option<&str>) -> Output {
    match token {
        Some(t) => allot(home, args, &[("ALLOT_TOKEN", t)]),
        None => allot(home, args, &[]),
    }
}

pub fn code(o: &Output) -> Option<i32> {
    o.status.code()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A port nothing listens on (as the kernel just gave it out).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// `allot serve --executor none` of `dir/c.toml` on `db`, at `port`.
pub fn spawn_serve(dir: &Path, db: &str, port: u16) -> Child {
    Command::new(env!("CARGO_BIN_EXE_allot"))
        .args(["serve", "--single-user", "--executor", "none", "--db", db, "--listen", &format!("127.0.0.1:{port}")])
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

/// A live server of [`CONFIG`] (or another config) in a directory of its
/// own, killed by its own handle when dropped.
pub struct Server {
    child: Child,
    pub dir: TestDir,
    pub db: String,
    pub port: u16,
    pub url: String,
}

impl Server {
    pub fn start(name: &str, config: &str) -> Server {
        let dir = tmpdir(name);
        std::fs::write(dir.join("c.toml"), config).expect("write the config");
        let db = format!("sqlite://{}", dir.join("allot.db").display());
        let port = free_port();
        let mut child = spawn_serve(&dir, &db, port);
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = child.try_wait().expect("the server's status") {
                let out = child.wait_with_output().expect("the server's output");
                panic!("allot serve exited ({status}): {}", String::from_utf8_lossy(&out.stderr));
            }
            assert!(Instant::now() < deadline, "allot serve did not listen within 60 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        Server { child, url: format!("http://127.0.0.1:{port}"), dir, db, port }
    }

    /// Kills the server (SIGKILL, as a crash) and starts it again on the
    /// same store, data directory and port.
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn_serve(&self.dir, &self.db, self.port);
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(self.child.try_wait().expect("the server's status").is_none(), "allot serve exited on restart");
            assert!(Instant::now() < deadline, "allot serve did not listen again within 60 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server as an operator does (SIGTERM to its PID) and
    /// returns what it wrote on stderr.
    pub fn stop(mut self) -> String {
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid");
        // SAFETY: kill(2) on the PID of a child this handle still owns (not
        // yet waited for, so not reused).
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0, "SIGTERM to allot serve");
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().expect("the server's status").is_none() {
            assert!(Instant::now() < deadline, "allot serve still runs 30 s after SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            std::io::Read::read_to_string(&mut e, &mut err).expect("the server's stderr");
        }
        err
    }

    /// The environment of a client of this server with `token`.
    pub fn env<'a>(&'a self, token: &'a str) -> [(&'static str, &'a str); 2] {
        [("ALLOT_SERVER", self.url.as_str()), ("ALLOT_TOKEN", token)]
    }

    /// A token made straight in the store (`allot token create --db`).
    pub fn token(&self, extra: &[&str]) -> String {
        let o = allot(&self.dir, &[&["token", "create", "--db", &self.db][..], extra].concat(), &[]);
        assert_eq!(code(&o), Some(0), "token create: {}", stderr(&o));
        stdout(&o).trim().to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
