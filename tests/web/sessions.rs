//! Sign-in sessions: sign-out revokes the session on the server, short
//! tokens are refused, repeated wrong tokens are locked out with 429, a CSRF token is good
//! only with its own session, and a foreign `Origin` is refused on every POST.

use litejobs::{ErrorKind, JobStatus};

use super::*;

const TOKEN: &str = "a-token-of-24-characters";

fn web_with_token() -> Web {
    Web::start(setup(), DashboardOptions::new().token(TOKEN))
}

/// A browser signed in with the token.
fn signed_in(web: &Web) -> Client {
    let mut browser = web.client();
    let csrf = browser.get("/login").expect(200).csrf();
    browser
        .post_raw("/login", &[("csrf", &csrf), ("token", TOKEN)])
        .redirect();
    assert!(browser.cookies.contains_key("litejobs_session"));
    browser
}

#[test]
fn sign_out_revokes_the_session_on_the_server() {
    let web = web_with_token();
    let mut browser = signed_in(&web);
    browser.get("/").expect(200);
    // What a thief copied before the owner signed out.
    let copied = browser.cookies.clone();
    let csrf = browser.get("/").expect(200).csrf();
    assert_eq!(
        browser.post_raw("/logout", &[("csrf", &csrf)]).redirect(),
        "/login"
    );
    browser.get("/").expect(401);
    let mut thief = web.client();
    thief.cookies = copied;
    let page = thief.get("/").expect(401);
    assert!(page.body.contains("name=\"token\""), "the sign-in form");
    thief.get("/api/stats").expect(401);
    // Another session is not affected by this one's sign-out.
    let mut other = signed_in(&web);
    other.get("/").expect(200);
}

#[test]
fn tokens_shorter_than_sixteen_characters_are_refused() {
    let env = setup();
    for short in ["t", "fifteen-chars!!", "ééééééééééééééé"] {
        let options = DashboardOptions::new().addr("127.0.0.1:0").token(short);
        let e = Dashboard::start(&env.queue, options).expect_err("a short token is refused");
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        assert!(
            e.to_string().contains("at least 16 characters"),
            "{short:?}: {e}"
        );
        let e = DashboardOptions::new()
            .token(short)
            .validate()
            .expect_err("validate refuses it too");
        assert!(e.to_string().contains("16"), "{e}");
    }
    let web = Web::start(setup(), DashboardOptions::new().token("sixteen-chars-ok"));
    let mut c = web.client();
    c.bearer = Some("sixteen-chars-ok".into());
    c.get("/api/stats").expect(200);
}

#[test]
fn repeated_wrong_tokens_are_locked_out_with_429() {
    let web = web_with_token();
    // Signed in before the attack: the session keeps working during a lock-out.
    let mut owner = signed_in(&web);
    let mut attacker = web.client();
    let csrf = attacker.get("/login").expect(200).csrf();
    for i in 0..5 {
        let page = attacker.post_raw("/login", &[("csrf", &csrf), ("token", "guess-guess-guess")]);
        assert_eq!(
            page.status, 401,
            "failure {i} is a plain refusal: {page:#?}"
        );
    }
    let page = attacker
        .post_raw("/login", &[("csrf", &csrf), ("token", "guess-guess-guess")])
        .expect(429);
    let retry_after: u64 = page
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("a Retry-After in seconds: {page:#?}"));
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    // Even the right token is not looked at while locked out (no oracle for guesses).
    attacker
        .post_raw("/login", &[("csrf", &csrf), ("token", TOKEN)])
        .expect(429);
    assert!(!attacker.cookies.contains_key("litejobs_session"));
    // Bearer guesses from the same address are locked out as well.
    let mut script = web.client();
    script.bearer = Some("guess-guess-guess".into());
    let page = script.get("/api/stats").expect(429);
    assert!(page.header("retry-after").is_some(), "{page:#?}");
    owner.get("/").expect(200);
}

#[test]
fn a_csrf_token_is_good_only_with_its_own_session() {
    let web = web_with_token();
    let s = seed(web.queue());
    let mut alice = signed_in(&web);
    let mut mallory = signed_in(&web);
    let alice_token = alice.get("/").expect(200).csrf();
    let mallory_token = mallory.get("/").expect(200).csrf();
    assert_ne!(alice_token, mallory_token, "each session has its own token");
    // Alice's session with Mallory's token (and Mallory's CSRF cookie): refused.
    let mut forged = web.client();
    forged.cookies = alice.cookies.clone();
    if let Some(cookie) = mallory.cookies.get("litejobs_csrf") {
        forged
            .cookies
            .insert("litejobs_csrf".into(), cookie.clone());
    }
    let path = format!("/jobs/{}/cancel", s.queued);
    forged
        .post_raw(&path, &[("csrf", &mallory_token)])
        .expect(403);
    alice
        .post_raw(&path, &[("csrf", &mallory_token)])
        .expect(403);
    assert_eq!(
        web.queue().job(s.queued).expect("read").map(|j| j.status),
        Some(JobStatus::Queued),
        "nothing changed"
    );
    alice.post_raw(&path, &[("csrf", &alice_token)]).redirect();
}

#[test]
fn a_foreign_origin_is_refused_on_every_post() {
    let web = Web::open();
    let s = seed(web.queue());
    let mut browser = web.client();
    let csrf = browser.get("/").expect(200).csrf();
    let cookie = format!(
        "litejobs_csrf={}",
        browser.cookies.get("litejobs_csrf").expect("csrf cookie")
    );
    let base = web.handle.url();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let post = |origin: &str, path: &str| -> u16 {
        let mut resp = agent
            .post(format!("{}{}", base.trim_end_matches('/'), path))
            .header("Origin", origin)
            .header("Cookie", &cookie)
            .send_form([("csrf", csrf.as_str())])
            .expect("POST");
        let _ = resp.body_mut().read_to_string();
        resp.status().as_u16()
    };
    let pause = "/queues/default/pause";
    for foreign in [
        "http://evil.example",
        "null",
        &format!("http://localhost:{}", web.handle.addr().port() + 1),
    ] {
        assert_eq!(post(foreign, pause), 403, "{foreign}");
        assert_eq!(
            post(foreign, &format!("/jobs/{}/cancel", s.queued)),
            403,
            "{foreign}"
        );
    }
    assert!(web.queue().paused_queues().expect("paused").is_empty());
    // The dashboard's own origin is fine.
    let own = base.trim_end_matches('/').to_string();
    assert_eq!(post(&own, pause), 303, "{own}");
    assert_eq!(
        web.queue().paused_queues().expect("paused"),
        vec!["default".to_string()]
    );
}
