//! A job's details in `top` (Enter on the Jobs panel): what `show` tells first — the job,
//! its payload with secrets masked, its whole last error, its attempts — as lines for a
//! window over the screen. Every line goes through [`one_line`], so no control character
//! another program wrote reaches the terminal.

use litejobs::human::{duration_ms, error_headline, utc};
use litejobs::redact::Redactor;
use litejobs::Queue;

use crate::output::one_line;

/// How many lines of the last error are shown; `show ID` has the rest.
const ERROR_LINES: usize = 40;

/// The lines of job `id`'s details.
pub fn lines(queue: &Queue, redactor: &Redactor, id: i64) -> Result<Vec<String>, String> {
    let job = queue
        .job(id)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("job {id} is gone (pruned or discarded)"))?;
    let attempts = queue.attempts(id).map_err(|e| e.to_string())?;
    let job = redactor.mask_job(&job);
    let attempts = redactor.mask_attempts(&attempts);
    let mut out = vec![
        format!(
            "{} in queue {}: {}, attempt {} of {}",
            one_line(&job.job_type),
            one_line(&job.queue),
            job.status.as_str(),
            job.attempts,
            job.max_attempts
        ),
        format!(
            "created {}, runs at {}",
            utc(job.created_at),
            utc(job.run_at)
        ),
    ];
    if let (Some(worker), Some(until)) = (&job.locked_by, job.locked_until) {
        out.push(format!(
            "claimed by {} at {}, its lease until {}",
            one_line(worker),
            job.started_at.map(utc).unwrap_or_default(),
            utc(until)
        ));
    }
    out.push(String::new());
    out.push(format!("payload  {}", one_line(&job.payload.to_string())));
    if let Some(error) = &job.last_error {
        out.push(String::new());
        out.push(format!("last error  {}", one_line(&error_headline(error))));
        let all: Vec<&str> = error.lines().collect();
        out.extend(
            all.iter()
                .take(ERROR_LINES)
                .map(|l| format!("  {}", one_line(l))),
        );
        if all.len() > ERROR_LINES {
            out.push(format!(
                "  … {} lines more: `litejobs show {id}`",
                all.len() - ERROR_LINES
            ));
        }
    }
    if !attempts.is_empty() {
        out.push(String::new());
        out.push("attempts".to_string());
    }
    for a in &attempts {
        let error = a
            .error
            .as_deref()
            .map(|e| one_line(&error_headline(e)))
            .unwrap_or_default();
        out.push(format!(
            "  {:>2}  {:<10} {}  {:>8}  {error}",
            a.attempt,
            a.outcome.as_str(),
            utc(a.finished_at),
            a.duration_ms.map(duration_ms).unwrap_or_default()
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use litejobs::{testing, JobContext, JobError, NewJob, Worker};

    #[test]
    fn details_mask_secrets_and_give_the_whole_error_and_the_attempts() {
        let queue = Queue::open_in_memory().expect("queue");
        let id = queue
            .enqueue(
                NewJob::new("sync", serde_json::json!({"password": "hunter2", "n": 7}))
                    .max_attempts(1),
            )
            .expect("enqueue");
        let builder = Worker::builder(&queue).handler("sync", |_: &JobContext| {
            Err(JobError::permanent(
                "Traceback (most recent call last):\n  File \"x.py\"\nConnectionError: \u{1b}[2Jrefused",
            ))
        });
        testing::drain(&builder).expect("drain");
        let lines = lines(&queue, &Redactor::new(), id).expect("details");
        let text = lines.join("\n");
        assert!(
            text.contains("sync in queue default: dead, attempt 1 of 1"),
            "{text}"
        );
        assert!(
            !text.contains("hunter2") && text.contains("\"n\":7"),
            "{text}"
        );
        assert!(
            text.contains("last error  ConnectionError: \\u{1b}[2Jrefused"),
            "{text}"
        );
        assert!(
            text.contains("  Traceback (most recent call last):"),
            "{text}"
        );
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(
            lines.iter().any(|l| l.trim_start().starts_with("1  failed")
                || l.trim_start().starts_with("1  dead")),
            "{text}"
        );
        assert!(super::lines(&queue, &Redactor::new(), id + 1).is_err());
    }
}
