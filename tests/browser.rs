//! The dashboard in a real headless browser: Debian's Chromium, driven through
//! chromedriver's WebDriver protocol (plain HTTP on 127.0.0.1, spoken with ureq). It signs
//! in with the token, opens the overview (whose script must run under the strict CSP and
//! refresh the figures), follows the dead jobs to one job, requeues it through the form, and
//! sees the new job queued, on the page and in the database; then opens a workflow whose
//! first step failed, checks its graph is drawn, and follows a box to its job and back.
//! Screenshots of each page go to
//! `target/tmp/browser-screenshots/`; with `LITEJOBS_UPDATE_SCREENSHOT=1` the overview and
//! the dead job's log are also copied to `docs/dashboard.png` and `docs/job-log.png` for the
//! README.
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (`apt-get install chromium
//! chromium-driver`; `.ci/run` installs them). Without them the test fails and says so,
//! unless `LITEJOBS_SKIP_BROWSER=1`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use litejobs::web::{Dashboard, DashboardOptions};
use litejobs::{JobStatus, Queue};
use serde_json::{json, Value};

use crate::support::temp_dir;
use crate::web::demo_database;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The bound of every wait on the browser.
const WAIT: Duration = Duration::from_secs(60);
/// WebDriver's name for an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
const TOKEN: &str = "browser-test-token";

/// chromedriver as a child process, killed when dropped.
struct Driver {
    child: Child,
    base: String,
    agent: ureq::Agent,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    fn start() -> Driver {
        // A free port: bind, read it, let it go for chromedriver.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting chromedriver");
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(WAIT))
            .build()
            .into();
        let driver = Driver {
            child,
            base: format!("http://127.0.0.1:{port}"),
            agent,
        };
        let deadline = Instant::now() + WAIT;
        loop {
            let ready = driver
                .agent
                .get(format!("{}/status", driver.base))
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_json::<Value>().ok())
                .is_some_and(|v| v["value"]["ready"] == json!(true));
            if ready {
                return driver;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver not ready within {WAIT:?}"
            );
            // Nothing to wait on but the port: poll it, bounded by the deadline.
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.try_call(method, path, body)
            .unwrap_or_else(|(status, value)| {
                panic!("WebDriver {method} {path} answered {status}: {value}")
            })
    }

    /// The call's value, or its status and answer when WebDriver refused it.
    fn try_call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, (u16, Value)> {
        let url = format!("{}{path}", self.base);
        let resp = match (method, body) {
            ("GET", _) => self.agent.get(&url).call(),
            ("DELETE", _) => self.agent.delete(&url).call(),
            (_, body) => self.agent.post(&url).send_json(body.unwrap_or(json!({}))),
        };
        let mut resp = resp.unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"));
        let status = resp.status().as_u16();
        let value: Value = resp.body_mut().read_json().unwrap_or(Value::Null);
        if status == 200 {
            Ok(value["value"].clone())
        } else {
            Err((status, value))
        }
    }
}

/// One browser session.
struct Browser<'d> {
    driver: &'d Driver,
    session: String,
    shots: PathBuf,
}

impl Drop for Browser<'_> {
    fn drop(&mut self) {
        let _ = self
            .driver
            .agent
            .delete(format!("{}/session/{}", self.driver.base, self.session))
            .call();
    }
}

impl<'d> Browser<'d> {
    fn open(driver: &'d Driver, profile: &Path, shots: PathBuf) -> Browser<'d> {
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", format!("--user-data-dir={}", profile.display()),
                ],
            },
        }}});
        let value = driver.call("POST", "/session", Some(caps));
        let session = value["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {value}"))
            .to_string();
        let browser = Browser {
            driver,
            session,
            shots,
        };
        browser.post(
            "/timeouts",
            json!({"implicit": 10_000, "pageLoad": 30_000, "script": 10_000}),
        );
        browser.post("/window/rect", json!({"width": 1366, "height": 1000}));
        browser
    }

    fn post(&self, path: &str, body: Value) -> Value {
        self.driver.call(
            "POST",
            &format!("/session/{}{path}", self.session),
            Some(body),
        )
    }

    fn get(&self, path: &str) -> Value {
        self.driver
            .call("GET", &format!("/session/{}{path}", self.session), None)
    }

    fn goto(&self, url: &str) {
        self.post("/url", json!({ "url": url }));
    }

    fn url(&self) -> String {
        self.get("/url").as_str().unwrap_or("").to_string()
    }

    /// The first element matching `css` (WebDriver waits for it up to the implicit wait).
    fn find(&self, css: &str) -> String {
        let value = self.post("/element", json!({"using": "css selector", "value": css}));
        value[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}: {value}"))
            .to_string()
    }

    fn text(&self, css: &str) -> String {
        let id = self.find(css);
        self.get(&format!("/element/{id}/text"))
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    fn click(&self, css: &str) {
        let id = self.find(css);
        self.post(&format!("/element/{id}/click"), json!({}));
    }

    /// The rendered width and height of the first element matching `css`.
    fn size(&self, css: &str) -> (f64, f64) {
        let id = self.find(css);
        let rect = self.get(&format!("/element/{id}/rect"));
        (
            rect["width"].as_f64().unwrap_or(0.0),
            rect["height"].as_f64().unwrap_or(0.0),
        )
    }

    /// How many elements match `css`.
    fn count(&self, css: &str) -> usize {
        let found = self.post("/elements", json!({"using": "css selector", "value": css}));
        found.as_array().map_or(0, Vec::len)
    }

    fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css);
        self.post(&format!("/element/{id}/value"), json!({ "text": text }));
    }

    /// Waits until `ok(current URL)`, bounded by [`WAIT`].
    fn wait_for_url(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let url = self.url();
            if ok(&url) {
                return url;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} within {WAIT:?}; at {url}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The element's text, or `None` while the page is being replaced: the element found
    /// is gone before its text is read ("stale element reference"), or none is there yet.
    fn text_if_there(&self, css: &str) -> Option<String> {
        let session = format!("/session/{}", self.session);
        let answer = |result: Result<Value, (u16, Value)>| -> Option<Value> {
            match result {
                Ok(value) => Some(value),
                Err((status, value)) => {
                    let error = value["value"]["error"].as_str().unwrap_or("");
                    assert!(
                        error == "stale element reference" || error == "no such element",
                        "WebDriver answered {status}: {value}"
                    );
                    None
                }
            }
        };
        let found = answer(self.driver.try_call(
            "POST",
            &format!("{session}/element"),
            Some(json!({"using": "css selector", "value": css})),
        ))?;
        let id = found[ELEMENT].as_str()?.to_string();
        let text = answer(self.driver.try_call(
            "GET",
            &format!("{session}/element/{id}/text"),
            None,
        ))?;
        Some(text.as_str().unwrap_or("").to_string())
    }

    /// Waits until the element's text satisfies `ok`, bounded by [`WAIT`]; a page being
    /// replaced meanwhile is waited out.
    fn wait_for_text(&self, css: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let text = self.text_if_there(css).unwrap_or_default();
            if ok(&text) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} within {WAIT:?}: {text:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Scrolls the page so that the first element matching `css` sits at the top third
    /// of the viewport, with what comes before it still in sight.
    fn scroll_to(&self, css: &str) {
        self.post(
            "/execute/sync",
            json!({
                "script": "const e = document.querySelector(arguments[0]);\
                           window.scrollTo(0, e.getBoundingClientRect().top + window.scrollY \
                           - window.innerHeight / 3);",
                "args": [css],
            }),
        );
    }

    /// Saves a PNG of the viewport as `name`.png and returns its path.
    fn screenshot(&self, name: &str) -> PathBuf {
        let data = self.get("/screenshot");
        let png = base64::engine::general_purpose::STANDARD
            .decode(data.as_str().unwrap_or(""))
            .expect("base64 PNG");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("writing the screenshot");
        path
    }
}

fn skip_requested() -> bool {
    std::env::var("LITEJOBS_SKIP_BROWSER").as_deref() == Ok("1")
}

#[test]
fn requeue_a_dead_job_in_a_real_browser() {
    if skip_requested() {
        eprintln!("browser test skipped: LITEJOBS_SKIP_BROWSER=1");
        return;
    }
    for tool in [CHROMIUM, CHROMEDRIVER] {
        assert!(
            Path::new(tool).exists(),
            "{tool} is missing: install Debian's chromium and chromium-driver \
             (`apt-get install chromium chromium-driver`, as .ci/run does), or set \
             LITEJOBS_SKIP_BROWSER=1 to skip the browser test"
        );
    }
    let dir = temp_dir();
    let db = dir.path().join("shop.db");
    let demo = demo_database(&db);
    let queue = Queue::open(&db).expect("opening the demo database");
    let dashboard = Dashboard::start(
        &queue,
        DashboardOptions::new().addr("127.0.0.1:0").token(TOKEN),
    )
    .expect("starting the dashboard");
    let url = dashboard.url();
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("browser-screenshots");
    std::fs::create_dir_all(&shots).expect("screenshot dir");
    let driver = Driver::start();
    let profile = dir.path().join("chromium-profile");
    let browser = Browser::open(&driver, &profile, shots.clone());

    // Signing in: the token dashboard answers with its form.
    browser.goto(&url);
    assert_eq!(browser.text("h1"), "Sign in");
    browser.type_into("input[name=token]", TOKEN);
    browser.click(".login button");
    // The sign-in form is served at the overview's own address: wait for the page, not the
    // address, which is already there before the form is sent.
    browser.wait_for_text("h1", "the overview", |t| t == "Overview");
    assert_eq!(browser.url(), url);
    // The script runs under the CSP and refreshes the figures from /api/overview.
    browser.wait_for_text("#live-status", "a live update", |t| {
        t.starts_with("live · updated")
    });
    let dead_shown = browser.text(".card-alert .card-value");
    assert_eq!(
        dead_shown,
        queue
            .health(litejobs::defaults::DEFAULT_HEALTH_WINDOW)
            .expect("health")
            .dead
            .to_string()
    );
    let overview = browser.screenshot("overview");

    // The dead jobs, grouped by error, then one of them.
    browser.click("header nav a[href='/dead']");
    browser.wait_for_url("the dead page", |u| u.ends_with("/dead"));
    assert!(browser.text("table.groups").contains("connection refused"));
    browser.screenshot("dead");
    browser.click("table.jobs td a[href^='/jobs/']");
    let job_url = browser.wait_for_url("a job page", |u| u.contains("/jobs/"));
    let dead_id: i64 = job_url
        .rsplit('/')
        .next()
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("a job id in {job_url}"));
    assert!(
        demo.refused_dead.contains(&dead_id) || demo.gone_dead == dead_id,
        "job {dead_id} is one of the dead"
    );
    assert_eq!(browser.text(".page-head .badge"), "dead");
    browser.screenshot("job");
    // What each attempt said, newest first, brought into view for its own screenshot.
    let log = browser.text("pre.job-log");
    assert!(log.starts_with("POST https://"), "{log}");
    browser.scroll_to("pre.job-log");
    let job_log = browser.screenshot("job-log");

    // Requeue it through the form.
    browser.type_into("#requeue-form input[name=reason]", "crm endpoint fixed");
    browser.click("#requeue-form button");
    let new_url = browser.wait_for_url("the new job's page", |u| {
        u.contains("/jobs/") && !u.contains(&format!("/jobs/{dead_id}"))
    });
    let new_id: i64 = new_url
        .split("/jobs/")
        .nth(1)
        .and_then(|rest| rest.split('?').next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("a job id in {new_url}"));
    assert_eq!(browser.text(".page-head .badge"), "queued");
    assert!(browser
        .text(".flash")
        .contains(&format!("Dead job {dead_id} requeued as job {new_id}")));
    browser.screenshot("requeued");
    let old = queue
        .job(dead_id)
        .expect("read")
        .expect("the dead job stays");
    assert_eq!(old.requeued_as, Some(new_id));
    assert_eq!(old.requeue_reason.as_deref(), Some("crm endpoint fixed"));
    assert_eq!(
        queue.job(new_id).expect("read").map(|j| j.status),
        Some(JobStatus::Queued)
    );

    // The overview's Dead card leaves the requeued job out and says so.
    browser.goto(&url);
    let card = browser.text(".card-alert .card-sub");
    assert!(card.starts_with("1 requeued"), "{card}");

    // A workflow whose first step failed: the list, its graph, a box to its job and back.
    let flow = litejobs::Workflow::new("purchase 1042")
        .step(litejobs::Step::new(
            "charge",
            litejobs::NewJob::new("demo_charge", json!({})).queue("orders"),
        ))
        .step(
            litejobs::Step::new(
                "ship",
                litejobs::NewJob::new("demo_ship", json!({})).queue("orders"),
            )
            .after("charge"),
        )
        .step(
            litejobs::Step::new(
                "refund",
                litejobs::NewJob::new("demo_refund", json!({})).queue("orders"),
            )
            .after_any_outcome("charge"),
        );
    let flow = queue.enqueue_workflow(flow).expect("enqueue the workflow");
    let orders = litejobs::Worker::builder(&queue)
        .queue("orders", 1)
        .handler("demo_charge", |_: &litejobs::JobContext| {
            Err(litejobs::JobError::permanent("card declined"))
        })
        .handler("demo_refund", |_: &litejobs::JobContext| Ok(()));
    litejobs::testing::drain(&orders).expect("drain the orders queue");
    let ship = flow.step("ship").expect("ship");
    browser.click("header nav a[href='/workflows']");
    browser.wait_for_url("the workflows page", |u| u.ends_with("/workflows"));
    assert_eq!(browser.text("h1"), "Workflows & batches");
    assert!(browser.text("table.workflows").contains("3 of 3 ended"));
    browser.screenshot("workflows");
    browser.click(&format!(
        "table.workflows a[href='/workflows/{}']",
        flow.workflow_id
    ));
    let flow_url = browser.wait_for_url("the workflow's page", |u| {
        u.ends_with(&format!("/workflows/{}", flow.workflow_id))
    });
    // The graph is drawn: a box per step, a line per wait, with a size on the page.
    assert_eq!(browser.count("svg.flow a.node"), 3);
    assert_eq!(browser.count("svg.flow path.edge"), 2);
    let (w, h) = browser.size("svg.flow");
    assert!(w > 300.0 && h > 50.0, "the graph has a size: {w}x{h}");
    let (w, h) = browser.size(&format!("svg.flow a.node[data-job='{ship}'] rect"));
    assert!(w > 100.0 && h > 20.0, "a box has a size: {w}x{h}");
    browser.screenshot("workflow");
    // A box is a link to its job, whose page links back.
    browser.click(&format!("svg.flow a.node[data-job='{ship}']"));
    browser.wait_for_url("the step's job page", |u| {
        u.ends_with(&format!("/jobs/{ship}"))
    });
    assert_eq!(browser.text(".page-head .badge"), "cancelled");
    browser.click("a.workflow-link");
    browser.wait_for_url("the workflow again", |u| u == flow_url);

    // The other pages, for the record.
    browser.goto(&format!("{url}jobs"));
    assert_eq!(browser.text("h1"), "Jobs");
    browser.screenshot("jobs");
    browser.goto(&format!("{url}schedules"));
    assert!(browser.text("table").contains("nightly_report"));
    browser.screenshot("schedules");
    eprintln!("browser screenshots in {}", shots.display());

    if std::env::var("LITEJOBS_UPDATE_SCREENSHOT").as_deref() == Ok("1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
        std::fs::create_dir_all(&docs).expect("docs dir");
        std::fs::copy(&overview, docs.join("dashboard.png")).expect("copying the screenshot");
        std::fs::copy(&job_log, docs.join("job-log.png")).expect("copying the screenshot");
    }
    drop(browser);
    dashboard.stop();
}
