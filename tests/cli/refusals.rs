//! init, enqueue, and the refusals: exit 2, one line on stderr, nothing changed.

use super::*;

#[test]
fn init_creates_the_database_then_reports_it_ready() {
    let dir = temp_dir();
    let (db, _pg) = new_db(dir.path(), "new.db");
    #[cfg(feature = "postgres")]
    if crate::support::on_postgres() {
        let first = run(&db, &["init"]).ok();
        assert!(first.stdout.starts_with("created "), "{first:#?}");
        assert!(
            first
                .stdout
                .contains(&format!("(schema version {})", litejobs::PG_SCHEMA_VERSION)),
            "{first:#?}"
        );
        run(&db, &["stats"]).ok();
        let again = run(&db, &["init", "--json"]).json();
        assert_eq!(again["created"], json!(false));
        assert_eq!(again["schema_version"], json!(litejobs::PG_SCHEMA_VERSION));
        assert_eq!(again["path"], json!(db.display().to_string()));
        let queue = Queue::open(&db).expect("open");
        assert_eq!(queue.schema_version(), litejobs::PG_SCHEMA_VERSION);
        return;
    }
    let first = run(&db, &["init"]).ok();
    assert!(first.stdout.starts_with("created "), "{first:#?}");
    assert!(db.exists());
    let again = run(&db, &["init", "--json"]).json();
    assert_eq!(again["created"], json!(false));
    assert_eq!(again["schema_version"], json!(litejobs::SCHEMA_VERSION));
    assert_eq!(again["path"], json!(db.display().to_string()));
    assert_eq!(crate::support::user_version(&db), litejobs::SCHEMA_VERSION);
}

#[test]
fn enqueue_takes_the_payload_from_the_argument_or_stdin_with_every_option() {
    let fx = Fx::new();
    let id: i64 = fx
        .run(&[
            "enqueue",
            "deliver_webhook",
            r#"{"event_id": 7}"#,
            "--queue",
            "webhooks",
            "--priority",
            "-3",
            "--delay",
            "1h30m",
            "--max-attempts",
            "8",
            "--timeout",
            "10s",
            "--idempotency-key",
            "order:1:paid",
            "--group-key",
            "endpoint:crm",
        ])
        .ok()
        .stdout
        .trim()
        .parse()
        .expect("enqueue prints the id");
    let job = fx.job(id);
    assert_eq!(job.queue, "webhooks");
    assert_eq!(job.payload, json!({"event_id": 7}));
    assert_eq!(job.priority, -3);
    assert_eq!(job.max_attempts, 8);
    assert_eq!(job.timeout_ms, Some(10_000));
    assert_eq!(job.idempotency_key.as_deref(), Some("order:1:paid"));
    assert_eq!(job.group_key.as_deref(), Some("endpoint:crm"));
    let delay = job.run_at - job.created_at;
    assert_eq!(delay, 90 * MINUTE, "run_at is created_at + 1h30m");

    let from_stdin = run_with_stdin(
        &fx.path,
        &["enqueue", "send_email", "--json"],
        r#"{"user_id": 42}"#,
    )
    .json();
    assert_has_fields(&from_stdin, &["id"]);
    let id2 = from_stdin["id"].as_i64().expect("id is a number");
    assert_eq!(fx.job(id2).payload, json!({"user_id": 42}));
    let dash = run_with_stdin(&fx.path, &["enqueue", "send_email", "-"], "[1, 2]").ok();
    let id3: i64 = dash.stdout.trim().parse().expect("an id");
    assert_eq!(fx.job(id3).payload, json!([1, 2]));

    // The same idempotency key returns the holder and adds nothing.
    let before = fx
        .queue
        .list(&litejobs::JobFilter::new())
        .expect("list")
        .len();
    let again = fx
        .run(&[
            "enqueue",
            "deliver_webhook",
            "{}",
            "--idempotency-key",
            "order:1:paid",
        ])
        .ok();
    assert_eq!(again.stdout.trim(), id.to_string());
    assert_eq!(
        fx.queue
            .list(&litejobs::JobFilter::new())
            .expect("list")
            .len(),
        before
    );
}

/// Every refusal of bad input: each exits 2 with one line.
fn refuse_bad_input(path: &Path) {
    run(path, &["enqueue", "send_email", "{not json"]).refused("payload is not valid JSON");
    // An empty pipe (`printf '' | litejobs enqueue T`) or argument has no payload at all.
    run_with_stdin(path, &["enqueue", "send_email"], "").refused("no payload");
    run_with_stdin(path, &["enqueue", "send_email", "-"], " \n").refused("no payload");
    run(path, &["enqueue", "send_email", ""]).refused("no payload");
    run(path, &["enqueue", "", "{}"]).refused("job_type must not be empty");
    run(path, &["enqueue", "t", "{}", "--max-attempts", "0"]).refused("max_attempts");
    run(path, &["enqueue", "t", "{}", "--delay", "5x"]).refused("unknown unit \"x\"");
    run(path, &["enqueue", "t", "{}", "--delay", "10"]).refused("needs a unit");
    run(path, &["prune", "--older-than", "soon"]).refused("invalid duration \"soon\"");
    run(path, &["check", "--max-oldest-age", "1.5h"]).refused("invalid duration");
    run(path, &["check", "--max-failed-rate", "150%"]).refused("between 0 and 1");
    run(path, &["list", "--status", "done"]).refused("unknown status \"done\"");
    run(path, &["check"]).refused("at least one threshold");
    for args in [
        &["show", "999"][..],
        &["cancel", "999"],
        &["retry", "999"],
        &["dead", "discard", "999"],
        &["dead", "requeue", "999", "--by", "me", "--reason", "test"],
        &["dead", "requeue", "999", "--dry-run"],
    ] {
        run(path, args).refused("no job with id 999");
    }
}

/// clap's own usage errors exit 2 as well.
fn usage_errors_exit_2(path: &Path) {
    let unknown = run(path, &["frobnicate"]);
    assert_eq!(unknown.code, Some(2), "{unknown:#?}");
    let missing = run(path, &["show"]);
    assert_eq!(missing.code, Some(2), "{missing:#?}");
    let requeue_without_target = run(path, &["dead", "requeue", "--by", "me", "--reason", "x"]);
    assert_eq!(
        requeue_without_target.code,
        Some(2),
        "{requeue_without_target:#?}"
    );
}

/// On PostgreSQL: every table the commands could write, as one number (a hash of their
/// rows).
#[cfg(feature = "postgres")]
fn pg_contents(fx: &Fx) -> Vec<i64> {
    [
        "jobs",
        "job_attempts",
        "idempotency_keys",
        "queues",
        "job_counts",
    ]
    .iter()
    .map(|table| {
        fx.sql_i64(&format!(
            "SELECT ('x' || substr(md5(coalesce(string_agg(t::text, '|' ORDER BY t::text),
                                                    '')), 1, 15))::bit(60)::bigint
                 FROM {table} t"
        ))
    })
    .collect()
}

#[test]
fn bad_input_exits_2_with_one_line_and_changes_nothing() {
    let fx = Fx::new();
    fx.enqueue(NewJob::new("send_email", json!({"user_id": 1})));
    #[cfg(feature = "postgres")]
    if crate::support::on_postgres() {
        // No file to compare byte for byte: the rows of every table instead.
        let before = pg_contents(&fx);
        refuse_bad_input(&fx.path);
        assert_eq!(pg_contents(&fx), before, "the database is unchanged");
        assert_eq!(fx.sql_i64("SELECT COUNT(*) FROM jobs"), 1);
        usage_errors_exit_2(&fx.path);
        return;
    }
    let path = fx.path.clone();
    let dir = fx._dir;
    drop(fx.queue);
    // Everything into the main file, the WAL emptied: the snapshot below is the whole
    // database, whoever closes the last connection later.
    let (busy, _, _): (i64, i64, i64) = raw_conn(&path)
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .expect("checkpoint");
    assert_eq!(busy, 0, "nothing else holds the database");
    let bytes = file_bytes(&path);

    refuse_bad_input(&path);
    assert_eq!(file_bytes(&path), bytes, "the database file is unchanged");
    assert_eq!(count_rows(&path, "jobs"), 1);

    usage_errors_exit_2(&path);
    drop(dir);
}

#[test]
fn a_missing_or_unusable_database_is_refused_and_never_created() {
    // Missing, garbage and directory paths, LITEJOBS_DB naming a file to create.
    if crate::support::sqlite_only() {
        return;
    }
    let dir = temp_dir();
    let missing = dir.path().join("typo.db");
    for args in [
        &["stats"][..],
        &["list"],
        &["show", "1"],
        &["dead", "list"],
        &[
            "dead", "requeue", "--type", "t", "--by", "me", "--reason", "x",
        ],
        &["dead", "discard", "1"],
        &["cancel", "1"],
        &["retry", "1"],
        &["pause", "q"],
        &["resume", "q"],
        &["prune", "--older-than", "7d"],
        &["check", "--max-dead", "0"],
        &["metrics"],
    ] {
        run(&missing, args).refused("does not exist");
        assert!(!missing.exists(), "{args:?} must not create the file");
    }
    // A refused enqueue does not create it either.
    run(&missing, &["enqueue", "t", "[1,"]).refused("not valid JSON");
    run(&missing, &["enqueue", "", "{}"]).refused("job_type must not be empty");
    assert!(!missing.exists());

    let no_db = Run::from(
        Command::new(BIN)
            .arg("stats")
            .env_remove("LITEJOBS_DB")
            .output()
            .expect("running the binary"),
    );
    no_db.refused("no database: pass --db FILE or set LITEJOBS_DB");

    // LITEJOBS_DB stands in for --db.
    let from_env = dir.path().join("env.db");
    let created = Run::from(
        Command::new(BIN)
            .arg("init")
            .env("LITEJOBS_DB", &from_env)
            .output()
            .expect("running the binary"),
    );
    created.ok();
    assert!(from_env.exists());

    let garbage = dir.path().join("garbage.db");
    std::fs::write(
        &garbage,
        b"this is not a database, it is a shopping list\n".repeat(100),
    )
    .expect("writing a garbage file");
    let bytes = file_bytes(&garbage);
    run(&garbage, &["stats"]).refused("not a SQLite database");
    run(&garbage, &["enqueue", "t", "{}"]).refused("not a SQLite database");
    assert_eq!(
        file_bytes(&garbage),
        bytes,
        "a refused file is left untouched"
    );

    run(dir.path(), &["stats"]).refused("is a directory");

    // A device or a FIFO is not taken for an empty database: SQLite would leave a
    // world-writable `-journal` beside it (in /dev, for /dev/null).
    let fifo = dir.path().join("pipe");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("running mkfifo");
    assert!(made.success());
    for (path, what) in [
        (Path::new("/dev/null"), "character device"),
        (&fifo, "FIFO"),
    ] {
        for args in [
            &["init"][..],
            &["work"],
            &["enqueue", "t", "{}"],
            &["stats"],
        ] {
            run(path, args).refused(&format!("is a {what}, not a database file"));
        }
    }
    let beside: Vec<_> = std::fs::read_dir(dir.path())
        .expect("listing the dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("pipe"))
        .collect();
    assert_eq!(beside, ["pipe"], "nothing was created beside the FIFO");
    let err = Queue::open(&fifo).expect_err("Queue::open refuses a FIFO");
    assert_eq!(err.kind(), litejobs::ErrorKind::NotADatabase, "{err}");
    let err = Queue::open_read_only(&fifo).expect_err("and so does a read-only open");
    assert_eq!(err.kind(), litejobs::ErrorKind::NotADatabase, "{err}");
}

/// A database in a folder this user may not enter (a systemd service's private state, for
/// an administrator who forgot `sudo`) is refused as such, not taken for a missing file
/// that `init` would create. Run as root (as `.ci/run` is): the test takes another user.
#[test]
fn a_database_this_user_may_not_reach_is_refused_as_such_not_as_missing() {
    if crate::support::on_postgres() {
        return;
    }
    let dir = temp_dir();
    let locked = dir.path().join("private");
    std::fs::create_dir(&locked).expect("a folder");
    let db = locked.join("app.db");
    run(&db, &["init"]).ok();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let whoami = Command::new("id").arg("-u").output().expect("id -u");
    if String::from_utf8_lossy(&whoami.stdout).trim() != "0" {
        eprintln!("skipped: taking another user needs root");
        return;
    }
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            BIN,
            "--db",
        ])
        .arg(&db)
        .arg("stats")
        .env_remove("LITEJOBS_DB")
        .output()
        .expect("setpriv (util-linux)");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("cannot look at the file"), "{said}");
    assert!(said.contains("Permission denied"), "{said}");
    assert!(!said.contains("does not exist"), "{said}");
}
