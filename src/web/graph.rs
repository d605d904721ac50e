//! A workflow's jobs as a graph, drawn on the server as inline SVG (no script, no library):
//! one column per depth ([`WorkflowInfo::in_order`]), one box per job coloured by its status
//! (the stylesheet's `node-*` classes) and linking to its page, one line per wait from the
//! job waited for to the waiting one (solid once done, red once failed, dashed for a wait on
//! any outcome). A column shows at most [`COLUMN_BOXES`] jobs; the rest are counted in a
//! last box (a batch of thousands stays a page, not a poster).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::workflow::{WaitState, WorkflowInfo, WorkflowStep};

use super::format::clip;
use super::html::esc;

/// Jobs drawn in one column at most.
pub(crate) const COLUMN_BOXES: usize = 20;

const BOX_W: f64 = 176.0;
const BOX_H: f64 = 42.0;
const COL_GAP: f64 = 64.0;
const ROW_GAP: f64 = 14.0;
const PAD: f64 = 8.0;
/// Characters of a step name in its box (the whole name is in its tooltip).
const LABEL_CHARS: usize = 22;

/// Where a drawn box is: its column and row.
#[derive(Clone, Copy)]
struct Place {
    col: usize,
    row: usize,
}

fn x_of(col: usize) -> f64 {
    PAD + col as f64 * (BOX_W + COL_GAP)
}

fn y_of(row: usize) -> f64 {
    PAD + row as f64 * (BOX_H + ROW_GAP)
}

/// The status word of a box: `waiting` for a held job.
fn status_class(step: &WorkflowStep) -> &'static str {
    if step.is_held() {
        "held"
    } else {
        step.status.as_str()
    }
}

/// The second line of a box: `#12 · succeeded`, `#12 · waiting for 2`.
fn status_line(step: &WorkflowStep) -> String {
    if step.is_held() {
        format!("#{} · waiting for {}", step.id, step.waiting_for)
    } else {
        format!("#{} · {}", step.id, step.status.as_str())
    }
}

/// The SVG of `info`'s jobs; empty for a workflow without jobs.
pub(crate) fn workflow(info: &WorkflowInfo) -> String {
    let ordered = info.in_order();
    if ordered.is_empty() {
        return String::new();
    }
    // Columns by depth, each cut to COLUMN_BOXES with the rest counted.
    let mut columns: BTreeMap<usize, Vec<&WorkflowStep>> = BTreeMap::new();
    for (depth, step) in &ordered {
        columns.entry(*depth).or_default().push(step);
    }
    let mut places: BTreeMap<i64, Place> = BTreeMap::new();
    let mut more: Vec<(usize, usize)> = Vec::new();
    let mut rows = 0;
    for (col, (_, steps)) in columns.iter().enumerate() {
        for (row, step) in steps.iter().take(COLUMN_BOXES).enumerate() {
            places.insert(step.id, Place { col, row });
        }
        let shown = steps.len().min(COLUMN_BOXES);
        if steps.len() > COLUMN_BOXES {
            more.push((col, steps.len() - COLUMN_BOXES));
            rows = rows.max(shown + 1);
        } else {
            rows = rows.max(shown);
        }
    }
    let width = 2.0 * PAD + columns.len() as f64 * BOX_W + (columns.len() - 1) as f64 * COL_GAP;
    let height = 2.0 * PAD + rows as f64 * BOX_H + rows.saturating_sub(1) as f64 * ROW_GAP;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg class=\"flow\" viewBox=\"0 0 {width} {height}\" width=\"{width}\" height=\"{height}\" \
         role=\"group\" aria-label=\"{} {}: its jobs and what each waits for\" \
         xmlns=\"http://www.w3.org/2000/svg\">",
        esc(info.kind.as_str()),
        info.id
    );
    // Lines first, so boxes cover their ends.
    for (_, step) in &ordered {
        let Some(to) = places.get(&step.id) else {
            continue;
        };
        for wait in &step.waits_for {
            let Some(from) = places.get(&wait.job_id) else {
                continue;
            };
            let (x1, y1) = (x_of(from.col) + BOX_W, y_of(from.row) + BOX_H / 2.0);
            let (x2, y2) = (x_of(to.col), y_of(to.row) + BOX_H / 2.0);
            let bend = (x2 - x1).abs().max(COL_GAP) / 2.0;
            let state = match wait.state {
                WaitState::Done => "done",
                WaitState::Failed => "failed",
                _ => "pending",
            };
            let any = if wait.any_outcome { " edge-any" } else { "" };
            let _ = write!(
                svg,
                "<path class=\"edge edge-{state}{any}\" d=\"M{x1:.1},{y1:.1} C{:.1},{y1:.1} {:.1},{y2:.1} {x2:.1},{y2:.1}\"/>",
                x1 + bend,
                x2 - bend
            );
        }
    }
    for (_, step) in &ordered {
        let Some(place) = places.get(&step.id) else {
            continue;
        };
        let (x, y) = (x_of(place.col), y_of(place.row));
        let _ = write!(
            svg,
            "<a href=\"/jobs/{id}\" class=\"node node-{class}\" data-job=\"{id}\">\
             <title>{} (job {id}, {}): {}</title>\
             <rect x=\"{x}\" y=\"{y}\" width=\"{BOX_W}\" height=\"{BOX_H}\" rx=\"7\"/>\
             <text class=\"node-label\" x=\"{:.1}\" y=\"{:.1}\">{}</text>\
             <text class=\"node-sub\" x=\"{:.1}\" y=\"{:.1}\">{}</text></a>",
            esc(step.label()),
            esc(&step.job_type),
            esc(&status_line(step)),
            x + 10.0,
            y + 17.0,
            esc(&clip(step.label(), LABEL_CHARS)),
            x + 10.0,
            y + 33.0,
            esc(&status_line(step)),
            id = step.id,
            class = status_class(step),
        );
    }
    for (col, n) in more {
        let (x, y) = (x_of(col), y_of(COLUMN_BOXES));
        let _ = write!(
            svg,
            "<g class=\"node node-more\"><rect x=\"{x}\" y=\"{y}\" width=\"{BOX_W}\" height=\"{BOX_H}\" rx=\"7\"/>\
             <text class=\"node-label\" x=\"{:.1}\" y=\"{:.1}\">… and {n} more</text></g>",
            x + 10.0,
            y + 26.0
        );
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::JobStatus;
    use crate::workflow::{WaitInfo, WorkflowKind};

    fn step(id: i64, name: &str, status: JobStatus, waits: &[(i64, WaitState)]) -> WorkflowStep {
        WorkflowStep {
            id,
            step: Some(name.to_string()),
            job_type: "t".into(),
            queue: "default".into(),
            status,
            attempts: 0,
            waiting_for: waits
                .iter()
                .filter(|(_, s)| *s == WaitState::Pending)
                .count() as i64,
            last_error: None,
            cancel_reason: None,
            created_at: 0,
            finished_at: None,
            requeued_as: None,
            waits_for: waits
                .iter()
                .map(|&(job_id, state)| WaitInfo {
                    job_id,
                    any_outcome: false,
                    state,
                })
                .collect(),
        }
    }

    fn info(steps: Vec<WorkflowStep>) -> WorkflowInfo {
        WorkflowInfo {
            id: 7,
            kind: WorkflowKind::Workflow,
            name: "w".into(),
            open: false,
            created_at: 0,
            closed_at: None,
            steps,
        }
    }

    #[test]
    fn one_box_per_job_one_line_per_wait_names_escaped() {
        let svg = workflow(&info(vec![
            step(1, "charge", JobStatus::Dead, &[]),
            step(2, "<ship>", JobStatus::Cancelled, &[(1, WaitState::Failed)]),
            step(3, "audit", JobStatus::Queued, &[(1, WaitState::Pending)]),
        ]));
        assert_eq!(svg.matches("<rect").count(), 3);
        assert_eq!(svg.matches("<path").count(), 2);
        assert!(svg.contains("class=\"edge edge-failed\""));
        assert!(svg.contains("node node-held"));
        assert!(svg.contains("href=\"/jobs/2\""));
        assert!(svg.contains("&lt;ship&gt;") && !svg.contains("<ship>"));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
    }

    #[test]
    fn a_wide_column_is_cut_and_the_rest_counted() {
        let mut steps: Vec<WorkflowStep> = (1..=50)
            .map(|id| step(id, "member", JobStatus::Succeeded, &[]))
            .collect();
        let waits: Vec<(i64, WaitState)> = (1..=50).map(|id| (id, WaitState::Done)).collect();
        steps.push(step(51, "on_complete", JobStatus::Queued, &waits));
        let svg = workflow(&info(steps));
        assert_eq!(svg.matches("<a href").count(), COLUMN_BOXES + 1);
        assert_eq!(svg.matches("<path").count(), COLUMN_BOXES);
        assert!(svg.contains(&format!("… and {} more", 50 - COLUMN_BOXES)));
    }
}
