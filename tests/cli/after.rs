//! `enqueue --after ID` / `--after-any ID`: a job that waits for others, from the command
//! line; a missing job is refused with exit 2 and nothing written.

use super::run;
use crate::support::temp_dir;

#[test]
fn enqueue_after_holds_the_job_until_the_one_it_waits_for_and_refuses_a_missing_one() {
    let dir = temp_dir();
    let db = dir.path().join("jobs.db");
    let first = run(&db, &["enqueue", "charge", "{}"]).ok().stdout;
    let first = first.trim();
    let second = run(&db, &["enqueue", "ship", "{}", "--after", first])
        .ok()
        .stdout;
    let shown = run(&db, &["--json", "show", second.trim()]).json();
    assert_eq!(shown["job"]["waiting_for"], 1, "{shown}");
    let cleanup = run(&db, &["enqueue", "cleanup", "{}", "--after-any", first])
        .ok()
        .stdout;
    assert!(!cleanup.trim().is_empty());
    run(&db, &["enqueue", "ship", "{}", "--after", "424242"]).refused("424242");
    let listed = run(&db, &["--json", "list"]).json();
    assert_eq!(listed["jobs"].as_array().map(Vec::len), Some(3), "{listed}");
}
