//! What a mailer is: an [`Email`] to send, what came back ([`Sent`]), how it failed
//! ([`MailError`]), and the [`Mailer`] trait the SMTP and development mailers implement.

use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::handler::JobError;

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

/// The domain of generated Message-IDs when the sender's address has none.
const FALLBACK_MESSAGE_ID_DOMAIN: &str = "litejobs.localhost";

/// True for a kept Message-ID as [`message_id_for`] writes them: `<...@...>`, printable
/// ASCII, short.
pub(super) fn is_message_id(text: &str) -> bool {
    text.len() <= 250
        && text.starts_with('<')
        && text.ends_with('>')
        && text.contains('@')
        && text.chars().all(|c| c.is_ascii_graphic())
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

/// Lower-case hexadecimal.
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Sends emails. Implemented by [`SmtpMailer`](super::SmtpMailer), [`FileMailer`](super::FileMailer) and [`LogMailer`](super::LogMailer); implement
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn only_well_formed_message_ids_are_kept() {
        assert!(is_message_id(&message_id_for("x", "app@example.com")));
        for bad in ["", "lj.1@x", "<lj.1>", "<lj 1@x>", "<lj.1@x>\r\nBcc: a@b"] {
            assert!(!is_message_id(bad), "{bad:?}");
        }
        assert!(!is_message_id(&format!("<{}@x>", "a".repeat(300))));
    }

    #[test]
    fn message_ids_are_stable_per_seed_and_use_the_sender_domain() {
        let a = message_id_for("email:1:w:e", "App <app@example.com>");
        assert_eq!(a, message_id_for("email:1:w:e", "app@example.com"));
        assert!(a.starts_with("<lj.") && a.ends_with("@example.com>"), "{a}");
        assert_ne!(a, message_id_for("email:2:w:e", "app@example.com"));
        assert!(message_id_for("x", "nobody").ends_with("@litejobs.localhost>"));
    }
}
