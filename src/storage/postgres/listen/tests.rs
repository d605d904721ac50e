//! The listening connection and thread against the server named by `LITEJOBS_TEST_PG`;
//! skipped without it, except under `CI=true`.

use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::pg::PgConnection;
use diesel::Connection;

use super::libpq::{stop_pair, ListenConn, Woken};
use super::{Notifications, Opener};
use crate::storage::ChangeSignal;
use crate::system::outage::Outage;

/// Bounds every wait (they end as soon as what they wait for happens).
const WAIT: Duration = Duration::from_secs(10);

fn server() -> Option<String> {
    let url = std::env::var("LITEJOBS_TEST_PG").ok();
    assert!(
        url.is_some() || std::env::var("CI").map_or(true, |v| v != "true"),
        "CI=true but LITEJOBS_TEST_PG is not set"
    );
    url
}

/// A URL naming the connection, so the test can find its backend.
fn named(url: &str, name: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}application_name={name}")
}

fn admin(url: &str) -> PgConnection {
    PgConnection::establish(url).expect("connecting to the test server")
}

/// How many backends named `name` listen for new jobs.
fn listening(admin: &mut PgConnection, name: &str) -> i64 {
    use diesel::RunQueryDsl;
    diesel::sql_query(format!(
        "SELECT count(*)::bigint AS v FROM pg_stat_activity \
         WHERE application_name = '{name}' AND query = 'LISTEN litejobs_jobs'"
    ))
    .get_result::<crate::storage::postgres::sql::IntRow>(admin)
    .expect("reading pg_stat_activity")
    .v
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_listening_connection_wakes_on_a_notification_and_on_its_stop() {
    let Some(url) = server() else { return };
    // A channel of this test's own: other tests' jobs notify on litejobs_jobs.
    let channel = format!("litejobs_listen_test_{}", std::process::id());
    let listen = format!("LISTEN {channel}");
    let mut conn =
        ListenConn::open(&url, &["SET lock_timeout = 5000", &listen]).expect("listening");
    let (stop, stopped) = stop_pair().expect("stop pair");
    let mut other = admin(&url);
    other
        .batch_execute(&format!("NOTIFY {channel}"))
        .expect("notifying");
    assert_eq!(conn.wait("mine", &stopped), Ok(Woken::Notified));
    // Two in a row are taken together; one for another schema is passed over: the next wait
    // sleeps until the stop.
    other
        .batch_execute(&format!(
            "NOTIFY {channel}, 'mine'; NOTIFY {channel}, ''; NOTIFY {channel}, 'theirs'"
        ))
        .expect("notifying");
    assert_eq!(conn.wait("mine", &stopped), Ok(Woken::Notified));
    other
        .batch_execute(&format!("NOTIFY {channel}, 'theirs'"))
        .expect("notifying");
    let waiter = std::thread::spawn(move || conn.wait("mine", &stopped));
    std::thread::sleep(Duration::from_millis(20));
    assert!(!waiter.is_finished(), "nothing to wake on yet");
    drop(stop);
    assert_eq!(waiter.join().expect("waiter"), Ok(Woken::Stopped));
}

#[test]
fn a_listening_connection_reports_its_loss_and_a_bad_statement() {
    let Some(url) = server() else { return };
    let refused = ListenConn::open(&url, &["SELECT no_such_column FROM pg_class"]);
    assert!(
        refused
            .as_ref()
            .err()
            .is_some_and(|e| e.contains("no_such_column")),
        "the server's message: {:?}",
        refused.err()
    );
    let name = format!("litejobs-listen-test-{}", std::process::id());
    let mut conn =
        ListenConn::open(&named(&url, &name), &["LISTEN litejobs_jobs"]).expect("listening");
    let (_stop, stopped) = stop_pair().expect("stop pair");
    let mut admin = admin(&url);
    admin
        .batch_execute(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{name}'"
        ))
        .expect("terminating the listening backend");
    // (Other tests' jobs may notify first.)
    let lost = loop {
        match conn.wait("mine", &stopped) {
            Ok(Woken::Notified) => continue,
            other => break other,
        }
    };
    assert!(lost.is_err(), "{lost:?}");
}

#[test]
fn notifications_tell_their_news_listen_again_after_a_loss_and_stop_when_dropped() {
    let Some(url) = server() else { return };
    let name = format!("litejobs-notifications-test-{}", std::process::id());
    let outage = std::sync::Arc::new(Outage::new("the test server"));
    let mut signal = Notifications::start(Opener {
        url: named(&url, &name),
        setup: "SET lock_timeout = 5000".to_string(),
        schema: "litejobs".to_string(),
        outage,
    })
    .expect("starting");
    let news = signal.news().expect("PostgreSQL's signal has news");
    // Connecting counts as a change (commits made while nobody listened).
    news.recv_timeout(WAIT).expect("news of the connection");
    assert!(signal.changed().expect("changed"));
    let mut admin = admin(&url);
    admin
        .batch_execute("NOTIFY litejobs_jobs")
        .expect("notifying");
    news.recv_timeout(WAIT).expect("news of the notification");
    assert!(signal.changed().expect("changed"));
    // A lost connection is news (commits since the last notification were not heard), and
    // the thread listens again.
    admin
        .batch_execute(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{name}'"
        ))
        .expect("terminating the listening backend");
    news.recv_timeout(WAIT).expect("news of the loss");
    wait_until("listening again", || listening(&mut admin, &name) == 1);
    let _ = signal.changed();
    admin
        .batch_execute("NOTIFY litejobs_jobs")
        .expect("notifying");
    wait_until("news after listening again", || {
        signal.changed().expect("changed")
    });
    drop(signal);
    wait_until("the listening backend gone", || {
        listening(&mut admin, &name) == 0
    });
}
