use std::time::Duration;

use litejobs::{Event, JobContext, JobError, JobStatus, NewJob, Queue, Worker};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let queue = Queue::open(dir.path().join("app.db"))?; // creates or migrates; WAL mode
    let events = queue.subscribe();

    let worker = Worker::builder(&queue)
        .handler("send_email", |ctx: &JobContext| -> Result<(), JobError> {
            let user_id = ctx.payload()["user_id"].as_i64().unwrap_or_default();
            println!("sending the welcome email to user {user_id}");
            ctx.set_result(json!({"message_id": format!("<{user_id}@example.com>")}));
            Ok(())
        })
        .concurrency(2)
        .start()?;

    let id = queue.enqueue(NewJob::new("send_email", json!({"user_id": 42})))?;

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
