//! Email (R18): the [`Mailer`] trait, an SMTP mailer ([`SmtpMailer`], lettre's blocking
//! transport), development mailers that write files or log lines ([`FileMailer`],
//! [`LogMailer`]), and the `send_email` job type ([`EmailJob`], [`EmailHandler`]).
//!
//! **Sent once.** An [`EmailJob`] with a user, a template and an event gets the idempotency
//! key `email:<user>:<template>:<event>`: enqueueing the same email again returns the first
//! job (R12). Before sending, the handler checks that the key's send has not completed
//! ([`JobContext::once`]), so a crash between the send and the job's write-back does not
//! send twice on the retry. The Message-ID is derived from the same key, so even a resend
//! (a crash in the instant after the server accepted the message) carries the same id, which
//! mail clients use to drop duplicates.
//!
//! **Outcomes.** SMTP 4xx replies, connection failures and timeouts are retried by the job
//! type's policy; 5xx replies and a missing or malformed address make the job dead at once,
//! with the server's reply (and its code as the job's status code) or the address in the
//! error. A bad address is refused before any connection is made.
//!
//! **Result.** The job's result is `{"message_id", "provider_id", "response", "template",
//! "template_version", "content_hash", "to", "already_sent"}`: `provider_id` is the id the
//! server gave the message (`250 ... queued as <id>`), `content_hash` the SHA-256 of the
//! subject and bodies.
//!
//! ```
//! use litejobs::builtin::email::{EmailHandler, EmailJob, FileMailer};
//! use litejobs::{testing, Queue, Worker};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let outbox = tempfile::tempdir()?;
//! let queue = Queue::open_in_memory()?;
//! let worker = Worker::builder(&queue).handler(
//!     litejobs::builtin::email::JOB_TYPE,
//!     EmailHandler::new(FileMailer::new(outbox.path())).default_from("app@example.com"),
//! );
//! EmailJob::new("ada@example.com", "Welcome, Ada", "Glad you are here.")
//!     .template("welcome", "3")
//!     .dedupe(42, "signup")
//!     .enqueue(&queue)?;
//! assert_eq!(testing::drain(&worker)?.succeeded, 1);
//! assert_eq!(std::fs::read_dir(outbox.path())?.count(), 1); // one .eml file
//! # Ok(())
//! # }
//! ```

mod dev;
mod message;
mod smtp;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::context::JobContext;
use crate::error::{Error, Result};
use crate::handler::{Handler, JobError};
use crate::job::NewJob;
use crate::{Queue, WorkerBuilder};

pub use dev::{FileMailer, LogMailer};
pub use smtp::{SmtpConfig, SmtpMailer, SmtpTls, DEFAULT_SMTP_TIMEOUT};

/// The job type of built-in email jobs.
pub const JOB_TYPE: &str = "send_email";
/// The attempt time limit [`register`] gives email jobs: above the SMTP timeout, so a slow
/// server is reported by the mailer rather than cut off mid-send.
pub const DEFAULT_EMAIL_TIMEOUT: Duration = Duration::from_secs(30);
/// The domain of generated Message-IDs when the sender's address has none.
const FALLBACK_MESSAGE_ID_DOMAIN: &str = "litejobs.localhost";

/// One email, ready to send: what a [`Mailer`] gets.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Email {
    /// The sender, `addr@domain` or `Name <addr@domain>`.
    pub from: String,
    /// The recipients (at least one).
    pub to: Vec<String>,
    /// Where replies go, if not to the sender.
    pub reply_to: Option<String>,
    /// The subject line.
    pub subject: String,
    /// The plain-text body.
    pub text: String,
    /// An HTML alternative of the body.
    pub html: Option<String>,
    /// The Message-ID header, with its angle brackets.
    pub message_id: String,
}

impl Email {
    /// An email from `from` to `to` with a plain-text body and a generated Message-ID.
    pub fn new(
        from: impl Into<String>,
        to: impl Into<String>,
        subject: impl Into<String>,
        text: impl Into<String>,
    ) -> Email {
        let from = from.into();
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let seed = format!(
            "{:?}:{}:{}",
            std::time::SystemTime::now(),
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let message_id = message_id_for(&seed, &from);
        Email {
            from,
            to: vec![to.into()],
            reply_to: None,
            subject: subject.into(),
            text: text.into(),
            html: None,
            message_id,
        }
    }

    /// Adds an HTML alternative.
    pub fn html(mut self, html: impl Into<String>) -> Email {
        self.html = Some(html.into());
        self
    }

    /// The SHA-256 (hex) of the subject and bodies: what was sent, without the addresses.
    pub fn content_hash(&self) -> String {
        let mut hash = Sha256::new();
        for part in [
            self.subject.as_str(),
            self.text.as_str(),
            self.html.as_deref().unwrap_or(""),
        ] {
            // Length-prefixed, so moving text between parts changes the hash.
            hash.update((part.len() as u64).to_be_bytes());
            hash.update(part.as_bytes());
        }
        hex(&hash.finalize())
    }

    /// The formatted RFC 5322 message (headers and body), as SMTP would send it.
    ///
    /// # Errors
    /// A permanent [`MailError`] when an address is malformed.
    pub fn formatted(&self) -> std::result::Result<Vec<u8>, MailError> {
        Ok(message::build(self)?.formatted())
    }
}

/// What a mailer reports for an accepted email.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sent {
    /// The message's Message-ID.
    pub message_id: String,
    /// The provider's own id for the message (e.g. the queue id in `250 Ok: queued as
    /// 4F2A1`), when it gave one.
    pub provider_id: Option<String>,
    /// The provider's reply (for SMTP, the reply to the message data), or where the
    /// message was put (a file mailer).
    pub response: Option<String>,
}

impl Sent {
    /// An accepted email with only its Message-ID known.
    pub fn new(message_id: impl Into<String>) -> Sent {
        Sent {
            message_id: message_id.into(),
            ..Sent::default()
        }
    }

    /// With the provider's id for the message.
    pub fn provider_id(mut self, id: impl Into<String>) -> Sent {
        self.provider_id = Some(id.into());
        self
    }

    /// With the provider's reply.
    pub fn response(mut self, response: impl Into<String>) -> Sent {
        self.response = Some(response.into());
        self
    }
}

/// Why a mailer did not send: a transient failure (retry later) or a permanent one (the
/// email can never be sent as it is).
///
/// It converts into the job outcome that says so ([`JobError::retry`] or
/// [`JobError::permanent`], with the SMTP code as status code), which is why it does not
/// implement `std::error::Error`: that would give it the generic conversion, which retries
/// everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailError {
    permanent: bool,
    message: String,
    code: Option<u16>,
}

impl MailError {
    /// A failure that may pass: a 4xx reply, a refused connection, a timeout.
    pub fn transient(message: impl Into<String>) -> MailError {
        MailError {
            permanent: false,
            message: message.into(),
            code: None,
        }
    }

    /// A failure that will not pass by retrying: a 5xx reply, a malformed address.
    pub fn permanent(message: impl Into<String>) -> MailError {
        MailError {
            permanent: true,
            message: message.into(),
            code: None,
        }
    }

    /// Attaches the server's reply code (e.g. 451, 550).
    pub fn with_code(mut self, code: u16) -> MailError {
        self.code = Some(code);
        self
    }

    /// True for a permanent failure.
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }

    /// The server's reply code, if there was one.
    pub fn code(&self) -> Option<u16> {
        self.code
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for MailError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<MailError> for JobError {
    fn from(err: MailError) -> JobError {
        let job_error = if err.permanent {
            JobError::permanent(err.message)
        } else {
            JobError::retry(err.message)
        };
        match err.code {
            Some(code) => job_error.with_status_code(code),
            None => job_error,
        }
    }
}

/// Sends emails. Implemented by [`SmtpMailer`], [`FileMailer`] and [`LogMailer`]; implement
/// it for an HTTP email API the same way.
pub trait Mailer: Send + Sync + 'static {
    /// Sends one email, blocking until the provider accepted or refused it.
    ///
    /// # Errors
    /// [`MailError::transient`] for what may pass, [`MailError::permanent`] for what will not.
    fn send(&self, email: &Email) -> std::result::Result<Sent, MailError>;
}

impl<M: Mailer + ?Sized> Mailer for Arc<M> {
    fn send(&self, email: &Email) -> std::result::Result<Sent, MailError> {
        (**self).send(email)
    }
}

impl<M: Mailer + ?Sized> Mailer for Box<M> {
    fn send(&self, email: &Email) -> std::result::Result<Sent, MailError> {
        (**self).send(email)
    }
}

/// The payload of a `send_email` job, and a builder for it.
///
/// The JSON form, for programs in other languages (`to` may also be a list; every field but
/// `to`, `subject` and `text` is optional):
/// ```json
/// {"to": "ada@example.com", "from": "app@example.com", "reply_to": "help@example.com",
///  "subject": "Welcome", "text": "Hello", "html": "<p>Hello</p>",
///  "template": "welcome", "template_version": "3", "user_id": 42, "event": "signup"}
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an EmailJob does nothing until it is enqueued"]
pub struct EmailJob {
    to: Vec<String>,
    from: Option<String>,
    reply_to: Option<String>,
    subject: String,
    text: String,
    html: Option<String>,
    template: Option<String>,
    template_version: Option<String>,
    user: Option<String>,
    event: Option<String>,
}

impl EmailJob {
    /// An email to `to` with a subject and a plain-text body, from the worker's default
    /// sender unless [`from`](EmailJob::from) says otherwise.
    pub fn new(
        to: impl Into<String>,
        subject: impl Into<String>,
        text: impl Into<String>,
    ) -> EmailJob {
        EmailJob {
            to: vec![to.into()],
            from: None,
            reply_to: None,
            subject: subject.into(),
            text: text.into(),
            html: None,
            template: None,
            template_version: None,
            user: None,
            event: None,
        }
    }

    /// Adds a recipient.
    pub fn also_to(mut self, to: impl Into<String>) -> EmailJob {
        self.to.push(to.into());
        self
    }

    /// The sender. Defaults to the handler's default sender.
    pub fn from(mut self, from: impl Into<String>) -> EmailJob {
        self.from = Some(from.into());
        self
    }

    /// Where replies go.
    pub fn reply_to(mut self, reply_to: impl Into<String>) -> EmailJob {
        self.reply_to = Some(reply_to.into());
        self
    }

    /// An HTML alternative of the body.
    pub fn html(mut self, html: impl Into<String>) -> EmailJob {
        self.html = Some(html.into());
        self
    }

    /// The template the email was rendered from, and its version; kept in the job's result.
    pub fn template(mut self, name: impl Into<String>, version: impl Into<String>) -> EmailJob {
        self.template = Some(name.into());
        self.template_version = Some(version.into());
        self
    }

    /// The user and the event the email is about: with a template, they make the dedupe key
    /// `email:<user>:<template>:<event>`, so the same email is sent once.
    pub fn dedupe(mut self, user: impl fmt::Display, event: impl Into<String>) -> EmailJob {
        self.user = Some(user.to_string());
        self.event = Some(event.into());
        self
    }

    /// The dedupe key, when the job has a user, a template and an event.
    pub fn dedupe_key(&self) -> Option<String> {
        match (&self.user, &self.template, &self.event) {
            (Some(user), Some(template), Some(event)) => {
                Some(format!("email:{user}:{template}:{event}"))
            }
            _ => None,
        }
    }

    /// The payload as JSON.
    pub fn payload(&self) -> Value {
        let mut payload = json!({
            "to": if self.to.len() == 1 { json!(self.to[0]) } else { json!(self.to) },
            "subject": self.subject,
            "text": self.text,
        });
        let optional = [
            ("from", &self.from),
            ("reply_to", &self.reply_to),
            ("html", &self.html),
            ("template", &self.template),
            ("template_version", &self.template_version),
            ("user_id", &self.user),
            ("event", &self.event),
        ];
        if let Some(map) = payload.as_object_mut() {
            for (name, value) in optional {
                if let Some(value) = value {
                    map.insert(name.to_string(), json!(value));
                }
            }
        }
        payload
    }

    /// The job: type [`JOB_TYPE`], this payload, and the dedupe key as idempotency key. Set
    /// more options (queue, delay, ...) on the returned [`NewJob`].
    pub fn into_job(self) -> NewJob {
        let job = NewJob::new(JOB_TYPE, self.payload());
        match self.dedupe_key() {
            Some(key) => job.idempotency_key(key),
            None => job,
        }
    }

    /// Enqueues the job; returns its id, or the id of the job already holding its dedupe
    /// key (the email is then not sent again).
    ///
    /// # Errors
    /// As [`Queue::enqueue`].
    pub fn enqueue(self, queue: &Queue) -> Result<i64> {
        queue.enqueue(self.into_job())
    }

    /// Enqueues the job inside the caller's transaction (e.g. with the new user's row).
    ///
    /// # Errors
    /// As [`Queue::enqueue_in`].
    pub fn enqueue_in(self, queue: &Queue, conn: &Connection) -> Result<i64> {
        queue.enqueue_in(conn, self.into_job())
    }

    /// Reads a payload; the error names the field.
    pub fn from_payload(payload: &Value) -> std::result::Result<EmailJob, String> {
        let text_field = |name: &str| -> std::result::Result<Option<String>, String> {
            match payload.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(Value::Number(n)) if name == "template_version" || name == "user_id" => {
                    Ok(Some(n.to_string()))
                }
                Some(other) => Err(format!("payload field {name} must be text, got {other}")),
            }
        };
        let required = |name: &str| -> std::result::Result<String, String> {
            text_field(name)?.ok_or_else(|| format!("payload field {name} is missing"))
        };
        let to = match payload.get("to") {
            None | Some(Value::Null) => return Err("payload field to is missing".to_string()),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(list)) => list
                .iter()
                .map(|v| {
                    v.as_str().map(str::to_string).ok_or_else(|| {
                        format!("payload field to must hold addresses as text, got {v}")
                    })
                })
                .collect::<std::result::Result<Vec<_>, _>>()?,
            Some(other) => {
                return Err(format!(
                    "payload field to must be an address or a list of addresses, got {other}"
                ))
            }
        };
        if to.is_empty() {
            return Err("payload field to is an empty list".to_string());
        }
        Ok(EmailJob {
            to,
            from: text_field("from")?,
            reply_to: text_field("reply_to")?,
            subject: required("subject")?,
            text: required("text")?,
            html: text_field("html")?,
            template: text_field("template")?,
            template_version: text_field("template_version")?,
            user: text_field("user_id")?,
            event: text_field("event")?,
        })
    }
}

/// Runs `send_email` jobs with a [`Mailer`]: checks the addresses, sends once per dedupe key
/// ([`JobContext::once`]), and stores the message id, template and content hash as the
/// job's result. See the [module docs](self) for the outcomes.
#[derive(Clone)]
pub struct EmailHandler {
    mailer: Arc<dyn Mailer>,
    default_from: Option<String>,
}

impl fmt::Debug for EmailHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmailHandler")
            .field("default_from", &self.default_from)
            .finish()
    }
}

impl EmailHandler {
    /// A handler sending through `mailer`.
    pub fn new(mailer: impl Mailer) -> EmailHandler {
        EmailHandler {
            mailer: Arc::new(mailer),
            default_from: None,
        }
    }

    /// The sender of jobs whose payload has no `from`. Without one, such jobs are dead.
    pub fn default_from(mut self, from: impl Into<String>) -> EmailHandler {
        self.default_from = Some(from.into());
        self
    }

    /// The email a job sends, checked: every address parses, there is a sender.
    fn email_of(&self, ctx: &JobContext, job: &EmailJob) -> std::result::Result<Email, MailError> {
        let from = job
            .from
            .clone()
            .or_else(|| self.default_from.clone())
            .ok_or_else(|| {
                MailError::permanent(
                    "the email has no sender: the payload has no from and no default sender is \
                 configured (LITEJOBS_MAIL_FROM)",
                )
            })?;
        message::mailbox(&from, "sender")?;
        for to in &job.to {
            message::mailbox(to, "recipient")?;
        }
        if let Some(reply_to) = &job.reply_to {
            message::mailbox(reply_to, "reply-to")?;
        }
        // Stable across attempts and across jobs with the same dedupe key.
        let seed = match ctx.idempotency_key() {
            Some(key) => key.to_string(),
            None => format!("job:{}", ctx.id()),
        };
        let message_id = message_id_for(&seed, &from);
        Ok(Email {
            from,
            to: job.to.clone(),
            reply_to: job.reply_to.clone(),
            subject: job.subject.clone(),
            text: job.text.clone(),
            html: job.html.clone(),
            message_id,
        })
    }
}

impl Handler for EmailHandler {
    fn run(&self, ctx: &JobContext) -> std::result::Result<(), JobError> {
        let job = EmailJob::from_payload(ctx.payload()).map_err(JobError::permanent)?;
        let email = self.email_of(ctx, &job)?;
        let mut sent = None;
        let first_time = ctx.once(|| {
            sent = Some(self.mailer.send(&email)?);
            Ok(())
        })?;
        let sent = sent.unwrap_or_else(|| Sent::new(email.message_id.clone()));
        ctx.set_result(json!({
            "message_id": sent.message_id,
            "provider_id": sent.provider_id,
            "response": sent.response,
            "template": job.template,
            "template_version": job.template_version,
            "content_hash": email.content_hash(),
            "to": email.to,
            "already_sent": !first_time,
        }));
        Ok(())
    }
}

/// `<lj.HASH@DOMAIN>`: the same seed and sender give the same id.
fn message_id_for(seed: &str, from: &str) -> String {
    let digest = Sha256::digest(seed.as_bytes());
    let domain = from
        .trim_end_matches('>')
        .rsplit_once('@')
        .map(|(_, domain)| domain.trim())
        .filter(|d| {
            !d.is_empty()
                && d.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        })
        .unwrap_or(FALLBACK_MESSAGE_ID_DOMAIN);
    format!("<lj.{}@{domain}>", &hex(&digest)[..32])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Which mailer `litejobs work` (and [`register`]) sends with.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MailerConfig {
    /// SMTP ([`SmtpMailer`]).
    Smtp(SmtpConfig),
    /// `.eml` files in a folder ([`FileMailer`]), for development.
    Dir(PathBuf),
    /// Log lines only ([`LogMailer`]), for development.
    Log,
}

/// Email settings of the built-in handlers.
///
/// From the environment ([`EmailOptions::from_lookup`]):
/// - `LITEJOBS_SMTP_URL=smtp://user:pass@host:port?tls=starttls|tls|none&timeout=10s`
///   (see [`SmtpConfig::from_url`]; a `/`, `?`, `#` or `%` in the password is written
///   percent-encoded), or
/// - `LITEJOBS_MAIL_DIR=/path` to write `.eml` files instead (development), or
/// - `LITEJOBS_MAIL_LOG=1` to only log them;
/// - `LITEJOBS_MAIL_FROM=app@example.com`: the sender of jobs without `from`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EmailOptions {
    /// The mailer.
    pub mailer: MailerConfig,
    /// The sender of jobs whose payload has no `from`.
    pub default_from: Option<String>,
    /// The attempt time limit of email jobs. Defaults to [`DEFAULT_EMAIL_TIMEOUT`].
    pub timeout: Duration,
}

impl EmailOptions {
    /// Options sending with `mailer`.
    pub fn new(mailer: MailerConfig) -> EmailOptions {
        EmailOptions {
            mailer,
            default_from: None,
            timeout: DEFAULT_EMAIL_TIMEOUT,
        }
    }

    /// The sender of jobs whose payload has no `from`.
    pub fn default_from(mut self, from: impl Into<String>) -> EmailOptions {
        self.default_from = Some(from.into());
        self
    }

    /// Email options from variables read through `lookup` (see the type's docs); `None`
    /// when no mailer is configured.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) naming the variable: an
    /// unusable URL or sender, or more than one mailer set.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Option<EmailOptions>> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let smtp = get("LITEJOBS_SMTP_URL");
        let dir = get("LITEJOBS_MAIL_DIR");
        let log = get("LITEJOBS_MAIL_LOG").filter(|v| v != "0" && v != "false");
        let mut mailers = Vec::new();
        if let Some(url) = smtp {
            let config = SmtpConfig::from_url(&url).map_err(|e| e.prefixed("LITEJOBS_SMTP_URL"))?;
            mailers.push(("LITEJOBS_SMTP_URL", MailerConfig::Smtp(config)));
        }
        if let Some(dir) = dir {
            mailers.push(("LITEJOBS_MAIL_DIR", MailerConfig::Dir(PathBuf::from(dir))));
        }
        if log.is_some() {
            mailers.push(("LITEJOBS_MAIL_LOG", MailerConfig::Log));
        }
        if mailers.len() > 1 {
            let names: Vec<&str> = mailers.iter().map(|(name, _)| *name).collect();
            return Err(Error::invalid_config(format!(
                "set only one mailer, got {}",
                names.join(" and ")
            )));
        }
        let Some((_, mailer)) = mailers.pop() else {
            return Ok(None);
        };
        let mut options = EmailOptions::new(mailer);
        if let Some(from) = get("LITEJOBS_MAIL_FROM") {
            message::mailbox(&from, "sender").map_err(|e| {
                Error::invalid_config(format!("LITEJOBS_MAIL_FROM: {}", e.message()))
            })?;
            options.default_from = Some(from);
        }
        Ok(Some(options))
    }
}

/// Registers the `send_email` handler with the mailer of `options` and its time limit.
///
/// # Errors
/// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) when the mailer cannot be
/// set up (e.g. a TLS configuration lettre refuses).
pub fn register(builder: WorkerBuilder, options: &EmailOptions) -> Result<WorkerBuilder> {
    let mailer: Box<dyn Mailer> = match &options.mailer {
        MailerConfig::Smtp(config) => Box::new(SmtpMailer::new(config)?),
        MailerConfig::Dir(dir) => Box::new(FileMailer::new(dir)),
        MailerConfig::Log => Box::new(LogMailer),
    };
    let mut handler = EmailHandler::new(mailer);
    if let Some(from) = &options.default_from {
        handler = handler.default_from(from.clone());
    }
    Ok(builder
        .handler(JOB_TYPE, handler)
        .timeout(JOB_TYPE, options.timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dedupe_key_needs_user_template_and_event() {
        let job = EmailJob::new("a@example.com", "s", "t");
        assert_eq!(job.dedupe_key(), None);
        let job = job.template("welcome", "2").dedupe(42, "signup");
        assert_eq!(job.dedupe_key().as_deref(), Some("email:42:welcome:signup"));
        let round = EmailJob::from_payload(&job.payload()).expect("its own payload parses");
        assert_eq!(round, job);
    }

    #[test]
    fn payload_errors_name_the_field() {
        let err = EmailJob::from_payload(&json!({"subject": "s", "text": "t"})).err();
        assert_eq!(err.as_deref(), Some("payload field to is missing"));
        let err = EmailJob::from_payload(&json!({"to": 5, "subject": "s", "text": "t"})).err();
        assert!(err.unwrap_or_default().contains("payload field to must be"));
        let err = EmailJob::from_payload(&json!({"to": "a@b.c", "text": "t"})).err();
        assert_eq!(err.as_deref(), Some("payload field subject is missing"));
    }

    #[test]
    fn message_ids_are_stable_per_seed_and_use_the_sender_domain() {
        let a = message_id_for("email:1:w:e", "App <app@example.com>");
        assert_eq!(a, message_id_for("email:1:w:e", "app@example.com"));
        assert!(a.starts_with("<lj.") && a.ends_with("@example.com>"), "{a}");
        assert_ne!(a, message_id_for("email:2:w:e", "app@example.com"));
        assert!(message_id_for("x", "nobody").ends_with("@litejobs.localhost>"));
    }

    #[test]
    fn mail_errors_become_the_matching_job_outcome() {
        let e = JobError::from(MailError::permanent("550 no such user").with_code(550));
        assert_eq!(e.message(), "550 no such user");
        assert_eq!(e.status_code, Some(550));
        assert_eq!(e.action, crate::handler::Action::Permanent);
        let e = JobError::from(MailError::transient("451 try later").with_code(451));
        assert_eq!(e.action, crate::handler::Action::Retry);
    }

    #[test]
    fn content_hash_covers_subject_and_bodies() {
        let a = Email::new("a@example.com", "b@example.com", "Hi", "Body");
        let b = Email::new("a@example.com", "c@example.com", "Hi", "Body");
        assert_eq!(a.content_hash(), b.content_hash());
        assert_ne!(
            a.content_hash(),
            a.clone().html("<p>Body</p>").content_hash()
        );
        assert_ne!(
            Email::new("a@x.io", "b@x.io", "HiB", "ody").content_hash(),
            a.content_hash()
        );
    }
}
