//! The web dashboard, served by `Dashboard::start` on 127.0.0.1 (an ephemeral port)
//! and by the `litejobs web` binary, driven over real HTTP with ureq: every route's status
//! code, filters and pages, actions that change the database, CSRF and token refusals that
//! change nothing, escaping of hostile job data, read-only mode, and the binary's start,
//! refusals and SIGTERM.
//!
//! The client below keeps cookies like a browser (and follows no redirects, so each 303 is
//! seen); the browser itself is tested in tests/browser.rs.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use litejobs::builtin::report::{Chunk, ChunkOutput, ReportKind};
use litejobs::maintenance::{Periodic, Scheduler};
use litejobs::web::{Dashboard, DashboardHandle, DashboardOptions};
use litejobs::{
    testing, Clock, JobContext, JobError, ManualClock, NewJob, Queue, RetryPolicy, SystemClock,
    Worker,
};
use serde_json::{json, Value};

use crate::support::{setup, TestEnv};

mod actions; // retry, cancel, requeue, discard, bulk requeue, pause/resume change the database
mod binary; // `litejobs web`: serves, stops on SIGTERM, refuses a public address without a token
mod bounds; // huge error texts shown cut on every page and in the API; requeued from /dead
mod edge; // the HTTP edge: header injection, head and body limits, slow clients, connection cap
#[cfg(feature = "webhook")]
mod endpoints; // webhook endpoints: breaker states, enable/disable, never a secret
mod pages; // every page and API route: status codes, filters, keyset pages, masking, escaping
mod security; // CSRF, bearer tokens, sign-in, headers, read-only, host names
mod sessions; // sign-out revokes, short tokens, lock-out of wrong tokens, CSRF per session, Origin
mod workflows; // workflows and batches: list, graph, cascade, escaping, cancel form, read-only, JSON

/// A dashboard on an ephemeral loopback port over a test database.
pub struct Web {
    pub env: TestEnv,
    pub handle: DashboardHandle,
}

impl Web {
    /// The dashboard with `options` (the address is forced to 127.0.0.1:0).
    pub fn start(env: TestEnv, options: DashboardOptions) -> Web {
        let handle = Dashboard::start(&env.queue, options.addr("127.0.0.1:0"))
            .expect("starting the dashboard on 127.0.0.1:0");
        assert_ne!(handle.addr().port(), 0, "the bound port is reported");
        Web { env, handle }
    }

    /// A default dashboard on a fresh test database.
    pub fn open() -> Web {
        Web::start(setup(), DashboardOptions::new())
    }

    /// A client without cookies.
    pub fn client(&self) -> Client {
        Client::new(&self.handle.url())
    }

    pub fn queue(&self) -> &Queue {
        &self.env.queue
    }
}

/// A connection to `addr` from another loopback address (all of 127.0.0.0/8 is loopback on
/// Linux): a client the dashboard tells apart from 127.0.0.1.
pub fn connect_from(addr: std::net::SocketAddr, source: [u8; 4]) -> std::net::TcpStream {
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("a socket");
    socket
        .bind(&std::net::SocketAddr::from((source, 0)).into())
        .unwrap_or_else(|e| panic!("binding {source:?}: {e}"));
    socket
        .connect_timeout(&addr.into(), Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connecting to {addr} from {source:?}: {e}"));
    socket.into()
}

/// One HTTP answer.
#[derive(Debug)]
pub struct Page {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Page {
    /// The first header of this name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `Location` of a 303, asserting it is one.
    pub fn redirect(&self) -> &str {
        assert_eq!(self.status, 303, "expected a redirect: {self:#?}");
        self.header("location").expect("Location header")
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The value of the page's first hidden CSRF field.
    pub fn csrf(&self) -> String {
        let marker = "name=\"csrf\" value=\"";
        let start = self
            .body
            .find(marker)
            .unwrap_or_else(|| panic!("no CSRF field on the page: {}", self.body))
            + marker.len();
        let end = self.body[start..].find('"').expect("closing quote") + start;
        self.body[start..end].to_string()
    }

    /// Asserts the status, with the page in the message.
    pub fn expect(self, status: u16) -> Page {
        assert_eq!(self.status, status, "unexpected status: {self:#?}");
        self
    }
}

/// A cookie-keeping HTTP client for one dashboard.
pub struct Client {
    agent: ureq::Agent,
    base: String,
    pub cookies: BTreeMap<String, String>,
    pub bearer: Option<String>,
}

impl Client {
    pub fn new(base: &str) -> Client {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .into();
        Client {
            agent,
            base: base.trim_end_matches('/').to_string(),
            cookies: BTreeMap::new(),
            bearer: None,
        }
    }

    fn cookie_header(&self) -> Option<String> {
        (!self.cookies.is_empty()).then(|| {
            self.cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("; ")
        })
    }

    fn finish(&mut self, resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Page {
        let mut resp = resp.unwrap_or_else(|e| panic!("request to {} failed: {e}", self.base));
        let headers: Vec<(String, String)> = resp
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        for (k, v) in &headers {
            if k.eq_ignore_ascii_case("set-cookie") {
                let pair = v.split(';').next().unwrap_or("");
                if let Some((name, value)) = pair.split_once('=') {
                    if value.is_empty() || v.contains("Max-Age=0") {
                        self.cookies.remove(name);
                    } else {
                        self.cookies.insert(name.to_string(), value.to_string());
                    }
                }
            }
        }
        let body = resp.body_mut().read_to_string().unwrap_or_default();
        Page {
            status: resp.status().as_u16(),
            headers,
            body,
        }
    }

    pub fn get(&mut self, path: &str) -> Page {
        let mut req = self.agent.get(format!("{}{path}", self.base));
        if let Some(cookies) = self.cookie_header() {
            req = req.header("Cookie", cookies);
        }
        if let Some(token) = &self.bearer {
            req = req.header("Authorization", format!("Bearer {token}"));
        }
        let resp = req.call();
        self.finish(resp)
    }

    /// POSTs a form as given (no CSRF field added).
    pub fn post_raw(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let mut req = self.agent.post(format!("{}{path}", self.base));
        if let Some(cookies) = self.cookie_header() {
            req = req.header("Cookie", cookies);
        }
        if let Some(token) = &self.bearer {
            req = req.header("Authorization", format!("Bearer {token}"));
        }
        let resp = req.send_form(form.iter().copied());
        self.finish(resp)
    }

    /// POSTs a form the way a browser does from one of the dashboard's pages: with the
    /// CSRF token of the page at `from`.
    pub fn post_from(&mut self, from: &str, path: &str, form: &[(&str, &str)]) -> Page {
        let csrf = self.get(from).csrf();
        let mut fields: Vec<(&str, &str)> = form.to_vec();
        fields.push(("csrf", &csrf));
        self.post_raw(path, &fields)
    }
}

// ---------------------------------------------------------------------------------------
// A realistic database: two weeks of mail, webhooks and reports, with a webhook outage
// ---------------------------------------------------------------------------------------

const HOUR: Duration = Duration::from_secs(3600);
const HOUR_MS: i64 = 3_600_000;

/// What [`demo_database`] made.
pub struct Demo {
    /// Dead webhook jobs of the outage (connection refused), nobody requeued them.
    pub refused_dead: Vec<i64>,
    /// The dead webhook job with 410 Gone.
    pub gone_dead: i64,
}

/// Monthly sales in chunks, for the report runs.
struct Sales;

impl ReportKind for Sales {
    fn plan(&self, params: &Value) -> Result<Vec<Value>, JobError> {
        let chunks = params["chunks"].as_u64().unwrap_or(4);
        Ok((0..chunks).map(|i| json!({"page": i})).collect())
    }

    fn run_chunk(&self, _ctx: &JobContext, chunk: &Chunk) -> Result<ChunkOutput, JobError> {
        if chunk.spec["page"] == json!(3) && chunk.params["slow_page"] == json!(3) {
            return Err(JobError::retry("warehouse API timed out"));
        }
        Ok(ChunkOutput::rows(
            (0..25)
                .map(|i| json!({"page": chunk.spec["page"], "row": i}))
                .collect(),
        ))
    }
}

/// Two weeks of history written by a queue whose clock runs from 14 days ago to the wall
/// clock's now, an hour per step, draining each hour: mail (some retried), webhooks (a CRM
/// outage in the last hours kills many, one endpoint is gone for good), a nightly report.
/// Then a few jobs left waiting and the `reports` queue paused.
pub fn demo_database(path: &Path) -> Demo {
    let now = SystemClock.now_ms();
    let start = (now / HOUR_MS - 14 * 24) * HOUR_MS + 17 * 60_000;
    let clock = ManualClock::new(start);
    let queue = Queue::builder()
        .clock(clock.clone())
        .open(path)
        .expect("demo database");
    let outage = (now - 9 * HOUR_MS, now - 2 * HOUR_MS);
    let c = clock.clone();
    let worker = Worker::builder(&queue)
        .queue("mail", 1)
        .queue("webhooks", 1)
        .handler("send_email", |ctx: &JobContext| {
            if ctx.payload()["flaky"] == json!(true) && ctx.attempt() == 1 {
                return Err(JobError::retry("451 4.7.1 greylisted, try again later"));
            }
            Ok(())
        })
        .handler("deliver_webhook", move |ctx: &JobContext| {
            let url = ctx.payload()["url"].as_str().unwrap_or("");
            // What the job says as it runs: kept with each attempt, shown on its page.
            ctx.log_line(format!("POST {url} (attempt {})", ctx.attempt()));
            if url.contains("old-shop") {
                ctx.log_line("HTTP/1.1 410 Gone: the endpoint was removed; not retrying");
                return Err(JobError::permanent("HTTP 410 Gone").with_status_code(410));
            }
            if (outage.0..outage.1).contains(&c.now()) {
                ctx.log_line("resolved crm.example to 203.0.113.7");
                ctx.log_line("connect to 203.0.113.7:443: connection refused");
                return Err(JobError::retry(
                    "connect error: connection refused (crm.example:443)",
                ));
            }
            ctx.log_line("HTTP/1.1 200 OK in 84 ms");
            Ok(())
        })
        .handler("nightly_report", |_: &JobContext| Ok(()))
        .retry_policy(
            "deliver_webhook",
            RetryPolicy::schedule(vec![HOUR / 2, HOUR, 2 * HOUR]),
        )
        .retry_policy("send_email", RetryPolicy::schedule(vec![HOUR / 4]))
        .report("monthly_sales", Sales);
    let nightly = Periodic::cron(
        "0 2 * * *",
        NewJob::new("nightly_report", json!({"report": "orders"})),
    )
    .expect("cron");
    let scheduler = Scheduler::new(&queue, vec![nightly]).expect("scheduler");
    let mut order = 1000;
    let mut gone_dead = 0;
    while clock.now() < now - HOUR_MS / 2 {
        let hour_of_day = (clock.now() / HOUR_MS) % 24;
        // Busier in the day; more in the last day, so both charts have a shape.
        let base = if (7..22).contains(&hour_of_day) { 6 } else { 2 };
        let recent = clock.now() > now - 26 * HOUR_MS;
        let n = if recent { base * 3 } else { base };
        let mut jobs = Vec::new();
        for i in 0..n {
            order += 1;
            jobs.push(
                NewJob::new(
                    "send_email",
                    json!({"to": format!("user{order}@example.com"), "template": "receipt",
                           "smtp_password": "hunter2", "flaky": i % 17 == 3}),
                )
                .queue("mail"),
            );
            jobs.push(
                NewJob::new(
                    "deliver_webhook",
                    json!({"url": "https://crm.example/hooks/orders", "event": "order.paid",
                           "order_id": order, "signing_secret": "whsec_demo"}),
                )
                .queue("webhooks")
                .max_attempts(4),
            );
        }
        if recent && hour_of_day == 11 {
            jobs.push(
                NewJob::new(
                    "deliver_webhook",
                    json!({"url": "https://old-shop.example/hooks", "event": "order.paid",
                           "order_id": order}),
                )
                .queue("webhooks"),
            );
        }
        let ids = queue.enqueue_batch(jobs).expect("enqueue");
        if recent && hour_of_day == 11 {
            gone_dead = *ids.last().expect("ids");
        }
        if clock.now() / HOUR_MS % 24 == 9 && clock.now() > now - 4 * 24 * HOUR_MS {
            queue
                .request_report("monthly_sales", json!({"month": "2026-11", "chunks": 4}))
                .expect("report");
        }
        scheduler.tick().expect("tick");
        testing::drain(&worker).expect("drain");
        clock.advance(HOUR);
    }
    // A run still in progress: its fourth chunk keeps timing out.
    queue
        .request_report(
            "monthly_sales",
            json!({"month": "2026-12", "chunks": 6, "slow_page": 3}),
        )
        .expect("report");
    testing::drain(&worker).expect("drain");
    // Left waiting: a few mails due now, a delayed one, and reports in a paused queue.
    clock.set(now);
    for i in 0..3 {
        queue
            .enqueue(
                NewJob::new("send_email", json!({"to": format!("late{i}@example.com")}))
                    .queue("mail"),
            )
            .expect("enqueue");
    }
    queue
        .enqueue(
            NewJob::new("send_email", json!({"to": "tomorrow@example.com"}))
                .queue("mail")
                .delay(Duration::from_secs(20 * 3600)),
        )
        .expect("enqueue");
    queue.pause_queue("reports").expect("pause");
    let refused_dead: Vec<i64> = queue
        .dead_jobs(
            &litejobs::JobFilter::new()
                .search("connection refused")
                .limit(1000),
        )
        .expect("dead jobs")
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert!(!refused_dead.is_empty(), "the outage killed webhook jobs");
    assert!(gone_dead > 0, "a job for the gone endpoint");
    Demo {
        refused_dead,
        gone_dead,
    }
}

// ---------------------------------------------------------------------------------------
// A small database with one job in each interesting state, on the test's ManualClock
// ---------------------------------------------------------------------------------------

/// Job ids of [`seed`].
pub struct Seeded {
    pub queued: i64,
    /// Failed once, retry scheduled an hour later.
    pub failed: i64,
    /// Dead with "connect error: connection refused".
    pub dead: i64,
    pub succeeded: i64,
}

/// A worker on `queue` whose `t` handler does what the payload's `do` says.
pub fn scripted_worker(queue: &Queue) -> litejobs::WorkerBuilder {
    Worker::builder(queue)
        .queue("mail", 1)
        .handler("t", |ctx: &JobContext| {
            let error = ctx.payload()["error"]
                .as_str()
                .unwrap_or("connect error: connection refused")
                .to_string();
            match ctx.payload()["do"].as_str() {
                Some("ok") => Ok(()),
                Some("retry") => Err(JobError::retry(error)),
                _ => Err(JobError::permanent(error).with_status_code(503)),
            }
        })
        .retry_policy("t", RetryPolicy::schedule(vec![HOUR]))
}

/// One queued, one failed (retry in an hour), one dead, one succeeded job of type `t`.
pub fn seed(queue: &Queue) -> Seeded {
    let enqueue = |payload: Value| queue.enqueue(NewJob::new("t", payload)).expect("enqueue");
    let succeeded = enqueue(json!({"do": "ok"}));
    let failed = enqueue(json!({"do": "retry", "error": "HTTP 503 from crm"}));
    let dead = enqueue(json!({"do": "dead", "password": "hunter2"}));
    testing::drain(&scripted_worker(queue)).expect("drain");
    let queued = queue
        .enqueue(NewJob::new("t", json!({"do": "ok"})).delay(Duration::from_secs(60)))
        .expect("enqueue");
    Seeded {
        queued,
        failed,
        dead,
        succeeded,
    }
}

/// The job ids linked from a page's tables (`<a href="/jobs/N">#N</a>`), in page order.
pub fn listed_ids(body: &str) -> Vec<i64> {
    body.match_indices("\">#")
        .filter_map(|(i, m)| {
            let rest = &body[i + m.len()..];
            let end = rest.find('<')?;
            rest[..end].parse().ok()
        })
        .collect()
}
