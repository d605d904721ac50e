//! How `litejobs work` (and [`register`](super::register)) configures email: [`MailerConfig`], [`EmailOptions`].

use std::path::PathBuf;
use std::time::Duration;

use super::{message, SmtpConfig, DEFAULT_EMAIL_TIMEOUT};
use crate::builtin::retry_schedule::schedule_from_var;
use crate::error::{Error, Result};
use crate::job::RetryPolicy;

/// The delays between attempts of email jobs unless configured otherwise: 1 min, 5 min,
/// 30 min, 2 h, 5 h, 10 h, then 10 h; ±10 %. The first retry waits out greylisting (most
/// greylisting servers accept a retry after a minute or a few); the later ones ride out an
/// SMTP outage of hours, like the webhook schedule, where doubling from 5 s would give up
/// after 3 minutes.
pub fn default_retry_policy() -> RetryPolicy {
    RetryPolicy::schedule(
        [60, 300, 1800, 7200, 18_000, 36_000]
            .into_iter()
            .map(Duration::from_secs)
            .collect(),
    )
    .jitter(0.1)
}

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
/// - `LITEJOBS_MAIL_FROM=app@example.com`: the sender of jobs without `from`;
/// - `LITEJOBS_EMAIL_RETRY_SCHEDULE=30s,2m,10m,1h,4h`: the delays between attempts (see
///   [`parse_retry_schedule`](crate::builtin::parse_retry_schedule)).
///
/// | setting | environment variable | default |
/// | --- | --- | --- |
/// | [`mailer`](EmailOptions::mailer) | `LITEJOBS_SMTP_URL`, `LITEJOBS_MAIL_DIR` or `LITEJOBS_MAIL_LOG` | none: no email handler |
/// | [`default_from`](EmailOptions::default_from) | `LITEJOBS_MAIL_FROM` | none: jobs without `from` go dead |
/// | [`timeout`](EmailOptions::timeout) (attempt time limit) | (the SMTP URL's `timeout` limits each SMTP step) | [`DEFAULT_EMAIL_TIMEOUT`] (30 s) |
/// | [`retry_policy`](EmailOptions::retry_policy) | `LITEJOBS_EMAIL_RETRY_SCHEDULE` | `1m,5m,30m,2h,5h,10h` ±10 % ([`default_retry_policy`]) |
///
/// A job gets [`DEFAULT_MAX_ATTEMPTS`](crate::defaults::DEFAULT_MAX_ATTEMPTS) (6) attempts
/// unless it sets its own, so by default an email waits out about 7.5 hours of SMTP outage
/// (1 min + 5 min + 30 min + 2 h + 5 h) before it is dead.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EmailOptions {
    /// The mailer.
    pub mailer: MailerConfig,
    /// The sender of jobs whose payload has no `from`.
    pub default_from: Option<String>,
    /// The attempt time limit of email jobs. Defaults to [`DEFAULT_EMAIL_TIMEOUT`].
    pub timeout: Duration,
    /// The delays between attempts of email jobs. Defaults to [`default_retry_policy`].
    pub retry_policy: RetryPolicy,
}

impl EmailOptions {
    /// Options sending with `mailer`.
    pub fn new(mailer: MailerConfig) -> EmailOptions {
        EmailOptions {
            mailer,
            default_from: None,
            timeout: DEFAULT_EMAIL_TIMEOUT,
            retry_policy: default_retry_policy(),
        }
    }

    /// The delays between attempts of email jobs (SMTP 4xx replies, refused connections,
    /// timeouts). Defaults to [`default_retry_policy`].
    ///
    /// ```
    /// use litejobs::builtin::email::{EmailOptions, MailerConfig};
    /// use litejobs::RetryPolicy;
    /// use std::time::Duration;
    /// let options = EmailOptions::new(MailerConfig::Log)
    ///     .retry_policy(RetryPolicy::schedule(vec![Duration::from_secs(30)]));
    /// assert_eq!(options.retry_policy.delay(4, 0.5), Duration::from_secs(30));
    /// ```
    pub fn retry_policy(mut self, policy: RetryPolicy) -> EmailOptions {
        self.retry_policy = policy;
        self
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
        // Checked even when no mailer is set, so a typo is reported before it matters.
        let retry_policy = match lookup("LITEJOBS_EMAIL_RETRY_SCHEDULE") {
            Some(v) => Some(schedule_from_var("LITEJOBS_EMAIL_RETRY_SCHEDULE", &v)?),
            None => None,
        };
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
        if let Some(policy) = retry_policy {
            options.retry_policy = policy;
        }
        if let Some(from) = get("LITEJOBS_MAIL_FROM") {
            message::mailbox(&from, "sender").map_err(|e| {
                Error::invalid_config(format!("LITEJOBS_MAIL_FROM: {}", e.message()))
            })?;
            options.default_from = Some(from);
        }
        Ok(Some(options))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<Option<EmailOptions>> {
        EmailOptions::from_lookup(&|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    fn secs(policy: &RetryPolicy, attempts: u32) -> Vec<u64> {
        (1..=attempts)
            .map(|a| policy.delay(a, 0.5).as_secs())
            .collect()
    }

    #[test]
    fn the_default_schedule_spans_hours_not_minutes() {
        let options = from(&[("LITEJOBS_MAIL_LOG", "1")])
            .expect("valid")
            .expect("a mailer");
        assert_eq!(options.retry_policy, default_retry_policy());
        let delays = secs(&options.retry_policy, 5);
        assert_eq!(delays, vec![60, 300, 1800, 7200, 18_000]);
        assert!(delays.iter().sum::<u64>() > 7 * 3600);
    }

    #[test]
    fn the_schedule_variable_and_the_setter_set_the_delays() {
        let options = from(&[
            ("LITEJOBS_MAIL_LOG", "1"),
            ("LITEJOBS_EMAIL_RETRY_SCHEDULE", "30s,2m,10m,1h,4h"),
        ])
        .expect("valid")
        .expect("a mailer");
        assert_eq!(
            secs(&options.retry_policy, 6),
            vec![30, 120, 600, 3600, 14_400, 14_400]
        );
        let policy = RetryPolicy::schedule(vec![Duration::from_secs(9)]);
        let options = options.retry_policy(policy.clone());
        assert_eq!(options.retry_policy, policy);
    }

    #[test]
    fn a_bad_schedule_is_refused_naming_the_variable_even_without_a_mailer() {
        for vars in [
            &[("LITEJOBS_EMAIL_RETRY_SCHEDULE", "5")][..],
            &[
                ("LITEJOBS_SMTP_URL", "smtp://h?tls=none"),
                ("LITEJOBS_EMAIL_RETRY_SCHEDULE", "1m,,2m"),
            ][..],
        ] {
            let err = from(vars).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                err.contains("LITEJOBS_EMAIL_RETRY_SCHEDULE="),
                "{vars:?}: {err}"
            );
        }
    }
}
