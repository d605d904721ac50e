//! The field-name rule, masking through values, and the README's list of names.

use super::*;
use serde_json::json;

/// Names that must be masked, grouped by why.
const MUST_MASK: &[&str] = &[
    // the names the old suffix rule missed
    "secret_key",
    "aws_secret_access_key",
    "smtp.password",
    "SMTPPassword",
    "passwd",
    "credentials",
    // whole words in any case and any separator
    "password",
    "PASSWORD",
    "Password",
    "smtp_password",
    "db-password",
    "user password",
    "password2",
    "token",
    "authToken",
    "X-Auth-Token",
    "oauth2_token",
    "csrfToken",
    "Authorization",
    "Proxy-Authorization",
    "auth",
    "basic_auth",
    "api_key",
    "apiKey",
    "APIKey",
    "APIKEY",
    "x-api-key",
    "api_keys",
    "accessToken",
    "refresh_token",
    "Cookie",
    "Set-Cookie",
    "cookies",
    "private_key",
    "privateKey",
    "access_key",
    "AWS_ACCESS_KEY_ID",
    "signing_key",
    "encryption_key",
    "webhook_secret",
    "client secret",
    "signingSecret",
    "secrets",
    "credential",
    "pwd",
    "passphrase",
    "session",
    "session_id",
    "sessionToken",
    "signature",
    "X-Hub-Signature-256",
    "jwt",
    "bearer",
    "otp",
    // words run together: the secret word endings
    "adminpassword",
    "SMTPPASSWORD",
    "authtoken",
    "clientsecret",
    "xapikey",
    // a name split at a hump or separator inside it
    "passWord",
    "PASS_WORD",
    "passPhrase",
    "pass_phrase",
    "smtp_pass_word",
    "secretkey",
    "AWSSECRETKEY",
    "privatekey",
    // a descriptive word that is not last does not save the field
    "password_hint_token",
    "token_type_secret",
];

/// Names that must be shown: secret names inside other words, `key` alone, and
/// descriptive words after a secret name.
const MUST_SHOW: &[&str] = &[
    "author",
    "authored_by",
    "authenticated",
    "keyboard",
    "monkey",
    "key",
    "idempotency_key",
    "group_key",
    "sort-key",
    "primaryKey",
    "token_count",
    "tokenCount",
    "max_tokens",
    "total_tokens",
    "tokenizer",
    "password_hint",
    "password_min_length",
    "token_type",
    "auth_token_type",
    "token_expires_at",
    "secret_name",
    "cookie_name",
    "secretary_name",
    "passport_number",
    "pass",
    "word_count",
    "target_session_attrs",
    "session_timeout",
    "bypass",
    "user",
    "url",
    "email",
    "description",
    "signed_at",
    "",
    "_",
];

#[test]
fn default_names_match_whole_words_of_the_key() {
    let r = Redactor::new();
    let wrong: Vec<&str> = MUST_MASK
        .iter()
        .copied()
        .filter(|key| !r.is_secret(key))
        .collect();
    assert!(wrong.is_empty(), "not masked but must be: {wrong:?}");
    let wrong: Vec<&str> = MUST_SHOW
        .iter()
        .copied()
        .filter(|key| r.is_secret(key))
        .collect();
    assert!(wrong.is_empty(), "masked but must be shown: {wrong:?}");
}

#[test]
fn keys_split_into_words_at_separators_humps_and_digits() {
    for (key, expected) in [
        (
            "aws_secret_access_key",
            &["aws", "secret", "access", "key"][..],
        ),
        ("SMTPPassword", &["smtp", "password"]),
        ("apiKey", &["api", "key"]),
        ("APIKey", &["api", "key"]),
        ("smtp.password", &["smtp", "password"]),
        ("X-Hub-Signature-256", &["x", "hub", "signature", "256"]),
        ("  user  password ", &["user", "password"]),
        ("password2", &["password", "2"]),
        ("oauth2Token", &["oauth", "2", "token"]),
        ("SMTPPASSWORD", &["smtppassword"]),
        ("Ünïcode_Schlüssel", &["ünïcode", "schlüssel"]),
        ("", &[]),
        ("-._ ", &[]),
    ] {
        assert_eq!(words(key), expected, "{key:?}");
    }
}

#[test]
fn masks_recursively_through_objects_and_arrays() {
    let payload = json!({
        "url": "https://crm.example/hook",
        "token": "t0k3n",
        "headers": {"Authorization": "Bearer abc", "Accept": "application/json"},
        "batch": [
            {"user": "ada", "password": "hunter2"},
            {"user": "bob", "profile": {"api_key": 12345, "refresh_token": {"v": 1}}},
            ["plain", {"Cookie": "session=1"}]
        ],
        "secret": null
    });
    let masked = mask_payload(&payload);
    assert_eq!(
        masked,
        json!({
            "url": "https://crm.example/hook",
            "token": "[masked]",
            "headers": {"Authorization": "[masked]", "Accept": "application/json"},
            "batch": [
                {"user": "ada", "password": "[masked]"},
                {"user": "bob", "profile": {"api_key": "[masked]", "refresh_token": "[masked]"}},
                ["plain", {"Cookie": "[masked]"}]
            ],
            "secret": null
        })
    );
    assert!(!masked.to_string().contains("hunter2"));
    assert!(!masked.to_string().contains("12345"));
}

#[test]
fn json_text_inside_a_string_is_masked_and_rewritten() {
    // A webhook body written as JSON text (README, "From any language"), nested twice.
    let inner = json!({"data": {"password": "hunter2", "order": 7}}).to_string();
    let payload = json!({
        "endpoint_id": 1,
        "event_id": "evt_1",
        "body": json!({"user": {"SMTPPassword": "p4ss"}, "note": inner}).to_string(),
        "list": "[{\"token\": \"t0k3n\"}, 2]",
    });
    let masked = mask_payload(&payload);
    let body: Value = serde_json::from_str(masked["body"].as_str().unwrap_or_default())
        .expect("the body is still JSON text");
    assert_eq!(body["user"]["SMTPPassword"], json!(MASK));
    let note: Value = serde_json::from_str(body["note"].as_str().unwrap_or_default())
        .expect("the inner body is still JSON text");
    assert_eq!(note, json!({"data": {"password": MASK, "order": 7}}));
    assert_eq!(masked["list"], json!("[{\"token\":\"[masked]\"},2]"));
    for secret in ["hunter2", "p4ss", "t0k3n"] {
        assert!(!masked.to_string().contains(secret), "{secret}: {masked}");
    }
}

#[test]
fn strings_with_nothing_to_mask_are_shown_as_written() {
    let payload = json!({
        "body": "{ \"order\": 7,\n  \"items\": [1, 2] }",
        "text": "{not json, password: x",
        "number_text": "42",
        "quoted": "\"password\"",
        "deep": format!("{}1{}", "[".repeat(200), "]".repeat(200)),
    });
    assert_eq!(mask_payload(&payload), payload);
}

#[test]
fn extra_names_are_added_not_replacing_defaults_and_match_by_words() {
    let r = Redactor::new().with_fields(["ssn", " ", "Card-Number", "--"]);
    let masked = r.mask(&json!({
        "SSN": "078", "customer.ssn": "079", "card_number": "4111", "CardNumber": "4112",
        "cardnumber": "4113", "password": "x", "ssnake": "shown", "n": 1
    }));
    assert_eq!(
        masked,
        json!({
            "SSN": MASK, "customer.ssn": MASK, "card_number": MASK, "CardNumber": MASK,
            "cardnumber": MASK, "password": MASK, "ssnake": "shown", "n": 1
        })
    );
    assert_eq!(r, r.clone().with_field("card number"), "no duplicates");
}

#[test]
fn the_readme_quotes_the_default_names() {
    let readme = include_str!("../../docs/operating.md");
    let from = readme
        .find("**Secrets are masked**")
        .unwrap_or(readme.len());
    let quote: Vec<&str> = readme[from..]
        .lines()
        .skip_while(|line| !line.starts_with("> "))
        .take_while(|line| line.starts_with("> "))
        .map(|line| &line[2..])
        .collect();
    let listed: Vec<String> = quote
        .join(" ")
        .split(',')
        .map(|item| {
            let item = item.trim();
            let item = item.strip_prefix("and the two-word names ").unwrap_or(item);
            item.strip_prefix("and ").unwrap_or(item).to_string()
        })
        .collect();
    let defaults: Vec<String> = DEFAULT_SECRET_FIELDS
        .iter()
        .map(|name| name.replace('_', " "))
        .collect();
    let mut sorted = (listed.clone(), defaults.clone());
    sorted.0.sort();
    sorted.1.sort();
    assert_eq!(sorted.0, sorted.1, "README: {listed:?}");
}

#[test]
fn mask_job_covers_payload_result_and_progress() {
    let job = job_record();
    let masked = Redactor::new().mask_job(&job);
    assert_eq!(masked.payload, json!({"password": "[masked]"}));
    assert_eq!(masked.result, Some(json!({"access_token": "[masked]"})));
    assert_eq!(masked.progress, Some(json!([{"secret": "[masked]"}])));
    assert_eq!(
        job.payload,
        json!({"password": "p"}),
        "the original is untouched"
    );
}

#[test]
fn secrets_without_a_field_of_their_own_are_masked() {
    let payload = json!({
        "callback": "https://u:pw@hooks.example/x?access_token=t0k3n&page=2",
        "dsn": "postgres://app:pw@db/x",
        "headers": [["Authorization", "Bearer abc"], ["Accept", "application/json"]],
        "pair": ["X-Api-Key", "k3y"],
        "env": [{"name": "DB_PASSWORD", "value": "hunter2"}, {"name": "HOME", "value": "/root"}],
        "line": "PASSWORD=hunter2",
        "note": "plain words"
    });
    let masked = mask_payload(&payload);
    assert_eq!(
        masked,
        json!({
            "callback": "https://u:***@hooks.example/x?access_token=[masked]&page=2",
            "dsn": "postgres://app:***@db/x",
            "headers": [["Authorization", MASK], ["Accept", "application/json"]],
            "pair": ["X-Api-Key", MASK],
            "env": [{"name": "DB_PASSWORD", "value": MASK}, {"name": "HOME", "value": "/root"}],
            "line": "PASSWORD=[masked]",
            "note": "plain words"
        })
    );
    for secret in ["pw@", "t0k3n", "abc", "k3y", "hunter2"] {
        assert!(!masked.to_string().contains(secret), "{secret}: {masked}");
    }
}

#[test]
fn a_jobs_last_error_is_scanned_for_secrets() {
    let mut job = job_record();
    job.last_error = Some("POST https://u:pw@api.example/x?token=t0k3n: 500".into());
    let masked = Redactor::new().mask_job(&job);
    assert_eq!(
        masked.last_error.as_deref(),
        Some("POST https://u:***@api.example/x?token=[masked]: 500")
    );
}

/// A queued job with secrets in its payload, result and progress.
fn job_record() -> JobRecord {
    JobRecord {
        id: 1,
        queue: "default".into(),
        job_type: "t".into(),
        payload: json!({"password": "p"}),
        status: crate::JobStatus::Queued,
        priority: 0,
        attempts: 0,
        max_attempts: 6,
        run_at: 0,
        created_at: 0,
        updated_at: 0,
        started_at: None,
        finished_at: None,
        locked_by: None,
        locked_until: None,
        last_error: None,
        last_status_code: None,
        idempotency_key: None,
        group_key: None,
        timeout_ms: None,
        result: Some(json!({"access_token": "a"})),
        progress: Some(json!([{"secret": "s"}])),
        requeued_by: None,
        requeued_at: None,
        requeue_reason: None,
        requeued_as: None,
        cancelled_by: None,
        cancel_reason: None,
        expires_at: None,
        workflow_id: None,
        step: None,
        waiting_for: 0,
        encryption_key: None,
        problems: Vec::new(),
    }
}
