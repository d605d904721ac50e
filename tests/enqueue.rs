//! Enqueue: options, validation, batches, the caller's transaction,
//! idempotency keys (also under a race), busy databases, events, in-memory queues.

use std::sync::Barrier;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use litejobs::defaults::{DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_PAYLOAD_BYTES};
use litejobs::{ErrorKind, Event, JobFilter, JobStatus, NewJob, Queue};
use serde_json::{json, Value};

use crate::support::{on_postgres, setup, sqlite_only, TestEnv, START_MS};

fn job(job_type: &str) -> NewJob {
    NewJob::new(job_type, json!({"n": 1}))
}

fn get(env: &TestEnv, id: i64) -> litejobs::JobRecord {
    env.queue
        .job(id)
        .unwrap_or_else(|e| panic!("reading job {id}: {e}"))
        .unwrap_or_else(|| panic!("job {id} does not exist"))
}

/// A JSON payload whose text is exactly `bytes` long: `{"s":"xxx…"}`.
fn payload_of_len(bytes: usize) -> Value {
    let v = json!({ "s": "x".repeat(bytes - 8) });
    let len = serde_json::to_string(&v).expect("serializing").len();
    assert_eq!(len, bytes, "payload_of_len is off");
    v
}

/// Jobs holding `key` (the tests' keys are plain words, safe to quote in SQL).
fn key_rows(env: &TestEnv, key: &str) -> i64 {
    assert!(!key.contains('\''), "key_rows quotes the key: {key:?}");
    env.sql_i64(&format!(
        "SELECT COUNT(*) FROM jobs WHERE idempotency_key = '{key}'"
    ))
}

fn set_status(env: &TestEnv, id: i64, status: &str) {
    assert_eq!(
        env.sql_i64(&format!("SELECT COUNT(*) FROM jobs WHERE id = {id}")),
        1,
        "job {id} exists"
    );
    env.sql_exec(&format!(
        "UPDATE jobs SET status = '{status}' WHERE id = {id}"
    ));
    assert_eq!(
        env.sql_i64(&format!(
            "SELECT COUNT(*) FROM jobs WHERE id = {id} AND status = '{status}'"
        )),
        1,
        "job {id} is {status} now"
    );
}

#[test]
fn enqueue_returns_increasing_ids_and_stores_every_option() {
    let env = setup();
    let first = env
        .queue
        .enqueue(NewJob::new("send_email", json!({"user_id": 42})))
        .expect("enqueue with defaults");
    let second = env
        .queue
        .enqueue(
            NewJob::new("deliver_webhook", json!({"event_id": 7}))
                .queue("webhooks")
                .priority(10)
                .max_attempts(8)
                .delay(Duration::from_secs(60))
                .timeout(Duration::from_secs(10))
                .idempotency_key("webhook:order:123:event:paid")
                .group_key("endpoint:crm"),
        )
        .expect("enqueue with every option");
    let third = env.queue.enqueue(job("t")).expect("third enqueue");
    assert!(first < second && second < third, "{first} {second} {third}");

    let plain = get(&env, first);
    assert_eq!(plain.queue, "default");
    assert_eq!(plain.job_type, "send_email");
    assert_eq!(plain.payload, json!({"user_id": 42}));
    assert_eq!(plain.status, JobStatus::Queued);
    assert_eq!(plain.priority, 0);
    assert_eq!(plain.attempts, 0);
    assert_eq!(plain.max_attempts, i64::from(DEFAULT_MAX_ATTEMPTS));
    assert_eq!(plain.run_at, START_MS, "due now by the queue's clock");
    assert_eq!(plain.created_at, START_MS);
    assert_eq!(plain.updated_at, START_MS);
    assert_eq!(plain.timeout_ms, None);
    assert_eq!(plain.idempotency_key, None);
    assert_eq!(plain.group_key, None);

    let full = get(&env, second);
    assert_eq!(full.queue, "webhooks");
    assert_eq!(full.job_type, "deliver_webhook");
    assert_eq!(full.payload, json!({"event_id": 7}));
    assert_eq!(full.status, JobStatus::Queued);
    assert_eq!(full.priority, 10);
    assert_eq!(full.max_attempts, 8);
    assert_eq!(full.run_at, START_MS + 60_000);
    assert_eq!(full.created_at, START_MS);
    assert_eq!(full.timeout_ms, Some(10_000));
    assert_eq!(
        full.idempotency_key.as_deref(),
        Some("webhook:order:123:event:paid")
    );
    assert_eq!(full.group_key.as_deref(), Some("endpoint:crm"));

    // The clock moves, enqueue follows it.
    env.clock.advance(Duration::from_secs(5));
    let later = env
        .queue
        .enqueue(job("t").delay(Duration::from_millis(1_500)))
        .expect("enqueue after the clock moved");
    let later = get(&env, later);
    assert_eq!(later.created_at, START_MS + 5_000);
    assert_eq!(later.run_at, START_MS + 6_500);
}

#[test]
fn run_at_is_stored_in_milliseconds() {
    let env = setup();
    let when = UNIX_EPOCH + Duration::from_millis(1_800_000_000_123);
    let id = env
        .queue
        .enqueue(job("report").run_at(when))
        .expect("enqueue with run_at");
    assert_eq!(get(&env, id).run_at, 1_800_000_000_123);

    // run_at and delay replace each other; the last one wins.
    let id = env
        .queue
        .enqueue(job("report").delay(Duration::from_secs(1)).run_at(when))
        .expect("enqueue");
    assert_eq!(get(&env, id).run_at, 1_800_000_000_123);
    let id = env
        .queue
        .enqueue(job("report").run_at(when).delay(Duration::from_secs(1)))
        .expect("enqueue");
    assert_eq!(get(&env, id).run_at, START_MS + 1_000);

    // A time in the past is kept as given (due at once).
    let past = UNIX_EPOCH + Duration::from_millis(START_MS as u64 - 86_400_000);
    let id = env
        .queue
        .enqueue(job("report").run_at(past))
        .expect("enqueue in the past");
    assert_eq!(get(&env, id).run_at, START_MS - 86_400_000);

    // A time so far back that the schema would take it for seconds (before now / 100, see
    // the jobs_run_at_ms rule) is stored as that floor: still due at once, still first.
    let ancient = SystemTime::UNIX_EPOCH + Duration::from_millis(1_000);
    let id = env
        .queue
        .enqueue(job("report").run_at(ancient))
        .expect("enqueue in 1970");
    assert_eq!(get(&env, id).run_at, START_MS / 100);
    assert!(get(&env, id).run_at < START_MS - 86_400_000);

    // A time past the year 5000 is micro- or nanoseconds by mistake: refused, naming it.
    let far = UNIX_EPOCH + Duration::from_millis(100_000_000_000_000);
    let err = env
        .queue
        .enqueue(job("report").run_at(far))
        .expect_err("run_at past the year 5000 must be refused");
    assert_eq!(err.kind(), litejobs::ErrorKind::InvalidJob);
    assert!(err.to_string().contains("after the year 5000"), "{err}");
    let err = env
        .queue
        .enqueue(job("report").delay(Duration::MAX))
        .expect_err("an endless delay must be refused");
    assert_eq!(err.kind(), litejobs::ErrorKind::InvalidJob);
}

/// Enqueues `job`, expects InvalidJob naming every `needle`, and checks nothing was stored.
fn assert_refused(env: &TestEnv, queue: &Queue, job: NewJob, needles: &[&str]) {
    let err = queue.enqueue(job).expect_err("the job must be refused");
    assert_eq!(err.kind(), ErrorKind::InvalidJob, "{err}");
    let msg = err.to_string();
    for needle in needles {
        assert!(
            msg.contains(needle),
            "message {msg:?} should mention {needle:?}"
        );
    }
    assert_eq!(env.count_jobs(), 0, "a refused job was inserted: {msg}");
}

#[test]
fn invalid_jobs_are_refused_with_the_field_named_and_nothing_inserted() {
    let env = setup();
    let q = &env.queue;
    assert_refused(&env, q, NewJob::new("", json!({})), &["job_type"]);
    assert_refused(&env, q, NewJob::new("   ", json!({})), &["job_type"]);
    assert_refused(
        &env,
        q,
        NewJob::from_json_text("send_email", "{\"user_id\": 42"),
        &["payload", "JSON"],
    );
    assert_refused(
        &env,
        q,
        NewJob::from_json_text("send_email", ""),
        &["payload", "JSON"],
    );
    assert_refused(&env, q, job("t").max_attempts(0), &["max_attempts", "0"]);
    assert_refused(&env, q, job("t").queue(""), &["queue"]);
    assert_refused(&env, q, job("t").idempotency_key(""), &["idempotency_key"]);

    let big = DEFAULT_MAX_PAYLOAD_BYTES + 1;
    assert_refused(
        &env,
        q,
        NewJob::new("t", payload_of_len(big)),
        &[
            "payload",
            &big.to_string(),
            &DEFAULT_MAX_PAYLOAD_BYTES.to_string(),
        ],
    );
    // Also as text: the limit is on the bytes of JSON text.
    let text = serde_json::to_string(&payload_of_len(big)).expect("serializing");
    assert_refused(
        &env,
        q,
        NewJob::from_json_text("t", text),
        &[
            "payload",
            &big.to_string(),
            &DEFAULT_MAX_PAYLOAD_BYTES.to_string(),
        ],
    );

    // Exactly at the limit is fine; valid JSON text is stored as given.
    let id = q
        .enqueue(NewJob::new("t", payload_of_len(DEFAULT_MAX_PAYLOAD_BYTES)))
        .expect("a payload of exactly the limit is accepted");
    assert_eq!(
        get(&env, id).payload,
        payload_of_len(DEFAULT_MAX_PAYLOAD_BYTES)
    );
    let id = q
        .enqueue(NewJob::from_json_text("t", r#"{"a": [1, 2]}"#))
        .expect("valid JSON text");
    assert_eq!(get(&env, id).payload, json!({"a": [1, 2]}));
}

#[test]
fn a_custom_payload_limit_is_honoured() {
    let env = setup();
    let small = Queue::builder()
        .clock(env.clock.clone())
        .max_payload_bytes(100)
        .open(&env.path)
        .expect("open with max_payload_bytes(100)");
    assert_refused(
        &env,
        &small,
        NewJob::new("t", payload_of_len(101)),
        &["payload", "101", "100"],
    );
    // `enqueue_in` takes the caller's rusqlite transaction: SQLite only.
    if !on_postgres() {
        let mut conn = env.raw();
        let tx = conn.transaction().expect("begin");
        let err = small
            .enqueue_in(&tx, NewJob::new("t", payload_of_len(101)))
            .expect_err("enqueue_in honours the queue's limit");
        assert_eq!(err.kind(), ErrorKind::InvalidJob);
        tx.commit().expect("commit");
    }
    let err = small
        .enqueue_batch(vec![job("a"), NewJob::new("t", payload_of_len(101))])
        .expect_err("a batch honours the queue's limit");
    assert_eq!(err.kind(), ErrorKind::InvalidJob);
    assert_eq!(env.count_jobs(), 0);

    small
        .enqueue(NewJob::new("t", payload_of_len(100)))
        .expect("100 bytes are within a limit of 100");
    // The default queue on the same file keeps its own (default) limit.
    env.queue
        .enqueue(NewJob::new("t", payload_of_len(101)))
        .expect("the default limit applies to the other queue");
    assert_eq!(env.count_jobs(), 2);
}

#[test]
fn enqueue_batch_inserts_all_in_order() {
    let env = setup();
    let jobs: Vec<NewJob> = (0..5)
        .map(|i| NewJob::new(format!("type_{i}"), json!({ "i": i })))
        .collect();
    let ids = env.queue.enqueue_batch(jobs).expect("batch enqueue");
    assert_eq!(ids.len(), 5);
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids not increasing: {ids:?}"
    );
    for (i, id) in ids.iter().enumerate() {
        let j = get(&env, *id);
        assert_eq!(j.job_type, format!("type_{i}"));
        assert_eq!(j.payload, json!({ "i": i }));
    }
    assert_eq!(env.count_jobs(), 5);
    assert_eq!(
        env.queue.enqueue_batch(Vec::new()).expect("empty batch"),
        Vec::<i64>::new()
    );
}

#[test]
fn a_long_batch_with_keys_among_it_gives_each_job_its_own_id_in_order() {
    // Jobs without keys go in by multi-row statements (runs cut at 32, then powers of two);
    // a keyed job goes alone and may find a holder. Every id must still be its own job's.
    let env = setup();
    let held = env
        .queue
        .enqueue(job("held").idempotency_key("k-held"))
        .expect("the key holder");
    let jobs: Vec<NewJob> = (0..77)
        .map(|i| {
            let job = NewJob::new(format!("type_{}", i % 3), json!({ "i": i }))
                .priority(i % 5)
                .group_key(format!("g{}", i % 4));
            match i {
                5 => job.idempotency_key("k-held"),
                40 | 41 => job.idempotency_key(format!("k-{i}")),
                _ => job,
            }
        })
        .collect();
    let ids = env.queue.enqueue_batch(jobs).expect("batch enqueue");
    assert_eq!(ids.len(), 77);
    assert_eq!(ids[5], held, "a held key answers with its holder");
    for (i, &id) in ids.iter().enumerate().filter(|&(i, _)| i != 5) {
        let j = get(&env, id);
        assert_eq!(
            j.payload,
            json!({ "i": i }),
            "job {i} of the batch has id {id}"
        );
        assert_eq!(j.job_type, format!("type_{}", i % 3));
        assert_eq!(j.priority, (i % 5) as i64);
        assert_eq!(j.group_key, Some(format!("g{}", i % 4)));
        assert_eq!(j.idempotency_key.is_some(), i == 40 || i == 41);
    }
    let mut fresh: Vec<i64> = ids.iter().copied().filter(|&id| id != held).collect();
    let in_order = fresh.clone();
    fresh.sort_unstable();
    fresh.dedup();
    assert_eq!(
        fresh, in_order,
        "new ids are distinct and increasing: {ids:?}"
    );
    assert_eq!(env.count_jobs(), 77);
}

/// A batch of one queue and one job type goes in by statements that bind the two once;
/// every other field is still each job's own, on the small-batch and the big-batch path.
#[test]
fn a_batch_of_one_kind_stores_every_job_s_own_fields() {
    let env = setup();
    for size in [7_usize, 150] {
        let jobs: Vec<NewJob> = (0..size)
            .map(|i| {
                let mut job = NewJob::new("send", json!({ "i": i }))
                    .queue("mail")
                    .priority(i as i64 % 5)
                    .max_attempts(1 + (i as u32 % 3));
                if i % 2 == 0 {
                    job = job.timeout(Duration::from_millis(1_000 + i as u64));
                }
                if i % 3 == 0 {
                    job = job.group_key(format!("g{i}"));
                }
                if i % 4 == 0 {
                    job = job.delay(Duration::from_secs(60 + i as u64));
                }
                job
            })
            .collect();
        let ids = env.queue.enqueue_batch(jobs).expect("batch enqueue");
        assert_eq!(ids.len(), size);
        for (i, &id) in ids.iter().enumerate() {
            let j = get(&env, id);
            let what = format!("job {i} of {size}");
            assert_eq!(
                (j.queue.as_str(), j.job_type.as_str()),
                ("mail", "send"),
                "{what}"
            );
            assert_eq!(j.payload, json!({ "i": i }), "{what}");
            assert_eq!(j.priority, i as i64 % 5, "{what}");
            assert_eq!(j.max_attempts, 1 + (i as i64 % 3), "{what}");
            assert_eq!(
                j.timeout_ms,
                (i % 2 == 0).then(|| 1_000 + i as i64),
                "{what}"
            );
            assert_eq!(j.group_key, (i % 3 == 0).then(|| format!("g{i}")), "{what}");
            let delay = if i % 4 == 0 {
                (60 + i as i64) * 1_000
            } else {
                0
            };
            assert_eq!(j.run_at - j.created_at, delay, "{what}");
        }
    }
    assert_eq!(env.count_jobs(), 157);
}

#[test]
fn a_batch_with_one_invalid_job_inserts_nothing_and_names_its_index() {
    let env = setup();
    let jobs = vec![job("a"), job("b"), NewJob::new("", json!({})), job("d")];
    let err = env
        .queue
        .enqueue_batch(jobs)
        .expect_err("a batch with an invalid job is refused");
    assert_eq!(err.kind(), ErrorKind::InvalidJob);
    let msg = err.to_string();
    assert!(msg.contains("job 2 of the batch"), "{msg}");
    assert!(msg.contains("job_type"), "{msg}");
    assert_eq!(env.count_jobs(), 0);
}

#[test]
fn a_batch_that_fails_in_the_database_inserts_nothing() {
    let env = setup();
    // Another program's unique index refuses a second 'boom' job: the batch's third job
    // fails in the database (the first two are in the same insert statement, or would be
    // rolled back with the transaction).
    env.sql_exec(
        "INSERT INTO jobs (job_type, payload) VALUES ('boom', '{}');
         CREATE UNIQUE INDEX one_boom ON jobs (job_type) WHERE job_type = 'boom';",
    );
    let err = env
        .queue
        .enqueue_batch(vec![job("a"), job("b"), job("boom"), job("d")])
        .expect_err("the index refuses the batch");
    let msg = err.to_string();
    // Each database words it its own way: SQLite "UNIQUE constraint failed: jobs.job_type",
    // PostgreSQL "duplicate key value violates unique constraint \"one_boom\"".
    let unique = if on_postgres() {
        "unique constraint"
    } else {
        "UNIQUE"
    };
    assert!(msg.contains("boom") && msg.contains(unique), "{msg}");
    assert_eq!(env.count_jobs(), 1, "a failed batch left rows behind");
    // The queue still works afterwards (the transaction was rolled back, the gate released).
    env.queue
        .enqueue(job("a"))
        .expect("enqueue after a failed batch");
    assert_eq!(env.count_jobs(), 2);
}

fn users_table(env: &TestEnv) {
    env.raw()
        .execute_batch("CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT NOT NULL)")
        .expect("creating the application's users table");
}

fn count_users(env: &TestEnv) -> i64 {
    crate::support::count_rows(&env.path, "users")
}

#[test]
fn enqueue_in_a_rolled_back_transaction_leaves_nothing() {
    // `enqueue_in` takes the caller's rusqlite transaction: SQLite only.
    if sqlite_only() {
        return;
    }
    let env = setup();
    users_table(&env);
    let mut conn = env.raw();

    let tx = conn.transaction().expect("begin");
    tx.execute("INSERT INTO users (email) VALUES ('ada@example.com')", [])
        .expect("insert user");
    let uid = tx.last_insert_rowid();
    litejobs::enqueue_in(&tx, NewJob::new("send_email", json!({ "user_id": uid })))
        .expect("free enqueue_in");
    env.queue
        .enqueue_in(&tx, NewJob::new("send_email", json!({ "user_id": uid })))
        .expect("Queue::enqueue_in");
    tx.rollback().expect("rollback");

    assert_eq!(env.count_jobs(), 0);
    assert_eq!(count_users(&env), 0);

    // Dropping the transaction without commit rolls back too.
    {
        let tx = conn.transaction().expect("begin");
        tx.execute("INSERT INTO users (email) VALUES ('bob@example.com')", [])
            .expect("insert user");
        litejobs::enqueue_in(&tx, job("send_email")).expect("enqueue_in");
    }
    assert_eq!(env.count_jobs(), 0);
    assert_eq!(count_users(&env), 0);
}

#[test]
fn enqueue_in_a_committed_transaction_commits_both() {
    // `enqueue_in` takes the caller's rusqlite transaction: SQLite only.
    if sqlite_only() {
        return;
    }
    for use_queue in [false, true] {
        let env = setup();
        users_table(&env);
        let mut conn = env.raw();
        let tx = conn.transaction().expect("begin");
        tx.execute("INSERT INTO users (email) VALUES ('ada@example.com')", [])
            .expect("insert user");
        let uid = tx.last_insert_rowid();
        let new = NewJob::new("send_email", json!({ "user_id": uid }));
        let id = if use_queue {
            env.queue.enqueue_in(&tx, new).expect("Queue::enqueue_in")
        } else {
            litejobs::enqueue_in(&tx, new).expect("free enqueue_in")
        };
        // Not visible to the queue before the commit.
        assert_eq!(env.queue.job(id).expect("read"), None);
        tx.commit().expect("commit");
        env.queue.notify();

        assert_eq!(env.count_jobs(), 1);
        assert_eq!(count_users(&env), 1);
        let j = get(&env, id);
        assert_eq!(j.payload, json!({ "user_id": uid }));
        assert_eq!(j.status, JobStatus::Queued);
        if use_queue {
            assert_eq!(
                j.created_at, START_MS,
                "Queue::enqueue_in uses the queue's clock"
            );
        }
    }
}

#[test]
fn an_invalid_job_in_enqueue_in_leaves_the_callers_transaction_usable() {
    // `enqueue_in` takes the caller's rusqlite transaction: SQLite only.
    if sqlite_only() {
        return;
    }
    let env = setup();
    users_table(&env);
    let mut conn = env.raw();
    let tx = conn.transaction().expect("begin");
    tx.execute("INSERT INTO users (email) VALUES ('ada@example.com')", [])
        .expect("insert user");
    let err = litejobs::enqueue_in(&tx, NewJob::from_json_text("send_email", "nope"))
        .expect_err("invalid JSON is refused");
    assert_eq!(err.kind(), ErrorKind::InvalidJob);
    tx.commit().expect("the caller may still commit");
    assert_eq!(count_users(&env), 1);
    assert_eq!(env.count_jobs(), 0);
}

#[test]
fn the_same_idempotency_key_twice_returns_the_same_job() {
    let env = setup();
    let rx = env.queue.subscribe();
    let first = env
        .queue
        .enqueue(NewJob::new("deliver_webhook", json!({"v": 1})).idempotency_key("k1"))
        .expect("first enqueue");
    let second = env
        .queue
        .enqueue(NewJob::new("deliver_webhook", json!({"v": 2})).idempotency_key("k1"))
        .expect("second enqueue");
    assert_eq!(first, second);
    assert_eq!(key_rows(&env, "k1"), 1);
    assert_eq!(
        get(&env, first).payload,
        json!({"v": 1}),
        "the first job is kept"
    );
    // Only the real insert is announced.
    assert!(matches!(rx.try_recv(), Ok(Event::Enqueued { id, .. }) if id == first));
    assert!(
        rx.try_recv().is_err(),
        "a deduplicated enqueue sent an event"
    );

    // Within one batch, and across a batch and a single enqueue.
    let ids = env
        .queue
        .enqueue_batch(vec![
            job("t").idempotency_key("k2"),
            job("t").idempotency_key("k1"),
            job("t").idempotency_key("k2"),
        ])
        .expect("batch with keys");
    assert_eq!(ids[0], ids[2]);
    assert_eq!(ids[1], first);
    assert_eq!(env.count_jobs(), 2);

    // Also inside the caller's transaction (a rusqlite one: SQLite only).
    if !on_postgres() {
        let mut conn = env.raw();
        let tx = conn.transaction().expect("begin");
        let again = litejobs::enqueue_in(&tx, job("t").idempotency_key("k1")).expect("enqueue_in");
        tx.commit().expect("commit");
        assert_eq!(again, first);
        assert_eq!(env.count_jobs(), 2);
    }
}

#[test]
fn keys_of_live_and_succeeded_jobs_dedupe_dead_and_cancelled_do_not() {
    let env = setup();
    for status in ["running", "failed", "succeeded"] {
        let key = format!("held-{status}");
        let id = env
            .queue
            .enqueue(job("t").idempotency_key(key.as_str()))
            .expect("enqueue");
        set_status(&env, id, status);
        let again = env
            .queue
            .enqueue(job("t").idempotency_key(key.as_str()))
            .expect("enqueue again");
        assert_eq!(again, id, "a {status} job's key must still dedupe");
        assert_eq!(key_rows(&env, &key), 1);
    }
    for status in ["dead", "cancelled"] {
        let key = format!("released-{status}");
        let old = env
            .queue
            .enqueue(job("t").idempotency_key(key.as_str()))
            .expect("enqueue");
        set_status(&env, old, status);
        let new = env
            .queue
            .enqueue(job("t").idempotency_key(key.as_str()))
            .expect("enqueue again");
        assert_ne!(new, old, "a {status} job's key is released");
        assert!(new > old);
        assert_eq!(get(&env, new).status, JobStatus::Queued);
        assert_eq!(get(&env, old).status.as_str(), status, "the old job stays");
        assert_eq!(key_rows(&env, &key), 2);
        // The new job holds the key now.
        let third = env
            .queue
            .enqueue(job("t").idempotency_key(key.as_str()))
            .expect("enqueue a third time");
        assert_eq!(third, new);
    }
}

#[test]
fn remembered_keys_dedupe_until_they_expire() {
    let env = setup();
    let now = env.clock.now();
    env.sql_exec(&format!(
        "INSERT INTO idempotency_keys (key, job_id, completed_at, expires_at)
         VALUES ('pruned', 999, {completed}, {live}), ('expired', 998, {completed}, {gone})",
        completed = now - 60_000,
        live = now + 1_000,
        gone = now - 1,
    ));

    let id = env
        .queue
        .enqueue(job("t").idempotency_key("pruned"))
        .expect("enqueue with a remembered key");
    assert_eq!(id, 999, "a remembered key returns the pruned job's id");
    assert_eq!(env.count_jobs(), 0);

    let id = env
        .queue
        .enqueue(job("t").idempotency_key("expired"))
        .expect("enqueue with an expired key");
    assert_ne!(id, 998);
    assert_eq!(get(&env, id).idempotency_key.as_deref(), Some("expired"));
    assert_eq!(env.count_jobs(), 1);

    // The queue's clock decides: at expires_at the key is forgotten.
    env.clock.advance(Duration::from_millis(1_000));
    let id = env
        .queue
        .enqueue(job("t").idempotency_key("pruned"))
        .expect("enqueue once the key expired");
    assert_ne!(id, 999);
    assert_eq!(env.count_jobs(), 2);
}

#[test]
fn racing_enqueues_of_one_key_create_one_job() {
    let env = setup();
    let others: Vec<Queue> = (0..2).map(|_| env.open_another()).collect();
    for round in 0..5 {
        let key = format!("race-{round}");
        let queues: Vec<Queue> = (0..8)
            .map(|_| env.queue.clone())
            .chain(others.iter().cloned())
            .collect();
        let barrier = Barrier::new(queues.len());
        let results: Vec<litejobs::Result<i64>> = std::thread::scope(|s| {
            let handles: Vec<_> = queues
                .iter()
                .enumerate()
                .map(|(i, q)| {
                    let (barrier, key) = (&barrier, &key);
                    s.spawn(move || {
                        barrier.wait();
                        q.enqueue(
                            NewJob::new("deliver_webhook", json!({ "thread": i }))
                                .idempotency_key(key.as_str()),
                        )
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("enqueue thread panicked"))
                .collect()
        });
        let ids: Vec<i64> = results
            .into_iter()
            .enumerate()
            .map(|(i, r)| r.unwrap_or_else(|e| panic!("round {round}, thread {i}: {e:?}")))
            .collect();
        assert!(
            ids.iter().all(|id| *id == ids[0]),
            "round {round}: different ids for one key: {ids:?}"
        );
        assert_eq!(key_rows(&env, &key), 1, "round {round}");
    }
    assert_eq!(env.count_jobs(), 5);
}

#[test]
fn a_locked_database_gives_busy_and_writes_nothing() {
    // SQLite's write lock, held by a raw connection's BEGIN IMMEDIATE.
    if sqlite_only() {
        return;
    }
    let env = setup();
    let queue = Queue::builder()
        .clock(env.clock.clone())
        .busy_timeout(Duration::from_millis(200))
        .open(&env.path)
        .expect("open with a short busy timeout");
    let raw = env.raw();
    raw.execute_batch("BEGIN IMMEDIATE")
        .expect("the raw connection takes the write lock");

    let err = queue
        .enqueue(job("send_email"))
        .expect_err("enqueue must give up after the busy timeout");
    assert_eq!(err.kind(), ErrorKind::Busy, "{err:?}");
    assert!(err.is_busy());
    let err = queue
        .enqueue_batch(vec![job("a"), job("b")])
        .expect_err("a batch must give up too");
    assert!(err.is_busy(), "{err:?}");

    raw.execute_batch("ROLLBACK").expect("release the lock");
    assert_eq!(env.count_jobs(), 0, "a busy enqueue wrote something");

    let id = queue
        .enqueue(job("send_email"))
        .expect("enqueue after the lock is released");
    assert_eq!(env.count_jobs(), 1);
    assert_eq!(get(&env, id).job_type, "send_email");
}

#[test]
fn a_queue_opens_while_another_connection_holds_the_write_lock() {
    // SQLite's write lock, held by a raw connection's BEGIN IMMEDIATE.
    if sqlite_only() {
        return;
    }
    let env = setup();
    let raw = env.raw();
    raw.execute_batch("BEGIN IMMEDIATE; INSERT INTO jobs (job_type, payload) VALUES ('x', '{}');")
        .expect("the raw connection takes the write lock");
    let queue = Queue::builder()
        .busy_timeout(Duration::from_millis(200))
        .open(&env.path)
        .expect("opening a current file needs no write lock");
    assert_eq!(
        queue.list(&JobFilter::new()).expect("reads work").len(),
        0,
        "uncommitted rows are invisible"
    );
    raw.execute_batch("COMMIT").expect("commit");
    assert_eq!(queue.list(&JobFilter::new()).expect("list").len(), 1);
}

#[test]
fn subscribers_see_enqueued_events() {
    let env = setup();
    let rx = env.queue.subscribe();
    let id = env
        .queue
        .enqueue(NewJob::new("send_email", json!({})).queue("mail"))
        .expect("enqueue");
    match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(Event::Enqueued {
            id: got,
            job_type,
            queue,
        }) => {
            assert_eq!(got, id);
            assert_eq!(job_type, "send_email");
            assert_eq!(queue, "mail");
        }
        other => panic!("expected Enqueued for job {id}, got {other:?}"),
    }

    // A clone's enqueue reaches the same subscribers; batches announce each job in order.
    let ids = env
        .queue
        .clone()
        .enqueue_batch(vec![job("a"), job("b")])
        .expect("batch");
    for want in ids {
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(Event::Enqueued { id, .. }) => assert_eq!(id, want),
            other => panic!("expected Enqueued for job {want}, got {other:?}"),
        }
    }
}

#[test]
fn in_memory_queues_are_shared_by_clones_only() {
    let a = Queue::open_in_memory().expect("first in-memory queue");
    let a2 = a.clone();
    let id = a.enqueue(job("send_email")).expect("enqueue");
    assert_eq!(
        a2.job(id).expect("read via clone").map(|j| j.job_type),
        Some("send_email".to_string())
    );
    let from_thread = std::thread::spawn(move || a2.enqueue(job("other")).expect("enqueue"))
        .join()
        .expect("thread");
    assert_eq!(a.list(&JobFilter::new()).expect("list").len(), 2);
    assert!(a.job(from_thread).expect("read").is_some());

    let b = Queue::open_in_memory().expect("second in-memory queue");
    assert!(b.list(&JobFilter::new()).expect("list").is_empty());
    b.enqueue(job("third")).expect("enqueue into b");
    assert_eq!(b.list(&JobFilter::new()).expect("list").len(), 1);
    assert_eq!(a.list(&JobFilter::new()).expect("list").len(), 2);
}

/// A typed payload holding NaN or ±Infinity is refused, naming the
/// field, instead of being stored (and run) with `null` in its place.
#[test]
fn nan_and_infinity_in_a_typed_payload_are_refused_not_stored_as_null() {
    #[derive(serde::Serialize)]
    struct Sample {
        sensor: String,
        readings: Vec<f64>,
        ratio: f32,
    }
    let env = setup();
    let sample = |readings: Vec<f64>, ratio: f32| Sample {
        sensor: "t1".into(),
        readings,
        ratio,
    };
    for (payload, expected) in [
        (
            sample(vec![1.0], f32::NAN),
            "payload field `ratio` is NaN; JSON has no NaN or Infinity",
        ),
        (
            sample(vec![1.0, f64::INFINITY], 0.5),
            "payload field `readings[1]` is Infinity; JSON has no NaN or Infinity",
        ),
        (
            sample(vec![f64::NEG_INFINITY], 0.5),
            "payload field `readings[0]` is -Infinity; JSON has no NaN or Infinity",
        ),
    ] {
        let err = NewJob::typed("ingest", &payload)
            .and_then(|job| env.queue.enqueue(job))
            .expect_err("a non-finite float must be refused");
        assert_eq!(
            (err.kind(), err.to_string()),
            (ErrorKind::InvalidJob, expected.to_string())
        );
    }
    assert_eq!(env.queue.list(&JobFilter::new()).expect("list").len(), 0);

    let id = env
        .queue
        .enqueue(NewJob::typed("ingest", &sample(vec![1.5, -0.0], 0.25)).expect("finite"))
        .expect("enqueue");
    assert_eq!(
        get(&env, id).payload,
        json!({"sensor": "t1", "readings": [1.5, -0.0], "ratio": 0.25})
    );
}

#[test]
fn enqueue_in_counts_a_job_it_ends_once_and_leaves_the_callers_triggers_on() {
    // `enqueue_in` takes the caller's rusqlite transaction: SQLite only.
    if sqlite_only() {
        return;
    }
    let env = setup();
    env.queue
        .enqueue(
            NewJob::new("reset_email", json!({}))
                .idempotency_key("reset:42")
                .expire_after(Duration::from_secs(60)),
        )
        .expect("enqueue");
    env.clock.advance(Duration::from_secs(61));
    let mut conn = env.raw();
    let tx = conn.transaction().expect("begin");
    // The key's holder is past its deadline: this enqueue ends it and makes a new job.
    env.queue
        .enqueue_in(
            &tx,
            NewJob::new("reset_email", json!({})).idempotency_key("reset:42"),
        )
        .expect("enqueue_in");
    tx.commit().expect("commit");
    let cancelled = "SELECT COALESCE(SUM(n), 0) FROM job_counts WHERE status = 'cancelled'";
    assert_eq!(env.sql_i64(cancelled), 1, "one job ended, counted once");
    // The caller's connection still keeps the counts of its own plain SQL.
    conn.execute(
        "INSERT INTO jobs (job_type, payload, status) VALUES ('t', '{}', 'cancelled')",
        [],
    )
    .expect("insert");
    assert_eq!(env.sql_i64(cancelled), 2);
}
