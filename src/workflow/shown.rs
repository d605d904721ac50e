//! How people read a workflow or batch (the CLI's `workflow show`, the dashboard's graph):
//! its jobs in an order where each comes after what it waits for, each with its depth; a
//! label for each; its errors masked.

use std::collections::{BTreeMap, BTreeSet};

use crate::job::JobStatus;
use crate::redact::Redactor;

use super::{WaitState, WorkflowInfo, WorkflowKind, WorkflowStep};

/// The label of a batch member, which has no step name.
pub const MEMBER_LABEL: &str = "member";

impl WorkflowStep {
    /// Its step name; [`MEMBER_LABEL`] for a batch member (which has none).
    pub fn label(&self) -> &str {
        self.step.as_deref().unwrap_or(MEMBER_LABEL)
    }

    /// What `workflow show` and the dashboard say went wrong: why a cancelled job was
    /// cancelled (`cancelled: …`), else the last error of one that has not succeeded; empty
    /// for a success or a job without an error. A dead job a person requeued says so first
    /// (`requeued as job N; …`).
    pub fn problem(&self) -> String {
        if let Some(new) = self.requeued_as {
            return match self.last_error.as_deref() {
                Some(error) if !error.is_empty() => format!("requeued as job {new}; {error}"),
                _ => format!("requeued as job {new}"),
            };
        }
        match self.status {
            JobStatus::Succeeded => String::new(),
            JobStatus::Cancelled => self
                .cancel_reason
                .as_deref()
                .or(self.last_error.as_deref())
                .map(|r| format!("cancelled: {r}"))
                .unwrap_or_default(),
            _ => self.last_error.clone().unwrap_or_default(),
        }
    }
}

/// How the waits of one job stand, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaitCounts {
    /// Waits whose job succeeded (or ended at all, for a wait on any outcome).
    pub done: usize,
    /// Waits whose job ended dead or cancelled (which cancelled the waiting job).
    pub failed: usize,
    /// Waits whose job has not ended.
    pub pending: usize,
}

impl WorkflowStep {
    /// Its waits counted by where they stand.
    pub fn wait_counts(&self) -> WaitCounts {
        let mut counts = WaitCounts::default();
        for wait in &self.waits_for {
            match wait.state {
                WaitState::Done => counts.done += 1,
                WaitState::Failed => counts.failed += 1,
                WaitState::Pending => counts.pending += 1,
            }
        }
        counts
    }
}

impl WorkflowInfo {
    /// Its jobs in reading order, each with its depth: a job comes after every job of this
    /// workflow it waits for. Depth 0 is a job that waits for none of them; any other is one
    /// more than the deepest job it waits for. Sorted by depth, then id, so the order is the
    /// same on every read. Waits for jobs outside the workflow do not count. Jobs caught in
    /// a cycle of waits (only rows written by other programs can make one) come last, one
    /// level below the others, by id.
    pub fn in_order(&self) -> Vec<(usize, &WorkflowStep)> {
        let index: BTreeMap<i64, usize> = self
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id, i))
            .collect();
        // Within the workflow: what each job waits for, and which jobs wait for it.
        let mut waits_left: Vec<usize> = vec![0; self.steps.len()];
        let mut dependants: Vec<Vec<usize>> = vec![Vec::new(); self.steps.len()];
        for (i, step) in self.steps.iter().enumerate() {
            let inside: BTreeSet<usize> = step
                .waits_for
                .iter()
                .filter_map(|w| index.get(&w.job_id).copied())
                .filter(|&j| j != i)
                .collect();
            waits_left[i] = inside.len();
            for j in inside {
                dependants[j].push(i);
            }
        }
        // Kahn's algorithm: a job's depth is settled once everything it waits for is.
        let mut depth: Vec<Option<usize>> = vec![None; self.steps.len()];
        let mut reached: Vec<usize> = vec![0; self.steps.len()];
        let mut ready: Vec<usize> = (0..self.steps.len())
            .filter(|&i| waits_left[i] == 0)
            .collect();
        while let Some(i) = ready.pop() {
            let d = reached[i];
            depth[i] = Some(d);
            for &k in &dependants[i] {
                reached[k] = reached[k].max(d + 1);
                waits_left[k] -= 1;
                if waits_left[k] == 0 {
                    ready.push(k);
                }
            }
        }
        let cycle_depth = depth.iter().flatten().max().map_or(0, |d| d + 1);
        let mut ordered: Vec<(usize, &WorkflowStep)> = self
            .steps
            .iter()
            .zip(depth)
            .map(|(step, d)| (d.unwrap_or(cycle_depth), step))
            .collect();
        ordered.sort_by_key(|(d, step)| (*d, step.id));
        ordered
    }

    /// The step name of job `id` when it is a named step of this workflow (a batch's
    /// members have none; a job outside it is not found).
    pub fn step_name_of(&self, id: i64) -> Option<&str> {
        self.steps
            .iter()
            .find(|s| s.id == id)
            .and_then(|s| s.step.as_deref())
    }

    /// `in progress`, `finished`, or `open` for a batch still taking jobs.
    pub fn state(&self) -> &'static str {
        if self.open {
            "open"
        } else if self.is_finished() {
            "finished"
        } else {
            "in progress"
        }
    }

    /// True for a batch.
    pub fn is_batch(&self) -> bool {
        self.kind == WorkflowKind::Batch
    }

    /// A copy with the secrets in its jobs' last errors masked, as
    /// [`Redactor::mask_job`] masks a job's.
    pub fn masked(&self, redactor: &Redactor) -> WorkflowInfo {
        let mut info = self.clone();
        for step in &mut info.steps {
            step.last_error = step
                .last_error
                .as_deref()
                .map(|e| redactor.mask_text(e).into_owned());
        }
        info
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::JobStatus;
    use crate::workflow::WaitInfo;

    fn step(id: i64, name: &str, waits: &[i64]) -> WorkflowStep {
        WorkflowStep {
            id,
            step: Some(name.to_string()),
            job_type: "t".into(),
            queue: "default".into(),
            status: JobStatus::Queued,
            attempts: 0,
            waiting_for: waits.len() as i64,
            last_error: None,
            cancel_reason: None,
            created_at: 0,
            finished_at: None,
            requeued_as: None,
            waits_for: waits
                .iter()
                .map(|&job_id| WaitInfo {
                    job_id,
                    any_outcome: false,
                    state: WaitState::Pending,
                })
                .collect(),
        }
    }

    fn info(steps: Vec<WorkflowStep>) -> WorkflowInfo {
        WorkflowInfo {
            id: 1,
            kind: WorkflowKind::Workflow,
            name: "w".into(),
            open: false,
            created_at: 0,
            closed_at: None,
            steps,
        }
    }

    fn order(info: &WorkflowInfo) -> Vec<(usize, &str)> {
        info.in_order()
            .into_iter()
            .map(|(d, s)| (d, s.label()))
            .collect()
    }

    #[test]
    fn each_job_comes_after_what_it_waits_for_at_its_longest_chain() {
        // receipt waits for ship and charge; ship for charge; audit for a job elsewhere.
        let flow = info(vec![
            step(1, "receipt", &[2, 3]),
            step(2, "ship", &[3]),
            step(3, "charge", &[]),
            step(4, "audit", &[99]),
        ]);
        assert_eq!(
            order(&flow),
            [(0, "charge"), (0, "audit"), (1, "ship"), (2, "receipt")]
        );
        assert_eq!(flow.step_name_of(2), Some("ship"));
        assert_eq!(flow.step_name_of(99), None, "a job outside the workflow");
    }

    #[test]
    fn a_cycle_written_by_hand_comes_last_by_id() {
        let flow = info(vec![
            step(5, "a", &[6]),
            step(6, "b", &[5]),
            step(7, "c", &[]),
            step(8, "d", &[7]),
        ]);
        assert_eq!(order(&flow), [(0, "c"), (1, "d"), (2, "a"), (2, "b")]);
    }

    #[test]
    fn masked_hides_secrets_in_last_errors() {
        let mut s = step(1, "a", &[]);
        s.last_error = Some("GET https://u:pw@api.example/x?token=abc".into());
        let shown = info(vec![s]).masked(&Redactor::new());
        let error = shown.steps[0].last_error.as_deref().unwrap_or_default();
        assert!(!error.contains("pw@") && !error.contains("abc"), "{error}");
    }
}
