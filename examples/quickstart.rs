//! The README's 30-second quick start: enqueue jobs, work them, see the outcome.
//!
//! Run it with `cargo run --example quickstart`.

use std::time::Duration;

use litejobs::{Event, JobContext, JobError, JobStatus, NewJob, Queue, Worker};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("litejobs-quickstart-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let queue = Queue::open(dir.join("app.db"))?; // creates or migrates the file; WAL mode
    let events = queue.subscribe();

    // Start a worker: handler threads run jobs as soon as they are enqueued.
    let worker = Worker::builder(&queue)
        .handler("send_email", |ctx: &JobContext| -> Result<(), JobError> {
            let user_id = ctx.payload()["user_id"].as_i64().unwrap_or_default();
            println!(
                "sending the welcome email to user {user_id} (attempt {})",
                ctx.attempt()
            );
            ctx.set_result(json!({"message_id": format!("<{user_id}@example.com>")}));
            Ok(())
        })
        .concurrency(2)
        .start()?;

    // Enqueue: the call returns at once with the job's id.
    let ids = [
        queue.enqueue(NewJob::new("send_email", json!({"user_id": 42})))?,
        queue.enqueue(NewJob::new("send_email", json!({"user_id": 43})).priority(10))?,
    ];

    // Wait for both outcomes through the event stream (no sleeping).
    let mut finished = 0;
    while finished < ids.len() {
        if let Event::Finished { id, status, .. } = events.recv_timeout(Duration::from_secs(10))? {
            println!("job {id} is {status}");
            finished += 1;
        }
    }
    worker.shutdown(Duration::from_secs(5))?;

    for id in ids {
        let job = queue.job(id)?.ok_or("job vanished")?;
        assert_eq!(job.status, JobStatus::Succeeded);
        println!(
            "job {id}: {} after {} attempt(s), result {}",
            job.status,
            job.attempts,
            job.result.unwrap_or_default()
        );
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
