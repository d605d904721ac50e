//! The main story: a user signs up. The user row and a small workflow commit in one
//! transaction: "account" creates the user's account, then "welcome" (an email) and "crm" (a
//! webhook) run once it has succeeded, each reading the account id "account" returned, and
//! a nightly-report entry runs beside them. The CRM endpoint is down, so its job retries with
//! backoff and goes dead while the email succeeds; then the endpoint is fixed, a person
//! requeues the dead job, and it succeeds.
//!
//! Run it with `cargo run --example signup`. The CRM is a tiny HTTP server on 127.0.0.1.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use litejobs::{
    Event, JobContext, JobError, JobStatus, NewJob, Queue, RetryPolicy, Step, Worker, Workflow,
};
use serde_json::{json, Value};

/// The account id the "account" step returned, as a step that waited for it reads it.
fn account_id(ctx: &JobContext) -> Result<i64, JobError> {
    let result = ctx
        .dependency_result("account")
        .map_err(|e| JobError::retry(e.to_string()))?;
    result
        .as_ref()
        .and_then(|r| r["account_id"].as_i64())
        .ok_or_else(|| JobError::permanent("the account step returned no account_id"))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("litejobs-signup-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let db_path = dir.join("app.db");
    let queue = Queue::open(&db_path)?;
    let events = queue.subscribe();

    // The application's own tables live in the same file.
    let mut app = rusqlite::Connection::open(&db_path)?;
    app.busy_timeout(Duration::from_secs(5))?;
    app.execute_batch(
        "CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT NOT NULL);
         CREATE TABLE accounts (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL UNIQUE);
         CREATE TABLE report_entries (user_id INTEGER NOT NULL, day TEXT NOT NULL);",
    )?;

    let crm_up = Arc::new(AtomicBool::new(false));
    let crm_url = start_crm(Arc::clone(&crm_up))?;

    // 1. Sign-up: the user and its workflow commit together, or not at all.
    let tx = app.transaction()?;
    tx.execute("INSERT INTO users (email) VALUES (?1)", ["ada@example.com"])?;
    let user_id = tx.last_insert_rowid();
    let user = json!({"user_id": user_id});
    let signup = Workflow::new(format!("signup of user {user_id}"))
        .step(Step::new(
            "account",
            NewJob::new("create_account", user.clone()),
        ))
        // These two wait for "account" to succeed.
        .step(
            Step::new(
                "welcome",
                NewJob::new("send_welcome_email", user.clone()).queue("mail"),
            )
            .after("account"),
        )
        .step(
            Step::new(
                "crm",
                NewJob::new("crm_webhook", user.clone())
                    .queue("webhooks")
                    .max_attempts(3)
                    .idempotency_key(format!("crm:user:{user_id}:created")),
            )
            .after("account"),
        )
        .step(Step::new(
            "report",
            NewJob::new("nightly_report_entry", user),
        ));
    let flow = queue.enqueue_workflow_in(&tx, signup)?;
    tx.commit()?;
    queue.notify(); // wake the workers now instead of at the next poll
    let step = |name: &str| flow.step(name).unwrap_or_default();
    println!(
        "user {user_id} signed up; workflow {} committed with it: account (job {}), then \
         welcome (job {}) and crm (job {}); report (job {})",
        flow.workflow_id,
        step("account"),
        step("welcome"),
        step("crm"),
        step("report")
    );

    // 2. The worker: one queue per kind of job, so a slow CRM never delays email.
    let app_db = db_path.clone();
    let report_db = db_path.clone();
    let worker = Worker::builder(&queue)
        .handler(
            "create_account",
            move |ctx: &JobContext| -> Result<(), JobError> {
                let user_id = ctx.payload()["user_id"].as_i64().unwrap_or_default();
                let conn = rusqlite::Connection::open(&app_db)?;
                conn.busy_timeout(Duration::from_secs(5))?;
                // Idempotent: a retried attempt finds the account the first one made.
                conn.execute(
                    "INSERT INTO accounts (id, user_id) VALUES (1000 + ?1, ?1) ON CONFLICT DO NOTHING",
                    [user_id],
                )?;
                let id: i64 = conn.query_row(
                    "SELECT id FROM accounts WHERE user_id = ?1",
                    [user_id],
                    |r| r.get(0),
                )?;
                ctx.set_result(json!({"account_id": id}));
                Ok(())
            },
        )
        .handler(
            "send_welcome_email",
            |ctx: &JobContext| -> Result<(), JobError> {
                let account = account_id(ctx)?;
                println!("  welcome email for account {account}");
                ctx.set_result(json!({"message_id": format!("<welcome-{account}@example.com>")}));
                Ok(())
            },
        )
        .handler(
            "crm_webhook",
            move |ctx: &JobContext| -> Result<(), JobError> {
                let mut body: Value = ctx.payload().clone();
                body["account_id"] = json!(account_id(ctx)?);
                body["event"] = json!("user.created");
                match ureq::post(&crm_url).send_json(&body) {
                    Ok(response) => {
                        ctx.set_result(json!({"status": response.status().as_u16()}));
                        Ok(())
                    }
                    Err(ureq::Error::StatusCode(code)) => {
                        Err(JobError::retry(format!("CRM answered {code}")).with_status_code(code))
                    }
                    Err(e) => Err(JobError::retry(format!("CRM unreachable: {e}"))),
                }
            },
        )
        .handler(
            "nightly_report_entry",
            move |ctx: &JobContext| -> Result<(), JobError> {
                let conn = rusqlite::Connection::open(&report_db)?;
                conn.busy_timeout(Duration::from_secs(5))?;
                conn.execute(
                    "INSERT INTO report_entries (user_id, day) VALUES (?1, date('now'))",
                    [ctx.payload()["user_id"].as_i64().unwrap_or_default()],
                )?;
                Ok(())
            },
        )
        .queue("mail", 1)
        .queue("webhooks", 1)
        .concurrency(1)
        // Short backoff so the story fits in a second; production would use minutes.
        .retry_policy(
            "crm_webhook",
            RetryPolicy::schedule(vec![Duration::from_millis(200), Duration::from_millis(400)]),
        )
        .start()?;

    // 3. Watch: the account, the email and the report entry succeed, the CRM job fails and
    // goes dead.
    let crm_job = step("crm");
    let mut settled = 0;
    while settled < 4 {
        if let Event::Finished {
            id,
            job_type,
            attempt,
            status,
            error,
            ..
        } = events.recv_timeout(Duration::from_secs(30))?
        {
            let why = error.map(|e| format!(" ({e})")).unwrap_or_default();
            println!("job {id} {job_type} attempt {attempt}: {status}{why}");
            if status.is_final() {
                settled += 1;
            }
        }
    }
    let dead = queue.job(crm_job)?.ok_or("CRM job missing")?;
    assert_eq!(dead.status, JobStatus::Dead);
    println!(
        "CRM job {crm_job} is dead after {} attempts; last error: {}",
        dead.attempts,
        dead.last_error.as_deref().unwrap_or("-")
    );
    for attempt in queue.attempts(crm_job)? {
        println!(
            "  attempt {}: {} {} {}",
            attempt.attempt,
            attempt.outcome,
            attempt
                .status_code
                .map(|c| c.to_string())
                .unwrap_or_default(),
            attempt.error.unwrap_or_default()
        );
    }

    // 4. The CRM is fixed; a person requeues the dead job. It gets a new id and succeeds.
    crm_up.store(true, Ordering::SeqCst);
    let new_id = queue.requeue_dead(crm_job, "ops@example.com", "CRM is back up")?;
    println!("requeued dead job {crm_job} as job {new_id}");
    loop {
        if let Event::Finished { id, status, .. } = events.recv_timeout(Duration::from_secs(30))? {
            if id == new_id {
                println!("job {new_id} crm_webhook: {status}");
                assert_eq!(status, JobStatus::Succeeded);
                break;
            }
        }
    }
    let old = queue.job(crm_job)?.ok_or("dead job missing")?;
    println!(
        "dead job {crm_job} stays dead, requeued by {} as job {} ({})",
        old.requeued_by.as_deref().unwrap_or("-"),
        old.requeued_as.unwrap_or_default(),
        old.requeue_reason.as_deref().unwrap_or("-")
    );
    let entries: i64 = app.query_row("SELECT COUNT(*) FROM report_entries", [], |r| r.get(0))?;
    println!("nightly report entries: {entries}");
    // The workflow as `litejobs workflow show` reads it: the requeued job took the dead
    // one's step.
    let info = queue
        .workflow(flow.workflow_id)?
        .ok_or("the workflow vanished")?;
    let steps: Vec<String> = info
        .steps
        .iter()
        .map(|s| format!("{} {}", s.step.as_deref().unwrap_or("-"), s.status))
        .collect();
    println!("workflow {}: {}", info.id, steps.join(", "));

    worker.shutdown(Duration::from_secs(5))?;
    drop(app);
    std::fs::remove_dir_all(&dir)?;
    println!("done");
    Ok(())
}

/// A stand-in CRM on 127.0.0.1: answers 503 while down, 200 once up.
fn start_crm(up: Arc<AtomicBool>) -> std::io::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://{}/hooks/users", listener.local_addr()?);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(&stream);
            let mut length = 0usize;
            let mut line = String::new();
            while reader.read_line(&mut line).map(|n| n > 2).unwrap_or(false) {
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let status = if up.load(Ordering::SeqCst) {
                "200 OK"
            } else {
                "503 Service Unavailable"
            };
            let _ = (&stream).write_all(
                format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .as_bytes(),
            );
        }
    });
    Ok(url)
}
