//! Periodic jobs kept in the database (`Queue::add_schedule`, `litejobs schedule add`, or a
//! row another program inserts): run by every scheduler that runs stored schedules, once
//! per slot between them, changed and removed while workers run; refusals by name.

use std::time::Duration;

use litejobs::maintenance::{Periodic, Scheduler};
use litejobs::{Clock, ErrorKind, JobContext, JobError, JobStatus, NewJob, SystemClock, Worker};
use serde_json::json;

use crate::periodic::{hourly, jobs, tick, HOUR, MINUTE, START_MIDNIGHT};
use crate::support::scripted::{wait_bound, wait_event};
use crate::support::{have_tool, setup, sqlite_only, START_MS};

/// The first hourly slot after START_MS (2023-11-14T23:00:00Z).
const FIRST_HOUR: i64 = START_MIDNIGHT + 23 * HOUR;

fn stored_scheduler(env: &crate::support::TestEnv) -> Scheduler {
    Scheduler::new(&env.queue, Vec::new())
        .expect("scheduler")
        .with_stored_schedules()
}

fn report_every_hour() -> Periodic {
    Periodic::parse(
        "every 1h",
        NewJob::new("report", json!({"kind": "sales"}))
            .queue("reports")
            .priority(3)
            .max_attempts(2),
    )
    .expect("an hourly schedule")
    .named("sales_report")
}

#[test]
fn a_stored_schedule_runs_once_per_slot_in_the_schedulers_that_run_stored_schedules() {
    let env = setup();
    let other = env.open_another();
    let stored = env.queue.add_schedule(&report_every_hour()).expect("add");
    assert_eq!(stored.schedule, "every 1h");
    assert_eq!(stored.next_slot_at, Some(FIRST_HOUR));
    let job = stored.job.expect("a stored schedule keeps its job");
    assert_eq!(
        (
            job.job_type.as_str(),
            job.queue.as_str(),
            job.priority,
            job.max_attempts
        ),
        ("report", "reports", 3, 2)
    );
    let a = stored_scheduler(&env);
    let b = Scheduler::new(&other, Vec::new())
        .expect("scheduler")
        .with_stored_schedules();
    let code_only = Scheduler::new(&env.queue, vec![hourly()]).expect("scheduler");
    // A new schedule starts with its next slot: nothing from before it was added.
    assert!(tick(&a).enqueued.is_empty());
    assert_eq!(tick(&a).next_slot_at, Some(FIRST_HOUR));
    env.clock.set(FIRST_HOUR + 5);
    // A scheduler that does not run stored schedules leaves it alone.
    assert!(tick(&code_only)
        .enqueued
        .iter()
        .all(|slot| slot.name != "sales_report"));
    let from_a = tick(&a).enqueued;
    let from_b = tick(&b).enqueued;
    assert_eq!(from_a.len() + from_b.len(), 1, "{from_a:?} {from_b:?}");
    let got = jobs(&env, "report");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, format!("periodic:sales_report:{FIRST_HOUR}"));
    assert_eq!(got[0].2, json!({"kind": "sales"}));
    let record = env
        .queue
        .job(from_a[0].job_id)
        .expect("read")
        .expect("the slot's job");
    assert_eq!(
        (record.queue.as_str(), record.priority, record.max_attempts),
        ("reports", 3, 2)
    );
    let listed = env.queue.periodic_schedules().expect("schedules");
    let row = listed
        .iter()
        .find(|s| s.name == "sales_report")
        .expect("row");
    assert_eq!(row.last_job_id, Some(from_a[0].job_id));
    assert_eq!(row.next_slot_at, Some(FIRST_HOUR + HOUR));
    assert!(listed
        .iter()
        .any(|s| s.name == "hourly_sync" && s.job.is_none()));
}

#[test]
fn stored_schedules_are_replaced_and_removed_and_names_are_guarded() {
    let env = setup();
    let scheduler = stored_scheduler(&env);
    env.queue.add_schedule(&report_every_hour()).expect("add");
    let taken = env
        .queue
        .add_schedule(&report_every_hour())
        .expect_err("the name is taken");
    assert_eq!(taken.kind(), ErrorKind::InvalidState);
    assert!(taken.to_string().contains("exists already"), "{taken}");
    // Replaced by a nightly one: its slots start after now, under the new schedule.
    let nightly = Periodic::parse("0 2 * * *", NewJob::new("report", json!({"kind": "night"})))
        .expect("cron")
        .named("sales_report");
    let replaced = env.queue.replace_schedule(&nightly).expect("replace");
    assert_eq!(replaced.schedule, "0 2 * * *");
    env.clock.set(FIRST_HOUR + 5);
    assert!(
        tick(&scheduler).enqueued.is_empty(),
        "no hourly slot any more"
    );
    env.clock.set(START_MIDNIGHT + DAY_AND_TWO_HOURS);
    let night = tick(&scheduler).enqueued;
    assert_eq!(night.len(), 1);
    assert_eq!(jobs(&env, "report")[0].2, json!({"kind": "night"}));
    // Removed: no slot after that.
    assert!(env.queue.remove_schedule("sales_report").expect("remove"));
    assert!(!env.queue.remove_schedule("sales_report").expect("again"));
    env.clock
        .set(START_MIDNIGHT + DAY_AND_TWO_HOURS + 24 * HOUR);
    assert!(tick(&scheduler).enqueued.is_empty());
    assert_eq!(jobs(&env, "report").len(), 1);
    // A schedule a worker's code defines is neither taken over nor removed.
    tick(&Scheduler::new(&env.queue, vec![hourly()]).expect("scheduler"));
    let code_name = Periodic::parse("every 1h", NewJob::new("other", json!({})))
        .expect("every")
        .named("hourly_sync");
    for e in [
        env.queue.add_schedule(&code_name).expect_err("add"),
        env.queue.replace_schedule(&code_name).expect_err("replace"),
        env.queue
            .remove_schedule("hourly_sync")
            .expect_err("remove"),
    ] {
        assert_eq!(e.kind(), ErrorKind::InvalidState);
        assert!(e.to_string().contains("worker's code"), "{e}");
    }
    // What a stored schedule does not keep is refused, naming it; so is a bad schedule.
    let timed = Periodic::parse(
        "every 1h",
        NewJob::new("report", json!({})).timeout(Duration::from_secs(5)),
    )
    .expect("every");
    let e = env
        .queue
        .add_schedule(&timed)
        .expect_err("a timeout is not kept");
    assert_eq!(e.kind(), ErrorKind::InvalidJob);
    assert!(e.to_string().contains("not a timeout"), "{e}");
    let e = env
        .queue
        .add_schedule(&hourly().named("with_slot").slot_field("slot_ms"))
        .expect_err("a slot field is not kept");
    assert!(e.to_string().contains("not a slot field"), "{e}");
    for bad in ["every 0s", "every soon", "61 * * * *"] {
        let e = Periodic::parse(bad, NewJob::new("report", json!({}))).expect_err(bad);
        assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{bad}: {e}");
    }
}

/// 2023-11-15T02:00:00Z, the first nightly slot after START_MS, from START_MIDNIGHT.
const DAY_AND_TWO_HOURS: i64 = 26 * HOUR;

#[test]
fn a_schedule_inserted_by_plain_sql_runs_and_a_row_that_cannot_run_is_left_out() {
    let env = setup();
    env.sql_exec(&format!(
        "INSERT INTO periodic_schedules (name, schedule, last_slot_at, job_type, payload, queue)
         VALUES ('from_sql', 'every 15m', {START_MS}, 'sql_job', '{{\"n\": 1}}', 'ops'),
                ('broken', 'at teatime', {START_MS}, 'sql_job', '{{}}', 'ops'),
                ('bad_payload', 'every 15m', {START_MS}, 'sql_job', '{{oops', 'ops')"
    ));
    let scheduler = stored_scheduler(&env);
    // 2023-11-14T22:15:00Z: the first quarter hour after START_MS.
    let slot = START_MS - 13 * MINUTE - 20_000 + 15 * MINUTE;
    env.clock.set(slot + 1);
    let enqueued = tick(&scheduler).enqueued;
    assert_eq!(
        enqueued.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["from_sql"]
    );
    assert_eq!(enqueued[0].slot_ms, slot);
    let got = jobs(&env, "sql_job");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].2, json!({"n": 1}));
    // In a SQLite file another program may store a number as text: that row is left out,
    // and every read of the schedules still works.
    if !crate::support::on_postgres() {
        env.sql_exec(&format!(
            "INSERT INTO periodic_schedules (name, schedule, last_slot_at, job_type, priority)
             VALUES ('typed_wrong', 'every 15m', {START_MS}, 'sql_job', 'high')"
        ));
        env.clock.set(slot + 15 * MINUTE + 1);
        let enqueued = tick(&scheduler).enqueued;
        assert_eq!(
            enqueued.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["from_sql"]
        );
        let listed = env
            .queue
            .periodic_schedules()
            .expect("the list still reads");
        assert!(listed.iter().any(|s| s.name == "typed_wrong"));
    }
    let job = env
        .queue
        .job(enqueued[0].job_id)
        .expect("read")
        .expect("job");
    assert_eq!((job.queue.as_str(), job.max_attempts), ("ops", 6));
}

#[test]
fn a_worker_running_stored_schedules_picks_up_one_added_after_it_started() {
    let env = setup();
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("report", |_: &JobContext| -> Result<(), JobError> {
            Ok(())
        })
        .stored_schedules()
        .poll_interval(Duration::from_millis(20))
        .start()
        .expect("start");
    let hourly_report = Periodic::parse("every 1h", NewJob::new("report", json!({})))
        .expect("every")
        .named("sales_report");
    env.queue.add_schedule(&hourly_report).expect("add");
    // Past the slot and past the scheduler's next look at the stored schedules, then
    // woken: the read finds the slot due and the tick enqueues it.
    env.clock.set(FIRST_HOUR + 10_000);
    env.queue.notify();
    let id = wait_event(&events, "the stored schedule's job to run", |e| match e {
        litejobs::Event::Finished {
            id,
            job_type,
            status: JobStatus::Succeeded,
            ..
        } if job_type == "report" => Some(*id),
        _ => None,
    });
    worker.shutdown(wait_bound()).expect("shutdown");
    let job = env.queue.job(id).expect("read").expect("job");
    assert_eq!(
        job.idempotency_key.as_deref(),
        Some(format!("periodic:sales_report:{FIRST_HOUR}").as_str())
    );
}

/// The guide's plain-SQL insert of a schedule (docs/periodic.md, "Other programs can keep a
/// schedule").
pub(crate) fn guide_insert() -> String {
    const GUIDE: &str = include_str!("../docs/periodic.md");
    let at = GUIDE
        .find("Other programs can keep a schedule")
        .expect("the guide's paragraph");
    let start = at + GUIDE[at..].find("```sql\n").expect("its SQL block") + "```sql\n".len();
    let end = start + GUIDE[start..].find("```").expect("the block ends");
    GUIDE[start..end].trim().to_string()
}

/// The guide's insert, run by Python's sqlite3 in a fresh session as an app in another
/// language would: the schedule's first slot is the next quarter hour after the insert, and
/// a scheduler that runs stored schedules enqueues it.
#[test]
fn the_guide_s_insert_from_python_keeps_a_schedule_that_workers_run() {
    if sqlite_only() || !have_tool("python3") {
        return;
    }
    let env = setup();
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg("import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\nwith c:\n    c.execute(sys.argv[2])\n")
        .arg(&env.path)
        .arg(guide_insert())
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The row's last slot is the insert's time by the file's clock: the slot after it.
    env.clock.set(SystemClock.now_ms() + 16 * MINUTE);
    let enqueued = tick(&stored_scheduler(&env)).enqueued;
    assert_eq!(enqueued.len(), 1, "{enqueued:?}");
    assert_eq!(enqueued[0].name, "crm_sync");
    assert_eq!(jobs(&env, "crm_sync")[0].2, json!({"full": false}));
}

/// A stored schedule this worker cannot enqueue (its job type is marked encrypted and the
/// worker holds no key) is skipped, left due for a worker that can, and holds up none of the
/// other schedules, stored or in the worker's code.
#[cfg(feature = "encryption")]
#[test]
fn a_stored_schedule_a_worker_cannot_enqueue_holds_up_no_other_schedule() {
    let env = setup();
    env.sql_exec("INSERT INTO encrypted_types (job_type) VALUES ('secret_report')");
    // Opened after the mark, so it knows the type is encrypted; it holds no key.
    let keyless = env.open_another();
    let secret = Periodic::parse("every 1h", NewJob::new("secret_report", json!({})))
        .expect("every")
        .named("secret");
    keyless.add_schedule(&secret).expect("add");
    keyless.add_schedule(&report_every_hour()).expect("add");
    let scheduler = Scheduler::new(&keyless, vec![hourly()])
        .expect("scheduler")
        .with_stored_schedules();
    tick(&scheduler);
    env.clock.set(FIRST_HOUR + 5);
    let mut names: Vec<String> = tick(&scheduler)
        .enqueued
        .into_iter()
        .map(|s| s.name)
        .collect();
    names.sort();
    assert_eq!(names, ["hourly_sync", "sales_report"]);
    let secret_row = keyless
        .periodic_schedules()
        .expect("schedules")
        .into_iter()
        .find(|s| s.name == "secret")
        .expect("kept");
    assert!(
        secret_row.last_slot_at < FIRST_HOUR,
        "still due: {secret_row:?}"
    );
}
