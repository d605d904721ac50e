//! A worker when its PostgreSQL server goes away and comes back: restarted (`pg_ctl restart
//! -m immediate`), its backends terminated (`pg_terminate_backend`), stopped for a few
//! seconds, out of connection slots (`max_connections` reached), and replaced by a promoted
//! streaming replica behind a two-host URL. Each on a private server
//! (tests/support/pg_server.rs), so the shared test server is never disturbed.
//!
//! Each scenario runs in a child process of its own (this test binary again, as in
//! tests/faults.rs), which captures its log records (a process has one logger). After each
//! fault the child proves: no job lost or run twice and none left running; outcomes of jobs
//! that finished while the server was away are written when it is back; the worker's `LISTEN`
//! connection is back (a job enqueued by another queue starts within a bound far below the
//! worker's 60 s poll interval, so only a notification can have started it); the idle worker
//! is back to its idle cost (its polls and the server's transactions over a window); and the
//! log said so in a few lines (one warning when the outage started, one line when it ended),
//! none holding the password.
//!
//! Every wait is bounded by a deadline; the only sleeps are the fault's own length and the
//! window an idle cost is counted over. Counts, not speeds, are asserted, with bounds far from
//! both the healthy figure and the broken one (a worker that lost its `LISTEN` polled about a
//! thousand times a second).

use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use diesel::sql_types::BigInt;
use diesel::{sql_query, Connection, PgConnection, QueryableByName, RunQueryDsl};
use litejobs::{Event, JobContext, JobError, JobStatus, NewJob, Queue, Worker};
use serde_json::json;

use crate::support::child::{self, ChildProc, Deadline, CHILD_LIFETIME_CAP};
use crate::support::pg_server::{PgServer, ServerRoot, ROOT_VAR};
use crate::support::scripted::{self, Latch};
use crate::support::{process_cpu_time, temp_dir};

/// Each scenario in its child (whose own checks fail first, with their messages), and the
/// parent waiting for it.
const TEST_CAP: Duration = Duration::from_secs(80);
const PARENT_CAP: Duration = Duration::from_secs(100);
/// The worker listens again within this of a fault's end, and says what it must (measured:
/// under a second).
const LISTEN_BOUND: Duration = Duration::from_secs(15);
/// The worker polls this rarely: a prompt pickup can only come from a notification.
const POLL_INTERVAL: Duration = Duration::from_secs(60);
/// A job enqueued by another process starts within this (notified: milliseconds; a worker
/// that waited for its poll: a minute).
const PICKUP_BOUND: Duration = Duration::from_secs(15);
/// How long an idle worker's cost is counted over.
const IDLE_WINDOW: Duration = Duration::from_secs(2);
/// At most this many polls in that window (expected: none; a worker without its `LISTEN`
/// made about 2 000).
const MAX_IDLE_POLLS: u64 = 3;
/// At most this many transactions on the server in that window, the test's own included
/// (expected: a few; two workers without their `LISTEN` made about 3 500).
const MAX_IDLE_XACTS: i64 = 150;
/// Warnings (and errors) a fault may cost in the log: the outage's start, and once more for a
/// connection slot (a worker without back-off logged hundreds a second).
const MAX_WARNINGS_PER_FAULT: usize = 2;
/// The password in the worker's URL (the test servers trust every local connection, so it is
/// never checked): no log line may show it.
const PASSWORD: &str = "s3cr3t-pw";

const JOB_TYPE: &str = "work";

// ---------------------------------------------------------------------------------------
// The child's side: a captured log, a worker, and the checks after a fault
// ---------------------------------------------------------------------------------------

/// Every log record of this (child) process at info or above, also printed to stderr.
struct CaptureLog(Mutex<Sender<(log::Level, String)>>);

impl log::Log for CaptureLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Info
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            let line = format!("{}", record.args());
            eprintln!("{} {line}", record.level());
            let _ = self
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .send((record.level(), line));
        }
    }

    fn flush(&self) {}
}

/// The records logged so far, and a way to wait for one.
struct Logs {
    rx: Receiver<(log::Level, String)>,
    seen: Vec<(log::Level, String)>,
}

impl Logs {
    fn install() -> Logs {
        let (tx, rx) = unbounded();
        log::set_boxed_logger(Box::new(CaptureLog(Mutex::new(tx))))
            .expect("child: installing the log capture");
        log::set_max_level(log::LevelFilter::Info);
        Logs {
            rx,
            seen: Vec::new(),
        }
    }

    /// Where the records from now on start.
    fn mark(&mut self) -> usize {
        self.seen.extend(self.rx.try_iter());
        self.seen.len()
    }

    /// Waits for a record `pick` accepts, logged after `since`.
    fn wait_for(
        &mut self,
        since: usize,
        what: &str,
        within: Duration,
        pick: impl Fn(&str) -> bool,
    ) {
        let deadline = Instant::now() + within;
        loop {
            if self.seen[since.min(self.seen.len())..]
                .iter()
                .any(|(_, line)| pick(line))
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the log did not say {what} within {within:?}"
            );
            if let Ok(record) = self.rx.recv_timeout(Duration::from_millis(100)) {
                self.seen.push(record);
            }
        }
    }

    /// The warnings and errors logged after `since`.
    fn warnings_since(&mut self, since: usize) -> Vec<String> {
        self.mark();
        self.seen[since..]
            .iter()
            .filter(|(level, _)| *level <= log::Level::Warn)
            .map(|(_, line)| line.clone())
            .collect()
    }

    /// Every record logged after `since`.
    fn lines_since(&mut self, since: usize) -> Vec<String> {
        self.mark();
        self.seen[since..].iter().map(|(_, l)| l.clone()).collect()
    }
}

/// A worker on a private server, another queue that enqueues as another process would (its
/// jobs reach the worker by notification only), and what the handler saw.
struct Scene {
    /// The other queue's URL as its messages show it (its outages are its own).
    other_shown: String,
    server: PgServer,
    deadline: Deadline,
    logs: Logs,
    worker: Option<Worker>,
    queue: Queue,
    other: Queue,
    events: Receiver<Event>,
    /// Runs of each job by the handler.
    runs: Arc<Mutex<HashMap<i64, u32>>>,
    /// Holds the handler until opened.
    gate: Latch,
    /// Every job enqueued.
    ids: Vec<i64>,
    /// The database the jobs are in.
    db: String,
}

/// A scene on `server`: the worker on `worker_url` (with a password the server does not
/// check), the other queue as the superuser on `db`; handlers wait for the gate when
/// `gated`.
fn scene(server: PgServer, test: &'static str, worker_url: &str, db: &str, gated: bool) -> Scene {
    let other_url = server.url_for("postgres", db);
    scene_with(server, test, worker_url, &other_url, db, gated)
}

/// [`scene`] with the other queue on `other_url`.
fn scene_with(
    server: PgServer,
    test: &'static str,
    worker_url: &str,
    other_url: &str,
    db: &str,
    gated: bool,
) -> Scene {
    let deadline = Deadline::new(test, TEST_CAP);
    let logs = Logs::install();
    let queue = Queue::builder()
        .application_name("litejobs outage-test")
        .open(worker_url)
        .expect("child: opening the worker's queue");
    let other = Queue::open(other_url).expect("child: opening the other queue");
    let events = queue.subscribe();
    let other_shown = litejobs::redact::mask_url_password(other_url);
    let runs: Arc<Mutex<HashMap<i64, u32>>> = Arc::default();
    let gate = Latch::new();
    if !gated {
        gate.open();
    }
    let (handler_runs, handler_gate) = (Arc::clone(&runs), gate.clone());
    let worker = Worker::builder(&queue)
        .handler(JOB_TYPE, move |ctx: &JobContext| -> Result<(), JobError> {
            *handler_runs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(ctx.id())
                .or_default() += 1;
            if handler_gate.wait(scripted::WAIT) {
                Ok(())
            } else {
                Err(JobError::retry("the test never opened the gate"))
            }
        })
        .concurrency(2)
        .poll_interval(POLL_INTERVAL)
        // Short leases, so a claim whose answer a fault cut off comes back within seconds.
        .default_timeout(Duration::from_secs(15))
        .lease_grace(Duration::from_secs(1))
        .reap_interval(Duration::from_millis(500))
        .start()
        .expect("child: starting the worker");
    Scene {
        other_shown,
        server,
        deadline,
        logs,
        worker: Some(worker),
        queue,
        other,
        events,
        runs,
        gate,
        ids: Vec::new(),
        db: db.to_string(),
    }
}

/// An event a scene waits for.
#[derive(Debug, Clone, Copy)]
enum Want {
    Started(i64),
    Succeeded(i64),
}

impl Want {
    fn is(&self, event: &Event) -> bool {
        match (*self, event) {
            (Want::Started(want), Event::Started { id, .. }) => want == *id,
            (Want::Succeeded(want), Event::Finished { id, status, .. }) => {
                want == *id && *status == JobStatus::Succeeded
            }
            _ => false,
        }
    }
}

#[derive(QueryableByName)]
struct N {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// One number from `sql` on a new superuser connection.
fn number(server: &PgServer, sql: &str) -> i64 {
    number_in(server, "postgres", sql)
}

/// One number from `sql` on a new superuser connection to database `db`.
fn number_in(server: &PgServer, db: &str, sql: &str) -> i64 {
    let mut conn = PgConnection::establish(&server.url_for("postgres", db))
        .unwrap_or_else(|e| panic!("connecting to {db} as postgres: {e}"));
    sql_query(sql)
        .load::<N>(&mut conn)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .first()
        .map_or(0, |r| r.n)
}

/// Transactions the server has counted so far, in every database.
fn transactions(server: &PgServer) -> i64 {
    number(
        server,
        "SELECT sum(xact_commit + xact_rollback)::bigint AS n FROM pg_stat_database",
    )
}

impl Scene {
    fn activity(&self) -> litejobs::WorkerActivity {
        self.worker.as_ref().expect("the worker runs").activity()
    }

    /// Waits until a backend listens for new jobs, at most [`LISTEN_BOUND`] after `fault`.
    fn wait_listening(&self, fault: &str) {
        let bound = Instant::now() + LISTEN_BOUND;
        loop {
            let listening = number(
                &self.server,
                "SELECT count(*) AS n FROM pg_stat_activity WHERE query = 'LISTEN litejobs_jobs'",
            );
            if listening > 0 {
                return;
            }
            assert!(
                Instant::now() < bound,
                "{LISTEN_BOUND:?} after the {fault} no backend of the worker listens for new jobs"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Enqueues `n` jobs through the other queue, retrying while its own stale connections
    /// fail (the first use after a restart may).
    fn enqueue(&mut self, n: usize) -> Vec<i64> {
        let jobs: Vec<NewJob> = (0..n)
            .map(|i| NewJob::new(JOB_TYPE, json!({ "n": self.ids.len() + i })))
            .collect();
        let ids = loop {
            match self.other.enqueue_batch(jobs.clone()) {
                Ok(ids) => break ids,
                Err(e) => {
                    self.deadline
                        .check(|| format!("enqueueing after the fault, still failing: {e}"));
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        };
        self.ids.extend(&ids);
        ids
    }

    /// Waits for every event in `wants`, in any order, each within `within` of the last.
    fn wait_for(&self, within: Duration, what: &str, mut wants: Vec<Want>) {
        while !wants.is_empty() {
            let what = format!("{what} ({wants:?} to come)");
            let hit = scripted::wait_event_within(&self.events, within, &what, |e| {
                wants.iter().position(|w| w.is(e))
            });
            wants.remove(hit);
        }
    }

    /// Waits for `Started` of every job in `ids`, within `within`.
    fn wait_started(&self, ids: &[i64], within: Duration, what: &str) {
        self.wait_for(
            within,
            what,
            ids.iter().map(|&id| Want::Started(id)).collect(),
        );
    }

    /// After a fault that began at log record `mark`: the server is back, the worker listens
    /// and picks up a new job by notification, idles at its usual cost, and logged the outage
    /// in a few lines without the password.
    fn check_recovery(&mut self, mark: usize, fault: &str) {
        self.wait_listening(fault);

        let id = self.enqueue(1)[0];
        let picked = Instant::now();
        self.wait_started(
            &[id],
            PICKUP_BOUND,
            &format!("a job enqueued after the {fault} to start by notification"),
        );
        let picked = picked.elapsed();
        scripted::wait_status(&self.events, id, JobStatus::Succeeded);

        // The idle cost, counted over a window once the pickup's own polls are done.
        let activity = self.activity();
        let (polls, xacts) = (activity.polls(), transactions(&self.server));
        std::thread::sleep(IDLE_WINDOW);
        let polls = activity.polls() - polls;
        let xacts = transactions(&self.server) - xacts;

        let lines = self.logs.lines_since(mark);
        assert!(
            lines.iter().any(|l| l.contains("back after")),
            "the log says when the connection was back: {lines:#?}"
        );
        // The other queue is another process's, which logs its own outages.
        let warnings: Vec<String> = self
            .logs
            .warnings_since(mark)
            .into_iter()
            .filter(|w| !w.contains(&self.other_shown))
            .collect();
        println!(
            "after the {fault}: pickup by notification in {picked:?}; idle over {IDLE_WINDOW:?}: \
             {polls} polls, {xacts} transactions; {} log lines, {} warnings:\n  {}",
            lines.len(),
            warnings.len(),
            lines.join("\n  ")
        );
        assert!(
            polls <= MAX_IDLE_POLLS,
            "after the {fault} the idle worker polled {polls} times in {IDLE_WINDOW:?} (its \
             poll interval is {POLL_INTERVAL:?}): it is not listening, or spins"
        );
        assert!(
            xacts <= MAX_IDLE_XACTS,
            "after the {fault} the server counted {xacts} transactions in {IDLE_WINDOW:?} of \
             an idle worker"
        );
        assert!(
            !warnings.is_empty() && warnings.len() <= MAX_WARNINGS_PER_FAULT,
            "the {fault} should cost one warning or two, not {}: {warnings:#?}",
            warnings.len()
        );
        let port = format!("127.0.0.1:{}", self.server.port());
        assert!(
            warnings.iter().all(|w| w.contains(&port)),
            "each warning names the server: {warnings:#?}"
        );
        assert!(
            lines.iter().all(|l| !l.contains(PASSWORD)),
            "no line shows the password: {lines:#?}"
        );
    }

    /// Every job enqueued ran once and succeeded, and none is left running.
    fn check_jobs(&self) {
        for &id in &self.ids {
            let job = self
                .other
                .job(id)
                .expect("reading a job")
                .unwrap_or_else(|| panic!("job {id} was lost"));
            assert_eq!(
                (job.status, job.attempts),
                (JobStatus::Succeeded, 1),
                "job {id}: one attempt, succeeded"
            );
        }
        let runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        let twice: Vec<_> = runs.iter().filter(|(_, &n)| n != 1).collect();
        assert!(twice.is_empty(), "jobs run more than once: {twice:?}");
        assert_eq!(runs.len(), self.ids.len(), "every job ran");
        let running = number_in(
            &self.server,
            &self.db,
            "SELECT count(*) AS n FROM litejobs.jobs WHERE status = 'running'",
        );
        assert_eq!(running, 0, "no job is left running");
    }

    fn finish(mut self) {
        self.check_jobs();
        self.gate.open();
        if let Some(worker) = self.worker.take() {
            worker
                .shutdown(Duration::from_secs(10))
                .expect("child: graceful shutdown");
        }
        drop(self.queue);
    }
}

/// Waits until the handler ran for `n` jobs.
fn wait_runs(scene: &Scene, n: usize) {
    loop {
        let ran = scene.runs.lock().unwrap_or_else(|p| p.into_inner()).len();
        if ran >= n {
            return;
        }
        scene
            .deadline
            .check(|| format!("waiting for {n} handler runs, {ran} so far"));
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs the child test `test` (role `role`) and waits for it to pass. Its private servers
/// are stopped afterwards whatever happened (a child killed at the cap cannot stop them).
fn run_child(label: &str, test: &str, role: &str) {
    let dir = temp_dir();
    let servers = ServerRoot::new();
    let deadline = Deadline::new("pg outage parent", PARENT_CAP.min(CHILD_LIFETIME_CAP));
    let envs = [(ROOT_VAR, OsString::from(servers.path()))];
    let mut proc = ChildProc::spawn(dir.path(), label, test, role, &envs);
    proc.expect_success(&deadline);
    println!("{}", proc.output());
}

/// A private server, or `None` to skip (only outside CI: see the fixture).
fn private_server(settings: &[&str]) -> Option<PgServer> {
    PgServer::start(settings)
}

fn worker_url(server: &PgServer, user: &str, db: &str) -> String {
    format!(
        "postgres://{user}:{PASSWORD}@127.0.0.1:{}/{db}",
        server.port()
    )
}

// ---------------------------------------------------------------------------------------
// Restart
// ---------------------------------------------------------------------------------------

const RESTART_ROLE: &str = "pg-outage-restart";

#[test]
fn child_restart() {
    if !child::is_child(RESTART_ROLE) {
        return;
    }
    let Some(server) = private_server(&[]) else {
        return;
    };
    let url = worker_url(&server, "postgres", "postgres");
    let mut s = scene(server, "pg restart child", &url, "postgres", true);
    s.wait_listening("start");
    // Two jobs running (held by the gate), four claimed behind them.
    let ids = s.enqueue(6);
    s.wait_started(&ids[..2], scripted::WAIT, "the first jobs to start");

    let mark = s.logs.mark();
    s.server.restart_immediate();
    s.gate.open();
    scripted::wait_all(&s.events, &ids, JobStatus::Succeeded);
    s.check_recovery(mark, "restart");
    s.finish();
}

#[test]
fn after_a_restart_the_idle_worker_listens_again_and_costs_what_it_did() {
    if child::is_child(RESTART_ROLE) {
        return;
    }
    run_child("restart", "postgres::outages::child_restart", RESTART_ROLE);
}

// ---------------------------------------------------------------------------------------
// Terminated backends
// ---------------------------------------------------------------------------------------

const TERMINATE_ROLE: &str = "pg-outage-terminate";

#[test]
fn child_terminated_backends() {
    if !child::is_child(TERMINATE_ROLE) {
        return;
    }
    let Some(server) = private_server(&[]) else {
        return;
    };
    let url = worker_url(&server, "postgres", "postgres");
    let mut s = scene(server, "pg terminate child", &url, "postgres", false);
    s.wait_listening("start");
    let ids = s.enqueue(4);
    scripted::wait_all(&s.events, &ids, JobStatus::Succeeded);
    for round in 1..=2 {
        let mark = s.logs.mark();
        let killed = number(
            &s.server,
            "SELECT count(pg_terminate_backend(pid))::bigint AS n FROM pg_stat_activity \
             WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
        );
        assert!(
            killed >= 2,
            "the worker's backends were terminated ({killed})"
        );
        s.check_recovery(
            mark,
            &format!("termination of every backend (round {round})"),
        );
    }
    s.finish();
}

#[test]
fn after_its_backends_are_terminated_the_worker_listens_again() {
    if child::is_child(TERMINATE_ROLE) {
        return;
    }
    run_child(
        "terminate",
        "postgres::outages::child_terminated_backends",
        TERMINATE_ROLE,
    );
}

// ---------------------------------------------------------------------------------------
// Stopped for a few seconds
// ---------------------------------------------------------------------------------------

const STOPPED_ROLE: &str = "pg-outage-stopped";
/// How long the server stays down.
const DOWN_FOR: Duration = Duration::from_secs(3);

#[test]
fn child_stopped() {
    if !child::is_child(STOPPED_ROLE) {
        return;
    }
    let Some(server) = private_server(&[]) else {
        return;
    };
    let url = worker_url(&server, "postgres", "postgres");
    let mut s = scene(server, "pg stopped child", &url, "postgres", true);
    s.wait_listening("start");
    let ids = s.enqueue(4);
    s.wait_started(&ids[..2], scripted::WAIT, "the first jobs to start");

    let mark = s.logs.mark();
    s.server.stop();
    let (down_at, cpu_at) = (Instant::now(), process_cpu_time());
    let polls_at = s.activity().polls();
    // Every job finishes while the server is away: four outcomes wait to be written.
    s.gate.open();
    wait_runs(&s, ids.len());
    std::thread::sleep(DOWN_FOR.saturating_sub(down_at.elapsed()));
    let (down, cpu) = (down_at.elapsed(), process_cpu_time() - cpu_at);
    let polls = s.activity().polls() - polls_at;
    println!("server down for {down:?}: {cpu:?} of CPU, {polls} polls");
    assert!(
        cpu < down / 4,
        "while the server was down the worker used {cpu:?} of CPU in {down:?}: it spins"
    );

    s.server.start_again();
    // A job enqueued right after the start begins by notification (the LISTEN is back), and
    // the outcomes kept while the server was down are written.
    let id = s.enqueue(1)[0];
    let mut wants = vec![Want::Started(id), Want::Succeeded(id)];
    wants.extend(ids.iter().map(|&id| Want::Succeeded(id)));
    s.wait_for(
        PICKUP_BOUND,
        "a job enqueued right after the server started again to start by notification, and \
         the kept outcomes to be written",
        wants,
    );
    s.check_recovery(mark, "stop of a few seconds");
    s.finish();
}

#[test]
fn while_the_server_is_stopped_the_worker_waits_quietly_and_keeps_its_outcomes() {
    if child::is_child(STOPPED_ROLE) {
        return;
    }
    run_child("stopped", "postgres::outages::child_stopped", STOPPED_ROLE);
}

// ---------------------------------------------------------------------------------------
// No connection slot
// ---------------------------------------------------------------------------------------

const SLOTS_ROLE: &str = "pg-outage-slots";
/// The private server's connection slots, and those kept for superusers.
const MAX_CONNECTIONS: i64 = 12;
const RESERVED: i64 = 3;

/// Connections of another client (role `hog`) until every slot left to non-superusers is
/// taken. The worker's refused tries hold a slot for a moment, so a refusal is taken for
/// "full" only when the server counts no slot free but the reserved ones.
fn take_every_slot(server: &PgServer, deadline: &Deadline) -> Vec<PgConnection> {
    let mut hog = Vec::new();
    loop {
        match PgConnection::establish(&server.url_for("hog", "jobs")) {
            Ok(conn) => hog.push(conn),
            Err(e) if e.to_string().contains("slots are reserved") => {
                // The counting connection is a superuser's, in a reserved slot.
                let used = number(
                    server,
                    "SELECT count(*) AS n FROM pg_stat_activity WHERE backend_type = 'client backend'",
                ) - 1;
                if MAX_CONNECTIONS - used <= RESERVED {
                    return hog;
                }
                deadline.check(|| format!("taking every slot: {used} used, refused: {e}"));
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("the other client could not connect: {e}"),
        }
    }
}

#[test]
fn child_no_connection_slot() {
    if !child::is_child(SLOTS_ROLE) {
        return;
    }
    let settings = [
        &format!("max_connections={MAX_CONNECTIONS}")[..],
        &format!("superuser_reserved_connections={RESERVED}")[..],
    ];
    let Some(server) = private_server(&settings) else {
        return;
    };
    server.exec("CREATE ROLE app LOGIN; CREATE ROLE hog LOGIN");
    server.exec("CREATE DATABASE jobs OWNER app");
    let url = worker_url(&server, "app", "jobs");
    let mut s = scene(server, "pg slots child", &url, "jobs", false);
    s.wait_listening("start");
    let ids = s.enqueue(2);
    scripted::wait_all(&s.events, &ids, JobStatus::Succeeded);

    // The worker is shut out (it may not log in, its backends are terminated) while another
    // client takes every slot; then it may log in again, but finds no slot.
    let mark = s.logs.mark();
    s.server.exec("ALTER ROLE app NOLOGIN");
    let killed = number(
        &s.server,
        "SELECT count(pg_terminate_backend(pid))::bigint AS n FROM pg_stat_activity \
         WHERE usename = 'app'",
    );
    assert!(
        killed >= 2,
        "the worker's backends were terminated ({killed})"
    );
    let hog = take_every_slot(&s.server, &s.deadline);
    s.server.exec("ALTER ROLE app LOGIN");
    s.logs.wait_for(
        mark,
        "that the worker has no connection slot",
        LISTEN_BOUND,
        |line| line.contains("has no connection slot") && line.contains("max_connections"),
    );
    #[cfg(feature = "cli")]
    check_work_refused_for_want_of_a_slot(&url, &s.deadline);

    // The other client leaves: the worker is back without a restart.
    drop(hog);
    s.check_recovery(mark, "shortage of connection slots");
    let said = s
        .logs
        .warnings_since(mark)
        .iter()
        .filter(|w| w.contains("no connection slot"))
        .count();
    assert_eq!(said, 1, "the missing slot is told once");
    s.finish();
}

/// `litejobs work` started while no slot is free says so, in one line, and exits 2.
#[cfg(feature = "cli")]
fn check_work_refused_for_want_of_a_slot(url: &str, deadline: &Deadline) {
    let mut work = crate::support::KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_litejobs"))
            .args(["--db", url, "work", "--exec", "work=true"])
            .env_remove("RUST_LOG")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("starting litejobs work"),
    );
    let status = loop {
        if let Some(status) = work.try_wait().expect("waiting for litejobs work") {
            break status;
        }
        deadline.check(|| "waiting for litejobs work to refuse to start".to_string());
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(work.stderr.as_mut().expect("piped stderr"), &mut stderr)
        .expect("reading its stderr");
    println!("litejobs work without a slot: {status}: {stderr}");
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no connection slot") && stderr.contains("max_connections"),
        "it says why: {stderr}"
    );
    assert!(!stderr.contains(PASSWORD), "no password: {stderr}");
}

#[test]
fn a_worker_without_a_connection_slot_says_so_once_and_comes_back() {
    if child::is_child(SLOTS_ROLE) {
        return;
    }
    run_child(
        "slots",
        "postgres::outages::child_no_connection_slot",
        SLOTS_ROLE,
    );
}

// ---------------------------------------------------------------------------------------
// Failover to a promoted replica behind a two-host URL
// ---------------------------------------------------------------------------------------

const FAILOVER_ROLE: &str = "pg-outage-failover";

#[derive(QueryableByName)]
struct Lsn {
    #[diesel(sql_type = diesel::sql_types::Text)]
    lsn: String,
}

/// Waits until `replica` has replayed everything `primary` wrote so far (so that a failover
/// loses nothing: with asynchronous replication, what it has not replayed is lost with the
/// primary).
fn wait_replayed(primary: &PgServer, replica: &PgServer, deadline: &Deadline) {
    let mut conn = primary.admin();
    let rows: Vec<Lsn> = sql_query("SELECT pg_current_wal_lsn()::text AS lsn")
        .load(&mut conn)
        .expect("reading the primary's position");
    let lsn = &rows.first().expect("one row").lsn;
    loop {
        let behind = number(
            replica,
            &format!(
                "SELECT greatest(pg_wal_lsn_diff('{lsn}', pg_last_wal_replay_lsn()), 0)::bigint \
                 AS n"
            ),
        );
        if behind == 0 {
            return;
        }
        deadline.check(|| {
            format!("waiting for the replica to replay up to {lsn} ({behind} bytes behind)")
        });
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn child_failover() {
    if !child::is_child(FAILOVER_ROLE) {
        return;
    }
    let Some(primary) = private_server(&[]) else {
        return;
    };
    let mut replica = primary.replica();
    let hosts = format!("127.0.0.1:{},127.0.0.1:{}", primary.port(), replica.port());
    let worker =
        format!("postgres://postgres:{PASSWORD}@{hosts}/postgres?target_session_attrs=read-write");
    let other = format!("postgres://postgres@{hosts}/postgres?target_session_attrs=read-write");
    let mut s = scene_with(
        primary,
        "pg failover child",
        &worker,
        &other,
        "postgres",
        true,
    );
    s.wait_listening("start");
    // Two jobs running (held by the gate), four claimed behind them; all of it replicated.
    let ids = s.enqueue(6);
    s.wait_started(&ids[..2], scripted::WAIT, "the first jobs to start");
    wait_replayed(&s.server, &replica, &s.deadline);

    let mark = s.logs.mark();
    s.server.stop();
    replica.promote();
    // From now on the promoted replica is the server; the old primary stays down.
    std::mem::swap(&mut s.server, &mut replica);
    s.gate.open();
    scripted::wait_all(&s.events, &ids, JobStatus::Succeeded);
    s.check_recovery(mark, "failover");
    s.finish();
    drop(replica);
}

#[test]
fn after_a_failover_to_a_promoted_replica_the_worker_goes_on_there() {
    if child::is_child(FAILOVER_ROLE) {
        return;
    }
    run_child(
        "failover",
        "postgres::outages::child_failover",
        FAILOVER_ROLE,
    );
}
