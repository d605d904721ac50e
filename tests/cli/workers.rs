//! `litejobs workers`: who is working, from the registry; `stats` and `check` naming the
//! waiting job types no live worker serves; `enqueue` warning of a type none serves.

use super::*;

#[test]
fn workers_stats_check_and_enqueue_say_who_serves_what_waits() {
    let fx = Fx::new();
    fx.ago(10 * MINUTE);
    fx.enqueue(NewJob::new("sned_receipt", json!({})));
    fx.ago(0);
    let worker = Worker::builder(&fx.queue)
        .handler("send_receipt", |_: &JobContext| -> Result<(), JobError> {
            Ok(())
        })
        .reap_interval(Duration::from_secs(3600))
        .start()
        .expect("start");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while fx.queue.workers().expect("workers").is_empty() {
        assert!(std::time::Instant::now() < deadline, "the worker registers");
        std::thread::sleep(Duration::from_millis(2));
    }

    let table = fx.run(&["workers"]).ok().stdout;
    let row = table
        .lines()
        .find(|l| l.starts_with(worker.id()))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains(" alive ") && row.contains("default×"), "{row}");
    assert!(row.contains("send_receipt"), "{row}");
    let json = fx.run(&["workers", "--json"]).json();
    let listed = &json["workers"][0];
    assert_eq!(listed["id"], json!(worker.id()));
    assert_eq!(listed["alive"], json!(true));
    assert_eq!(listed["job_types"], json!(["send_receipt"]));

    let unserved = "1 live worker on ";
    let stats = fx.run(&["stats"]).ok().stdout;
    let line = stats
        .lines()
        .find(|l| l.starts_with("workers"))
        .unwrap_or_else(|| panic!("{stats}"));
    assert!(
        line.contains(unserved)
            && line.ends_with("none serves sned_receipt in queue default (1 waiting)"),
        "{line}"
    );
    let check = fx.run(&["check", "--max-oldest-age", "1m"]);
    assert_eq!(check.code, Some(1), "{check:#?}");
    assert!(
        check
            .stdout
            .contains("none serves sned_receipt in queue default (1 waiting)"),
        "{check:#?}"
    );
    let typo = fx.run(&["enqueue", "sned_receipt", "{}"]).ok();
    assert!(
        typo.stderr.contains("none serves that type (a typo?)"),
        "{typo:#?}"
    );
    let fine = fx.run(&["enqueue", "send_receipt", "{}"]).ok();
    assert!(!fine.stderr.contains("waits for a worker"), "{fine:#?}");

    worker.shutdown(Duration::from_secs(10)).expect("shutdown");
    let none = fx.run(&["workers"]).ok().stdout;
    assert_eq!(
        none.trim(),
        "no live worker; 1 stopped or gone in the last day: --all shows them"
    );
    let all = fx.run(&["workers", "--all"]).ok().stdout;
    assert!(all.contains(" stopped "), "{all}");
}
