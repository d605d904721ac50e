//! Huge error texts (rows written before errors were capped, or by another program) are shown
//! cut on every page and in the JSON API: one page never carries a whole one, and a group of
//! them can still be requeued from `/dead`.

use super::*;

/// Every page and API answer stays under this, whatever the errors hold.
const PAGE_MAX: usize = 512 * 1024;

/// Bytes of each stored error: far over anything a page shows.
fn huge() -> usize {
    crate::support::huge_error_bytes()
}

/// SQL for a text of `huge() - 4` `x`s then `TAIL`, on either backend.
fn huge_text_sql() -> String {
    crate::support::sql_huge_text(huge() - 4)
}

#[test]
fn huge_errors_are_cut_on_every_page_and_in_the_api() {
    let web = Web::open();
    let s = seed(web.queue());
    let text = huge_text_sql();
    web.env.sql_exec(&format!(
        "UPDATE jobs SET last_error = {text} WHERE last_error IS NOT NULL"
    ));
    web.env.sql_exec(&format!(
        "UPDATE job_attempts SET error = {text} WHERE error IS NOT NULL"
    ));
    let mut c = web.client();
    // Read cut as litejobs stores errors, saying how long they were.
    let note = format!("[... cut: {} bytes in all]", huge());
    for path in [
        "/".to_string(),
        "/jobs".into(),
        "/jobs?status=dead".into(),
        "/dead".into(),
        format!("/jobs/{}", s.dead),
        format!("/jobs/{}", s.failed),
        "/api/stats".into(),
        "/api/jobs".into(),
        "/api/dead".into(),
        format!("/api/jobs/{}", s.dead),
    ] {
        let page = c.get(&path).expect(200);
        assert!(
            page.body.len() < PAGE_MAX,
            "{path} is {} bytes with {}-byte errors",
            page.body.len(),
            huge()
        );
        assert!(!page.body.contains("TAIL"), "{path} shows a whole error");
    }
    // A job's own page and its JSON say how much was left out.
    let job = c.get(&format!("/jobs/{}", s.dead)).expect(200).body;
    assert!(job.contains(&note), "the job page says what was cut");
    let api = c.get(&format!("/api/jobs/{}", s.dead)).expect(200).json();
    let error = api["job"]["last_error"].as_str().expect("last_error");
    assert!(
        error.ends_with(&note),
        "{}",
        &error[error.len().saturating_sub(80)..]
    );
    for attempt in api["attempts"].as_array().expect("attempts") {
        let error = attempt["error"].as_str().expect("attempt error");
        assert!(error.len() < 9 * 1024, "an attempt's error is cut");
    }
}

#[test]
fn a_group_of_huge_errors_can_be_requeued_from_the_dead_page() {
    let web = Web::open();
    let s = seed(web.queue());
    web.env.sql_exec(&format!(
        "UPDATE jobs SET last_error = {} WHERE id = {}",
        huge_text_sql(),
        s.dead
    ));
    let mut c = web.client();
    let page = c.get("/dead").expect(200);
    // The group's bulk requeue form searches for the start of the error.
    let marker = "name=\"search\" value=\"";
    let start = page
        .body
        .find(marker)
        .unwrap_or_else(|| panic!("no bulk requeue form: {}", page.body))
        + marker.len();
    let end = page.body[start..].find('"').expect("closing quote") + start;
    let search = page.body[start..end].to_string();
    assert!(
        search.len() < 4096,
        "the form carries {} bytes",
        search.len()
    );
    let done = c.post_from(
        "/dead",
        "/dead/requeue",
        &[
            ("type", "t"),
            ("search", &search),
            ("by", "ops"),
            ("reason", "fixed"),
        ],
    );
    assert_eq!(done.status, 303, "{done:#?}");
    let dead = web.queue().job(s.dead).expect("job").expect("the dead job");
    assert!(dead.requeued_as.is_some(), "requeued: {dead:?}");
}
