//! Webhook delivery done right: signed requests (Standard Webhooks), retries with
//! backoff and `Retry-After`, dead letters, a circuit breaker and a rate limit per
//! endpoint, an SSRF guard, and a receiver-side [`verify`]. Cargo feature `webhook`
//! (on by default).
//!
//! - [`Endpoints`] registers endpoints (URL, secret, rate limit) in the database: secrets
//!   never sit in job payloads or dead-letter rows.
//! - [`delivery`] / [`ordered_delivery`] make the job (type [`JOB_TYPE`]) that delivers one
//!   event to one endpoint; [`enqueue_delivery`] also checks the endpoint.
//! - [`register`] adds the handler to a worker (`litejobs work` does it for you).
//! - [`verify`] checks a request in your receiver; [`sign`] is the sender's half.
//!
//! ```
//! use litejobs::builtin::webhook::{self, Endpoints, NewEndpoint, WebhookOptions};
//! use litejobs::{Queue, Worker};
//! use serde_json::json;
//! # fn main() -> litejobs::Result<()> {
//! let queue = Queue::open_in_memory()?;
//! let endpoint = Endpoints::new(&queue).add(NewEndpoint::new(
//!     "https://crm.example.com/hooks",
//!     webhook::generate_secret()?,
//! ))?;
//! let job = queue.enqueue(webhook::delivery(endpoint, "order.paid", "evt_123", json!({"order": 7})))?;
//! let worker = webhook::register(Worker::builder(&queue), &WebhookOptions::default())?;
//! # let _ = (job, worker);
//! # Ok(())
//! # }
//! ```
//!
//! ## What a response does
//! | answer | outcome |
//! | --- | --- |
//! | 2xx | succeeded; status and the start of the response in the job's result |
//! | 408, 425, 429, 5xx, 302/303/307, timeout, connection error | retried by the retry policy, or after `Retry-After` (seconds or HTTP date, at most [`WebhookOptions::max_retry_after`]) |
//! | 410 Gone | dead at once, and the endpoint is disabled |
//! | other 4xx, 301/308 | dead at once |
//! | target refused by the SSRF guard, bad URL, unknown or disabled endpoint | dead at once |
//!
//! The status code and up to [`MAX_RESPONSE_EXCERPT`] bytes of the response are kept in the
//! attempt history. Timeouts, connection errors, 408 and 5xx count against the endpoint's
//! circuit breaker; while it is open, deliveries to it wait without spending attempts.

mod classify;
mod deliver;
mod endpoints;
mod guard;
mod options;
mod shown;
mod signature;

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::{Error, Result};
use crate::job::NewJob;
use crate::{Queue, WorkerBuilder};

pub use classify::{classify_status, parse_retry_after, StatusClass};
pub use deliver::MAX_RESPONSE_EXCERPT;
pub use endpoints::{Endpoint, Endpoints, NewEndpoint};
pub use options::{
    default_retry_policy, WebhookOptions, ATTEMPT_TIMEOUT_MARGIN, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_RETRY_AFTER, DEFAULT_WEBHOOK_TIMEOUT,
};
pub use shown::shown_url;
pub use signature::{
    generate_secret, sign, verify, SignatureError, DEFAULT_TOLERANCE, SECRET_PREFIX,
};

/// The job type of webhook deliveries.
pub const JOB_TYPE: &str = "deliver_webhook";

/// The payload of a [`JOB_TYPE`] job. Other languages write it as JSON text, e.g.
/// `{"endpoint_id": 1, "event_type": "order.paid", "event_id": "evt_123", "body": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeliveryPayload {
    /// The `webhook_endpoints` row to deliver to.
    pub endpoint_id: i64,
    /// The event's id, sent as `webhook-id` (the same on every retry, so receivers can
    /// dedupe). A JSON number is taken as its text.
    #[serde(deserialize_with = "string_or_number")]
    pub event_id: String,
    /// The event's type, e.g. `order.paid`: for people and searches.
    #[serde(default)]
    pub event_type: String,
    /// The request body: a JSON string is sent as it is; any other JSON value is sent as
    /// compact JSON text.
    pub body: serde_json::Value,
    /// The `Content-Type` header. Defaults to `application/json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
}

fn string_or_number<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<String, D::Error> {
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => Ok(s),
        serde_json::Value::Number(n) => Ok(n.to_string()),
        other => Err(serde::de::Error::custom(format!(
            "event_id must be a string or a number, got {other}"
        ))),
    }
}

impl DeliveryPayload {
    /// A payload with the default content type.
    pub fn new(
        endpoint_id: i64,
        event_type: impl Into<String>,
        event_id: impl Into<String>,
        body: serde_json::Value,
    ) -> DeliveryPayload {
        DeliveryPayload {
            endpoint_id,
            event_id: event_id.into(),
            event_type: event_type.into(),
            body,
            content_type: None,
        }
    }

    /// A header value must be visible text; the id travels in `webhook-id`.
    pub(crate) fn check(&self) -> std::result::Result<(), String> {
        if self.event_id.trim().is_empty() {
            return Err("webhook delivery: event_id must not be empty".into());
        }
        for (name, value) in [
            ("event_id", Some(self.event_id.as_str())),
            ("content_type", self.content_type.as_deref()),
        ] {
            if value.is_some_and(|v| v.chars().any(|c| c.is_control() || !c.is_ascii())) {
                return Err(format!(
                    "webhook delivery: {name} {value:?} must be printable ASCII (it is sent \
                     as a header)"
                ));
            }
        }
        Ok(())
    }

    /// The bytes sent (and signed).
    pub(crate) fn body_bytes(&self) -> Vec<u8> {
        match &self.body {
            serde_json::Value::String(text) => text.clone().into_bytes(),
            other => other.to_string().into_bytes(),
        }
    }

    pub(crate) fn content_type(&self) -> &str {
        self.content_type.as_deref().unwrap_or("application/json")
    }
}

/// The idempotency key of the delivery of `event_id` to `endpoint_id`:
/// `webhook:<endpoint>:<event>`. A second enqueue of the same event for the same endpoint
/// returns the first job.
pub fn idempotency_key(endpoint_id: i64, event_id: &str) -> String {
    format!("webhook:{endpoint_id}:{event_id}")
}

/// The group key that delivers an endpoint's events one at a time, in order:
/// `endpoint:<id>`.
pub fn group_key(endpoint_id: i64) -> String {
    format!("endpoint:{endpoint_id}")
}

/// The key of an endpoint's circuit breaker and rate limit in
/// [`limits`](crate::limits): `webhook-endpoint:<id>`.
pub fn limit_key(endpoint_id: i64) -> String {
    format!("webhook-endpoint:{endpoint_id}")
}

/// The job that delivers one event to one endpoint: type [`JOB_TYPE`], the
/// [`idempotency_key`] (a second enqueue of the same event returns the first job), the
/// `"default"` queue unless you chain `.queue(..)`. Deliveries of one endpoint may run in
/// parallel; use [`ordered_delivery`] to keep them in order.
///
/// ```
/// use litejobs::builtin::webhook;
/// use serde_json::json;
/// let job = webhook::delivery(3, "order.paid", "evt_123", json!({"order": 7}))
///     .queue("webhooks")
///     .max_attempts(8);
/// assert_eq!(job.job_type(), "deliver_webhook");
/// ```
pub fn delivery(
    endpoint_id: i64,
    event_type: impl Into<String>,
    event_id: impl Into<String>,
    body: serde_json::Value,
) -> NewJob {
    let payload = DeliveryPayload::new(endpoint_id, event_type, event_id, body);
    let key = idempotency_key(endpoint_id, &payload.event_id);
    // A payload of plain fields and a JSON value always serializes.
    let value = serde_json::to_value(&payload).unwrap_or(serde_json::Value::Null);
    NewJob::new(JOB_TYPE, value).idempotency_key(key)
}

/// As [`delivery`], and with the endpoint's [`group_key`]: one delivery to the endpoint runs
/// at a time, in (priority, run time, id) order.
pub fn ordered_delivery(
    endpoint_id: i64,
    event_type: impl Into<String>,
    event_id: impl Into<String>,
    body: serde_json::Value,
) -> NewJob {
    delivery(endpoint_id, event_type, event_id, body).group_key(group_key(endpoint_id))
}

/// Enqueues `job` (made by [`delivery`] or [`ordered_delivery`]) after checking that its
/// endpoint exists and is enabled, so a mistake shows at once rather than as a dead job.
/// Returns the job's id (or the id of the job already holding its idempotency key).
///
/// # Errors
/// [`ErrorKind::InvalidJob`](crate::ErrorKind::InvalidJob) when `job` is not a delivery;
/// [`ErrorKind::NotFound`](crate::ErrorKind::NotFound) for an unknown endpoint;
/// [`ErrorKind::InvalidState`](crate::ErrorKind::InvalidState) for a disabled one; and
/// whatever [`Queue::enqueue`] refuses.
pub fn enqueue_delivery(queue: &Queue, job: NewJob) -> Result<i64> {
    if job.job_type != JOB_TYPE {
        return Err(Error::invalid_job(format!(
            "enqueue_delivery takes a job made by webhook::delivery, got job type {:?}",
            job.job_type
        )));
    }
    let parsed = match &job.payload {
        crate::job::Payload::Value(value) => DeliveryPayload::deserialize(value),
        crate::job::Payload::Text(text) => serde_json::from_str(text),
    };
    let payload =
        parsed.map_err(|e| Error::invalid_job(format!("not a webhook delivery payload: {e}")))?;
    payload.check().map_err(Error::invalid_job)?;
    let id = payload.endpoint_id;
    let endpoint = queue
        .db()
        .read(|tx| Ok(tx.endpoint(id)?.map(Endpoint::from)))?;
    if let Some(err) = endpoints::unusable(id, endpoint.as_ref()) {
        return Err(err);
    }
    queue.enqueue(job)
}

/// Registers the [`JOB_TYPE`] handler on `builder` with `options`: its attempt time limit
/// ([`WebhookOptions::attempt_timeout`]) and retry policy. Nothing is registered when the
/// options are not [`enabled`](WebhookOptions::enabled).
///
/// Deliveries go to the queue they were enqueued in (`"default"` unless chosen otherwise):
/// make sure the worker works that queue.
///
/// # Errors
/// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) naming a bad option.
pub fn register(builder: WorkerBuilder, options: &WebhookOptions) -> Result<WorkerBuilder> {
    options.validate()?;
    if !options.enabled {
        return Ok(builder);
    }
    let handler = deliver::Deliverer::new(builder.queue_handle().clone(), options.clone());
    Ok(builder
        .handler(JOB_TYPE, handler)
        .timeout(JOB_TYPE, options.attempt_timeout())
        .retry_policy(JOB_TYPE, options.retry_policy.clone()))
}
