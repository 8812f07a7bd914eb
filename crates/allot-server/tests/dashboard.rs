//! The dashboard's sign-in, session, CSRF and authorisation over plain
//! HTTP against a real `allot serve` (the browser tests drive the same
//! pages in Chromium): the cookie's attributes, no token in any page,
//! revocation and sign-out end a session, a change without the session's
//! CSRF token or from another origin is refused with nothing changed, a
//! researcher neither sees nor reaches another project's workloads, the
//! log endpoint (and `allot logs [--follow]`) follows an attempt, lists page, and unknown paths answer
//! HTML (pages) or JSON (`/v1`).

mod support;

use std::time::Duration;

use support::{Backend, Browser, Fixture, Server, page_client, page_request, script, submit, token};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_cookies_and_csrf() {
    let fx = Fixture::new(Backend::Sqlite, "dash-session").await;
    let s = Server::start(&fx.dir, &fx.db.url);
    let c = page_client();

    // Nothing is visible signed out: pages send to sign-in, keeping where.
    let a = page_request(&c, "GET", &format!("{}/", s.url), None, None, &[]).await;
    assert_eq!((a.status, a.location.as_deref()), (303, Some("/login")));
    let a = page_request(&c, "GET", &format!("{}/workloads/1", s.url), None, None, &[]).await;
    assert_eq!((a.status, a.location.as_deref()), (303, Some("/login?next=/workloads/1")));
    let a = page_request(&c, "GET", &format!("{}/", s.url), None, None, &[("x-allot-partial", "1")]).await;
    assert_eq!(a.status, 401, "an in-place refresh of a signed-out page: 401, the script reloads");

    // A wrong token: 401, no cookie; a metrics token may not sign in.
    let a = page_request(&c, "POST", &format!("{}/login", s.url), None, Some(&[("token", "allot_nope")]), &[]).await;
    assert_eq!(a.status, 401);
    assert!(a.set_cookies.is_empty() && a.body.contains("Unknown or revoked token"), "{a:?}");
    let scrape = token(&fx.db.url, "metrics", "scrape", &[]);
    let a = page_request(&c, "POST", &format!("{}/login", s.url), None, Some(&[("token", &scrape)]), &[]).await;
    assert_eq!(a.status, 403, "{a:?}");
    assert!(a.set_cookies.is_empty());

    // The cookie: HttpOnly, SameSite=Strict, expiring; Secure behind TLS only.
    let form = [("token", fx.admin.as_str()), ("next", "/workloads/7")];
    let a = page_request(&c, "POST", &format!("{}/login", s.url), None, Some(&form), &[]).await;
    assert_eq!((a.status, a.location.as_deref()), (303, Some("/workloads/7")), "back to where sign-in was asked");
    let set = &a.set_cookies[0];
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
        assert!(set.contains(attr), "{attr} in {set}");
    }
    assert!(!set.contains("Secure"), "plain HTTP: {set}");
    assert!(!set.contains(&fx.admin), "the cookie is not the token");
    let tls = [("x-forwarded-proto", "https")];
    let a = page_request(&c, "POST", &format!("{}/login", s.url), None, Some(&form), &tls).await;
    assert!(a.set_cookies[0].contains("; Secure"), "{:?}", a.set_cookies);
    let evil = [("token", fx.admin.as_str()), ("next", "//evil.example/")];
    let a = page_request(&c, "POST", &format!("{}/login", s.url), None, Some(&evil), &[]).await;
    assert_eq!(a.location.as_deref(), Some("/"), "never sent elsewhere after sign-in");

    let b = Browser::sign_in(&s, &fx.admin).await;
    let home = b.get("/").await;
    assert!(!home.body.contains(&fx.admin), "the token appears in no page");
    let csp = home.headers.get("content-security-policy").and_then(|v| v.to_str().ok()).unwrap_or("");
    assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'self'"), "{csp}");
    assert_eq!(home.headers.get("x-frame-options").and_then(|v| v.to_str().ok()), Some("DENY"));
    let part =
        page_request(&c, "GET", &format!("{}/", s.url), Some(&b.cookie), None, &[("x-allot-partial", "1")]).await;
    assert!(part.status == 200 && !part.body.contains("<html") && part.body.contains("<h1>"), "{part:?}");

    // Sign-out without the CSRF token, or from another origin: refused, still signed in.
    let a = b.post_raw("/logout", &[("csrf", "forged")], &[]).await;
    assert_eq!(a.status, 403);
    let a = b.post_raw("/logout", &[("csrf", &b.csrf)], &[("origin", "http://evil.example")]).await;
    assert_eq!(a.status, 403);
    let a = b.post_raw("/logout", &[("csrf", &b.csrf)], &[("sec-fetch-site", "cross-site")]).await;
    assert_eq!(a.status, 403);
    assert_eq!(b.get("/").await.status, 200, "still signed in");
    let a = b.post("/logout", &[]).await;
    assert_eq!((a.status, a.location.as_deref()), (303, Some("/login")));
    assert!(a.set_cookies.iter().any(|c| c.starts_with("allot_session=;") && c.contains("Max-Age=0")));
    assert_eq!(b.get("/").await.status, 303, "the session is gone from the store");

    // Revoking the token ends its sessions at once.
    let res = token(&fx.db.url, "researcher", "res", &["--project", "org/a"]);
    let rb = Browser::sign_in(&s, &res).await;
    let (st, _) = s.http("DELETE", "/v1/tokens/res", Some(&fx.admin), None).await;
    assert_eq!(st, 204);
    assert_eq!(rb.get("/").await.status, 303, "a revoked token's session ends");

    // Unknown paths: an HTML page outside /v1, the API's JSON inside.
    let a = b.get("/no/such/page").await;
    assert_eq!(a.status, 404);
    let a = page_request(&c, "GET", &format!("{}/no/such/page", s.url), None, None, &[]).await;
    assert!(a.status == 404 && a.body.contains("No such page"), "{a:?}");
    let (st, v) = s.http("GET", "/v1/nope", Some(&fx.admin), None).await;
    assert!(st == 404 && v["error"].as_str().is_some_and(|e| e.contains("no such endpoint")), "{v}");
    drop(s);
    fx.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_researcher_sees_and_reaches_only_its_projects() {
    let fx = Fixture::new(Backend::Sqlite, "dash-isolation").await;
    let s = Server::start(&fx.dir, &fx.db.url);
    let alice = token(&fx.db.url, "researcher", "alice", &["--project", "org/a"]);
    let bob = token(&fx.db.url, "researcher", "bob", &["--project", "org/b"]);
    let hers = submit(&s, &alice, &["--account", "org/a", "--gpus", "1", "--name", "alices-job", "--", "sleep", "30"]);
    let his = submit(&s, &bob, &["--account", "org/b", "--gpus", "1", "--name", "bobs-job", "--", "sleep", "30"]);
    s.wait_for(&fx.admin, &his, 20, |v| support::state(v) == "running").await;

    let a = Browser::sign_in(&s, &alice).await;
    let mine = a.get("/").await;
    assert!(mine.body.contains("alices-job") && !mine.body.contains("bobs-job"), "{}", mine.body);
    let all = a.get("/?who=all").await;
    assert!(!all.body.contains("bobs-job") && !all.body.contains("org/b"), "everything she may see: not org/b");
    // By URL: the same answer as a workload that does not exist.
    let his_page = a.get(&format!("/workloads/{his}")).await;
    let none_page = a.get("/workloads/999999").await;
    assert_eq!((his_page.status, none_page.status), (404, 404));
    assert!(!his_page.body.contains("bobs-job") && !his_page.body.contains("org/b"));
    assert_eq!(a.get(&format!("/workloads/{his}/log")).await.status, 404);
    // Cancelling his workload with her valid session: refused, nothing changed.
    let c = a.post(&format!("/workloads/{his}/cancel"), &[]).await;
    assert_eq!(c.status, 303, "refused by the API, told on the page: {c:?}");
    let told = a.get(&format!("/workloads/{his}")).await;
    assert_eq!(told.status, 404, "the page after it: still not found");
    assert!(told.body.contains("Not done: no workload"), "the refusal is shown: {}", told.body);
    let v = s.wait_for(&fx.admin, &his, 5, |_| true).await;
    assert_eq!((support::state(&v), &v["workload"]["cancel_requested"]), ("running", &serde_json::Value::Bool(false)));
    // Her own: cancelled from the page.
    let c = a.post(&format!("/workloads/{hers}/cancel"), &[]).await;
    assert_eq!((c.status, c.location.clone()), (303, Some(format!("/workloads/{hers}"))));
    let flash = a.get(&format!("/workloads/{hers}")).await;
    assert!(flash.body.contains(&format!("workload {hers} is cancelled")), "{}", flash.body);
    s.wait_for(&fx.admin, &hers, 20, |v| support::state(v) == "cancelled").await;
    drop(s);
    fx.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_an_attempt_and_lists_page() {
    let fx = Fixture::new(Backend::Sqlite, "dash-logs").await;
    let s = Server::start(&fx.dir, &fx.db.url);
    let talk = script(&fx.dir, "talk.sh", "#!/bin/sh\necho first\nsleep 2\necho second\n");
    let id = submit(&s, &fx.admin, &["--account", "org/a", "--gpus", "1", "--", &talk]);
    // Follow from offset 0 until done: exactly the log, in order.
    let c = page_client();
    let mut text = String::new();
    let mut offset = 0u64;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let url = format!("{}/v1/workloads/{id}/log?offset={offset}", s.url);
        let a = page_request(&c, "GET", &url, None, None, &[("authorization", &format!("Bearer {}", fx.admin))]).await;
        if a.status == 200 {
            text.push_str(&a.body);
            offset = a.headers["x-log-offset"].to_str().unwrap().parse().unwrap();
            if a.headers.contains_key("x-log-done") {
                break;
            }
        } else {
            assert_eq!(a.status, 404, "not started yet: {a:?}");
        }
        assert!(std::time::Instant::now() < deadline, "the log did not end: {text:?}\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(text.contains("first\n") && text.contains("second\n"), "{text:?}");
    assert_eq!(offset as usize, text.len());
    // The CLI reads the same: all of it, and following a new one to its end.
    assert_eq!(s.cli_ok(&fx.admin, &["logs", &id]), text);
    let again = submit(&s, &fx.admin, &["--account", "org/a", "--gpus", "1", "--", &talk]);
    let followed = s.cli_ok(&fx.admin, &["logs", &again, "--follow"]);
    assert!(followed.contains("first\n") && followed.ends_with("second\n"), "{followed:?}");
    let out = s.cli(&fx.admin, &["logs", &again, "--attempt", "3"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("has no attempt 3"));
    let (st, v) = s.http("GET", &format!("/v1/workloads/{id}/log?attempt=9"), Some(&fx.admin), None).await;
    assert!(st == 404 && v["error"].as_str().unwrap().contains("has no attempt 9"), "{v}");
    let (st, v) = s.http("GET", &format!("/v1/workloads/{id}/log?limit=0"), Some(&fx.admin), None).await;
    assert!(st == 400 && v["field"] == "limit", "{v}");

    // 60 more workloads: the list shows 50 and an "Older" page with the rest.
    for i in 0..60 {
        let body = format!(r#"{{"account":"org/b","gpus":1,"command":["true"],"name":"w{i}"}}"#);
        let (st, _) = s.http("POST", "/v1/workloads", Some(&fx.admin), Some(&body)).await;
        assert_eq!(st, 201);
    }
    let b = Browser::sign_in(&s, &fx.admin).await;
    let first = b.get("/?who=all").await.body;
    let rows = |p: &str| p.matches("<tr><td><a href=\"/workloads/").count();
    assert_eq!(rows(&first), 50);
    let older =
        first.split("rel=\"next\"").next().unwrap().rsplit("href=\"").next().unwrap().split('"').next().unwrap();
    let older = older.replace("&amp;", "&");
    let second = b.get(&older).await.body;
    assert_eq!(rows(&second), 12, "the 51st of 62 and the rest: {older}");
    assert!(!second.contains("rel=\"next\""));
    let (st, v) = s.http("GET", "/v1/workloads?before=x", Some(&fx.admin), None).await;
    assert!(st == 400 && v["field"] == "before", "{v}");
    drop(s);
    fx.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_and_documents_are_served() {
    let fx = Fixture::new(Backend::Sqlite, "dash-rules").await;
    let s = Server::start(&fx.dir, &fx.db.url);
    let b = Browser::sign_in(&s, &fx.admin).await;
    let r = b.get("/rules").await;
    assert_eq!(r.status, 200);
    for id in ["FS-1", "CON-9", "PLACE-6", "MNT-4"] {
        assert!(r.body.contains(&format!(r#"id="{id}""#)), "anchor {id}");
    }
    assert!(r.body.contains(r#"href="/docs/contract.md""#), "links stay inside");
    assert_eq!(b.get("/docs/measures.md").await.status, 200);
    assert_eq!(b.get("/docs/../Cargo.toml").await.status, 404);
    let css = b.get("/assets/dashboard.css").await;
    assert!(css.status == 200 && css.headers.contains_key("etag"));
    drop(s);
    fx.finish().await;
}

/// Sign-in's `next=`: only a path of this site, also when a browser would
/// drop a tab, CR or LF from it (`/\t/evil.example/` is `//evil.example/`
/// to a browser); a control character in the query or the form field is
/// never a 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_goes_back_only_to_a_path_of_this_site() {
    let fx = Fixture::new(Backend::Sqlite, "dash-next").await;
    let s = Server::start(&fx.dir, &fx.db.url);
    let c = page_client();
    let login = format!("{}/login", s.url);
    for next in ["/\t/evil.example/", "/\r\n/evil.example/", "/\u{1}", "/a\\b", "/\u{7f}"] {
        let form = [("token", fx.admin.as_str()), ("next", next)];
        let a = page_request(&c, "POST", &login, None, Some(&form), &[]).await;
        assert_eq!((a.status, a.location.as_deref()), (303, Some("/")), "next={next:?}: {a:?}");
    }
    let form = [("token", fx.admin.as_str()), ("next", "/workloads/é")];
    let a = page_request(&c, "POST", &login, None, Some(&form), &[]).await;
    assert_eq!((a.status, a.location.as_deref()), (303, Some("/workloads/%C3%A9")), "{a:?}");
    for query in ["next=/%09/evil.example/", "next=/%0d%0a/evil.example/", "next=%01", "next=/%7F"] {
        let a = page_request(&c, "GET", &format!("{login}?{query}"), None, None, &[]).await;
        assert_eq!(a.status, 200, "{query}: {a:?}");
        assert!(a.body.contains(r#"name="next" value="/""#), "{query}: {}", a.body);
    }
    drop(s);
    fx.finish().await;
}

/// Sign-in (`crate::signin`): refused attempts are limited per source
/// address (429 with Retry-After once its 10 are spent, another address
/// unaffected), every attempt is in the audit log, and one token holds at
/// most 16 sessions (the 17th ends the oldest).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_is_limited_audited_and_bounded() {
    let fx = Fixture::new(Backend::Sqlite, "dash-signin").await;
    let s = Server::start(&fx.dir, &fx.db.url);
    let login = format!("{}/login", s.url);
    // Another loopback address: a source of its own.
    let other = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .expect("client");
    for i in 0..10 {
        let a = page_request(&other, "POST", &login, None, Some(&[("token", "allot_guess")]), &[]).await;
        assert_eq!(a.status, 401, "attempt {i}: {a:?}");
    }
    let a = page_request(&other, "POST", &login, None, Some(&[("token", "allot_guess")]), &[]).await;
    assert_eq!(a.status, 429, "the 11th refused attempt in a row: {a:?}");
    let wait: u64 = a.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=6).contains(&wait), "Retry-After {wait}");
    let a = page_request(&other, "POST", &login, None, Some(&[("token", fx.admin.as_str())]), &[]).await;
    assert_eq!(a.status, 429, "limited: not even a good token is checked: {a:?}");

    // Another source signs in; its sessions are bounded per token.
    let c = page_client();
    let mut cookies = Vec::new();
    for _ in 0..17 {
        let a = page_request(&c, "POST", &login, None, Some(&[("token", fx.admin.as_str())]), &[]).await;
        assert_eq!(a.status, 303, "{a:?}");
        cookies.push(a.set_cookies[0].split(';').next().unwrap().to_string());
    }
    let home = |cookie: String| {
        let (c, url) = (&c, format!("{}/", s.url));
        async move { page_request(c, "GET", &url, Some(&cookie), None, &[]).await.status }
    };
    assert_eq!(home(cookies[0].clone()).await, 303, "the oldest of 17 sessions is ended");
    for cookie in &cookies[1..] {
        assert_eq!(home(cookie.clone()).await, 200, "the 16 newest live");
    }

    // The audit log: who, how, from where, refused or not and why.
    let (st, v) = s.http("GET", "/v1/audit?limit=100", Some(&fx.admin), None).await;
    assert_eq!(st, 200, "{v}");
    let signins: Vec<&serde_json::Value> = v.as_array().unwrap().iter().filter(|e| e["action"] == "signin").collect();
    let from_other = |e: &&&serde_json::Value| e["principal"] == "unknown" && e["target"] == "127.0.0.2";
    assert_eq!(signins.iter().filter(from_other).count(), 11, "each refused attempt; once limited, the first: {v}");
    let limited: Vec<_> = signins.iter().filter(|e| e["after"]["refused"] == "too many attempts").collect();
    assert_eq!(limited.len(), 1, "{v}");
    let ok = signins.iter().filter(|e| e["principal"] == "root" && e["after"]["refused"].is_null()).count();
    assert_eq!(ok, 17, "{v}");
    let wrong = signins.iter().filter(|e| e["after"]["refused"] == "unknown or revoked token").collect::<Vec<_>>();
    assert_eq!(wrong.len(), 10, "{v}");
    let e = wrong[0];
    assert_eq!(
        (&e["principal"], &e["after"]["how"], &e["after"]["from"]),
        (&"unknown".into(), &"token".into(), &"127.0.0.2".into())
    );
    drop(s);
    fx.finish().await;
}
