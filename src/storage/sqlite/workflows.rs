//! [`WorkflowStore`] on SQLite.

use rusqlite::{params, OptionalExtension};

use super::SqliteTx;
use crate::error::Result;
use crate::storage::workflows::{
    DependencyRow, StepRow, WorkflowRow, WorkflowStore, WorkflowSummary,
};

const WORKFLOW_COLUMNS: &str = "id, kind, name, open, created_at, closed_at";

fn workflow_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<WorkflowRow> {
    Ok(WorkflowRow {
        id: row.get(0)?,
        kind: row.get(1)?,
        name: row.get(2)?,
        open: row.get(3)?,
        created_at: row.get(4)?,
        closed_at: row.get(5)?,
    })
}

impl WorkflowStore for SqliteTx<'_> {
    fn create_workflow(&self, kind: &str, name: &str, open: bool, now: i64) -> Result<i64> {
        self.conn
            .prepare_cached(
                "INSERT INTO workflows (kind, name, open, created_at) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![kind, name, open, now])?;
        Ok(self.conn.last_insert_rowid())
    }

    fn place_in_workflow(&self, job_id: i64, workflow_id: i64, step: Option<&str>) -> Result<()> {
        self.conn
            .prepare_cached("UPDATE jobs SET workflow_id = ?2, step = ?3 WHERE id = ?1")?
            .execute(params![job_id, workflow_id, step])?;
        Ok(())
    }

    /// In one statement, whatever the number of jobs.
    fn place_many_in_workflow(
        &self,
        workflow_id: i64,
        jobs: &[(i64, Option<String>)],
    ) -> Result<()> {
        let rows: Vec<serde_json::Value> = jobs
            .iter()
            .map(|(id, step)| serde_json::json!([id, step]))
            .collect();
        self.conn
            .prepare_cached(
                "UPDATE jobs SET workflow_id = ?2, step = p.value ->> 1
                 FROM json_each(?1) AS p WHERE jobs.id = p.value ->> 0",
            )?
            .execute(params![
                serde_json::Value::Array(rows).to_string(),
                workflow_id
            ])?;
        Ok(())
    }

    fn workflow(&self, id: i64) -> Result<Option<WorkflowRow>> {
        Ok(self
            .conn
            .prepare_cached(&format!(
                "SELECT {WORKFLOW_COLUMNS} FROM workflows WHERE id = ?1"
            ))?
            .query_row([id], workflow_row)
            .optional()?)
    }

    fn workflow_steps(&self, id: i64) -> Result<Vec<StepRow>> {
        let mut steps: Vec<StepRow> = self
            .conn
            .prepare_cached(
                "SELECT id, step, CAST(job_type AS TEXT), CAST(queue AS TEXT), status,
                        CAST(attempts AS INTEGER), waiting_for, last_error, cancel_reason,
                        created_at, finished_at, requeued_as
                 FROM jobs WHERE workflow_id = ?1 ORDER BY id",
            )?
            .query_map([id], |row| {
                Ok(StepRow {
                    id: row.get(0)?,
                    step: row.get(1)?,
                    job_type: row.get(2)?,
                    queue: row.get(3)?,
                    status: row.get(4)?,
                    attempts: row.get(5)?,
                    waiting_for: row.get(6)?,
                    last_error: row.get(7)?,
                    cancel_reason: row.get(8)?,
                    created_at: row.get(9)?,
                    finished_at: row.get(10)?,
                    requeued_as: row.get(11)?,
                    depends_on: Vec::new(),
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        let mut edges = self.conn.prepare_cached(
            "SELECT d.job_id, d.depends_on, d.any_outcome, d.state
             FROM jobs j JOIN job_deps d ON d.job_id = j.id
             WHERE j.workflow_id = ?1 ORDER BY d.job_id, d.depends_on",
        )?;
        let rows = edges.query_map([id], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, bool>(2)?,
                row.get::<_, String>(3)?,
            ))
        })?;
        for row in rows {
            let (job_id, depends_on, any, state) = row?;
            if let Ok(i) = steps.binary_search_by_key(&job_id, |s| s.id) {
                steps[i].depends_on.push((depends_on, any, state));
            }
        }
        Ok(steps)
    }

    fn workflows(&self, limit: usize, before: Option<i64>) -> Result<Vec<WorkflowSummary>> {
        let rows: Vec<WorkflowRow> = self
            .conn
            .prepare_cached(&format!(
                "SELECT {WORKFLOW_COLUMNS} FROM workflows WHERE id < ?1 ORDER BY id DESC LIMIT ?2"
            ))?
            .query_map(
                params![
                    before.unwrap_or(i64::MAX),
                    i64::try_from(limit).unwrap_or(i64::MAX)
                ],
                workflow_row,
            )?
            .collect::<rusqlite::Result<_>>()?;
        let mut counts = self.conn.prepare_cached(
            "SELECT status, COUNT(*) FROM jobs WHERE workflow_id = ?1 AND requeued_as IS NULL
             GROUP BY status ORDER BY status",
        )?;
        rows.into_iter()
            .map(|row| {
                let counts = counts
                    .query_map([row.id], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<rusqlite::Result<_>>()?;
                Ok(WorkflowSummary { row, counts })
            })
            .collect()
    }

    fn steps_by_name(&self, workflow_id: i64, names: &[String]) -> Result<Vec<(String, i64)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id FROM jobs WHERE workflow_id = ?1 AND step = ?2 ORDER BY id DESC LIMIT 1",
        )?;
        let mut found = Vec::new();
        for name in names {
            if let Some(id) = stmt
                .query_row(params![workflow_id, name], |row| row.get(0))
                .optional()?
            {
                found.push((name.clone(), id));
            }
        }
        Ok(found)
    }

    fn dependencies_of(&self, job_id: i64) -> Result<Vec<DependencyRow>> {
        let rows = self
            .conn
            .prepare_cached(
                "SELECT j.id, j.step, CAST(j.job_type AS TEXT), CAST(j.queue AS TEXT), j.status,
                        j.result, d.any_outcome
                 FROM job_deps d JOIN jobs j ON j.id = d.depends_on
                 WHERE d.job_id = ?1 ORDER BY j.id",
            )?
            .query_map([job_id], |row| {
                Ok(DependencyRow {
                    id: row.get(0)?,
                    step: row.get(1)?,
                    job_type: row.get(2)?,
                    queue: row.get(3)?,
                    status: row.get(4)?,
                    result: row.get(5)?,
                    any_outcome: row.get(6)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    fn pending_dependants_of(&self, job_id: i64) -> Result<Vec<i64>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT job_id FROM job_deps WHERE depends_on = ?1 AND state = 'pending'
                 ORDER BY job_id",
            )?
            .query_map([job_id], |row| row.get(0))?
            .collect::<rusqlite::Result<_>>()?)
    }

    fn close_batch(&self, id: i64, now: i64) -> Result<bool> {
        let n = self
            .conn
            .prepare_cached(
                "UPDATE workflows SET open = 0, closed_at = ?2
                 WHERE id = ?1 AND kind = 'batch' AND open = 1",
            )?
            .execute(params![id, now])?;
        Ok(n == 1)
    }
}
