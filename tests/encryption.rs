//! Encrypted payloads at rest, on both backends: a job marked encrypted (per job, per typed
//! job, per type in the database) is stored as an envelope and runs with its payload; its
//! result and progress are stored sealed; views decrypt with the key and say
//! `encrypted (key k1)` without it, and still count, requeue and prune; a queue without keys
//! refuses to enqueue what must be encrypted and writes nothing.

use litejobs::encryption::Keyring;
use litejobs::{
    enqueue_in, testing, ErrorKind, Job, JobContext, JobError, JobFilter, JobOptions, JobStatus,
    NewJob, Queue, Worker,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::support::{on_postgres, setup, TestEnv};

mod at_rest; // no byte of a secret in the file, its WAL or a VACUUM INTO copy
mod bad_envelopes; // wrong, missing key; altered, cut short, moved: that job dead, others run
#[cfg(all(unix, feature = "exec"))]
mod commands; // --exec and --serve get the payload decrypted; their results are stored encrypted
#[cfg(feature = "postgres")]
mod copy; // copy-to moves envelopes and marks as they are
mod rotation; // keys rotate while a worker runs: nothing lost, nothing left under the old key

/// Key `k1` (bytes 0, 1, …, 31).
const K1: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
/// Key `k2` (32 bytes of 0x22).
const K2: &str = "k2:IiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiI=";
/// Other bytes under the name `k1` (32 bytes of 0x07): not the key K1 sealed with.
const K1_OTHER: &str = "k1:BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=";

/// A secret no stored column may hold in clear.
const SECRET: &str = "4111-1111-SECRET";

fn keys(text: &str) -> Keyring {
    Keyring::parse(text).expect("test keys")
}

/// A queue on the test database holding `keys` (`""` for none).
fn with_keys(env: &TestEnv, text: &str) -> Queue {
    let builder = Queue::builder();
    let builder = if text.is_empty() {
        builder
    } else {
        builder.encryption_keys(keys(text))
    };
    env.open_with(builder)
}

/// Columns of the jobs table holding `needle` in clear, counted behind the library's back.
fn stored_with(env: &TestEnv, needle: &str) -> i64 {
    env.sql_i64(&format!(
        "SELECT count(*) FROM jobs WHERE payload LIKE '%{needle}%' \
         OR coalesce(result, '') LIKE '%{needle}%' OR coalesce(progress, '') LIKE '%{needle}%'"
    ))
}

/// Stored payloads that are envelopes under `key`.
fn sealed_under(env: &TestEnv, key: &str) -> i64 {
    env.sql_i64(&format!(
        "SELECT count(*) FROM jobs WHERE payload LIKE '{{\"litejobs_envelope\":1,\"alg\":\"A256GCMSIV\",\"key\":\"{key}\",%'"
    ))
}

/// A worker whose `charge` handler echoes the card into its result and progress.
fn charging(queue: &Queue) -> litejobs::WorkerBuilder {
    Worker::builder(queue).handler("charge", |ctx: &JobContext| {
        let card = ctx.payload()["card"].as_str().unwrap_or("none").to_string();
        ctx.set_progress(json!({"charging": card}));
        ctx.heartbeat()
            .map_err(|e| JobError::retry(e.to_string()))?;
        ctx.set_result(json!({"charged": card}));
        Ok(())
    })
}

#[test]
fn an_encrypted_job_runs_with_its_payload_and_nothing_is_stored_in_clear() {
    let env = setup();
    let queue = with_keys(&env, K1);
    let id = queue
        .enqueue(NewJob::new("charge", json!({"card": SECRET})).encrypted())
        .expect("enqueue");
    assert_eq!(sealed_under(&env, "k1"), 1);
    assert_eq!(stored_with(&env, SECRET), 0);

    let ran = testing::drain(&charging(&queue)).expect("drain");
    assert_eq!(ran.succeeded, 1, "{ran:?}");
    assert_eq!(
        stored_with(&env, SECRET),
        0,
        "result and progress sealed too"
    );
    assert_eq!(
        env.sql_i64(
            "SELECT count(*) FROM jobs WHERE result LIKE '{\"litejobs_envelope\":1,%' \
             AND progress LIKE '{\"litejobs_envelope\":1,%'"
        ),
        1
    );

    // With the key: decrypted, and said to be encrypted at rest.
    let job = queue.job(id).expect("read").expect("exists");
    assert_eq!(job.status, JobStatus::Succeeded);
    assert_eq!(job.payload, json!({"card": SECRET}));
    assert_eq!(job.result, Some(json!({"charged": SECRET})));
    assert_eq!(job.progress, Some(json!({"charging": SECRET})));
    assert_eq!(job.encryption_key.as_deref(), Some("k1"));

    // Without it: each column says so; the job is still listed and counted.
    let keyless = with_keys(&env, "");
    let shown = keyless.job(id).expect("read").expect("exists");
    assert_eq!(shown.payload, json!("encrypted (key k1)"));
    assert_eq!(shown.result, Some(json!("encrypted (key k1)")));
    assert_eq!(shown.progress, Some(json!("encrypted (key k1)")));
    assert_eq!(shown.encryption_key.as_deref(), Some("k1"));
    let listed = keyless.list(&JobFilter::new()).expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].payload, json!("encrypted (key k1)"));
    assert_eq!(
        keyless.stats().expect("stats").count(JobStatus::Succeeded),
        1
    );

    // A plain job beside it shows as it always did.
    let plain = queue
        .enqueue(NewJob::new("charge", json!({"card": "none"})))
        .expect("enqueue");
    let plain = keyless.job(plain).expect("read").expect("exists");
    assert_eq!(plain.payload, json!({"card": "none"}));
    assert_eq!(plain.encryption_key, None);
}

#[derive(Serialize, Deserialize)]
struct Refund {
    card: String,
}

impl Job for Refund {
    const TYPE: &'static str = "refund";
    fn options() -> JobOptions {
        JobOptions::new().encrypted()
    }
}

#[test]
fn every_enqueuer_encrypts_a_type_marked_in_the_database() {
    let env = setup();
    let marker = with_keys(&env, K1);
    assert!(marker.set_type_encrypted("charge", true).expect("mark"));
    assert!(!marker.set_type_encrypted("charge", true).expect("again"));
    // Another queue, as another process, encrypts it without being told: alone, in a batch,
    // inside the caller's transaction.
    let other = with_keys(&env, K1);
    other
        .enqueue(NewJob::new("charge", json!({"card": SECRET})))
        .expect("enqueue");
    other
        .enqueue_batch(vec![
            NewJob::new("charge", json!({"card": SECRET})),
            NewJob::new("note", json!({"text": "plain"})),
        ])
        .expect("batch");
    if on_postgres() {
        #[cfg(feature = "postgres")]
        {
            use diesel::Connection;
            let url = env.pg.as_ref().expect("the test's schema");
            let mut conn = diesel::PgConnection::establish(&url.url).expect("connect");
            conn.transaction(|c| {
                other
                    .enqueue_in_pg(c, NewJob::new("charge", json!({"card": SECRET})))
                    .map_err(|e| diesel::result::Error::QueryBuilderError(e.into()))
            })
            .expect("enqueue_in_pg");
        }
    } else {
        let conn = env.raw();
        other
            .enqueue_in(&conn, NewJob::new("charge", json!({"card": SECRET})))
            .expect("enqueue_in");
        // Without a queue there are no keys: the free function refuses, writing nothing.
        let err =
            enqueue_in(&conn, NewJob::new("charge", json!({"card": SECRET}))).expect_err("no keys");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.to_string().contains("must be encrypted"), "{err}");
    }
    // A typed job whose options say so.
    other
        .enqueue(Refund {
            card: SECRET.to_string(),
        })
        .expect("typed enqueue");
    assert_eq!(sealed_under(&env, "k1"), 4);
    assert_eq!(stored_with(&env, SECRET), 0);
    assert_eq!(env.count_jobs(), 5, "the note stays in clear");

    // A queue without keys refuses, writing nothing, and says why.
    let keyless = with_keys(&env, "");
    for job in [
        NewJob::new("charge", json!({"card": SECRET})),
        NewJob::new("other", json!({"card": SECRET})).encrypted(),
    ] {
        let err = keyless.enqueue(job).expect_err("no key");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
        assert!(err.to_string().contains("no encryption key"), "{err}");
        assert!(err.to_string().contains("nothing was written"), "{err}");
    }
    assert_eq!(env.count_jobs(), 5);
    assert_eq!(
        keyless
            .encrypted_types()
            .expect("marks")
            .iter()
            .map(|t| t.job_type.as_str())
            .collect::<Vec<_>>(),
        ["charge"]
    );

    // Unmarked: new payloads are plain again; the envelopes stay readable.
    assert!(marker.set_type_encrypted("charge", false).expect("unmark"));
    marker
        .enqueue(NewJob::new("charge", json!({"card": "later"})))
        .expect("enqueue");
    assert_eq!(stored_with(&env, "later"), 1);
    let worker = charging(&marker).handler("refund", |ctx: &JobContext| {
        assert_eq!(ctx.payload()["card"], SECRET);
        Ok(())
    });
    assert_eq!(testing::drain(&worker).expect("drain").succeeded, 5);
}

#[test]
fn without_the_key_jobs_are_still_requeued_and_pruned() {
    let env = setup();
    let queue = with_keys(&env, K1);
    let failing = queue
        .enqueue(
            NewJob::new("charge", json!({"card": SECRET}))
                .encrypted()
                .max_attempts(1),
        )
        .expect("enqueue");
    let done = queue
        .enqueue(NewJob::new("done", json!({"card": SECRET})).encrypted())
        .expect("enqueue");
    let worker = Worker::builder(&queue)
        .handler("charge", |_: &JobContext| {
            Err(JobError::permanent("card declined"))
        })
        .handler("done", |_: &JobContext| Ok(()));
    testing::drain(&worker).expect("drain");

    let keyless = with_keys(&env, "");
    let dead = keyless.dead_jobs(&JobFilter::new()).expect("dead");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].payload, json!("encrypted (key k1)"));
    assert_eq!(dead[0].last_error.as_deref(), Some("card declined"));
    // Requeued by a person without the key: the envelope moves as it is (same type and
    // queue), and a worker with the key runs it.
    let again = keyless
        .requeue_dead(failing, "ops", "card fixed")
        .expect("requeue");
    let worker = Worker::builder(&queue).handler("charge", |ctx: &JobContext| {
        assert_eq!(ctx.payload()["card"], SECRET);
        Ok(())
    });
    assert_eq!(testing::drain(&worker).expect("drain").succeeded, 1);
    assert_eq!(
        queue.job(again).expect("read").map(|j| j.status),
        Some(JobStatus::Succeeded)
    );
    assert_eq!(stored_with(&env, SECRET), 0);
    // Pruned without the key.
    env.clock
        .advance(std::time::Duration::from_secs(30 * 24 * 3600));
    let pruned = keyless
        .prune(&litejobs::maintenance::PruneOptions::new(
            std::time::Duration::from_secs(3600),
        ))
        .expect("prune");
    assert!(pruned.jobs_deleted >= 1, "{pruned:?}");
    assert!(keyless.job(done).expect("read").is_none());
}

#[test]
fn a_worker_refuses_to_start_without_the_keys_its_jobs_need() {
    let env = setup();
    let keyed = with_keys(&env, K1);
    keyed.set_type_encrypted("charge", true).expect("mark");
    let serve = |queue: &Queue| {
        Worker::builder(queue)
            .handler("charge", |_: &JobContext| Ok(()))
            .handler("note", |_: &JobContext| Ok(()))
    };
    // Marked, and no key at all.
    let keyless = with_keys(&env, "");
    let err = serve(&keyless).start().expect_err("no key");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    assert!(
        err.to_string()
            .contains("holds no encryption key, but job type charge is marked encrypted"),
        "{err}"
    );
    // A type it does not serve is no reason to refuse.
    Worker::builder(&keyless)
        .handler("note", |_: &JobContext| Ok(()))
        .start()
        .expect("serves only plain types")
        .shutdown(std::time::Duration::from_secs(5))
        .expect("stops");

    // Waiting jobs under a key it does not hold, named with their type.
    let k9 = with_keys(&env, "k9:CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQk=");
    k9.enqueue(NewJob::new("note", json!({"text": SECRET})).encrypted())
        .expect("enqueue");
    let err = serve(&keyed).start().expect_err("k9 missing");
    assert!(
        err.to_string()
            .contains("waiting jobs of note (key k9) are encrypted with keys it does not hold"),
        "{err}"
    );
    let both = with_keys(
        &env,
        &format!("{K1},k9:CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQk="),
    );
    serve(&both)
        .start()
        .expect("holds both")
        .shutdown(std::time::Duration::from_secs(5))
        .expect("stops");
}

#[test]
fn errors_about_an_encrypted_payload_leave_its_values_out() {
    let env = setup();
    let queue = with_keys(&env, K1);
    let id = queue
        .enqueue(NewJob::new("refund", json!({"card": 4111})).encrypted())
        .expect("enqueue");
    let worker = Worker::builder(&queue).job(|job: Refund, _ctx: &JobContext| {
        let _ = job.card;
        Ok(())
    });
    testing::drain(&worker).expect("drain");
    let job = queue.job(id).expect("read").expect("exists");
    assert_eq!(job.status, JobStatus::Dead);
    let error = job.last_error.unwrap_or_default();
    assert!(
        error.contains("invalid type: integer, expected a string"),
        "{error}"
    );
    assert!(!error.contains("4111"), "{error}");
}

#[test]
fn a_queue_follows_a_mark_made_elsewhere_within_a_second_by_its_clock() {
    let env = setup();
    let busy = with_keys(&env, K1);
    busy.enqueue(NewJob::new("charge", json!({"card": "before"})))
        .expect("its copy of the marks is read now");
    with_keys(&env, K1)
        .set_type_encrypted("charge", true)
        .expect("marked by another process");
    busy.enqueue(NewJob::new("charge", json!({"card": "within"})))
        .expect("enqueue");
    env.clock.advance(std::time::Duration::from_millis(1000));
    busy.enqueue(NewJob::new("charge", json!({"card": SECRET})))
        .expect("enqueue");
    // The documented window: up to a second of the queue's clock in clear, then encrypted.
    assert_eq!(stored_with(&env, "within"), 1);
    assert_eq!(stored_with(&env, SECRET), 0);
    assert_eq!(sealed_under(&env, "k1"), 1);
}

/// Bulk cancel's text search does not look inside an envelope: its field names, key name and
/// base64 are not the payload, and a search that hit them would cancel jobs holding no such
/// text. The last error of an encrypted job is still searched, and a clear payload is.
#[test]
fn bulk_cancel_search_never_matches_an_envelope() {
    let env = setup();
    let queue = with_keys(&env, K1);
    let sealed = queue
        .enqueue(NewJob::new("charge", json!({"customer": "alice"})).encrypted())
        .expect("enqueue");
    let clear = queue
        .enqueue(NewJob::new(
            "charge",
            json!({"customer": "bob", "note": "nonce k1"}),
        ))
        .expect("enqueue");
    for text in ["litejobs_envelope", "A256GCMSIV", "nonce", "k1", "data"] {
        let hits = queue
            .cancel_matching_dry_run("charge", Some(text))
            .expect("dry run");
        assert!(!hits.contains(&sealed), "{text:?} matched the envelope");
    }
    assert_eq!(
        queue
            .cancel_matching_dry_run("charge", Some("NONCE"))
            .expect("dry run"),
        vec![clear],
        "a clear payload is searched"
    );
    assert_eq!(
        queue
            .cancel_matching("charge", Some("k1"), "ops", "test")
            .expect("cancel"),
        vec![clear]
    );
    assert_eq!(
        queue.job(sealed).expect("read").map(|j| j.status),
        Some(JobStatus::Queued)
    );
}

/// A payload that every reader would take for an envelope (a top-level `litejobs_envelope`
/// field) is refused in clear, writing nothing: stored, it read as "encrypted (key x)", kept
/// every worker from starting, with or without keys, and would have gone dead unrun.
/// Encrypted, the same payload is stored and runs as it was enqueued.
#[test]
fn a_clear_payload_that_looks_like_an_envelope_is_refused() {
    let env = setup();
    let keyless = with_keys(&env, "");
    let lookalike = json!({"litejobs_envelope": 1, "key": "x", "from": "a user"});
    for job in [
        NewJob::new("inbound", lookalike.clone()),
        NewJob::from_json_text("inbound", lookalike.to_string()),
    ] {
        let err = keyless.enqueue(job).expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::InvalidJob, "{err}");
        assert!(err.to_string().contains("litejobs_envelope"), "{err}");
    }
    if !on_postgres() {
        let err =
            enqueue_in(&env.raw(), NewJob::new("inbound", lookalike.clone())).expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::InvalidJob, "{err}");
    }
    assert_eq!(env.sql_i64("SELECT count(*) FROM jobs"), 0);
    // Nested deeper, or as a string, it is no envelope and is stored as it is.
    keyless
        .enqueue(NewJob::new("inbound", json!({"body": lookalike.clone()})))
        .expect("nested");

    let queue = with_keys(&env, K1);
    let id = queue
        .enqueue(NewJob::new("inbound", lookalike.clone()).encrypted())
        .expect("encrypted");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let into = seen.clone();
    let worker = Worker::builder(&queue).handler("inbound", move |ctx: &JobContext| {
        into.lock().expect("lock").push(ctx.payload().clone());
        Ok(())
    });
    assert_eq!(testing::drain(&worker).expect("drain").succeeded, 2);
    assert!(seen.lock().expect("lock").contains(&lookalike));
    assert_eq!(
        queue.job(id).expect("read").map(|j| j.status),
        Some(JobStatus::Succeeded)
    );
}
