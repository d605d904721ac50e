//! `GET /endpoints` (feature `webhook`): each endpoint with its state, circuit breaker
//! (closed, open until when, half-open), latest failure and rate limit; the enable and
//! disable buttons; never a secret, nor a URL's password or query string.

use litejobs::builtin::webhook::{self, Endpoints, NewEndpoint};
use litejobs::limits::{Breaker, RateLimit};

use super::*;

/// Asserts the page holds none of `secrets` and nothing in the `whsec_` form.
fn assert_no_secret(body: &str, secrets: &[&str]) {
    for secret in secrets {
        assert!(!body.contains(secret), "a secret is on the page: {body}");
    }
    assert!(!body.contains("whsec_"), "a secret is on the page: {body}");
}

#[test]
fn the_page_lists_endpoints_with_their_breakers_and_never_a_secret() {
    let web = Web::open();
    let q = web.queue();
    let endpoints = Endpoints::new(q);
    let crm_secret = webhook::generate_secret().expect("a secret");
    let crm = endpoints
        .add(
            NewEndpoint::new(
                "https://ops:pa55word@crm.example/hook?token=t0ps3cret",
                crm_secret.clone(),
            )
            .rate_limit(RateLimit::per_second(10))
            .description("<b>CRM</b> production"),
        )
        .expect("add");
    let old_secret = webhook::generate_secret().expect("a secret");
    let billing = endpoints
        .add(NewEndpoint::new("https://billing.example/h", old_secret.clone()).disabled())
        .expect("add");
    endpoints
        .disable(billing, "410 Gone <script>")
        .expect("disable");
    let new_secret = webhook::generate_secret().expect("a secret");
    endpoints
        .rotate_secret(billing, &new_secret, Duration::from_secs(3600))
        .expect("rotate");
    let secrets = [
        crm_secret.as_str(),
        old_secret.as_str(),
        new_secret.as_str(),
    ];

    // The CRM's breaker opens on its first failure, for the default minute.
    let breaker = Breaker::new().failure_threshold(1);
    breaker
        .record_failure(
            q,
            &webhook::limit_key(crm),
            "HTTP 503 <Service Unavailable>",
        )
        .expect("a failure");

    let mut c = web.client();
    let overview = c.get("/").expect(200);
    assert!(
        overview
            .body
            .contains("<a href=\"/endpoints\">Endpoints</a>"),
        "linked from the navigation: {}",
        overview.body
    );
    let page = c.get("/endpoints").expect(200);
    let body = &page.body;
    assert_no_secret(body, &secrets);
    assert!(
        !body.contains("pa55word") && !body.contains("t0ps3cret"),
        "{body}"
    );
    assert!(
        body.contains("<a href=\"/endpoints\" class=\"active\">Endpoints</a>"),
        "{body}"
    );
    assert!(
        body.contains("https://ops:***@crm.example/hook?…"),
        "{body}"
    );
    assert!(body.contains("&lt;b&gt;CRM&lt;/b&gt; production"), "{body}");
    assert!(!body.contains("<b>CRM"), "escaped: {body}");
    assert!(body.contains("10/s"), "{body}");
    // Open, and until when: a minute from the dashboard's now, in words and as a UTC time.
    let until = crate::support::START_MS + 60_000;
    assert!(
        body.contains(&format!(
            "<span class=\"badge badge-dead\">open</span> until <span title=\"{}\">in 1m</span>",
            litejobs::human::utc(until)
        )),
        "{body}"
    );
    assert!(
        body.contains("HTTP 503 &lt;Service Unavailable&gt;"),
        "{body}"
    );
    assert!(body.contains("badge-paused\">disabled</span>"), "{body}");
    assert!(body.contains("410 Gone &lt;script&gt;"), "{body}");
    assert!(
        body.contains("badge-active\">closed</span>"),
        "the billing breaker never failed: {body}"
    );

    // The cool-down over, one delivery probes: half-open.
    web.env.clock.set(until);
    assert!(breaker
        .allow(q, &webhook::limit_key(crm))
        .expect("allow")
        .is_go());
    let body = c.get("/endpoints").expect(200).body;
    assert!(body.contains("badge-failed\">half-open</span>"), "{body}");
    assert_no_secret(&body, &secrets);
    // The JSON API and other pages hold no secret either.
    for path in ["/", "/jobs", "/dead", "/schedules", "/api/stats"] {
        assert_no_secret(&c.get(path).expect(200).body, &secrets);
    }
}

#[test]
fn the_buttons_disable_and_enable_an_endpoint() {
    let web = Web::open();
    let endpoints = Endpoints::new(web.queue());
    let id = endpoints
        .add(NewEndpoint::new(
            "https://crm.example/hook",
            webhook::generate_secret().expect("a secret"),
        ))
        .expect("add");
    let mut c = web.client();
    let empty = Web::open();
    let none = empty.client().get("/endpoints").expect(200).body;
    assert!(none.contains("No webhook endpoints yet"), "{none}");

    let path = format!("/endpoints/{id}/disable");
    let page = c.post_from("/endpoints", &path, &[]);
    assert!(
        page.redirect().starts_with("/endpoints?flash="),
        "{page:#?}"
    );
    let e = endpoints.get(id).expect("reading").expect("exists");
    assert!(!e.enabled);
    assert_eq!(
        e.disabled_reason.as_deref(),
        Some("disabled from the dashboard")
    );
    let body = c.get("/endpoints").expect(200).body;
    assert!(
        body.contains(&format!("action=\"/endpoints/{id}/enable\"")),
        "{body}"
    );

    c.post_from("/endpoints", &format!("/endpoints/{id}/enable"), &[])
        .redirect();
    assert!(endpoints.get(id).expect("reading").expect("exists").enabled);

    // Without the page's CSRF token nothing changes; an unknown id is a 404; GET is 405.
    c.post_raw(&path, &[]).expect(403);
    assert!(endpoints.get(id).expect("reading").expect("exists").enabled);
    c.post_from("/endpoints", "/endpoints/4711/disable", &[])
        .expect(404);
    c.get(&path).expect(405);

    // Read-only (signed in, so the browser holds a valid CSRF token and the refusal is
    // read-only's): no buttons, and the POST is refused.
    let ro = Web::start(
        setup(),
        DashboardOptions::new()
            .read_only(true)
            .token("read-only-token-123"),
    );
    let ro_id = Endpoints::new(ro.queue())
        .add(NewEndpoint::new(
            "https://crm.example/hook",
            webhook::generate_secret().expect("a secret"),
        ))
        .expect("add");
    let mut rc = ro.client();
    let csrf = rc.get("/login").expect(200).csrf();
    rc.post_raw(
        "/login",
        &[("csrf", &csrf), ("token", "read-only-token-123")],
    )
    .redirect();
    let body = rc.get("/endpoints").expect(200).body;
    assert!(body.contains("crm.example"), "{body}");
    assert!(!body.contains("action=\"/endpoints/"), "{body}");
    let csrf = rc.get("/endpoints").expect(200).csrf();
    let refused = rc
        .post_raw(&format!("/endpoints/{ro_id}/disable"), &[("csrf", &csrf)])
        .expect(403);
    assert!(refused.body.contains("read-only"), "{}", refused.body);
    assert!(
        Endpoints::new(ro.queue())
            .get(ro_id)
            .expect("reading")
            .expect("exists")
            .enabled
    );
}

#[test]
fn a_url_shows_the_host_deliveries_go_to() {
    let web = Web::open();
    Endpoints::new(web.queue())
        .add(NewEndpoint::new(
            "http://127.0.0.1:18600#@evil.example/z",
            webhook::generate_secret().expect("a secret"),
        ))
        .expect("add");
    let body = web.client().get("/endpoints").expect(200).body;
    assert!(body.contains("http://127.0.0.1:18600/#…"), "{body}");
    assert!(!body.contains("evil.example"), "{body}");
}
