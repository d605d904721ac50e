//! Email against a real SMTP server on 127.0.0.1 (tests/support/smtp.rs): the message
//! arrives once with the right headers, 4xx and connection failures retry, 5xx and bad
//! addresses go dead at once (the latter without connecting), a crash after the send does not
//! send twice, the dev mailer writes the message, and `litejobs work`'s options wire it up.

use std::time::Duration;

use litejobs::builtin::email::{
    self, Email, EmailHandler, EmailJob, EmailOptions, FileMailer, MailerConfig, SmtpConfig,
    SmtpMailer, JOB_TYPE,
};
use litejobs::builtin::{self, BuiltinOptions};
use litejobs::testing::{self, DrainReport};
use litejobs::{JobContext, JobError, JobRecord, JobStatus, NewJob, Queue, Worker, WorkerBuilder};
use serde_json::{json, Value};

use crate::support::smtp::{SmtpSink, Stage};
use crate::support::{setup, TestEnv};

const FROM: &str = "Litejobs App <app@example.com>";
const WAIT: Duration = Duration::from_secs(30);

fn smtp_handler(sink: &SmtpSink) -> EmailHandler {
    let config = SmtpConfig::from_url(&sink.url()).expect("the sink's URL parses");
    EmailHandler::new(SmtpMailer::new(&config).expect("an SMTP mailer")).default_from(FROM)
}

fn builder(env: &TestEnv, handler: EmailHandler) -> WorkerBuilder {
    Worker::builder(&env.queue).handler(JOB_TYPE, handler)
}

fn drain(builder: &WorkerBuilder) -> DrainReport {
    testing::drain(builder).expect("drain")
}

fn job(queue: &Queue, id: i64) -> JobRecord {
    queue
        .job(id)
        .expect("reading the job")
        .expect("the job exists")
}

fn welcome(user: i64) -> EmailJob {
    EmailJob::new(
        format!("user{user}@example.com"),
        "Welcome aboard",
        "Hello, glad you are here.",
    )
    .template("welcome", "3")
    .dedupe(user, "signup")
}

#[test]
fn the_message_arrives_once_with_the_right_headers_and_the_result_is_stored() {
    let env = setup();
    let sink = SmtpSink::start();
    let builder = builder(&env, smtp_handler(&sink));
    let id = welcome(42)
        .html("<p>Hello, glad you are here.</p>")
        .enqueue(&env.queue)
        .expect("enqueue");

    assert_eq!(drain(&builder).succeeded, 1);
    let messages = sink.wait_messages(1, WAIT);
    assert_eq!(messages.len(), 1, "one message");
    let m = &messages[0];
    assert_eq!(m.mail_from, "app@example.com");
    assert_eq!(m.rcpt_to, vec!["user42@example.com".to_string()]);
    assert_eq!(
        m.header("From").as_deref(),
        Some("\"Litejobs App\" <app@example.com>")
    );
    assert_eq!(m.header("To").as_deref(), Some("user42@example.com"));
    assert_eq!(m.header("Subject").as_deref(), Some("Welcome aboard"));
    assert!(m.header("Date").is_some(), "a Date header: {}", m.data);
    assert!(m.body().contains("Hello, glad you are here."), "{}", m.data);
    assert!(
        m.body().contains("<p>Hello, glad you are here.</p>"),
        "{}",
        m.data
    );

    let record = job(&env.queue, id);
    assert_eq!(record.status, JobStatus::Succeeded);
    assert_eq!(
        record.idempotency_key.as_deref(),
        Some("email:42:welcome:signup")
    );
    let result = record.result.expect("a result");
    let message_id = m.header("Message-ID").expect("a Message-ID header");
    assert_eq!(result["message_id"], json!(message_id));
    assert!(
        message_id.starts_with("<lj.") && message_id.ends_with("@example.com>"),
        "{message_id}"
    );
    assert_eq!(result["provider_id"], json!("SINK-1"), "{result}");
    assert_eq!(result["template"], json!("welcome"));
    assert_eq!(result["template_version"], json!("3"));
    let expected_hash = Email::new(
        FROM,
        "user42@example.com",
        "Welcome aboard",
        "Hello, glad you are here.",
    )
    .html("<p>Hello, glad you are here.</p>")
    .content_hash();
    assert_eq!(result["content_hash"], json!(expected_hash));
    assert_eq!(result["already_sent"], json!(false));

    // The same email again (same user, template, event): the first job, no second send.
    let again = welcome(42).enqueue(&env.queue).expect("enqueue again");
    assert_eq!(again, id);
    assert_eq!(drain(&builder).attempts(), 0);
    assert_eq!(sink.messages().len(), 1);
    let data_commands = sink
        .commands()
        .iter()
        .filter(|c| c.as_str() == "DATA")
        .count();
    assert_eq!(data_commands, 1, "{:?}", sink.commands());
}

#[test]
fn a_temporary_451_is_retried_and_then_delivered_once() {
    let env = setup();
    let sink = SmtpSink::start();
    sink.fail_next(Stage::Rcpt, 451, "4.3.0 mailbox busy, try again later");
    let builder = builder(&env, smtp_handler(&sink));
    let id = welcome(7).enqueue(&env.queue).expect("enqueue");

    assert_eq!(drain(&builder).failed, 1);
    let record = job(&env.queue, id);
    assert_eq!(record.status, JobStatus::Failed);
    assert_eq!(record.last_status_code, Some(451));
    let error = record.last_error.unwrap_or_default();
    assert!(
        error.contains("451") && error.contains("mailbox busy"),
        "{error}"
    );
    assert!(sink.messages().is_empty(), "nothing was accepted");

    env.clock.advance(Duration::from_secs(3600));
    assert_eq!(drain(&builder).succeeded, 1);
    assert_eq!(sink.wait_messages(1, WAIT).len(), 1);
    let record = job(&env.queue, id);
    assert_eq!((record.status, record.attempts), (JobStatus::Succeeded, 2));
}

#[test]
fn a_550_goes_dead_after_one_attempt_with_the_servers_reply() {
    for stage in [Stage::Rcpt, Stage::Data] {
        let env = setup();
        let sink = SmtpSink::start();
        sink.fail_next(stage, 550, "5.1.1 no such user here");
        let builder = builder(&env, smtp_handler(&sink));
        let id = welcome(9).enqueue(&env.queue).expect("enqueue");

        assert_eq!(drain(&builder).dead, 1, "{stage:?}");
        let record = job(&env.queue, id);
        assert_eq!(
            (record.status, record.attempts),
            (JobStatus::Dead, 1),
            "{stage:?}"
        );
        assert_eq!(record.last_status_code, Some(550));
        let error = record.last_error.unwrap_or_default();
        assert!(
            error.contains("550") && error.contains("no such user"),
            "{error}"
        );
        assert!(sink.messages().is_empty());
    }
}

#[test]
fn a_malformed_or_missing_address_goes_dead_without_any_connection() {
    let env = setup();
    let sink = SmtpSink::start();
    let builder = builder(&env, smtp_handler(&sink));
    let bad_to = EmailJob::new("not-an-address", "s", "t")
        .enqueue(&env.queue)
        .expect("enqueue");
    let no_to = env
        .queue
        .enqueue(NewJob::new(JOB_TYPE, json!({"subject": "s", "text": "t"})))
        .expect("enqueue");
    let bad_from = EmailJob::new("ok@example.com", "s", "t")
        .from("nobody at all")
        .enqueue(&env.queue)
        .expect("enqueue");

    assert_eq!(drain(&builder).dead, 3);
    let error = |id| job(&env.queue, id).last_error.unwrap_or_default();
    assert!(
        error(bad_to).contains("invalid recipient address \"not-an-address\""),
        "{}",
        error(bad_to)
    );
    assert_eq!(error(no_to), "payload field to is missing");
    assert!(
        error(bad_from).contains("invalid sender address \"nobody at all\""),
        "{}",
        error(bad_from)
    );
    for id in [bad_to, no_to, bad_from] {
        assert_eq!(job(&env.queue, id).attempts, 1);
    }
    assert_eq!(
        sink.connections(),
        0,
        "no SMTP connection for a bad address"
    );
}

#[test]
fn a_job_without_sender_and_without_default_goes_dead_with_a_clear_error() {
    let env = setup();
    let sink = SmtpSink::start();
    let config = SmtpConfig::from_url(&sink.url()).expect("url");
    let handler = EmailHandler::new(SmtpMailer::new(&config).expect("mailer"));
    let id = welcome(1).enqueue(&env.queue).expect("enqueue");
    assert_eq!(drain(&builder(&env, handler)).dead, 1);
    let error = job(&env.queue, id).last_error.unwrap_or_default();
    assert!(
        error.contains("no sender") && error.contains("LITEJOBS_MAIL_FROM"),
        "{error}"
    );
    assert_eq!(sink.connections(), 0);
}

#[test]
fn connection_refused_and_a_silent_server_are_retried() {
    let env = setup();
    // A port nobody listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let config =
        SmtpConfig::from_url(&format!("smtp://127.0.0.1:{port}?tls=none&timeout=2s")).expect("url");
    let handler = EmailHandler::new(SmtpMailer::new(&config).expect("mailer")).default_from(FROM);
    let refused = welcome(3).enqueue(&env.queue).expect("enqueue");
    assert_eq!(drain(&builder(&env, handler)).failed, 1);
    let record = job(&env.queue, refused);
    assert_eq!(record.status, JobStatus::Failed, "{:?}", record.last_error);
    assert_eq!(record.last_status_code, None);

    // A server that accepts the connection and says nothing: the client's timeout (2 s).
    let env = setup();
    let sink = SmtpSink::start();
    sink.fail_next(Stage::Stall, 0, "");
    let silent = welcome(4).enqueue(&env.queue).expect("enqueue");
    assert_eq!(drain(&builder(&env, smtp_handler(&sink))).failed, 1);
    let record = job(&env.queue, silent);
    assert_eq!(record.status, JobStatus::Failed);
    let error = record.last_error.unwrap_or_default();
    assert!(error.contains("timed out"), "{error}");
    env.clock.advance(Duration::from_secs(3600));
    assert_eq!(drain(&builder(&env, smtp_handler(&sink))).succeeded, 1);
    assert_eq!(sink.wait_messages(1, WAIT).len(), 1);
}

#[test]
fn a_crash_after_the_send_does_not_send_twice_on_the_retry() {
    let env = setup();
    let sink = SmtpSink::start();
    let real = smtp_handler(&sink);
    // The real handler sends and records the send; then the attempt "crashes" before its
    // success is written back (as a SIGKILL would leave it): a retryable failure.
    let crashing = move |ctx: &JobContext| -> Result<(), JobError> {
        litejobs::Handler::run(&real, ctx)?;
        if ctx.attempt() == 1 {
            return Err(JobError::retry("simulated crash after the send"));
        }
        Ok(())
    };
    let builder = Worker::builder(&env.queue).handler(JOB_TYPE, crashing);
    let id = welcome(5).enqueue(&env.queue).expect("enqueue");

    assert_eq!(drain(&builder).failed, 1);
    assert_eq!(
        sink.wait_messages(1, WAIT).len(),
        1,
        "the first attempt sent"
    );
    env.clock.advance(Duration::from_secs(3600));
    assert_eq!(drain(&builder).succeeded, 1);
    let messages = sink.messages();
    assert_eq!(messages.len(), 1, "the retry must not send again");
    let result = job(&env.queue, id).result.expect("a result");
    assert_eq!(result["already_sent"], json!(true));
    assert_eq!(
        result["message_id"],
        json!(messages[0].header("Message-ID"))
    );
}

#[test]
fn the_dev_mailer_writes_the_message_to_a_file() {
    let env = setup();
    let outbox = env.dir.path().join("outbox");
    let handler = EmailHandler::new(FileMailer::new(&outbox)).default_from(FROM);
    let id = welcome(11).enqueue(&env.queue).expect("enqueue");
    assert_eq!(drain(&builder(&env, handler)).succeeded, 1);

    let files: Vec<_> = std::fs::read_dir(&outbox)
        .expect("the outbox folder exists")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(files[0].extension().and_then(|e| e.to_str()), Some("eml"));
    let text = std::fs::read_to_string(&files[0]).expect("read the .eml");
    let result = job(&env.queue, id).result.expect("result");
    let message_id = result["message_id"].as_str().expect("message id");
    for expected in [
        "From: \"Litejobs App\" <app@example.com>",
        "To: user11@example.com",
        "Subject: Welcome aboard",
        &format!("Message-ID: {message_id}"),
        "Hello, glad you are here.",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}

#[test]
fn builtin_options_from_the_environment_register_the_email_handler() {
    let env = setup();
    let sink = SmtpSink::start();
    let url = sink.url();
    let vars = move |name: &str| -> Option<String> {
        match name {
            "LITEJOBS_SMTP_URL" => Some(url.clone()),
            "LITEJOBS_MAIL_FROM" => Some("ops@example.com".to_string()),
            _ => None,
        }
    };
    let options = BuiltinOptions::from_lookup(&vars).expect("options");
    let builder = builtin::register(Worker::builder(&env.queue), &options).expect("register");
    let id = env
        .queue
        .enqueue(NewJob::new(
            JOB_TYPE,
            json!({"to": ["a@example.com", "b@example.com"], "subject": "Hi", "text": "Body"}),
        ))
        .expect("enqueue");
    assert_eq!(
        drain(&builder).succeeded,
        1,
        "{:?}",
        job(&env.queue, id).last_error
    );
    let m = &sink.wait_messages(1, WAIT)[0];
    assert_eq!(m.mail_from, "ops@example.com");
    assert_eq!(
        m.rcpt_to,
        vec!["a@example.com".to_string(), "b@example.com".to_string()]
    );
}

#[test]
fn email_options_refuse_two_mailers_and_a_bad_sender() {
    let lookup = |vars: &'static [(&'static str, &'static str)]| {
        move |name: &str| -> Option<String> {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    };
    let both = lookup(&[
        ("LITEJOBS_SMTP_URL", "smtp://h?tls=none"),
        ("LITEJOBS_MAIL_DIR", "/tmp/x"),
    ]);
    let msg = EmailOptions::from_lookup(&both)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        msg.contains("LITEJOBS_SMTP_URL and LITEJOBS_MAIL_DIR"),
        "{msg}"
    );
    let bad = lookup(&[
        ("LITEJOBS_MAIL_DIR", "/tmp/x"),
        ("LITEJOBS_MAIL_FROM", "not an address"),
    ]);
    let msg = EmailOptions::from_lookup(&bad)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(msg.contains("LITEJOBS_MAIL_FROM"), "{msg}");
    let url = lookup(&[("LITEJOBS_SMTP_URL", "smtp://u:pw@h?tls=bogus")]);
    let msg = EmailOptions::from_lookup(&url)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        msg.starts_with("LITEJOBS_SMTP_URL") && !msg.contains("pw@"),
        "{msg}"
    );
    let none = lookup(&[]);
    assert!(EmailOptions::from_lookup(&none)
        .expect("no mailer is fine")
        .is_none());
    let dir = lookup(&[("LITEJOBS_MAIL_DIR", "/tmp/outbox")]);
    let options = EmailOptions::from_lookup(&dir).expect("dir").expect("some");
    assert_eq!(options.mailer, MailerConfig::Dir("/tmp/outbox".into()));
    let _ = email::DEFAULT_EMAIL_TIMEOUT;
}

#[test]
fn a_started_worker_sends_through_the_sink() {
    let env = setup();
    let sink = SmtpSink::start();
    let events = env.queue.subscribe();
    let worker = builder(&env, smtp_handler(&sink)).start().expect("start");
    let id = welcome(77).enqueue(&env.queue).expect("enqueue");
    crate::support::scripted::wait_status(&events, id, JobStatus::Succeeded);
    worker.shutdown(Duration::from_secs(10)).expect("shutdown");
    let m = &sink.wait_messages(1, WAIT)[0];
    assert_eq!(m.header("To").as_deref(), Some("user77@example.com"));
    let result: Value = job(&env.queue, id).result.expect("result");
    assert_eq!(result["provider_id"], json!("SINK-1"));
}

#[test]
fn the_email_example_writes_its_message_once() {
    let dir = crate::support::temp_dir();
    let out = crate::support::run_example("email", &[dir.path().as_os_str()]);
    for expected in [
        "dedupe key: email:42:welcome:signup",
        "enqueued email job 1; the same email again gave job 1",
        "job 1: succeeded",
        "template: welcome v3",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    let files: Vec<_> = std::fs::read_dir(dir.path()).expect("outbox").collect();
    assert_eq!(files.len(), 1, "one .eml file");
}

#[cfg(feature = "cli")]
#[test]
fn litejobs_work_sends_a_plain_sql_email_row_through_smtp() {
    use crate::support::child::Deadline;
    use crate::support::KillOnDrop;
    use std::process::{Command, Stdio};

    let dir = crate::support::temp_dir();
    let db = dir.path().join("app.db");
    let sink = SmtpSink::start();
    let queue = Queue::open(&db).expect("create the database");
    // What a program in another language writes.
    let conn = crate::support::raw_conn(&db);
    conn.execute(
        "INSERT INTO jobs (job_type, payload, idempotency_key) VALUES ('send_email', ?1, ?2)",
        [
            json!({"to": "grace@example.com", "subject": "Your invoice", "text": "Attached.",
                   "template": "invoice", "template_version": 2, "user_id": 8, "event": "inv-1"})
            .to_string(),
            "email:8:invoice:inv-1".to_string(),
        ],
    )
    .expect("insert the email row");
    let id = conn.last_insert_rowid();

    let log = std::fs::File::create(dir.path().join("work.log")).expect("log file");
    let child = Command::new(env!("CARGO_BIN_EXE_litejobs"))
        .arg("--db")
        .arg(&db)
        .arg("work")
        .env("LITEJOBS_SMTP_URL", sink.url())
        .env("LITEJOBS_MAIL_FROM", "billing@example.com")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("starting litejobs work");
    let mut child = KillOnDrop(child);

    let m = &sink.wait_messages(1, WAIT)[0];
    assert_eq!(m.mail_from, "billing@example.com");
    assert_eq!(m.header("Subject").as_deref(), Some("Your invoice"));
    let deadline = Deadline::new("litejobs work email", WAIT);
    loop {
        let j = job(&queue, id);
        if j.status == JobStatus::Succeeded {
            let result = j.result.expect("result");
            assert_eq!(result["template_version"], json!("2"));
            assert_eq!(result["message_id"], json!(m.header("Message-ID")));
            break;
        }
        assert!(
            !j.status.is_final(),
            "the email job ended {}: {j:?}",
            j.status
        );
        deadline.check(|| format!("job {id} to succeed (now {j:?})"));
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = child.0.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    loop {
        if let Some(status) = child.0.try_wait().expect("waiting for litejobs work") {
            let log = std::fs::read_to_string(dir.path().join("work.log")).unwrap_or_default();
            assert!(status.success(), "litejobs work exited {status}:\n{log}");
            break;
        }
        deadline.check(|| "litejobs work to exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(sink.messages().len(), 1);
    // The outcome is logged with the job id, Message-ID and recipients; never the body.
    let log = std::fs::read_to_string(dir.path().join("work.log")).unwrap_or_default();
    let sent = format!(
        "email job {id} sent: Message-ID {}, 1 recipient",
        m.header("Message-ID").unwrap_or_default()
    );
    assert!(log.contains(&sent), "no {sent:?} in:\n{log}");
    assert!(!log.contains("Attached."), "the body was logged:\n{log}");
}

/// Every byte but ASCII letters and digits as `%XX`, as a URL-encoding tool would write it.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A password with `/`, `?`, `#` and `@`, percent-encoded in
/// `LITEJOBS_SMTP_URL`, reaches the server as written.
#[test]
fn a_percent_encoded_password_with_reserved_characters_reaches_the_server() {
    let env = setup();
    let sink = SmtpSink::start();
    let password = "p/ss?w#rd@1:%+ ü";
    let url = format!(
        "smtp://mailer%40example.com:{}@127.0.0.1:{}?tls=none&timeout=2s",
        percent_encode(password),
        sink.port()
    );
    let vars = move |name: &str| (name == "LITEJOBS_SMTP_URL").then(|| url.clone());
    let options = BuiltinOptions::from_lookup(&vars).expect("options");
    let builder = builtin::register(Worker::builder(&env.queue), &options).expect("register");
    let id = env
        .queue
        .enqueue(NewJob::new(
            JOB_TYPE,
            json!({"to": "a@example.com", "from": "app@example.com", "subject": "Hi", "text": "Body"}),
        ))
        .expect("enqueue");
    assert_eq!(
        drain(&builder).succeeded,
        1,
        "{:?}",
        job(&env.queue, id).last_error
    );
    assert_eq!(
        sink.logins(),
        vec![("mailer@example.com".to_string(), password.to_string())]
    );
}

/// An unencoded `/`, `?` or `#` in the password is refused with a
/// message that says how to encode it and never shows the password.
#[test]
fn an_unencoded_reserved_character_in_the_smtp_password_is_refused_unshown() {
    for url in [
        "smtp://mailer:hunter2/x@smtp.example.com?tls=tls",
        "smtp://mailer:hunter2?x@smtp.example.com",
        "smtp://mailer:hunter2#x@smtp.example.com:2525",
    ] {
        let vars = move |name: &str| (name == "LITEJOBS_SMTP_URL").then(|| url.to_string());
        let msg = EmailOptions::from_lookup(&vars)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(msg.starts_with("LITEJOBS_SMTP_URL"), "{url}: {msg}");
        assert!(
            msg.contains("smtp://mailer:***@smtp.example.com"),
            "{url}: {msg}"
        );
        assert!(msg.contains("%2F") && msg.contains("%3F"), "{url}: {msg}");
        assert!(!msg.contains("hunter2"), "{url}: {msg}");
    }
}

/// Sends through SMTP, then reports the first send as failed, as a connection lost right
/// after the server accepted the message would: the job is retried and sends again.
struct AcceptedThenLost {
    smtp: SmtpMailer,
    sends: std::sync::atomic::AtomicUsize,
}

impl email::Mailer for AcceptedThenLost {
    fn send(&self, email: &Email) -> Result<email::Sent, email::MailError> {
        let sent = self.smtp.send(email)?;
        if self.sends.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            return Err(email::MailError::transient(
                "the connection dropped after the server accepted the message",
            ));
        }
        Ok(sent)
    }
}

#[test]
fn two_fresh_databases_give_the_same_job_id_different_message_ids() {
    let sink = SmtpSink::start();
    let mut sent = Vec::new();
    for _ in 0..2 {
        // Same clock reading, same payload, same key: only the database differs.
        let env = setup();
        let id = welcome(12).enqueue(&env.queue).expect("enqueue");
        assert_eq!(drain(&builder(&env, smtp_handler(&sink))).succeeded, 1);
        let record = job(&env.queue, id);
        let result = record.result.expect("a result");
        sent.push((id, record.created_at, result["message_id"].clone()));
    }
    assert_eq!(
        (sent[0].0, sent[0].1),
        (sent[1].0, sent[1].1),
        "same id and created_at"
    );
    assert_ne!(sent[0].2, sent[1].2, "{sent:?}");
    let headers: Vec<Option<String>> = sink
        .wait_messages(2, WAIT)
        .iter()
        .map(|m| m.header("Message-ID"))
        .collect();
    assert_eq!(
        headers,
        vec![
            sent[0].2.as_str().map(str::to_string),
            sent[1].2.as_str().map(str::to_string)
        ]
    );
}

#[test]
fn a_resend_after_the_server_accepted_keeps_the_message_id() {
    let env = setup();
    let sink = SmtpSink::start();
    let config = SmtpConfig::from_url(&sink.url()).expect("the sink's URL parses");
    let mailer = AcceptedThenLost {
        smtp: SmtpMailer::new(&config).expect("an SMTP mailer"),
        sends: std::sync::atomic::AtomicUsize::new(0),
    };
    let handler = EmailHandler::new(mailer).default_from(FROM);
    let builder = builder(&env, handler);
    let id = EmailJob::new("ada@example.com", "Receipt", "Thanks.")
        .enqueue(&env.queue)
        .expect("enqueue");

    assert_eq!(drain(&builder).failed, 1);
    let first = sink.wait_messages(1, WAIT)[0].header("Message-ID");
    let kept = job(&env.queue, id)
        .progress
        .expect("the Message-ID is kept");
    assert_eq!(
        kept["message_id"],
        json!(first),
        "kept in the job's progress"
    );

    env.clock.advance(Duration::from_secs(3600));
    assert_eq!(drain(&builder).succeeded, 1);
    let messages = sink.wait_messages(2, WAIT);
    assert_eq!(messages.len(), 2, "the retry sent again");
    assert_eq!(messages[1].header("Message-ID"), first, "the same id");
    let result = job(&env.queue, id).result.expect("a result");
    assert_eq!(result["message_id"], json!(first));
    assert_eq!(result["already_sent"], json!(false));
}

/// Fails the next `n` sends with a 451 and returns the options `litejobs work` would build
/// from these variables (the sink's URL, a sender, and `extra`).
fn options_failing_first(sink: &SmtpSink, n: usize, extra: &[(&str, &str)]) -> BuiltinOptions {
    for _ in 0..n {
        sink.fail_next(Stage::Rcpt, 451, "4.3.0 try again later");
    }
    let url = sink.url();
    let extra: Vec<(String, String)> = extra
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    BuiltinOptions::from_lookup(&move |name: &str| match name {
        "LITEJOBS_SMTP_URL" => Some(url.clone()),
        "LITEJOBS_MAIL_FROM" => Some("ops@example.com".to_string()),
        _ => extra
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone()),
    })
    .expect("options")
}

/// Drains one failed attempt and returns how long the job waits for its next one (ms).
fn failed_and_waits(env: &TestEnv, builder: &WorkerBuilder, id: i64) -> i64 {
    assert_eq!(drain(builder).failed, 1, "{:?}", job(&env.queue, id));
    let record = job(&env.queue, id);
    assert_eq!(record.status, JobStatus::Failed);
    record.run_at - env.queue.now_ms()
}

#[test]
fn email_retries_follow_the_configured_schedule() {
    let env = setup();
    let sink = SmtpSink::start();
    let options =
        options_failing_first(&sink, 3, &[("LITEJOBS_EMAIL_RETRY_SCHEDULE", "30s,2m,10m")]);
    let builder = builtin::register(Worker::builder(&env.queue), &options).expect("register");
    let id = welcome(21).enqueue(&env.queue).expect("enqueue");
    for secs in [30, 120, 600] {
        let wait = failed_and_waits(&env, &builder, id);
        // The schedule's delay, ±10 % jitter.
        assert!(
            (secs * 900..=secs * 1100).contains(&wait),
            "after {secs}s expected, the job waits {wait} ms"
        );
        // Not a moment before its time...
        env.clock.advance(Duration::from_millis(wait as u64 - 1));
        assert_eq!(drain(&builder).attempts(), 0);
        env.clock.advance(Duration::from_millis(1));
    }
    // ...and then the fourth attempt goes through.
    assert_eq!(drain(&builder).succeeded, 1);
    assert_eq!(job(&env.queue, id).attempts, 4);
    assert_eq!(sink.wait_messages(1, WAIT).len(), 1);
}

#[test]
fn the_default_email_schedule_waits_a_minute_first_and_hours_later() {
    let env = setup();
    let sink = SmtpSink::start();
    let options = options_failing_first(&sink, 1, &[]);
    let builder = builtin::register(Worker::builder(&env.queue), &options).expect("register");
    let id = welcome(22).enqueue(&env.queue).expect("enqueue");
    let wait = failed_and_waits(&env, &builder, id);
    assert!((54_000..=66_000).contains(&wait), "waits {wait} ms");
    let policy = email::default_retry_policy();
    let total: Duration = (1..6).map(|a| policy.delay(a, 0.5)).sum();
    assert!(
        total > Duration::from_secs(7 * 3600),
        "6 attempts span {total:?}"
    );
}
