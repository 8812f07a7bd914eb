//! A headless Chromium driven over WebDriver, for the dashboard's
//! end-to-end tests.
//!
//! The test starts `chromedriver` itself, as its own child on a free
//! loopback port and in a process group of its own (so that the Chromium it
//! launches is in that group too), and stops it by that PID when the
//! [`Driver`] is dropped, also when the test panics: nothing is ever
//! killed by name. Chromium gets a fresh profile in the test's own
//! directory. A missing chromedriver or Chromium fails the test with how
//! to install them; it never skips.

#![allow(dead_code, reason = "each browser test uses a part of the browser module")]

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::elements::Element;
use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

/// How to get what the browser tests need.
pub const INSTALL: &str = "install Debian's chromium and chromium-driver with `sudo bash .ci/chromium.sh` \
    (the README's test command, .ci/test, runs it), or set ALLOT_CHROMEDRIVER and ALLOT_CHROMIUM to a chromedriver \
    and a Chromium of the same version";

/// The window every page is seen (and photographed) in: a laptop's.
pub const WINDOW: (u32, u32) = (1400, 1000);

/// The tallest full-page screenshot (longer pages are cut there).
const MAX_SHOT_HEIGHT: u32 = 2000;

fn executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `$var` when set (it must name an executable), else the first of `names`
/// on `PATH`, else the first of `fallbacks` that exists.
fn find_program(what: &str, var: &str, names: &[&str], fallbacks: &[&str]) -> PathBuf {
    if let Some(p) = std::env::var_os(var).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(executable(&p), "{var}={} is not an executable file: {INSTALL}", p.display());
        return p;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let on_path = names.iter().flat_map(|n| std::env::split_paths(&path).map(move |d| d.join(n)));
    let fixed = fallbacks.iter().map(PathBuf::from);
    on_path.chain(fixed).find(|p| executable(p)).unwrap_or_else(|| {
        panic!(
            "the dashboard's browser tests need {what}, and found none (${var} is unset, no {} on PATH, none of {}): \
             {INSTALL}",
            names.join(" or "),
            fallbacks.join(", ")
        )
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// A running chromedriver, this test's child; dropped: killed with the
/// browsers it started (its process group), and its profile removed.
pub struct Driver {
    child: Option<Child>,
    pub url: String,
    chromium: PathBuf,
    dir: PathBuf,
}

impl Driver {
    /// Starts chromedriver with its log and the browser's profile in `dir`
    /// (created), and waits until it answers.
    pub fn start(dir: &Path) -> Driver {
        let driver = find_program(
            "chromedriver",
            "ALLOT_CHROMEDRIVER",
            &["chromedriver"],
            &["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"],
        );
        let chromium = find_program("Chromium", "ALLOT_CHROMIUM", &["chromium"], &["/usr/bin/chromium"]);
        std::fs::create_dir_all(dir).expect("the browser's directory");
        let log = std::fs::File::create(dir.join("chromedriver.log")).expect("chromedriver's log");
        let port = free_port();
        let child = Command::new(&driver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}: {INSTALL}", driver.display()));
        let mut d = Driver { child: Some(child), url: format!("http://127.0.0.1:{port}"), chromium, dir: dir.into() };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = d.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("{} exited with {status}:\n{}\n{INSTALL}", driver.display(), d.log());
            }
            assert!(Instant::now() < deadline, "{} did not listen within 20 s:\n{}", driver.display(), d.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        d
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("chromedriver.log")).unwrap_or_default()
    }

    /// A new headless Chromium session on `base` (the server's URL), with
    /// a fresh profile; screenshots go to `shots` when given.
    pub async fn browser(&self, base: &str, shots: Option<PathBuf>) -> Browser {
        let profile = self.dir.join("profile");
        let _ = std::fs::remove_dir_all(&profile);
        std::fs::create_dir_all(&profile).expect("the browser's profile");
        let mut caps = serde_json::Map::new();
        caps.insert("browserName".into(), json!("chrome"));
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": self.chromium,
                "args": [
                    "--headless",
                    "--no-sandbox",
                    "--disable-background-networking",
                    "--disable-gpu",
                    format!("--window-size={},{}", WINDOW.0, WINDOW.1),
                    format!("--user-data-dir={}", profile.display()),
                ],
            }),
        );
        let client =
            ClientBuilder::new(HttpConnector::new()).capabilities(caps).connect(&self.url).await.unwrap_or_else(|e| {
                panic!(
                    "chromedriver could not start {}: {e}\n--- chromedriver log ---\n{}\n{INSTALL}",
                    self.chromium.display(),
                    self.log()
                )
            });
        if let Some(d) = &shots {
            std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("cannot create {}: {e}", d.display()));
        }
        Browser { client, base: base.trim_end_matches('/').to_string(), shots, secrets: Vec::new() }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let pid = c.id() as libc::pid_t;
            // The group chromedriver leads: itself and the browsers it
            // launched (after `Browser::close`, normally none).
            // SAFETY: kill(2) with a negative PID signals that process
            // group only; it is this test's child's own group.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(self.dir.join("profile"));
    }
}

/// One browser session against the server at `base`.
pub struct Browser {
    pub client: Client,
    pub base: String,
    shots: Option<PathBuf>,
    /// Strings no page or URL may ever contain (the API tokens).
    secrets: Vec<String>,
}

impl Browser {
    /// Adds a string that no page source or URL may contain.
    pub fn never_show(&mut self, secret: &str) {
        self.secrets.push(secret.to_string());
    }

    /// Ends the session (chromedriver closes the browser).
    pub async fn close(self) {
        let _ = self.client.close().await;
    }

    /// Opens `path` of the server, then checks that no secret shows.
    pub async fn visit(&self, path: &str) {
        self.client.goto(&format!("{}{path}", self.base)).await.unwrap_or_else(|e| panic!("open {path}: {e}"));
        self.assert_no_secret().await;
    }

    /// The current URL's path, with its query if any.
    pub async fn here(&self) -> String {
        let u = self.client.current_url().await.expect("current URL");
        match u.query() {
            Some(q) => format!("{}?{q}", u.path()),
            None => u.path().to_string(),
        }
    }

    /// No secret in the page's source or URL.
    pub async fn assert_no_secret(&self) {
        let url = self.client.current_url().await.expect("current URL").to_string();
        let source = self.client.source().await.expect("page source");
        for s in &self.secrets {
            assert!(!url.contains(s.as_str()), "a token is in the URL {url}");
            assert!(!source.contains(s.as_str()), "a token is in the page at {url}:\n{source}");
        }
    }

    /// The first element matching `css`, waited for up to `secs`.
    pub async fn wait_for(&self, css: &str, secs: u64) -> Element {
        match self
            .client
            .wait()
            .at_most(Duration::from_secs(secs))
            .every(Duration::from_millis(100))
            .for_element(Locator::Css(css))
            .await
        {
            Ok(e) => e,
            Err(e) => panic!("no {css} within {secs} s at {}: {e}\n{}", self.here().await, self.main_text().await),
        }
    }

    pub async fn find(&self, css: &str) -> Element {
        match self.client.find(Locator::Css(css)).await {
            Ok(e) => e,
            Err(e) => panic!("no {css} at {}: {e}\n{}", self.here().await, self.main_text().await),
        }
    }

    /// The visible text of the first `css`. The pages refresh `<main>` in
    /// place, which may replace the element between finding it and reading
    /// it (a stale element) or just as it is looked for: both are tried
    /// again for up to 3 s before the test fails.
    pub async fn text(&self, css: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let read = match self.client.find(Locator::Css(css)).await {
                Ok(e) => e.text().await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match read {
                Ok(t) => return t,
                Err(e) if Instant::now() >= deadline => {
                    panic!("no text of {css} at {}: {e}\n{}", self.here().await, self.main_text().await)
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// `<main>`'s visible text ("" when there is none).
    pub async fn main_text(&self) -> String {
        match self.client.find(Locator::Css("main")).await {
            Ok(m) => m.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page.
    pub async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.client.execute(script, args).await.unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// The status of a same-origin `GET path` sent by the page, with its
    /// cookies (as the page's own script would send it).
    pub async fn fetch_status(&self, path: &str) -> u16 {
        let js = "const done = arguments[arguments.length - 1];
                  fetch(arguments[0], { credentials: 'same-origin', cache: 'no-store' })
                    .then((r) => done(r.status), (e) => done(String(e)));";
        let v = self.client.execute_async(js, vec![json!(path)]).await.expect("fetch in the page");
        v.as_u64().unwrap_or_else(|| panic!("fetch {path} failed in the page: {v}")) as u16
    }

    /// Presses and releases `key` where the focus is.
    pub async fn press(&self, key: Key) {
        let c: char = key.into();
        let keys =
            KeyActions::new("keyboard".into()).then(KeyAction::Down { value: c }).then(KeyAction::Up { value: c });
        self.client.perform_actions(keys).await.expect("key press");
    }

    /// Polls `probe` every 200 ms until it answers `Some`, for up to
    /// `secs`; panics naming `what` (and the page's text) after that.
    pub async fn until<T>(&self, what: &str, secs: u64, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(v) = probe().await {
                return v;
            }
            if Instant::now() >= deadline {
                panic!("{what}: not within {secs} s at {}:\n{}", self.here().await, self.main_text().await);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// With screenshots on: the whole page (up to [`MAX_SHOT_HEIGHT`]) as
    /// `<dir>/<name>.png`, at the window's width.
    pub async fn shot(&self, name: &str) {
        let Some(dir) = &self.shots else { return };
        // The window's outer size is the page's viewport plus the browser's
        // own frame (headless too): grow it by the part of the page below
        // the fold, shoot, then back to the laptop's size.
        // From the top of the page (a link to an anchor scrolls it).
        let js = "window.scrollTo(0, 0);
                  return [document.documentElement.scrollHeight, window.outerHeight - window.innerHeight];";
        let v = self.js(js, vec![]).await;
        let (page, frame) = (v[0].as_u64().unwrap_or(0) as u32, v[1].as_u64().unwrap_or(0) as u32);
        let height = (page + frame).clamp(WINDOW.1, MAX_SHOT_HEIGHT);
        self.client.set_window_size(WINDOW.0, height).await.expect("resize for the screenshot");
        let png = self.client.screenshot().await.expect("screenshot");
        self.client.set_window_size(WINDOW.0, WINDOW.1).await.expect("resize back");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        eprintln!("screenshot {}", path.display());
    }
}
