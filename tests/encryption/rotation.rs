//! `Queue::rotate_keys` while a worker runs the jobs it re-encrypts: every job still runs
//! and succeeds, nothing is left under the old key, everything opens with the new key
//! alone, and jobs of a type marked encrypted that were stored in clear are encrypted.

use std::time::Duration;

use litejobs::Event;

use super::*;
use crate::support::scripted::wait_event_within;

const JOBS: usize = 200;

#[test]
fn rotation_while_a_worker_runs_loses_nothing_and_leaves_nothing_under_the_old_key() {
    let env = setup();
    let old = with_keys(&env, K1);
    let ids: Vec<i64> = (0..JOBS)
        .map(|n| {
            old.enqueue(NewJob::new("charge", json!({"card": format!("{SECRET}-{n}")})).encrypted())
                .expect("enqueue")
        })
        .collect();
    // Notes stored in clear before their type was marked encrypted.
    for n in 0..3 {
        old.enqueue(NewJob::new(
            "note",
            json!({"text": format!("note-secret-{n}")}),
        ))
        .expect("enqueue");
    }
    old.set_type_encrypted("note", true).expect("mark");
    assert_eq!(stored_with(&env, "note-secret"), 3);

    // Every process gets the new key first, the old one after it; then the rotation runs
    // while a worker works through the jobs.
    let new = with_keys(&env, &format!("{K2},{K1}"));
    let events = new.subscribe();
    let worker = charging(&new).concurrency(2).start().expect("worker");
    let first = new.rotate_keys().expect("rotation");
    assert_eq!(first.key, "k2");
    assert_eq!(first.unreadable, 0, "{first:?}");
    assert_eq!(first.encrypted, 3, "the notes' payloads: {first:?}");
    let mut finished = 0;
    while finished < JOBS {
        wait_event_within(&events, Duration::from_secs(60), "jobs finishing", |e| {
            matches!(e, Event::Finished { .. }).then_some(())
        });
        finished += 1;
    }
    worker.shutdown(Duration::from_secs(10)).expect("shutdown");
    // What the worker wrote meanwhile (under k2 already) is current; what changed under the
    // first pass's feet is done now.
    let second = new.rotate_keys().expect("second rotation");
    assert_eq!(
        (second.re_encrypted, second.encrypted, second.unreadable),
        (0, 0, 0),
        "{second:?}"
    );
    assert_eq!(second.changed_meanwhile, 0, "{second:?}");

    assert_eq!(
        new.stats().expect("stats").count(JobStatus::Succeeded),
        JOBS as i64
    );
    assert_eq!(
        env.sql_i64(
            "SELECT count(*) FROM jobs WHERE payload LIKE '%\"key\":\"k1\"%' \
             OR coalesce(result, '') LIKE '%\"key\":\"k1\"%' \
             OR coalesce(progress, '') LIKE '%\"key\":\"k1\"%'"
        ),
        0,
        "nothing left under the old key"
    );
    assert_eq!(stored_with(&env, SECRET), 0);
    assert_eq!(stored_with(&env, "note-secret"), 0);
    // The new key alone opens everything.
    let k2_only = with_keys(&env, K2);
    let jobs = k2_only.list(&JobFilter::new().limit(1000)).expect("list");
    assert_eq!(jobs.len(), JOBS + 3);
    for job in &jobs {
        for value in [
            Some(&job.payload),
            job.result.as_ref(),
            job.progress.as_ref(),
        ]
        .into_iter()
        .flatten()
        {
            assert!(
                !value.to_string().contains("encrypted (key"),
                "job {} unreadable with k2: {value}",
                job.id
            );
        }
    }
    for (n, id) in ids.iter().enumerate() {
        let job = k2_only.job(*id).expect("read").expect("exists");
        assert_eq!(
            job.result,
            Some(json!({"charged": format!("{SECRET}-{n}")}))
        );
    }
}
