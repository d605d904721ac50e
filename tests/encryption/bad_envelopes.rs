//! Envelopes a worker cannot open: sealed with other bytes under the same key name, with a
//! key it does not hold, altered, cut short, moved from another row or another column. Each
//! such job goes dead without running, with an error naming the key and the reason; every
//! other job runs, and a plain row another program inserted runs as it always did.

use super::*;
use crate::support::START_MS;

/// The job's status and last error.
fn outcome(queue: &Queue, id: i64) -> (JobStatus, String) {
    let job = queue.job(id).expect("read").expect("exists");
    (job.status, job.last_error.unwrap_or_default())
}

#[test]
fn an_envelope_that_cannot_be_opened_makes_only_its_job_dead() {
    let env = setup();
    let queue = with_keys(&env, K1);
    let secret = |queue: &Queue, q: &str| {
        queue
            .enqueue(
                NewJob::new("charge", json!({"card": SECRET}))
                    .queue(q)
                    .encrypted(),
            )
            .expect("enqueue")
    };
    // A finished job whose result envelope is moved into another job's payload below.
    let finished = secret(&queue, "default");
    assert_eq!(
        testing::drain(&charging(&queue)).expect("drain").succeeded,
        1
    );

    let good = secret(&queue, "default");
    let other_bytes = secret(&with_keys(&env, K1_OTHER), "default");
    let unknown = secret(
        &with_keys(&env, "k9:CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQk="),
        "default",
    );
    let altered = secret(&queue, "default");
    let cut_data = secret(&queue, "default");
    let cut_json = secret(&queue, "default");
    let from_billing = secret(&queue, "billing");
    let moved_row = secret(&queue, "default");
    let moved_column = secret(&queue, "default");
    env.sql_exec(&format!(
        "UPDATE jobs SET payload = replace(payload, '\"data\":\"', '\"data\":\"AAAA') WHERE id = {altered};
         UPDATE jobs SET payload = substr(payload, 1, length(payload) - 10) || '\"}}' WHERE id = {cut_data};
         UPDATE jobs SET payload = substr(payload, 1, 70) WHERE id = {cut_json};
         UPDATE jobs SET payload = (SELECT payload FROM jobs WHERE id = {from_billing}) WHERE id = {moved_row};
         UPDATE jobs SET payload = (SELECT result FROM jobs WHERE id = {finished}) WHERE id = {moved_column};
         INSERT INTO jobs (job_type, payload, run_at, created_at)
             VALUES ('charge', '{{\"card\": \"plain\"}}', {START_MS}, {START_MS});"
    ));
    let plain = env.sql_i64("SELECT max(id) FROM jobs");

    let worker = charging(&queue).queue("billing", 1);
    let ran = testing::drain(&worker).expect("drain");
    assert_eq!(
        ran.succeeded, 3,
        "good, billing's own and the plain row: {ran:?}"
    );
    for id in [good, from_billing, plain] {
        assert_eq!(outcome(&queue, id).0, JobStatus::Succeeded, "job {id}");
    }
    let cases = [
        (other_bytes, "payload does not decrypt with key k1"),
        (
            unknown,
            "payload encrypted with key k9, which this process does not hold (it holds k1)",
        ),
        (altered, "payload does not decrypt with key k1"),
        (cut_data, "key k1"),
        (
            cut_json,
            "payload is a damaged envelope (key k1), cut short or altered",
        ),
        (moved_row, "payload does not decrypt with key k1"),
        (moved_column, "payload does not decrypt with key k1"),
    ];
    for (id, expected) in cases {
        let (status, error) = outcome(&queue, id);
        assert_eq!(status, JobStatus::Dead, "job {id}: {error}");
        assert!(error.starts_with(&format!("job {id}: ")), "{error}");
        assert!(error.contains(expected), "job {id}: {error}");
        assert!(error.ends_with("dead without running"), "{error}");
        assert!(!error.contains(SECRET), "{error}");
    }
    // Views say so too: a key of that name is held, but it does not open the job's values.
    let read = |id: i64| queue.job(id).expect("read").expect("the job");
    assert!(read(other_bytes).shows_sealed(), "another key under k1");
    assert!(read(unknown).shows_sealed(), "a key not held");
    assert!(!read(good).shows_sealed(), "opened");
    assert!(!read(plain).shows_sealed(), "stored in clear");
    let (_, moved) = outcome(&queue, moved_row);
    assert!(
        moved.contains("moved from another job's column, type or queue"),
        "{moved}"
    );
}
