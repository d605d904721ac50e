//! Email jobs with the development mailer: a welcome email is written as an `.eml`
//! file instead of being sent; enqueueing the same email again (same user, template and
//! event) returns the first job, so it is sent once. For real delivery, use
//! `SmtpMailer::new(&SmtpConfig::from_url("smtp://user:pass@host:587")?)` instead.
//!
//! `cargo run --example email [OUTBOX_DIR]` (default: a `litejobs-email-example` folder in
//! the system's temp dir).

use std::path::PathBuf;
use std::time::Duration;

use litejobs::builtin::email::{self, EmailHandler, EmailJob, FileMailer};
use litejobs::{Event, JobStatus, Queue, Worker};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let outbox = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("litejobs-email-example"));
    let scratch = tempfile::tempdir()?;
    let queue = Queue::open(scratch.path().join("app.db"))?;
    let events = queue.subscribe();
    let worker = Worker::builder(&queue)
        .handler(
            email::JOB_TYPE,
            EmailHandler::new(FileMailer::new(&outbox))
                .default_from("Example App <app@example.com>"),
        )
        .timeout(email::JOB_TYPE, email::DEFAULT_EMAIL_TIMEOUT)
        .start()?;

    let welcome = EmailJob::new("ada@example.com", "Welcome, Ada", "Glad you are here.")
        .html("<p>Glad you are here.</p>")
        .template("welcome", "3")
        .dedupe(42, "signup");
    println!("dedupe key: {}", welcome.dedupe_key().unwrap_or_default());
    let id = welcome.clone().enqueue(&queue)?;
    let again = welcome.enqueue(&queue)?;
    println!("enqueued email job {id}; the same email again gave job {again}");

    loop {
        if let Event::Finished {
            id: done,
            status,
            error,
            ..
        } = events.recv_timeout(Duration::from_secs(30))?
        {
            if done == id {
                println!(
                    "job {id}: {status}{}",
                    error.map(|e| format!(" ({e})")).unwrap_or_default()
                );
                if status.is_final() {
                    break;
                }
            }
        }
    }
    worker.shutdown(Duration::from_secs(10))?;

    let job = queue.job(id)?.ok_or("the job vanished")?;
    if job.status != JobStatus::Succeeded {
        return Err(format!("the email job ended {}", job.status).into());
    }
    let result = job.result.unwrap_or_default();
    println!(
        "message id: {}",
        result["message_id"].as_str().unwrap_or("")
    );
    println!(
        "template: {} v{}",
        result["template"].as_str().unwrap_or(""),
        result["template_version"].as_str().unwrap_or("")
    );
    println!(
        "content hash: {}",
        result["content_hash"].as_str().unwrap_or("")
    );
    println!("{}", result["response"].as_str().unwrap_or(""));
    Ok(())
}
