//! [`WebhookOptions`]: how the built-in deliverer behaves, from code or from `LITEJOBS_WEBHOOK_*`
//! environment variables.

use std::time::Duration;

use crate::builtin::retry_schedule::schedule_from_var;
use crate::error::{Error, Result};
use crate::job::RetryPolicy;
use crate::limits::{DEFAULT_BREAKER_COOL_DOWN, DEFAULT_BREAKER_FAILURES};

/// The whole-request time limit (connect, send, wait, read) unless configured otherwise.
pub const DEFAULT_WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);
/// The connect time limit: this or the request timeout, whichever is shorter.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest `Retry-After` honoured unless configured otherwise; longer ones are cut to it.
pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);
/// Added to the request timeout to make the attempt's time limit, so the request's own
/// timeout fires first and the attempt is recorded as an HTTP timeout.
pub const ATTEMPT_TIMEOUT_MARGIN: Duration = Duration::from_secs(5);

/// The delays between delivery attempts unless configured otherwise: the Standard
/// Webhooks schedule (5 s, 5 min, 30 min, 2 h, 5 h, 10 h, then 10 h).
pub fn default_retry_policy() -> RetryPolicy {
    RetryPolicy::schedule(
        [5, 300, 1800, 7200, 18_000, 36_000]
            .into_iter()
            .map(Duration::from_secs)
            .collect(),
    )
    .jitter(0.1)
}

/// Settings of webhook delivery (job type `deliver_webhook`).
///
/// | environment variable | setter | default |
/// | --- | --- | --- |
/// | `LITEJOBS_WEBHOOK_ENABLED` (`0`/`1`) | [`enabled`](WebhookOptions::enabled) | on |
/// | `LITEJOBS_WEBHOOK_ALLOW_PRIVATE` (`0`/`1`) | [`allow_private_targets`](WebhookOptions::allow_private_targets) | off |
/// | `LITEJOBS_WEBHOOK_TIMEOUT` (seconds) | [`timeout`](WebhookOptions::timeout) | 10 |
/// | `LITEJOBS_WEBHOOK_USER_AGENT` | [`user_agent`](WebhookOptions::user_agent) | `litejobs/<version>` |
/// | `LITEJOBS_WEBHOOK_MAX_RETRY_AFTER` (seconds) | [`max_retry_after`](WebhookOptions::max_retry_after) | 3600 |
/// | `LITEJOBS_WEBHOOK_BREAKER_FAILURES` | [`breaker_failures`](WebhookOptions::breaker_failures) | 5 |
/// | `LITEJOBS_WEBHOOK_BREAKER_COOL_DOWN` (seconds) | [`breaker_cool_down`](WebhookOptions::breaker_cool_down) | 60 |
/// | `LITEJOBS_WEBHOOK_RETRY_SCHEDULE` (e.g. `30s,5m,1h`; see [`parse_retry_schedule`](crate::builtin::parse_retry_schedule)) | [`retry_policy`](WebhookOptions::retry_policy) | `5s,5m,30m,2h,5h,10h` ±10 % ([`default_retry_policy`]) |
///
/// A job gets [`DEFAULT_MAX_ATTEMPTS`](crate::defaults::DEFAULT_MAX_ATTEMPTS) (6) attempts
/// unless it sets its own, so by default a delivery is retried for about 7.5 hours (5 s +
/// 5 min + 30 min + 2 h + 5 h) before it is dead.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WebhookOptions {
    pub(crate) enabled: bool,
    pub(crate) allow_private_targets: bool,
    pub(crate) timeout: Duration,
    pub(crate) user_agent: String,
    pub(crate) max_retry_after: Duration,
    pub(crate) breaker_failures: u32,
    pub(crate) breaker_cool_down: Duration,
    pub(crate) retry_policy: RetryPolicy,
}

impl Default for WebhookOptions {
    fn default() -> Self {
        WebhookOptions {
            enabled: true,
            allow_private_targets: false,
            timeout: DEFAULT_WEBHOOK_TIMEOUT,
            user_agent: format!("litejobs/{}", env!("CARGO_PKG_VERSION")),
            max_retry_after: DEFAULT_MAX_RETRY_AFTER,
            breaker_failures: DEFAULT_BREAKER_FAILURES,
            breaker_cool_down: DEFAULT_BREAKER_COOL_DOWN,
            retry_policy: default_retry_policy(),
        }
    }
}

impl WebhookOptions {
    /// Registers the delivery handler at all. Defaults to true.
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// Allows targets that resolve to loopback, private, link-local and other non-public
    /// addresses (the SSRF guard is off). For development and for endpoints on your own
    /// network. Defaults to false.
    pub fn allow_private_targets(mut self, allow: bool) -> Self {
        self.allow_private_targets = allow;
        self
    }

    /// The whole request's time limit: connect, send, wait for and read the response.
    /// Connecting alone gets at most [`DEFAULT_CONNECT_TIMEOUT`]. The attempt's time limit
    /// in the worker is this plus [`ATTEMPT_TIMEOUT_MARGIN`]. Defaults to
    /// [`DEFAULT_WEBHOOK_TIMEOUT`] (10 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The `User-Agent` header. Defaults to `litejobs/<version>`.
    pub fn user_agent(mut self, user_agent: impl Into<String>) -> Self {
        self.user_agent = user_agent.into();
        self
    }

    /// The longest `Retry-After` honoured; longer ones are cut to it. Defaults to
    /// [`DEFAULT_MAX_RETRY_AFTER`] (1 h).
    pub fn max_retry_after(mut self, max: Duration) -> Self {
        self.max_retry_after = max;
        self
    }

    /// Failed requests in a row (timeouts, connection errors, 408, 5xx) that open an
    /// endpoint's circuit breaker. Defaults to
    /// [`DEFAULT_BREAKER_FAILURES`](crate::limits::DEFAULT_BREAKER_FAILURES) (5).
    pub fn breaker_failures(mut self, failures: u32) -> Self {
        self.breaker_failures = failures;
        self
    }

    /// How long an open breaker defers its endpoint's deliveries (without spending their
    /// attempts) before one probe request. Defaults to
    /// [`DEFAULT_BREAKER_COOL_DOWN`](crate::limits::DEFAULT_BREAKER_COOL_DOWN) (60 s).
    pub fn breaker_cool_down(mut self, cool_down: Duration) -> Self {
        self.breaker_cool_down = cool_down;
        self
    }

    /// The delays between attempts. Defaults to [`default_retry_policy`]. A `Retry-After`
    /// header overrides it for that retry.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry_policy = policy;
        self
    }

    /// The delays between attempts: [`default_retry_policy`] unless
    /// [`retry_policy`](WebhookOptions::retry_policy) or `LITEJOBS_WEBHOOK_RETRY_SCHEDULE`
    /// set another.
    pub fn retries(&self) -> &RetryPolicy {
        &self.retry_policy
    }

    /// Whether the handler is registered.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Whether non-public targets are allowed.
    pub fn allows_private_targets(&self) -> bool {
        self.allow_private_targets
    }

    /// The request time limit.
    pub fn request_timeout(&self) -> Duration {
        self.timeout
    }

    /// The attempt time limit given to the worker: the request timeout plus
    /// [`ATTEMPT_TIMEOUT_MARGIN`].
    pub fn attempt_timeout(&self) -> Duration {
        self.timeout.saturating_add(ATTEMPT_TIMEOUT_MARGIN)
    }

    /// Checks the options.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) naming the option.
    pub fn validate(&self) -> Result<()> {
        if self.timeout.is_zero() {
            return Err(Error::invalid_config("webhook timeout must be above 0"));
        }
        if self.breaker_failures == 0 {
            return Err(Error::invalid_config(
                "webhook breaker_failures must be at least 1",
            ));
        }
        if self.user_agent.chars().any(char::is_control) {
            return Err(Error::invalid_config(format!(
                "webhook user_agent {:?} contains control characters",
                self.user_agent
            )));
        }
        Ok(())
    }

    /// Options from `LITEJOBS_WEBHOOK_*` variables read through `lookup` (e.g.
    /// `|name| std::env::var(name).ok()`), starting from the defaults. See the table above.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) naming the variable and
    /// its value.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<WebhookOptions> {
        let mut options = WebhookOptions::default();
        if let Some(v) = lookup("LITEJOBS_WEBHOOK_ENABLED") {
            options.enabled = parse_bool("LITEJOBS_WEBHOOK_ENABLED", &v)?;
        }
        if let Some(v) = lookup("LITEJOBS_WEBHOOK_ALLOW_PRIVATE") {
            options.allow_private_targets = parse_bool("LITEJOBS_WEBHOOK_ALLOW_PRIVATE", &v)?;
        }
        if let Some(v) = lookup("LITEJOBS_WEBHOOK_TIMEOUT") {
            options.timeout = parse_seconds("LITEJOBS_WEBHOOK_TIMEOUT", &v, false)?;
        }
        if let Some(v) = lookup("LITEJOBS_WEBHOOK_USER_AGENT") {
            options.user_agent = v;
        }
        if let Some(v) = lookup("LITEJOBS_WEBHOOK_MAX_RETRY_AFTER") {
            options.max_retry_after = parse_seconds("LITEJOBS_WEBHOOK_MAX_RETRY_AFTER", &v, true)?;
        }
        if let Some(v) = lookup("LITEJOBS_WEBHOOK_BREAKER_FAILURES") {
            options.breaker_failures = v
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| {
                    Error::invalid_config(format!(
                        "LITEJOBS_WEBHOOK_BREAKER_FAILURES={v:?}: expected a whole number of \
                         at least 1"
                    ))
                })?;
        }
        if let Some(v) = lookup("LITEJOBS_WEBHOOK_BREAKER_COOL_DOWN") {
            options.breaker_cool_down =
                parse_seconds("LITEJOBS_WEBHOOK_BREAKER_COOL_DOWN", &v, true)?;
        }
        if let Some(v) = lookup("LITEJOBS_WEBHOOK_RETRY_SCHEDULE") {
            options.retry_policy = schedule_from_var("LITEJOBS_WEBHOOK_RETRY_SCHEDULE", &v)?;
        }
        options
            .validate()
            .map_err(|e| e.prefixed("from LITEJOBS_WEBHOOK_* variables"))?;
        Ok(options)
    }
}

fn parse_bool(name: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        _ => Err(Error::invalid_config(format!(
            "{name}={value:?}: expected 1 or 0 (or true/false, yes/no, on/off)"
        ))),
    }
}

/// Seconds as a decimal number (`10`, `2.5`); zero only when `zero_ok`; at most a day.
fn parse_seconds(name: &str, value: &str, zero_ok: bool) -> Result<Duration> {
    const MAX_SECS: f64 = 86_400.0;
    let secs: f64 = value.trim().parse().map_err(|_| {
        Error::invalid_config(format!("{name}={value:?}: expected a number of seconds"))
    })?;
    if !secs.is_finite() || !(0.0..=MAX_SECS).contains(&secs) || (!zero_ok && secs == 0.0) {
        let low = if zero_ok { "0" } else { "above 0" };
        return Err(Error::invalid_config(format!(
            "{name}={value:?}: expected seconds {low} and at most {MAX_SECS}"
        )));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<WebhookOptions> {
        WebhookOptions::from_lookup(&|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn the_retry_schedule_defaults_to_hours_and_is_set_by_its_variable() {
        let default = from(&[]).expect("defaults");
        assert_eq!(default.retries(), &default_retry_policy());
        let hours: u64 = (1..6)
            .map(|a| default.retries().delay(a, 0.5).as_secs())
            .sum();
        assert!(hours > 7 * 3600, "{hours}");

        let set = from(&[("LITEJOBS_WEBHOOK_RETRY_SCHEDULE", "1m,10m")]).expect("valid");
        let secs: Vec<u64> = (1..=3)
            .map(|a| set.retries().delay(a, 0.5).as_secs())
            .collect();
        assert_eq!(secs, vec![60, 600, 600]);

        let policy = RetryPolicy::schedule(vec![Duration::from_secs(7)]);
        let coded = WebhookOptions::default().retry_policy(policy.clone());
        assert_eq!(coded.retries(), &policy);
    }

    #[test]
    fn a_bad_retry_schedule_names_the_variable() {
        let err = from(&[("LITEJOBS_WEBHOOK_RETRY_SCHEDULE", "soon")])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("LITEJOBS_WEBHOOK_RETRY_SCHEDULE=\"soon\""),
            "{err}"
        );
    }
}
