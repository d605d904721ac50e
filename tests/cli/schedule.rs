//! schedule add, list, remove (and --replace, --json): periodic jobs kept in the database,
//! refused with one line when the schedule or the job is wrong; every `work` runs them, one
//! added while it runs included.

use super::*;

#[test]
fn schedules_are_added_listed_replaced_and_removed() {
    let dir = temp_dir();
    let (db, _pg) = new_db(dir.path(), "schedules.db");
    // Refused before anything is created: a bad schedule, a bad payload.
    run(&db, &["schedule", "add", "x", "61 * * * *", "report"]).refused("cron expression");
    run(&db, &["schedule", "add", "x", "every soon", "report"]).refused("every soon");
    run(
        &db,
        &["schedule", "add", "x", "every 1h", "report", "{oops"],
    )
    .refused("not valid JSON");
    run(&db, &["schedule", "add", " ", "every 1h", "report"]).refused("name is empty");
    if !crate::support::on_postgres() {
        assert!(!db.exists(), "a refused add creates no database");
    }
    let added = run(
        &db,
        &[
            "schedule",
            "add",
            "nightly_sales",
            "0 2 * * *",
            "report",
            r#"{"kind": "sales"}"#,
            "--queue",
            "reports",
            "--priority",
            "2",
        ],
    )
    .ok()
    .stdout;
    assert!(
        added.starts_with("schedule nightly_sales kept: 0 2 * * * enqueues report (reports)"),
        "{added}"
    );
    let stored = run(
        &db,
        &[
            "schedule",
            "add",
            "sync",
            "every 15m",
            "crm_sync",
            r#"{"api_token": "tok-123", "full": true}"#,
            "--json",
        ],
    )
    .json();
    assert_eq!(stored["schedule"], "every 15m", "as it was written");
    assert_eq!(stored["job"]["job_type"], "crm_sync");
    let shown: Value =
        serde_json::from_str(stored["job"]["payload"].as_str().expect("text")).expect("JSON");
    assert_eq!(
        shown,
        json!({"api_token": "[masked]", "full": true}),
        "secrets masked"
    );
    run(&db, &["schedule", "add", "sync", "every 5m", "crm_sync"]).refused("exists already");
    let replaced = run(
        &db,
        &[
            "schedule",
            "add",
            "sync",
            "every 5m",
            "crm_sync",
            "--replace",
            "--json",
        ],
    )
    .json();
    assert_eq!(replaced["schedule"], "every 5m");
    let listed = run(&db, &["schedule", "list", "--json"]).json();
    let names: Vec<&str> = listed["schedules"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(names, ["nightly_sales", "sync"]);
    assert_eq!(listed["schedules"][0]["job"]["queue"], "reports");
    assert_eq!(listed["schedules"][0]["job"]["priority"], 2);
    let table = run(&db, &["schedule", "list"]).ok().stdout;
    let header = table.lines().next().unwrap_or_default();
    for column in [
        "NAME",
        "SCHEDULE",
        "JOB",
        "QUEUE",
        "KEPT IN",
        "NEXT SLOT",
        "LAST JOB",
    ] {
        assert!(header.contains(column), "{table}");
    }
    assert!(
        table.contains(r#"report {"kind": "sales"}"#) && table.contains("database"),
        "{table}"
    );
    let all = format!("{table}{listed}");
    assert!(!all.contains("tok-123"), "secrets masked in list: {all}");
    assert_eq!(
        run(&db, &["schedule", "remove", "sync"]).ok().stdout,
        "schedule sync removed\n"
    );
    run(&db, &["schedule", "remove", "sync"]).refused("no schedule \"sync\"");
    let left = run(&db, &["schedule", "list", "--json"]).json();
    assert_eq!(left["schedules"].as_array().map(Vec::len), Some(1));
}

/// `work` runs the schedules kept in the database: one there when it starts, and one added
/// while it runs (it looks at them every few seconds).
#[cfg(all(unix, feature = "exec"))]
#[test]
fn work_runs_stored_schedules_including_one_added_while_it_runs() {
    let dir = temp_dir();
    let (db, _pg) = super::work::initialized_db(&dir);
    run(&db, &["schedule", "add", "ticking", "every 1s", "tick"]).ok();
    let mut work = super::work::WorkChild::running(
        &db,
        &["--exec", "tick=/bin/true", "--exec", "tock=/bin/true"],
    );
    assert!(
        work.wait_for_line("enqueues the schedules kept in the database (ticking)"),
        "work says which stored schedules it runs: {:?}",
        work.seen
    );
    assert!(
        work.wait_for_line("(tick) attempt 1 succeeded"),
        "{:?}",
        work.seen
    );
    run(&db, &["schedule", "add", "tocking", "every 1s", "tock"]).ok();
    assert!(
        work.wait_for_line("(tock) attempt 1 succeeded"),
        "{:?}",
        work.seen
    );
    run(&db, &["schedule", "remove", "ticking"]).ok();
    let pid = work.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill")
        .success());
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(0), "{lines:?}");
    let listed = run(&db, &["list", "--type", "tock", "--json"]).json();
    let first = &listed["jobs"][0];
    assert!(
        first["idempotency_key"]
            .as_str()
            .is_some_and(|k| k.starts_with("periodic:tocking:")),
        "{listed}"
    );
}

/// Rows another program inserted: `schedule list` shows a good one's next slot before any
/// worker ticked it, and why a broken one cannot run.
#[test]
fn schedule_list_shows_the_next_slot_of_an_inserted_row_and_why_a_broken_one_cannot_run() {
    let fx = Fx::new();
    fx.sql_exec(
        "INSERT INTO periodic_schedules (name, schedule, job_type, payload)
         VALUES ('sql_sync', 'every 15m', 'crm_sync', '{}'),
                ('sql_broken', '0 99 * * *', 'crm_sync', '{}')",
    );
    let table = fx.run(&["schedule", "list"]).ok().stdout;
    let line = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {table}"))
            .to_string()
    };
    assert!(
        line("sql_broken").contains("cannot run: cron expression"),
        "{table}"
    );
    assert!(line("sql_sync").contains(" UTC ("), "a next slot: {table}");
}
