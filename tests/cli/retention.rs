//! prune: retention of finished jobs and remembered keys, in chunks, with a checkpoint.

use super::*;

#[test]
fn prune_deletes_only_succeeded_and_cancelled_jobs_past_the_window_with_their_attempts() {
    let fx = Fx::new();
    let now = SystemClock.now_ms();
    let null_or = |v: Option<i64>| v.map_or("NULL".to_string(), |v| v.to_string());
    let insert = |status: &str, age_ms: i64| -> i64 {
        let at = now - age_ms;
        let finished = matches!(status, "succeeded" | "cancelled" | "dead").then_some(at);
        fx.sql_exec(&format!(
            "INSERT INTO jobs (job_type, payload, status, attempts, run_at, created_at, updated_at,
                               finished_at)
             VALUES ('t', '{{}}', '{status}', 2, {at}, {at}, {at}, {})",
            null_or(finished)
        ));
        let id = fx.sql_i64("SELECT MAX(id) FROM jobs");
        fx.sql_exec(&format!(
            "INSERT INTO job_attempts (job_id, attempt, finished_at, outcome, error)
             VALUES ({id}, 1, {at}, 'failed', 'first try failed')"
        ));
        id
    };
    let old_succeeded = insert("succeeded", 10 * DAY);
    let old_cancelled = insert("cancelled", 8 * DAY);
    let kept: Vec<i64> = vec![
        insert("succeeded", 6 * DAY),
        insert("dead", 30 * DAY),
        insert("failed", 30 * DAY),
        insert("queued", 30 * DAY),
        insert("running", 30 * DAY),
    ];
    fx.sql_exec(&format!(
        "INSERT INTO idempotency_keys (key, job_id, completed_at, expires_at) VALUES
            ('expired', {0}, {1}, {2}), ('remembered', {0}, {1}, {3}),
            ('old-but-live', {0}, {4}, {3})",
        old_succeeded,
        now - 10 * DAY,
        now - DAY,
        now + DAY,
        now - 40 * DAY
    ));

    let report = fx.run(&["prune", "--older-than", "7d", "--json"]).json();
    assert_has_fields(
        &report,
        &[
            "cutoff_ms",
            "jobs_deleted",
            "attempts_deleted",
            "keys_deleted",
            "transactions",
            "checkpoint",
        ],
    );
    assert_eq!(report["jobs_deleted"], json!(2));
    assert_eq!(report["attempts_deleted"], json!(2));
    assert_eq!(report["keys_deleted"], json!(1), "only the expired key");
    assert_eq!(report["checkpoint"]["busy"], json!(false));
    for gone in [old_succeeded, old_cancelled] {
        assert!(
            fx.queue.job(gone).expect("read").is_none(),
            "job {gone} pruned"
        );
    }
    for id in &kept {
        assert!(fx.queue.job(*id).expect("read").is_some(), "job {id} kept");
        assert_eq!(
            fx.queue.attempts(*id).expect("attempts").len(),
            1,
            "its history kept"
        );
    }
    let orphans: i64 =
        fx.sql_i64("SELECT COUNT(*) FROM job_attempts WHERE job_id NOT IN (SELECT id FROM jobs)");
    assert_eq!(orphans, 0);
    if !crate::support::on_postgres() {
        let wal = PathBuf::from(format!("{}-wal", fx.path.display()));
        assert_eq!(
            std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0),
            0,
            "TRUNCATE emptied the WAL"
        );
    }

    // Remembered keys have their own window.
    let keys_report = fx
        .run(&[
            "prune",
            "--older-than",
            "7d",
            "--keys-older-than",
            "30d",
            "--json",
        ])
        .json();
    assert_eq!(
        keys_report["keys_deleted"],
        json!(1),
        "old-but-live goes, remembered stays"
    );
    assert_eq!(
        (
            fx.sql_i64("SELECT COUNT(*) FROM idempotency_keys"),
            fx.sql_i64("SELECT COUNT(*) FROM idempotency_keys WHERE key = 'remembered'")
        ),
        (1, 1),
        "the keys left are [\"remembered\"]"
    );

    let human = fx
        .run(&["prune", "--older-than", "1d", "--checkpoint", "none"])
        .ok()
        .stdout;
    assert!(
        human.starts_with("deleted 1 succeeded/cancelled jobs"),
        "{human}"
    );
}

#[test]
fn prune_works_in_chunks_of_short_transactions() {
    let fx = Fx::new();
    let old = SystemClock.now_ms() - 30 * DAY;
    if crate::support::on_postgres() {
        fx.sql_exec(&format!(
            "INSERT INTO jobs (job_type, payload, status, updated_at, finished_at)
             SELECT 'bulk', '{{}}', 'succeeded', {old}, {old} FROM generate_series(1, 2345);
             INSERT INTO jobs (job_type, payload, status, updated_at)
             VALUES ('bulk', '{{}}', 'dead', {old})"
        ));
    } else {
        let mut conn = raw_conn(&fx.path);
        let tx = conn.transaction().expect("tx");
        for _ in 0..2_345 {
            tx.execute(
                "INSERT INTO jobs (job_type, payload, status, updated_at, finished_at)
                 VALUES ('bulk', '{}', 'succeeded', ?1, ?1)",
                [old],
            )
            .expect("insert");
        }
        tx.execute("INSERT INTO jobs (job_type, payload, status, updated_at) VALUES ('bulk', '{}', 'dead', ?1)", [old])
            .expect("insert dead");
        tx.commit().expect("commit");
    }
    let report = fx
        .run(&[
            "prune",
            "--older-than",
            "7d",
            "--chunk-size",
            "500",
            "--json",
        ])
        .json();
    assert_eq!(report["jobs_deleted"], json!(2_345));
    // Five job chunks (500 x 4 + 345) and one for the keys.
    assert_eq!(report["transactions"], json!(6));
    assert_eq!(
        fx.sql_i64("SELECT COUNT(*) FROM jobs"),
        1,
        "the dead job stays"
    );
}

/// On a terminal `prune` shows a progress bar on stderr (cleared at the end); piped, or with
/// `--json`, it prints only its report.
#[test]
fn prune_draws_a_progress_bar_on_a_terminal_only() {
    let fx = Fx::new();
    let old = SystemClock.now_ms() - 2 * 86_400_000;
    fx.sql_exec(&format!(
        "INSERT INTO jobs (job_type, payload, status, finished_at, created_at, updated_at, run_at)
         VALUES ('t', '{{}}', 'succeeded', {old}, {old}, {old}, {old});
         INSERT INTO jobs (job_type, payload) VALUES ('t', '{{}}')"
    ));
    let piped = fx.run(&["prune", "--older-than", "1d"]).ok();
    assert!(!piped.stderr.contains("pruning"), "{piped:#?}");
    assert!(
        piped.stdout.starts_with("deleted 1 succeeded"),
        "{piped:#?}"
    );
    // `script` runs the command on a pseudo-terminal and copies what it drew.
    let command = format!(
        "{} --db '{}' prune --older-than 1d",
        env!("CARGO_BIN_EXE_litejobs"),
        fx.path.display()
    );
    let tty = std::process::Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .output()
        .expect("script (bsdutils) runs the command on a pseudo-terminal");
    let drawn = String::from_utf8_lossy(&tty.stdout);
    assert!(tty.status.success(), "{drawn}");
    assert!(drawn.contains("pruning (jobs deleted)"), "{drawn}");
    assert!(drawn.contains("deleted 0 succeeded"), "{drawn}");
}
