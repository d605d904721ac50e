//! Development mailers: [`FileMailer`] writes each email as an `.eml` file (the exact
//! message SMTP would send), [`LogMailer`] only logs it.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::{message, Email, MailError, Mailer, Sent};

/// Writes each email to `<folder>/<message-id>.eml`, the RFC 5322 message SMTP would send;
/// any mail program opens it. A resend of the same email (same Message-ID) replaces its
/// file rather than adding one. The folder is created when needed.
#[derive(Debug, Clone)]
pub struct FileMailer {
    dir: PathBuf,
}

impl FileMailer {
    /// A mailer writing into `dir`.
    pub fn new(dir: impl AsRef<Path>) -> FileMailer {
        FileMailer {
            dir: dir.as_ref().to_path_buf(),
        }
    }

    /// The file an email is written to.
    pub fn path_of(&self, email: &Email) -> PathBuf {
        let name: String = email
            .message_id
            .trim_matches(|c| c == '<' || c == '>')
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '@' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.dir.join(format!("{name}.eml"))
    }
}

impl Mailer for FileMailer {
    fn send(&self, email: &Email) -> Result<Sent, MailError> {
        let formatted = message::build(email)?.formatted();
        let path = self.path_of(email);
        let io_error = |e: std::io::Error| {
            MailError::transient(format!("writing the email to {}: {e}", path.display()))
        };
        std::fs::create_dir_all(&self.dir).map_err(io_error)?;
        // Written beside it and renamed, so a reader never sees half a message.
        let partial = path.with_extension("eml.partial");
        let mut file = std::fs::File::create(&partial).map_err(io_error)?;
        file.write_all(&formatted).map_err(io_error)?;
        file.sync_all().map_err(io_error)?;
        drop(file);
        std::fs::rename(&partial, &path).map_err(io_error)?;
        Ok(Sent::new(email.message_id.clone()).response(format!("written to {}", path.display())))
    }
}

/// Logs each email (at `info`: Message-ID, recipients, subject; never the body) and sends
/// nothing. Addresses are still checked, so bad ones fail as they would over SMTP.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogMailer;

impl Mailer for LogMailer {
    fn send(&self, email: &Email) -> Result<Sent, MailError> {
        message::build(email)?;
        log::info!(
            "litejobs: email {} to {} (not sent: log mailer): {}",
            email.message_id,
            email.to.join(", "),
            email.subject
        );
        Ok(Sent::new(email.message_id.clone()).response("logged, not sent"))
    }
}
