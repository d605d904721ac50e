//! What the workflow pages and a job's page show alike: a workflow's name for a heading, a
//! job's status with `waiting for N` when held, what a job waits for (each wait linked to
//! its job, marked ✓ done, ✗ failed, … pending).

use crate::workflow::{WaitInfo, WaitState, WorkflowInfo, WorkflowStep};

use crate::web::format::{clip, count};
use crate::web::html::{badge, esc};

/// Waits listed one by one up to this many; more are counted.
const WAITS_LISTED: usize = 6;

/// A workflow's name for a heading; a dash for none.
pub(crate) fn shown_name(name: &str) -> String {
    if name.trim().is_empty() {
        "–".to_string()
    } else {
        clip(name, 200).into_owned()
    }
}

/// The status badge, with `waiting for N` for a held job.
pub(crate) fn status_html(step: &WorkflowStep) -> String {
    if step.is_held() {
        format!(
            "{} <span class=\"muted small\">waiting for {}</span>",
            badge(step.status),
            step.waiting_for
        )
    } else {
        badge(step.status)
    }
}

fn mark(state: WaitState) -> &'static str {
    match state {
        WaitState::Done => "<span class=\"mark mark-done\" title=\"done\">✓</span>",
        WaitState::Failed => "<span class=\"mark mark-failed\" title=\"failed\">✗</span>",
        _ => "<span class=\"mark mark-pending\" title=\"pending\">…</span>",
    }
}

fn wait_html(info: &WorkflowInfo, wait: &WaitInfo, all_any: bool) -> String {
    let name = match info.step_name_of(wait.job_id) {
        Some(step) => clip(step, 40).into_owned(),
        None => format!("#{}", wait.job_id),
    };
    let any = if wait.any_outcome && !all_any {
        " <span class=\"muted small\">(any outcome)</span>"
    } else {
        ""
    };
    format!(
        "<a href=\"/jobs/{}\">{}</a> {}{any}",
        wait.job_id,
        esc(&name),
        mark(wait.state)
    )
}

/// What `step` waits for, each wait linked (counted when there are many); a batch's
/// callbacks also wait for it to close. A dash for nothing.
pub(crate) fn waits_html(info: &WorkflowInfo, step: &WorkflowStep) -> String {
    let all_any = step.waits_for.len() > 1 && step.waits_for.iter().all(|w| w.any_outcome);
    let any = if all_any {
        " <span class=\"muted small\">(any outcome)</span>"
    } else {
        ""
    };
    let mut parts = Vec::new();
    if step.waits_for.len() > WAITS_LISTED {
        let c = step.wait_counts();
        parts.push(format!(
            "{} jobs{any}: {} {}, {} {}, {} {}",
            count(step.waits_for.len() as i64),
            count(c.done as i64),
            mark(WaitState::Done),
            count(c.failed as i64),
            mark(WaitState::Failed),
            count(c.pending as i64),
            mark(WaitState::Pending)
        ));
    } else if !step.waits_for.is_empty() {
        let list: Vec<String> = step
            .waits_for
            .iter()
            .map(|w| wait_html(info, w, all_any))
            .collect();
        parts.push(format!("{}{any}", list.join(", ")));
    }
    if info.open && step.is_held() && step.step.is_some() {
        parts.push("the batch to close".to_string());
    }
    if parts.is_empty() {
        "–".to_string()
    } else {
        parts.join("; ")
    }
}
