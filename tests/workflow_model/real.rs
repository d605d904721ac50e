//! The real side: a queue (on a file, or in a PostgreSQL schema), the scripted handler that
//! checks each start against what the test built, and one operation on both sides.

use super::*;

/// What the test built, as the handler checks each start against it (never the library's
/// own bookkeeping).
#[derive(Debug, Default)]
pub(super) struct Graph {
    /// Each job's waits as declared: (the job waited for, any outcome, whether a requeue of
    /// it stands in for it: not when it had been requeued already). A requeue's new job keeps
    /// the waits on success of the job it replaces.
    pub(super) waits: HashMap<i64, Vec<(i64, bool, bool)>>,
    /// Batch callbacks: (the model's group, `on_success`, a requeue's new job).
    pub(super) callbacks: HashMap<i64, (usize, bool, bool)>,
    /// Batches by the model's group: closed, and the members as added.
    pub(super) batches: HashMap<usize, (bool, Vec<i64>)>,
}

/// One handler call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Call {
    pub(super) id: i64,
    pub(super) attempt: u32,
    pub(super) outcome: Outcome,
}

/// What the handler shares with the test.
pub(super) struct Shared {
    pub(super) env: Arc<TestEnv>,
    pub(super) scripts: Mutex<HashMap<i64, VecDeque<Outcome>>>,
    pub(super) graph: Mutex<Graph>,
    /// Every handler call so far.
    pub(super) calls: Mutex<Vec<Call>>,
    /// What a handler found wrong when it started.
    pub(super) problems: Mutex<Vec<String>>,
}

impl Shared {
    fn status(&self, id: i64) -> (JobStatus, Option<i64>) {
        let job = self
            .env
            .queue
            .job(id)
            .expect("handler: reading a job")
            .unwrap_or_else(|| panic!("handler: job {id} is gone"));
        (job.status, job.requeued_as)
    }

    /// The latest requeue of `id` and its status.
    fn latest(&self, mut id: i64) -> (i64, JobStatus) {
        loop {
            match self.status(id) {
                (_, Some(next)) => id = next,
                (status, None) => return (id, status),
            }
        }
    }

    /// What must hold when job `id` starts, from what the test built.
    fn check_start(&self, ctx: &JobContext) -> Vec<String> {
        let id = ctx.id();
        let mut problems = Vec::new();
        let (waits, callback, batch) = {
            let graph = lock(&self.graph);
            let waits = graph.waits.get(&id).cloned().unwrap_or_default();
            let callback = graph.callbacks.get(&id).copied();
            let batch = callback.and_then(|(g, _, _)| graph.batches.get(&g).cloned());
            (waits, callback, batch)
        };
        // A job starts once the latest requeue of each job it waits for has succeeded, or
        // ended for a wait on any outcome. A later attempt of a job that has started may
        // overlap a retry of a job it waited for on any outcome: that wait was over.
        let first = ctx.attempt() == 1;
        for (dep, any, follow) in waits {
            if any {
                if !first {
                    continue;
                }
                let (latest, status) = if follow {
                    self.latest(dep)
                } else {
                    (dep, self.status(dep).0)
                };
                if !ended(status) {
                    problems.push(format!(
                        "job {id} started while job {dep} (latest requeue {latest}), which it \
                         waits for on any outcome, was {status:?}"
                    ));
                }
            } else {
                let (latest, status) = if follow {
                    self.latest(dep)
                } else {
                    (dep, self.status(dep).0)
                };
                if status != JobStatus::Succeeded {
                    problems.push(format!(
                        "job {id} started while job {dep} (latest requeue {latest}), which it \
                         waits for, was {status:?}"
                    ));
                }
            }
        }
        match ctx.dependencies() {
            Ok(deps) => {
                for d in deps {
                    if !d.any_outcome && d.status != JobStatus::Succeeded {
                        problems.push(format!(
                            "job {id}: JobContext::dependencies shows job {} {:?}",
                            d.id, d.status
                        ));
                    }
                }
            }
            Err(e) => problems.push(format!("job {id}: JobContext::dependencies: {e}")),
        }
        if let (Some((_, success, requeued)), Some((closed, members))) = (callback, batch) {
            if !closed {
                problems.push(format!("callback {id} started while its batch was open"));
            }
            let latest: Vec<(i64, JobStatus)> = members.iter().map(|&m| self.latest(m)).collect();
            for (&m, &(l, status)) in members.iter().zip(&latest) {
                // As for any wait on any outcome: promised for the first start (a requeue's
                // new on_complete waits for nothing); a member may be retried after it. A
                // success stays one.
                let ok = if success {
                    status == JobStatus::Succeeded
                } else {
                    requeued || !first || ended(self.status(m).0)
                };
                if !ok {
                    problems.push(format!(
                        "callback {id} (on_success: {success}) started while member {m} \
                         (latest requeue {l}) was {status:?}"
                    ));
                }
            }
            let mut expected: Vec<i64> = latest.iter().map(|&(l, _)| l).collect();
            expected.sort_unstable();
            let count = |s: JobStatus| latest.iter().filter(|(_, st)| *st == s).count();
            match ctx.batch() {
                Ok(Some(summary)) => {
                    let got = (
                        summary.members.clone(),
                        summary.succeeded,
                        summary.dead,
                        summary.cancelled,
                    );
                    let want = (
                        expected,
                        count(JobStatus::Succeeded),
                        count(JobStatus::Dead),
                        count(JobStatus::Cancelled),
                    );
                    if got != want {
                        problems.push(format!(
                            "callback {id}: JobContext::batch shows (members, succeeded, dead, \
                             cancelled) {got:?}, the table {want:?}"
                        ));
                    }
                }
                Ok(None) => problems.push(format!("callback {id}: JobContext::batch is None")),
                Err(e) => problems.push(format!("callback {id}: JobContext::batch: {e}")),
            }
        }
        problems
    }

    fn run(&self, ctx: &JobContext) -> Result<(), JobError> {
        let id = ctx.id();
        let outcome = lock(&self.scripts)
            .get_mut(&id)
            .and_then(VecDeque::pop_front)
            .unwrap_or(Outcome::Succeed);
        let problems = self.check_start(ctx);
        lock(&self.problems).extend(problems);
        lock(&self.calls).push(Call {
            id,
            attempt: ctx.attempt(),
            outcome,
        });
        match outcome {
            Outcome::Succeed => Ok(()),
            Outcome::Retry => Err(JobError::retry("scripted retryable error")),
            Outcome::Permanent => Err(JobError::permanent("scripted permanent error")),
            Outcome::Cancel => Err(JobError::cancel("scripted cancel")),
            Outcome::LoseLease => {
                // The lease runs out while the handler is still in it, and a reaper (this
                // process's, or another's) takes the job.
                let queue = &self.env.queue;
                self.env.sql_exec(&format!(
                    "UPDATE jobs SET locked_until = {} WHERE id = {id}",
                    queue.now_ms() - 1
                ));
                queue.reap_expired_leases().expect("handler: reaping");
                Ok(())
            }
        }
    }
}

pub(super) struct Real {
    pub(super) env: Arc<TestEnv>,
    pub(super) builder: WorkerBuilder,
    pub(super) shared: Arc<Shared>,
    /// Jobs created so far: each job's payload is distinct.
    pub(super) payloads: usize,
}

impl Real {
    pub(super) fn new() -> Real {
        let env = Arc::new(setup());
        let shared = Arc::new(Shared {
            env: Arc::clone(&env),
            scripts: Mutex::new(HashMap::new()),
            graph: Mutex::new(Graph::default()),
            calls: Mutex::new(Vec::new()),
            problems: Mutex::new(Vec::new()),
        });
        let handler = Arc::clone(&shared);
        let builder = Worker::builder(&env.queue)
            .handler(JOB_TYPE, move |ctx: &JobContext| handler.run(ctx))
            .default_timeout(Duration::from_millis(TIMEOUT_MS as u64))
            .lease_grace(Duration::from_millis(GRACE_MS as u64))
            .default_retry_policy(RetryPolicy::schedule(vec![Duration::from_millis(
                RETRY_MS as u64,
            )]));
        Real {
            env,
            builder,
            shared,
            payloads: 0,
        }
    }

    fn job(&mut self, spec: &JobSpec) -> NewJob {
        self.payloads += 1;
        new_job(spec, self.payloads)
    }

    fn script(&self, id: i64, script: &[Outcome]) {
        lock(&self.shared.scripts).insert(id, script.iter().copied().collect());
    }
}

fn kind<T>(result: litejobs::Result<T>) -> Result<T, ErrorKind> {
    result.map_err(|e| e.kind())
}

/// The model's index of the batch a pick chooses: an open one mostly, any sometimes.
fn pick_batch(model: &Model, pick: u64) -> Option<usize> {
    let open: Vec<usize> = (0..model.groups.len())
        .filter(|&g| model.groups[g].batch && model.groups[g].open)
        .collect();
    let any: Vec<usize> = (0..model.groups.len())
        .filter(|&g| model.groups[g].batch)
        .collect();
    let from = if !open.is_empty() && pick % 5 != 0 {
        open
    } else {
        any
    };
    (!from.is_empty()).then(|| from[((pick / 5) % from.len() as u64) as usize])
}

fn enqueue_flow(model: &mut Model, real: &mut Real, spec: &FlowSpec) {
    // The job each step waits for by id, chosen among the table's jobs now.
    let targets: Vec<Option<(i64, bool)>> = spec
        .steps
        .iter()
        .map(|s| {
            s.after_job
                .and_then(|(pick, any)| model.pick(pick, |_| true).map(|id| (id, any)))
        })
        .collect();
    let mut flow = Workflow::new("model");
    for &i in &spec.order {
        let s = &spec.steps[i];
        let mut step = Step::new(step_name(i), real.job(&s.job));
        for &(j, any) in &s.after {
            step = if any {
                step.after_any_outcome(step_name(j))
            } else {
                step.after(step_name(j))
            };
        }
        if let Some((id, any)) = targets[i] {
            step = if any {
                step.after_job_any_outcome(id)
            } else {
                step.after_job(id)
            };
        }
        flow = flow.step(step);
    }
    let ids = real
        .env
        .queue
        .enqueue_workflow(flow)
        .expect("a valid workflow is enqueued");
    let g = model.groups.len();
    model.groups.push(MGroup {
        id: ids.workflow_id,
        batch: false,
        open: false,
        jobs: Vec::new(),
        members: Vec::new(),
    });
    let id_of = |i: usize| ids.step(&step_name(i)).expect("every step has an id");
    // Inserted in the order declared, then their waits in the same order.
    for &i in &spec.order {
        model.insert(id_of(i), Role::Step, g, &spec.steps[i].job);
        real.script(id_of(i), &spec.steps[i].job.script);
    }
    let mut graph = lock(&real.shared.graph);
    for &i in &spec.order {
        let s = &spec.steps[i];
        let mut declared = Vec::new();
        for &(j, any) in &s.after {
            model.add_wait(id_of(i), id_of(j), any);
            declared.push((id_of(j), any, true));
        }
        if let Some((id, any)) = targets[i] {
            let follow = model.job(id).requeued_as.is_none();
            model.add_wait(id_of(i), id, any);
            declared.push((id, any, follow));
        }
        graph.waits.insert(id_of(i), declared);
    }
}

fn open_batch(
    model: &mut Model,
    real: &mut Real,
    on_success: &Option<JobSpec>,
    on_complete: &Option<JobSpec>,
    members: Option<&[JobSpec]>,
) {
    let mut batch = Batch::new("model");
    if let Some(spec) = on_success {
        batch = batch.on_success(real.job(spec));
    }
    if let Some(spec) = on_complete {
        batch = batch.on_complete(real.job(spec));
    }
    let ids = match members {
        None => real.env.queue.open_batch(batch).expect("open_batch"),
        Some(specs) => {
            let jobs = specs.iter().map(|s| real.job(s)).collect();
            real.env
                .queue
                .submit_batch(batch, jobs)
                .expect("submit_batch")
        }
    };
    let g = model.groups.len();
    model.groups.push(MGroup {
        id: ids.batch_id,
        batch: true,
        open: true,
        jobs: Vec::new(),
        members: Vec::new(),
    });
    let mut graph = lock(&real.shared.graph);
    graph.batches.insert(g, (false, Vec::new()));
    for (id, spec, success) in [
        (ids.on_success, on_success, true),
        (ids.on_complete, on_complete, false),
    ] {
        let (Some(id), Some(spec)) = (id, spec) else {
            assert_eq!(
                id.is_some(),
                spec.is_some(),
                "a callback id iff one was asked for"
            );
            continue;
        };
        model.insert(id, Role::Callback { group: g, success }, g, spec);
        model.jobs.get_mut(&id).expect("just inserted").batch_hold = true;
        real.script(id, &spec.script);
        graph.callbacks.insert(id, (g, success, false));
    }
    drop(graph);
    if let Some(specs) = members {
        add_members(model, real, g, &ids.members, specs);
        close(model, real, g);
    }
}

fn add_members(model: &mut Model, real: &Real, g: usize, ids: &[i64], specs: &[JobSpec]) {
    assert_eq!(ids.len(), specs.len(), "an id per member");
    model.add_members(g, ids, specs);
    for (&id, spec) in ids.iter().zip(specs) {
        real.script(id, &spec.script);
    }
    let mut graph = lock(&real.shared.graph);
    let batch = graph.batches.get_mut(&g).expect("the batch");
    batch.1.extend_from_slice(ids);
}

fn close(model: &mut Model, real: &Real, g: usize) {
    model.close(g);
    if let Some(batch) = lock(&real.shared.graph).batches.get_mut(&g) {
        batch.0 = true;
    }
}

/// Prints the model's jobs and every handler call (shown with the failure).
fn dump(model: &Model, real: &Real) {
    for (id, job) in &model.jobs {
        println!("  model job {id}: {job:?}");
    }
    println!("  handler calls: {:?}", lock(&real.shared.calls));
}

/// Runs one operation on both sides and compares what each returned.
pub(super) fn step(model: &mut Model, real: &mut Real, op: &Op) {
    match op {
        Op::Flow(spec) => enqueue_flow(model, real, spec),
        Op::OpenBatch {
            on_success,
            on_complete,
        } => open_batch(model, real, on_success, on_complete, None),
        Op::SubmitBatch {
            on_success,
            on_complete,
            members,
        } => open_batch(model, real, on_success, on_complete, Some(members)),
        Op::AddToBatch(pick, specs) => {
            let Some(g) = pick_batch(model, *pick) else {
                return;
            };
            let jobs: Vec<NewJob> = specs.iter().map(|s| real.job(s)).collect();
            let got = kind(real.env.queue.add_to_batch(model.groups[g].id, jobs));
            if model.groups[g].open {
                let ids = got.expect("add_to_batch of an open batch");
                add_members(model, real, g, &ids, specs);
            } else {
                cover("a closed batch refuses a member");
                assert_eq!(
                    got.err(),
                    Some(ErrorKind::InvalidState),
                    "add to closed batch"
                );
            }
        }
        Op::CloseBatch(pick) => {
            let Some(g) = pick_batch(model, *pick) else {
                return;
            };
            let got = kind(real.env.queue.close_batch(model.groups[g].id));
            if model.groups[g].open {
                got.expect("close_batch of an open batch");
                close(model, real, g);
            } else {
                assert_eq!(got, Err(ErrorKind::InvalidState), "close a closed batch");
            }
        }
        Op::Drain => {
            let expected = model.drain();
            let before = lock(&real.shared.calls).len();
            testing::drain(&real.builder).expect("drain");
            let mut calls: Vec<(i64, u32)> = lock(&real.shared.calls)[before..]
                .iter()
                .map(|c| (c.id, c.attempt))
                .collect();
            calls.sort_unstable();
            let problems = std::mem::take(&mut *lock(&real.shared.problems));
            if !problems.is_empty() {
                dump(model, real);
            }
            assert!(problems.is_empty(), "handlers found: {problems:#?}");
            assert_eq!(
                calls, expected,
                "the handler calls (job, attempt) of a drain"
            );
        }
        Op::Advance(ms) => {
            real.env
                .clock
                .advance(Duration::from_millis(u64::from(*ms)));
            model.now += i64::from(*ms);
        }
        Op::Crash(pick) => {
            let due = model.due();
            if due.is_empty() {
                return;
            }
            let id = due[(pick % due.len() as u64) as usize];
            model.crash(id);
            println!("  a worker claimed job {id} and died");
            let job = model.job(id);
            // The claim a worker makes, by a worker that then dies.
            real.env.sql_exec(&format!(
                "UPDATE jobs SET status = 'running', attempts = attempts + 1,
                        locked_by = 'crashed-worker', locked_until = {until},
                        started_at = {now}, updated_at = {now}
                 WHERE id = {id} AND status IN ('queued', 'failed') AND run_at <= {now}
                   AND waiting_for = 0",
                until = job.locked_until.expect("leased"),
                now = model.now,
            ));
        }
        Op::Reap => {
            let expected = model.reap();
            let reaped = real.env.queue.reap_expired_leases().expect("reaping");
            assert_eq!(reaped, expected, "jobs reaped");
        }
        Op::Cancel(pick) => {
            let Some(id) = model.pick(*pick, MJob::live) else {
                return;
            };
            let expected = model.cancel(id);
            println!("  cancel of job {id}: {expected:?}");
            assert_eq!(
                kind(real.env.queue.cancel(id)),
                expected,
                "cancel of job {id}"
            );
        }
        Op::CancelWorkflow(pick) => {
            if model.groups.is_empty() {
                return;
            }
            let g = (pick % model.groups.len() as u64) as usize;
            if model.groups[g].jobs.iter().any(|&id| model.job(id).live()) {
                cover("a workflow cancelled");
            }
            let expected = model.cancel_group(g);
            let got = real
                .env
                .queue
                .cancel_workflow(model.groups[g].id, PERSON, "the model cancels it")
                .expect("cancel_workflow");
            assert_eq!(
                got, expected,
                "the jobs cancel_workflow cancelled, in order"
            );
            if let Some(batch) = lock(&real.shared.graph).batches.get_mut(&g) {
                batch.0 = true;
            }
        }
        Op::Requeue(pick, script) => {
            let Some(id) = model.pick(*pick, |j| j.status == JobStatus::Dead) else {
                return;
            };
            let got = kind(
                real.env
                    .queue
                    .requeue_dead(id, PERSON, "the model requeues it"),
            );
            if model.job(id).requeued_as.is_some() {
                assert_eq!(got.err(), Some(ErrorKind::InvalidState), "requeue twice");
                return;
            }
            let new = got.expect("requeue of a dead job");
            println!("  job {id} requeued as job {new}");
            model.requeue(id, new, script);
            real.script(new, script);
            let mut graph = lock(&real.shared.graph);
            // The new job waits for nothing: the waits of the one it replaces were over
            // when that one started. Those on success stay over for good.
            let waits = graph.waits.get(&id).cloned().unwrap_or_default();
            graph
                .waits
                .insert(new, waits.into_iter().filter(|&(_, any, _)| !any).collect());
            if let Some(&(g, success, _)) = graph.callbacks.get(&id) {
                graph.callbacks.insert(new, (g, success, true));
            }
        }
        Op::RetryNow(pick) => {
            let Some(id) = model.pick(*pick, |_| true) else {
                return;
            };
            let expected = model.retry_now(id);
            println!("  retry_now of job {id}: {expected:?}");
            assert_eq!(
                kind(real.env.queue.retry_now(id)),
                expected,
                "retry_now of job {id} ({:?})",
                model.job(id).status
            );
        }
    }
}

/// Closes the model's batch `g` on both sides (the end of a seed closes those left open).
pub(super) fn close_batch(model: &mut Model, real: &mut Real, g: usize) {
    real.env
        .queue
        .close_batch(model.groups[g].id)
        .expect("close_batch of an open batch");
    close(model, real, g);
}
