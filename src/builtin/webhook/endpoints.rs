//! [`Endpoints`]: register, change and list webhook endpoints (the `webhook_endpoints`
//! table). Secrets stay in this table; delivery jobs carry only the endpoint's id.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, ErrorKind, Result};
use crate::limits::RateLimit;
use crate::storage::webhooks::{EndpointInsert, EndpointRow};
use crate::system::clock::duration_to_ms;
use crate::Queue;

use super::signature::check_new_secret;

/// A registered endpoint, as read back. The secrets are left out of `Debug` and of the
/// serialized form.
#[derive(Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Endpoint {
    /// Row id: delivery jobs name the endpoint by it.
    pub id: i64,
    /// The target URL.
    pub url: String,
    // Private, so a secret reaches logs or JSON only through a call that names it.
    #[serde(skip)]
    secret: String,
    #[serde(skip)]
    previous_secret: Option<String>,
    /// When the old secret stops being used (ms).
    pub previous_secret_expires_at: Option<i64>,
    /// False: deliveries go dead at once.
    pub enabled: bool,
    /// Why it was disabled (e.g. `410 Gone`).
    pub disabled_reason: Option<String>,
    /// At most this many requests per `rate_period_ms`; `None` for no limit.
    pub rate_limit: Option<i64>,
    /// The rate limit's period (ms).
    pub rate_period_ms: i64,
    /// Free text for people.
    pub description: String,
    /// When it was registered (ms).
    pub created_at: i64,
    /// When it last changed (ms).
    pub updated_at: i64,
}

impl From<EndpointRow> for Endpoint {
    fn from(row: EndpointRow) -> Endpoint {
        Endpoint {
            id: row.id,
            url: row.url,
            secret: row.secret,
            previous_secret: row.previous_secret,
            previous_secret_expires_at: row.previous_secret_expires_at,
            enabled: row.enabled,
            disabled_reason: row.disabled_reason,
            rate_limit: row.rate_limit,
            rate_period_ms: row.rate_period_ms,
            description: row.description,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("id", &self.id)
            .field("url", &self.url)
            .field("secret", &"<redacted>")
            .field("enabled", &self.enabled)
            .field("disabled_reason", &self.disabled_reason)
            .field("rate_limit", &self.rate_limit)
            .field("rate_period_ms", &self.rate_period_ms)
            .field("description", &self.description)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// The signing secret (`whsec_...`): give it to the receiver.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The old secret while a rotation overlaps (deliveries are signed with both until
    /// [`previous_secret_expires_at`](Endpoint::previous_secret_expires_at)).
    pub fn previous_secret(&self) -> Option<&str> {
        self.previous_secret.as_deref()
    }

    /// The rate limit as people write it: `10/s`, `600/m`, `5/2s`, or `none`.
    ///
    /// ```
    /// # use litejobs::builtin::webhook::{Endpoints, NewEndpoint};
    /// # use litejobs::limits::RateLimit;
    /// # use std::time::Duration;
    /// # fn main() -> litejobs::Result<()> {
    /// # let queue = litejobs::Queue::open_in_memory()?;
    /// let endpoints = Endpoints::new(&queue);
    /// let limit = RateLimit::new(600, Duration::from_secs(60));
    /// let secret = litejobs::builtin::webhook::generate_secret()?;
    /// let id = endpoints.add(NewEndpoint::new("https://example.com/hook", secret).rate_limit(limit))?;
    /// assert_eq!(endpoints.get(id)?.map(|e| e.rate_text()).as_deref(), Some("600/m"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn rate_text(&self) -> String {
        let Some(limit) = self.rate_limit else {
            return "none".to_string();
        };
        let period = match self.rate_period_ms {
            1_000 => "s".to_string(),
            60_000 => "m".to_string(),
            3_600_000 => "h".to_string(),
            86_400_000 => "d".to_string(),
            ms => crate::human::duration_ms(ms).replace(' ', ""),
        };
        format!("{limit}/{period}")
    }

    /// The endpoint's rate limit, if it has one.
    pub fn rate(&self) -> Option<RateLimit> {
        let limit = u32::try_from(self.rate_limit?).unwrap_or(u32::MAX).max(1);
        let period = Duration::from_millis(u64::try_from(self.rate_period_ms).unwrap_or(1).max(1));
        Some(RateLimit::new(limit, period))
    }

    /// The secrets deliveries are signed with at `now` (ms): the current one, and the
    /// previous one while its rotation overlap lasts.
    pub(crate) fn signing_secrets(&self, now: i64) -> Vec<&str> {
        let mut secrets = vec![self.secret.as_str()];
        if let (Some(previous), Some(until)) =
            (&self.previous_secret, self.previous_secret_expires_at)
        {
            if now < until {
                secrets.push(previous);
            }
        }
        secrets
    }
}

/// An endpoint to register with [`Endpoints::add`].
///
/// ```
/// use litejobs::builtin::webhook::{generate_secret, NewEndpoint};
/// use litejobs::limits::RateLimit;
/// # fn main() -> litejobs::Result<()> {
/// let endpoint = NewEndpoint::new("https://crm.example.com/hooks", generate_secret()?)
///     .rate_limit(RateLimit::per_second(5))
///     .description("CRM production");
/// # let _ = endpoint;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
#[must_use = "a NewEndpoint does nothing until Endpoints::add is called"]
pub struct NewEndpoint {
    url: String,
    secret: String,
    rate_limit: Option<RateLimit>,
    description: String,
    enabled: bool,
}

impl fmt::Debug for NewEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewEndpoint")
            .field("url", &self.url)
            .field("secret", &"<redacted>")
            .field("rate_limit", &self.rate_limit)
            .field("description", &self.description)
            .field("enabled", &self.enabled)
            .finish()
    }
}

impl NewEndpoint {
    /// An endpoint at `url` (http or https) signed with `secret` (`whsec_` + base64 of 24 to
    /// 64 bytes; [`generate_secret`](super::generate_secret) makes one). Enabled, no rate
    /// limit.
    pub fn new(url: impl Into<String>, secret: impl Into<String>) -> NewEndpoint {
        NewEndpoint {
            url: url.into(),
            secret: secret.into(),
            rate_limit: None,
            description: String::new(),
            enabled: true,
        }
    }

    /// At most `limit` requests per period to this endpoint, shared by every process.
    /// Defaults to no limit.
    pub fn rate_limit(mut self, limit: RateLimit) -> NewEndpoint {
        self.rate_limit = Some(limit);
        self
    }

    /// Free text for people. Defaults to empty.
    pub fn description(mut self, description: impl Into<String>) -> NewEndpoint {
        self.description = description.into();
        self
    }

    /// Registered disabled (deliveries go dead until it is enabled). Defaults to enabled.
    pub fn disabled(mut self) -> NewEndpoint {
        self.enabled = false;
        self
    }
}

/// Checks an endpoint URL: http or https, with a host.
pub(crate) fn check_url(url: &str) -> std::result::Result<(), String> {
    if !url.contains("://") {
        return Err(format!("{url:?} has no scheme (http:// or https://)"));
    }
    let uri: ureq::http::Uri = url
        .parse()
        .map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        Some(other) => return Err(format!("{url:?}: scheme {other:?} is not http or https")),
        None => return Err(format!("{url:?} has no scheme (http:// or https://)")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("{url:?} has no host"));
    }
    Ok(())
}

fn rate_columns(limit: Option<&RateLimit>) -> Result<(Option<i64>, i64)> {
    match limit {
        None => Ok((None, 1000)),
        Some(limit) => {
            let period = duration_to_ms(limit.period());
            if limit.limit() == 0 || period <= 0 {
                return Err(Error::invalid_config(format!(
                    "webhook endpoint rate limit must allow at least 1 request per period of at \
                     least 1 ms, got {} per {:?}",
                    limit.limit(),
                    limit.period()
                )));
            }
            Ok((Some(i64::from(limit.limit())), period))
        }
    }
}

/// The webhook endpoints of a queue's database: register, change, disable, list.
///
/// ```
/// use litejobs::builtin::webhook::{generate_secret, Endpoints, NewEndpoint};
/// use litejobs::Queue;
/// # fn main() -> litejobs::Result<()> {
/// let queue = Queue::open_in_memory()?;
/// let endpoints = Endpoints::new(&queue);
/// let id = endpoints.add(NewEndpoint::new("https://crm.example.com/hooks", generate_secret()?))?;
/// endpoints.disable(id, "maintenance until Monday")?;
/// let endpoint = endpoints.get(id)?.expect("just added");
/// assert!(!endpoint.enabled);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Endpoints {
    queue: Queue,
}

impl Endpoints {
    /// The endpoints of `queue`'s database.
    pub fn new(queue: &Queue) -> Endpoints {
        Endpoints {
            queue: queue.clone(),
        }
    }

    /// Registers an endpoint and returns its id.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`] naming the problem: a URL that is not http(s) with a
    /// host, a secret not in the `whsec_` form, a rate limit of 0.
    pub fn add(&self, endpoint: NewEndpoint) -> Result<i64> {
        check_url(&endpoint.url)
            .map_err(|e| Error::invalid_config(format!("webhook endpoint url {e}")))?;
        check_new_secret(&endpoint.secret)
            .map_err(|e| Error::invalid_config(format!("webhook endpoint secret: {e}")))?;
        let (rate_limit, rate_period_ms) = rate_columns(endpoint.rate_limit.as_ref())?;
        let now = self.queue.now_ms();
        let row = EndpointInsert {
            url: &endpoint.url,
            secret: &endpoint.secret,
            enabled: endpoint.enabled,
            rate_limit,
            rate_period_ms,
            description: &endpoint.description,
        };
        self.queue.db().write(|tx| tx.insert_endpoint(&row, now))
    }

    /// One endpoint, or `None`.
    pub fn get(&self, id: i64) -> Result<Option<Endpoint>> {
        self.queue
            .db()
            .read(|tx| Ok(tx.endpoint(id)?.map(Endpoint::from)))
    }

    /// Every endpoint, by id.
    pub fn list(&self) -> Result<Vec<Endpoint>> {
        self.queue
            .db()
            .read(|tx| Ok(tx.endpoints()?.into_iter().map(Endpoint::from).collect()))
    }

    fn changed(id: i64, found: bool) -> Result<()> {
        if found {
            Ok(())
        } else {
            Err(Error::not_found("webhook endpoint", id))
        }
    }

    /// Points the endpoint at a new URL.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`] for a URL that is not http(s) with a host;
    /// [`ErrorKind::NotFound`].
    pub fn set_url(&self, id: i64, url: &str) -> Result<()> {
        check_url(url).map_err(|e| Error::invalid_config(format!("webhook endpoint url {e}")))?;
        let now = self.queue.now_ms();
        let found = self
            .queue
            .db()
            .write(|tx| tx.set_endpoint_url(id, url, now))?;
        Endpoints::changed(id, found)
    }

    /// Sets (or with `None` removes) the endpoint's rate limit.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`] for a limit of 0; [`ErrorKind::NotFound`].
    pub fn set_rate_limit(&self, id: i64, limit: Option<RateLimit>) -> Result<()> {
        let (rate_limit, period) = rate_columns(limit.as_ref())?;
        let now = self.queue.now_ms();
        let found = self
            .queue
            .db()
            .write(|tx| tx.set_endpoint_rate_limit(id, rate_limit, period, now))?;
        Endpoints::changed(id, found)
    }

    /// Sets the description.
    ///
    /// # Errors
    /// [`ErrorKind::NotFound`].
    pub fn set_description(&self, id: i64, description: &str) -> Result<()> {
        let now = self.queue.now_ms();
        let found = self
            .queue
            .db()
            .write(|tx| tx.set_endpoint_description(id, description, now))?;
        Endpoints::changed(id, found)
    }

    /// Enables the endpoint (clears the disabled reason). Deliveries that went dead while
    /// it was disabled can be requeued.
    ///
    /// # Errors
    /// [`ErrorKind::NotFound`].
    pub fn enable(&self, id: i64) -> Result<()> {
        let now = self.queue.now_ms();
        let found = self
            .queue
            .db()
            .write(|tx| tx.set_endpoint_enabled(id, true, None, now))?;
        Endpoints::changed(id, found)
    }

    /// Disables the endpoint: its deliveries go dead at once with `reason` in their error.
    ///
    /// # Errors
    /// [`ErrorKind::NotFound`].
    pub fn disable(&self, id: i64, reason: &str) -> Result<()> {
        let now = self.queue.now_ms();
        let found = self
            .queue
            .db()
            .write(|tx| tx.set_endpoint_enabled(id, false, Some(reason), now))?;
        Endpoints::changed(id, found)
    }

    /// Rotates the secret without downtime: deliveries are signed with `new_secret` and,
    /// for `overlap` more, also with the old one, so a receiver that still checks the old
    /// secret keeps accepting them while it is updated.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`] for a secret not in the `whsec_` form;
    /// [`ErrorKind::NotFound`].
    pub fn rotate_secret(&self, id: i64, new_secret: &str, overlap: Duration) -> Result<()> {
        check_new_secret(new_secret)
            .map_err(|e| Error::invalid_config(format!("webhook endpoint secret: {e}")))?;
        let now = self.queue.now_ms();
        let until = now.saturating_add(duration_to_ms(overlap));
        let found = self
            .queue
            .db()
            .write(|tx| tx.rotate_endpoint_secret(id, new_secret, until, now))?;
        Endpoints::changed(id, found)
    }

    /// Removes the endpoint. Deliveries still waiting for it go dead when they run
    /// ("does not exist").
    ///
    /// # Errors
    /// [`ErrorKind::NotFound`].
    pub fn remove(&self, id: i64) -> Result<()> {
        let found = self.queue.db().write(|tx| tx.delete_endpoint(id))?;
        Endpoints::changed(id, found)
    }
}

/// The error of a delivery to an endpoint that cannot take it.
pub(crate) fn unusable(id: i64, endpoint: Option<&Endpoint>) -> Option<Error> {
    match endpoint {
        None => Some(Error::not_found("webhook endpoint", id)),
        Some(e) if !e.enabled => Some(Error::new(
            ErrorKind::InvalidState,
            format!(
                "webhook endpoint {id} is disabled: {}",
                e.disabled_reason.as_deref().unwrap_or("no reason given")
            ),
        )),
        Some(_) => None,
    }
}
