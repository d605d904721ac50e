//! The in-memory model: what each job's status, waits and due time must be, written from
//! the promises of the guide (a job runs once every job it waits for has succeeded, or ended
//! for a wait on any outcome; one that ends dead or cancelled cancels those waiting for it
//! on success, transitively; a requeue or retry brings them back; a batch's callbacks wait
//! for its closing and for every member).

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WaitState {
    Pending,
    Done,
    Failed,
}

/// One wait of a job.
#[derive(Debug, Clone)]
pub(super) struct MWait {
    pub(super) on: i64,
    pub(super) any: bool,
    pub(super) state: WaitState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Step,
    Member { group: usize },
    Callback { group: usize, success: bool },
}

#[derive(Debug, Clone)]
pub(super) struct MJob {
    pub(super) role: Role,
    pub(super) group: usize,
    pub(super) status: JobStatus,
    /// Cancelled because a job it waited for ended dead or cancelled.
    pub(super) by_dependency: bool,
    pub(super) waits: Vec<MWait>,
    /// A callback held by its batch being open.
    pub(super) batch_hold: bool,
    /// The time it is due at once nothing holds it.
    pub(super) run_at: i64,
    pub(super) attempts: u32,
    pub(super) max_attempts: u32,
    pub(super) script: VecDeque<Outcome>,
    /// A crashed worker's lease.
    pub(super) locked_until: Option<i64>,
    pub(super) requeued_as: Option<i64>,
}

impl MJob {
    pub(super) fn waiting_for(&self) -> i64 {
        self.waits
            .iter()
            .filter(|w| w.state == WaitState::Pending)
            .count() as i64
            + i64::from(self.batch_hold)
    }

    pub(super) fn held(&self) -> bool {
        self.status == JobStatus::Queued && self.waiting_for() > 0
    }

    fn due(&self, now: i64) -> bool {
        match self.status {
            JobStatus::Queued => !self.held() && self.run_at <= now,
            JobStatus::Failed => self.run_at <= now,
            _ => false,
        }
    }

    pub(super) fn live(&self) -> bool {
        matches!(
            self.status,
            JobStatus::Queued | JobStatus::Failed | JobStatus::Running
        )
    }
}

pub(super) fn ended(status: JobStatus) -> bool {
    matches!(
        status,
        JobStatus::Succeeded | JobStatus::Dead | JobStatus::Cancelled
    )
}

/// A workflow or batch.
#[derive(Debug, Clone)]
pub(super) struct MGroup {
    pub(super) id: i64,
    pub(super) batch: bool,
    pub(super) open: bool,
    /// Every job placed in it (requeues' new jobs included), in id order.
    pub(super) jobs: Vec<i64>,
    /// A batch's members as added (not their requeues).
    pub(super) members: Vec<i64>,
}

#[derive(Debug)]
pub(super) struct Model {
    pub(super) now: i64,
    pub(super) jobs: BTreeMap<i64, MJob>,
    pub(super) groups: Vec<MGroup>,
}

impl Model {
    pub(super) fn new() -> Model {
        Model {
            now: crate::support::START_MS,
            jobs: BTreeMap::new(),
            groups: Vec::new(),
        }
    }

    pub(super) fn job(&self, id: i64) -> &MJob {
        &self.jobs[&id]
    }

    fn job_mut(&mut self, id: i64) -> &mut MJob {
        self.jobs.get_mut(&id).expect("a job of the model")
    }

    /// The `pick`-th (modulo) of the jobs that pass `keep`, in id order.
    pub(super) fn pick(&self, pick: u64, keep: impl Fn(&MJob) -> bool) -> Option<i64> {
        let ids: Vec<i64> = self
            .jobs
            .iter()
            .filter(|(_, j)| keep(j))
            .map(|(&id, _)| id)
            .collect();
        (!ids.is_empty()).then(|| ids[(pick % ids.len() as u64) as usize])
    }

    /// The latest requeue of `id` (itself when it was never requeued).
    pub(super) fn latest(&self, mut id: i64) -> i64 {
        while let Some(next) = self.job(id).requeued_as {
            id = next;
        }
        id
    }

    pub(super) fn insert(&mut self, id: i64, role: Role, group: usize, spec: &JobSpec) {
        assert!(
            !self.jobs.contains_key(&id),
            "job {id} was handed out twice"
        );
        let delay = spec.delay_s.map_or(0, |s| i64::from(s) * 1000);
        self.jobs.insert(
            id,
            MJob {
                role,
                group,
                status: JobStatus::Queued,
                by_dependency: false,
                waits: Vec::new(),
                batch_hold: false,
                run_at: self.now + delay,
                attempts: 0,
                max_attempts: spec.max_attempts,
                script: spec.script.iter().copied().collect(),
                locked_until: None,
                requeued_as: None,
            },
        );
        self.groups[group].jobs.push(id);
    }

    /// `dependant` waits for `on` from now on. A dependency that has already ended settles
    /// the wait at once (and one that ended dead or cancelled cancels a queued dependant).
    pub(super) fn add_wait(&mut self, dependant: i64, on: i64, any: bool) {
        let dep = self.job(on).status;
        let state = match dep {
            JobStatus::Succeeded => WaitState::Done,
            JobStatus::Dead | JobStatus::Cancelled if any => WaitState::Done,
            JobStatus::Dead | JobStatus::Cancelled => WaitState::Failed,
            _ => WaitState::Pending,
        };
        if state != WaitState::Pending {
            cover("a wait on a job that had already ended");
        }
        self.job_mut(dependant).waits.push(MWait { on, any, state });
        if state == WaitState::Failed && self.job(dependant).status == JobStatus::Queued {
            cover("a wait on a job that had already failed: cancelled at once");
            self.cancel_by_dependency(dependant);
        }
    }

    fn cancel_by_dependency(&mut self, id: i64) {
        let job = self.job_mut(id);
        job.status = JobStatus::Cancelled;
        job.by_dependency = true;
        self.settle(id);
    }

    /// `id` has just ended: the waits on it are settled, transitively.
    pub(super) fn settle(&mut self, id: i64) {
        let now = self.now;
        let mut todo = VecDeque::from([id]);
        while let Some(ended_id) = todo.pop_front() {
            let status = self.job(ended_id).status;
            let dependants: Vec<i64> = self
                .jobs
                .iter()
                .filter(|(_, j)| {
                    j.waits
                        .iter()
                        .any(|w| w.on == ended_id && w.state == WaitState::Pending)
                })
                .map(|(&d, _)| d)
                .collect();
            for d in dependants {
                let job = self.job_mut(d);
                let wait = job
                    .waits
                    .iter_mut()
                    .find(|w| w.on == ended_id && w.state == WaitState::Pending)
                    .expect("the pending wait");
                let done = status == JobStatus::Succeeded || wait.any;
                wait.state = if done {
                    WaitState::Done
                } else {
                    WaitState::Failed
                };
                if done && status != JobStatus::Succeeded {
                    cover("a wait on any outcome done by a dead or cancelled job");
                }
                if done && job.status == JobStatus::Queued && job.waiting_for() == 0 {
                    if matches!(job.role, Role::Callback { .. }) {
                        cover("a batch callback released by its last member");
                    } else {
                        cover("a step released by its last dependency");
                    }
                    if job.run_at > now {
                        cover("a step released with a delay still to run");
                    }
                }
                if !done && job.status == JobStatus::Queued {
                    job.status = JobStatus::Cancelled;
                    job.by_dependency = true;
                    if status == JobStatus::Dead {
                        cover("a dependency dead: its dependants cancelled transitively");
                    }
                    if matches!(job.role, Role::Callback { success: true, .. }) {
                        cover("on_success cancelled by a dead member");
                    }
                    todo.push_back(d);
                }
            }
        }
    }

    /// `old` (dead) runs again as `new` (a requeue's new job, or `old` itself after a
    /// retry): the waits it failed wait for `new`, and the jobs it cancelled (transitively)
    /// that nothing else fails come back.
    pub(super) fn revive(&mut self, old: i64, new: i64) {
        let mut revived = Vec::new();
        let mut todo = VecDeque::from([(old, new)]);
        while let Some((old, new)) = todo.pop_front() {
            // Those that waited for it on any outcome and have not started wait for its
            // new end.
            for job in self.jobs.values_mut() {
                let unstarted = job.attempts == 0
                    && (job.status == JobStatus::Queued
                        || (job.status == JobStatus::Cancelled && job.by_dependency));
                if !unstarted {
                    continue;
                }
                for w in job.waits.iter_mut() {
                    if w.on == old && w.any && w.state == WaitState::Done {
                        cover("a wait on any outcome waits again for a job brought back");
                        w.on = new;
                        w.state = WaitState::Pending;
                    }
                }
            }
            let failed: Vec<i64> = self
                .jobs
                .iter()
                .filter(|(_, j)| {
                    j.waits
                        .iter()
                        .any(|w| w.on == old && w.state == WaitState::Failed)
                })
                .map(|(&d, _)| d)
                .collect();
            for d in failed {
                let job = self.job_mut(d);
                for w in job.waits.iter_mut() {
                    if w.on == old && w.state == WaitState::Failed {
                        w.on = new;
                        w.state = WaitState::Pending;
                    }
                }
                if job.waits.iter().any(|w| w.state == WaitState::Failed) {
                    cover("a dependant revived while another dependency still failed it");
                    continue;
                }
                if job.status == JobStatus::Cancelled && job.by_dependency {
                    job.status = JobStatus::Queued;
                    job.by_dependency = false;
                    if matches!(job.role, Role::Callback { success: true, .. }) {
                        cover("on_success brought back by a requeued member");
                    }
                    revived.push(d);
                    todo.push_back((d, d));
                }
            }
        }
        for id in revived {
            self.rejoin_batch(id);
        }
    }

    /// Job `id`, just brought back: a batch's on_success waits for every member it does not
    /// wait for yet (added while it stood cancelled), but a dead member a requeue replaced.
    fn rejoin_batch(&mut self, id: i64) {
        let Role::Callback {
            group,
            success: true,
        } = self.job(id).role
        else {
            return;
        };
        let missing: Vec<i64> = self.groups[group]
            .jobs
            .iter()
            .copied()
            .filter(|&m| {
                let member = self.job(m);
                matches!(member.role, Role::Member { .. })
                    && !(member.status == JobStatus::Dead && member.requeued_as.is_some())
                    && !self.job(id).waits.iter().any(|w| w.on == m)
            })
            .collect();
        if !missing.is_empty() {
            cover("on_success brought back waits for the members added meanwhile");
        }
        for m in missing {
            self.add_wait(id, m, false);
        }
    }

    fn end(&mut self, id: i64, status: JobStatus) {
        let job = self.job_mut(id);
        job.status = status;
        job.locked_until = None;
        self.settle(id);
    }

    /// A lease that ran out (a crashed worker's, or a handler's that stayed too long): due
    /// again at once, or dead with its attempts spent.
    fn lose_lease(&mut self, id: i64) {
        let now = self.now;
        let spent = self.job(id).attempts >= self.job(id).max_attempts;
        if spent {
            if self.jobs.values().any(|j| {
                j.waits
                    .iter()
                    .any(|w| w.on == id && w.state == WaitState::Pending)
            }) {
                cover("a job reaped dead: its dependants settled");
            }
            self.end(id, JobStatus::Dead);
        } else {
            let job = self.job_mut(id);
            job.status = JobStatus::Failed;
            job.run_at = now;
            job.locked_until = None;
        }
    }

    /// Jobs due now, in id order.
    pub(super) fn due(&self) -> Vec<i64> {
        self.jobs
            .iter()
            .filter(|(_, j)| j.due(self.now))
            .map(|(&id, _)| id)
            .collect()
    }

    /// `testing::drain`: every due job runs, round after round, until none is due. Returns
    /// the handler calls (job, attempt), sorted. A drain's outcome does not depend on the
    /// order its jobs run in, only on each job's script.
    pub(super) fn drain(&mut self) -> Vec<(i64, u32)> {
        let mut calls = Vec::new();
        loop {
            let due = self.due();
            if due.is_empty() {
                break;
            }
            let mut lost = false;
            for id in due {
                let now = self.now;
                let job = self.job_mut(id);
                job.attempts += 1;
                let (attempt, max) = (job.attempts, job.max_attempts);
                let outcome = job.script.pop_front().unwrap_or(Outcome::Succeed);
                calls.push((id, attempt));
                match outcome {
                    Outcome::Succeed => self.end(id, JobStatus::Succeeded),
                    Outcome::Retry if attempt < max => {
                        let job = self.job_mut(id);
                        job.status = JobStatus::Failed;
                        job.run_at = now + RETRY_MS;
                    }
                    Outcome::Retry | Outcome::Permanent => self.end(id, JobStatus::Dead),
                    Outcome::Cancel => self.end(id, JobStatus::Cancelled),
                    Outcome::LoseLease => {
                        cover("a lost lease's late result discarded");
                        self.lose_lease(id);
                        lost = true;
                    }
                }
            }
            // The handler that lost its lease ran the reaper, which took every expired
            // lease at that moment.
            if lost {
                self.reap();
            }
        }
        calls.sort_unstable();
        calls
    }

    /// The reaper: how many expired leases it took.
    pub(super) fn reap(&mut self) -> usize {
        let now = self.now;
        let expired: Vec<i64> = self
            .jobs
            .iter()
            .filter(|(_, j)| {
                j.status == JobStatus::Running && j.locked_until.is_some_and(|t| t < now)
            })
            .map(|(&id, _)| id)
            .collect();
        for &id in &expired {
            self.lose_lease(id);
        }
        expired.len()
    }

    /// A worker claims due job `id` and dies: its attempt is spent, its lease runs on.
    pub(super) fn crash(&mut self, id: i64) {
        if self
            .jobs
            .values()
            .any(|j| j.waits.iter().any(|w| w.on == id))
        {
            cover("a worker died holding a job that has dependants");
        }
        let now = self.now;
        let job = self.job_mut(id);
        job.attempts += 1;
        job.status = JobStatus::Running;
        job.locked_until = Some(now + CRASH_LEASE_MS);
    }

    /// A person cancels job `id`: `Err` when it has ended.
    pub(super) fn cancel(&mut self, id: i64) -> Result<(), ErrorKind> {
        if !self.job(id).live() {
            return Err(ErrorKind::InvalidState);
        }
        if self.job(id).held() {
            cover("a held job cancelled by a person");
        }
        self.end(id, JobStatus::Cancelled);
        Ok(())
    }

    /// `Queue::cancel_workflow`: an open batch is closed; every job not ended is cancelled,
    /// held ones first. Returns the ids cancelled, in that order.
    pub(super) fn cancel_group(&mut self, g: usize) -> Vec<i64> {
        if self.groups[g].open {
            cover("an open batch cancelled");
            self.close(g);
        }
        let mut live: Vec<(bool, i64)> = self.groups[g]
            .jobs
            .iter()
            .filter(|&&id| self.job(id).live())
            .map(|&id| (!self.job(id).held(), id))
            .collect();
        live.sort_unstable();
        let mut cancelled = Vec::new();
        for (_, id) in live {
            if self.job(id).live() {
                self.end(id, JobStatus::Cancelled);
                cancelled.push(id);
            }
        }
        cancelled
    }

    /// Closes batch `g`: its callbacks wait only for its members now.
    pub(super) fn close(&mut self, g: usize) {
        self.groups[g].open = false;
        for id in self.groups[g].jobs.clone() {
            let job = self.job_mut(id);
            if job.batch_hold {
                job.batch_hold = false;
                if job.held() || job.status != JobStatus::Queued {
                    continue;
                }
                cover("a batch callback released by the closing");
            }
        }
    }

    /// `Queue::add_to_batch`: the new members, and the batch's queued callbacks wait for
    /// them (an on_success cancelled by a dead member waits for them if it comes back).
    pub(super) fn add_members(&mut self, g: usize, ids: &[i64], specs: &[JobSpec]) {
        for (&id, spec) in ids.iter().zip(specs) {
            self.insert(id, Role::Member { group: g }, g, spec);
            self.groups[g].members.push(id);
        }
        let callbacks: Vec<(i64, bool)> = self.groups[g]
            .jobs
            .iter()
            .filter_map(|&id| match self.job(id).role {
                Role::Callback { success, .. } => Some((id, success)),
                _ => None,
            })
            .collect();
        for (callback, success) in callbacks {
            let job = self.job(callback);
            if job.status != JobStatus::Queued {
                if job.by_dependency {
                    cover("a member added after on_success was cancelled");
                }
                continue;
            }
            for &id in ids {
                self.add_wait(callback, id, !success);
            }
        }
    }

    /// A dead job requeued as `new`, which takes its place (in its workflow or batch) and its
    /// waits.
    pub(super) fn requeue(&mut self, old: i64, new: i64, script: &[Outcome]) {
        let job = self.job(old).clone();
        let spec = JobSpec {
            max_attempts: job.max_attempts,
            delay_s: None,
            script: script.to_vec(),
        };
        self.insert(new, job.role, job.group, &spec);
        self.job_mut(old).requeued_as = Some(new);
        // It waits for what the dead job waited for: done for those that ended as the wait
        // asks (they did before the dead job ran), pending for one brought back since.
        for w in &job.waits {
            self.add_wait(new, w.on, w.any);
        }
        if self.has_failed_dependants(old) {
            cover("a dead job requeued: its cancelled dependants wait again");
        }
        self.revive(old, new);
    }

    /// `Queue::retry_now` of job `id`.
    pub(super) fn retry_now(&mut self, id: i64) -> Result<(), ErrorKind> {
        let now = self.now;
        let (status, held, requeued) = {
            let job = self.job(id);
            (job.status, job.held(), job.requeued_as.is_some())
        };
        match status {
            JobStatus::Queued if held => {
                cover("a held job's retry_now refused");
                Err(ErrorKind::InvalidState)
            }
            JobStatus::Queued | JobStatus::Failed => {
                self.job_mut(id).run_at = now;
                Ok(())
            }
            JobStatus::Dead if !requeued => {
                let job = self.job_mut(id);
                job.status = JobStatus::Failed;
                job.run_at = now;
                job.max_attempts = job.attempts + 1;
                if self.has_failed_dependants(id) {
                    cover("a dead job retried now: its cancelled dependants wait again");
                }
                self.revive(id, id);
                Ok(())
            }
            _ => Err(ErrorKind::InvalidState),
        }
    }

    fn has_failed_dependants(&self, id: i64) -> bool {
        self.jobs.values().any(|j| {
            j.waits
                .iter()
                .any(|w| w.on == id && w.state == WaitState::Failed)
        })
    }
}
