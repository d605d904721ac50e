//! [`EmailHandler`]: runs `send_email` jobs with a [`Mailer`], once per dedupe key.

use std::fmt;
use std::sync::Arc;

use serde_json::json;
use sha2::{Digest, Sha256};

use super::{message, Email, EmailJob, MailError, Mailer, Sent};
use crate::context::JobContext;
use crate::handler::{Handler, JobError};

/// The domain of generated Message-IDs when the sender's address has none.
const FALLBACK_MESSAGE_ID_DOMAIN: &str = "litejobs.localhost";

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
pub(super) fn message_id_for(seed: &str, from: &str) -> String {
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

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_are_stable_per_seed_and_use_the_sender_domain() {
        let a = message_id_for("email:1:w:e", "App <app@example.com>");
        assert_eq!(a, message_id_for("email:1:w:e", "app@example.com"));
        assert!(a.starts_with("<lj.") && a.ends_with("@example.com>"), "{a}");
        assert_ne!(a, message_id_for("email:2:w:e", "app@example.com"));
        assert!(message_id_for("x", "nobody").ends_with("@litejobs.localhost>"));
    }
}
