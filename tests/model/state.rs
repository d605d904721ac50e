//! The in-memory model: what the library should do, step by step.

use super::*;

/// Who holds a running job's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Holder {
    Drain,
    Crashed,
}

#[derive(Debug, Clone)]
pub(super) struct MJob {
    pub(super) status: JobStatus,
    pub(super) attempts: i64,
    pub(super) max_attempts: i64,
    pub(super) priority: i64,
    pub(super) run_at: i64,
    pub(super) key: Option<String>,
    pub(super) group: Option<String>,
    pub(super) timeout_ms: Option<i64>,
    pub(super) holder: Option<Holder>,
    pub(super) locked_until: Option<i64>,
    /// When it became succeeded or cancelled (what prune compares).
    pub(super) finished: i64,
    pub(super) requeued_as: Option<i64>,
    pub(super) script: VecDeque<Behaviour>,
    /// (attempt, outcome) rows of the attempt history.
    pub(super) history: Vec<(i64, String)>,
}

impl MJob {
    pub(super) fn timeout(&self) -> i64 {
        self.timeout_ms.unwrap_or(TYPE_TIMEOUT_MS)
    }

    pub(super) fn waiting_due(&self, now: i64) -> bool {
        matches!(self.status, JobStatus::Queued | JobStatus::Failed) && self.run_at <= now
    }
}

/// How an attempt ended, as the executor decides it.
#[derive(Debug, Clone, Copy)]
pub(super) enum MOutcome {
    Succeeded,
    RetryAt(i64),
    Dead,
    Snoozed(i64),
    Cancelled,
}

/// What one handler call saw, recorded by the real handler and predicted by the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Seen {
    pub(super) id: i64,
    pub(super) attempt: i64,
    /// The job was running under this drain's lease for this attempt when the call began.
    pub(super) held: bool,
    /// Other running jobs of its group at that moment.
    pub(super) group_others_running: i64,
    /// `Heartbeat`: whether `ctx.heartbeat()` succeeded.
    pub(super) heartbeat: Option<bool>,
    /// `Hang`: how many jobs the reaper took.
    pub(super) reaped: Option<usize>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Counts {
    pub(super) succeeded: usize,
    pub(super) failed: usize,
    pub(super) dead: usize,
    pub(super) snoozed: usize,
    pub(super) cancelled: usize,
}

#[derive(Debug)]
pub(super) struct Model {
    pub(super) now: i64,
    pub(super) jobs: BTreeMap<i64, MJob>,
    /// Ids pruned or discarded.
    pub(super) gone: BTreeSet<i64>,
    /// Every id ever created, for picking targets of admin operations.
    pub(super) known: Vec<i64>,
    /// Remembered keys of succeeded jobs: key → (job id, expires at).
    pub(super) remembered: HashMap<String, (i64, i64)>,
    pub(super) paused: bool,
}

pub(super) enum Enqueued {
    New,
    Existing(i64),
}

impl Model {
    pub(super) fn new() -> Model {
        Model {
            now: START_MS,
            jobs: BTreeMap::new(),
            gone: BTreeSet::new(),
            known: Vec::new(),
            remembered: HashMap::new(),
            paused: false,
        }
    }

    /// The target of an operator's action: with an even `index`, one of the jobs in
    /// `statuses` (where the action does something), else any job ever created (gone ones
    /// included, where it must be refused).
    pub(super) fn pick(&self, index: u16, statuses: &[JobStatus]) -> Option<i64> {
        let fitting: Vec<i64> = self
            .jobs
            .iter()
            .filter(|(_, j)| statuses.contains(&j.status))
            .map(|(&id, _)| id)
            .collect();
        let from = if index % 2 == 0 && !fitting.is_empty() {
            &fitting
        } else {
            &self.known
        };
        (!from.is_empty()).then(|| from[(index as usize / 2) % from.len()])
    }

    /// The job whose idempotency key `key` is: a live or succeeded job, or a remembered key.
    pub(super) fn key_holder(&self, key: &str) -> Option<i64> {
        self.jobs
            .iter()
            .find(|(_, j)| j.key.as_deref() == Some(key) && LIVE_AND_SUCCEEDED.contains(&j.status))
            .map(|(&id, _)| id)
            .or_else(|| {
                self.remembered
                    .get(key)
                    .filter(|(_, expires)| *expires > self.now)
                    .map(|(id, _)| *id)
            })
    }

    /// True when a job other than `id` holds `key` in the unique index.
    pub(super) fn key_taken_by_other(&self, id: i64, key: Option<&str>) -> bool {
        key.is_some_and(|key| {
            self.jobs.iter().any(|(&other, j)| {
                other != id
                    && j.key.as_deref() == Some(key)
                    && LIVE_AND_SUCCEEDED.contains(&j.status)
            })
        })
    }

    pub(super) fn enqueue_prediction(&self, spec: &JobSpec) -> Enqueued {
        let holder = spec.key.map(key_name).and_then(|key| self.key_holder(&key));
        match holder {
            Some(id) if self.gone.contains(&id) => {
                cover("enqueue returns the remembered holder of a pruned job's key")
            }
            Some(_) => cover("enqueue returns the live holder of its key"),
            None => {}
        }
        holder.map_or(Enqueued::New, Enqueued::Existing)
    }

    pub(super) fn insert(&mut self, id: i64, spec: &JobSpec) {
        assert!(
            self.known.iter().all(|&k| k < id),
            "new job id {id} is not above every earlier id {:?}",
            self.known
        );
        self.known.push(id);
        self.jobs.insert(
            id,
            MJob {
                status: JobStatus::Queued,
                attempts: 0,
                max_attempts: i64::from(spec.max_attempts),
                priority: spec.priority,
                run_at: self.now + spec.delay_s.map_or(0, |s| i64::from(s) * 1000),
                key: spec.key.map(key_name),
                group: spec.group.map(group_name),
                timeout_ms: spec.timeout_s.map(|s| i64::from(s) * 1000),
                holder: None,
                locked_until: None,
                finished: 0,
                requeued_as: None,
                script: spec.script.iter().copied().collect(),
                history: Vec::new(),
            },
        );
    }

    /// Jobs a claim at `now` takes, in claim order: due waiting jobs by (priority desc,
    /// run_at, id), skipping a group whose job is running or whose first due job is another.
    pub(super) fn claimable(&self, limit: usize) -> Vec<i64> {
        if self.paused {
            if self.jobs.values().any(|j| j.waiting_due(self.now)) {
                cover("a paused queue keeps due jobs waiting");
            }
            return Vec::new();
        }
        let mut due: Vec<(&i64, &MJob)> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.waiting_due(self.now))
            .collect();
        due.sort_by(|(a_id, a), (b_id, b)| {
            b.priority
                .cmp(&a.priority)
                .then(a.run_at.cmp(&b.run_at))
                .then(a_id.cmp(b_id))
        });
        let mut out = Vec::new();
        for (&id, job) in &due {
            if let Some(group) = &job.group {
                let running = self
                    .jobs
                    .values()
                    .any(|j| j.group.as_ref() == Some(group) && j.status == JobStatus::Running);
                let first = due
                    .iter()
                    .find(|(_, j)| j.group.as_ref() == Some(group))
                    .map(|(&first, _)| first);
                if running || first != Some(id) {
                    cover("a claim skips a job whose group is busy");
                    continue;
                }
            }
            out.push(id);
            if out.len() == limit {
                break;
            }
        }
        out
    }

    pub(super) fn claim(&mut self, id: i64, holder: Holder) -> i64 {
        let now = self.now;
        let job = self.jobs.get_mut(&id).expect("claimed job exists");
        job.status = JobStatus::Running;
        job.attempts += 1;
        job.holder = Some(holder);
        job.locked_until = Some(now + job.timeout() + GRACE_MS);
        job.attempts
    }

    pub(super) fn reap(&mut self) -> usize {
        let now = self.now;
        let mut reaped = 0;
        for job in self.jobs.values_mut() {
            if job.status == JobStatus::Running && job.locked_until.is_some_and(|lu| lu < now) {
                reaped += 1;
                cover(if job.holder == Some(Holder::Crashed) {
                    "a worker dies holding a job"
                } else {
                    "a hung attempt's lease expires and it is reaped"
                });
                job.history.push((job.attempts, "lost".to_string()));
                job.holder = None;
                job.locked_until = None;
                if job.attempts >= job.max_attempts {
                    cover("reaped with attempts spent: dead");
                    job.status = JobStatus::Dead;
                } else {
                    cover("reaped and due again");
                    job.status = JobStatus::Failed;
                    job.run_at = now;
                }
            }
        }
        if reaped > 1 {
            cover("one reap takes several jobs");
        }
        reaped
    }

    pub(super) fn failure(
        &self,
        attempt: i64,
        max_attempts: i64,
        delay_ms: Option<i64>,
    ) -> MOutcome {
        if attempt >= max_attempts {
            return MOutcome::Dead;
        }
        let delay = delay_ms.unwrap_or_else(|| RETRY_MS[(attempt as usize - 1).min(1)]);
        MOutcome::RetryAt(self.now + delay)
    }

    /// One `testing::drain`: the calls the handler will see, and the report.
    pub(super) fn drain(&mut self) -> (Vec<Seen>, Counts) {
        let mut seen = Vec::new();
        let mut counts = Counts::default();
        loop {
            let claimed: Vec<(i64, i64)> = self
                .claimable(DRAIN_BATCH)
                .into_iter()
                .map(|id| (id, self.claim(id, Holder::Drain)))
                .collect();
            if claimed.is_empty() {
                break;
            }
            let mut outcomes = Vec::new();
            for &(id, attempt) in &claimed {
                let job = &self.jobs[&id];
                let held = job.status == JobStatus::Running
                    && job.holder == Some(Holder::Drain)
                    && job.attempts == attempt;
                let group_others_running = job.group.as_ref().map_or(0, |g| {
                    self.jobs
                        .iter()
                        .filter(|(&other, j)| {
                            other != id
                                && j.group.as_ref() == Some(g)
                                && j.status == JobStatus::Running
                        })
                        .count() as i64
                });
                let (max_attempts, timeout) = (job.max_attempts, job.timeout());
                let behaviour = self
                    .jobs
                    .get_mut(&id)
                    .and_then(|j| j.script.pop_front())
                    .unwrap_or(Behaviour::Succeed);
                let mut call = Seen {
                    id,
                    attempt,
                    held,
                    group_others_running,
                    heartbeat: None,
                    reaped: None,
                };
                let outcome = match behaviour {
                    Behaviour::Succeed => MOutcome::Succeeded,
                    Behaviour::Retry | Behaviour::Panic => {
                        if behaviour == Behaviour::Panic {
                            cover("panic");
                        }
                        self.failure(attempt, max_attempts, None)
                    }
                    Behaviour::RetryAfter(s) => {
                        self.failure(attempt, max_attempts, Some(i64::from(s) * 1000))
                    }
                    Behaviour::Permanent => MOutcome::Dead,
                    Behaviour::Snooze(s) => MOutcome::Snoozed(self.now + i64::from(s) * 1000),
                    Behaviour::Cancel => MOutcome::Cancelled,
                    Behaviour::Heartbeat => {
                        call.heartbeat = Some(held);
                        cover(if held {
                            "heartbeat under a live lease"
                        } else {
                            "heartbeat after the lease was lost"
                        });
                        if held {
                            let until = self.now + timeout + GRACE_MS;
                            let job = self.jobs.get_mut(&id).expect("exists");
                            job.locked_until = job.locked_until.max(Some(until));
                            MOutcome::Succeeded
                        } else {
                            self.failure(attempt, max_attempts, None)
                        }
                    }
                    Behaviour::Hang => {
                        self.now += timeout + GRACE_MS + 1;
                        call.reaped = Some(self.reap());
                        MOutcome::Succeeded
                    }
                };
                seen.push(call);
                outcomes.push((id, attempt, outcome));
            }
            let now = self.now;
            for (id, attempt, outcome) in outcomes {
                let Some(job) = self.jobs.get_mut(&id) else {
                    continue;
                };
                // The fence: still running under this drain's claim of this attempt.
                if !(job.status == JobStatus::Running
                    && job.holder == Some(Holder::Drain)
                    && job.attempts == attempt)
                {
                    cover("a late result is discarded by the fence");
                    continue;
                }
                job.holder = None;
                job.locked_until = None;
                match outcome {
                    MOutcome::Succeeded => {
                        cover("success");
                        job.status = JobStatus::Succeeded;
                        job.finished = now;
                        if attempt > 1 {
                            job.history.push((attempt, "succeeded".to_string()));
                        }
                        if let Some(key) = job.key.clone() {
                            self.remembered.insert(key, (id, now + WINDOW_MS));
                        }
                        counts.succeeded += 1;
                    }
                    MOutcome::RetryAt(at) => {
                        cover("retry scheduled");
                        job.status = JobStatus::Failed;
                        job.run_at = at;
                        job.history.push((attempt, "failed".to_string()));
                        counts.failed += 1;
                    }
                    MOutcome::Dead => {
                        cover("dead after an attempt");
                        job.status = JobStatus::Dead;
                        job.history.push((attempt, "failed".to_string()));
                        counts.dead += 1;
                    }
                    MOutcome::Snoozed(at) => {
                        cover("snooze");
                        job.status = JobStatus::Queued;
                        job.attempts -= 1;
                        job.run_at = at;
                        counts.snoozed += 1;
                    }
                    MOutcome::Cancelled => {
                        cover("handler cancel");
                        job.status = JobStatus::Cancelled;
                        job.finished = now;
                        job.history.push((attempt, "cancelled".to_string()));
                        counts.cancelled += 1;
                    }
                }
            }
        }
        (seen, counts)
    }

    pub(super) fn existing(&self, id: i64) -> Result<&MJob, ErrorKind> {
        self.jobs.get(&id).ok_or(ErrorKind::NotFound)
    }

    pub(super) fn cancel(&mut self, id: i64) -> Result<(), ErrorKind> {
        let now = self.now;
        let job = self.jobs.get_mut(&id).ok_or(ErrorKind::NotFound)?;
        match job.status {
            JobStatus::Queued | JobStatus::Failed => cover("operator cancel"),
            JobStatus::Running => {
                // The running attempt ends cancelled, its lease with it: what its worker
                // reports later is fenced off.
                cover("operator cancel of a running job");
                job.history.push((job.attempts, "cancelled".to_string()));
                job.holder = None;
                job.locked_until = None;
            }
            _ => return Err(ErrorKind::InvalidState),
        }
        job.status = JobStatus::Cancelled;
        job.finished = now;
        Ok(())
    }

    pub(super) fn retry_now(&mut self, id: i64) -> Result<(), ErrorKind> {
        let job = self.existing(id)?;
        match job.status {
            JobStatus::Queued | JobStatus::Failed => {}
            JobStatus::Dead => {
                if job.requeued_as.is_some() {
                    return Err(ErrorKind::InvalidState);
                }
                if self.key_taken_by_other(id, job.key.as_deref()) {
                    cover("a dead job's key is taken: retry_now and requeue refused");
                    return Err(ErrorKind::InvalidState);
                }
                cover("retry_now of a dead job");
            }
            _ => return Err(ErrorKind::InvalidState),
        }
        let now = self.now;
        let job = self.jobs.get_mut(&id).expect("exists");
        if job.status == JobStatus::Dead {
            job.status = JobStatus::Failed;
            // Exactly one more attempt (`Queue::retry_now`).
            job.max_attempts = job.attempts + 1;
        }
        job.run_at = now;
        Ok(())
    }

    /// Checks a requeue; the new job is added by [`Model::requeued`] with the id the library
    /// gave it.
    pub(super) fn requeue_check(&self, id: i64) -> Result<(), ErrorKind> {
        let job = self.existing(id)?;
        if job.status != JobStatus::Dead || job.requeued_as.is_some() {
            return Err(ErrorKind::InvalidState);
        }
        if self.key_taken_by_other(id, job.key.as_deref()) {
            cover("a dead job's key is taken: retry_now and requeue refused");
            return Err(ErrorKind::InvalidState);
        }
        cover("requeue of a dead job");
        Ok(())
    }

    pub(super) fn requeued(&mut self, id: i64, new_id: i64) {
        let old = self.jobs.get_mut(&id).expect("exists");
        old.requeued_as = Some(new_id);
        let spec = MJob {
            status: JobStatus::Queued,
            attempts: 0,
            run_at: self.now,
            holder: None,
            locked_until: None,
            finished: 0,
            requeued_as: None,
            script: VecDeque::new(),
            history: Vec::new(),
            ..old.clone()
        };
        assert!(
            self.known.iter().all(|&k| k < new_id),
            "requeued job id {new_id} is not new"
        );
        self.known.push(new_id);
        self.jobs.insert(new_id, spec);
    }

    /// The largest id in the table: that job is never deleted (ids are never reused) on a
    /// backend that keeps it; `None` on one whose ids come from a sequence (PostgreSQL).
    fn newest(&self) -> Option<i64> {
        if !keeps_newest_job() {
            return None;
        }
        self.jobs.keys().next_back().copied()
    }

    pub(super) fn discard(&mut self, id: i64) -> Result<Discarded, ErrorKind> {
        let job = self.existing(id)?;
        if job.status != JobStatus::Dead {
            return Err(ErrorKind::InvalidState);
        }
        if self.newest() == Some(id) {
            let now = self.now;
            let job = self.jobs.get_mut(&id).expect("exists");
            job.status = JobStatus::Cancelled;
            job.finished = now;
            cover("discard of the newest job cancels it instead");
            return Ok(Discarded::KeptCancelled);
        }
        self.jobs.remove(&id);
        self.gone.insert(id);
        cover("discard of a dead job");
        Ok(Discarded::Deleted)
    }

    /// (jobs, attempt rows, keys) deleted.
    pub(super) fn prune(&mut self, older_than_ms: i64) -> (u64, u64, u64) {
        let cutoff = self.now - older_than_ms;
        let newest = self.newest();
        let doomed: Vec<i64> = self
            .jobs
            .iter()
            .filter(|(&id, j)| {
                matches!(j.status, JobStatus::Succeeded | JobStatus::Cancelled)
                    && j.finished < cutoff
                    && Some(id) != newest
            })
            .map(|(&id, _)| id)
            .collect();
        let mut attempts = 0;
        for id in &doomed {
            let job = self.jobs.remove(id).expect("exists");
            attempts += job.history.len() as u64;
            self.gone.insert(*id);
        }
        let now = self.now;
        let before = self.remembered.len();
        self.remembered.retain(|_, (_, expires)| *expires > now);
        if !doomed.is_empty() && before > self.remembered.len() {
            cover("prune deletes jobs and forgets keys");
        }
        (
            doomed.len() as u64,
            attempts,
            (before - self.remembered.len()) as u64,
        )
    }
}
