//! [`WorkflowStore`] on PostgreSQL: the `workflows` table and what is read of a workflow's
//! jobs and their waits. Counts and named steps come in one statement for all the rows
//! asked about.

use diesel::sql_types::{BigInt, Bool, Nullable, Text};
use diesel::QueryableByName;

use super::reads::limit_int;
use super::sql::{query, IntRow};
use super::PgTx;
use crate::error::{Error, ErrorKind, Result};
use crate::storage::workflows::{
    DependencyRow, StepRow, WorkflowRow, WorkflowStore, WorkflowSummary,
};

const WORKFLOW_COLUMNS: &str = "id, kind, name, open = 1 AS open, created_at, closed_at";

#[derive(QueryableByName)]
struct Workflow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Bool)]
    open: bool,
    #[diesel(sql_type = BigInt)]
    created_at: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    closed_at: Option<i64>,
}

impl From<Workflow> for WorkflowRow {
    fn from(w: Workflow) -> WorkflowRow {
        WorkflowRow {
            id: w.id,
            kind: w.kind,
            name: w.name,
            open: w.open,
            created_at: w.created_at,
            closed_at: w.closed_at,
        }
    }
}

#[derive(QueryableByName)]
struct Step {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Nullable<Text>)]
    step: Option<String>,
    #[diesel(sql_type = Text)]
    job_type: String,
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = BigInt)]
    attempts: i64,
    #[diesel(sql_type = BigInt)]
    waiting_for: i64,
    #[diesel(sql_type = Nullable<Text>)]
    last_error: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    cancel_reason: Option<String>,
    #[diesel(sql_type = BigInt)]
    created_at: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    finished_at: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    requeued_as: Option<i64>,
}

#[derive(QueryableByName)]
struct Wait {
    #[diesel(sql_type = BigInt)]
    job_id: i64,
    #[diesel(sql_type = BigInt)]
    depends_on: i64,
    #[diesel(sql_type = Bool)]
    any_outcome: bool,
    #[diesel(sql_type = Text)]
    state: String,
}

#[derive(QueryableByName)]
struct StatusCount {
    #[diesel(sql_type = BigInt)]
    workflow_id: i64,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct NamedStep {
    #[diesel(sql_type = Text)]
    step: String,
    #[diesel(sql_type = BigInt)]
    id: i64,
}

#[derive(QueryableByName)]
struct Dependency {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Nullable<Text>)]
    step: Option<String>,
    #[diesel(sql_type = Text)]
    job_type: String,
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Nullable<Text>)]
    result: Option<String>,
    #[diesel(sql_type = Bool)]
    any_outcome: bool,
}

impl WorkflowStore for PgTx<'_> {
    fn create_workflow(&self, kind: &str, name: &str, open: bool, now: i64) -> Result<i64> {
        self.row::<IntRow>(
            query(
                "INSERT INTO workflows (kind, name, open, created_at) VALUES ($1, $2, $3, $4)
                 RETURNING id AS v",
            )
            .text(kind)
            .text(name)
            .int(i64::from(open))
            .int(now),
        )?
        .map(|r| r.v)
        .ok_or_else(|| Error::new(ErrorKind::Database, "the workflow insert returned no id"))
    }

    fn place_in_workflow(&self, job_id: i64, workflow_id: i64, step: Option<&str>) -> Result<()> {
        self.execute(
            query("UPDATE jobs SET workflow_id = $2, step = $3 WHERE id = $1")
                .int(job_id)
                .int(workflow_id)
                .opt_text(step),
        )?;
        Ok(())
    }

    /// One statement for all (each update of jobs pays for the counting trigger: one per
    /// step took 0.2 s of a 1 000-step workflow's enqueue).
    fn place_many_in_workflow(
        &self,
        workflow_id: i64,
        jobs: &[(i64, Option<String>)],
    ) -> Result<()> {
        if jobs.is_empty() {
            return Ok(());
        }
        let ids: Vec<i64> = jobs.iter().map(|(id, _)| *id).collect();
        let steps: Vec<Option<String>> = jobs.iter().map(|(_, step)| step.clone()).collect();
        self.execute(
            query(
                "UPDATE jobs SET workflow_id = $1, step = u.step
                 FROM unnest($2::bigint[], $3::text[]) AS u (id, step)
                 WHERE jobs.id = u.id",
            )
            .int(workflow_id)
            .ints(&ids)
            .opt_texts(&steps),
        )?;
        Ok(())
    }

    fn workflow(&self, id: i64) -> Result<Option<WorkflowRow>> {
        Ok(self
            .row::<Workflow>(
                query(&format!(
                    "SELECT {WORKFLOW_COLUMNS} FROM workflows WHERE id = $1"
                ))
                .int(id),
            )?
            .map(WorkflowRow::from))
    }

    fn workflow_steps(&self, id: i64) -> Result<Vec<StepRow>> {
        let mut steps: Vec<StepRow> = self
            .rows::<Step>(
                query(
                    "SELECT id, step, job_type, queue, status, attempts, waiting_for, last_error,
                            cancel_reason, created_at, finished_at, requeued_as
                     FROM jobs WHERE workflow_id = $1 ORDER BY id",
                )
                .int(id),
            )?
            .into_iter()
            .map(|s| StepRow {
                id: s.id,
                step: s.step,
                job_type: s.job_type,
                queue: s.queue,
                status: s.status,
                attempts: s.attempts,
                waiting_for: s.waiting_for,
                last_error: s.last_error,
                cancel_reason: s.cancel_reason,
                created_at: s.created_at,
                finished_at: s.finished_at,
                requeued_as: s.requeued_as,
                depends_on: Vec::new(),
            })
            .collect();
        let waits = self.rows::<Wait>(
            query(
                "SELECT d.job_id, d.depends_on, d.any_outcome <> 0 AS any_outcome, d.state
                 FROM jobs j JOIN job_deps d ON d.job_id = j.id
                 WHERE j.workflow_id = $1 ORDER BY d.job_id, d.depends_on",
            )
            .int(id),
        )?;
        for w in waits {
            if let Ok(i) = steps.binary_search_by_key(&w.job_id, |s| s.id) {
                steps[i]
                    .depends_on
                    .push((w.depends_on, w.any_outcome, w.state));
            }
        }
        Ok(steps)
    }

    fn workflows(&self, limit: usize, before: Option<i64>) -> Result<Vec<WorkflowSummary>> {
        let rows = self.rows::<Workflow>(
            query(&format!(
                "SELECT {WORKFLOW_COLUMNS} FROM workflows WHERE id < $1 ORDER BY id DESC LIMIT $2"
            ))
            .int(before.unwrap_or(i64::MAX))
            .int(limit_int(limit)),
        )?;
        let ids: Vec<i64> = rows.iter().map(|w| w.id).collect();
        let counts = if ids.is_empty() {
            Vec::new()
        } else {
            self.rows::<StatusCount>(
                query(
                    "SELECT workflow_id, status, COUNT(*) AS n FROM jobs
                     WHERE workflow_id = ANY($1) AND requeued_as IS NULL
                     GROUP BY workflow_id, status",
                )
                .ints(&ids),
            )?
        };
        Ok(rows
            .into_iter()
            .map(|w| {
                // By status word in byte order, as SQLite sorts, whatever the collation.
                let mut by_status: Vec<(String, i64)> = counts
                    .iter()
                    .filter(|c| c.workflow_id == w.id)
                    .map(|c| (c.status.clone(), c.n))
                    .collect();
                by_status.sort();
                WorkflowSummary {
                    row: w.into(),
                    counts: by_status,
                }
            })
            .collect())
    }

    fn steps_by_name(&self, workflow_id: i64, names: &[String]) -> Result<Vec<(String, i64)>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        // The latest job of each name (a requeued step's new job).
        let found = self.rows::<NamedStep>(
            query(
                "SELECT DISTINCT ON (step) step, id FROM jobs
                 WHERE workflow_id = $1 AND step = ANY($2) ORDER BY step, id DESC",
            )
            .int(workflow_id)
            .texts(names),
        )?;
        Ok(names
            .iter()
            .filter_map(|name| {
                found
                    .iter()
                    .find(|f| &f.step == name)
                    .map(|f| (name.clone(), f.id))
            })
            .collect())
    }

    fn dependencies_of(&self, job_id: i64) -> Result<Vec<DependencyRow>> {
        Ok(self
            .rows::<Dependency>(
                query(
                    "SELECT j.id, j.step, j.job_type, j.queue, j.status, j.result,
                            d.any_outcome <> 0 AS any_outcome
                     FROM job_deps d JOIN jobs j ON j.id = d.depends_on
                     WHERE d.job_id = $1 ORDER BY j.id",
                )
                .int(job_id),
            )?
            .into_iter()
            .map(|d| DependencyRow {
                id: d.id,
                step: d.step,
                job_type: d.job_type,
                queue: d.queue,
                status: d.status,
                result: d.result,
                any_outcome: d.any_outcome,
            })
            .collect())
    }

    fn pending_dependants_of(&self, job_id: i64) -> Result<Vec<i64>> {
        Ok(self
            .rows::<IntRow>(
                query(
                    "SELECT job_id AS v FROM job_deps WHERE depends_on = $1 AND state = 'pending'
                     ORDER BY job_id",
                )
                .int(job_id),
            )?
            .into_iter()
            .map(|r| r.v)
            .collect())
    }

    fn close_batch(&self, id: i64, now: i64) -> Result<bool> {
        let n = self.execute(
            query(
                "UPDATE workflows SET open = 0, closed_at = $2
                 WHERE id = $1 AND kind = 'batch' AND open = 1",
            )
            .int(id)
            .int(now),
        )?;
        Ok(n == 1)
    }
}
