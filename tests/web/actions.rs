//! The actions: each POST changes the database the way its library function does, answers
//! 303 to the page to look at next with a flash message, and a refused action (wrong status,
//! no reason) changes nothing.

use litejobs::{JobRecord, JobStatus};

use super::*;

fn job(web: &Web, id: i64) -> JobRecord {
    web.queue()
        .job(id)
        .expect("reading the job")
        .unwrap_or_else(|| panic!("job {id} exists"))
}

/// Follows a 303 and returns the page, asserting its flash message says `says`.
fn follow(c: &mut Client, page: Page, says: &str) -> Page {
    let location = page.redirect().to_string();
    let next = c.get(&location).expect(200);
    assert!(
        next.body.contains("class=\"flash flash-ok\"") && next.body.contains(says),
        "flash {says:?} on {location}: {}",
        next.body
    );
    next
}

#[test]
fn retry_makes_a_waiting_job_due_now_and_gives_a_dead_one_another_attempt() {
    let web = Web::open();
    let s = seed(web.queue());
    let mut c = web.client();
    let from = format!("/jobs/{}", s.failed);
    assert!(job(&web, s.failed).run_at > web.queue().now_ms());
    let page = c.post_from(&from, &format!("/jobs/{}/retry", s.failed), &[]);
    follow(&mut c, page, &format!("Job {} is due now.", s.failed));
    assert_eq!(job(&web, s.failed).run_at, web.queue().now_ms());

    let page = c.post_from(&from, &format!("/jobs/{}/retry", s.dead), &[]);
    assert_eq!(
        page.redirect().split('?').next(),
        Some(&*format!("/jobs/{}", s.dead))
    );
    let dead = job(&web, s.dead);
    assert_eq!(dead.status, JobStatus::Failed);
    assert_eq!(dead.run_at, web.queue().now_ms());
    assert!(
        dead.max_attempts > dead.attempts,
        "one more attempt at least"
    );
}

#[test]
fn cancel_cancels_a_waiting_job_and_refuses_a_finished_one() {
    let web = Web::open();
    let s = seed(web.queue());
    let mut c = web.client();
    let page = c.post_from("/", &format!("/jobs/{}/cancel", s.queued), &[]);
    follow(
        &mut c,
        page,
        &format!("Job {} cancelled by web dashboard.", s.queued),
    );
    assert_eq!(job(&web, s.queued).status, JobStatus::Cancelled);

    let before = job(&web, s.succeeded);
    let refused = c
        .post_from("/", &format!("/jobs/{}/cancel", s.succeeded), &[])
        .expect(409);
    assert!(
        refused
            .body
            .contains("only queued, failed or running jobs can be cancelled"),
        "{}",
        refused.body
    );
    assert_eq!(job(&web, s.succeeded), before, "nothing changed");
    c.post_from("/", "/jobs/999999/cancel", &[]).expect(404);
}

/// A running job's page offers the cancel form, which asks for a reason; the cancel keeps
/// who and why, and the page then says so (the button is gone).
#[test]
fn a_running_job_is_cancelled_from_its_page_with_the_reason_given() {
    let web = Web::open();
    let s = seed(web.queue());
    let now = web.queue().now_ms();
    web.env.sql_exec(&format!(
        "UPDATE jobs SET status = 'running', attempts = 1, locked_by = 'w1', started_at = {now},
                locked_until = {} WHERE id = {}",
        now + 600_000,
        s.queued
    ));
    let mut c = web.client();
    let from = format!("/jobs/{}", s.queued);
    let page = c.get(&from).expect(200);
    assert!(
        page.body
            .contains(&format!("action=\"/jobs/{}/cancel\"", s.queued))
            && page.body.contains("name=\"reason\" required"),
        "the cancel form asks for a reason: {}",
        page.body
    );
    assert!(
        page.body.contains("Cancel this running job?"),
        "{}",
        page.body
    );
    let page = c.post_from(
        &from,
        &format!("/jobs/{}/cancel", s.queued),
        &[("reason", "wrong <list>"), ("by", "ana")],
    );
    let shown = follow(
        &mut c,
        page,
        &format!("Job {} cancelled by ana: wrong &lt;list&gt;.", s.queued),
    );
    let cancelled = job(&web, s.queued);
    assert_eq!(cancelled.status, JobStatus::Cancelled);
    assert_eq!(
        (
            cancelled.cancelled_by.as_deref(),
            cancelled.cancel_reason.as_deref()
        ),
        (Some("ana"), Some("wrong <list>"))
    );
    assert_eq!(cancelled.locked_by, None);
    assert_eq!(
        shown
            .body
            .matches("<dt>Cancelled</dt><dd>by ana: wrong &lt;list&gt;</dd>")
            .count(),
        1,
        "who cancelled and why, once: {}",
        shown.body
    );
    assert!(
        shown.body.contains("cancelled by ana: wrong &lt;list&gt;"),
        "the attempt's row says who and why: {}",
        shown.body
    );
    assert!(!shown.body.contains("id=\"cancel-form\""), "{}", shown.body);
    let too_long = "x".repeat(501);
    c.post_from(
        "/",
        &format!("/jobs/{}/cancel", s.failed),
        &[("reason", &too_long)],
    )
    .expect(400);
    assert_eq!(
        job(&web, s.failed).status,
        JobStatus::Failed,
        "nothing changed"
    );
}

#[test]
fn requeue_makes_a_new_job_and_marks_the_dead_one() {
    let web = Web::open();
    let s = seed(web.queue());
    let mut c = web.client();
    let from = format!("/jobs/{}", s.dead);

    // No reason: refused, nothing changes.
    let before = job(&web, s.dead);
    let refused = c
        .post_from(
            &from,
            &format!("/jobs/{}/requeue", s.dead),
            &[("reason", " ")],
        )
        .expect(400);
    assert!(refused.body.contains("needs a reason"));
    assert_eq!(job(&web, s.dead), before);
    let jobs_before = web.env.count_jobs();

    let page = c.post_from(
        &from,
        &format!("/jobs/{}/requeue", s.dead),
        &[("reason", "crm endpoint fixed"), ("by", "ada@example.com")],
    );
    let location = page.redirect().to_string();
    let new_id: i64 = location
        .trim_start_matches("/jobs/")
        .split('?')
        .next()
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("redirect to the new job: {location}"));
    let shown = follow(&mut c, page, &format!("requeued as job {new_id}"));
    assert!(shown
        .body
        .contains("<span class=\"badge badge-queued\">queued</span>"));
    assert_eq!(web.env.count_jobs(), jobs_before + 1);

    let dead = job(&web, s.dead);
    assert_eq!(dead.status, JobStatus::Dead);
    assert_eq!(dead.requeued_as, Some(new_id));
    assert_eq!(dead.requeued_by.as_deref(), Some("ada@example.com"));
    assert_eq!(dead.requeue_reason.as_deref(), Some("crm endpoint fixed"));
    let new = job(&web, new_id);
    assert_eq!(new.status, JobStatus::Queued);
    assert_eq!(new.attempts, 0);
    assert_eq!(new.payload, before.payload);

    // Twice is refused: it was requeued already.
    c.post_from(
        &from,
        &format!("/jobs/{}/requeue", s.dead),
        &[("reason", "again")],
    )
    .expect(409);
    assert_eq!(web.env.count_jobs(), jobs_before + 1);
    // The old job's page links to the new one and offers no requeue any more.
    let old = c.get(&from).expect(200).body;
    assert!(old.contains(&format!("href=\"/jobs/{new_id}\"")));
    assert!(!old.contains("name=\"reason\""));
}

#[test]
fn discard_deletes_a_dead_job_only() {
    let web = Web::open();
    let s = seed(web.queue());
    let mut c = web.client();
    c.post_from("/", &format!("/jobs/{}/discard", s.failed), &[])
        .expect(409);
    assert!(web.queue().job(s.failed).expect("read").is_some());
    let page = c.post_from("/", &format!("/jobs/{}/discard", s.dead), &[]);
    assert!(page.redirect().starts_with("/dead?"));
    follow(&mut c, page, &format!("Dead job {} discarded.", s.dead));
    assert!(web.queue().job(s.dead).expect("read").is_none());
}

#[test]
fn bulk_requeue_takes_the_dead_jobs_of_one_type_and_error() {
    let web = Web::open();
    let q = web.queue();
    let dead = |job_type: &str, error: &str| {
        q.enqueue(NewJob::new(job_type, json!({"do": "dead", "error": error})))
            .expect("enqueue")
    };
    let refused: Vec<i64> = (0..3)
        .map(|_| dead("t", "connect error: connection refused (crm.example:443)"))
        .collect();
    let gone = dead("t", "HTTP 410 Gone");
    let worker = scripted_worker(q).handler("u", |_: &JobContext| -> Result<(), JobError> {
        Err(JobError::permanent(
            "connect error: connection refused (crm.example:443)",
        ))
    });
    let other_type = q.enqueue(NewJob::new("u", json!({}))).expect("enqueue");
    testing::drain(&worker).expect("drain");

    let mut c = web.client();
    let page = c.get("/dead").expect(200);
    assert!(page.body.contains("Requeue dead t</button>"));
    assert!(page.body.contains("Requeue dead u</button>"));
    let csrf = page.csrf();
    let page = c.post_raw(
        "/dead/requeue",
        &[
            ("csrf", &csrf),
            ("type", "t"),
            (
                "search",
                "connect error: connection refused (crm.example:443)",
            ),
            ("reason", "crm is back"),
            ("by", "web dashboard"),
        ],
    );
    follow(&mut c, page, "Requeued 3 dead t job(s)");
    for id in &refused {
        let j = job(&web, *id);
        assert!(j.requeued_as.is_some(), "job {id} requeued");
        assert_eq!(j.requeue_reason.as_deref(), Some("crm is back"));
    }
    assert_eq!(job(&web, gone).requeued_as, None, "another error stays");
    assert_eq!(
        job(&web, other_type).requeued_as,
        None,
        "another type stays"
    );

    // Without a reason nothing happens.
    c.post_from("/dead", "/dead/requeue", &[("type", "u")])
        .expect(400);
    assert_eq!(job(&web, other_type).requeued_as, None);
}

/// Errors that differ only in an id are one group on the dead page, shown by the line that
/// matters, linked to its jobs; its bulk requeue takes the group and nothing else.
#[test]
fn the_dead_page_groups_errors_by_fingerprint_and_requeues_a_group() {
    let web = Web::open();
    let q = web.queue();
    let dead = |error: String| {
        q.enqueue(NewJob::new("t", json!({"do": "dead", "error": error})))
            .expect("enqueue")
    };
    let refused: Vec<i64> = (0..3)
        .map(|i| {
            dead(format!(
                "exit 1: INFO syncing order {i}\nConnectionError: [Errno 111] Connection refused"
            ))
        })
        .collect();
    let other = dead("order 9 has no customer".to_string());
    testing::drain(&scripted_worker(q)).expect("drain");

    let mut c = web.client();
    let page = c.get("/dead").expect(200);
    let group = "exit 1: ConnectionError: [Errno 111] Connection refused";
    assert_eq!(
        page.body
            .matches(&format!("name=\"group\" value=\"{group}\""))
            .count(),
        1,
        "one group (one bulk requeue) for three texts"
    );
    assert!(
        !page.body.contains(">exit 1: INFO syncing order"),
        "the tables show the line that matters, not the log lines before it (the whole text
         is the cells' hover title)"
    );
    let link =
        "/dead?group=exit%201%3A%20ConnectionError%3A%20%5BErrno%20111%5D%20Connection%20refused";
    assert!(
        page.body.contains(&link.replace('&', "&amp;")),
        "{}",
        page.body
    );
    let listed = c.get(link).expect(200).body;
    for id in &refused {
        assert!(
            listed.contains(&format!("href=\"/jobs/{id}\"")),
            "job {id} listed"
        );
    }
    assert!(!listed.contains(&format!("href=\"/jobs/{other}\"")));

    let page = c.post_raw(
        "/dead/requeue",
        &[
            ("csrf", &page.csrf()),
            ("type", "t"),
            ("group", group),
            ("reason", "database back"),
            ("by", "web dashboard"),
        ],
    );
    follow(&mut c, page, "Requeued 3 dead t job(s)");
    for id in &refused {
        assert!(job(&web, *id).requeued_as.is_some(), "job {id} requeued");
    }
    assert_eq!(job(&web, other).requeued_as, None, "another group stays");
}

#[test]
fn pause_and_resume_switch_a_queue_for_every_process() {
    let web = Web::open();
    web.queue()
        .enqueue(NewJob::new("t", json!({})).queue("web hooks"))
        .expect("enqueue");
    let mut c = web.client();
    let page = c.post_from("/", "/queues/web%20hooks/pause", &[]);
    follow(&mut c, page, "Queue web hooks paused");
    assert_eq!(
        web.queue().paused_queues().expect("paused"),
        vec!["web hooks".to_string()]
    );
    // Another process on the file sees it.
    assert_eq!(
        web.env.open_another().paused_queues().expect("paused"),
        vec!["web hooks".to_string()]
    );
    let overview = c.get("/").expect(200).body;
    assert!(overview.contains("action=\"/queues/web%20hooks/resume\""));
    let page = c.post_from("/", "/queues/web%20hooks/resume", &[]);
    follow(&mut c, page, "Queue web hooks resumed.");
    assert!(web.queue().paused_queues().expect("paused").is_empty());
}
