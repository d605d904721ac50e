//! The security model: CSRF on every POST, the token (bearer header or sign-in cookie),
//! the headers on every response, read-only mode, loopback-only without a token.

use std::io::{Read, Write};
use std::net::TcpStream;

use litejobs::{ErrorKind, JobRecord};

use super::*;

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   frame-ancestors 'none'; form-action 'self'; base-uri 'none'";

fn snapshot(web: &Web, s: &Seeded) -> (Vec<Option<JobRecord>>, i64, Vec<String>) {
    let q = web.queue();
    let jobs = [s.queued, s.failed, s.dead, s.succeeded]
        .iter()
        .map(|id| q.job(*id).expect("read"))
        .collect();
    (
        jobs,
        web.env.count_jobs(),
        q.paused_queues().expect("paused"),
    )
}

/// Every state-changing route, with the fields it needs.
fn actions(s: &Seeded) -> Vec<(String, Vec<(&'static str, &'static str)>)> {
    vec![
        (format!("/jobs/{}/retry", s.failed), vec![]),
        (format!("/jobs/{}/cancel", s.queued), vec![]),
        (
            format!("/jobs/{}/requeue", s.dead),
            vec![("reason", "forged")],
        ),
        (format!("/jobs/{}/discard", s.dead), vec![]),
        (
            "/dead/requeue".to_string(),
            vec![("type", "t"), ("reason", "forged")],
        ),
        ("/queues/default/pause".to_string(), vec![]),
    ]
}

#[test]
fn a_post_without_the_right_csrf_token_is_refused_and_changes_nothing() {
    let web = Web::open();
    let s = seed(web.queue());
    let before = snapshot(&web, &s);
    let mut victim = web.client();
    let token = victim.get("/").expect(200).csrf();
    let mut attacker = web.client();
    let attacker_token = attacker.get("/").expect(200).csrf();
    assert_ne!(token, attacker_token, "each browser has its own token");

    for (path, fields) in actions(&s) {
        // No token at all.
        let page = victim.post_raw(&path, &fields).expect(403);
        assert!(page.body.contains("CSRF"), "{path}: {}", page.body);
        // A made-up token.
        let mut forged = fields.clone();
        forged.push(("csrf", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"));
        victim.post_raw(&path, &forged).expect(403);
        // Another browser's token (what a page elsewhere could get by loading ours).
        let mut stolen = fields.clone();
        stolen.push(("csrf", &attacker_token));
        victim.post_raw(&path, &stolen).expect(403);
        // The right token with no cookie (a cross-site form in a browser that withholds
        // SameSite=Strict cookies).
        let mut no_cookie = web.client();
        let mut right = fields.clone();
        right.push(("csrf", &token));
        no_cookie.post_raw(&path, &right).expect(403);
        // A browser marking the request cross-site is refused even with the right token.
        let mut cross = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .new_agent()
            .post(format!(
                "{}{}",
                web.handle.url().trim_end_matches('/'),
                path
            ))
            .header("Sec-Fetch-Site", "same-site")
            .header(
                "Cookie",
                format!(
                    "litejobs_csrf={}",
                    victim.cookies.get("litejobs_csrf").expect("csrf cookie")
                ),
            )
            .send_form(right.iter().copied())
            .expect("cross-site request");
        assert_eq!(cross.status().as_u16(), 403, "{path}");
        let _ = cross.body_mut().read_to_string();
    }
    assert_eq!(snapshot(&web, &s), before, "nothing changed");
    // And the real thing works, to show the refusals were about the token.
    let mut fields = vec![("csrf", token.as_str())];
    fields.extend([("reason", "real")]);
    victim
        .post_raw(&format!("/jobs/{}/requeue", s.dead), &fields)
        .redirect();
}

#[test]
fn with_a_token_every_request_needs_it() {
    const TOKEN: &str = "correct horse battery staple";
    let web = Web::start(setup(), DashboardOptions::new().token(TOKEN));
    let s = seed(web.queue());
    let mut anon = web.client();
    let page = anon.get("/").expect(401);
    assert!(page.body.contains("name=\"token\""), "the sign-in form");
    assert_eq!(
        page.header("www-authenticate"),
        Some("Bearer realm=\"litejobs\"")
    );
    for path in ["/jobs", "/dead", "/schedules", "/metrics", "/api/jobs"] {
        anon.get(path).expect(401);
    }
    let api = anon.get("/api/stats").expect(401).json();
    assert!(api["error"].as_str().unwrap_or("").contains("unauthorized"));
    // Assets are public so the sign-in page has its styles.
    anon.get("/assets/app.css").expect(200);

    let mut wrong = web.client();
    wrong.bearer = Some("correct horse".into());
    wrong.get("/api/stats").expect(401);
    wrong.get("/").expect(401);

    let mut script = web.client();
    script.bearer = Some(TOKEN.into());
    script.get("/api/stats").expect(200);
    script.get(&format!("/jobs/{}", s.dead)).expect(200);
    // A script's action needs no CSRF token: no browser sends the bearer header by itself.
    let done = script.post_raw(
        &format!("/jobs/{}/requeue", s.dead),
        &[("reason", "from a script")],
    );
    assert_eq!(done.status, 303, "{}", done.body);
    let requeued = web
        .queue()
        .job(s.dead)
        .expect("read")
        .expect("the dead job");
    assert!(requeued.requeued_as.is_some(), "{requeued:?}");

    // A POST without the token is refused before anything else, even with a good form.
    let csrf = anon.get("/login").expect(200).csrf();
    anon.post_raw(&format!("/jobs/{}/cancel", s.queued), &[("csrf", &csrf)])
        .expect(401);
    assert_eq!(
        web.queue().job(s.queued).expect("read").map(|j| j.status),
        Some(litejobs::JobStatus::Queued)
    );

    // Sign in: a wrong token is refused, the right one sets a session cookie (not the token).
    let mut browser = web.client();
    let csrf = browser.get("/").expect(401).csrf();
    let refused = browser
        .post_raw(
            "/login",
            &[("csrf", &csrf), ("token", "guess"), ("next", "/dead")],
        )
        .expect(401);
    assert!(refused.body.contains("Wrong token."));
    assert!(!browser.cookies.contains_key("litejobs_session"));
    let page = browser.post_raw(
        "/login",
        &[("csrf", &csrf), ("token", TOKEN), ("next", "/dead")],
    );
    assert_eq!(page.redirect(), "/dead");
    let cookie = page
        .header("set-cookie")
        .expect("session cookie")
        .to_string();
    assert!(cookie.starts_with("litejobs_session="), "{cookie}");
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    assert!(cookie.contains("Path=/"), "{cookie}");
    assert!(
        !cookie.contains("horse"),
        "the cookie is not the token: {cookie}"
    );
    browser.get("/dead").expect(200);
    // Signed in, actions work (with the CSRF token).
    let page = browser.post_from("/", &format!("/jobs/{}/cancel", s.queued), &[]);
    page.redirect();
    // A login from elsewhere cannot redirect off the site.
    let csrf = browser.get("/").expect(200).csrf();
    let page = browser.post_raw(
        "/login",
        &[
            ("csrf", &csrf),
            ("token", TOKEN),
            ("next", "//evil.example/"),
        ],
    );
    assert_eq!(page.redirect(), "/");

    // The cookie is worthless to another dashboard process (another key).
    let other = Web::start(setup(), DashboardOptions::new().token(TOKEN));
    let mut stolen = other.client();
    stolen.cookies = browser.cookies.clone();
    stolen.get("/").expect(401);

    // Sign out clears it.
    let csrf = browser.get("/").expect(200).csrf();
    let page = browser.post_raw("/logout", &[("csrf", &csrf)]);
    assert_eq!(page.redirect(), "/login");
    assert!(!browser.cookies.contains_key("litejobs_session"));
    browser.get("/").expect(401);
}

#[test]
fn every_response_carries_the_security_headers() {
    let web = Web::start(setup(), DashboardOptions::new().token("t0ken-t0ken-t0ken"));
    let s = seed(web.queue());
    let mut anon = web.client();
    let mut c = web.client();
    c.bearer = Some("t0ken-t0ken-t0ken".into());
    // A signed-in browser whose POST lacks the form's CSRF token gets a 403.
    let mut browser = web.client();
    let csrf = browser.get("/").expect(401).csrf();
    browser
        .post_raw(
            "/login",
            &[
                ("csrf", &csrf),
                ("token", "t0ken-t0ken-t0ken"),
                ("next", "/"),
            ],
        )
        .redirect();
    let pages = vec![
        c.get("/"),
        c.get(&format!("/jobs/{}", s.dead)),
        c.get("/api/stats"),
        c.get("/nope"),
        c.get("/assets/app.js"),
        anon.get("/"),
        c.post_from("/", &format!("/jobs/{}/retry", s.failed), &[]),
        browser.post_raw(&format!("/jobs/{}/retry", s.failed), &[]),
    ];
    let statuses: Vec<u16> = pages.iter().map(|p| p.status).collect();
    assert_eq!(statuses, vec![200, 200, 200, 404, 200, 401, 303, 403]);
    for page in &pages {
        assert_eq!(
            page.header("content-security-policy"),
            Some(CSP),
            "{page:#?}"
        );
        assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(page.header("referrer-policy"), Some("same-origin"));
        assert_eq!(page.header("x-frame-options"), Some("DENY"));
    }
    // No inline script or style anywhere: the CSP would block them.
    let body = &pages[0].body;
    assert!(!body.contains("<script>"), "no inline script");
    assert!(!body.contains("style=\""), "no inline style");
    assert!(!body.contains("onclick"), "no inline handler");
    assert_eq!(pages[0].header("cache-control"), Some("no-store"));
    let csrf_cookie = pages[5]
        .headers
        .iter()
        .find(|(k, v)| k.eq_ignore_ascii_case("set-cookie") && v.starts_with("litejobs_csrf="))
        .map(|(_, v)| v.clone())
        .expect("the CSRF cookie");
    assert!(csrf_cookie.contains("HttpOnly") && csrf_cookie.contains("SameSite=Strict"));
}

#[test]
fn read_only_hides_and_refuses_every_action() {
    // With a token too, so that a signed-in browser holds a valid CSRF token: the refusal
    // below is read-only's, not the CSRF check's.
    let web = Web::start(
        setup(),
        DashboardOptions::new()
            .read_only(true)
            .token("read-only-token-123"),
    );
    let s = seed(web.queue());
    let before = snapshot(&web, &s);
    let mut c = web.client();
    let csrf = c.get("/login").expect(200).csrf();
    c.post_raw(
        "/login",
        &[("csrf", &csrf), ("token", "read-only-token-123")],
    )
    .redirect();
    for path in [
        "/".to_string(),
        "/jobs".into(),
        format!("/jobs/{}", s.dead),
        format!("/jobs/{}", s.failed),
        format!("/jobs/{}", s.queued),
        "/dead".into(),
    ] {
        let page = c.get(&path).expect(200);
        for action in ["action=\"/jobs/", "action=\"/queues/", "action=\"/dead/"] {
            assert!(
                !page.body.contains(action),
                "{path} has no {action} form: {}",
                page.body
            );
        }
        assert!(page.body.contains(">read-only<"), "{path} says so");
    }
    let csrf = c.get("/").expect(200).csrf();
    for (path, fields) in actions(&s) {
        let mut fields = fields.clone();
        fields.push(("csrf", &csrf));
        let page = c.post_raw(&path, &fields).expect(403);
        assert!(page.body.contains("read-only"), "{path}: {}", page.body);
    }
    assert_eq!(snapshot(&web, &s), before, "nothing changed");
}

#[test]
fn a_public_address_needs_a_token() {
    let env = setup();
    let e = Dashboard::start(&env.queue, DashboardOptions::new().addr("0.0.0.0:0"))
        .expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    assert!(e.to_string().contains("without a token"), "{e}");
    let e = Dashboard::start(&env.queue, DashboardOptions::new().token(" ")).expect_err("refused");
    assert!(e.to_string().contains("token must not be empty"), "{e}");
    let e =
        Dashboard::start(&env.queue, DashboardOptions::new().addr("nowhere")).expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    // A port in use is a clear error too.
    let web = Web::open();
    let taken = web.handle.addr().to_string();
    let e =
        Dashboard::start(&env.queue, DashboardOptions::new().addr(&taken)).expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::Io);
    assert!(e.to_string().contains(&taken), "{e}");
}

/// A raw request with its own Host header (what a DNS-rebinding page would send).
fn raw_get(web: &Web, host: &str) -> String {
    let mut stream = TcpStream::connect(web.handle.addr()).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        stream,
        "GET /api/stats HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    answer
}

#[test]
fn without_a_token_only_loopback_host_names_are_served() {
    let web = Web::open();
    let port = web.handle.addr().port();
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "LOCALHOST".to_string(),
        format!("[::1]:{port}"),
    ] {
        let answer = raw_get(&web, &host);
        assert!(answer.starts_with("HTTP/1.1 200"), "{host}: {answer}");
    }
    let answer = raw_get(&web, &format!("evil.example:{port}"));
    assert!(answer.starts_with("HTTP/1.1 421"), "{answer}");
    assert!(!answer.contains("\"counts\""), "no data for a foreign name");
    // With a token, any name is fine (the token protects it).
    let guarded = Web::start(
        setup(),
        DashboardOptions::new().token("a-token-of-20-chars!"),
    );
    let answer = raw_get(&guarded, "evil.example");
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
}
