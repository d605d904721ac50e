//! Periodic jobs with the manual clock: cron and interval slots, each enqueued once
//! (also by two schedulers on one file, ticking at the same moment), one run after downtime
//! instead of a burst, and the scheduler thread of a started worker.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use litejobs::maintenance::{Periodic, Scheduler, TickReport};
use litejobs::{ErrorKind, JobContext, JobError, JobStatus, NewJob, Queue, Worker};
use serde_json::{json, Value};

use crate::support::scripted::wait_bound;
use crate::support::{setup, TestEnv, START_MS};

pub(crate) const MINUTE: i64 = 60_000;
pub(crate) const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;
/// START_MS (2023-11-14T22:13:20Z) rounded down to its UTC midnight.
pub(crate) const START_MIDNIGHT: i64 = 1_699_920_000_000;

pub(crate) fn hourly() -> Periodic {
    Periodic::every(
        Duration::from_secs(3600),
        NewJob::new("hourly_sync", json!({"source": "crm"})),
    )
    .expect("an hourly schedule")
}

fn nightly() -> Periodic {
    Periodic::cron(
        "0 2 * * *",
        NewJob::new("nightly_report", json!({"kind": "activity"})),
    )
    .expect("a nightly schedule")
}

pub(crate) fn tick(scheduler: &Scheduler) -> TickReport {
    scheduler.tick().expect("tick")
}

fn set_clock(env: &TestEnv, ms: i64) {
    env.clock.set(ms);
}

/// (run_at, idempotency_key, payload) of every job of `job_type`, oldest first.
pub(crate) fn jobs(env: &TestEnv, job_type: &str) -> Vec<(i64, String, Value)> {
    #[cfg(feature = "postgres")]
    if let Some(schema) = &env.pg {
        return pg_jobs(schema, job_type);
    }
    let conn = env.raw();
    let mut stmt = conn
        .prepare(
            "SELECT run_at, idempotency_key, payload FROM jobs WHERE job_type = ?1 ORDER BY id",
        )
        .expect("prepare");
    stmt.query_map([job_type], |r| {
        let payload: String = r.get(2)?;
        Ok((
            r.get(0)?,
            r.get(1)?,
            serde_json::from_str(&payload).unwrap_or(Value::Null),
        ))
    })
    .expect("query")
    .collect::<rusqlite::Result<Vec<_>>>()
    .expect("rows")
}

/// [`jobs`] on the PostgreSQL pass, read through a raw connection in the test's schema.
#[cfg(feature = "postgres")]
fn pg_jobs(schema: &crate::support::pg::PgSchema, job_type: &str) -> Vec<(i64, String, Value)> {
    use diesel::sql_types::{BigInt, Text};
    use diesel::{sql_query, QueryableByName, RunQueryDsl};
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = BigInt)]
        run_at: i64,
        #[diesel(sql_type = Text)]
        idempotency_key: String,
        #[diesel(sql_type = Text)]
        payload: String,
    }
    sql_query("SELECT run_at, idempotency_key, payload FROM jobs WHERE job_type = $1 ORDER BY id")
        .bind::<Text, _>(job_type)
        .load::<Row>(&mut schema.raw())
        .expect("reading the jobs of a type")
        .into_iter()
        .map(|r| {
            (
                r.run_at,
                r.idempotency_key,
                serde_json::from_str(&r.payload).unwrap_or(Value::Null),
            )
        })
        .collect()
}

#[test]
fn interval_slots_are_enqueued_once_each_on_the_hour() {
    let env = setup();
    let scheduler =
        Scheduler::new(&env.queue, vec![hourly().slot_field("slot_ms")]).expect("scheduler");
    let first_slot = START_MIDNIGHT + 23 * HOUR;

    let report = tick(&scheduler);
    assert!(
        report.enqueued.is_empty(),
        "a new schedule starts with its next slot"
    );
    assert_eq!(report.next_slot_at, Some(first_slot));
    set_clock(&env, first_slot - 1);
    assert!(tick(&scheduler).enqueued.is_empty(), "not yet");

    set_clock(&env, first_slot + 10 * MINUTE);
    let report = tick(&scheduler);
    assert_eq!(report.enqueued.len(), 1);
    let slot = &report.enqueued[0];
    assert_eq!(
        (slot.name.as_str(), slot.slot_ms, slot.skipped_earlier),
        ("hourly_sync", first_slot, false)
    );
    assert_eq!(report.next_slot_at, Some(first_slot + HOUR));
    assert!(
        tick(&scheduler).enqueued.is_empty(),
        "a slot is enqueued once"
    );

    set_clock(&env, first_slot + HOUR);
    assert_eq!(tick(&scheduler).enqueued.len(), 1);
    let got = jobs(&env, "hourly_sync");
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].1, format!("periodic:hourly_sync:{first_slot}"));
    assert_eq!(got[0].2, json!({"source": "crm", "slot_ms": first_slot}));
    assert_eq!(
        got[1].1,
        format!("periodic:hourly_sync:{}", first_slot + HOUR)
    );
    assert_eq!(got[0].0, first_slot + 10 * MINUTE, "due when enqueued");

    let states = env.queue.periodic_schedules().expect("states");
    assert_eq!(states.len(), 1);
    assert_eq!(states[0].name, "hourly_sync");
    assert_eq!(states[0].last_slot_at, first_slot + HOUR);
    assert_eq!(states[0].next_slot_at, Some(first_slot + 2 * HOUR));
    assert_eq!(states[0].schedule, "every 3600000 ms");
}

#[test]
fn cron_slots_follow_the_expression_in_utc() {
    let env = setup();
    let quarter = Periodic::cron("*/15 * * * *", NewJob::new("quarter", json!({}))).expect("cron");
    let scheduler = Scheduler::new(&env.queue, vec![nightly(), quarter]).expect("scheduler");
    tick(&scheduler);
    let first_night = START_MIDNIGHT + DAY + 2 * HOUR;
    for day in 0..3 {
        let slot = first_night + day * DAY;
        set_clock(&env, slot - 1);
        let before = tick(&scheduler);
        assert!(
            before.enqueued.iter().all(|s| s.name != "nightly_report"),
            "day {day}: {before:?}"
        );
        set_clock(&env, slot);
        let at = tick(&scheduler);
        let names: Vec<&str> = at.enqueued.iter().map(|s| s.name.as_str()).collect();
        assert!(names.contains(&"nightly_report"), "day {day}: {at:?}");
        let nightly = at
            .enqueued
            .iter()
            .find(|s| s.name == "nightly_report")
            .expect("nightly");
        assert_eq!(nightly.slot_ms, slot);
    }
    assert_eq!(jobs(&env, "nightly_report").len(), 3);
    // The quarter-hour schedule ran at each tick that passed one of its slots (02:00 is one).
    let quarters = jobs(&env, "quarter");
    assert!(
        quarters.iter().all(|(_, key, _)| {
            let slot: i64 = key
                .rsplit(':')
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or(-1);
            slot % (15 * MINUTE) == 0
        }),
        "{quarters:?}"
    );
}

#[test]
fn two_schedulers_on_one_file_enqueue_each_slot_once() {
    let env = setup();
    let other: Queue = env.open_another();
    let a = Scheduler::new(&env.queue, vec![hourly(), nightly()]).expect("a");
    let b = Scheduler::new(&other, vec![hourly(), nightly()]).expect("b");
    tick(&a);
    tick(&b);
    // Alternate who ticks first.
    for hour in 1..=30 {
        env.clock.advance(Duration::from_secs(3600));
        let (first, second) = if hour % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let r1 = tick(first);
        let r2 = tick(second);
        assert!(
            r2.enqueued.is_empty(),
            "hour {hour}: the second scheduler enqueued {r2:?} after {r1:?}"
        );
    }
    assert_eq!(jobs(&env, "hourly_sync").len(), 30);
    assert_eq!(
        jobs(&env, "nightly_report").len(),
        2,
        "30 hours from 22:13 pass two 02:00s"
    );

    // And ticking at the same moment, from two threads, over many slots: each round the main
    // thread moves the clock an hour, both threads tick together, and exactly one of them
    // enqueues the new slot.
    let rounds = 25;
    let start = Arc::new(Barrier::new(3));
    let end = Arc::new(Barrier::new(3));
    let spawn = |scheduler: Scheduler| {
        let (start, end) = (Arc::clone(&start), Arc::clone(&end));
        std::thread::spawn(move || {
            let mut enqueued = Vec::new();
            for _ in 0..rounds {
                start.wait();
                enqueued.push(scheduler.tick().map(|r| r.enqueued.len()));
                end.wait();
            }
            enqueued
        })
    };
    let ta = spawn(a.clone());
    let tb = spawn(b.clone());
    let before = jobs(&env, "hourly_sync").len();
    let nights_before = jobs(&env, "nightly_report").len();
    for round in 0..rounds {
        env.clock.advance(Duration::from_secs(3600));
        start.wait();
        end.wait();
        assert_eq!(
            jobs(&env, "hourly_sync").len(),
            before + round + 1,
            "round {round}: one job for the slot"
        );
    }
    let from_a = ta.join().expect("thread a");
    let from_b = tb.join().expect("thread b");
    let total: usize = from_a
        .iter()
        .chain(&from_b)
        .map(|r| *r.as_ref().expect("tick"))
        .sum();
    let nights = jobs(&env, "nightly_report").len() - nights_before;
    assert_eq!(nights, 1, "25 more hours pass one more 02:00");
    assert_eq!(
        total,
        rounds + nights,
        "each slot enqueued by one of them: {from_a:?} {from_b:?}"
    );
}

#[test]
fn missed_slots_after_downtime_run_once_not_in_a_burst() {
    let env = setup();
    let scheduler = Scheduler::new(&env.queue, vec![hourly(), nightly()]).expect("scheduler");
    tick(&scheduler);
    // Down for three days and a bit: 74 hourly slots and 3 nightly slots pass unseen.
    let back = START_MS + 3 * DAY + 2 * HOUR;
    set_clock(&env, back);
    let report = tick(&scheduler);
    let mut got: Vec<(String, i64, bool)> = report
        .enqueued
        .iter()
        .map(|s| (s.name.clone(), s.slot_ms, s.skipped_earlier))
        .collect();
    got.sort();
    let latest_hour = back - back.rem_euclid(HOUR);
    let latest_night = START_MIDNIGHT + 3 * DAY + 2 * HOUR;
    assert!(latest_night <= back);
    assert_eq!(
        got,
        vec![
            ("hourly_sync".to_string(), latest_hour, true),
            ("nightly_report".to_string(), latest_night, true),
        ],
        "only the most recent missed slot of each schedule"
    );
    assert!(tick(&scheduler).enqueued.is_empty(), "and only once");
    assert_eq!(jobs(&env, "hourly_sync").len(), 1);
    assert_eq!(jobs(&env, "nightly_report").len(), 1);
    // Then the schedule goes on normally.
    set_clock(&env, latest_hour + HOUR);
    let next = tick(&scheduler);
    assert_eq!(next.enqueued.len(), 1);
    assert!(!next.enqueued[0].skipped_earlier);
}

#[test]
fn a_dead_slot_job_is_not_enqueued_again() {
    let env = setup();
    let scheduler = Scheduler::new(&env.queue, vec![hourly()]).expect("scheduler");
    tick(&scheduler);
    env.clock.advance(Duration::from_secs(3600));
    assert_eq!(tick(&scheduler).enqueued.len(), 1);
    let builder = Worker::builder(&env.queue)
        .handler("hourly_sync", |_: &JobContext| -> Result<(), JobError> {
            Err(JobError::permanent("crm down"))
        });
    assert_eq!(litejobs::testing::drain(&builder).expect("drain").dead, 1);
    // The dead job released its idempotency key, but the slot stays handled.
    env.clock.advance(Duration::from_secs(60));
    assert!(tick(&scheduler).enqueued.is_empty());
    assert_eq!(jobs(&env, "hourly_sync").len(), 1);
}

#[test]
fn schedules_are_checked_when_built() {
    let env = setup();
    let err = Scheduler::new(&env.queue, vec![hourly(), hourly()]).err();
    let msg = err.as_ref().map(|e| e.to_string()).unwrap_or_default();
    assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::InvalidConfig));
    assert!(msg.contains("\"hourly_sync\""), "{msg}");
    assert!(Scheduler::new(&env.queue, vec![hourly(), hourly().named("hourly_sync_2")]).is_ok());
    let err = Periodic::cron("0 2 * *", NewJob::new("x", json!({})))
        .err()
        .map(|e| e.to_string());
    assert!(err
        .unwrap_or_default()
        .contains("cron expression \"0 2 * *\" is invalid"));
    // The shortest interval is one second, and a schedule is named after its job type
    // unless named otherwise.
    let second = Periodic::every(Duration::from_secs(1), NewJob::new("tick", json!({})))
        .expect("an interval of exactly 1 s");
    assert_eq!(second.name(), "tick");
    assert_eq!(second.named("ticker").name(), "ticker");
    let too_short = Periodic::every(Duration::from_millis(999), NewJob::new("tick", json!({})));
    assert_eq!(
        too_short.err().map(|e| e.kind()),
        Some(ErrorKind::InvalidConfig)
    );
    let bad_job = Periodic::every(Duration::from_secs(60), NewJob::new("", json!({}))).err();
    assert_eq!(bad_job.map(|e| e.kind()), Some(ErrorKind::InvalidJob));
    let not_object = Periodic::every(Duration::from_secs(60), NewJob::new("x", json!([1])))
        .expect("valid")
        .slot_field("slot");
    // Its slot could never go into the payload: refused at the start, not at every slot.
    let refused = Scheduler::new(&env.queue, vec![not_object.clone()]).err();
    assert_eq!(refused.map(|e| e.kind()), Some(ErrorKind::InvalidJob));
    let worker = Worker::builder(&env.queue)
        .handler("x", |_: &JobContext| -> Result<(), JobError> { Ok(()) })
        .periodic(not_object)
        .start();
    let Err(err) = worker else {
        panic!("a worker with that schedule started")
    };
    assert_eq!(err.kind(), ErrorKind::InvalidJob);
    assert!(
        err.to_string().contains("needs a JSON object payload"),
        "{err}"
    );
    let worker = Worker::builder(&env.queue)
        .handler("x", |_: &JobContext| -> Result<(), JobError> { Ok(()) })
        .periodic(hourly())
        .periodic(hourly())
        .start();
    assert_eq!(
        worker.err().map(|e| e.kind()),
        Some(ErrorKind::InvalidConfig)
    );
}

#[test]
fn workers_run_their_scheduler_threads_and_enqueue_each_slot_once() {
    let env = setup();
    let other = env.open_another();
    let events = env.queue.subscribe();
    let handler = |ctx: &JobContext| -> Result<(), JobError> {
        ctx.set_result(json!({"slot": ctx.payload()["slot_ms"]}));
        Ok(())
    };
    // Both run the scheduler; only `a` runs the jobs (so its events show them).
    let start = |queue: &Queue, name: &str, runs: &str| {
        Worker::builder(queue)
            .handler(runs, handler)
            .periodic(hourly().slot_field("slot_ms"))
            .poll_interval(Duration::from_millis(20))
            .worker_id(name)
            .start()
            .expect("start")
    };
    // The schedule's baseline, as the workers' first ticks would record it.
    tick(&Scheduler::new(&env.queue, vec![hourly()]).expect("scheduler"));
    let a = start(&env.queue, "a", "hourly_sync");
    let b = start(&other, "b", "something_else");
    let first_slot = START_MIDNIGHT + 23 * HOUR;
    set_clock(&env, first_slot + 1);
    // Wake the schedulers of both queues now instead of at their next timer.
    env.queue.notify();
    other.notify();
    let id = crate::support::scripted::wait_event(
        &events,
        "the slot's job to be enqueued and run",
        |e| match e {
            litejobs::Event::Finished {
                id,
                job_type,
                status: JobStatus::Succeeded,
                ..
            } if job_type == "hourly_sync" => Some(*id),
            _ => None,
        },
    );
    a.shutdown(wait_bound()).expect("shutdown a");
    b.shutdown(wait_bound()).expect("shutdown b");
    let got = jobs(&env, "hourly_sync");
    assert_eq!(
        got.len(),
        1,
        "one job for the slot from two workers: {got:?}"
    );
    let job = env.queue.job(id).expect("job").expect("some");
    assert_eq!(job.result, Some(json!({"slot": first_slot})));
}

#[test]
fn the_periodic_example_runs_the_nightly_report_once_per_night_and_once_after_downtime() {
    let dir = crate::support::temp_dir();
    let out = crate::support::run_example("periodic", &[dir.path().as_os_str()]);
    for expected in [
        "2024-03-01 02:00 UTC: enqueued the slot of 2024-03-01 02:00 UTC",
        "2024-03-01 02:01 UTC: again: nothing due",
        "2024-03-02 02:00 UTC: enqueued the slot of 2024-03-02 02:00 UTC",
        "2024-03-05 09:00 UTC: back after downtime: enqueued the slot of 2024-03-05 02:00 UTC (earlier missed nights skipped)",
        "report runs: 3",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    let mut files: Vec<String> = std::fs::read_dir(dir.path())
        .expect("output dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        vec![
            "activity-2024-02-29.csv",
            "activity-2024-03-01.csv",
            "activity-2024-03-04.csv"
        ]
    );
    let text = std::fs::read_to_string(dir.path().join("activity-2024-03-01.csv")).expect("csv");
    assert_eq!(
        text.lines().count(),
        1 + 144,
        "a header and one row per 10 minutes"
    );
    assert!(
        text.lines()
            .nth(1)
            .unwrap_or("")
            .starts_with("2024-03-01 00:00 UTC,"),
        "{text}"
    );
}

#[test]
fn a_slot_the_database_refuses_is_retried_with_a_growing_back_off_until_it_goes_in() {
    let env = setup();
    let every_second =
        || Periodic::every(Duration::from_secs(1), NewJob::new("tick", json!({}))).expect("every");
    // The application's own rule: one queued `tick` at a time. A queued one far in the
    // future blocks the scheduler's insert until the application cancels it.
    env.sql_exec(
        "CREATE UNIQUE INDEX one_queued_tick ON jobs(job_type)
         WHERE job_type = 'tick' AND status = 'queued'",
    );
    let blocker = env
        .queue
        .enqueue(NewJob::new("tick", json!({})).delay(Duration::from_secs(86_400)))
        .expect("the blocking job");
    let events = env.queue.subscribe();
    tick(&Scheduler::new(&env.queue, vec![every_second()]).expect("scheduler"));
    let handler = |_: &JobContext| -> Result<(), JobError> { Ok(()) };
    let worker = Worker::builder(&env.queue)
        .handler("tick", handler)
        .periodic(every_second())
        .poll_interval(Duration::from_secs(3600))
        .start()
        .expect("start");
    let failed = |what: &str| {
        crate::support::scripted::wait_event(&events, what, |e| match e {
            litejobs::Event::PeriodicTickFailed { error, retry_in } => {
                Some((error.clone(), *retry_in))
            }
            _ => None,
        })
    };

    set_clock(&env, START_MS + 1_000);
    env.queue.notify();
    let (error, retry_in) = failed("the first refused tick");
    assert!(error.contains("constraint"), "{error}");
    assert_eq!(retry_in, Duration::from_millis(500));
    // Nothing was recorded for the slot: the retry tries it again, and backs off further.
    set_clock(&env, START_MS + 1_500);
    env.queue.notify();
    assert_eq!(failed("the second refused tick").1, Duration::from_secs(1));
    let ticks = env.sql_i64("SELECT COUNT(*) FROM jobs WHERE job_type = 'tick'");
    assert_eq!(ticks, 1, "only the blocker");

    env.queue.cancel(blocker).expect("cancel the blocker");
    set_clock(&env, START_MS + 2_500);
    env.queue.notify();
    let id = crate::support::scripted::wait_event(&events, "the slot's job", |e| match e {
        litejobs::Event::Enqueued { id, job_type, .. } if job_type == "tick" => Some(*id),
        _ => None,
    });
    worker.shutdown(wait_bound()).expect("shutdown");
    let job = env.queue.job(id).expect("job").expect("some");
    assert_eq!(
        job.idempotency_key.as_deref(),
        Some(format!("periodic:tick:{}", START_MS + 2_000).as_str()),
        "the latest slot goes in once the rule allows it"
    );
}
