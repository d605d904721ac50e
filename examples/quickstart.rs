use std::time::Duration;

use litejobs::{Event, Job, JobContext, JobError, JobOptions, JobStatus, Perform, Queue, Worker};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The payload is the struct; the job type name and defaults live with it.
#[derive(Serialize, Deserialize)]
struct WelcomeEmail {
    user_id: i64,
}

impl Job for WelcomeEmail {
    const TYPE: &'static str = "send_email";
    fn options() -> JobOptions {
        JobOptions::new().max_attempts(5) // also queue, priority, timeout, retry policy
    }
}

impl Perform for WelcomeEmail {
    fn perform(self, ctx: &JobContext) -> Result<(), JobError> {
        println!("sending the welcome email to user {}", self.user_id);
        ctx.set_result(json!({"message_id": format!("<{}@example.com>", self.user_id)}));
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let queue = Queue::open(dir.path().join("app.db"))?; // creates or migrates; WAL mode
    let events = queue.subscribe();

    let worker = Worker::builder(&queue)
        .register::<WelcomeEmail>()
        .concurrency(2)
        .start()?;

    let id = queue.enqueue(WelcomeEmail { user_id: 42 })?;

    // Wait for the outcome through the event stream (no sleeping).
    while !matches!(events.recv_timeout(Duration::from_secs(10))?,
                    Event::Finished { id: done, .. } if done == id)
    {}
    worker.shutdown(Duration::from_secs(5))?;

    let job = queue.job(id)?.ok_or("job vanished")?;
    assert_eq!(job.status, JobStatus::Succeeded);
    println!("job {id}: {} after {} attempt(s)", job.status, job.attempts);
    Ok(())
}
