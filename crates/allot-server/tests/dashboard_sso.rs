//! Single sign-on end to end in a real browser: headless Chromium (over
//! WebDriver, as in `dashboard_browser.rs`) signs in to a real `allot
//! serve` through a real OpenID Connect provider, `oidc-provider-mock`
//! (started by `.ci/oidc.sh`; its address in `ALLOT_TEST_OIDC_ISSUER`).
//!
//! * A person whose groups claim holds a granted group (`team-a`:
//!   researcher of `org/a`) clicks "Sign in with SSO", is sent to the
//!   provider, comes back signed in as their `preferred_username`, and sees
//!   their project's workloads and nothing of another project's.
//! * A person in no granted group is refused with clear words, gets no
//!   session, and can change nothing.
//! * Both attempts are in the audit log (`how: oidc`).
//!
//! Without `ALLOT_TEST_OIDC_ISSUER`, chromedriver or Chromium the test
//! fails, saying what to run; it never skips.

mod browser;
mod support;

use browser::{Browser, Driver};
use fantoccini::key::Key;
use serde_json::{Value, json};
use support::{Backend, CONFIG, Fixture, Server, free_port, state, submit, token};

const OIDC_HELP: &str = "ALLOT_TEST_OIDC_ISSUER is not set: the single sign-on test needs an OpenID Connect \
    provider. Run `eval \"$(bash .ci/oidc.sh)\"` (installs oidc-provider-mock from PyPI into a private venv and \
    starts it on a free loopback port; `bash .ci/oidc.sh stop` stops it), or run the whole suite with .ci/test";

/// The provider's issuer URL.
fn issuer() -> String {
    std::env::var("ALLOT_TEST_OIDC_ISSUER").ok().filter(|s| !s.is_empty()).expect(OIDC_HELP)
}

/// Sets the claims the provider gives the person whose subject is `sub`.
async fn set_claims(issuer: &str, sub: &str, claims: Value) {
    let r = reqwest::Client::new()
        .put(format!("{issuer}/users/{sub}"))
        .json(&claims)
        .send()
        .await
        .unwrap_or_else(|e| panic!("the provider at {issuer} does not answer: {e}\n{OIDC_HELP}"));
    assert_eq!(r.status().as_u16(), 204, "setting {sub}'s claims: {:?}", r.text().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_sign_in_with_single_sign_on() {
    let issuer = issuer();
    let f = Fixture::new(Backend::Sqlite, "dashboard-sso").await;
    let driver = Driver::start(&f.dir.join("browser"));
    let port = free_port();
    let config = format!(
        "{CONFIG}\n[identity.oidc]\nissuer = \"{issuer}\"\nclient_id = \"allot-test\"\n\
         redirect_url = \"http://127.0.0.1:{port}/login/oidc/callback\"\n\
         [[grants]]\ngroup = \"team-a\"\nrole = \"researcher\"\naccounts = [\"org/a\"]\n"
    );
    std::fs::write(f.dir.join("cluster.toml"), config).expect("write the config");
    let secret = [("ALLOT_OIDC_CLIENT_SECRET", "not-a-real-secret")];
    let s = Server::start_at(&f.dir, &f.db.url, port, &[], &secret);
    set_claims(&issuer, "ada-sso", json!({"preferred_username": "ada", "groups": ["staff", "team-a"]})).await;
    set_claims(&issuer, "eve-sso", json!({"preferred_username": "eve", "groups": ["staff"]})).await;

    // Work of two projects, submitted with tokens.
    let a = token(&f.db.url, "researcher", "bot-a", &["--project", "org/a"]);
    let b_tok = token(&f.db.url, "researcher", "bot-b", &["--project", "org/b"]);
    let mine = submit(&s, &a, &["--name", "train-a", "--account", "org/a", "--gpus", "1", "--", "sleep", "600"]);
    let other = submit(&s, &b_tok, &["--name", "train-b", "--account", "org/b", "--gpus", "1", "--", "sleep", "600"]);
    s.wait_for(&f.admin, &mine, 20, |v| state(v) == "running").await;

    let mut b = driver.browser(&s.url, None).await;
    for t in [&f.admin, &a, &b_tok] {
        b.never_show(t);
    }
    a_granted_person_signs_in(&b, &mine, &other).await;
    // From a laptop: a command-line session acting as ada, with her grants.
    let cli = a_person_makes_a_command_line_session(&b).await;
    let (code, v) = s.http("GET", "/v1/accounts", Some(&cli), None).await;
    assert_eq!(code, 200, "{v}");
    let paths: Vec<&str> = v.as_array().expect("accounts").iter().filter_map(|a| a["path"].as_str()).collect();
    assert!(paths.contains(&"org/a") && !paths.contains(&"org/b"), "ada's grants: {paths:?}");
    let (code, v) = s.http("GET", "/v1/sessions", Some(&cli), None).await;
    assert_eq!(code, 200, "{v}");
    let listed = v.as_array().expect("sessions");
    assert!(listed.iter().any(|x| x["method"] == "dashboard" && x["unix_user"] == "ada"), "listed as hers: {v}");
    b.client.delete_all_cookies().await.expect("clear cookies");
    a_person_in_no_granted_group_is_refused(&b, &mine).await;

    let (code, v) = s.http("GET", &format!("/v1/workloads/{mine}"), Some(&f.admin), None).await;
    assert_eq!((code, state(&v)), (200, "running"), "the refused person changed nothing: {v}");
    the_attempts_are_audited(&s, &f.admin).await;

    b.close().await;
    drop(driver);
    drop(s);
    f.finish().await;
}

/// "Sign in with SSO" on `/login`, the provider's form (the subject typed,
/// Enter), back on the dashboard.
async fn through_the_provider(b: &Browser, sub: &str) {
    b.visit("/login?next=/%3Fwho%3Dall").await;
    assert_eq!(b.text("h1").await, "Sign in to Allot");
    assert!(b.find("input#token").await.attr("type").await.expect("type").is_some(), "pasting a token stays");
    b.find("a#sso").await.click().await.expect("follow Sign in with SSO");
    let field = b.wait_for("input[name=sub]", 10).await;
    let provider = b.client.current_url().await.expect("url");
    assert!(provider.as_str().starts_with(&issuer()), "at the provider: {provider}");
    for p in ["code_challenge=", "code_challenge_method=S256", "nonce=", "state=", "scope=openid"] {
        assert!(provider.as_str().contains(p), "the authorization request has no {p}: {provider}");
    }
    field.send_keys(&format!("{sub}{}", char::from(Key::Enter))).await.expect("authorize at the provider");
}

/// The granted person lands on the page they asked for, signed in as their
/// Unix user name with the role their group gives, with a session cookie,
/// and sees their project's workload and not the other project's.
async fn a_granted_person_signs_in(b: &Browser, mine: &str, other: &str) {
    through_the_provider(b, "ada-sso").await;
    b.until("signed in on Work", 15, async || (b.here().await == "/?who=all").then_some(())).await;
    let who = b.text("header .who").await;
    assert!(who.starts_with("ada · researcher"), "{who}");
    let c = b.client.get_all_cookies().await.expect("cookies");
    let session = c.iter().find(|c| c.name() == "allot_session").expect("a session cookie");
    assert_eq!(session.http_only(), Some(true), "{session:?}");
    assert!(!c.iter().any(|c| c.name() == "allot_oidc"), "the pending sign-in's cookie is gone: {c:?}");
    b.wait_for(&format!("main a[href=\"/workloads/{mine}\"]"), 10).await;
    let list = b.main_text().await;
    assert!(list.contains("train-a"), "their project's workload is listed:\n{list}");
    assert!(!list.contains("train-b") && !list.contains("org/b"), "another project's shows:\n{list}");
    assert_eq!(b.fetch_status(&format!("/workloads/{other}")).await, 404, "another project's workload");
    assert_eq!(b.fetch_status(&format!("/workloads/{mine}")).await, 200, "their project's workload");
    b.assert_no_secret().await;
}

/// Issue 29, from a laptop: the signed-in person makes a command-line
/// session at `/cli`; its token is shown once, with the server's address.
async fn a_person_makes_a_command_line_session(b: &Browser) -> String {
    b.visit("/cli").await;
    b.find("main form[action=\"/cli\"] button").await.click().await.expect("make a session");
    let text = b.wait_for("pre.token", 10).await.text().await.expect("the token's text");
    assert!(text.contains("export ALLOT_SERVER=http://127.0.0.1:"), "{text}");
    let token = text.lines().find_map(|l| l.strip_prefix("export ALLOT_TOKEN=")).expect("an ALLOT_TOKEN line");
    assert!(token.starts_with("allot_s_"), "{text}");
    token.to_string()
}

/// The person in no granted group: a 403 page that says why, no session,
/// every page sends them to sign in, and a change is refused.
async fn a_person_in_no_granted_group_is_refused(b: &Browser, mine: &str) {
    through_the_provider(b, "eve-sso").await;
    let alert = b.wait_for("main [role=alert]", 15).await.text().await.expect("text");
    assert!(
        alert.contains("eve is signed in at the identity provider")
            && alert.contains("(staff)")
            && alert.contains("[[grants]]"),
        "{alert}"
    );
    assert_eq!(b.text("main h1").await, "Not signed in");
    let c = b.client.get_all_cookies().await.expect("cookies");
    assert!(!c.iter().any(|c| c.name() == "allot_session"), "no session for a refused person: {c:?}");
    b.visit("/").await;
    b.until("sent to sign in", 10, async || b.here().await.starts_with("/login").then_some(())).await;
    let js = "const done = arguments[arguments.length - 1];
              fetch(arguments[0], { method: 'POST', credentials: 'same-origin',
                                     headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
                                     body: 'csrf=x', redirect: 'manual' })
                .then((r) => done(r.status), (e) => done(String(e)));";
    let status = b.client.execute_async(js, vec![json!(format!("/workloads/{mine}/cancel"))]).await.expect("post");
    assert!(matches!(status.as_u64(), Some(401 | 403)), "a cancel without a session: {status}");
}

/// One `signin` entry per callback: ada's signed in, eve's refused.
async fn the_attempts_are_audited(s: &Server, admin: &str) {
    let (code, v) = s.http("GET", "/v1/audit", Some(admin), None).await;
    assert_eq!(code, 200, "{v}");
    let signins: Vec<&Value> = v
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["action"] == "signin" && e["after"]["how"] == "oidc")
        .collect();
    let of = |who: &str| signins.iter().find(|e| e["principal"] == who).unwrap_or_else(|| panic!("no {who}: {v}"));
    assert_eq!(of("ada")["after"]["refused"], Value::Null, "{v}");
    assert!(of("eve")["after"]["refused"].as_str().is_some_and(|r| r.contains("granted")), "{v}");
}
