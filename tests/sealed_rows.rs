//! A fixed envelope (AES-256-GCM-SIV, written once by Python's `cryptography` as
//! docs/schema.md describes, so the format cannot drift), inserted by plain SQL and read by
//! any build: with the key it decrypts to what was sealed; without it a view says
//! `encrypted (key k1)`, a worker makes the job dead saying why (no key, or a build without
//! the `encryption` feature), and a worker that would serve the type refuses to start.

use litejobs::{testing, JobContext, JobFilter, JobStatus, Worker};
use serde_json::json;

use crate::support::{setup, START_MS};

/// `{"card":"4111-FIXED"}` as the payload of a `charge` job in queue `default`, sealed with
/// key `k1` (bytes 0, 1, …, 31) under the nonce 1, 2, …, 12.
const ENVELOPE: &str = r#"{"litejobs_envelope":1,"alg":"A256GCMSIV","key":"k1","nonce":"AQIDBAUGBwgJCgsM","data":"19fKXSJayT/gwr2gYls4u6qM97FxELw26JwdZSAav/RwFBp2Cw=="}"#;

#[test]
fn a_stored_envelope_is_shown_run_or_refused_by_what_the_build_and_its_keys_allow() {
    let env = setup();
    env.sql_exec(&format!(
        "INSERT INTO jobs (job_type, payload, run_at, created_at) \
         VALUES ('charge', '{ENVELOPE}', {START_MS}, {START_MS})"
    ));
    let id = env.sql_i64("SELECT max(id) FROM jobs");

    #[cfg(feature = "encryption")]
    {
        use litejobs::encryption::Keyring;
        let keys =
            Keyring::parse("k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").expect("the key");
        let keyed = env.open_with(litejobs::Queue::builder().encryption_keys(keys));
        let job = keyed.job(id).expect("read").expect("exists");
        assert_eq!(job.payload, json!({"card": "4111-FIXED"}));
        assert_eq!(job.encryption_key.as_deref(), Some("k1"));
    }

    let queue = &env.queue; // no keys
    let shown = queue.list(&JobFilter::new()).expect("list");
    assert_eq!(shown[0].payload, json!("encrypted (key k1)"));
    assert_eq!(shown[0].encryption_key.as_deref(), Some("k1"));

    let worker = Worker::builder(queue).handler("charge", |_: &JobContext| Ok(()));
    let err = Worker::builder(queue)
        .handler("charge", |_: &JobContext| Ok(()))
        .start()
        .expect_err("it holds no key for the waiting job");
    assert!(
        err.to_string()
            .contains("waiting jobs of charge (key k1) are encrypted with keys it does not hold"),
        "{err}"
    );
    testing::drain(&worker).expect("drain");
    let job = queue.job(id).expect("read").expect("exists");
    assert_eq!(job.status, JobStatus::Dead);
    let error = job.last_error.unwrap_or_default();
    let expected = if cfg!(feature = "encryption") {
        "payload encrypted with key k1, and this process holds no encryption key"
    } else {
        "payload encrypted with key k1, but this litejobs was built without the `encryption` feature"
    };
    assert!(error.contains(expected), "{error}");
}
