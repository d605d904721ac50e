//! LimitStore and PeriodicStore on PostgreSQL: rate limits and circuit breakers shared by two
//! queues on one schema (as two processes would be), their read-then-write decisions made
//! once under real concurrent transactions, and periodic slots enqueued once by schedulers
//! in two "processes" ticking at the same moment. Time is a `ManualClock`.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::{sql_query, QueryableByName, RunQueryDsl};
use litejobs::limits::{Breaker, BreakerState, RateLimit, Verdict};
use litejobs::maintenance::{Periodic, Scheduler};
use litejobs::{NewJob, Queue};
use serde_json::json;

use crate::support::pg::{setup, PgSchema};
use crate::support::START_MS;

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
/// START_MS (2023-11-14T22:13:20Z) rounded down to its UTC midnight.
const START_MIDNIGHT: i64 = 1_699_920_000_000;

/// Runs `f` on `threads` threads at once (released together by a barrier) and returns what
/// each returned, in thread order.
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

#[derive(QueryableByName, Debug)]
struct RateRow {
    #[diesel(sql_type = Text)]
    key: String,
    #[diesel(sql_type = BigInt)]
    next_at: i64,
    #[diesel(sql_type = BigInt)]
    updated_at: i64,
}

#[test]
fn pg_rate_limits_space_calls_burst_and_are_shared_by_two_queues() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let other = schema.queue(&clock);
    let limit = RateLimit::new(3, Duration::from_millis(900));
    assert_eq!(limit.acquire(&queue, "k").expect("acquire"), Verdict::Go);
    assert_eq!(
        limit.acquire(&other, "k").expect("acquire"),
        Verdict::Wait(Duration::from_millis(300)),
        "the other queue sees the slot taken"
    );
    assert_eq!(
        limit.acquire(&other, "other").expect("acquire"),
        Verdict::Go
    );
    clock.advance(Duration::from_millis(300));
    assert_eq!(limit.acquire(&other, "k").expect("acquire"), Verdict::Go);

    // What is stored: next_at moved on by period / n from the queue's clock, not the server's.
    let rows: Vec<RateRow> =
        sql_query("SELECT key, next_at, updated_at FROM rate_limits ORDER BY key")
            .load(&mut schema.raw())
            .expect("rate_limits");
    let rows: Vec<(&str, i64, i64)> = rows
        .iter()
        .map(|r| (r.key.as_str(), r.next_at, r.updated_at))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("k", START_MS + 600, START_MS + 300),
            ("other", START_MS + 300, START_MS)
        ]
    );

    let bursty = RateLimit::new(3, Duration::from_millis(900)).burst(3);
    clock.advance(Duration::from_secs(10));
    for _ in 0..3 {
        assert!(bursty.acquire(&queue, "b").expect("acquire").is_go());
    }
    assert_eq!(
        bursty.acquire(&other, "b").expect("acquire"),
        Verdict::Wait(Duration::from_millis(300))
    );

    assert!(RateLimit::reset(&other, "k").expect("reset"));
    assert!(
        !RateLimit::reset(&other, "k").expect("reset"),
        "a key without state"
    );
    assert_eq!(limit.acquire(&queue, "k").expect("acquire"), Verdict::Go);
}

/// Sixteen calls from two queues (two processes) at the same moment against a limit of 5
/// per minute with a burst of 5: exactly five go, whatever the interleaving. Without the
/// key's lock, calls reading the same `next_at` would all go.
#[test]
fn pg_concurrent_acquires_from_two_queues_admit_exactly_the_limit() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let queues = [queue, schema.queue(&clock)];
    let limit = RateLimit::new(5, Duration::from_secs(60)).burst(5);
    for round in 0..3 {
        let (qs, l) = (queues.clone(), limit);
        let verdicts = all_at_once(16, move |i| {
            l.acquire(&qs[i % 2], "shared").expect("acquire")
        });
        let goes = verdicts.iter().filter(|v| v.is_go()).count();
        assert_eq!(goes, 5, "round {round}: {verdicts:?}");
        // The waits say when the next slot frees up: 12 s apart, the first 12 s away.
        let shortest = verdicts.iter().filter_map(|v| v.wait()).min();
        assert_eq!(shortest, Some(Duration::from_secs(12)), "round {round}");
        clock.advance(Duration::from_secs(60));
    }
}

#[test]
fn pg_breakers_open_probe_once_and_close_across_queues() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let other = schema.queue(&clock);
    let breaker = Breaker::new()
        .failure_threshold(2)
        .cool_down(Duration::from_secs(30))
        .probe_timeout(Duration::from_secs(10));
    assert_eq!(breaker.allow(&queue, "smtp").expect("allow"), Verdict::Go);
    assert_eq!(
        breaker
            .record_failure(&queue, "smtp", "421 try later")
            .expect("record"),
        BreakerState::Closed
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        breaker
            .record_failure(&other, "smtp", "421 still")
            .expect("record"),
        BreakerState::Open,
        "the second failure in a row, from the other queue, opens it"
    );
    assert_eq!(
        breaker.allow(&queue, "smtp").expect("allow"),
        Verdict::Wait(Duration::from_secs(30))
    );
    let status = Breaker::status(&queue, "smtp")
        .expect("status")
        .expect("a row");
    assert_eq!(status.state, BreakerState::Open);
    assert_eq!(status.failures, 2);
    assert_eq!(status.opened_at, Some(START_MS + 1_000));
    assert_eq!(status.open_until, Some(START_MS + 31_000));
    assert_eq!(status.last_error.as_deref(), Some("421 still"));
    assert_eq!(status.updated_at, START_MS + 1_000);

    // Cool-down over: one call is the probe, the next waits for its turn to lapse.
    clock.advance(Duration::from_secs(30));
    assert_eq!(breaker.allow(&other, "smtp").expect("allow"), Verdict::Go);
    assert_eq!(
        breaker.allow(&queue, "smtp").expect("allow"),
        Verdict::Wait(Duration::from_secs(10))
    );
    assert_eq!(
        Breaker::status(&queue, "smtp")
            .expect("status")
            .map(|s| s.state),
        Some(BreakerState::HalfOpen)
    );
    assert!(
        breaker.record_success(&queue, "smtp").expect("success"),
        "the probe's success closed it"
    );
    let closed = Breaker::status(&other, "smtp")
        .expect("status")
        .expect("a row");
    assert_eq!(
        (closed.state, closed.failures, closed.open_until),
        (BreakerState::Closed, 0, None)
    );
    assert!(
        !breaker.record_success(&other, "smtp").expect("success"),
        "nothing left to close"
    );

    // Listing is in byte order, as on SQLite, whatever the database's collation.
    for key in ["beta", "Zeta", "alpha"] {
        breaker.record_failure(&queue, key, "boom").expect("record");
    }
    let keys: Vec<String> = Breaker::list(&other)
        .expect("list")
        .into_iter()
        .map(|s| s.key)
        .collect();
    assert_eq!(keys, ["Zeta", "alpha", "beta", "smtp"]);
    assert!(Breaker::reset(&other, "beta").expect("reset"));
    assert!(!Breaker::reset(&other, "beta").expect("reset"));
    assert_eq!(Breaker::status(&queue, "beta").expect("status"), None);
}

/// Once the cool-down is over, twelve calls from two queues ask at the same moment: exactly
/// one becomes the probe. And failures recorded at the same moment are all counted.
#[test]
fn pg_concurrent_breaker_calls_let_one_probe_through_and_count_every_failure() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let queues = [queue, schema.queue(&clock)];
    let breaker = Breaker::new()
        .failure_threshold(100)
        .cool_down(Duration::from_secs(30));

    let (qs, b) = (queues.clone(), breaker);
    let states = all_at_once(12, move |i| {
        b.record_failure(&qs[i % 2], "crm", &format!("failure {i}"))
            .expect("record")
    });
    assert!(states.iter().all(|s| *s == BreakerState::Closed));
    let status = Breaker::status(&queues[0], "crm")
        .expect("status")
        .expect("a row");
    assert_eq!(
        status.failures, 12,
        "no failure lost to a concurrent writer"
    );

    let opener = Breaker::new()
        .failure_threshold(1)
        .cool_down(Duration::from_secs(30));
    assert_eq!(
        opener
            .record_failure(&queues[1], "crm", "down")
            .expect("record"),
        BreakerState::Open
    );
    clock.advance(Duration::from_secs(30));
    let (qs, b) = (queues.clone(), breaker);
    let verdicts = all_at_once(12, move |i| b.allow(&qs[i % 2], "crm").expect("allow"));
    let probes = verdicts.iter().filter(|v| v.is_go()).count();
    assert_eq!(probes, 1, "{verdicts:?}");
}

#[derive(QueryableByName, Debug)]
struct JobRow {
    #[diesel(sql_type = BigInt)]
    run_at: i64,
    #[diesel(sql_type = Nullable<Text>)]
    idempotency_key: Option<String>,
    #[diesel(sql_type = Text)]
    payload: String,
}

/// (run_at, idempotency_key, payload) of every job of `job_type`, oldest first.
fn jobs(schema: &PgSchema, job_type: &str) -> Vec<(i64, Option<String>, serde_json::Value)> {
    let rows: Vec<JobRow> = sql_query(
        "SELECT run_at, idempotency_key, payload FROM jobs WHERE job_type = $1 ORDER BY id",
    )
    .bind::<Text, _>(job_type)
    .load(&mut schema.raw())
    .expect("jobs");
    rows.into_iter()
        .map(|r| {
            let payload = serde_json::from_str(&r.payload).unwrap_or(serde_json::Value::Null);
            (r.run_at, r.idempotency_key, payload)
        })
        .collect()
}

fn every(minutes: u64, job_type: &str) -> Periodic {
    Periodic::every(
        Duration::from_secs(60 * minutes),
        NewJob::new(job_type, json!({})),
    )
    .expect("an interval schedule")
}

/// What needs no job written: a schedule's first sighting (its baseline), also by two
/// schedulers at once, the next slot kept up to date for people, listed in byte order.
#[test]
fn pg_new_schedules_start_with_their_next_slot_and_list_in_byte_order() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let other = schema.queue(&clock);
    let periodics = || {
        vec![
            every(60, "sync").named("beta"),
            every(60, "sync").named("Zeta"),
            every(60, "sync").named("alpha"),
        ]
    };
    let a = Scheduler::new(&queue, periodics()).expect("a");
    let b = Scheduler::new(&other, periodics()).expect("b");
    let reports = all_at_once(2, move |i| if i == 0 { a.tick() } else { b.tick() });
    for report in reports {
        let report = report.expect("both first ticks succeed");
        assert!(
            report.enqueued.is_empty(),
            "a new schedule starts with its next slot"
        );
        assert_eq!(report.next_slot_at, Some(START_MIDNIGHT + 23 * HOUR));
    }
    let states = queue.periodic_schedules().expect("schedules");
    let names: Vec<&str> = states.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["Zeta", "alpha", "beta"]);
    for s in &states {
        assert_eq!(s.schedule, "every 3600000 ms");
        assert_eq!(s.last_slot_at, START_MS, "slots up to now count as handled");
        assert_eq!(s.last_job_id, None);
        assert_eq!(s.next_slot_at, Some(START_MIDNIGHT + 23 * HOUR));
        assert_eq!(s.updated_at, START_MS);
    }

    // The same name with another interval, from the other queue, before any slot is due:
    // the stored schedule and next slot follow, and a tick with nothing new writes nothing.
    clock.advance(Duration::from_secs(60));
    let half_hourly = Scheduler::new(&other, vec![every(30, "sync").named("alpha")]).expect("c");
    assert!(half_hourly.tick().expect("tick").enqueued.is_empty());
    clock.advance(Duration::from_secs(60));
    assert!(half_hourly.tick().expect("tick").enqueued.is_empty());
    let alpha = queue
        .periodic_schedules()
        .expect("schedules")
        .into_iter()
        .find(|s| s.name == "alpha")
        .expect("alpha");
    assert_eq!(alpha.schedule, "every 1800000 ms");
    assert_eq!(
        alpha.next_slot_at,
        Some(START_MIDNIGHT + 22 * HOUR + 30 * MINUTE)
    );
    assert_eq!(alpha.last_slot_at, START_MS);
    assert_eq!(
        alpha.updated_at,
        START_MS + MINUTE,
        "the second tick changed nothing"
    );
}

#[test]
fn pg_interval_slots_are_enqueued_once_each_on_the_hour() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let hourly = Periodic::every(
        Duration::from_secs(3600),
        NewJob::new("hourly_sync", json!({"source": "crm"})),
    )
    .expect("hourly")
    .slot_field("slot_ms");
    let scheduler = Scheduler::new(&queue, vec![hourly]).expect("scheduler");
    let first_slot = START_MIDNIGHT + 23 * HOUR;
    assert!(scheduler.tick().expect("tick").enqueued.is_empty());
    clock.set(first_slot - 1);
    assert!(
        scheduler.tick().expect("tick").enqueued.is_empty(),
        "not yet"
    );

    clock.set(first_slot + 10 * MINUTE);
    let report = scheduler.tick().expect("tick");
    assert_eq!(report.enqueued.len(), 1);
    let slot = &report.enqueued[0];
    assert_eq!(
        (slot.name.as_str(), slot.slot_ms, slot.skipped_earlier),
        ("hourly_sync", first_slot, false)
    );
    assert_eq!(report.next_slot_at, Some(first_slot + HOUR));
    assert!(
        scheduler.tick().expect("tick").enqueued.is_empty(),
        "a slot is enqueued once"
    );

    // Three hours of downtime: the latest slot runs once, the missed ones are skipped.
    clock.set(first_slot + 4 * HOUR + 5 * MINUTE);
    let report = scheduler.tick().expect("tick");
    assert_eq!(report.enqueued.len(), 1);
    assert_eq!(report.enqueued[0].slot_ms, first_slot + 4 * HOUR);
    assert!(report.enqueued[0].skipped_earlier);

    let got = jobs(&schema, "hourly_sync");
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[0].1.as_deref(),
        Some(format!("periodic:hourly_sync:{first_slot}").as_str())
    );
    assert_eq!(got[0].2, json!({"source": "crm", "slot_ms": first_slot}));
    assert_eq!(got[0].0, first_slot + 10 * MINUTE, "due when enqueued");

    let states = queue.periodic_schedules().expect("states");
    assert_eq!(states.len(), 1);
    assert_eq!(states[0].last_slot_at, first_slot + 4 * HOUR);
    assert_eq!(states[0].last_job_id, Some(report.enqueued[0].job_id));
    assert_eq!(states[0].next_slot_at, Some(first_slot + 5 * HOUR));
    assert_eq!(states[0].updated_at, first_slot + 4 * HOUR + 5 * MINUTE);
}

/// Two schedulers on two queues (two processes) tick at the same moment, hour after hour:
/// each slot is enqueued by exactly one of them.
#[test]
fn pg_two_schedulers_ticking_together_enqueue_each_slot_once() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let other: Queue = schema.queue(&clock);
    let periodics = || {
        vec![
            every(60, "hourly_sync"),
            Periodic::cron("0 2 * * *", NewJob::new("nightly_report", json!({}))).expect("nightly"),
        ]
    };
    let a = Scheduler::new(&queue, periodics()).expect("a");
    let b = Scheduler::new(&other, periodics()).expect("b");
    a.tick().expect("tick");
    b.tick().expect("tick");

    let rounds = 12;
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
    let ta = spawn(a);
    let tb = spawn(b);
    for round in 0..rounds {
        clock.advance(Duration::from_secs(3600));
        start.wait();
        end.wait();
        assert_eq!(
            jobs(&schema, "hourly_sync").len(),
            round + 1,
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
    let nights = jobs(&schema, "nightly_report").len();
    assert_eq!(nights, 1, "12 hours from 22:13 pass one 02:00");
    assert_eq!(
        total,
        rounds + nights,
        "each slot enqueued by one of them: {from_a:?} {from_b:?}"
    );
}
