//! Small frictions a new user hit: `pause`/`resume` of a queue name the database does not
//! know (a typo) is refused instead of pausing a phantom queue; `list` and the dashboard's
//! jobs list leave LAST ERROR empty for a succeeded job; a file made from `schema.sql` is in
//! WAL mode.

use super::*;

/// A job in `mail` waiting, one in `reports` succeeded: both queues are known, one of them
/// only through a finished job.
fn two_queues() -> Fx {
    let fx = Fx::new();
    fx.ago(0);
    fx.enqueue(NewJob::new("send", json!({})).queue("mail"));
    fx.enqueue(NewJob::new("build", json!({})).queue("reports"));
    fx.succeed_due("build", "reports");
    fx
}

#[test]
fn pause_refuses_a_queue_name_the_database_does_not_know() {
    let fx = two_queues();
    fx.run(&["pause", "mial"]).refused(
        "no queue named mial (known: mail, reports); pass --create to pause it before it has jobs",
    );
    assert_eq!(
        fx.queue.paused_queues().expect("paused"),
        Vec::<String>::new()
    );
    assert_eq!(
        fx.sql_i64("SELECT COUNT(*) FROM queues"),
        0,
        "a refused pause writes no queue row"
    );

    // Known by a waiting job, and by a finished job only.
    fx.run(&["pause", "mail"]).ok();
    assert_eq!(
        fx.run(&["pause", "reports", "--json"]).json(),
        json!({"queue": "reports", "paused": true})
    );
    assert_eq!(
        fx.queue.paused_queues().expect("paused"),
        ["mail", "reports"]
    );
}

#[test]
fn pause_create_pauses_a_queue_before_its_first_job_and_resume_then_knows_it() {
    let fx = two_queues();
    let out = fx.run(&["pause", "--create", "nightly"]).ok().stdout;
    assert_eq!(
        out,
        "queue nightly paused: no worker claims its jobs until `litejobs resume nightly`\n"
    );
    assert_eq!(fx.queue.paused_queues().expect("paused"), ["nightly"]);
    // A paused queue is known: pausing it again needs no --create, and it can be resumed.
    fx.run(&["pause", "nightly"]).ok();
    assert_eq!(
        fx.run(&["resume", "nightly", "--json"]).json(),
        json!({"queue": "nightly", "paused": false})
    );
    assert_eq!(
        fx.queue.paused_queues().expect("paused"),
        Vec::<String>::new()
    );
}

#[test]
fn resume_refuses_a_queue_name_the_database_does_not_know() {
    let fx = two_queues();
    let refused = fx
        .run(&["resume", "reprots"])
        .refused("no queue named reprots (known: mail, reports)");
    assert!(
        !refused.stderr.contains("--create"),
        "resuming nothing has no --create: {refused:#?}"
    );
    // --create belongs to pause only: resume refuses it as a usage error.
    let usage = fx.run(&["resume", "--create", "reprots"]);
    assert_eq!(usage.code, Some(2), "{usage:#?}");
    assert!(usage.stderr.contains("--create"), "{usage:#?}");
    assert_eq!(fx.sql_i64("SELECT COUNT(*) FROM queues"), 0);
    // A known queue that is not paused resumes without complaint, as before.
    assert_eq!(
        fx.run(&["resume", "mail"]).ok().stdout,
        "queue mail resumed\n"
    );
}

#[test]
fn pause_on_a_database_without_jobs_says_no_queue_is_known_yet() {
    let fx = Fx::new();
    fx.run(&["pause", "default"])
        .refused("no queue named default (known: none yet); pass --create");
    fx.run(&["pause", "--create", "default"]).ok();
    assert_eq!(fx.queue.paused_queues().expect("paused"), ["default"]);
}

#[test]
fn a_refusal_lists_ten_known_queues_and_counts_the_rest() {
    let fx = Fx::new();
    for n in 0..12 {
        fx.enqueue(NewJob::new("t", json!({})).queue(format!("q{n:02}")));
    }
    fx.run(&["pause", "nope"]).refused(
        "(known: q00, q01, q02, q03, q04, q05, q06, q07, q08, q09 and 2 more); pass --create",
    );
}

/// A job whose first attempt failed with `error` and whose second succeeded: the library
/// keeps the failure in `last_error` (the latest failure) and in the attempt history.
fn succeeded_after_a_failure(fx: &Fx, error: &str) -> i64 {
    fx.ago(2 * 60 * MINUTE);
    let id = fx.enqueue(NewJob::new("sync", json!({})));
    fx.fail_due("sync", "default", error, false);
    fx.ago(0);
    fx.succeed_due("sync", "default");
    let job = fx.job(id);
    assert_eq!(job.status, JobStatus::Succeeded);
    assert_eq!(job.attempts, 2);
    assert_eq!(job.last_error.as_deref(), Some(error));
    id
}

/// The line of `litejobs list`'s table for job `id`.
fn list_row(stdout: &str, id: i64) -> String {
    stdout
        .lines()
        .find(|line| line.split_whitespace().next() == Some(id.to_string().as_str()))
        .unwrap_or_else(|| panic!("no row for job {id} in:\n{stdout}"))
        .to_string()
}

#[test]
fn list_leaves_last_error_empty_for_a_job_that_succeeded_after_a_failure() {
    let fx = Fx::new();
    let done = succeeded_after_a_failure(&fx, "HTTP 503 from crm.example");
    let failing = fx.enqueue(NewJob::new("flaky", json!({})));
    fx.fail_due("flaky", "default", "connection refused", false);

    let out = fx.run(&["list"]).ok().stdout;
    let row = list_row(&out, done);
    assert!(row.contains("succeeded"), "{row}");
    assert!(
        !row.contains("HTTP 503"),
        "a succeeded job shows no error: {row}"
    );
    assert!(
        row.trim_end().ends_with('-'),
        "the column is empty (a dash): {row}"
    );
    // A failed job still shows its error.
    assert!(
        list_row(&out, failing).contains("connection refused"),
        "{out}"
    );

    // The record itself is unchanged: JSON keeps last_error, and `show` keeps the failed
    // attempt in the history.
    let jobs = fx.run(&["list", "--json"]).json();
    let record = jobs["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["id"] == json!(done))
        .expect("the succeeded job in the JSON")
        .clone();
    assert_eq!(record["last_error"], json!("HTTP 503 from crm.example"));
    let shown = fx.run(&["show", &done.to_string()]).ok().stdout;
    assert!(shown.contains("HTTP 503 from crm.example"), "{shown}");
}

#[cfg(feature = "web")]
#[test]
fn the_dashboard_jobs_list_leaves_last_error_empty_for_a_succeeded_job() {
    let fx = Fx::new();
    let done = succeeded_after_a_failure(&fx, "HTTP 503 from crm.example");
    let failing = fx.enqueue(NewJob::new("flaky", json!({})));
    fx.fail_due("flaky", "default", "connection refused", false);
    let handle = litejobs::web::Dashboard::start(
        &fx.queue,
        litejobs::web::DashboardOptions::new().addr("127.0.0.1:0"),
    )
    .expect("starting the dashboard on 127.0.0.1:0");
    let mut client = crate::web::Client::new(&handle.url());

    let page = client.get("/jobs").expect(200).body;
    assert!(
        page.contains(&format!("href=\"/jobs/{done}\"")),
        "the succeeded job is listed: {page}"
    );
    assert!(
        page.contains("connection refused"),
        "a failed job keeps its error"
    );
    assert!(
        !page.contains("HTTP 503"),
        "a succeeded job shows no error in the list: {page}"
    );
    assert!(page.contains(&format!("href=\"/jobs/{failing}\"")));
    // The job's own page keeps the earlier failure.
    let job_page = client.get(&format!("/jobs/{done}")).expect(200).body;
    assert!(job_page.contains("HTTP 503 from crm.example"), "{job_page}");
}

#[test]
fn a_file_made_from_schema_sql_is_in_wal_mode() {
    if crate::support::sqlite_only() {
        return;
    }
    let dir = temp_dir();
    let journal_mode = |path: &Path| -> String {
        raw_conn(path)
            .query_row("PRAGMA journal_mode", [], |row| row.get(0))
            .expect("reading journal_mode")
    };

    // As `sqlite3 app.db < schema.sql` runs it: statement by statement, no transaction.
    let plain = dir.path().join("plain.db");
    crate::support::create_from_schema_sql(&plain);
    assert_eq!(journal_mode(&plain), "wal");

    // Python's sqlite3, as a program in another language makes the file.
    if crate::support::have_tool("python3") {
        let py = dir.path().join("python.db");
        let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema.sql");
        let out = Command::new("python3")
            .arg("-c")
            .arg(
                "import sqlite3, sys\n\
                 conn = sqlite3.connect(sys.argv[1])\n\
                 conn.executescript(open(sys.argv[2], encoding='utf-8').read())\n\
                 print(conn.execute('PRAGMA journal_mode').fetchone()[0])\n\
                 conn.close()",
            )
            .arg(&py)
            .arg(&schema)
            .output()
            .expect("python3 runs");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "wal");
        assert_eq!(journal_mode(&py), "wal");
    }

    // A migration tool that wraps the script in one transaction: no error, the mode stays
    // (SQLite cannot change it there), and `litejobs init` switches it, as schema.sql says.
    let wrapped = dir.path().join("wrapped.db");
    crate::support::create_from_sql(
        &wrapped,
        &format!("BEGIN;\n{}\nCOMMIT;", crate::support::SCHEMA_SQL),
    );
    assert_eq!(journal_mode(&wrapped), "delete");
    run(&wrapped, &["init"]).ok();
    assert_eq!(journal_mode(&wrapped), "wal");
    run(&wrapped, &["enqueue", "t", "{}"]).ok();
}
