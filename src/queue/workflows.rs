//! `impl Queue` for workflows and batches: enqueueing them, reading them, cancelling a
//! workflow. The waits themselves are kept by the storage (`storage::jobs::deps`).

use std::collections::{BTreeMap, BTreeSet};

use rusqlite::Connection;

use crate::error::{Error, ErrorKind, Result};
use crate::job::{validate, NewJob};
use crate::storage::jobs::deps::edges_of;
use crate::storage::jobs::insert::VALIDATED_FROM_ROWS;
use crate::storage::jobs::{Edge, Inserted, Settled};
use crate::storage::workflows::{ON_COMPLETE, ON_SUCCESS};
use crate::storage::{with_triggers_off, SqliteTx, Tx};
use crate::workflow::{
    check_steps, info_of, listing_of, Batch, BatchIds, Step, Target, Workflow, WorkflowIds,
    WorkflowInfo, WorkflowListing,
};
use crate::Queue;

impl Queue {
    /// Enqueues every step of `flow` in one transaction: all or none. A step runs once every
    /// step (or job) it waits for has succeeded; steps that wait for nothing are due at
    /// once. Returns the workflow's id and each step's job id.
    ///
    /// # Errors
    /// [`InvalidJob`](crate::ErrorKind::InvalidJob) for a workflow
    /// [`Workflow::validate`] refuses or a step whose job is invalid (naming the step);
    /// [`NotFound`](crate::ErrorKind::NotFound) for a wait on a job id that does not exist;
    /// [`InvalidState`](crate::ErrorKind::InvalidState) for a step whose idempotency key is
    /// held by another job (a step must be a new job). Nothing is written then.
    pub fn enqueue_workflow(&self, flow: Workflow) -> Result<WorkflowIds> {
        flow.validate()?;
        let now = self.now_ms();
        // Steps enough to go in with the schema's rules off go on the connection kept with
        // them off: switching them off on another connection made SQLite re-prepare its
        // statements several times per workflow (5 % of a 1 000-step enqueue). Every value
        // the transaction writes is litejobs' own or checked (the steps' jobs, the names).
        let keyless = flow
            .steps
            .iter()
            .filter(|s| s.job.idempotency_key.is_none())
            .count();
        let ids = if keyless >= VALIDATED_FROM_ROWS {
            self.db()
                .write_validated(|tx| self.workflow_on(tx, &flow, now))?
        } else {
            self.db().write(|tx| self.workflow_on(tx, &flow, now))?
        };
        self.after_workflow(&flow.steps, &ids.steps);
        Ok(ids)
    }

    /// [`Queue::enqueue_workflow`] inside the caller's own rusqlite transaction: the steps
    /// commit with the caller's change, or not at all. Call [`Queue::notify`] after the
    /// commit to wake workers at once.
    ///
    /// # Errors
    /// As [`Queue::enqueue_workflow`].
    pub fn enqueue_workflow_in(&self, conn: &Connection, flow: Workflow) -> Result<WorkflowIds> {
        flow.validate()?;
        let now = self.now_ms();
        with_triggers_off(conn, || self.workflow_on(&SqliteTx::new(conn), &flow, now))
    }

    /// [`Queue::enqueue_workflow`] inside the caller's own PostgreSQL transaction on their
    /// diesel connection (feature `postgres`); see [`Queue::enqueue_in_pg`].
    ///
    /// # Errors
    /// As [`Queue::enqueue_workflow`]; [`InvalidState`](crate::ErrorKind::InvalidState) when
    /// this queue is on a SQLite file.
    #[cfg(feature = "postgres")]
    pub fn enqueue_workflow_in_pg(
        &self,
        conn: &mut diesel::PgConnection,
        flow: Workflow,
    ) -> Result<WorkflowIds> {
        let Some(schema) = self.db().pg_schema() else {
            return Err(Error::new(
                ErrorKind::InvalidState,
                "this queue is on a SQLite file: use Queue::enqueue_workflow_in with a rusqlite \
                 transaction",
            ));
        };
        flow.validate()?;
        let now = self.now_ms();
        crate::storage::postgres::in_callers_transaction(conn, schema, |tx| {
            self.workflow_on(tx, &flow, now)
        })
    }

    /// Writes `flow` (already validated) in the caller's transaction.
    pub(crate) fn workflow_on(
        &self,
        tx: &dyn Tx,
        flow: &Workflow,
        now: i64,
    ) -> Result<WorkflowIds> {
        let workflow_id = tx.create_workflow("workflow", &flow.name, false, now)?;
        let steps = self.insert_steps(tx, workflow_id, &flow.steps, &BTreeMap::new(), now)?;
        Ok(WorkflowIds { workflow_id, steps })
    }

    /// Inserts `steps` into workflow `workflow_id` (`existing`: its steps already stored
    /// that the new ones may wait for, by name), then their waits. Returns the new steps'
    /// ids by name.
    pub(crate) fn insert_steps(
        &self,
        tx: &dyn Tx,
        workflow_id: i64,
        steps: &[Step],
        existing: &BTreeMap<String, i64>,
        now: i64,
    ) -> Result<BTreeMap<String, i64>> {
        // A step goes in held, counting its waits by name too, and in its workflow.
        let jobs: Vec<NewJob> = steps
            .iter()
            .map(|s| NewJob {
                extra_waits: s.waits.len(),
                placed: Some((workflow_id, s.name.clone())),
                ..s.job.clone()
            })
            .collect();
        let new = self.insert_members(tx, &jobs, |i| format!("step {:?}", steps[i].name), now)?;
        let ids: BTreeMap<String, i64> = steps
            .iter()
            .map(|s| s.name.clone())
            .zip(new.iter().map(|ins| ins.id))
            .collect();
        let mut edges = Vec::new();
        for ((step, job), inserted) in steps.iter().zip(&jobs).zip(&new) {
            // Waits given on the step's job itself (`NewJob::after`).
            edges.extend(edges_of(inserted, job));
            for wait in &step.waits {
                let depends_on = match &wait.target {
                    Target::Job(id) => *id,
                    Target::Step(name) => match ids.get(name).or_else(|| existing.get(name)) {
                        Some(id) => *id,
                        None => {
                            return Err(Error::new(
                                ErrorKind::InvalidJob,
                                format!("step {:?} waits for unknown step {name:?}", step.name),
                            ))
                        }
                    },
                };
                edges.push(Edge {
                    job_id: inserted.id,
                    depends_on,
                    any_outcome: wait.any_outcome,
                    counted: inserted.held,
                });
            }
        }
        let settled = tx.add_dependencies(&edges, now)?;
        log_settled(&settled);
        Ok(ids)
    }

    /// Inserts one job of a workflow or batch, which must be a new job.
    fn insert_member(&self, tx: &dyn Tx, job: &NewJob, now: i64) -> Result<Inserted> {
        let payload = validate(job, self.max_payload_bytes())?;
        let payload = self.stored_payload(Some(tx), job, payload, now)?;
        let inserted = tx.insert_job(job, &payload, now)?;
        if !inserted.created {
            return Err(not_new(inserted.id));
        }
        Ok(inserted)
    }

    /// Inserts the jobs of a workflow or batch, each a new job, in as few statements as a
    /// batch enqueue; `what` names job `i` in an error.
    fn insert_members(
        &self,
        tx: &dyn Tx,
        jobs: &[NewJob],
        what: impl Fn(usize) -> String,
        now: i64,
    ) -> Result<Vec<Inserted>> {
        let payloads = jobs
            .iter()
            .enumerate()
            .map(|(i, job)| {
                validate(job, self.max_payload_bytes())
                    .and_then(|payload| self.stored_payload(Some(tx), job, payload, now))
                    .map_err(|e| e.prefixed(&what(i)))
            })
            .collect::<Result<Vec<String>>>()?;
        let inserted = tx.insert_jobs(jobs, &payloads, now)?;
        inserted
            .into_iter()
            .enumerate()
            .map(|(i, ins)| {
                if ins.created {
                    Ok(ins)
                } else {
                    Err(not_new(ins.id).prefixed(&what(i)))
                }
            })
            .collect()
    }

    /// Wakes workers and tells subscribers of the steps just committed.
    fn after_workflow(&self, steps: &[Step], ids: &BTreeMap<String, i64>) {
        let created: Vec<(i64, &NewJob)> = steps
            .iter()
            .filter_map(|s| ids.get(&s.name).map(|&id| (id, &s.job)))
            .collect();
        self.after_enqueue(&created);
    }

    /// Opens a batch: its callbacks are inserted now, held until the batch is closed
    /// ([`Queue::close_batch`]) and every job added to it ([`Queue::add_to_batch`]) has
    /// ended. See [`Batch`].
    ///
    /// # Errors
    /// An invalid callback job; a database error.
    pub fn open_batch(&self, batch: Batch) -> Result<BatchIds> {
        let now = self.now_ms();
        self.db().write(|tx| self.open_batch_on(tx, &batch, now))
    }

    fn open_batch_on(&self, tx: &dyn Tx, batch: &Batch, now: i64) -> Result<BatchIds> {
        let batch_id = tx.create_workflow("batch", &batch.name, true, now)?;
        let callback = |name: &str, job: &Option<NewJob>| -> Result<Option<i64>> {
            let Some(job) = job else { return Ok(None) };
            let inserted = self
                .insert_member(tx, job, now)
                .map_err(|e| e.prefixed(&format!("batch callback {name}")))?;
            let id = inserted.id;
            tx.place_in_workflow(id, batch_id, Some(name))?;
            // Held by the batch being open, and by the jobs it asked to wait for.
            tx.hold(&[id], 1, now)?;
            let waits: Vec<Edge> = edges_of(&inserted, job).collect();
            log_settled(&tx.add_dependencies(&waits, now)?);
            Ok(Some(id))
        };
        Ok(BatchIds {
            batch_id,
            on_success: callback(ON_SUCCESS, &batch.on_success)?,
            on_complete: callback(ON_COMPLETE, &batch.on_complete)?,
            members: Vec::new(),
        })
    }

    /// Adds `jobs` to an open batch in one transaction; returns their ids. Its callbacks
    /// wait for them too.
    ///
    /// # Errors
    /// [`NotFound`](crate::ErrorKind::NotFound) for an unknown batch;
    /// [`InvalidState`](crate::ErrorKind::InvalidState) for a closed one, or a job whose
    /// idempotency key another job holds; an invalid job (naming it). Nothing is added then.
    pub fn add_to_batch(&self, batch_id: i64, jobs: Vec<NewJob>) -> Result<Vec<i64>> {
        let now = self.now_ms();
        let ids = self
            .db()
            .write(|tx| self.add_to_batch_on(tx, batch_id, &jobs, now))?;
        let created: Vec<(i64, &NewJob)> = ids.iter().copied().zip(&jobs).collect();
        self.after_enqueue(&created);
        Ok(ids)
    }

    fn add_to_batch_on(
        &self,
        tx: &dyn Tx,
        batch_id: i64,
        jobs: &[NewJob],
        now: i64,
    ) -> Result<Vec<i64>> {
        tx.lock_key(&format!("litejobs-batch-{batch_id}"))?;
        match tx.workflow(batch_id)? {
            Some(row) if row.kind == "batch" && row.open => {}
            Some(row) if row.kind == "batch" => {
                return Err(Error::new(
                    ErrorKind::InvalidState,
                    format!("batch {batch_id} is closed: it takes no more jobs"),
                ))
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!("there is no batch {batch_id}"),
                ))
            }
        }
        // A callback already cancelled (a member ended dead: no more on_success) waits for
        // nothing more; if a requeue of that member brings it back, it waits for these then
        // (see `revive`).
        let mut callbacks = Vec::new();
        for (name, id) in tx.steps_by_name(batch_id, &[ON_SUCCESS.into(), ON_COMPLETE.into()])? {
            if tx
                .job(id)?
                .is_some_and(|j| j.status == crate::job::JobStatus::Queued)
            {
                callbacks.push((name, id));
            }
        }
        let inserted =
            self.insert_members(tx, jobs, |i| format!("job {i} for batch {batch_id}"), now)?;
        let ids: Vec<i64> = inserted.iter().map(|ins| ins.id).collect();
        let placed: Vec<(i64, Option<String>)> = ids.iter().map(|&id| (id, None)).collect();
        tx.place_many_in_workflow(batch_id, &placed)?;
        // The members' own waits (`NewJob::after`), and the callbacks' waits for them.
        let own = inserted
            .iter()
            .zip(jobs)
            .flat_map(|(ins, job)| edges_of(ins, job));
        let edges: Vec<Edge> = own
            .chain(callbacks.iter().flat_map(|(name, callback)| {
                ids.iter().map(move |&member| Edge {
                    job_id: *callback,
                    depends_on: member,
                    any_outcome: name == ON_COMPLETE,
                    counted: false,
                })
            }))
            .collect();
        let settled = tx.add_dependencies(&edges, now)?;
        log_settled(&settled);
        Ok(ids)
    }

    /// Closes a batch: it takes no more jobs, and its callbacks become due once every job
    /// in it has ended (at once if all have, or if it has none).
    ///
    /// # Errors
    /// [`NotFound`](crate::ErrorKind::NotFound) for an unknown batch;
    /// [`InvalidState`](crate::ErrorKind::InvalidState) for one already closed.
    pub fn close_batch(&self, batch_id: i64) -> Result<()> {
        let now = self.now_ms();
        self.db().write(|tx| close_batch_on(tx, batch_id, now))?;
        self.notify();
        Ok(())
    }

    /// Opens a batch, adds `jobs` and closes it, in one transaction.
    ///
    /// # Errors
    /// As [`Queue::open_batch`] and [`Queue::add_to_batch`]; nothing is written then.
    pub fn submit_batch(&self, batch: Batch, jobs: Vec<NewJob>) -> Result<BatchIds> {
        let now = self.now_ms();
        let ids = self.db().write(|tx| {
            let mut ids = self.open_batch_on(tx, &batch, now)?;
            ids.members = self.add_to_batch_on(tx, ids.batch_id, &jobs, now)?;
            close_batch_on(tx, ids.batch_id, now)?;
            Ok(ids)
        })?;
        let created: Vec<(i64, &NewJob)> = ids.members.iter().copied().zip(&jobs).collect();
        self.after_enqueue(&created);
        self.notify();
        Ok(ids)
    }

    /// One workflow or batch with all its jobs, or `None`.
    pub fn workflow(&self, id: i64) -> Result<Option<WorkflowInfo>> {
        self.db().read(|tx| {
            let Some(row) = tx.workflow(id)? else {
                return Ok(None);
            };
            Ok(Some(info_of(row, tx.workflow_steps(id)?)))
        })
    }

    /// Workflows and batches, newest first: up to `limit`, with ids below `before` when
    /// given (the last id of the previous page).
    pub fn workflows(&self, limit: usize, before: Option<i64>) -> Result<Vec<WorkflowListing>> {
        let rows = self.db().read(|tx| tx.workflows(limit, before))?;
        Ok(rows.into_iter().map(listing_of).collect())
    }

    /// Cancels, in one transaction, every job of a workflow or batch that has not ended
    /// (waiting, held or running, as [`Queue::cancel_as`] cancels one), and closes a batch.
    /// Returns the ids cancelled, in the order they were (held jobs first).
    ///
    /// # Errors
    /// [`NotFound`](crate::ErrorKind::NotFound) for an unknown workflow.
    pub fn cancel_workflow(&self, id: i64, by: &str, reason: &str) -> Result<Vec<i64>> {
        let now = self.now_ms();
        let cancelled = self.db().write(|tx| {
            // Before reading it: a batch closed meanwhile elsewhere is seen closed.
            tx.lock_key(&format!("litejobs-batch-{id}"))?;
            let Some(row) = tx.workflow(id)? else {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!("there is no workflow or batch {id}"),
                ));
            };
            if row.open {
                // Closed as close_batch does: its callbacks no longer wait for the closing.
                close_batch_on(tx, id, now)?;
            }
            // Held steps first, so that each is cancelled by whoever asked, not by the
            // cascade of a step it waits for.
            let mut live: Vec<(bool, i64)> = tx
                .workflow_steps(id)?
                .into_iter()
                .filter(|s| matches!(s.status.as_str(), "queued" | "failed" | "running"))
                .map(|s| (s.waiting_for == 0, s.id))
                .collect();
            live.sort_unstable();
            let live = live.into_iter().map(|(_, id)| id);
            let mut cancelled = Vec::new();
            for job in live {
                match tx.cancel(job, by, reason, now) {
                    Ok(c) => cancelled.push(c),
                    // Cancelled already by an earlier step's cascade.
                    Err(e) if e.kind() == ErrorKind::InvalidState => continue,
                    Err(e) => return Err(e),
                }
                tx.settle_dependants(&[job], now)?;
            }
            Ok(cancelled)
        })?;
        let ids = cancelled.iter().map(|c| c.id).collect();
        self.after_cancel(&cancelled, by, reason);
        Ok(ids)
    }

    /// The steps of workflow `workflow_id` that `steps` (to be added to it) wait for by
    /// name, with their ids, after checking `steps` against them (no name used twice, no
    /// wait for a step neither has, no cycle).
    pub(crate) fn existing_steps(
        &self,
        tx: &dyn Tx,
        workflow_id: i64,
        steps: &[Step],
    ) -> Result<BTreeMap<String, i64>> {
        let mut names: BTreeSet<String> = steps.iter().map(|s| s.name.clone()).collect();
        for step in steps {
            for wait in &step.waits {
                if let Target::Step(name) = &wait.target {
                    names.insert(name.clone());
                }
            }
        }
        let names: Vec<String> = names.into_iter().collect();
        let found: BTreeMap<String, i64> =
            tx.steps_by_name(workflow_id, &names)?.into_iter().collect();
        let known: BTreeSet<String> = found.keys().cloned().collect();
        check_steps(steps, &known)?;
        Ok(found)
    }
}

/// In the transaction that requeued dead job `old` as job `new`: `new` takes `old`'s place
/// in its workflow or batch (same step name) and its waits (so its handler reads what
/// `old`'s read, with `JobContext::dependencies`), and the jobs `old`'s end cancelled wait
/// for `new` instead.
pub(crate) fn stand_in(tx: &dyn Tx, old: i64, new: i64, now: i64) -> Result<()> {
    if let Some(job) = tx.job(old)? {
        if let Some(workflow_id) = job.workflow_id {
            tx.place_in_workflow(new, workflow_id, job.step.as_deref())?;
        }
    }
    // A job that ran had each of its waits satisfied, so the copies are too and hold `new`
    // back for nothing; a wait still pending (a status changed by plain SQL) holds it.
    let waits: Vec<Edge> = tx
        .dependencies_of(old)?
        .into_iter()
        .map(|d| Edge {
            job_id: new,
            depends_on: d.id,
            any_outcome: d.any_outcome,
            counted: false,
        })
        .collect();
    tx.add_dependencies(&waits, now)?;
    revive(tx, old, new, now)
}

/// In the transaction that runs dead job `old` again as `new` (a requeue's new job, or `old`
/// itself after a retry): the jobs its end had cancelled wait for `new` again (see
/// `DependencyStore::revive_dependants`), and a batch's on_success brought back also waits
/// for the members added while it stood cancelled.
pub(crate) fn revive(tx: &dyn Tx, old: i64, new: i64, now: i64) -> Result<()> {
    for id in tx.revive_dependants(old, new, now)? {
        rejoin_batch(tx, id, now)?;
    }
    Ok(())
}

/// Job `id`, just brought back: a batch's on_success waits for every member it does not wait
/// for yet (added while it stood cancelled), but a dead member a requeue replaced.
fn rejoin_batch(tx: &dyn Tx, id: i64, now: i64) -> Result<()> {
    let Some(job) = tx.job(id)? else {
        return Ok(());
    };
    let (Some(batch), Some(ON_SUCCESS)) = (job.workflow_id, job.step.as_deref()) else {
        return Ok(());
    };
    if tx.workflow(batch)?.is_none_or(|row| row.kind != "batch") {
        return Ok(());
    }
    let waited: BTreeSet<i64> = tx.dependencies_of(id)?.into_iter().map(|d| d.id).collect();
    let mut edges = Vec::new();
    for member in tx.workflow_steps(batch)? {
        if member.step.is_some() || waited.contains(&member.id) {
            continue;
        }
        if member.status == "dead" && tx.job(member.id)?.is_some_and(|j| j.requeued_as.is_some()) {
            continue;
        }
        edges.push(Edge {
            job_id: id,
            depends_on: member.id,
            any_outcome: false,
            counted: false,
        });
    }
    let settled = tx.add_dependencies(&edges, now)?;
    log_settled(&settled);
    Ok(())
}

fn close_batch_on(tx: &dyn Tx, batch_id: i64, now: i64) -> Result<()> {
    tx.lock_key(&format!("litejobs-batch-{batch_id}"))?;
    if !tx.close_batch(batch_id, now)? {
        return Err(match tx.workflow(batch_id)? {
            Some(row) if row.kind == "batch" => Error::new(
                ErrorKind::InvalidState,
                format!("batch {batch_id} is already closed"),
            ),
            _ => Error::new(ErrorKind::NotFound, format!("there is no batch {batch_id}")),
        });
    }
    let callbacks: Vec<i64> = tx
        .steps_by_name(batch_id, &[ON_SUCCESS.into(), ON_COMPLETE.into()])?
        .into_iter()
        .map(|(_, id)| id)
        .collect();
    let settled = tx.unhold(&callbacks, now)?;
    log_settled(&settled);
    Ok(())
}

fn log_settled(settled: &Settled) {
    for id in &settled.cancelled {
        log::info!("litejobs: job {id} cancelled: a job it waited for ended dead or cancelled");
    }
}

/// The refusal of a workflow's or batch's job whose idempotency key job `holder` holds.
fn not_new(holder: i64) -> Error {
    Error::new(
        ErrorKind::InvalidState,
        format!(
            "its idempotency key is held by job {holder}, and a job of a workflow or batch \
             must be a new job; nothing was written"
        ),
    )
}
