//! `litejobs work` says what happened to each attempt, once, the same way whatever ran it
//! (a built-in kind, an `--exec` command, a `--serve` process): the job's id, type and
//! attempt, the outcome, and for a failure the line of its error that says most. The whole
//! error stays on the job (`litejobs show ID`).

use litejobs::{Event, JobStatus, Queue};

/// The longest error line logged; a longer one is cut, marked with "…".
const ERROR_LINE_CHARS: usize = 200;

/// Logs every outcome the worker of this process writes, on a thread of its own that
/// ends with the queue: info for a success, a cancel or a job due again (snoozed or
/// released), warn for a failure that will be retried, error for a dead job.
pub fn log_outcomes(queue: &Queue) {
    let events = queue.subscribe();
    let spawned = std::thread::Builder::new()
        .name("litejobs-outcomes".into())
        .spawn(move || {
            for event in events.iter() {
                if let (
                    Some((level, line)),
                    Event::Finished {
                        id,
                        job_type,
                        queue,
                        attempt,
                        ..
                    },
                ) = (outcome_line(&event), &event)
                {
                    log::log!(
                        level,
                        job_id = *id,
                        job_type = job_type.as_str(),
                        queue = queue.as_str(),
                        attempt = *attempt;
                        "{line}"
                    );
                }
            }
        });
    if let Err(e) = spawned {
        log::warn!("litejobs work: outcomes will not be logged: {e}");
    }
}

/// The level and line for an outcome event; nothing for other events.
fn outcome_line(event: &Event) -> Option<(log::Level, String)> {
    let Event::Finished {
        id,
        job_type,
        attempt,
        status,
        error,
        ..
    } = event
    else {
        return None;
    };
    let job = format!("litejobs work: job {id} ({job_type}) attempt {attempt}");
    let because = error
        .as_deref()
        .map(|e| format!(": {}", error_line(e)))
        .unwrap_or_default();
    Some(match status {
        JobStatus::Succeeded => (log::Level::Info, format!("{job} succeeded")),
        JobStatus::Failed => (
            log::Level::Warn,
            format!("{job} failed, to be retried{because}"),
        ),
        JobStatus::Dead => (log::Level::Error, format!("{job} failed, dead{because}")),
        JobStatus::Cancelled => (log::Level::Info, format!("{job} cancelled{because}")),
        JobStatus::Queued => (
            log::Level::Info,
            format!("{job} back in the queue (snoozed, or given back at shutdown): due again"),
        ),
        JobStatus::Running => (log::Level::Info, format!("{job} running{because}")),
    })
}

/// The line of an error that says most, as lists and error groups show it
/// ([`litejobs::human::error_headline`]: a traceback's exception line, a command's `exit N`
/// in front), control characters escaped, cut at [`ERROR_LINE_CHARS`].
fn error_line(error: &str) -> String {
    let line = litejobs::human::error_headline(error);
    let line = line.trim();
    let mut shown = String::with_capacity(line.len());
    for c in line.chars() {
        if c.is_control() {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    if shown.chars().count() > ERROR_LINE_CHARS {
        let cut: String = shown.chars().take(ERROR_LINE_CHARS).collect();
        format!("{cut}…")
    } else {
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(status: JobStatus, error: Option<&str>) -> Event {
        Event::Finished {
            id: 7,
            job_type: "resize".into(),
            queue: "default".into(),
            attempt: 2,
            status,
            error: error.map(str::to_string),
        }
    }

    #[test]
    fn each_outcome_is_one_line_with_the_job_its_attempt_and_the_error_s_last_line() {
        let traceback = "starting up\nTraceback (most recent call last):\n  File \"x.py\", line 3\nConnectionError: refused\n\n";
        assert_eq!(
            outcome_line(&finished(JobStatus::Failed, Some(traceback))),
            Some((
                log::Level::Warn,
                "litejobs work: job 7 (resize) attempt 2 failed, to be retried: ConnectionError: refused"
                    .to_string()
            ))
        );
        assert_eq!(
            outcome_line(&finished(JobStatus::Dead, Some("bad input\tx"))),
            Some((
                log::Level::Error,
                "litejobs work: job 7 (resize) attempt 2 failed, dead: bad input\\tx".to_string()
            ))
        );
        assert_eq!(
            outcome_line(&finished(JobStatus::Succeeded, None)).map(|(l, _)| l),
            Some(log::Level::Info)
        );
        assert_eq!(outcome_line(&Event::Reaped { count: 1 }), None);
    }

    #[test]
    fn a_long_error_line_is_cut_and_marked() {
        let long = "é".repeat(ERROR_LINE_CHARS + 5);
        let shown = error_line(&long);
        assert_eq!(shown.chars().count(), ERROR_LINE_CHARS + 1);
        assert!(shown.ends_with('…'));
        assert!(shown.starts_with("éé"), "{shown}");
    }
}
