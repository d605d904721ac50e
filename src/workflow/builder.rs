//! Building a workflow: named steps and what each waits for, checked before anything is
//! written.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{Error, ErrorKind, Result};
use crate::job::NewJob;

/// What a step waits for: another step of the same workflow, by name, or any job, by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    Step(String),
    Job(i64),
}

/// One wait of a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wait {
    pub(crate) target: Target,
    /// Runs whatever that job's outcome (a clean-up step).
    pub(crate) any_outcome: bool,
}

/// A step of a [`Workflow`]: a job with a name, and the steps or jobs it waits for.
///
/// A step becomes due when every job it waits for has succeeded. When one of them ends
/// `dead` or `cancelled`, the step is cancelled instead (and so are the steps that wait for
/// it), unless it waits for that one with [`Step::after_any_outcome`].
#[derive(Debug, Clone)]
pub struct Step {
    pub(crate) name: String,
    pub(crate) job: NewJob,
    pub(crate) waits: Vec<Wait>,
}

impl Step {
    /// A step named `name` (unique within its workflow) that runs `job`.
    pub fn new(name: impl Into<String>, job: NewJob) -> Step {
        Step {
            name: name.into(),
            job,
            waits: Vec::new(),
        }
    }

    /// Waits for the step named `step` to succeed.
    pub fn after(mut self, step: impl Into<String>) -> Step {
        self.waits.push(Wait {
            target: Target::Step(step.into()),
            any_outcome: false,
        });
        self
    }

    /// Waits for the step named `step` to end, however it ends (succeeded, dead or
    /// cancelled): for clean-up that must run anyway.
    pub fn after_any_outcome(mut self, step: impl Into<String>) -> Step {
        self.waits.push(Wait {
            target: Target::Step(step.into()),
            any_outcome: true,
        });
        self
    }

    /// Waits for the job `id` (any job, in a workflow or not) to succeed.
    pub fn after_job(mut self, id: i64) -> Step {
        self.waits.push(Wait {
            target: Target::Job(id),
            any_outcome: false,
        });
        self
    }

    /// Waits for the job `id` to end, however it ends.
    pub fn after_job_any_outcome(mut self, id: i64) -> Step {
        self.waits.push(Wait {
            target: Target::Job(id),
            any_outcome: true,
        });
        self
    }

    /// The step's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Steps that wait for each other (a directed acyclic graph), enqueued together in one
/// transaction by [`Queue::enqueue_workflow`](crate::Queue::enqueue_workflow).
///
/// ```
/// use litejobs::{NewJob, Queue, Step, Workflow};
/// use serde_json::json;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let queue = Queue::open_in_memory()?;
/// let order = json!({"order_id": 1042});
/// let flow = Workflow::new("purchase 1042")
///     .step(Step::new("charge", NewJob::new("charge_card", order.clone())))
///     .step(Step::new("ship", NewJob::new("ship_order", order.clone())).after("charge"))
///     .step(Step::new("receipt", NewJob::new("send_receipt", order.clone())).after("ship"))
///     // Runs once charging has ended, whether it succeeded or not.
///     .step(Step::new("release_hold", NewJob::new("release_hold", order)).after_any_outcome("charge"));
/// let ids = queue.enqueue_workflow(flow)?;
/// assert_eq!(ids.steps.len(), 4);
/// let ship = queue.job(ids.step("ship").expect("a step"))?.expect("the job");
/// assert_eq!(ship.waiting_for, 1); // held until "charge" succeeds
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Workflow {
    pub(crate) name: String,
    pub(crate) steps: Vec<Step>,
}

impl Workflow {
    /// An empty workflow; `name` is for people (`litejobs workflow list`, the dashboard).
    pub fn new(name: impl Into<String>) -> Workflow {
        Workflow {
            name: name.into(),
            steps: Vec::new(),
        }
    }

    /// Adds a step. Steps may be added in any order: a step may wait for one added later.
    pub fn step(mut self, step: Step) -> Workflow {
        self.steps.push(step);
        self
    }

    /// The workflow's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Checks the workflow as [`Queue::enqueue_workflow`](crate::Queue::enqueue_workflow)
    /// does before writing anything.
    ///
    /// # Errors
    /// [`InvalidJob`](crate::ErrorKind::InvalidJob) for no steps, an empty or repeated step
    /// name, a wait for a step the workflow does not have, or a cycle (naming the steps on
    /// it).
    pub fn validate(&self) -> Result<()> {
        if self.steps.is_empty() {
            return Err(invalid(format!("workflow {:?} has no steps", self.name)));
        }
        check_steps(&self.steps, &BTreeSet::new())
    }
}

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidJob, message)
}

/// Checks `steps` (names unique and not among `existing`, waits only for steps of `steps`
/// or `existing`, or jobs by id) and that they form no cycle.
pub(crate) fn check_steps(steps: &[Step], existing: &BTreeSet<String>) -> Result<()> {
    let mut index = BTreeMap::new();
    for (i, step) in steps.iter().enumerate() {
        if step.name.trim().is_empty() {
            return Err(invalid(format!("step {i} has an empty name")));
        }
        if existing.contains(&step.name) || index.insert(step.name.as_str(), i).is_some() {
            return Err(invalid(format!(
                "step name {:?} is used twice in the workflow",
                step.name
            )));
        }
    }
    for step in steps {
        for wait in &step.waits {
            if let Target::Step(name) = &wait.target {
                if name == &step.name {
                    return Err(invalid(format!("step {:?} waits for itself", step.name)));
                }
                if !index.contains_key(name.as_str()) && !existing.contains(name) {
                    return Err(invalid(format!(
                        "step {:?} waits for step {name:?}, which the workflow does not have",
                        step.name
                    )));
                }
            }
        }
    }
    if let Some(cycle) = find_cycle(steps, &index) {
        return Err(invalid(format!(
            "the workflow's steps wait for each other in a cycle: {}",
            cycle.join(" -> ")
        )));
    }
    Ok(())
}

/// A cycle among the new steps (existing steps and jobs by id cannot wait for new ones), as
/// step names from one back to itself.
fn find_cycle(steps: &[Step], index: &BTreeMap<&str, usize>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let mut marks = vec![Mark::New; steps.len()];
    for start in 0..steps.len() {
        if marks[start] != Mark::New {
            continue;
        }
        // Depth first without recursion: (step, next wait to follow).
        let mut path: Vec<(usize, usize)> = vec![(start, 0)];
        marks[start] = Mark::OnPath;
        while let Some(&mut (at, ref mut next)) = path.last_mut() {
            let waits = &steps[at].waits;
            if *next == waits.len() {
                marks[at] = Mark::Done;
                path.pop();
                continue;
            }
            let wait = &waits[*next];
            *next += 1;
            let Target::Step(name) = &wait.target else {
                continue;
            };
            let Some(&to) = index.get(name.as_str()) else {
                continue;
            };
            match marks[to] {
                Mark::OnPath => {
                    let from = path.iter().position(|&(s, _)| s == to).unwrap_or(0);
                    let mut cycle: Vec<String> = path[from..]
                        .iter()
                        .map(|&(s, _)| steps[s].name.clone())
                        .collect();
                    cycle.push(steps[to].name.clone());
                    return Some(cycle);
                }
                Mark::New => {
                    marks[to] = Mark::OnPath;
                    path.push((to, 0));
                }
                Mark::Done => {}
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job() -> NewJob {
        NewJob::new("t", json!({}))
    }

    #[test]
    fn a_cycle_is_refused_naming_its_steps() {
        let flow = Workflow::new("w")
            .step(Step::new("a", job()).after("c"))
            .step(Step::new("b", job()).after("a"))
            .step(Step::new("c", job()).after("b"));
        let e = flow.validate().expect_err("a cycle");
        assert!(e.to_string().contains("a -> c -> b -> a"), "{e}");
    }

    #[test]
    fn unknown_and_repeated_names_are_refused() {
        let unknown = Workflow::new("w").step(Step::new("a", job()).after("nope"));
        assert!(unknown.validate().is_err());
        let twice = Workflow::new("w")
            .step(Step::new("a", job()))
            .step(Step::new("a", job()));
        assert!(twice.validate().is_err());
        assert!(Workflow::new("w").validate().is_err());
    }

    #[test]
    fn a_diamond_is_fine() {
        let flow = Workflow::new("w")
            .step(Step::new("d", job()).after("b").after("c"))
            .step(Step::new("b", job()).after("a"))
            .step(Step::new("c", job()).after("a"))
            .step(Step::new("a", job()));
        flow.validate().expect("no cycle");
    }
}
