//! The promise at rest: after an encrypted job is enqueued, fails, goes dead, is requeued
//! and succeeds (its progress and result echoing the secret), no byte sequence of the
//! secret is in the database file, its WAL, or a `VACUUM INTO` copy; a plain job's secret,
//! as a control, is found in them.

use std::path::Path;
use std::time::Duration;

use super::*;
use crate::support::sqlite_only;

const CARD: &str = "S3CRET-CARD-4111-1111";
const CONTROL: &str = "PLAIN-CONTROL-7777";

/// How many times `needle` occurs in the file at `path` (`grep -c` of its bytes, counting
/// every occurrence, not lines).
fn occurrences(path: &Path, needle: &str) -> usize {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    bytes
        .windows(needle.len())
        .filter(|w| *w == needle.as_bytes())
        .count()
}

#[test]
fn no_byte_of_an_encrypted_secret_reaches_the_file_its_wal_or_a_copy() {
    if sqlite_only() {
        return;
    }
    let env = setup();
    let queue = with_keys(&env, K1);
    let id = queue
        .enqueue(
            NewJob::new("charge", json!({"card": CARD, "amount": 12}))
                .encrypted()
                .max_attempts(2),
        )
        .expect("enqueue");
    queue
        .enqueue(NewJob::new("plain", json!({"card": CONTROL})))
        .expect("enqueue the control");
    let worker = || {
        Worker::builder(&queue)
            .handler("charge", |ctx: &JobContext| {
                let card = ctx.payload()["card"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                ctx.set_progress(json!({"charging": card}));
                ctx.heartbeat()
                    .map_err(|e| JobError::retry(e.to_string()))?;
                match ctx.attempt() {
                    1 => Err(JobError::retry_after(
                        Duration::from_secs(60),
                        "card declined",
                    )),
                    _ if ctx.max_attempts() == 2 => Err(JobError::permanent("card declined")),
                    _ => {
                        ctx.set_result(json!({"charged": card}));
                        Ok(())
                    }
                }
            })
            .handler("plain", |_: &JobContext| Ok(()))
    };
    testing::drain(&worker()).expect("first attempt fails");
    env.clock.advance(Duration::from_secs(120));
    testing::drain(&worker()).expect("second attempt: dead");
    assert_eq!(
        queue.job(id).expect("read").map(|j| j.status),
        Some(JobStatus::Dead)
    );
    let again = queue
        .requeue_dead(id, "ops", "card fixed")
        .expect("requeue");
    queue
        .enqueue(NewJob::new("charge", json!({"card": CARD})).encrypted())
        .expect("one more, left waiting");
    let worker = Worker::builder(&queue).handler("charge", |ctx: &JobContext| {
        let card = ctx.payload()["card"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        ctx.set_result(json!({"charged": card}));
        Ok(())
    });
    let ran = testing::drain(&worker).expect("the requeued job succeeds");
    assert_eq!(ran.succeeded, 2, "{ran:?}");
    assert_eq!(
        queue.job(again).expect("read").and_then(|j| j.result),
        Some(json!({"charged": CARD}))
    );

    let wal = env.dir.path().join("jobs.db-wal");
    assert!(
        std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0) > 0,
        "the WAL holds the writes"
    );
    let copy = env.dir.path().join("copy.db");
    env.raw()
        .execute("VACUUM INTO ?1", [copy.to_string_lossy()])
        .expect("VACUUM INTO");
    for file in [&env.path, &wal, &copy] {
        assert_eq!(
            occurrences(file, CARD),
            0,
            "{} holds the secret",
            file.display()
        );
        assert!(
            occurrences(file, CONTROL) > 0 || file == &env.path,
            "{} should hold the plain control",
            file.display()
        );
    }
    assert!(
        occurrences(&copy, CONTROL) > 0,
        "the method finds what is there"
    );
}

/// `keys rotate` encrypting jobs stored in clear before their type was marked leaves no
/// byte of their clear text in the file: SQLite would otherwise keep a rewritten row's old
/// bytes in its page's free space.
#[test]
fn rotation_leaves_no_clear_text_in_the_file() {
    if sqlite_only() {
        return;
    }
    let env = setup();
    let old = with_keys(&env, K1);
    for n in 0..6 {
        old.enqueue(NewJob::new("charge", json!({"n": n})).encrypted())
            .expect("enqueue");
        old.enqueue(NewJob::new("note", json!({"text": format!("{CARD}-{n}")})))
            .expect("enqueue in clear");
    }
    old.set_type_encrypted("note", true).expect("mark");
    let new = with_keys(&env, &format!("{K2},{K1}"));
    let report = new.rotate_keys().expect("rotation");
    assert_eq!(
        (report.encrypted, report.re_encrypted),
        (6, 6),
        "{report:?}"
    );
    drop((old, new));
    env.raw()
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .expect("checkpoint");
    assert_eq!(
        occurrences(&env.path, CARD),
        0,
        "the clear text is in the file"
    );
}
