//! The built-in job types our users need most, ready to register on a worker. `litejobs
//! work` runs them as a sidecar for programs in any language.
//!
//! Each one that needs crates of its own is behind a Cargo feature (all on by default), so
//! an embedder that wants only a queue builds none of them:
//!
//! | module | what | Cargo feature |
//! | --- | --- | --- |
#![cfg_attr(
    feature = "webhook",
    doc = "| [`webhook`] | signed webhook delivery, job type `deliver_webhook` | `webhook` |"
)]
#![cfg_attr(
    not(feature = "webhook"),
    doc = "| `webhook` | signed webhook delivery, job type `deliver_webhook` | `webhook` (off in this build) |"
)]
#![cfg_attr(
    feature = "email",
    doc = "| [`email`] | email over SMTP or to files, job type `send_email` | `email` |"
)]
#![cfg_attr(
    not(feature = "email"),
    doc = "| `email` | email over SMTP or to files, job type `send_email` | `email` (off in this build) |"
)]
//! | [`report`] | reports in chunks, job types `report.<kind>.*` | none: always there |
//!
//! [`register`] registers the kinds compiled in that [`BuiltinOptions`] enables; reports are
//! registered per kind with [`WorkerBuilder::report`].

#[cfg(feature = "email")]
pub mod email;
pub mod report;
#[cfg(any(feature = "webhook", feature = "email"))]
mod retry_schedule;
#[cfg(feature = "webhook")]
pub mod webhook;

#[cfg(any(feature = "webhook", feature = "email"))]
pub use retry_schedule::{parse_retry_schedule, SCHEDULE_JITTER};

use crate::error::Result;
use crate::WorkerBuilder;

#[cfg(feature = "webhook")]
use webhook::WebhookOptions;

/// Settings of the built-in job types, read by [`register`]. It has settings only for the
/// kinds compiled in (Cargo features `webhook` and `email`).
///
/// [`BuiltinOptions::from_env`] reads them from `LITEJOBS_*` environment variables, which is
/// how `litejobs work` is configured; [`BuiltinOptions::from_lookup`] reads the same names
/// from anywhere else; in code, start from `BuiltinOptions::default()` and chain the setters.
///
/// ```
/// use litejobs::builtin::{self, BuiltinOptions};
/// use litejobs::{Queue, Worker};
/// # fn main() -> litejobs::Result<()> {
/// let queue = Queue::open_in_memory()?;
/// // What `litejobs work` does, with settings from a table instead of the environment.
/// let settings = [("LITEJOBS_WEBHOOK_TIMEOUT", "5")];
/// let options = BuiltinOptions::from_lookup(&|name| {
///     settings.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
/// })?;
/// let builder = builtin::register(Worker::builder(&queue), &options)?;
/// // ... then your own handlers, and `builder.start()?`.
/// # let _ = builder;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Default, Clone)]
#[non_exhaustive]
pub struct BuiltinOptions {
    #[cfg(feature = "webhook")]
    webhook: WebhookOptions,
    #[cfg(feature = "email")]
    email: Option<email::EmailOptions>,
}

impl BuiltinOptions {
    /// Options from the environment: each built-in kind compiled in documents its variables
    /// (`LITEJOBS_WEBHOOK_*` for webhooks, `LITEJOBS_SMTP_URL`, `LITEJOBS_MAIL_DIR`,
    /// `LITEJOBS_MAIL_LOG`, `LITEJOBS_MAIL_FROM` and `LITEJOBS_EMAIL_RETRY_SCHEDULE` for
    /// email). A kind that is not compiled in reads nothing.
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
        // With neither kind compiled in there is nothing to read.
        #[cfg(not(any(feature = "webhook", feature = "email")))]
        let _ = lookup;
        Ok(BuiltinOptions {
            #[cfg(feature = "webhook")]
            webhook: WebhookOptions::from_lookup(lookup)?,
            #[cfg(feature = "email")]
            email: email::EmailOptions::from_lookup(lookup)?,
        })
    }

    /// Webhook delivery settings (feature `webhook`). Defaults to
    /// [`WebhookOptions::default`].
    ///
    /// ```
    /// use litejobs::builtin::{webhook::WebhookOptions, BuiltinOptions};
    /// use std::time::Duration;
    /// let options = BuiltinOptions::default()
    ///     .webhook(WebhookOptions::default().timeout(Duration::from_secs(5)));
    /// assert_eq!(options.webhook_options().request_timeout(), Duration::from_secs(5));
    /// ```
    #[cfg(feature = "webhook")]
    pub fn webhook(mut self, options: WebhookOptions) -> Self {
        self.webhook = options;
        self
    }

    /// The webhook delivery settings (feature `webhook`).
    #[cfg(feature = "webhook")]
    pub fn webhook_options(&self) -> &WebhookOptions {
        &self.webhook
    }

    /// Email settings (feature `email`): with them, [`register`] adds the
    /// [`email::JOB_TYPE`] handler (see [`email::EmailOptions`] for `LITEJOBS_SMTP_URL`,
    /// `LITEJOBS_MAIL_DIR`, `LITEJOBS_MAIL_FROM`). Defaults to none: no email handler.
    #[cfg(feature = "email")]
    pub fn email(mut self, options: email::EmailOptions) -> Self {
        self.email = Some(options);
        self
    }

    /// The email settings, if email is enabled (feature `email`).
    #[cfg(feature = "email")]
    pub fn email_options(&self) -> Option<&email::EmailOptions> {
        self.email.as_ref()
    }
}

/// Registers the handlers of every built-in job type that is compiled in and that `options`
/// enables:
#[cfg_attr(
    feature = "webhook",
    doc = "[`webhook::JOB_TYPE`] (see [`webhook::register`]; on unless its options disable it),"
)]
#[cfg_attr(
    not(feature = "webhook"),
    doc = "`deliver_webhook` (not in this build: feature `webhook`),"
)]
#[cfg_attr(
    feature = "email",
    doc = "[`email::JOB_TYPE`] (see [`email::register`]; when [`BuiltinOptions::email`] is set)."
)]
#[cfg_attr(
    not(feature = "email"),
    doc = "`send_email` (not in this build: feature `email`)."
)]
/// With neither feature, `builder` comes back unchanged.
///
/// Built-in jobs run from the queue they were enqueued in, `"default"` unless the enqueuer
/// chose another: the worker must work that queue.
///
/// # Errors
/// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) when an enabled kind is
/// misconfigured.
pub fn register(builder: WorkerBuilder, options: &BuiltinOptions) -> Result<WorkerBuilder> {
    #[cfg(feature = "webhook")]
    let builder = webhook::register(builder, &options.webhook)?;
    #[cfg(feature = "email")]
    let builder = match &options.email {
        Some(email_options) => email::register(builder, email_options)?,
        None => builder,
    };
    #[cfg(not(any(feature = "webhook", feature = "email")))]
    let _ = options;
    Ok(builder)
}
