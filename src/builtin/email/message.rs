//! An [`Email`] as an RFC 5322 message (lettre's builder), shared by the SMTP and file
//! mailers so the development mailer writes exactly what SMTP would send.

use lettre::message::{Mailbox, MultiPart, SinglePart};
use lettre::Message;

use super::{Email, MailError};

impl Email {
    /// The formatted RFC 5322 message (headers and body), as SMTP would send it.
    ///
    /// # Errors
    /// A permanent [`MailError`] when an address is malformed.
    pub fn formatted(&self) -> std::result::Result<Vec<u8>, MailError> {
        Ok(build(self)?.formatted())
    }
}

/// Parses one address (`ada@example.com` or `Ada <ada@example.com>`); `what` names it in
/// the error (e.g. "recipient").
pub(crate) fn mailbox(address: &str, what: &str) -> Result<Mailbox, MailError> {
    if address.trim().is_empty() {
        return Err(MailError::permanent(format!("the {what} address is empty")));
    }
    address
        .parse::<Mailbox>()
        .map_err(|e| MailError::permanent(format!("invalid {what} address {address:?}: {e}")))
}

/// Builds the message: From, To, Reply-To, Subject, Message-ID, Date, and a plain-text body
/// (with an HTML alternative when there is one).
pub(crate) fn build(email: &Email) -> Result<Message, MailError> {
    let mut builder = Message::builder()
        .from(mailbox(&email.from, "sender")?)
        .subject(email.subject.clone())
        .message_id(Some(email.message_id.clone()));
    if email.to.is_empty() {
        return Err(MailError::permanent("the email has no recipient"));
    }
    for to in &email.to {
        builder = builder.to(mailbox(to, "recipient")?);
    }
    if let Some(reply_to) = &email.reply_to {
        builder = builder.reply_to(mailbox(reply_to, "reply-to")?);
    }
    let built = match &email.html {
        Some(html) => builder.multipart(MultiPart::alternative_plain_html(
            email.text.clone(),
            html.clone(),
        )),
        None => builder.singlepart(SinglePart::plain(email.text.clone())),
    };
    built.map_err(|e| MailError::permanent(format!("the email cannot be built: {e}")))
}
