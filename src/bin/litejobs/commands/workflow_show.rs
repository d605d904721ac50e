//! `litejobs workflow show ID`: a workflow or batch, each job after the jobs it waits for
//! (indented by depth), with its status, its waits (✓ done, ✗ failed, … pending), its last
//! error (secrets masked) and why it was cancelled. `--json` prints the
//! [`WorkflowInfo`] (errors masked). Also what `show` says of a job's workflow.

use std::io::Write;

use litejobs::workflow::{WaitInfo, WaitState, WorkflowInfo, WorkflowStep};

use super::workflow::counts_text;
use super::{CliError, Ctx, Exit};
use crate::duration::{ago, utc};
use crate::output::{clip, one_line, write_json, Table};

/// Waits listed one by one up to this many; more are counted.
const WAITS_LISTED: usize = 6;

/// Prints the workflow or batch `id`.
pub fn run(ctx: &Ctx, id: i64, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_read_only()?;
    let info = queue
        .workflow(id)?
        .ok_or_else(|| CliError::new(format!("no workflow or batch with id {id}")))?
        .masked(&ctx.redactor);
    if ctx.json {
        write_json(out, &info)?;
        return Ok(Exit::Ok);
    }
    let now = queue.now_ms();
    let at = |ms: i64| format!("{} ({})", utc(ms), ago(ms, now));
    let held = info.steps.iter().filter(|s| s.is_held()).count();
    let held = if held > 0 {
        format!("; {held} waiting for other jobs")
    } else {
        String::new()
    };
    let mut fields: Vec<(&str, String)> = vec![
        (info.kind.as_str(), format!("{} {}", info.id, info.name)),
        (
            "state",
            format!(
                "{}: {} of {} jobs ended ({}{held})",
                info.state(),
                info.ended(),
                info.total(),
                counts_text(&info.counts())
            ),
        ),
        ("created", at(info.created_at)),
    ];
    if let Some(ms) = info.closed_at {
        fields.push(("closed", at(ms)));
    }
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (name, value) in &fields {
        writeln!(out, "{name:<width$}  {}", one_line(value))?;
    }
    writeln!(out)?;
    if info.steps.is_empty() {
        writeln!(out, "no jobs yet")?;
        return Ok(Exit::Ok);
    }
    writeln!(out, "jobs, each after the jobs it waits for:")?;
    let mut table = Table::new(&[
        "STEP",
        "JOB>",
        "TYPE",
        "STATUS",
        "TRIES>",
        "WAITS FOR",
        "ERROR",
    ]);
    for (depth, step) in info.in_order() {
        table.row(vec![
            format!("{}{}", "  ".repeat(depth.min(20)), clip(step.label(), 40)),
            step.id.to_string(),
            step.job_type.clone(),
            status_text(step),
            step.attempts.to_string(),
            waits_text(&info, step),
            clip(&step.problem(), 80),
        ]);
    }
    table.write(out)?;
    Ok(Exit::Ok)
}

/// The status, or `waiting for N` for a held job.
pub fn status_text(step: &WorkflowStep) -> String {
    if step.is_held() {
        format!("waiting for {}", step.waiting_for)
    } else {
        step.status.to_string()
    }
}

fn mark(state: WaitState) -> &'static str {
    match state {
        WaitState::Done => "✓",
        WaitState::Failed => "✗",
        _ => "…",
    }
}

/// One wait: the step name (or job id, for a batch member or a job outside the workflow),
/// its mark, and `(any outcome)` for a wait that lets the job run however the other ended
/// (unless `all_any` says every wait of the list does, which is said once).
fn wait_text(info: &WorkflowInfo, wait: &WaitInfo, all_any: bool) -> String {
    let name = match info.step_name_of(wait.job_id) {
        Some(step) => step.to_string(),
        None => format!("#{}", wait.job_id),
    };
    let any = if wait.any_outcome && !all_any {
        " (any outcome)"
    } else {
        ""
    };
    format!("{name} {}{any}", mark(wait.state))
}

/// What `step` waits for: each wait, or their counts when there are many (a batch's
/// callbacks wait for every member); `-` for none. A batch's callbacks also wait for it to
/// close.
pub fn waits_text(info: &WorkflowInfo, step: &WorkflowStep) -> String {
    let closing = info.open && step.is_held() && step.step.is_some();
    let all_any = step.waits_for.len() > 1 && step.waits_for.iter().all(|w| w.any_outcome);
    let any = if all_any { " (any outcome)" } else { "" };
    let mut text = if step.waits_for.is_empty() {
        String::new()
    } else if step.waits_for.len() <= WAITS_LISTED {
        let list: Vec<String> = step
            .waits_for
            .iter()
            .map(|w| wait_text(info, w, all_any))
            .collect();
        format!("{}{any}", list.join(", "))
    } else {
        let c = step.wait_counts();
        format!(
            "{} jobs{any}: {} ✓, {} ✗, {} …",
            step.waits_for.len(),
            c.done,
            c.failed,
            c.pending
        )
    };
    if closing {
        if !text.is_empty() {
            text.push_str("; ");
        }
        text.push_str("the batch to close");
    }
    if text.is_empty() {
        text.push('-');
    }
    text
}
