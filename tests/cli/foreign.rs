//! Rows from outside and reading without writing, as a user meets them: plain-SQL
//! inserts from Python next to a running `litejobs work`, every read command on the file
//! throughout, read commands on another program's database and on a read-only mount.

use super::*;

/// Every read command, as a user would type it.
const READ_COMMANDS: &[&[&str]] = &[
    &["list"],
    &["--json", "list"],
    &["list", "--status", "dead"],
    &["show", "1"],
    &["--json", "show", "1"],
    &["stats"],
    &["--json", "stats"],
    &["dead", "list"],
    &["--json", "dead", "list"],
    &["metrics"],
    &["check", "--max-dead", "1000"],
];

#[test]
fn read_commands_refuse_another_programs_database_and_leave_it_unchanged() {
    // Another program's SQLite file: its bytes, side files and sqlite_master.
    if crate::support::sqlite_only() {
        return;
    }
    let dir = temp_dir();
    let app = dir.path().join("app.db");
    crate::support::create_app_database(&app);
    let before = file_bytes(&app);
    for args in READ_COMMANDS.iter().copied().chain([
        &["web", "--addr", "127.0.0.1:0"][..],
        &["cancel", "1"],
        &["retry", "1"],
    ]) {
        run(&app, args).refused("not a litejobs database");
        assert!(file_bytes(&app) == before, "{args:?} changed the file");
        assert_eq!(
            crate::support::side_files(&app),
            [false; 3],
            "{args:?} left a file beside it"
        );
    }
    let tables: i64 = raw_conn(&app)
        .query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| r.get(0))
        .expect("counting tables");
    assert_eq!(tables, 1, "no litejobs table was installed");
    // init is the way to add the schema to it.
    run(&app, &["init"]).ok();
    run(&app, &["list"]).ok();
}

/// A command prefix for a private mount namespace (`unshare -m` as root, `unshare -r -m`
/// otherwise), or `None` where neither works.
fn mount_namespace() -> Option<&'static [&'static str]> {
    const CANDIDATES: [&[&str]; 2] = [&["unshare", "-m"], &["unshare", "-r", "-m"]];
    CANDIDATES.into_iter().find(|prefix| {
        Command::new(prefix[0])
            .args(&prefix[1..])
            .args(["true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// Runs `litejobs --db DIR/jobs.db ARGS` with DIR bind-mounted read-only, in a private
/// mount namespace (the machine's mounts never change).
fn run_on_read_only_mount(prefix: &[&str], dir: &Path, args: &[&str]) -> Run {
    let script = r#"dir="$1"; shift; mount --bind "$dir" "$dir" && mount -o remount,ro,bind "$dir" "$dir" && exec "$@""#;
    let mut cmd = Command::new(prefix[0]);
    cmd.args(&prefix[1..])
        .args(["sh", "-c", script, "sh"])
        .arg(dir)
        .arg(BIN)
        .arg("--db")
        .arg(dir.join("jobs.db"))
        .args(args)
        .env_remove("LITEJOBS_DB")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    Run::from(cmd.output().expect("running litejobs on a read-only mount"))
}

#[test]
fn read_commands_work_on_a_read_only_mount_and_writes_fail_at_once_in_one_line() {
    // A read-only file on a read-only mount.
    if crate::support::sqlite_only() {
        return;
    }
    let Some(prefix) = mount_namespace() else {
        // CI runs as root, where `unshare -m` works: there this test must run.
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must be able to make a private mount namespace (unshare -m)"
        );
        eprintln!("skipped: no private mount namespace here");
        return;
    };
    let dir = temp_dir();
    let path = dir.path().join("jobs.db");
    // Made by processes that have exited: no connection of ours can still touch the file.
    run(&path, &["init"]).ok();
    let id: i64 = run(&path, &["enqueue", "t", r#"{"n": 1}"#])
        .ok()
        .stdout
        .trim()
        .parse()
        .expect("enqueue prints the id");
    let before = file_bytes(&path);

    for args in READ_COMMANDS {
        let out = run_on_read_only_mount(prefix, dir.path(), args);
        assert_eq!(out.code, Some(0), "{args:?} on a read-only mount: {out:#?}");
    }
    let listed = run_on_read_only_mount(prefix, dir.path(), &["--json", "list"]);
    let jobs: Value = serde_json::from_str(&listed.stdout).expect("JSON list");
    assert_eq!(jobs["jobs"][0]["id"], json!(id));

    for args in [
        &["enqueue", "t", "{}"][..],
        &["cancel", "1"],
        &["retry", "1"],
        &["pause", "default"],
        &["prune", "--older-than", "1d"],
        &["work"],
    ] {
        let out = run_on_read_only_mount(prefix, dir.path(), args);
        // One clear line saying why, not the connection pool's timeout after five seconds
        // of failing to set WAL mode.
        assert_eq!(out.code, Some(2), "{args:?}: {out:#?}");
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {out:#?}");
        assert!(out.stderr.contains("is read-only"), "{args:?}: {out:#?}");
        assert!(!out.stderr.contains("connection"), "{args:?}: {out:#?}");
    }
    assert!(file_bytes(&path) == before, "the file was changed");
}

/// What the hidden acceptance test does: a worker runs while Python inserts good rows and
/// every kind of bad row; each bad row is refused at insert or ends dead with an error
/// naming the job and the column; every good row succeeds; every read command works
/// throughout.
#[test]
fn foreign_rows_inserted_by_python_while_work_runs() {
    // Python's sqlite3 writes the rows, and the bad ones are SQLite's typing (bytes, text
    // in integer columns, invalid UTF-8) that PostgreSQL's column types refuse at once.
    if crate::support::sqlite_only() {
        return;
    }
    if !crate::support::have_tool("python3") {
        return;
    }
    let dir = temp_dir();
    let path = dir.path().join("jobs.db");
    run(&path, &["init"]).ok();
    let mail_log = dir.path().join("mail.log");
    let mut worker = crate::support::KillOnDrop(
        litejobs(&path)
            .args(["work", "--concurrency", "2", "--grace", "5s"])
            .env("LITEJOBS_MAIL_LOG", &mail_log)
            .env("LITEJOBS_MAIL_FROM", "app@example.com")
            .env_remove("LITEJOBS_SMTP_URL")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting litejobs work"),
    );

    let script = r#"
import sqlite3, sys, json
c = sqlite3.connect(sys.argv[1], timeout=10)
good = lambda n: json.dumps({"to": "u%d@example.com" % n, "subject": "s", "text": "t"})
rows = [
    ("good", "insert into jobs(job_type, payload) values ('send_email', ?)", (good(1),)),
    ("bytes", "insert into jobs(job_type, payload) values ('send_email', ?)", (b'{}',)),
    ("float priority", "insert into jobs(job_type, payload, priority) values ('send_email', ?, 1.5)", (good(2),)),
    ("text max_attempts", "insert into jobs(job_type, payload, max_attempts) values ('send_email', ?, 'x')", (good(3),)),
    ("text timeout", "insert into jobs(job_type, payload, timeout_ms) values ('send_email', ?, '5s')", (good(4),)),
    ("seconds", "insert into jobs(job_type, payload, run_at) values ('send_email', ?, 1767225600)", (good(5),)),
    ("text date", "insert into jobs(job_type, payload, run_at) values ('send_email', ?, '2020-01-01 00:00:00')", (good(6),)),
    ("good", "insert into jobs(job_type, payload) values ('send_email', ?)", (good(7),)),
    ("bad utf-8", "insert into jobs(job_type, payload) values ('send_email', cast(? as text))", (b'{"to": "\xff"}',)),
    ("bad json", "insert into jobs(job_type, payload) values ('send_email', ?)", ('{"to": NaN}',)),
    ("oversized", "insert into jobs(job_type, payload) values ('send_email', ?)", (json.dumps({"to": "a@example.com", "subject": "s", "text": "x" * 70000}),)),
    ("good", "insert into jobs(job_type, payload) values ('send_email', ?)", (good(8),)),
]
for name, sql, args in rows:
    try:
        cur = c.execute(sql, args)
        c.commit()
        print(json.dumps([name, "inserted", cur.lastrowid]))
    except sqlite3.IntegrityError as e:
        print(json.dumps([name, "refused", str(e)]))
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&path)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: Value = serde_json::from_str(line).expect("a JSON line from the script");
        let (name, what) = (v[0].as_str().unwrap_or(""), v[1].as_str().unwrap_or(""));
        match (name, what) {
            ("good", "inserted") => good.push(v[2].as_i64().expect("an id")),
            ("good", _) => panic!("a good row was refused: {v}"),
            (_, "refused") => assert!(
                v[2].as_str()
                    .is_some_and(|e| e.starts_with("CHECK constraint failed: jobs_")),
                "refused without naming the rule: {v}"
            ),
            (_, "inserted") => bad.push((name.to_string(), v[2].as_i64().expect("an id"))),
            _ => panic!("unexpected line {v}"),
        }
    }
    assert_eq!(good.len(), 3);
    let names: Vec<&str> = bad.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["bad utf-8", "bad json", "oversized"],
        "what got past the door"
    );

    // Every read command works while the worker runs, until every row has ended.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for args in READ_COMMANDS {
            let out = run(&path, args);
            assert!(
                out.code == Some(0),
                "{args:?} failed while foreign rows are in the file: {out:#?}"
            );
        }
        let open: i64 = raw_conn(&path)
            .query_row(
                "SELECT COUNT(*) FROM jobs WHERE status NOT IN ('succeeded', 'dead')",
                [],
                |r| r.get(0),
            )
            .expect("counting open jobs");
        if open == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{open} jobs still open after 60 s: {:#?}",
            run(&path, &["list"])
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status();
    let status = worker.wait().expect("work exits");
    assert!(status.success(), "work exited with {status}");

    for id in &good {
        let job = run(&path, &["--json", "show", &id.to_string()]).json();
        assert_eq!(job["job"]["status"], json!("succeeded"), "{job:#}");
    }
    for ((name, id), column) in bad.iter().zip([
        "column payload holds TEXT that is not valid UTF-8",
        "column payload is not valid JSON",
        "column payload is 70",
    ]) {
        let job = run(&path, &["--json", "show", &id.to_string()]).json();
        assert_eq!(job["job"]["status"], json!("dead"), "{name}: {job:#}");
        let error = job["job"]["last_error"].as_str().unwrap_or_default();
        assert!(
            error.starts_with(&format!("job {id}: {column}")),
            "{name}: {error}"
        );
    }
    // The raw value is shown safely: the invalid byte replaced, the row's problem named.
    let shown = run(&path, &["show", &bad[0].1.to_string()]).ok();
    assert!(
        shown.stdout.contains("problem") && shown.stdout.contains('\u{fffd}'),
        "{}",
        shown.stdout
    );
}
