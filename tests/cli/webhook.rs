//! `webhook add | list | show | enable | disable | rotate | remove`: a secret printed once by
//! the command that makes it and never again (tables and JSON), the breaker and failed
//! deliveries an endpoint has, and the refusals of an unknown id.

use litejobs::builtin::webhook::{self, Endpoints, NewEndpoint};
use litejobs::limits::Breaker;

use super::*;

/// The value of the `secret  whsec_...` line of `add` or `rotate`.
fn printed_secret(stdout: &str) -> String {
    let secret = stdout
        .lines()
        .find_map(|l| l.strip_prefix("secret  "))
        .unwrap_or_else(|| panic!("no secret line: {stdout}"))
        .trim()
        .to_string();
    assert!(secret.starts_with("whsec_"), "{stdout}");
    secret
}

/// The id of `webhook endpoint N added: ...`.
fn added_id(stdout: &str) -> i64 {
    stdout
        .strip_prefix("webhook endpoint ")
        .and_then(|rest| rest.split_once(' '))
        .and_then(|(id, _)| id.parse().ok())
        .unwrap_or_else(|| panic!("no id: {stdout}"))
}

/// Asserts `text` holds no secret: neither of `secrets`, nor anything in the `whsec_` form.
fn assert_no_secret(text: &str, secrets: &[&str]) {
    for secret in secrets {
        assert!(!text.contains(secret), "a secret is shown: {text}");
    }
    assert!(!text.contains("whsec_"), "a secret is shown: {text}");
}

#[test]
fn add_prints_the_secret_once_and_list_never_shows_it() {
    let fx = Fx::new();
    let added = fx
        .run(&[
            "webhook",
            "add",
            "https://crm.example/hook",
            "--description",
            "CRM production",
            "--rate",
            "10/s",
        ])
        .ok()
        .stdout;
    let id = added_id(&added);
    let secret = printed_secret(&added);
    assert_eq!(added.matches(&secret).count(), 1, "printed once: {added}");
    assert!(
        added.contains("store it now: it is not shown again"),
        "{added}"
    );
    let stored = Endpoints::new(&fx.queue)
        .get(id)
        .expect("reading the endpoint")
        .expect("the endpoint exists");
    assert_eq!(
        stored.secret(),
        secret,
        "the printed secret is the stored one"
    );
    assert_eq!(stored.description, "CRM production");
    assert_eq!((stored.rate_limit, stored.rate_period_ms), (Some(10), 1000));

    // A secret given on the command line is used and not printed back.
    let given = webhook::generate_secret().expect("a secret");
    let run = fx
        .run(&[
            "webhook",
            "add",
            "http://127.0.0.1:9/hooks",
            "--secret",
            &given,
        ])
        .ok();
    let second = added_id(&run.stdout);
    assert_no_secret(&run.stdout, &[&given]);
    let stored = Endpoints::new(&fx.queue)
        .get(second)
        .expect("reading")
        .expect("exists");
    assert_eq!(stored.secret(), given);

    let json = fx
        .run(&["webhook", "add", "https://billing.example/h", "--json"])
        .json();
    assert_has_fields(&json, &["id", "url", "secret"]);
    let third_secret = json["secret"].as_str().expect("a generated secret");
    assert!(third_secret.starts_with("whsec_"), "{json}");

    let list = fx.run(&["webhook", "list"]).ok().stdout;
    assert_no_secret(&list, &[&secret, &given, third_secret]);
    let row = list
        .lines()
        .find(|l| l.contains("https://crm.example/hook"))
        .unwrap_or_else(|| panic!("the endpoint is listed: {list}"));
    for cell in ["enabled", "closed", "10/s", "CRM production"] {
        assert!(row.contains(cell), "{cell:?} in {row:?}");
    }
    assert_eq!(list.lines().count(), 4, "a header and three rows: {list}");

    let raw = fx.run(&["webhook", "list", "--json"]).ok().stdout;
    assert_no_secret(&raw, &[&secret, &given, third_secret]);
    let listed: Value = serde_json::from_str(&raw).expect("JSON");
    let endpoints = listed["endpoints"].as_array().expect("an array");
    assert_eq!(endpoints.len(), 3);
    let first = &endpoints[0];
    assert_has_fields(
        first,
        &[
            "id",
            "url",
            "enabled",
            "disabled_reason",
            "rate_limit",
            "rate_period_ms",
            "description",
            "created_at",
            "updated_at",
            "previous_secret_expires_at",
            "breaker",
        ],
    );
    assert!(!keys(first).contains("secret") && !keys(first).contains("previous_secret"));
    assert_eq!(first["id"], json!(id));
    assert_eq!(first["rate_limit"], json!(10));
    assert_eq!(first["breaker"]["state"], json!("closed"));
    assert_eq!(first["breaker"]["failures"], json!(0));
}

#[test]
fn show_gives_the_breaker_and_the_endpoints_failed_deliveries() {
    let fx = Fx::new();
    let endpoints = Endpoints::new(&fx.queue);
    let secret = webhook::generate_secret().expect("a secret");
    let crm = endpoints
        .add(NewEndpoint::new("https://crm.example/hook", secret.clone()))
        .expect("add");
    let other = endpoints
        .add(NewEndpoint::new(
            "https://other.example/hook",
            webhook::generate_secret().expect("a secret"),
        ))
        .expect("add");
    // Two deliveries to the CRM die, one to the other endpoint too; one CRM delivery
    // waits for its retry.
    fx.ago(10 * MINUTE);
    let dead_crm: Vec<i64> = ["evt_1", "evt_2"]
        .iter()
        .map(|event| fx.enqueue(webhook::delivery(crm, "order.paid", *event, json!({}))))
        .collect();
    let dead_other = fx.enqueue(webhook::delivery(other, "order.paid", "evt_x", json!({})));
    fx.fail_due("deliver_webhook", "default", "HTTP 422 Unprocessable", true);
    fx.ago(5 * MINUTE);
    let retrying = fx.enqueue(webhook::delivery(crm, "order.paid", "evt_3", json!({})));
    fx.fail_due(
        "deliver_webhook",
        "default",
        "HTTP 503 Service Unavailable",
        false,
    );
    // The breaker opened after two failures in a row, a minute's cool-down from now.
    fx.ago(0);
    let breaker = Breaker::new().failure_threshold(2);
    let key = webhook::limit_key(crm);
    for _ in 0..2 {
        breaker
            .record_failure(&fx.queue, &key, "HTTP 503 Service Unavailable")
            .expect("recording a failure");
    }

    let shown = fx.run(&["webhook", "show", &crm.to_string()]).ok().stdout;
    assert_no_secret(&shown, &[&secret]);
    for needle in [
        "https://crm.example/hook",
        "open since",
        "deliveries wait (no attempt spent) until",
        "2 in a row",
        "last failure     HTTP 503 Service Unavailable",
        "recent failed deliveries",
        "evt_1",
        "evt_3",
        "HTTP 422 Unprocessable",
    ] {
        assert!(shown.contains(needle), "{needle:?} in {shown}");
    }
    assert!(
        !shown.contains("evt_x"),
        "another endpoint's delivery: {shown}"
    );

    let json = fx
        .run(&["webhook", "show", &crm.to_string(), "--json"])
        .json();
    assert_no_secret(&json.to_string(), &[&secret]);
    assert_eq!(json["endpoint"]["id"], json!(crm));
    let b = &json["endpoint"]["breaker"];
    assert_eq!(b["state"], json!("open"));
    assert_eq!(b["failures"], json!(2));
    assert_eq!(b["last_error"], json!("HTTP 503 Service Unavailable"));
    let until = b["open_until"].as_i64().expect("open until");
    assert_eq!(until, fx.queue.now_ms() + 60_000, "the default cool-down");
    let failed: Vec<i64> = json["failed_deliveries"]
        .as_array()
        .expect("an array")
        .iter()
        .map(|f| f["id"].as_i64().expect("an id"))
        .collect();
    let mut expected = vec![retrying, dead_crm[0], dead_crm[1]];
    expected.sort_unstable();
    let mut got = failed.clone();
    got.sort_unstable();
    assert_eq!(got, expected, "{json:#}");
    assert!(!failed.contains(&dead_other));
    assert_eq!(failed[0], retrying, "the newest failure first");
    let first = &json["failed_deliveries"][0];
    assert_eq!(first["status"], json!("failed"));
    assert_eq!(first["event_id"], json!("evt_3"));

    // The list shows the breaker and the latest failure too.
    let list = fx.run(&["webhook", "list"]).ok().stdout;
    let row = list
        .lines()
        .find(|l| l.contains("https://crm.example/hook"))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(row.contains("open, probe in "), "{row}");
    assert!(row.contains("HTTP 503 Service Unavailable"), "{row}");

    // An endpoint that never failed has a closed breaker and no failed deliveries... but
    // the other endpoint has one dead delivery.
    let shown = fx.run(&["webhook", "show", &other.to_string()]).ok().stdout;
    assert!(shown.contains("closed (it never failed)"), "{shown}");
    assert!(
        shown.contains("evt_x") && !shown.contains("evt_1"),
        "{shown}"
    );
}

#[test]
fn disable_enable_rotate_and_remove_change_the_endpoint() {
    let fx = Fx::new();
    let added = fx
        .run(&["webhook", "add", "https://crm.example/hook"])
        .ok()
        .stdout;
    let id = added_id(&added);
    let old = printed_secret(&added);
    let ids = id.to_string();
    let endpoints = Endpoints::new(&fx.queue);
    let get = || endpoints.get(id).expect("reading").expect("exists");

    let out = fx
        .run(&["webhook", "disable", &ids, "--reason", "maintenance"])
        .ok()
        .stdout;
    assert!(out.contains("disabled: maintenance"), "{out}");
    let e = get();
    assert!(!e.enabled);
    assert_eq!(e.disabled_reason.as_deref(), Some("maintenance"));
    let list = fx.run(&["webhook", "list"]).ok().stdout;
    assert!(list.contains("disabled: maintenance"), "{list}");
    // Deliveries to it are refused at enqueue while it is disabled.
    assert!(
        webhook::enqueue_delivery(&fx.queue, webhook::delivery(id, "t", "e", json!({}))).is_err()
    );

    let json = fx.run(&["webhook", "enable", &ids, "--json"]).json();
    assert_eq!(
        json,
        json!({"id": id, "enabled": true, "disabled_reason": null})
    );
    assert!(get().enabled);
    assert_eq!(get().disabled_reason, None);

    let rotated = fx
        .run(&["webhook", "rotate", &ids, "--overlap", "1h"])
        .ok()
        .stdout;
    let new = printed_secret(&rotated);
    assert_ne!(new, old);
    assert_eq!(rotated.matches(&new).count(), 1, "printed once: {rotated}");
    assert!(!rotated.contains(&old), "{rotated}");
    assert!(
        rotated.contains("store it now: it is not shown again"),
        "{rotated}"
    );
    let e = get();
    assert_eq!(e.secret(), new);
    assert_eq!(e.previous_secret(), Some(old.as_str()));
    let until = e.previous_secret_expires_at.expect("an overlap");
    let hour_from_now = SystemClock.now_ms() + 60 * MINUTE;
    assert!(
        (hour_from_now - MINUTE..=hour_from_now).contains(&until),
        "{until} vs {hour_from_now}"
    );
    for args in [
        &["webhook", "list"][..],
        &["webhook", "list", "--json"],
        &["webhook", "show", &ids],
        &["webhook", "show", &ids, "--json"],
    ] {
        let out = fx.run(args).ok().stdout;
        assert_no_secret(&out, &[&old, &new]);
    }
    let shown = fx.run(&["webhook", "show", &ids]).ok().stdout;
    assert!(
        shown.contains("the previous secret also signs deliveries until"),
        "{shown}"
    );

    let json = fx.run(&["webhook", "rotate", &ids, "--json"]).json();
    assert_has_fields(&json, &["id", "secret", "previous_secret_expires_at"]);
    assert_eq!(json["secret"].as_str(), Some(get().secret()));
    assert_eq!(get().previous_secret(), Some(new.as_str()));

    let out = fx.run(&["webhook", "remove", &ids]).ok().stdout;
    assert!(
        out.contains(&format!("webhook endpoint {id} removed")),
        "{out}"
    );
    assert!(endpoints.get(id).expect("reading").is_none());
    let list = fx.run(&["webhook", "list"]).ok().stdout;
    assert!(list.starts_with("no webhook endpoints"), "{list}");
    let json = fx.run(&["webhook", "list", "--json"]).json();
    assert_eq!(json, json!({"endpoints": []}));
}

#[test]
fn an_unknown_id_or_a_bad_value_is_refused_with_one_line() {
    let fx = Fx::new();
    let id = Endpoints::new(&fx.queue)
        .add(NewEndpoint::new(
            "https://crm.example/hook",
            webhook::generate_secret().expect("a secret"),
        ))
        .expect("add");
    let before = fx.sql_i64("SELECT count(*) FROM webhook_endpoints");
    for args in [
        &["webhook", "show", "4711"][..],
        &["webhook", "show", "4711", "--json"],
        &["webhook", "enable", "4711"],
        &["webhook", "disable", "4711"],
        &["webhook", "rotate", "4711"],
        &["webhook", "remove", "4711"],
    ] {
        fx.run(args).refused("no webhook endpoint with id 4711");
    }
    fx.run(&["webhook", "add", "ftp://crm.example/hook"])
        .refused("is not http or https");
    fx.run(&[
        "webhook",
        "add",
        "https://crm.example/h",
        "--secret",
        "hunter2",
    ])
    .refused("must start with whsec_");
    fx.run(&["webhook", "add", "https://crm.example/h", "--rate", "0/s"])
        .refused("invalid rate");
    fx.run(&["webhook", "rotate", &id.to_string(), "--overlap", "1.5h"])
        .refused("fractions are not supported");
    assert_eq!(
        fx.sql_i64("SELECT count(*) FROM webhook_endpoints"),
        before,
        "nothing was added"
    );
    let e = Endpoints::new(&fx.queue)
        .get(id)
        .expect("reading")
        .expect("exists");
    assert_eq!(e.previous_secret(), None, "nothing was rotated");

    if crate::support::sqlite_only() {
        return;
    }
    // A typo in --db creates nothing, for reads and writes alike.
    let dir = temp_dir();
    let typo = dir.path().join("typo.db");
    run(&typo, &["webhook", "list"]).refused("does not exist");
    run(&typo, &["webhook", "add", "https://crm.example/hook"]).refused("does not exist");
    assert!(!typo.exists());
}

#[test]
fn list_and_show_print_the_host_deliveries_go_to_and_hide_tokens_like_the_dashboard() {
    let fx = Fx::new();
    let endpoints = Endpoints::new(&fx.queue);
    let added = |url: &str| {
        endpoints
            .add(NewEndpoint::new(
                url,
                webhook::generate_secret().expect("a secret"),
            ))
            .expect("add")
    };
    // Deliveries go to 127.0.0.1: the fragment starts at `#`.
    let fragment_url = "http://127.0.0.1:18600#@evil.example/z";
    let token_url = "https://ops:pa55word@hooks.example/in?access_token=t0ps3cret";
    let shown = [
        (
            added(fragment_url),
            fragment_url,
            "http://127.0.0.1:18600/#…",
        ),
        (
            added(token_url),
            token_url,
            "https://ops:***@hooks.example/in?…",
        ),
    ];
    let list = fx.run(&["webhook", "list"]).ok().stdout;
    let json = fx.run(&["webhook", "list", "--json"]).json();
    let mut everything = format!("{list}{json}");
    for (id, stored, url) in shown {
        // What the dashboard shows (webhook::shown_url) is what the command line prints.
        assert_eq!(webhook::shown_url(stored), url);
        assert!(list.contains(url), "{url} in {list}");
        let listed = json["endpoints"]
            .as_array()
            .expect("endpoints")
            .iter()
            .find(|e| e["id"] == json!(id))
            .expect("listed");
        assert_eq!(listed["url"], json!(url));
        let show = fx.run(&["webhook", "show", &id.to_string()]).ok().stdout;
        assert!(show.contains(url), "{url} in {show}");
        everything.push_str(&show);
        let shown_json = fx
            .run(&["webhook", "show", &id.to_string(), "--json"])
            .json();
        assert_eq!(shown_json["endpoint"]["url"], json!(url));
    }
    for hidden in ["evil.example", "pa55word", "t0ps3cret"] {
        assert!(
            !everything.contains(hidden),
            "{hidden} is printed: {everything}"
        );
    }
}
