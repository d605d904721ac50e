//! Email: the [`Mailer`] trait, an SMTP mailer ([`SmtpMailer`], lettre's blocking
//! transport), development mailers that write files or log lines ([`FileMailer`],
//! [`LogMailer`]), and the `send_email` job type ([`EmailJob`], [`EmailHandler`]). Cargo
//! feature `email` (on by default).
//!
//! **Sent once.** An [`EmailJob`] with a user, a template and an event gets the idempotency
//! key `email:<user>:<template>:<event>`: enqueueing the same email again returns the first
//! job. Before sending, the handler checks that the key's send has not completed
//! ([`JobContext::once`](crate::JobContext::once)), so a crash between the send and the job's write-back does not
//! send twice on the retry. The Message-ID is drawn at random on the job's first attempt and
//! kept in the job's progress (`{"message_id": ...}`) before the send, so even a resend (a
//! crash in the instant after the server accepted the message) carries the same id, which
//! mail clients use to drop duplicates, while two databases' job 12 get different ids.
//!
//! **Retries.** Transient failures are retried by [`default_retry_policy`] (1 min, 5 min,
//! 30 min, 2 h, 5 h, 10 h; ±10 %), so an SMTP outage of hours is waited out;
//! [`EmailOptions::retry_policy`] or `LITEJOBS_EMAIL_RETRY_SCHEDULE` sets another.
//!
//! **Logs.** Each sent email is logged at `info` (job id, Message-ID, number of recipients),
//! each failed attempt at `warn` with the error and whether it will be retried. Bodies,
//! subjects and passwords never reach the log.
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
mod handler;
mod job;
mod mailer;
mod message;
mod options;
mod smtp;

use std::time::Duration;

use crate::error::Result;
use crate::WorkerBuilder;

pub use dev::{FileMailer, LogMailer};
pub use handler::EmailHandler;
pub use job::EmailJob;
pub use mailer::{Email, MailError, Mailer, Sent};
pub use options::{default_retry_policy, EmailOptions, MailerConfig};
pub use smtp::{SmtpConfig, SmtpMailer, SmtpTls, DEFAULT_SMTP_TIMEOUT};

/// The job type of built-in email jobs.
pub const JOB_TYPE: &str = "send_email";
/// The attempt time limit [`register`] gives email jobs: above the SMTP timeout, so a slow
/// server is reported by the mailer rather than cut off mid-send.
pub const DEFAULT_EMAIL_TIMEOUT: Duration = Duration::from_secs(30);

/// Registers the `send_email` handler with the mailer, time limit and retry policy of
/// `options`.
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
        .timeout(JOB_TYPE, options.timeout)
        .retry_policy(JOB_TYPE, options.retry_policy.clone()))
}
