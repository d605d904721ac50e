//! [`EmailHandler`]: runs `send_email` jobs with a [`Mailer`], once per dedupe key.

use std::fmt;
use std::sync::Arc;

use serde_json::json;

use super::mailer::{is_message_id, message_id_for};
use super::{message, Email, EmailJob, MailError, Mailer, Sent};
use crate::handler::JobContext;
use crate::handler::{Handler, JobError};

/// Runs `send_email` jobs with a [`Mailer`]: checks the addresses, sends once per dedupe key
/// ([`JobContext::once`]), and stores the message id, template and content hash as the
/// job's result. See the [module docs](super) for the outcomes.
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

    /// The email a job sends, checked: every address parses, there is a sender. Its
    /// Message-ID is left empty: [`message_id`] sets it once the addresses passed.
    fn email_of(&self, job: &EmailJob) -> std::result::Result<Email, MailError> {
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
        Ok(Email {
            from,
            to: job.to.clone(),
            reply_to: job.reply_to.clone(),
            subject: job.subject.clone(),
            text: job.text.clone(),
            html: job.html.clone(),
            message_id: String::new(),
        })
    }
}

impl Handler for EmailHandler {
    /// Sends the job's email and logs the outcome: `info` when sent (job id, Message-ID,
    /// number of recipients), `warn` with the error when not. Bodies, subjects and
    /// passwords are never logged.
    fn run(&self, ctx: &JobContext) -> std::result::Result<(), JobError> {
        match self.send(ctx) {
            Ok(done) => {
                log::info!("litejobs: {}", sent_line(ctx.id(), &done));
                Ok(())
            }
            Err(e) => {
                log::warn!("litejobs: {}", failed_line(ctx, &e));
                Err(e)
            }
        }
    }
}

/// What [`EmailHandler::send`] did, for the log line.
struct Done {
    message_id: String,
    recipients: usize,
    already_sent: bool,
    provider_id: Option<String>,
}

/// The log line of a sent email.
fn sent_line(id: i64, done: &Done) -> String {
    let recipients = match done.recipients {
        1 => "1 recipient".to_string(),
        n => format!("{n} recipients"),
    };
    let provider = done
        .provider_id
        .as_deref()
        .map(|p| format!(", provider id {p}"))
        .unwrap_or_default();
    if done.already_sent {
        format!(
            "email job {id} already sent by an earlier attempt: Message-ID {}, {recipients}",
            done.message_id
        )
    } else {
        format!(
            "email job {id} sent: Message-ID {}, {recipients}{provider}",
            done.message_id
        )
    }
}

/// The log line of a failed attempt: the error, and whether the job will be retried.
fn failed_line(ctx: &JobContext, e: &JobError) -> String {
    let next = if e.action == crate::handler::Action::Permanent {
        "dead, not retried"
    } else if ctx.is_last_attempt() {
        "dead, no attempts left"
    } else {
        "will be retried"
    };
    format!(
        "email job {} attempt {}/{} failed ({next}): {}",
        ctx.id(),
        ctx.attempt(),
        ctx.max_attempts(),
        e.message()
    )
}

impl EmailHandler {
    /// Sends the job's email once per dedupe key and stores the result.
    fn send(&self, ctx: &JobContext) -> std::result::Result<Done, JobError> {
        let job = EmailJob::from_payload(ctx.payload()).map_err(JobError::permanent)?;
        let mut email = self.email_of(&job)?;
        email.message_id = message_id(ctx, &email.from)?;
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
        Ok(Done {
            message_id: sent.message_id,
            recipients: email.to.len(),
            already_sent: !first_time,
            provider_id: sent.provider_id,
        })
    }
}

/// The job's Message-ID, the same on every attempt: a resend after a crash (the server
/// accepted the message, the success was never written back) carries the same id, and mail
/// clients drop the copy. Different for every other job, in this database or any other, as
/// RFC 5322 wants it unique worldwide.
///
/// The first attempt draws it from 128 random bits (with the job id and `created_at`) and
/// keeps it in the job's progress (`{"message_id": ...}`), committed **before** the send;
/// later attempts read it back. Nothing derived from the row alone would do: ids repeat
/// across databases (every fresh database has a job 12, so has a staging copy), and two
/// databases can insert the same payload under the same key in the same millisecond. The
/// schema has no per-database random identity to add, and none is added.
///
/// A dead job requeued by a person is a new job and gets a new Message-ID; the send itself
/// stays guarded by the idempotency key ([`JobContext::once`]).
fn message_id(ctx: &JobContext, from: &str) -> std::result::Result<String, JobError> {
    let id = ctx.id();
    let record = ctx
        .queue_handle()
        .job(id)
        .map_err(|e| JobError::retry(format!("cannot read email job {id}: {e}")))?
        .ok_or_else(|| JobError::retry(format!("email job {id} is gone")))?;
    let kept = record
        .progress
        .as_ref()
        .and_then(|p| p.get("message_id"))
        .and_then(serde_json::Value::as_str)
        .filter(|kept| is_message_id(kept));
    if let Some(kept) = kept {
        return Ok(kept.to_string());
    }
    let seed = format!("job:{id}:{}:{:032x}", record.created_at, fastrand::u128(..));
    let message_id = message_id_for(&seed, from);
    ctx.set_progress(json!({ "message_id": message_id }));
    ctx.heartbeat().map_err(|e| {
        JobError::retry(format!(
            "email job {id}: cannot keep its Message-ID before sending: {e}"
        ))
    })?;
    Ok(message_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sent_lines_name_the_job_id_and_recipients_never_the_body() {
        let done = Done {
            message_id: "<lj.1@example.com>".to_string(),
            recipients: 2,
            already_sent: false,
            provider_id: Some("Q1".to_string()),
        };
        assert_eq!(
            sent_line(7, &done),
            "email job 7 sent: Message-ID <lj.1@example.com>, 2 recipients, provider id Q1"
        );
        let again = Done {
            already_sent: true,
            recipients: 1,
            ..done
        };
        assert!(sent_line(7, &again).contains("already sent by an earlier attempt"));
        assert!(sent_line(7, &again).contains("1 recipient"));
    }
}
