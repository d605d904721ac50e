//! `copy-to` moves envelopes as they are, and the job types marked encrypted: on the server
//! the same keys open them, a worker there runs them, and its enqueues keep encrypting the
//! marked type.

use litejobs::copy_sqlite_to_postgres;

use super::*;
use crate::support::pg::{server, PgSchema};
use crate::support::{temp_dir, START_MS};

#[test]
fn copy_to_moves_envelopes_and_marks_as_they_are() {
    let Some(url) = server() else { return };
    let dir = temp_dir();
    let path = dir.path().join("app.db");
    let clock = litejobs::ManualClock::new(START_MS);
    let file = Queue::builder()
        .clock(clock.clone())
        .encryption_keys(keys(K1))
        .open(&path)
        .expect("the SQLite queue");
    file.set_type_encrypted("charge", true).expect("mark");
    let id = file
        .enqueue(NewJob::new("charge", json!({"card": SECRET})))
        .expect("enqueue");

    let target = PgSchema::new(&url);
    let report = copy_sqlite_to_postgres(&path, &url, Some(&target.name)).expect("copy");
    assert_eq!(
        (report.live_jobs, report.encrypted_types),
        (1, 1),
        "{report:?}"
    );
    let server_queue = Queue::builder()
        .clock(clock.clone())
        .encryption_keys(keys(K1))
        .pg_schema(&target.name)
        .open(&url)
        .expect("the server's queue");
    let copied = server_queue
        .job(id)
        .expect("read")
        .expect("copied with its id");
    assert_eq!(copied.payload, json!({"card": SECRET}));
    assert_eq!(copied.encryption_key.as_deref(), Some("k1"));
    assert_eq!(
        target.count(&format!(
            "SELECT count(*) AS n FROM jobs WHERE payload LIKE '%{SECRET}%'"
        )),
        0
    );
    let again = server_queue
        .enqueue(NewJob::new("charge", json!({"card": SECRET})))
        .expect("enqueue on the server");
    assert_eq!(
        server_queue
            .job(again)
            .expect("read")
            .and_then(|j| j.encryption_key),
        Some("k1".to_string()),
        "the mark came along"
    );
    let ran = testing::drain(&charging(&server_queue)).expect("drain");
    assert_eq!(ran.succeeded, 2, "{ran:?}");
}
