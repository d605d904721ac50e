//! How `litejobs work` (and [`register`](super::register)) configures email: [`MailerConfig`], [`EmailOptions`].

use std::path::PathBuf;
use std::time::Duration;

use super::{message, SmtpConfig, DEFAULT_EMAIL_TIMEOUT};
use crate::error::{Error, Result};

/// Which mailer `litejobs work` (and [`register`](super::register)) sends with.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MailerConfig {
    /// SMTP ([`SmtpMailer`](super::SmtpMailer)).
    Smtp(SmtpConfig),
    /// `.eml` files in a folder ([`FileMailer`](super::FileMailer)), for development.
    Dir(PathBuf),
    /// Log lines only ([`LogMailer`](super::LogMailer)), for development.
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
