//! Webhook delivery against a real HTTP server on 127.0.0.1: signatures the
//! receiver verifies (and refuses when replayed or tampered), the published test vector,
//! retries with backoff and Retry-After, dead letters, 410 disabling the endpoint, a
//! hanging server, the per-endpoint breaker and rate limit, the SSRF guard, dedupe and
//! ordering, and a Python program feeding `litejobs work` through plain SQL.
//!
//! Time is a `ManualClock`: delays are read off `run_at` and skipped with `set`, never
//! waited for. The deliveries run through `testing::drain` (the production claim, executor
//! and completer on the test thread) unless a test needs a started worker.

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use litejobs::builtin::webhook::{
    self, sign, verify, Endpoints, NewEndpoint, SignatureError, WebhookOptions, DEFAULT_TOLERANCE,
    JOB_TYPE, MAX_RESPONSE_EXCERPT,
};
use litejobs::builtin::{self, BuiltinOptions};
use litejobs::limits::{Breaker, BreakerState, RateLimit};
use litejobs::testing::{drain, DrainReport};
use litejobs::{ErrorKind, JobStatus, NewJob, Queue, RetryPolicy, Worker, WorkerBuilder};
use serde_json::{json, Value};

use crate::support::child::Deadline;
use crate::support::http::{Recorded, Reply, TestServer};
use crate::support::scripted::{at_ms, history, job, wait_all, wait_bound, WAIT};
use crate::support::{setup, temp_dir, TestEnv, START_MS};

/// The Standard Webhooks specification's test secret.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// Another valid secret, for rotation.
const NEW_SECRET: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// Options for a receiver on 127.0.0.1 (which the SSRF guard refuses by default).
fn loopback_options() -> WebhookOptions {
    WebhookOptions::default().allow_private_targets(true)
}

/// A test database, a receiver, one endpoint pointing at it, and a worker builder with the
/// webhook handler.
struct Hook {
    env: TestEnv,
    server: TestServer,
    endpoint: i64,
    builder: WorkerBuilder,
}

impl Hook {
    fn new(fallback: Reply, options: WebhookOptions) -> Hook {
        Hook::with_endpoint(fallback, options, |url| NewEndpoint::new(url, SECRET))
    }

    fn with_endpoint(
        fallback: Reply,
        options: WebhookOptions,
        endpoint: impl FnOnce(String) -> NewEndpoint,
    ) -> Hook {
        let env = setup();
        let server = TestServer::start(fallback);
        let endpoint = Endpoints::new(&env.queue)
            .add(endpoint(server.url("/hooks/orders?token=abc")))
            .expect("registering the test endpoint");
        let builder = webhook::register(Worker::builder(&env.queue), &options)
            .expect("registering the webhook handler");
        Hook {
            env,
            server,
            endpoint,
            builder,
        }
    }

    fn endpoints(&self) -> Endpoints {
        Endpoints::new(&self.env.queue)
    }

    fn deliver(&self, event_id: &str) -> i64 {
        self.env
            .queue
            .enqueue(webhook::delivery(
                self.endpoint,
                "order.paid",
                event_id,
                json!({"type": "order.paid", "data": {"order_id": 42, "event": event_id}}),
            ))
            .expect("enqueue a delivery")
    }

    fn drain(&self) -> DrainReport {
        drain(&self.builder).expect("drain")
    }

    /// Moves the clock to job `id`'s `run_at`.
    fn until_due(&self, id: i64) {
        self.env.clock.set(job(&self.env.queue, id).run_at);
    }

    fn now(&self) -> SystemTime {
        at_ms(self.env.clock.now())
    }
}

/// Verifies a recorded request with `secret` at `now`.
fn check(request: &Recorded, secret: &str, now: SystemTime) -> Result<(), SignatureError> {
    verify(
        secret,
        request.expect_header("webhook-id"),
        request.expect_header("webhook-timestamp"),
        request.expect_header("webhook-signature"),
        &request.body,
        now,
        DEFAULT_TOLERANCE,
    )
}

fn report(succeeded: usize, failed: usize, dead: usize, snoozed: usize) -> DrainReport {
    let mut r = DrainReport::default();
    r.succeeded = succeeded;
    r.failed = failed;
    r.dead = dead;
    r.snoozed = snoozed;
    r
}

#[test]
fn the_specifications_test_vector_signs_and_verifies() {
    let id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    let body = br#"{"test": 2432232314}"#;
    let expected = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    assert_eq!(sign(SECRET, id, 1614265330, body), Ok(expected.to_string()));

    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1614265330 + 60);
    assert_eq!(
        verify(
            SECRET,
            id,
            "1614265330",
            expected,
            body,
            now,
            DEFAULT_TOLERANCE
        ),
        Ok(())
    );
    // Rotation: several space-separated signatures, one of them valid, in any place.
    let rotated = format!("v1,Zm9vYmFyYmF6 v2,whatever {expected}");
    assert_eq!(
        verify(
            SECRET,
            id,
            "1614265330",
            &rotated,
            body,
            now,
            DEFAULT_TOLERANCE
        ),
        Ok(())
    );
    // Only invalid ones, or the right one for a changed body, id or timestamp: refused.
    for (sigs, body, id, ts) in [
        ("v1,Zm9vYmFyYmF6 v1,bm9wZQ==", &body[..], id, "1614265330"),
        (expected, br#"{"test": 2432232315}"#, id, "1614265330"),
        (expected, &body[..], "msg_other", "1614265330"),
        (expected, &body[..], id, "1614265331"),
    ] {
        assert_eq!(
            verify(SECRET, id, ts, sigs, body, now, DEFAULT_TOLERANCE),
            Err(SignatureError::NoMatchingSignature),
            "{sigs} / {id} / {ts}"
        );
    }
    // Another secret does not verify.
    assert_eq!(
        verify(
            NEW_SECRET,
            id,
            "1614265330",
            expected,
            body,
            now,
            DEFAULT_TOLERANCE
        ),
        Err(SignatureError::NoMatchingSignature)
    );
}

#[test]
fn a_delivery_is_a_signed_post_the_receiver_verifies_and_a_replay_or_tampering_is_refused() {
    let hook = Hook::new(Reply::status(200).body("thanks"), loopback_options());
    let id = hook.deliver("evt_1");
    assert_eq!(hook.drain(), report(1, 0, 0, 0));

    let request = hook.server.next_request();
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/hooks/orders?token=abc");
    assert_eq!(request.expect_header("webhook-id"), "evt_1");
    assert_eq!(
        request.expect_header("webhook-timestamp"),
        (START_MS / 1000).to_string(),
        "the timestamp is the queue's clock in seconds"
    );
    assert_eq!(request.expect_header("content-type"), "application/json");
    assert!(
        request.expect_header("user-agent").starts_with("litejobs/"),
        "{request:?}"
    );
    let body: Value = serde_json::from_slice(&request.body).expect("the body is JSON");
    assert_eq!(
        body,
        json!({"type": "order.paid", "data": {"order_id": 42, "event": "evt_1"}})
    );

    // The receiver's side.
    assert_eq!(check(&request, SECRET, hook.now()), Ok(()));
    let mut tampered = request.clone();
    tampered.body = request.body_text().replace("42", "43").into_bytes();
    assert_eq!(
        check(&tampered, SECRET, hook.now()),
        Err(SignatureError::NoMatchingSignature)
    );
    let mut other_id = request.clone();
    for (name, value) in &mut other_id.headers {
        if name == "webhook-id" {
            *value = "evt_2".into();
        }
    }
    assert_eq!(
        check(&other_id, SECRET, hook.now()),
        Err(SignatureError::NoMatchingSignature)
    );
    // Replayed ten minutes later: too old. A clock far behind the sender: too new.
    let later = at_ms(START_MS + 10 * 60 * 1000);
    assert_eq!(
        check(&request, SECRET, later),
        Err(SignatureError::TooOld { age_secs: 600 })
    );
    let earlier = at_ms(START_MS - 6 * 60 * 1000);
    assert_eq!(
        check(&request, SECRET, earlier),
        Err(SignatureError::TooNew { ahead_secs: 360 })
    );
    // Within the tolerance both ways: accepted.
    assert_eq!(check(&request, SECRET, at_ms(START_MS + 299_000)), Ok(()));
    assert_eq!(check(&request, SECRET, at_ms(START_MS - 299_000)), Ok(()));

    let done = job(&hook.env.queue, id);
    assert_eq!(done.status, JobStatus::Succeeded);
    assert_eq!(done.attempts, 1);
    assert_eq!(
        done.result,
        Some(json!({"endpoint_id": hook.endpoint, "status_code": 200, "response": "thanks"}))
    );
    assert_eq!(done.idempotency_key.as_deref(), Some("webhook:1:evt_1"));
    // The secret never sits in the job.
    assert!(!done.payload.to_string().contains("MfKQ9r8"), "{done:?}");
}

#[test]
fn a_500_then_a_200_is_retried_with_backoff_and_both_attempts_are_recorded() {
    let hook = Hook::new(Reply::status(200), loopback_options());
    hook.server
        .push(Reply::status(500).body("database on fire"));
    let id = hook.deliver("evt_500");

    assert_eq!(hook.drain(), report(0, 1, 0, 0));
    let failed = job(&hook.env.queue, id);
    assert_eq!(failed.status, JobStatus::Failed);
    assert_eq!(failed.last_status_code, Some(500));
    let delay = failed.run_at - START_MS;
    assert!(
        (4_500..=5_500).contains(&delay),
        "the first retry waits 5 s ± 10 %, waited {delay} ms"
    );
    assert_eq!(
        hook.drain(),
        DrainReport::default(),
        "not due before the backoff"
    );

    hook.until_due(id);
    assert_eq!(hook.drain(), report(1, 0, 0, 0));
    let done = job(&hook.env.queue, id);
    assert_eq!(done.status, JobStatus::Succeeded);
    assert_eq!(done.attempts, 2);
    let attempts = history(&hook.env.queue, id);
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0].outcome.as_str(), "failed");
    assert_eq!(attempts[0].status_code, Some(500));
    let error = attempts[0].error.as_deref().unwrap_or_default();
    assert!(
        error.contains("HTTP 500") && error.contains("database on fire"),
        "the status and the response are kept: {error}"
    );
    assert!(
        !error.contains("token=abc"),
        "the URL's query (often a token) stays out of errors: {error}"
    );
    assert_eq!(attempts[1].outcome.as_str(), "succeeded");

    // Both requests carry the same webhook-id, so the receiver can dedupe retries.
    let requests = hook.server.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests
        .iter()
        .all(|r| r.header("webhook-id") == Some("evt_500")));
}

#[test]
fn a_429_with_retry_after_in_seconds_or_as_a_date_sets_the_next_attempt_within_a_bound() {
    let options = loopback_options().max_retry_after(Duration::from_secs(600));
    let hook = Hook::new(Reply::status(200), options);
    let id = hook.deliver("evt_429");

    // (status, Retry-After, expected delay): seconds, an HTTP date 90 s ahead, and a day
    // that the bound cuts to 600 s.
    for (i, (code, date, retry_after, wait_ms)) in [
        (429, false, "120", 120_000),
        (503, true, "", 90_000),
        (429, false, "86400", 600_000),
    ]
    .into_iter()
    .enumerate()
    {
        let now = hook.env.clock.now();
        let value = if date {
            httpdate_at(now + 90_000)
        } else {
            retry_after.to_string()
        };
        hook.server
            .push(Reply::status(code).header("Retry-After", &value));
        assert_eq!(hook.drain(), report(0, 1, 0, 0), "attempt {}", i + 1);
        let j = job(&hook.env.queue, id);
        assert_eq!(j.last_status_code, Some(i64::from(code)));
        assert_eq!(
            j.run_at - now,
            wait_ms,
            "attempt {}: Retry-After {value:?} honoured exactly",
            i + 1
        );
        assert!(
            j.last_error
                .as_deref()
                .is_some_and(|e| e.contains("Retry-After")),
            "{j:?}"
        );
        hook.until_due(id);
    }
    assert_eq!(hook.drain(), report(1, 0, 0, 0));
    assert_eq!(job(&hook.env.queue, id).attempts, 4);
    let codes: Vec<Option<i64>> = history(&hook.env.queue, id)
        .iter()
        .map(|a| a.status_code)
        .collect();
    assert_eq!(codes, [Some(429), Some(503), Some(429), None]);
}

/// An HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`) for a time in ms.
fn httpdate_at(ms: i64) -> String {
    let secs = u64::try_from(ms / 1000).expect("after 1970");
    let days = secs / 86_400;
    let (h, m, s) = (secs % 86_400 / 3600, secs % 3600 / 60, secs % 60);
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{weekday}, {day:02} {} {year} {h:02}:{m:02}:{s:02} GMT",
        months[(month - 1) as usize]
    )
}

#[test]
fn the_http_date_helper_is_right() {
    assert_eq!(
        httpdate_at(784_111_777_000),
        "Sun, 06 Nov 1994 08:49:37 GMT"
    );
    assert_eq!(httpdate_at(START_MS), "Tue, 14 Nov 2023 22:13:20 GMT");
}

#[test]
fn a_400_is_dead_after_one_attempt_with_its_status_and_a_bounded_response() {
    let huge = format!("invalid payload: {}", "x".repeat(20_000));
    let hook = Hook::new(Reply::status(400).body(&huge), loopback_options());
    let id = hook.deliver("evt_400");
    assert_eq!(hook.drain(), report(0, 0, 1, 0));

    let dead = job(&hook.env.queue, id);
    assert_eq!(dead.status, JobStatus::Dead);
    assert_eq!(
        dead.attempts, 1,
        "a permanent error spends no more attempts"
    );
    assert_eq!(dead.last_status_code, Some(400));
    let attempts = history(&hook.env.queue, id);
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].status_code, Some(400));
    let error = attempts[0].error.clone().unwrap_or_default();
    assert!(
        error.contains("HTTP 400") && error.contains("invalid payload: xxx"),
        "{error}"
    );
    assert!(error.ends_with("…(truncated)"), "the cut is marked");
    assert!(
        error.len() < MAX_RESPONSE_EXCERPT + 200,
        "the kept response is bounded: {} bytes",
        error.len()
    );
    assert_eq!(hook.server.count(), 1);
    assert_eq!(hook.drain(), DrainReport::default());
    assert_eq!(hook.server.count(), 1, "a dead delivery is not sent again");
}

#[test]
fn a_410_kills_the_delivery_and_disables_the_endpoint() {
    let hook = Hook::new(Reply::status(410).body("gone"), loopback_options());
    let first = hook.deliver("evt_a");
    assert_eq!(hook.drain(), report(0, 0, 1, 0));
    let dead = job(&hook.env.queue, first);
    assert_eq!(dead.last_status_code, Some(410));
    assert!(
        dead.last_error
            .as_deref()
            .is_some_and(|e| e.contains("endpoint disabled")),
        "{dead:?}"
    );
    let endpoint = hook
        .endpoints()
        .get(hook.endpoint)
        .expect("read endpoint")
        .expect("exists");
    assert!(!endpoint.enabled);
    let reason = endpoint.disabled_reason.unwrap_or_default();
    assert!(
        reason.contains("410 Gone") && reason.contains("evt_a"),
        "{reason}"
    );

    // Later deliveries to it go dead without a request; enqueue_delivery refuses at once.
    let second = hook.deliver("evt_b");
    assert_eq!(hook.drain(), report(0, 0, 1, 0));
    let error = job(&hook.env.queue, second).last_error.unwrap_or_default();
    assert!(error.contains("is disabled: 410 Gone"), "{error}");
    assert_eq!(hook.server.count(), 1);
    let err = webhook::enqueue_delivery(
        &hook.env.queue,
        webhook::delivery(hook.endpoint, "order.paid", "evt_c", json!({})),
    )
    .expect_err("enqueue to a disabled endpoint");
    assert_eq!(err.kind(), ErrorKind::InvalidState);

    // Enabled again (the receiver came back): a requeued delivery goes through.
    hook.endpoints().enable(hook.endpoint).expect("enable");
    assert!(hook
        .endpoints()
        .get(hook.endpoint)
        .expect("read")
        .is_some_and(|e| e.enabled && e.disabled_reason.is_none()));
}

#[test]
fn a_hanging_server_times_out_and_the_delivery_is_retried() {
    let options = loopback_options().timeout(Duration::from_millis(300));
    let hook = Hook::new(Reply::status(200), options);
    hook.server.push(Reply::Hang);
    let id = hook.deliver("evt_slow");

    assert_eq!(hook.drain(), report(0, 1, 0, 0));
    let failed = job(&hook.env.queue, id);
    assert_eq!(failed.status, JobStatus::Failed);
    assert_eq!(failed.last_status_code, None);
    let error = failed.last_error.unwrap_or_default();
    assert!(error.contains("timed out"), "{error}");
    assert_eq!(hook.server.count(), 1, "the request reached the server");

    hook.until_due(id);
    assert_eq!(hook.drain(), report(1, 0, 0, 0));
    assert_eq!(job(&hook.env.queue, id).attempts, 2);
    let attempts = history(&hook.env.queue, id);
    assert_eq!(attempts[0].outcome.as_str(), "failed");
    assert!(attempts[0]
        .error
        .as_deref()
        .is_some_and(|e| e.contains("timed out")));
}

#[test]
fn a_refused_connection_is_retried() {
    let env = setup();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let endpoint = Endpoints::new(&env.queue)
        .add(NewEndpoint::new(
            format!("http://127.0.0.1:{port}/"),
            SECRET,
        ))
        .expect("add");
    let builder =
        webhook::register(Worker::builder(&env.queue), &loopback_options()).expect("register");
    let id = env
        .queue
        .enqueue(webhook::delivery(endpoint, "t", "e1", json!({})))
        .expect("enqueue");
    assert_eq!(drain(&builder).expect("drain"), report(0, 1, 0, 0));
    let failed = job(&env.queue, id);
    assert_eq!(failed.status, JobStatus::Failed);
    assert!(
        failed
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains(&format!("127.0.0.1:{port}"))),
        "{failed:?}"
    );
}

#[test]
fn https_targets_go_through_tls() {
    // Without a TLS provider ureq could not even start (a permanent error); with rustls the
    // client speaks TLS, which this plain-HTTP server cannot answer: a retryable failure.
    let env = setup();
    let server = TestServer::start(Reply::status(200));
    let endpoint = Endpoints::new(&env.queue)
        .add(NewEndpoint::new(
            format!("https://127.0.0.1:{}/hooks", server.port()),
            SECRET,
        ))
        .expect("add");
    let options = loopback_options().timeout(Duration::from_millis(500));
    let builder = webhook::register(Worker::builder(&env.queue), &options).expect("register");
    let id = env
        .queue
        .enqueue(webhook::delivery(endpoint, "t", "e1", json!({})))
        .expect("enqueue");
    assert_eq!(drain(&builder).expect("drain"), report(0, 1, 0, 0));
    let failed = job(&env.queue, id);
    assert_eq!(failed.status, JobStatus::Failed, "{failed:?}");
    assert_eq!(server.count(), 0, "no plain-HTTP request was made");
}

#[test]
fn an_open_breaker_defers_deliveries_without_spending_attempts_and_a_probe_closes_it() {
    // No jitter, so the two failed deliveries come due in id order.
    let options = loopback_options()
        .breaker_failures(2)
        .breaker_cool_down(Duration::from_secs(60))
        .retry_policy(RetryPolicy::schedule(vec![
            Duration::from_secs(5),
            Duration::from_secs(300),
        ]));
    let hook = Hook::new(Reply::status(200), options);
    for _ in 0..3 {
        hook.server.push(Reply::status(503).body("down"));
    }
    let ids: Vec<i64> = ["a", "b", "c", "d"]
        .iter()
        .map(|e| hook.deliver(e))
        .collect();
    let key = webhook::limit_key(hook.endpoint);
    let queue = &hook.env.queue;

    // Two failures open the breaker; the other two deliveries are deferred, not attempted.
    assert_eq!(hook.drain(), report(0, 2, 0, 2));
    assert_eq!(hook.server.count(), 2);
    let status = Breaker::status(queue, &key).expect("status").expect("row");
    assert_eq!(status.state, BreakerState::Open);
    assert_eq!(status.failures, 2);
    assert_eq!(status.open_until, Some(START_MS + 60_000));
    for &id in &ids[2..] {
        let deferred = job(queue, id);
        assert_eq!(deferred.status, JobStatus::Queued);
        assert_eq!(deferred.attempts, 0, "no attempt spent while open");
        assert_eq!(deferred.run_at, START_MS + 60_000);
        assert!(history(queue, id).is_empty());
    }

    // Cool-down over: the first due delivery probes, fails, and the breaker opens again;
    // the others wait another cool-down, still without spending attempts.
    hook.env.clock.set(START_MS + 60_000);
    assert_eq!(hook.drain(), report(0, 1, 0, 3));
    assert_eq!(hook.server.count(), 3, "exactly one probe request");
    let status = Breaker::status(queue, &key).expect("status").expect("row");
    assert_eq!(status.state, BreakerState::Open);
    assert_eq!(status.open_until, Some(START_MS + 120_000));
    assert_eq!(
        job(queue, ids[0]).attempts,
        2,
        "the probe was job a's retry"
    );
    assert_eq!(job(queue, ids[1]).attempts, 1);
    assert_eq!(job(queue, ids[2]).attempts, 0);
    assert_eq!(job(queue, ids[3]).attempts, 0);

    // Next cool-down over, the endpoint is back: the probe succeeds and closes the breaker,
    // and the rest go through at once.
    hook.env.clock.set(START_MS + 120_000);
    assert_eq!(hook.drain(), report(3, 0, 0, 0));
    let status = Breaker::status(queue, &key).expect("status").expect("row");
    assert_eq!(status.state, BreakerState::Closed);
    assert_eq!(status.failures, 0);
    hook.until_due(ids[0]);
    assert_eq!(hook.drain(), report(1, 0, 0, 0));
    for (id, attempts) in ids.iter().zip([3, 2, 1, 1]) {
        let done = job(queue, *id);
        assert_eq!(done.status, JobStatus::Succeeded, "{done:?}");
        assert_eq!(done.attempts, attempts, "job {id}");
    }
}

#[test]
fn an_endpoints_rate_limit_spaces_deliveries_without_spending_attempts() {
    let hook = Hook::with_endpoint(Reply::status(204), loopback_options(), |url| {
        NewEndpoint::new(url, SECRET).rate_limit(RateLimit::per_minute(2))
    });
    let ids: Vec<i64> = (0..3).map(|i| hook.deliver(&format!("evt_{i}"))).collect();
    assert_eq!(hook.drain(), report(1, 0, 0, 2));
    assert_eq!(hook.server.count(), 1);
    for &id in &ids[1..] {
        let waiting = job(&hook.env.queue, id);
        assert_eq!(waiting.status, JobStatus::Queued);
        assert_eq!(waiting.attempts, 0);
        assert_eq!(
            waiting.run_at,
            START_MS + 30_000,
            "the next slot is 30 s on"
        );
    }
    hook.env.clock.set(START_MS + 30_000);
    assert_eq!(hook.drain(), report(1, 0, 0, 1));
    hook.env.clock.set(START_MS + 60_000);
    assert_eq!(hook.drain(), report(1, 0, 0, 0));
    assert_eq!(hook.server.count(), 3);
    assert!(ids.iter().all(|&id| job(&hook.env.queue, id).attempts == 1));
}

#[test]
fn the_ssrf_guard_refuses_private_targets_unless_allowed() {
    let env = setup();
    let server = TestServer::start(Reply::status(200));
    let endpoints = Endpoints::new(&env.queue);
    let by_ip = endpoints
        .add(NewEndpoint::new(server.url("/hook"), SECRET))
        .expect("add");
    let by_name = endpoints
        .add(NewEndpoint::new(
            format!("http://localhost:{}/hook", server.port()),
            SECRET,
        ))
        .expect("add");
    let guarded = webhook::register(Worker::builder(&env.queue), &WebhookOptions::default())
        .expect("register with the default (guarded) options");
    let a = env
        .queue
        .enqueue(webhook::delivery(by_ip, "t", "e1", json!({})))
        .expect("enqueue");
    let b = env
        .queue
        .enqueue(webhook::delivery(by_name, "t", "e2", json!({})))
        .expect("enqueue");
    assert_eq!(drain(&guarded).expect("drain"), report(0, 0, 2, 0));
    assert_eq!(server.count(), 0, "no request left the machine's guard");
    for (id, needle) in [
        (a, "target 127.0.0.1 is a loopback address"),
        (b, "localhost"),
    ] {
        let dead = job(&env.queue, id);
        assert_eq!(dead.status, JobStatus::Dead);
        assert_eq!(dead.attempts, 1);
        let error = dead.last_error.unwrap_or_default();
        assert!(
            error.contains("SSRF guard")
                && error.contains(needle)
                && error.contains("LITEJOBS_WEBHOOK_ALLOW_PRIVATE=1"),
            "{error}"
        );
    }
    // The guard's refusal is not the endpoint's failure.
    assert_eq!(
        Breaker::status(&env.queue, &webhook::limit_key(by_ip)).expect("status"),
        None
    );

    // Explicitly allowed: the same target is delivered to.
    let allowed =
        webhook::register(Worker::builder(&env.queue), &loopback_options()).expect("register");
    let c = env
        .queue
        .enqueue(webhook::delivery(by_ip, "t", "e3", json!({})))
        .expect("enqueue");
    assert_eq!(drain(&allowed).expect("drain"), report(1, 0, 0, 0));
    assert_eq!(job(&env.queue, c).status, JobStatus::Succeeded);
    assert_eq!(server.count(), 1);
}

#[test]
fn a_rotated_secret_signs_with_both_secrets_until_the_overlap_ends() {
    let hook = Hook::new(Reply::status(200), loopback_options());
    hook.endpoints()
        .rotate_secret(hook.endpoint, NEW_SECRET, Duration::from_secs(3600))
        .expect("rotate");
    hook.deliver("evt_during");
    assert_eq!(hook.drain(), report(1, 0, 0, 0));
    let during = hook.server.next_request();
    let signatures = during.expect_header("webhook-signature");
    assert_eq!(signatures.split(' ').count(), 2, "{signatures}");
    assert_eq!(check(&during, NEW_SECRET, hook.now()), Ok(()));
    assert_eq!(
        check(&during, SECRET, hook.now()),
        Ok(()),
        "a receiver still on the old secret keeps working"
    );

    hook.env.clock.advance(Duration::from_secs(3600));
    hook.deliver("evt_after");
    assert_eq!(hook.drain(), report(1, 0, 0, 0));
    let after = hook.server.next_request();
    assert_eq!(
        after.expect_header("webhook-signature").split(' ').count(),
        1
    );
    assert_eq!(check(&after, NEW_SECRET, hook.now()), Ok(()));
    assert_eq!(
        check(&after, SECRET, hook.now()),
        Err(SignatureError::NoMatchingSignature)
    );
    let endpoint = hook
        .endpoints()
        .get(hook.endpoint)
        .expect("get")
        .expect("exists");
    assert_eq!(endpoint.secret(), NEW_SECRET);
    assert!(
        !format!("{endpoint:?}").contains("whsec_"),
        "Debug hides secrets"
    );
}

#[test]
fn deliveries_are_deduplicated_by_event_and_run_in_order_per_endpoint_when_asked() {
    let hook = Hook::new(Reply::status(200), loopback_options());
    let queue = &hook.env.queue;
    let first = hook.deliver("evt_dup");
    assert_eq!(
        hook.deliver("evt_dup"),
        first,
        "same event, same endpoint: one job"
    );
    assert_eq!(hook.env.count_jobs(), 1);

    let ordered: Vec<i64> = (0..8)
        .map(|i| {
            queue
                .enqueue(webhook::ordered_delivery(
                    hook.endpoint,
                    "order.paid",
                    format!("seq_{i}"),
                    json!({"seq": i}),
                ))
                .expect("enqueue")
        })
        .collect();
    assert_eq!(
        job(queue, ordered[0]).group_key,
        Some(format!("endpoint:{}", hook.endpoint))
    );
    let events = queue.subscribe();
    let worker = webhook::register(Worker::builder(queue).concurrency(4), &loopback_options())
        .expect("register")
        .start()
        .expect("start");
    let mut all = ordered.clone();
    all.push(first);
    wait_all(&events, &all, JobStatus::Succeeded);
    worker.shutdown(wait_bound()).expect("shutdown");
    let seen: Vec<String> = hook
        .server
        .requests()
        .iter()
        .filter_map(|r| r.header("webhook-id").map(str::to_string))
        .filter(|id| id.starts_with("seq_"))
        .collect();
    let expected: Vec<String> = (0..8).map(|i| format!("seq_{i}")).collect();
    assert_eq!(
        seen, expected,
        "one endpoint's ordered deliveries arrive in order"
    );
    assert_eq!(hook.server.count(), 9);
}

#[test]
fn unknown_or_disabled_endpoints_and_bad_payloads_fail_permanently_with_a_clear_error() {
    let hook = Hook::new(Reply::status(200), loopback_options());
    let queue = &hook.env.queue;
    let missing = queue
        .enqueue(webhook::delivery(999, "t", "e1", json!({})))
        .expect("enqueue");
    let bad = queue
        .enqueue(NewJob::new(JOB_TYPE, json!({"endpoint_id": hook.endpoint})))
        .expect("enqueue");
    let empty_id = queue
        .enqueue(webhook::delivery(hook.endpoint, "t", "", json!({})))
        .expect("enqueue");
    assert_eq!(hook.drain(), report(0, 0, 3, 0));
    for (id, needle) in [
        (missing, "no webhook endpoint with id 999"),
        (bad, "missing field"),
        (empty_id, "event_id must not be empty"),
    ] {
        let dead = job(queue, id);
        assert_eq!(dead.status, JobStatus::Dead);
        let error = dead.last_error.unwrap_or_default();
        assert!(error.contains(needle), "job {id}: {error}");
    }
    assert_eq!(hook.server.count(), 0);

    let err = webhook::enqueue_delivery(queue, webhook::delivery(999, "t", "e2", json!({})))
        .expect_err("unknown endpoint");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.to_string().contains("999"), "{err}");
    let err = webhook::enqueue_delivery(queue, NewJob::new("send_email", json!({})))
        .expect_err("not a delivery");
    assert_eq!(err.kind(), ErrorKind::InvalidJob);
    let ok = webhook::enqueue_delivery(
        queue,
        webhook::delivery(hook.endpoint, "t", 7.to_string(), json!("raw text")),
    )
    .expect("a good delivery");
    assert!(ok > 0);
}

#[test]
fn a_string_body_from_another_language_is_sent_as_written() {
    let hook = Hook::new(Reply::status(200), loopback_options());
    let text = "<event id=\"7\"/>";
    let id = hook
        .env
        .queue
        .enqueue(NewJob::new(
            JOB_TYPE,
            json!({"endpoint_id": hook.endpoint, "event_id": 7, "body": text,
                   "content_type": "application/xml"}),
        ))
        .expect("enqueue");
    assert_eq!(hook.drain(), report(1, 0, 0, 0));
    let request = hook.server.next_request();
    assert_eq!(request.body_text(), text);
    assert_eq!(request.expect_header("content-type"), "application/xml");
    assert_eq!(
        request.expect_header("webhook-id"),
        "7",
        "a numeric event id"
    );
    assert_eq!(check(&request, SECRET, hook.now()), Ok(()));
    assert_eq!(job(&hook.env.queue, id).status, JobStatus::Succeeded);
}

#[test]
fn endpoint_registration_refuses_bad_urls_secrets_and_rate_limits() {
    let env = setup();
    let endpoints = Endpoints::new(&env.queue);
    for (endpoint, needle) in [
        (
            NewEndpoint::new("ftp://example.com/x", SECRET),
            "not http or https",
        ),
        (NewEndpoint::new("example.com/hook", SECRET), "scheme"),
        (NewEndpoint::new("http://", SECRET), "http://"),
        (
            NewEndpoint::new("https://example.com/h", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
            "whsec_",
        ),
        (
            NewEndpoint::new("https://example.com/h", "whsec_c2hvcnQ="),
            "5 bytes",
        ),
        (
            NewEndpoint::new("https://example.com/h", SECRET).rate_limit(RateLimit::per_second(0)),
            "at least 1 request",
        ),
    ] {
        let err = endpoints
            .add(endpoint.clone())
            .expect_err("a bad endpoint must be refused");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
        assert!(err.to_string().contains(needle), "{needle:?} not in: {err}");
    }
    assert!(endpoints.list().expect("list").is_empty());

    let secret = webhook::generate_secret().expect("secret");
    let id = endpoints
        .add(
            NewEndpoint::new("https://crm.example.com/hooks", &secret)
                .rate_limit(RateLimit::per_second(5))
                .description("CRM"),
        )
        .expect("add");
    let stored = endpoints.get(id).expect("get").expect("exists");
    assert_eq!(stored.secret(), secret);
    assert_eq!(stored.rate_limit, Some(5));
    assert_eq!(stored.rate_period_ms, 1000);
    assert_eq!(stored.rate(), Some(RateLimit::per_second(5)));
    assert_eq!(stored.description, "CRM");
    assert_eq!(stored.created_at, START_MS);
    let shown = serde_json::to_string(&stored).expect("serialize");
    assert!(
        !shown.contains("whsec_"),
        "serialized endpoints hide secrets: {shown}"
    );

    endpoints
        .set_url(id, "https://crm.example.com/v2")
        .expect("set_url");
    endpoints.set_rate_limit(id, None).expect("no limit");
    endpoints.disable(id, "maintenance").expect("disable");
    let changed = endpoints.get(id).expect("get").expect("exists");
    assert_eq!(changed.url, "https://crm.example.com/v2");
    assert_eq!(changed.rate_limit, None);
    assert!(!changed.enabled);
    assert_eq!(changed.disabled_reason.as_deref(), Some("maintenance"));
    assert_eq!(
        endpoints.set_url(id, "gopher://x").map_err(|e| e.kind()),
        Err(ErrorKind::InvalidConfig)
    );
    endpoints.remove(id).expect("remove");
    assert_eq!(
        endpoints.remove(id).map_err(|e| e.kind()),
        Err(ErrorKind::NotFound)
    );
}

#[test]
fn options_from_environment_variables_name_a_bad_variable() {
    let vars = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    };
    let options = BuiltinOptions::from_lookup(&vars(&[
        ("LITEJOBS_WEBHOOK_ALLOW_PRIVATE", "1"),
        ("LITEJOBS_WEBHOOK_TIMEOUT", "2.5"),
        ("LITEJOBS_WEBHOOK_USER_AGENT", "acme-hooks/1"),
    ]))
    .expect("valid variables");
    let webhook = options.webhook_options();
    assert!(webhook.allows_private_targets());
    assert_eq!(webhook.request_timeout(), Duration::from_millis(2500));
    assert_eq!(webhook.attempt_timeout(), Duration::from_millis(7500));
    assert!(!BuiltinOptions::from_lookup(&vars(&[]))
        .expect("defaults")
        .webhook_options()
        .allows_private_targets());

    for (name, value, needle) in [
        ("LITEJOBS_WEBHOOK_ALLOW_PRIVATE", "maybe", "expected 1 or 0"),
        ("LITEJOBS_WEBHOOK_TIMEOUT", "ten", "number of seconds"),
        ("LITEJOBS_WEBHOOK_TIMEOUT", "0", "above 0"),
        ("LITEJOBS_WEBHOOK_BREAKER_FAILURES", "0", "at least 1"),
        ("LITEJOBS_WEBHOOK_ENABLED", "nope", "expected 1 or 0"),
    ] {
        let err = BuiltinOptions::from_lookup(&|n: &str| (n == name).then(|| value.to_string()))
            .expect_err("a bad variable must be refused");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        let msg = err.to_string();
        assert!(
            msg.contains(name) && msg.contains(value) && msg.contains(needle),
            "{msg}"
        );
    }

    // Disabled: `register` adds no handler, so starting such a worker alone is refused.
    let env = setup();
    let off =
        BuiltinOptions::from_lookup(&vars(&[("LITEJOBS_WEBHOOK_ENABLED", "0")])).expect("valid");
    let builder = builtin::register(Worker::builder(&env.queue), &off).expect("register");
    assert_eq!(
        builder.start().map(|_| ()).map_err(|e| e.kind()),
        Err(ErrorKind::InvalidConfig)
    );
}

#[test]
fn a_python_program_inserts_a_delivery_with_plain_sql_and_litejobs_work_delivers_it() {
    let dir = temp_dir();
    let db = dir.path().join("app.db");
    let server = TestServer::start(Reply::status(200).body("received"));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/webhook_sidecar.py");
    let output = Command::new("python3")
        .arg(script)
        .arg(&db)
        .arg(server.url("/hooks"))
        .output()
        .expect("running python3 (needed for the sidecar example)");
    assert!(
        output.status.success(),
        "the Python example failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed: Value = serde_json::from_slice(&output.stdout).expect("the example prints JSON");
    let secret = printed["secret"].as_str().expect("secret").to_string();
    let job_id = printed["job_id"].as_i64().expect("job_id");
    let event_id = printed["event_id"].as_str().expect("event_id").to_string();

    let log = std::fs::File::create(dir.path().join("work.log")).expect("log file");
    let child = Command::new(env!("CARGO_BIN_EXE_litejobs"))
        .arg("--db")
        .arg(&db)
        .arg("work")
        .arg("--concurrency")
        .arg("2")
        .env("LITEJOBS_WEBHOOK_ALLOW_PRIVATE", "1")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("starting litejobs work");
    let mut child = crate::support::KillOnDrop(child);

    let request = server.next_request();
    let now = SystemTime::now();
    assert_eq!(request.expect_header("webhook-id"), event_id);
    assert_eq!(
        check(&request, &secret, now),
        Ok(()),
        "signed with the row's secret"
    );
    let body: Value = serde_json::from_slice(&request.body).expect("JSON body");
    assert_eq!(body["data"]["order_id"], 42);

    // Another process's writes are seen by polling the file, with a bound.
    let queue = Queue::open(&db).expect("open the sidecar's database");
    let deadline = Deadline::new("python sidecar", WAIT);
    loop {
        let j = job(&queue, job_id);
        if j.status == JobStatus::Succeeded {
            assert_eq!(j.attempts, 1);
            assert_eq!(
                j.result.as_ref().map(|r| r["status_code"].clone()),
                Some(json!(200))
            );
            break;
        }
        assert!(
            !j.status.is_final(),
            "the delivery ended {}: {j:?}",
            j.status
        );
        deadline.check(|| format!("job {job_id} to succeed (now {j:?})"));
        std::thread::sleep(Duration::from_millis(20));
    }

    let pid = child.0.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("running kill");
    assert!(killed.success());
    loop {
        if let Some(status) = child.0.try_wait().expect("waiting for litejobs work") {
            let log = std::fs::read_to_string(dir.path().join("work.log")).unwrap_or_default();
            assert!(
                status.success(),
                "litejobs work exited {status} after SIGTERM:\n{log}"
            );
            break;
        }
        deadline.check(|| "litejobs work to exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server.count(), 1);
}
