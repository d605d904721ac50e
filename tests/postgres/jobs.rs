//! JobStore on PostgreSQL, through the public API: enqueue (batches, idempotency keys, also
//! raced by two queues on one schema, as two processes would), the claim (order, limit,
//! paused queues, group keys, rows from other programs, two queues claiming at once and a
//! claim meeting another's claim of the same group key), the lease-fenced writes of every
//! outcome with the counts the schema's triggers keep, leases and heartbeats, and the reaper
//! (also two reapers at once). Time is a `ManualClock`.

use std::collections::HashMap;
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::sql_types::{BigInt, Text};
use diesel::{sql_query, PgConnection, QueryableByName, RunQueryDsl};
use litejobs::{testing, AttemptOutcome, JobContext, JobError, JobStatus, NewJob, Queue, Worker};
use serde_json::json;

use crate::support::pg::{setup, PgSchema};
use crate::support::scripted::{
    at_ms, history, job, outcomes, stop, wait_all, wait_started, wait_status, Latch,
    ScriptedHandler, Step, WAIT,
};
use crate::support::START_MS;

#[derive(QueryableByName, Debug)]
struct Int {
    #[diesel(sql_type = BigInt)]
    v: i64,
}

#[derive(QueryableByName, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Count {
    #[diesel(sql_type = Text)]
    k: String,
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// One `bigint` (column `v`) read by a raw connection.
fn int(conn: &mut PgConnection, sql: &str) -> i64 {
    sql_query(sql)
        .get_result::<Int>(conn)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .v
}

/// `(k, n)` rows read by a raw connection, sorted.
fn counts(conn: &mut PgConnection, sql: &str) -> Vec<(String, i64)> {
    let mut rows: Vec<Count> = sql_query(sql)
        .load(conn)
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    rows.sort();
    rows.into_iter().map(|c| (c.k, c.n)).collect()
}

/// The kept counts (job_counts, attempt_counts) agree with the rows they count.
fn assert_counts_kept(schema: &PgSchema) {
    let mut raw = schema.raw();
    let kept = counts(
        &mut raw,
        "SELECT queue || '/' || job_type || '/' || status AS k, SUM(n)::bigint AS n FROM job_counts
         GROUP BY 1 HAVING SUM(n) <> 0",
    );
    let actual = counts(
        &mut raw,
        "SELECT queue || '/' || job_type || '/' || status AS k, COUNT(*) AS n FROM jobs
         WHERE status IN ('succeeded', 'dead', 'cancelled') GROUP BY 1",
    );
    assert_eq!(kept, actual, "job_counts against the jobs table");
    let kept = counts(
        &mut raw,
        "SELECT job_type || '/' || outcome AS k, SUM(n)::bigint AS n FROM attempt_counts
         GROUP BY 1 HAVING SUM(n) <> 0",
    );
    let actual = counts(
        &mut raw,
        "SELECT j.job_type || '/' || a.outcome AS k, COUNT(*) AS n
         FROM job_attempts a JOIN jobs j ON j.id = a.job_id GROUP BY 1",
    );
    assert_eq!(kept, actual, "attempt_counts against job_attempts");
}

/// Runs `f` on `threads` threads released together, and returns what each returned.
fn all_at_once<T: Send + 'static>(
    threads: usize,
    f: impl Fn(usize) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let f = Arc::new(f);
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (f, start) = (Arc::clone(&f), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                f(i)
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("a thread panicked"))
        .collect()
}

fn t(n: i64) -> NewJob {
    NewJob::new("t", json!({ "n": n }))
}

#[test]
fn pg_a_batch_gets_ids_in_order_and_jobs_run_by_priority_then_run_at_then_id() {
    let Some((schema, queue, _clock)) = setup() else {
        return;
    };
    // (priority, run_at offset in ms); as in ordering.rs.
    let specs: [(i64, i64); 7] = [
        (0, -3_000),
        (5, 0),
        (5, -1_000),
        (0, -3_000),
        (-1, -10_000),
        (10, 0),
        (0, -5_000),
    ];
    let mut batch: Vec<NewJob> = specs
        .iter()
        .enumerate()
        .map(|(n, &(priority, offset))| {
            t(n as i64)
                .priority(priority)
                .run_at(at_ms(START_MS + offset))
        })
        .collect();
    // A keyed job in the middle splits the batch into two multi-row inserts.
    batch.insert(3, t(99).idempotency_key("mid").priority(-5));
    let ids = queue.enqueue_batch(batch).expect("enqueue_batch");
    assert_eq!(ids.len(), 8);
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids ascend in batch order: {ids:?}"
    );
    for (i, &id) in ids.iter().enumerate() {
        let n = job(&queue, id).payload["n"].as_i64();
        let expected = if i == 3 {
            99
        } else {
            i as i64 - i64::from(i > 3)
        };
        assert_eq!(
            n,
            Some(expected),
            "job {i} of the batch holds its own payload"
        );
    }
    let runs = ScriptedHandler::new();
    let builder = Worker::builder(&queue).handler("t", runs.clone());
    let report = testing::drain(&builder).expect("drain");
    assert_eq!(report.succeeded, 8, "{report:?}");
    let order: Vec<i64> = [5, 2, 1, 6, 0, 3, 4]
        .iter()
        .map(|&i| ids[if i >= 3 { i + 1 } else { i }])
        .chain([ids[3]])
        .collect();
    assert_eq!(runs.call_ids(), order);
    for &id in &ids {
        let record = job(&queue, id);
        assert_eq!(record.status, JobStatus::Succeeded);
        assert_eq!(record.attempts, 1);
        assert_eq!(record.locked_by, None);
        assert_eq!(record.finished_at, Some(START_MS));
    }
    assert_counts_kept(&schema);
}

#[test]
fn pg_an_idempotency_key_returns_its_holder_until_the_window_after_success_ends() {
    let Some(url) = crate::support::pg::server() else {
        return;
    };
    let schema = PgSchema::new(&url);
    let clock = litejobs::ManualClock::new(START_MS);
    let queue = Queue::builder()
        .clock(clock.clone())
        .pg_schema(&schema.name)
        .idempotency_window(Duration::from_secs(60))
        .open(&schema.url)
        .expect("open");
    let first = queue.enqueue(t(1).idempotency_key("k")).expect("enqueue");
    assert_eq!(
        queue.enqueue(t(2).idempotency_key("k")).expect("again"),
        first
    );
    let batch = queue
        .enqueue_batch(vec![
            t(3),
            t(4).idempotency_key("k"),
            t(5).idempotency_key("k2"),
        ])
        .expect("batch");
    assert_eq!(batch[1], first, "a batch finds the holder too");
    assert_ne!(batch[2], first);
    let builder = Worker::builder(&queue).handler("t", ScriptedHandler::new());
    assert_eq!(testing::drain(&builder).expect("drain").succeeded, 3);
    assert_eq!(
        queue
            .enqueue(t(6).idempotency_key("k"))
            .expect("after success"),
        first,
        "a succeeded job still holds its key"
    );
    // Pruned (here by plain SQL), the job's key is still remembered for the window.
    let mut raw = schema.raw();
    raw.batch_execute(&format!("DELETE FROM jobs WHERE id = {first}"))
        .expect("delete");
    assert_eq!(
        queue
            .enqueue(t(7).idempotency_key("k"))
            .expect("remembered"),
        first
    );
    clock.advance(Duration::from_secs(61));
    let fresh = queue
        .enqueue(t(8).idempotency_key("k"))
        .expect("after the window");
    assert!(fresh > first, "a new job once the window passed");
    // A dead or cancelled job releases its key.
    queue.cancel(fresh).expect("cancel");
    let third = queue
        .enqueue(t(9).idempotency_key("k"))
        .expect("after cancel");
    assert!(third > fresh);
    assert_eq!(
        int(
            &mut raw,
            "SELECT COUNT(*) AS v FROM jobs WHERE idempotency_key = 'k'"
        ),
        2
    );
}

#[test]
fn pg_one_key_enqueued_at_once_from_two_queues_makes_one_job() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let other = schema.queue(&clock);
    for round in 0..5 {
        let key = format!("key-{round}");
        let queues = [queue.clone(), other.clone()];
        let ids = all_at_once(8, move |i| {
            let job = t(i as i64).idempotency_key(key.clone());
            if i % 2 == 0 {
                queues[i % 2].enqueue(job).expect("enqueue")
            } else {
                queues[i % 2]
                    .enqueue_batch(vec![t(100), job])
                    .expect("enqueue_batch")[1]
            }
        });
        assert!(
            ids.iter().all(|&id| id == ids[0]),
            "round {round}: every enqueue got the one holder: {ids:?}"
        );
        let holders = int(
            &mut schema.raw(),
            &format!("SELECT COUNT(*) AS v FROM jobs WHERE idempotency_key = 'key-{round}'"),
        );
        assert_eq!(holders, 1, "round {round}");
    }
}

#[test]
fn pg_two_queues_draining_at_once_run_every_job_exactly_once() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let other = schema.queue(&clock);
    let n = 300;
    let ids = queue
        .enqueue_batch((0..n).map(t).collect())
        .expect("enqueue_batch");
    let runs: Arc<Mutex<HashMap<i64, usize>>> = Arc::default();
    let queues = [queue.clone(), other];
    let seen = Arc::clone(&runs);
    let reports = all_at_once(4, move |i| {
        let seen = Arc::clone(&seen);
        let builder = Worker::builder(&queues[i % 2]).handler("t", move |ctx: &JobContext| {
            *seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(ctx.id())
                .or_insert(0) += 1;
            Ok(())
        });
        testing::drain(&builder).expect("drain")
    });
    let runs = runs.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(
        reports.iter().map(|r| r.succeeded).sum::<usize>(),
        ids.len()
    );
    assert_eq!(runs.len(), ids.len(), "every job ran");
    assert!(runs.values().all(|&n| n == 1), "no job ran twice");
    let mut raw = schema.raw();
    assert_eq!(
        int(
            &mut raw,
            "SELECT COUNT(*) AS v FROM jobs WHERE status = 'succeeded' AND attempts = 1"
        ),
        n
    );
    assert_eq!(int(&mut raw, "SELECT COUNT(*) AS v FROM job_attempts"), 0);
    assert_counts_kept(&schema);
}

#[test]
fn pg_a_claim_takes_no_more_jobs_than_asked_for() {
    let Some((schema, queue, _clock)) = setup() else {
        return;
    };
    let ids = queue
        .enqueue_batch((0..20).map(t).collect())
        .expect("enqueue_batch");
    let gate = Latch::new();
    let handler = ScriptedHandler::always(Step::Block(gate.clone()));
    let events = queue.subscribe();
    let worker = Worker::builder(&queue)
        .handler("t", handler.clone())
        .concurrency(2)
        .prefetch(0)
        .start()
        .expect("worker starts");
    let _open = gate.open_on_drop();
    handler.wait_started("the first job");
    handler.wait_started("the second job");
    let mut raw = schema.raw();
    assert_eq!(
        int(
            &mut raw,
            "SELECT COUNT(*) AS v FROM jobs WHERE status = 'running'"
        ),
        2,
        "two threads, no prefetch: two jobs claimed"
    );
    let mut started = handler.call_ids();
    started.sort_unstable();
    assert_eq!(started, ids[..2].to_vec(), "the first two in order");
    gate.open();
    wait_all(&events, &ids, JobStatus::Succeeded);
    stop(worker);
    assert!(handler.max_concurrent() <= 2);
}

#[test]
fn pg_paused_queues_and_types_the_worker_lacks_are_not_claimed() {
    let Some((_schema, queue, clock)) = setup() else {
        return;
    };
    let mine = queue.enqueue(t(1).queue("mail")).expect("enqueue");
    let theirs = queue
        .enqueue(NewJob::new("other", json!({})).queue("mail"))
        .expect("enqueue");
    let later = queue
        .enqueue(t(2).queue("mail").run_at(at_ms(START_MS + 5_000)))
        .expect("enqueue");
    queue.pause_queue("mail").expect("pause");
    let runs = ScriptedHandler::new();
    let builder = Worker::builder(&queue)
        .queue("mail", 1)
        .handler("t", runs.clone());
    assert_eq!(testing::drain(&builder).expect("drain").attempts(), 0);
    queue.resume_queue("mail").expect("resume");
    assert_eq!(testing::drain(&builder).expect("drain").succeeded, 1);
    assert_eq!(runs.call_ids(), vec![mine]);
    clock.advance(Duration::from_secs(5));
    assert_eq!(testing::drain(&builder).expect("drain").succeeded, 1);
    assert_eq!(runs.call_ids(), vec![mine, later]);
    assert_eq!(job(&queue, theirs).status, JobStatus::Queued);
}

#[test]
fn pg_a_worker_runs_a_job_another_queue_enqueued() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let other = schema.queue(&clock);
    let events = queue.subscribe();
    let worker = Worker::builder(&queue)
        .handler("t", ScriptedHandler::new())
        .start()
        .expect("worker starts");
    let id = other.enqueue(t(1)).expect("enqueue elsewhere");
    wait_status(&events, id, JobStatus::Succeeded);
    stop(worker);
}

/// Handlers of group-keyed jobs run by two queues at once: never two of one key at the same
/// time, each key's jobs in (priority, run_at, id) order, and no drain fails.
#[test]
fn pg_group_keys_run_one_at_a_time_in_order_across_two_queues() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let other = schema.queue(&clock);
    let keys = 4;
    let per_key = 12;
    let jobs: Vec<NewJob> = (0..keys * per_key)
        .map(|i| {
            t(i).group_key(format!("g{}", i % keys))
                .priority((i * 7) % 5)
        })
        .collect();
    let priorities: Vec<i64> = (0..keys * per_key).map(|i| (i * 7) % 5).collect();
    let ids = queue.enqueue_batch(jobs).expect("enqueue_batch");
    queue
        .enqueue_batch((0..10).map(t).collect())
        .expect("keyless jobs between them");
    // Per key: whether a job of it is running, and the order they ran in.
    type Seen = (HashMap<String, bool>, HashMap<String, Vec<i64>>, usize);
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let queues = [queue.clone(), other];
    let shared = Arc::clone(&seen);
    all_at_once(4, move |i| {
        let seen = Arc::clone(&shared);
        let builder = Worker::builder(&queues[i % 2]).handler("t", move |ctx: &JobContext| {
            let Some(key) = ctx.group_key().map(str::to_string) else {
                return Ok(());
            };
            {
                let mut s = seen.lock().unwrap_or_else(|p| p.into_inner());
                if s.0.insert(key.clone(), true) == Some(true) {
                    s.2 += 1;
                }
                s.1.entry(key.clone()).or_default().push(ctx.id());
            }
            std::thread::yield_now();
            seen.lock()
                .unwrap_or_else(|p| p.into_inner())
                .0
                .insert(key, false);
            Ok(())
        });
        // Drain until nothing is due: a key's next job waits for the running one.
        let mut total = 0;
        loop {
            let report = testing::drain(&builder).expect("a drain never fails on the race");
            total += report.succeeded;
            if report.attempts() == 0 {
                break total;
            }
        }
    });
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    assert_eq!(seen.2, 0, "two jobs of one key ran at the same time");
    for k in 0..keys {
        let key = format!("g{k}");
        let mut expected: Vec<(i64, i64)> = (0..per_key)
            .map(|j| {
                let i = (j * keys + k) as usize;
                (-priorities[i], ids[i])
            })
            .collect();
        expected.sort_unstable();
        let expected: Vec<i64> = expected.into_iter().map(|(_, id)| id).collect();
        assert_eq!(seen.1.get(&key), Some(&expected), "key {key} in order");
    }
    let mut raw = schema.raw();
    assert_eq!(
        int(
            &mut raw,
            "SELECT COUNT(*) AS v FROM jobs WHERE status <> 'succeeded'"
        ),
        0,
        "every job ran"
    );
}

/// Another process claims a group key's job (its transaction still open) while this one's
/// claim picks another job of the same key, seeing the first as still waiting: the unique
/// index refuses the second running job, and the claim goes on without it, instead of
/// failing the round. Made deterministic by holding the other transaction open until the
/// claim waits for it.
#[test]
fn pg_a_claim_meeting_another_claim_of_the_same_group_key_goes_on_without_it() {
    let Some((schema, queue, _clock)) = setup() else {
        return;
    };
    let low = queue.enqueue(t(1).group_key("k")).expect("enqueue");
    let high = queue
        .enqueue(t(2).group_key("k").priority(5))
        .expect("enqueue");
    let free = queue.enqueue(t(3)).expect("enqueue");
    // "Another host" moves `low` to running in a transaction it keeps open.
    let mut other = schema.raw();
    other.batch_execute("BEGIN").expect("begin");
    other
        .batch_execute(&format!(
            "UPDATE jobs SET status = 'running', attempts = 1, locked_by = 'elsewhere',
                    locked_until = {}, started_at = {START_MS} WHERE id = {low}",
            START_MS + 60_000
        ))
        .expect("the other claim");
    let xid = sql_query(
        "SELECT transactionid::text AS k, 0::bigint AS n FROM pg_locks
         WHERE pid = pg_backend_pid() AND locktype = 'transactionid' AND granted",
    )
    .get_result::<Count>(&mut other)
    .expect("the other transaction's id")
    .k;
    let runs = ScriptedHandler::new();
    let builder = Worker::builder(&queue).handler("t", runs.clone());
    let drained = std::thread::spawn(move || testing::drain(&builder));
    // Wait (bounded) until the claim waits on the other transaction's index entry.
    let mut watcher = schema.raw();
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let waiting = int(
            &mut watcher,
            &format!(
                "SELECT COUNT(*) AS v FROM pg_locks
                 WHERE NOT granted AND locktype = 'transactionid' AND transactionid::text = '{xid}'"
            ),
        );
        if waiting > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the claim never waited for the other transaction"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    other.batch_execute("COMMIT").expect("commit");
    let report = drained
        .join()
        .expect("the drain thread")
        .expect("the drain goes on");
    assert_eq!(report.succeeded, 1, "{report:?}");
    assert_eq!(runs.call_ids(), vec![free]);
    assert_eq!(
        job(&queue, high).status,
        JobStatus::Queued,
        "waits its turn"
    );
    assert_eq!(job(&queue, high).attempts, 0);
    assert_eq!(job(&queue, low).status, JobStatus::Running);
}

#[test]
fn pg_every_outcome_moves_the_job_once_and_the_counts_follow() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let ok = queue
        .enqueue(NewJob::new("ok", json!({})))
        .expect("enqueue");
    let retry = queue
        .enqueue(NewJob::new("retry", json!({})))
        .expect("enqueue");
    let perm = queue
        .enqueue(NewJob::new("perm", json!({})))
        .expect("enqueue");
    let snooze = queue
        .enqueue(NewJob::new("snooze", json!({})))
        .expect("enqueue");
    let cancel = queue
        .enqueue(NewJob::new("cancel", json!({})))
        .expect("enqueue");
    let builder = Worker::builder(&queue)
        .handler("ok", |ctx: &JobContext| {
            ctx.set_progress(json!({"done": 3}));
            ctx.set_result(json!({"sum": 42}));
            Ok(())
        })
        .handler(
            "retry",
            ScriptedHandler::new()
                .then(Step::retry("flaky"))
                .then(Step::Succeed),
        )
        .handler(
            "perm",
            ScriptedHandler::always(Step::fail(|| {
                JobError::permanent("gone").with_status_code(410)
            })),
        )
        .handler(
            "snooze",
            ScriptedHandler::new()
                .then(Step::fail(|| JobError::snooze(Duration::from_secs(30))))
                .then(Step::Succeed),
        )
        .handler(
            "cancel",
            ScriptedHandler::always(Step::fail(|| JobError::cancel("no need"))),
        );
    let report = testing::drain(&builder).expect("drain");
    assert_eq!(
        (
            report.succeeded,
            report.failed,
            report.dead,
            report.snoozed,
            report.cancelled
        ),
        (1, 1, 1, 1, 1),
        "{report:?}"
    );
    let done = job(&queue, ok);
    assert_eq!(done.status, JobStatus::Succeeded);
    assert_eq!(done.result, Some(json!({"sum": 42})));
    assert_eq!(done.progress, Some(json!({"done": 3})));
    let dead = job(&queue, perm);
    assert_eq!(dead.status, JobStatus::Dead);
    assert_eq!(dead.last_status_code, Some(410));
    assert_eq!(dead.last_error.as_deref(), Some("gone"));
    assert_eq!(dead.finished_at, Some(START_MS));
    let failed = job(&queue, retry);
    assert_eq!(failed.status, JobStatus::Failed);
    assert!(failed.run_at > START_MS, "the retry is scheduled later");
    let snoozed = job(&queue, snooze);
    assert_eq!(
        (snoozed.status, snoozed.attempts, snoozed.run_at),
        (JobStatus::Queued, 0, START_MS + 30_000),
        "a snooze spends no attempt"
    );
    let cancelled = job(&queue, cancel);
    assert_eq!(cancelled.status, JobStatus::Cancelled);
    assert_eq!(cancelled.last_error.as_deref(), Some("no need"));
    assert_eq!(outcomes(&queue, cancel), vec![(1, "cancelled".to_string())]);
    assert_eq!(outcomes(&queue, perm), vec![(1, "failed".to_string())]);
    assert_counts_kept(&schema);

    clock.advance(Duration::from_secs(3_600));
    let report = testing::drain(&builder).expect("drain");
    assert_eq!(report.succeeded, 2, "{report:?}");
    assert_eq!(
        outcomes(&queue, retry),
        vec![(1, "failed".to_string()), (2, "succeeded".to_string())]
    );
    assert_eq!(job(&queue, snooze).attempts, 1);
    assert_counts_kept(&schema);
    let mut raw = schema.raw();
    assert_eq!(
        int(
            &mut raw,
            "SELECT SUM(n)::bigint AS v FROM job_counts WHERE job_type = 'retry' AND status = 'succeeded'"
        ),
        1,
        "counted once, by the trigger alone"
    );
}

#[test]
fn pg_a_lease_is_the_timeout_plus_the_grace_and_heartbeats_extend_it() {
    let Some((_schema, queue, clock)) = setup() else {
        return;
    };
    let by_type = queue.enqueue(t(1)).expect("enqueue");
    let own = queue
        .enqueue(t(2).timeout(Duration::from_secs(2)))
        .expect("enqueue");
    let leases: Arc<Mutex<Vec<(i64, i64, i64)>>> = Arc::default();
    let seen = Arc::clone(&leases);
    let q = queue.clone();
    let c = clock.clone();
    let builder = Worker::builder(&queue)
        .timeout("t", Duration::from_secs(5))
        .lease_grace(Duration::from_secs(1))
        .handler("t", move |ctx: &JobContext| {
            let before = q.job(ctx.id()).ok().flatten().and_then(|j| j.locked_until);
            c.advance(Duration::from_secs(1));
            ctx.set_progress(json!("half"));
            ctx.heartbeat()
                .map_err(|e| JobError::retry(e.to_string()))?;
            let after = q.job(ctx.id()).ok().flatten().and_then(|j| j.locked_until);
            seen.lock().unwrap_or_else(|p| p.into_inner()).push((
                ctx.id(),
                before.unwrap_or(0),
                after.unwrap_or(0),
            ));
            Ok(())
        });
    assert_eq!(testing::drain(&builder).expect("drain").succeeded, 2);
    let leases = leases.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(
        leases,
        vec![
            (
                by_type,
                START_MS + 5_000 + 1_000,
                START_MS + 1_000 + 5_000 + 1_000
            ),
            // Claimed in the same round, at START_MS; its handler ran a second later.
            (
                own,
                START_MS + 2_000 + 1_000,
                START_MS + 2_000 + 2_000 + 1_000
            ),
        ]
    );
    assert_eq!(job(&queue, by_type).progress, Some(json!("half")));
}

/// Attempt 1 loses its lease (another process reaps it and runs attempt 2 to success) while
/// its handler still runs: its heartbeat is refused and its late success changes nothing.
#[test]
fn pg_a_reaped_attempt_cannot_write_over_the_next_one() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let other = schema.queue(&clock);
    let id = queue.enqueue(t(1)).expect("enqueue");
    let heartbeat: Arc<Mutex<Option<String>>> = Arc::default();
    let hb = Arc::clone(&heartbeat);
    let (c, o) = (clock.clone(), other.clone());
    let builder = Worker::builder(&queue)
        .timeout("t", Duration::from_secs(5))
        .lease_grace(Duration::from_secs(1))
        .handler("t", move |ctx: &JobContext| {
            if ctx.attempt() > 1 {
                ctx.set_result(json!("second"));
                return Ok(());
            }
            c.advance(Duration::from_millis(6_001));
            assert_eq!(o.reap_expired_leases().expect("reap"), 1);
            let second = Worker::builder(&o).handler("t", |ctx: &JobContext| {
                ctx.set_result(json!("second"));
                Ok(())
            });
            assert_eq!(testing::drain(&second).expect("drain").succeeded, 1);
            *hb.lock().unwrap_or_else(|p| p.into_inner()) =
                ctx.heartbeat().err().map(|e| e.to_string());
            ctx.set_result(json!("first"));
            Ok(())
        });
    testing::drain(&builder).expect("drain");
    let refused = heartbeat.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(
        refused
            .as_deref()
            .is_some_and(|e| e.contains("lost its lease")),
        "{refused:?}"
    );
    let record = job(&queue, id);
    assert_eq!(record.status, JobStatus::Succeeded);
    assert_eq!(record.attempts, 2);
    assert_eq!(record.result, Some(json!("second")));
    assert_eq!(
        outcomes(&queue, id),
        vec![(1, "lost".to_string()), (2, "succeeded".to_string())]
    );
    let lost = &history(&queue, id)[0];
    assert_eq!(lost.duration_ms, Some(6_001));
    assert!(
        lost.error
            .as_deref()
            .is_some_and(|e| e.starts_with("lease expired: the worker drain:")),
        "{lost:?}"
    );
    assert_counts_kept(&schema);
}

#[test]
fn pg_two_reapers_at_once_write_one_lost_attempt_per_expired_job() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let other = schema.queue(&clock);
    let n = 200;
    // Running jobs of a crashed worker (leases expired), one with its attempts spent, and
    // one whose lease is live.
    let mut raw = schema.raw();
    raw.batch_execute(&format!(
        "INSERT INTO jobs (job_type, payload, status, attempts, max_attempts, locked_by,
                           locked_until, started_at, run_at, created_at, updated_at)
         SELECT 't', '{{}}', 'running', 1, CASE WHEN i = 1 THEN 1 ELSE 3 END, 'crashed',
                {expired}, {started}, {started}, {started}, {started}
         FROM generate_series(1, {n}) AS i;
         INSERT INTO jobs (job_type, payload, status, attempts, locked_by, locked_until,
                           started_at, run_at, created_at, updated_at)
         VALUES ('t', '{{}}', 'running', 1, 'alive', {live}, {started}, {started}, {started},
                 {started})",
        expired = START_MS - 1,
        live = START_MS,
        started = START_MS - 10_000,
    ))
    .expect("running rows");
    for round in 0..3 {
        if round > 0 {
            raw.batch_execute(&format!(
                "UPDATE jobs SET status = 'running', locked_by = 'crashed', locked_until = {},
                        attempts = attempts + 1
                 WHERE locked_by IS NULL AND status = 'failed'",
                START_MS - 1
            ))
            .expect("running again");
        }
        let queues = [queue.clone(), other.clone()];
        let reaped: usize = all_at_once(4, move |i| {
            queues[i % 2].reap_expired_leases().expect("reap")
        })
        .into_iter()
        .sum();
        let expected = if round == 0 { n } else { n - 1 };
        assert_eq!(
            reaped, expected as usize,
            "round {round}: each job reaped once"
        );
    }
    assert_eq!(
        int(
            &mut raw,
            "SELECT COUNT(*) AS v FROM job_attempts WHERE outcome = 'lost'
             GROUP BY job_id ORDER BY COUNT(*) DESC LIMIT 1"
        ),
        3,
        "never more lost attempts than reaps"
    );
    assert_eq!(
        int(
            &mut raw,
            "SELECT COUNT(*) AS v FROM job_attempts WHERE outcome = 'lost'"
        ),
        n + 2 * (n - 1)
    );
    assert_eq!(
        int(
            &mut raw,
            "SELECT COUNT(*) AS v FROM jobs WHERE status = 'dead'"
        ),
        n,
        "every job dead once its three attempts (one for the first) were lost"
    );
    assert_eq!(
        int(
            &mut raw,
            "SELECT COUNT(*) AS v FROM jobs WHERE locked_by = 'alive' AND status = 'running'"
        ),
        1,
        "a live lease is never reaped"
    );
    let last: String = sql_query(
        "SELECT last_error AS k, 0::bigint AS n FROM jobs WHERE max_attempts = 1 LIMIT 1",
    )
    .get_result::<Count>(&mut raw)
    .expect("the dead job")
    .k;
    assert_eq!(
        last,
        "the worker died or hung while running attempt 1 of 1 (lease expired); attempts spent"
    );
    assert_counts_kept(&schema);
}

#[test]
fn pg_rows_from_other_programs_that_no_handler_can_use_go_dead_without_running() {
    let Some((schema, queue, _clock)) = setup() else {
        return;
    };
    let mut raw = schema.raw();
    let big = format!("{{\"s\": \"{}\"}}", "x".repeat(70 * 1024));
    let insert = |raw: &mut PgConnection, payload: &str| -> i64 {
        sql_query(format!(
            "INSERT INTO jobs (job_type, payload, run_at, created_at)
             VALUES ('t', $1, {START_MS}, {START_MS}) RETURNING id AS v"
        ))
        .bind::<Text, _>(payload)
        .get_result::<Int>(raw)
        .expect("insert")
        .v
    };
    let oversized = insert(&mut raw, &big);
    let not_json = insert(&mut raw, "{not json");
    let fine = insert(&mut raw, "{\"n\": 1}");
    let runs = ScriptedHandler::new();
    let builder = Worker::builder(&queue).handler("t", runs.clone());
    let report = testing::drain(&builder).expect("drain");
    assert_eq!((report.succeeded, report.dead), (1, 2), "{report:?}");
    assert_eq!(runs.call_ids(), vec![fine]);
    let error = |id| job(&queue, id).last_error.unwrap_or_default();
    assert_eq!(job(&queue, oversized).status, JobStatus::Dead);
    assert!(
        error(oversized).contains("over this worker's limit of 65536 bytes"),
        "{}",
        error(oversized)
    );
    assert_eq!(job(&queue, not_json).status, JobStatus::Dead);
    assert!(
        error(not_json).contains("not valid JSON"),
        "{}",
        error(not_json)
    );
    assert_counts_kept(&schema);
}

#[test]
fn pg_an_effect_recorded_by_one_attempt_is_skipped_by_the_next() {
    let Some((_schema, queue, clock)) = setup() else {
        return;
    };
    let id = queue
        .enqueue(t(1).idempotency_key("mail-1"))
        .expect("enqueue");
    let effects: Arc<Mutex<Vec<bool>>> = Arc::default();
    let seen = Arc::clone(&effects);
    let builder = Worker::builder(&queue).handler("t", move |ctx: &JobContext| {
        let ran = ctx.once(|| Ok(()))?;
        seen.lock().unwrap_or_else(|p| p.into_inner()).push(ran);
        if ctx.attempt() == 1 {
            return Err(JobError::retry("after the effect"));
        }
        Ok(())
    });
    assert_eq!(testing::drain(&builder).expect("drain").failed, 1);
    clock.advance(Duration::from_secs(3_600));
    assert_eq!(testing::drain(&builder).expect("drain").succeeded, 1);
    assert_eq!(
        *effects.lock().unwrap_or_else(|p| p.into_inner()),
        vec![true, false]
    );
    assert_eq!(job(&queue, id).status, JobStatus::Succeeded);
    assert_eq!(
        history(&queue, id)
            .iter()
            .map(|a| a.outcome)
            .collect::<Vec<_>>(),
        vec![AttemptOutcome::Failed, AttemptOutcome::Succeeded]
    );
}

/// A worker whose attempt is running when another process reaps it starts over: the
/// started event of attempt 2 comes from the second worker.
#[test]
fn pg_a_worker_reaps_a_crashed_workers_job_and_runs_it_again() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let id = queue.enqueue(t(1)).expect("enqueue");
    let mut raw = schema.raw();
    raw.batch_execute(&format!(
        "UPDATE jobs SET status = 'running', attempts = 1, locked_by = 'crashed',
                locked_until = {}, started_at = {START_MS} WHERE id = {id}",
        START_MS - 1
    ))
    .expect("a crashed worker's claim");
    let other = schema.queue(&clock);
    let events = other.subscribe();
    let worker = Worker::builder(&other)
        .handler("t", ScriptedHandler::new())
        .start()
        .expect("worker starts");
    assert_eq!(wait_started(&events, id), 2);
    wait_status(&events, id, JobStatus::Succeeded);
    stop(worker);
    assert_eq!(
        outcomes(&queue, id),
        vec![(1, "lost".to_string()), (2, "succeeded".to_string())]
    );
}

/// `Queue::cancel_expired` waits for a job past its deadline that another transaction holds
/// (a worker's own sweep cancelling it), so that when it returns no expired job still reads as
/// waiting: `litejobs work`'s start-up report sweeps, then counts the jobs that wait.
#[test]
fn pg_cancel_expired_waits_for_an_expired_job_another_transaction_holds() {
    let Some((schema, queue, _clock)) = setup() else {
        return;
    };
    let id = queue
        .enqueue(NewJob::new("t", json!({})).expire_after(Duration::from_secs(1)))
        .expect("enqueue");
    let mut sql = schema.raw();
    sql.batch_execute(&format!(
        "UPDATE jobs SET expires_at = {} WHERE id = {id}",
        START_MS - 1
    ))
    .expect("past its deadline");
    let mut other = schema.raw();
    other.batch_execute("BEGIN").expect("begin");
    other
        .batch_execute(&format!(
            "UPDATE jobs SET status = 'cancelled', cancelled_by = 'deadline',
                    finished_at = {START_MS} WHERE id = {id}"
        ))
        .expect("another sweep cancels it, not yet committed");
    let sweeping = queue.clone();
    let swept = std::thread::spawn(move || sweeping.cancel_expired());
    // A backend waiting for the row lock the other transaction holds: the sweep.
    let deadline = std::time::Instant::now() + WAIT;
    while int(
        &mut sql,
        "SELECT COUNT(*) AS v FROM pg_locks w WHERE NOT w.granted AND w.pid IN (
             SELECT t.pid FROM pg_locks t
             WHERE t.locktype = 'tuple' AND t.relation = 'jobs'::regclass)",
    ) == 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the sweep passed the held job over instead of waiting for it"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    other.batch_execute("COMMIT").expect("commit");
    let n = swept.join().expect("the sweep's thread").expect("sweep");
    assert_eq!(
        n, 0,
        "the other transaction cancelled it; this sweep took it once, not twice"
    );
    assert_eq!(
        queue.job(id).expect("read").expect("job").status,
        JobStatus::Cancelled
    );
}
