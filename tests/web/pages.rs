//! Every page and API route: status codes, filters, keyset pages, masking, escaping, and the
//! API's JSON against the command line's `--json`.

use std::collections::BTreeSet;

use litejobs::maintenance::Scheduler;
use litejobs::JobStatus;

use super::*;

#[test]
fn every_route_answers_with_its_status_code() {
    let web = Web::open();
    let s = seed(web.queue());
    let mut c = web.client();
    for path in [
        "/".to_string(),
        "/jobs".into(),
        "/jobs?status=dead&type=t&queue=default&search=refused&page=1".into(),
        format!("/jobs/{}", s.dead),
        "/dead".into(),
        "/dead?type=t&search=connect".into(),
        "/schedules".into(),
        "/workers".into(),
    ] {
        let page = c.get(&path).expect(200);
        assert_eq!(
            page.header("content-type"),
            Some("text/html; charset=utf-8"),
            "{path}"
        );
        assert!(page.body.contains("<nav>"), "{path} has the layout");
    }
    for path in ["/api/stats", "/api/jobs", "/api/dead", "/api/overview"] {
        let page = c.get(path).expect(200);
        assert_eq!(page.header("content-type"), Some("application/json"));
        page.json();
    }
    let show = c.get(&format!("/api/jobs/{}", s.dead)).expect(200).json();
    assert_eq!(show["job"]["id"], json!(s.dead));
    // An API route that does not exist is not found, whatever the method.
    for path in ["/api/nonexistent", "/api/stats/x", "/api/jobs/1/extra"] {
        c.get(path).expect(404);
    }

    let metrics = c.get("/metrics").expect(200);
    assert!(metrics
        .body
        .contains("litejobs_jobs{queue=\"default\",job_type=\"t\",status=\"dead\"} 1"));
    let css = c.get("/assets/app.css").expect(200);
    assert_eq!(css.header("content-type"), Some("text/css; charset=utf-8"));
    let js = c.get("/assets/app.js").expect(200);
    assert_eq!(
        js.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );

    c.get("/nope").expect(404);
    c.get("/assets/nope.css").expect(404);
    c.get("/jobs/999999").expect(404);
    c.get("/jobs/abc").expect(404);
    let missing = c.get("/api/jobs/999999").expect(404).json();
    assert_eq!(missing["error"], json!("no job with id 999999"));
    let bad = c.get("/jobs?status=done").expect(400);
    assert!(bad.body.contains("unknown status"), "{}", bad.body);
    c.get("/jobs?before=yesterday").expect(400);
    let bad = c.get("/api/jobs?limit=0").expect(400).json();
    assert!(
        bad["error"].as_str().unwrap_or("").contains("limit"),
        "{bad}"
    );
    // A route used with the wrong method.
    let wrong = c.post_from("/", "/jobs", &[]).expect(405);
    assert_eq!(wrong.header("allow"), Some("GET, HEAD"));
    let wrong = c.get(&format!("/jobs/{}/retry", s.failed)).expect(405);
    assert_eq!(wrong.header("allow"), Some("POST"));
}

#[test]
fn filters_narrow_the_jobs_list() {
    let web = Web::open();
    let q = web.queue();
    let s = seed(q);
    let mail = q
        .enqueue(NewJob::new("send_email", json!({})).queue("mail"))
        .expect("enqueue");
    let mut c = web.client();
    let ids =
        |c: &mut Client, query: &str| listed_ids(&c.get(&format!("/jobs{query}")).expect(200).body);

    assert_eq!(
        ids(&mut c, ""),
        vec![mail, s.queued, s.dead, s.failed, s.succeeded]
    );
    assert_eq!(ids(&mut c, "?status=dead"), vec![s.dead]);
    assert_eq!(ids(&mut c, "?status=failed"), vec![s.failed]);
    assert_eq!(ids(&mut c, "?status=succeeded"), vec![s.succeeded]);
    assert_eq!(ids(&mut c, "?type=send_email"), vec![mail]);
    assert_eq!(ids(&mut c, "?queue=mail"), vec![mail]);
    assert_eq!(
        ids(&mut c, "?queue=default&type=t&status=queued"),
        vec![s.queued]
    );
    // Search matches the last error, ignoring case.
    assert_eq!(ids(&mut c, "?search=CONNECTION+refused"), vec![s.dead]);
    assert_eq!(ids(&mut c, "?search=503"), vec![s.failed]);
    assert_eq!(ids(&mut c, "?search=nothing+like+it"), Vec::<i64>::new());
    // Empty filter boxes (a submitted form) mean no filter.
    assert_eq!(
        ids(&mut c, "?status=&type=&queue=&search=").len(),
        5,
        "blank filters are ignored"
    );
    // The form keeps what was asked.
    let page = c.get("/jobs?status=dead&search=refused").expect(200);
    assert!(page.body.contains("<option selected>dead</option>"));
    assert!(page.body.contains("name=\"search\" value=\"refused\""));

    // The dead page shows dead jobs awaiting a person, with the same filters.
    let dead = c.get("/dead?search=refused").expect(200);
    assert_eq!(listed_ids(&dead.body), vec![s.dead]);
    assert!(dead.body.contains("connect error: connection refused"));
    let none = c.get("/dead?type=send_email").expect(200);
    assert!(listed_ids(&none.body).is_empty());

    // The API takes the same filters.
    let api = c.get("/api/jobs?status=failed").expect(200).json();
    let api_ids: Vec<i64> = api["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["id"].as_i64())
        .collect();
    assert_eq!(api_ids, vec![s.failed]);
    let api = c.get("/api/jobs?limit=2").expect(200).json();
    assert_eq!(api["jobs"].as_array().map(Vec::len), Some(2));
}

#[test]
fn keyset_pages_walk_every_job_exactly_once() {
    let web = Web::open();
    let q = web.queue();
    let jobs: Vec<NewJob> = (0..130)
        .map(|i| NewJob::new(if i % 2 == 0 { "even" } else { "odd" }, json!({"i": i})))
        .collect();
    let ids = q.enqueue_batch(jobs).expect("enqueue");
    let mut c = web.client();
    for (query, want) in [
        ("", ids.clone()),
        (
            "?type=even",
            ids.iter().copied().step_by(2).collect::<Vec<i64>>(),
        ),
    ] {
        let mut seen = Vec::new();
        let mut next = Some(format!("/jobs{query}"));
        let mut pages = 0;
        while let Some(path) = next.take() {
            pages += 1;
            assert!(pages <= 10, "the pages end");
            let page = c.get(&path).expect(200);
            let page_ids = listed_ids(&page.body);
            assert!(page_ids.len() <= 50, "at most 50 per page");
            assert!(
                page.body.contains(&format!("page {pages} ")),
                "page number shown"
            );
            seen.extend(page_ids);
            next = page.body.find("rel=\"next\"").map(|i| {
                let start = page.body[..i].rfind("href=\"").expect("href") + 6;
                let end = page.body[start..].find('"').expect("quote") + start;
                page.body[start..end].replace("&amp;", "&")
            });
            if let Some(link) = &next {
                assert!(link.contains("before="), "keyset link: {link}");
                assert!(!link.contains("offset"), "{link}");
                if !query.is_empty() {
                    assert!(link.contains("type=even"), "filters kept: {link}");
                }
            }
        }
        let mut want = want;
        want.reverse();
        assert_eq!(seen, want, "newest first, each once ({query})");
        let unique: BTreeSet<i64> = seen.iter().copied().collect();
        assert_eq!(unique.len(), seen.len());
    }
}

/// A webhook body written as JSON text is masked inside the string,
/// on the job page and in the JSON API.
#[test]
fn json_text_bodies_are_masked_on_the_job_page_and_in_the_api() {
    let web = Web::open();
    let body = json!({"event": "user.created", "auth": {"aws_secret_access_key": "AKIAsecret"}});
    let id = web
        .queue()
        .enqueue(NewJob::new(
            "deliver_webhook",
            json!({"endpoint_id": 1, "event_id": "evt_1", "body": body.to_string()}),
        ))
        .expect("enqueue");
    let mut c = web.client();
    for path in [
        format!("/jobs/{id}"),
        "/jobs".into(),
        format!("/api/jobs/{id}"),
    ] {
        let page = c.get(&path).expect(200).body;
        assert!(!page.contains("AKIAsecret"), "{path} shows the key: {page}");
    }
    let api = c.get(&format!("/api/jobs/{id}")).expect(200).json();
    assert_eq!(
        api["job"]["payload"]["body"],
        json!(r#"{"auth":"[masked]","event":"user.created"}"#)
    );
}

#[test]
fn hostile_job_data_is_shown_as_text() {
    const XSS: &str = "<script>alert(1)</script>";
    let web = Web::open();
    let q = web.queue();
    let id = q
        .enqueue(NewJob::new(
            "t",
            json!({"do": "dead", "error": XSS, "note": XSS, "\"><img src=x onerror=alert(2)>": 1,
                   "password": "hunter2"}),
        ))
        .expect("enqueue");
    let odd = q
        .enqueue(
            NewJob::new("<img src=x onerror=alert(3)>", json!({}))
                .queue("q\"><script>alert(4)</script>"),
        )
        .expect("enqueue");
    testing::drain(&scripted_worker(q)).expect("drain");
    let mut c = web.client();
    for path in [
        "/".to_string(),
        "/jobs".into(),
        format!("/jobs/{id}"),
        format!("/jobs/{odd}"),
        "/dead".into(),
    ] {
        let body = c.get(&path).expect(200).body;
        assert!(
            !body.contains("<script>alert"),
            "{path} runs no script: {body}"
        );
        assert!(!body.contains("<img src=x"), "{path} has no injected tag");
        assert!(!body.contains("hunter2"), "{path} masks the password");
    }
    let detail = c.get(&format!("/jobs/{id}")).expect(200).body;
    assert!(
        detail.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "the error and payload are shown, escaped: {detail}"
    );
    assert!(detail.contains("[masked]"));
    let list = c.get("/jobs").expect(200).body;
    assert!(list.contains("&lt;img src=x onerror=alert(3)&gt;"));
    assert!(list.contains("q&quot;&gt;&lt;script&gt;alert(4)&lt;/script&gt;"));
    // The JSON API carries the data as JSON strings (masked), never as markup.
    let api = c.get(&format!("/api/jobs/{id}")).expect(200).json();
    assert_eq!(api["job"]["payload"]["note"], json!(XSS));
    assert_eq!(api["job"]["payload"]["password"], json!("[masked]"));
    assert_eq!(api["job"]["last_error"], json!(XSS));
    // A flash message cannot be made up in a link.
    let forged = c
        .get("/?flash=%3Cscript%3Ealert(5)%3C%2Fscript%3E&flash_kind=ok&flash_sig=x")
        .expect(200);
    assert!(!forged.body.contains("alert(5)"), "unsigned flash ignored");
}

#[test]
fn the_overview_counts_queues_and_follows_pauses() {
    let web = Web::open();
    let q = web.queue();
    let s = seed(q);
    q.enqueue(NewJob::new("send_email", json!({})).queue("mail"))
        .expect("enqueue");
    web.env.clock.advance(Duration::from_secs(90));
    let mut c = web.client();
    let page = c.get("/").expect(200).body;
    assert!(page.contains("data-live=\"overview\""));
    assert!(page.contains("<a href=\"/jobs?queue=mail\">mail</a>"));
    assert!(
        page.contains("<svg class=\"chart\""),
        "activity charts drawn"
    );
    assert!(
        page.contains("connect error: connection refused"),
        "top errors"
    );

    let live = c.get("/api/overview").expect(200).json();
    let v = &live["values"];
    // Due now: the delayed job (60 s, now past), the mail job; the failed retry is an hour out.
    assert_eq!(v["due_now"], json!("2"));
    assert_eq!(v["scheduled"], json!("1"));
    assert_eq!(v["dead"], json!("1"));
    assert_eq!(v["q:default:dead"], json!("1"));
    assert_eq!(v["q:default:succeeded"], json!("1"));
    assert_eq!(v["q:mail:queued"], json!("1"));
    assert_eq!(v["q:mail:oldest"], json!("1m 30s"));
    assert_eq!(live["at_ms"], json!(q.now_ms()));
    assert!(live["next_poll_ms"].as_i64() >= Some(5000), "{live}");
    assert!(page.contains("data-poll=\""), "the first poll's delay");
    // Every live figure is on the page under its key, with the same text.
    for (key, value) in v.as_object().expect("values") {
        let marker = format!("data-key=\"{key}\">{}</span>", value.as_str().unwrap_or(""));
        assert!(page.contains(&marker), "{marker} on the page");
    }
    let _ = s;

    // Pausing changes the shape (rows and buttons): the script reloads the page then.
    let before = live["shape"].clone();
    q.pause_queue("reports").expect("pause");
    web.env.clock.advance(Duration::from_secs(2));
    // The figures are cached for a second of wall time; wait it out, bounded.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let after = loop {
        let shape = c.get("/api/overview").expect(200).json()["shape"].clone();
        if shape != before || std::time::Instant::now() > deadline {
            break shape;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_ne!(after, before);
    assert!(after.as_str().unwrap_or("").contains("reports=true"));
    let page = c.get("/").expect(200).body;
    assert!(page.contains("<span class=\"badge badge-paused\">paused</span>"));
    assert!(page.contains("action=\"/queues/reports/resume\""));
}

#[test]
fn schedules_and_report_runs_are_listed() {
    let web = Web::open();
    let q = web.queue();
    let nightly = Periodic::every(
        Duration::from_secs(3600),
        NewJob::new("nightly_report", json!({})),
    )
    .expect("periodic");
    let scheduler = Scheduler::new(q, vec![nightly]).expect("scheduler");
    scheduler.tick().expect("tick");
    web.env.clock.advance(Duration::from_secs(3600));
    let slot = scheduler.tick().expect("tick");
    assert_eq!(slot.enqueued.len(), 1);
    let run = q
        .request_report("monthly_sales", json!({"chunks": 6, "slow_page": 3}))
        .expect("report");
    let worker = Worker::builder(q).report("monthly_sales", Sales);
    testing::drain(&worker).expect("drain");
    let progress = q.report_run(run).expect("run").expect("exists");
    assert_eq!((progress.chunks_done, progress.chunks_total), (5, 6));
    let kept = Periodic::parse(
        "0 6 * * 1",
        NewJob::new("weekly_digest", json!({"token": "s3cr3t"})).queue("mail"),
    )
    .expect("cron")
    .named("digest");
    q.add_schedule(&kept)
        .expect("a schedule kept in the database");

    let mut c = web.client();
    let page = c.get("/schedules").expect(200).body;
    assert!(page.contains("nightly_report"));
    assert!(page.contains("in a worker's code"), "{page}");
    assert!(
        page.contains("<code>weekly_digest</code> in mail"),
        "the kept schedule's job: {page}"
    );
    assert!(!page.contains("s3cr3t"), "no payload on the page");
    assert!(page.contains("every 3600000 ms"), "{page}");
    assert!(page.contains(&format!("href=\"/jobs/{}\"", slot.enqueued[0].job_id)));
    assert!(page.contains("monthly_sales"));
    assert!(page.contains("5 of 6 chunks"));
    assert!(page.contains("<progress max=\"1000\" value=\"833\">"));
}

#[test]
fn job_detail_shows_fields_payload_and_attempts() {
    let web = Web::open();
    let q = web.queue();
    let s = seed(q);
    web.env.clock.advance(Duration::from_secs(3600));
    testing::drain(&scripted_worker(q)).expect("drain");
    let mut c = web.client();
    let page = c.get(&format!("/jobs/{}", s.failed)).expect(200).body;
    assert!(page.contains("<span class=\"badge badge-failed\">failed</span>"));
    assert!(page.contains("2 of 6"), "attempts of max");
    assert!(page.contains("HTTP 503 from crm"));
    // Both failed attempts, with their worker and error.
    assert_eq!(
        page.matches("<span class=\"outcome outcome-failed\">")
            .count(),
        2
    );
    assert!(page.contains("drain:"));
    let dead = c.get(&format!("/jobs/{}", s.dead)).expect(200).body;
    assert!(dead.contains("Last status code</dt><dd>503"));
    assert!(dead.contains("name=\"reason\""), "requeue form");
    assert!(!dead.contains("hunter2"));
    let done = c.get(&format!("/jobs/{}", s.succeeded)).expect(200).body;
    assert!(done.contains("No attempt history"));
    assert!(
        !done.contains("method=\"post\" action=\"/jobs/"),
        "no actions on a finished job"
    );
    assert_eq!(
        q.job(s.dead).expect("job").map(|j| j.status),
        Some(JobStatus::Dead)
    );
}

/// The API answers with the command line's JSON: the same jobs, fields and masking.
#[cfg(feature = "cli")]
#[test]
fn the_api_mirrors_the_command_lines_json() {
    let web = Web::open();
    let s = seed(web.queue());
    let cli = |args: &[&str]| -> Value {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_litejobs"))
            .arg("--db")
            .arg(&web.env.path)
            .arg("--json")
            .args(args)
            .output()
            .expect("running litejobs");
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let mut c = web.client();
    assert_eq!(c.get("/api/jobs").expect(200).json(), cli(&["list"]));
    assert_eq!(
        c.get("/api/jobs?status=dead&limit=5").expect(200).json(),
        cli(&["list", "--status", "dead", "--limit", "5"])
    );
    assert_eq!(
        c.get("/api/dead").expect(200).json(),
        cli(&["dead", "list"])
    );
    let id = s.failed.to_string();
    assert_eq!(
        c.get(&format!("/api/jobs/{id}")).expect(200).json(),
        cli(&["show", &id])
    );
    // Stats: the same fields; the figures that do not depend on the clock agree.
    let (api, line) = (c.get("/api/stats").expect(200).json(), cli(&["stats"]));
    let keys = |v: &Value| -> BTreeSet<String> {
        v.as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    assert_eq!(keys(&api), keys(&line));
    assert_eq!(api["counts"], line["counts"]);
    assert_eq!(api["top_errors"], line["top_errors"]);
    assert_eq!(api["dead"], line["dead"]);
}

#[test]
fn the_dead_card_and_the_queue_table_say_how_requeued_dead_jobs_count() {
    let web = Web::open();
    let q = web.queue();
    for n in 0..5 {
        q.enqueue(NewJob::new("t", json!({ "do": "dead", "n": n })))
            .expect("enqueue");
    }
    testing::drain(&scripted_worker(q)).expect("drain");
    let dead = q.dead_jobs(&litejobs::JobFilter::new()).expect("dead jobs");
    assert_eq!(dead.len(), 5);
    q.requeue_dead(dead[0].id, "ops", "fixed").expect("requeue");
    let body = web.client().get("/").expect(200).body;
    let figure = |key: &str| {
        let marker = format!("data-key=\"{key}\">");
        let start = body
            .find(&marker)
            .unwrap_or_else(|| panic!("no {key} on the page: {body}"))
            + marker.len();
        body[start..start + body[start..].find('<').expect("end")].to_string()
    };
    assert!(body.contains("Dead, not requeued"), "{body}");
    assert_eq!(figure("dead"), "4");
    assert_eq!(figure("dead_requeued"), "1");
    assert_eq!(figure("q:default:dead"), "5", "the table counts them all");
    assert!(
        body.contains("counts requeued dead jobs too"),
        "the table says so: {body}"
    );
    let live = web.client().get("/api/overview").expect(200).json();
    assert_eq!(live["values"]["dead"], json!("4"));
    assert_eq!(live["values"]["dead_requeued"], json!("1"));
}

#[test]
fn the_overview_counts_expired_jobs_and_the_job_page_shows_the_deadline_and_reason() {
    let web = Web::open();
    let q = web.queue();
    let late = q
        .enqueue(NewJob::new("reset_email", json!({})).expire_after(Duration::from_secs(900)))
        .expect("enqueue");
    let waiting = q
        .enqueue(NewJob::new("reset_email", json!({})).expire_after(Duration::from_secs(3600)))
        .expect("enqueue");
    web.env.clock.advance(Duration::from_secs(1000));
    assert_eq!(q.cancel_expired().expect("sweep"), 1);
    let body = web.client().get("/").expect(200).body;
    assert!(body.contains("Expired, last hour"), "{body}");
    assert!(
        body.contains("<span data-key=\"expired_last_hour\">1</span>"),
        "{body}"
    );
    assert!(body.contains("not started by their deadline"), "{body}");
    let live = web.client().get("/api/overview").expect(200).json();
    assert_eq!(live["values"]["expired_last_hour"], json!("1"));

    let reason = "expired: not started by its deadline 2023-11-14T22:28:20Z";
    let page = web.client().get(&format!("/jobs/{late}")).expect(200).body;
    assert!(page.contains("<dt>Expires</dt>"), "{page}");
    assert!(
        page.contains(&format!("<dt>Cancelled</dt><dd>by deadline: {reason}</dd>")),
        "{page}"
    );
    let list = web.client().get("/jobs?status=cancelled").expect(200).body;
    assert!(list.contains(reason), "{list}");
    let queued = web.client().get("/jobs?status=queued").expect(200).body;
    assert!(queued.contains("expires in 43m"), "job {waiting}: {queued}");
}

/// An encrypted job: a dashboard whose queue holds the key shows it decrypted (then masked)
/// and says it is encrypted at rest; one without the key shows `encrypted (key k1)`.
#[cfg(feature = "encryption")]
#[test]
fn encrypted_jobs_are_decrypted_with_the_key_and_named_without_it() {
    use litejobs::encryption::Keyring;
    let env = setup();
    let keys = Keyring::parse("k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").expect("key");
    let keyed = env.open_with(Queue::builder().encryption_keys(keys));
    let id = keyed
        .enqueue(NewJob::new("charge", json!({"card": "4111-WEB", "password": "pw"})).encrypted())
        .expect("enqueue");
    let with_key = Dashboard::start(&keyed, DashboardOptions::new().addr("127.0.0.1:0"))
        .expect("the keyed dashboard");
    let mut c = Client::new(&with_key.url());
    let page = c.get(&format!("/jobs/{id}")).expect(200).body;
    assert!(page.contains("4111-WEB"), "{page}");
    assert!(!page.contains("\"pw\""), "masked: {page}");
    assert!(
        page.contains("at rest, with key <code>k1</code> (shown decrypted)"),
        "{page}"
    );
    let api = c.get(&format!("/api/jobs/{id}")).expect(200).json();
    assert_eq!(api["job"]["payload"]["card"], "4111-WEB");
    assert_eq!(api["job"]["encryption_key"], "k1");

    let web = Web::start(env, DashboardOptions::new());
    let mut c = web.client();
    for path in [
        format!("/jobs/{id}"),
        "/jobs".into(),
        format!("/api/jobs/{id}"),
    ] {
        let page = c.get(&path).expect(200).body;
        assert!(!page.contains("4111-WEB"), "{path}: {page}");
        assert!(page.contains("encrypted (key k1)"), "{path}: {page}");
    }
}

/// The workers page: a live worker with what it serves, and the waiting jobs no live worker
/// serves; after its shutdown, the worker among the stopped ones.
#[test]
fn the_workers_page_shows_who_is_working_and_what_waits_with_nobody_to_run_it() {
    let web = Web::open();
    let q = web.queue();
    q.enqueue(NewJob::new("sned_receipt", json!({})))
        .expect("enqueue");
    let worker = Worker::builder(q)
        .handler("send_receipt", |_: &JobContext| -> Result<(), JobError> {
            Ok(())
        })
        .reap_interval(std::time::Duration::from_secs(3600))
        .start()
        .expect("start");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while q.workers().expect("workers").is_empty() {
        assert!(std::time::Instant::now() < deadline, "the worker registers");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let id = worker.id().to_string();
    let mut c = web.client();
    let page = c.get("/workers").expect(200).body;
    assert!(page.contains("href=\"/workers\""), "in the navigation");
    let alive = page.split("<h2>Alive</h2>").nth(1).expect("the live table");
    let alive = alive.split("<h2>").next().unwrap_or_default();
    assert!(alive.contains(&format!("<code>{id}</code>")), "{page}");
    assert!(
        alive.contains("send_receipt") && alive.contains("default×"),
        "{alive}"
    );
    let unserved = page
        .split("no live worker serves them</h2>")
        .nth(1)
        .expect("the unserved table");
    assert!(
        unserved.contains(">sned_receipt</a>"),
        "the waiting type nobody serves: {unserved}"
    );
    worker
        .shutdown(std::time::Duration::from_secs(10))
        .expect("shutdown");
    let page = c.get("/workers").expect(200).body;
    assert!(page.contains("No live worker"), "{page}");
    let gone = page
        .split("Stopped or gone")
        .nth(1)
        .expect("the gone table");
    assert!(gone.contains(&id) && gone.contains(">stopped<"), "{gone}");
}
