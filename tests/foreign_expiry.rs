//! Deadlines for rows from other languages: the plain-SQL insert of docs/schema.md
//! ("Deadlines: `expires_at`"), run as written by Python's sqlite3 module, gives the job a
//! deadline 15 minutes out by the database's clock; past it, the job never runs and ends
//! cancelled by `deadline`, which the guide's query then finds.

use std::process::Command;

use litejobs::{testing, Clock, JobStatus, ManualClock, Queue, SystemClock, Worker};
use serde_json::json;

use crate::support::scripted::ScriptedHandler;
use crate::support::{sqlite_only, temp_dir};

const GUIDE: &str = include_str!("../docs/schema.md");

/// The statements of docs/schema.md's ```sql block holding `marker`, each without its
/// comment lines (also the PostgreSQL one, for tests/postgres/plain_sql.rs).
pub fn guide_statements(marker: &str) -> Vec<String> {
    let at = GUIDE
        .find(marker)
        .unwrap_or_else(|| panic!("docs/schema.md has no SQL block marked {marker:?}"));
    let start = GUIDE[..at]
        .rfind("```sql\n")
        .expect("the marker sits in a ```sql block")
        + "```sql\n".len();
    let end = start + GUIDE[start..].find("```").expect("the block ends");
    GUIDE[start..end]
        .split(";\n")
        .map(|s| {
            s.lines()
                .filter(|l| !l.trim_start().starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .filter(|s| !s.trim().is_empty())
        .collect()
}

/// Runs `script` with Python 3 and these arguments; its stdout.
fn python(script: &str, args: &[&str]) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 runs (the machine's CPython, as an app in another language would)");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn a_deadline_python_inserts_by_plain_sql_expires_the_job() {
    if sqlite_only() || !crate::support::have_tool("python3") {
        return;
    }
    let statements = guide_statements("tests/foreign_expiry.rs runs this");
    let [insert, expired] = <[String; 2]>::try_from(statements).expect("an insert and a query");
    let dir = temp_dir();
    let path = dir.path().join("app.db");
    let db = path.to_str().expect("a UTF-8 path");
    let before = SystemClock.now_ms();
    let clock = ManualClock::new(before);
    let queue = Queue::builder()
        .clock(clock.clone())
        .open(&path)
        .expect("creating the database");
    let script = r#"
import json, sqlite3, sys
c = sqlite3.connect(sys.argv[1])
if sys.argv[2] == "insert":
    c.execute(sys.argv[3], {"payload": json.dumps({"user_id": 42})})
    c.commit()
else:
    for row in c.execute(sys.argv[3]):
        print(row[0], row[1])
"#;
    python(script, &[db, "insert", &insert]);
    let after = SystemClock.now_ms();
    let job = &queue.list(&litejobs::JobFilter::new()).expect("list")[0];
    let deadline = job.expires_at.expect("a deadline");
    assert!(
        (before + 15 * 60_000..=after + 15 * 60_000).contains(&deadline),
        "15 minutes from the insert: {deadline} not in {before}..{after} + 15 min"
    );
    assert_eq!(job.payload, json!({"user_id": 42}));

    // Sixteen minutes later, a worker comes: the job never runs.
    clock.set(after + 16 * 60_000);
    let handler = ScriptedHandler::new();
    let builder = Worker::builder(&queue).handler("password_reset_email", handler.clone());
    let report = testing::drain(&builder).expect("drain");
    assert_eq!((report.expired, report.attempts()), (1, 0), "{report:?}");
    assert_eq!(handler.call_count(), 0);
    let stored = queue.job(job.id).expect("job").expect("kept");
    assert_eq!(
        (stored.status, stored.cancelled_by.as_deref()),
        (JobStatus::Cancelled, Some("deadline"))
    );
    let reason = stored.cancel_reason.expect("a reason");
    assert!(
        reason.starts_with("expired: not started by its deadline "),
        "{reason}"
    );
    assert_eq!(
        python(script, &[db, "query", &expired]),
        format!("{} {reason}\n", job.id),
        "the guide's query finds it"
    );
}
