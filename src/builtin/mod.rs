//! The built-in job types our users need most, ready to register on a worker: webhook
//! delivery ([`webhook`]), email, chunked reports. `litejobs work` runs them as a sidecar for
//! programs in any language.

pub mod email;
pub mod report;
pub mod webhook;

use crate::error::Result;
use crate::WorkerBuilder;

use webhook::WebhookOptions;

/// Settings of the built-in job types, read by [`register`].
///
/// [`BuiltinOptions::from_env`] reads them from `LITEJOBS_*` environment variables, which is
/// how `litejobs work` is configured; in code, start from `BuiltinOptions::default()` and
/// chain the setters:
///
/// ```
/// use litejobs::builtin::{webhook::WebhookOptions, BuiltinOptions};
/// use std::time::Duration;
/// let options = BuiltinOptions::default()
///     .webhook(WebhookOptions::default().timeout(Duration::from_secs(5)));
/// assert_eq!(options.webhook_options().request_timeout(), Duration::from_secs(5));
/// ```
#[derive(Debug, Default, Clone)]
#[non_exhaustive]
pub struct BuiltinOptions {
    webhook: WebhookOptions,
    email: Option<email::EmailOptions>,
}

impl BuiltinOptions {
    /// Options from the environment (each built-in kind documents its variables: see
    /// [`WebhookOptions`] for `LITEJOBS_WEBHOOK_*`).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) naming the variable when
    /// one is set to a value that cannot be used.
    pub fn from_env() -> Result<BuiltinOptions> {
        BuiltinOptions::from_lookup(&|name| std::env::var(name).ok())
    }

    /// Options from variables read through `lookup` instead of the process environment
    /// (for tests and for configuration files that use the same names).
    ///
    /// # Errors
    /// As [`BuiltinOptions::from_env`].
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<BuiltinOptions> {
        Ok(BuiltinOptions {
            webhook: WebhookOptions::from_lookup(lookup)?,
            email: email::EmailOptions::from_lookup(lookup)?,
        })
    }

    /// Webhook delivery settings. Defaults to [`WebhookOptions::default`].
    pub fn webhook(mut self, options: WebhookOptions) -> Self {
        self.webhook = options;
        self
    }

    /// The webhook delivery settings.
    pub fn webhook_options(&self) -> &WebhookOptions {
        &self.webhook
    }

    /// Email settings: with them, [`register`] adds the [`email::JOB_TYPE`] handler (see
    /// [`email::EmailOptions`] for `LITEJOBS_SMTP_URL`, `LITEJOBS_MAIL_DIR`,
    /// `LITEJOBS_MAIL_FROM`). Defaults to none: no email handler.
    pub fn email(mut self, options: email::EmailOptions) -> Self {
        self.email = Some(options);
        self
    }

    /// The email settings, if email is enabled.
    pub fn email_options(&self) -> Option<&email::EmailOptions> {
        self.email.as_ref()
    }
}

/// Registers the handlers of every built-in job type that `options` enables:
/// [`webhook::JOB_TYPE`] (see [`webhook::register`]).
///
/// Built-in jobs run from the queue they were enqueued in, `"default"` unless the enqueuer
/// chose another: the worker must work that queue.
///
/// # Errors
/// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) when an enabled kind is
/// misconfigured.
pub fn register(builder: WorkerBuilder, options: &BuiltinOptions) -> Result<WorkerBuilder> {
    let builder = webhook::register(builder, &options.webhook)?;
    let builder = match &options.email {
        Some(email_options) => email::register(builder, email_options)?,
        None => builder,
    };
    Ok(builder)
}
