//! `litejobs show ID`: one job, every field, and its whole attempt history (error texts cut
//! to 8 KiB, each attempt's to 2 KiB, with how many bytes were left out; `--json` has them
//! whole).

use std::io::Write;

use litejobs::human::{excerpt, ATTEMPT_ERROR_EXCERPT_BYTES, ERROR_EXCERPT_BYTES};
use litejobs::job_log::AttemptLogRecord;
use litejobs::workflow::WorkflowInfo;
use litejobs::{AttemptRecord, JobRecord, JobStatus};
use serde::Serialize;

use super::workflow_show::waits_text;
use super::{CliError, Ctx, Exit};
use crate::args::IdArgs;
use crate::duration::{ago, human_ms, utc};
use crate::output::{one_line, or_dash, write_json, Table};

#[derive(Serialize)]
struct ShowJson<'a> {
    job: &'a JobRecord,
    attempts: &'a [AttemptRecord],
    /// What each attempt said (secret fields masked).
    logs: &'a [AttemptLogRecord],
}

/// Prints the job (secrets masked) and its attempts.
pub fn run(ctx: &Ctx, args: &IdArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_read_only()?;
    let job = queue
        .job(args.id)?
        .ok_or_else(|| CliError::new(format!("no job with id {}", args.id)))?;
    let job = ctx.masked(&job);
    let attempts = ctx.redactor.mask_attempts(&queue.attempts(args.id)?);
    let logs = ctx.redactor.mask_logs(&queue.attempt_logs(args.id)?);
    if ctx.json {
        write_json(
            out,
            &ShowJson {
                job: &job,
                attempts: &attempts,
                logs: &logs,
            },
        )?;
        return Ok(Exit::Ok);
    }
    let now = queue.now_ms();
    let at = |ms: i64| format!("{} ({})", utc(ms), ago(ms, now));
    let held = job.status == JobStatus::Queued && job.waiting_for > 0;
    let status = if held {
        format!(
            "{}, waiting for {} other job(s) to end",
            job.status, job.waiting_for
        )
    } else {
        job.status.to_string()
    };
    let run_at = if held {
        format!("{}, held until the jobs it waits for end", at(job.run_at))
    } else {
        at(job.run_at)
    };
    let mut fields: Vec<(&str, String)> = vec![
        ("job", format!("{} ({})", job.id, job.job_type)),
        ("queue", job.queue.clone()),
        (
            "status",
            format!(
                "{status} (attempt {} of {})",
                job.attempts, job.max_attempts
            ),
        ),
        ("priority", job.priority.to_string()),
        ("created", at(job.created_at)),
        ("run at", run_at),
    ];
    if let Some(workflow_id) = job.workflow_id {
        let info = queue.workflow(workflow_id)?;
        fields.push(("workflow", workflow_text(workflow_id, &job, info.as_ref())));
        let waits = info
            .as_ref()
            .and_then(|info| Some((info, info.steps.iter().find(|s| s.id == job.id)?)))
            .map(|(info, step)| waits_text(info, step));
        if let Some(waits) = waits.filter(|w| w != "-") {
            fields.push(("waits for", waits));
        }
    }
    if let Some(ms) = job.started_at {
        fields.push(("started", at(ms)));
    }
    if let Some(ms) = job.finished_at {
        fields.push(("finished", at(ms)));
    }
    if let (Some(by), Some(until)) = (&job.locked_by, job.locked_until) {
        // A lease past its end belongs to a worker that died or hung: the reaper makes the
        // job due again.
        let expired = if until < now {
            "; expired: its worker died or hung, and the reaper makes the job due again"
        } else {
            ""
        };
        fields.push((
            "lease",
            format!("held by {by} until {}{expired}", at(until)),
        ));
    }
    if let Some(ms) = job.timeout_ms {
        fields.push(("timeout", human_ms(ms)));
    }
    if let Some(ms) = job.expires_at {
        fields.push(("expires", at(ms)));
    }
    if let Some(key) = &job.idempotency_key {
        fields.push(("idempotency key", key.clone()));
    }
    if let Some(key) = &job.group_key {
        fields.push(("group key", key.clone()));
    }
    // The line that matters first (a traceback's exception line); a longer error follows
    // whole, line by line, after the fields.
    let whole_error = job
        .last_error
        .as_deref()
        .filter(|e| e.trim().contains('\n'));
    if let Some(error) = &job.last_error {
        fields.push(match whole_error {
            Some(_) => ("error", litejobs::human::error_headline(error).into_owned()),
            None => (
                "last error",
                excerpt(error, ERROR_EXCERPT_BYTES).into_owned(),
            ),
        });
    }
    if let Some(code) = job.last_status_code {
        fields.push(("status code", code.to_string()));
    }
    if job.cancelled_by.is_some() || job.cancel_reason.is_some() {
        fields.push((
            "cancelled",
            format!(
                "by {}: {}",
                or_dash(job.cancelled_by.as_deref()),
                or_dash(job.cancel_reason.as_deref())
            ),
        ));
    }
    if let Some(key) = &job.encryption_key {
        let shown = if !queue.keyring().contains(key) {
            "not held here: give it with LITEJOBS_ENCRYPTION_KEYS or --keys-file"
        } else if job.shows_sealed() {
            "a key of that name is held here, but it does not open this job's values"
        } else {
            "shown decrypted"
        };
        fields.push(("encrypted", format!("at rest, with key {key} ({shown})")));
    }
    if let Some(new_id) = job.requeued_as {
        fields.push((
            "requeued",
            format!(
                "as job {new_id} by {} at {}: {}",
                or_dash(job.requeued_by.as_deref()),
                job.requeued_at.map_or_else(|| "-".to_string(), at),
                or_dash(job.requeue_reason.as_deref())
            ),
        ));
    }
    // A row another program wrote with values litejobs cannot use says what is wrong.
    for problem in &job.problems {
        fields.push(("problem", problem.clone()));
    }
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (name, value) in &fields {
        writeln!(out, "{name:<width$}  {}", one_line(value))?;
    }
    if let Some(error) = whole_error {
        writeln!(out, "last error, whole:")?;
        write_block(out, &excerpt(error, ERROR_EXCERPT_BYTES))?;
    }
    write_json_field(out, "payload", Some(&job.payload))?;
    write_json_field(out, "result", job.result.as_ref())?;
    write_json_field(out, "progress", job.progress.as_ref())?;
    writeln!(out)?;
    if attempts.is_empty() {
        if job.attempts == 0 {
            writeln!(out, "no attempt has run")?;
        } else {
            writeln!(
                out,
                "no attempt history (a first-try success is recorded on the job row only)"
            )?;
        }
        write_logs(out, &logs)?;
        return Ok(Exit::Ok);
    }
    writeln!(out, "attempts:")?;
    let mut table = Table::new(&[
        "#>",
        "OUTCOME",
        "FINISHED",
        "DURATION>",
        "CODE>",
        "WORKER",
        "ERROR",
    ]);
    for a in &attempts {
        table.row(vec![
            a.attempt.to_string(),
            a.outcome.to_string(),
            utc(a.finished_at),
            a.duration_ms.map_or_else(|| "-".to_string(), human_ms),
            or_dash(a.status_code),
            or_dash(a.worker.as_deref()),
            // A many-line error by its line that matters (it is whole above, for the latest,
            // and in the attempt's log); one line as it is.
            or_dash(a.error.as_deref().map(|e| {
                let shown = if e.trim().contains('\n') {
                    litejobs::human::error_headline(e)
                } else {
                    std::borrow::Cow::Borrowed(e)
                };
                excerpt(&shown, ATTEMPT_ERROR_EXCERPT_BYTES).into_owned()
            })),
        ]);
    }
    table.write(out)?;
    for a in attempts.iter().filter(|a| !a.problems.is_empty()) {
        writeln!(
            out,
            "problem   attempt {}: {}",
            a.attempt,
            a.problems.join("; ")
        )?;
    }
    write_logs(out, &logs)?;
    Ok(Exit::Ok)
}

/// What each attempt said, line by line, indented.
fn write_logs(out: &mut dyn Write, logs: &[AttemptLogRecord]) -> std::io::Result<()> {
    for log in logs {
        writeln!(out)?;
        let cut = if log.cut_bytes > 0 {
            format!(", its first {} bytes left out", log.cut_bytes)
        } else {
            String::new()
        };
        writeln!(out, "log of attempt {}{cut}:", log.attempt)?;
        write_block(out, &log.text)?;
    }
    Ok(())
}

/// `text` line by line, indented by two spaces, each line's control characters shown.
fn write_block(out: &mut dyn Write, text: &str) -> std::io::Result<()> {
    for line in text.trim_end().lines() {
        writeln!(out, "  {}", one_line(line))?;
    }
    Ok(())
}

fn write_json_field(
    out: &mut dyn Write,
    name: &str,
    value: Option<&serde_json::Value>,
) -> std::io::Result<()> {
    let Some(value) = value else {
        return Ok(());
    };
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    writeln!(out, "{name}:")?;
    for line in text.lines() {
        writeln!(out, "  {line}")?;
    }
    Ok(())
}

/// `workflow 3 (purchase 1042), step ship` or `batch 4 (invoices), member`; the id alone
/// when the workflow is gone.
fn workflow_text(id: i64, job: &JobRecord, info: Option<&WorkflowInfo>) -> String {
    let role = match &job.step {
        Some(step) => format!("step {step}"),
        None => litejobs::workflow::MEMBER_LABEL.to_string(),
    };
    match info {
        Some(info) => format!(
            "{} {id} ({}, {}), {role}",
            info.kind.as_str(),
            info.name,
            info.state()
        ),
        None => format!("{id} (no longer stored), {role}"),
    }
}
