//! The `deliver_webhook` handler: loads the endpoint, asks its breaker and rate limit,
//! signs, sends over ureq (through the SSRF guard), and turns the answer into an outcome.

use std::io::Read;
use std::time::{Duration, UNIX_EPOCH};

use serde_json::json;
use ureq::unversioned::transport::DefaultConnector;
use ureq::Agent;

use crate::handler::JobContext;
use crate::handler::{Handler, JobError};
use crate::limits::{Breaker, BreakerCall};
use crate::Queue;

use super::classify::{classify_status, endpoint_failing, parse_retry_after, StatusClass};
use super::endpoints::{unusable, Endpoint};
use super::guard::{GuardedResolver, TargetRefused};
use super::options::{WebhookOptions, DEFAULT_CONNECT_TIMEOUT};
use super::signature::sign;
use super::{limit_key, DeliveryPayload};

/// The most of a response body kept in the attempt history (in the error text).
pub const MAX_RESPONSE_EXCERPT: usize = 1536;
/// The most of a response body kept in a succeeded delivery's result.
const MAX_SUCCESS_EXCERPT: usize = 256;

/// Delivers `deliver_webhook` jobs. Made by [`register`](super::register).
pub(crate) struct Deliverer {
    queue: Queue,
    agent: Agent,
    options: WebhookOptions,
    breaker: Breaker,
}

impl Deliverer {
    pub(crate) fn new(queue: Queue, options: WebhookOptions) -> Deliverer {
        let config = Agent::config_builder()
            // Every status is an answer to classify, not an error.
            .http_status_as_error(false)
            // A redirect is reported, never followed: following one could lead past the
            // SSRF guard's intent, and the endpoint URL should be fixed instead.
            .max_redirects(0)
            // A proxy from the environment would be resolved instead of the target, which
            // would bypass the guard; webhooks go direct.
            .proxy(None)
            .user_agent(options.user_agent.as_str())
            .timeout_global(Some(options.timeout))
            .timeout_connect(Some(options.timeout.min(DEFAULT_CONNECT_TIMEOUT)))
            .build();
        let agent = Agent::with_parts(
            config,
            DefaultConnector::default(),
            GuardedResolver::new(options.allow_private_targets),
        );
        let breaker = Breaker::new()
            .failure_threshold(options.breaker_failures)
            .cool_down(options.breaker_cool_down)
            // A probe whose worker died lapses after one attempt's time limit.
            .probe_timeout(options.attempt_timeout());
        Deliverer {
            queue,
            agent,
            options,
            breaker,
        }
    }
}

impl Handler for Deliverer {
    fn run(&self, ctx: &JobContext) -> Result<(), JobError> {
        let delivery: DeliveryPayload = ctx.payload_as()?;
        delivery.check().map_err(JobError::permanent)?;
        let id = delivery.endpoint_id;
        let endpoint = self
            .queue
            .db()
            .read(|tx| Ok(tx.endpoint(id)?.map(Endpoint::from)))
            .map_err(|e| JobError::retry(format!("could not read webhook endpoint {id}: {e}")))?;
        if let Some(err) = unusable(id, endpoint.as_ref()) {
            return Err(JobError::permanent(err.to_string()));
        }
        let Some(endpoint) = endpoint else {
            return Err(JobError::permanent(format!(
                "no webhook endpoint with id {id}"
            )));
        };
        let key = limit_key(id);
        // An open breaker or a spent rate limit snoozes the job: no attempt is spent.
        let call = ctx.breaker(&key, &self.breaker)?;
        if let Some(rate) = endpoint.rate() {
            ctx.rate_limit(&key, &rate)?;
        }

        let body = delivery.body_bytes();
        let now_ms = self.queue.now_ms();
        let timestamp = now_ms.div_euclid(1000);
        let signatures = endpoint
            .signing_secrets(now_ms)
            .into_iter()
            .map(|secret| sign(secret, &delivery.event_id, timestamp, &body))
            .collect::<Result<Vec<String>, _>>()
            .map_err(|e| JobError::permanent(format!("webhook endpoint {id}: {e}")))?
            .join(" ");
        let target = Target::of(&endpoint);
        log::debug!(
            "litejobs: webhook job {} (event {}) attempt {} to endpoint {id} ({target})",
            ctx.id(),
            delivery.event_id,
            ctx.attempt()
        );
        let sent = self
            .agent
            .post(&endpoint.url)
            .header("webhook-id", &delivery.event_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signatures)
            .header("content-type", delivery.content_type())
            .send(&body[..]);
        match sent {
            Ok(response) => self.answered(ctx, call, &endpoint, &delivery, &target, response),
            Err(err) => Err(self.not_answered(call, &endpoint, &target, err)),
        }
    }
}

impl Deliverer {
    /// The endpoint answered with a status.
    fn answered(
        &self,
        ctx: &JobContext,
        call: BreakerCall<'_>,
        endpoint: &Endpoint,
        delivery: &DeliveryPayload,
        target: &Target,
        mut response: ureq::http::Response<ureq::Body>,
    ) -> Result<(), JobError> {
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let retry_after = header("retry-after");
        let location = header("location");
        let excerpt = read_excerpt(response.body_mut(), MAX_RESPONSE_EXCERPT);
        let id = endpoint.id;
        let mut message = format!("HTTP {status} from webhook endpoint {id} ({target})");
        if !excerpt.is_empty() {
            message.push_str("; response: ");
            message.push_str(&excerpt);
        }
        if endpoint_failing(status) {
            let _ = call.failure(&message);
        } else {
            call.success();
        }
        let class = classify_status(status);
        if class != StatusClass::Success {
            log::info!(
                "litejobs: webhook job {} to endpoint {id} ({target}): HTTP {status}",
                ctx.id()
            );
        }
        let error = match class {
            StatusClass::Success => {
                let short: String = excerpt.chars().take(MAX_SUCCESS_EXCERPT).collect();
                ctx.set_result(json!({
                    "endpoint_id": id,
                    "status_code": status,
                    "response": short,
                }));
                return Ok(());
            }
            StatusClass::Retry => {
                if let Some(location) = location.filter(|_| (300..400).contains(&status)) {
                    message.push_str(&format!("; redirect to {location:?} not followed"));
                }
                let now = UNIX_EPOCH + Duration::from_millis(self.queue.now_ms().max(0) as u64);
                match retry_after
                    .as_deref()
                    .and_then(|v| parse_retry_after(v, now, self.options.max_retry_after))
                {
                    Some(delay) => {
                        message.push_str(&format!("; Retry-After {delay:?}"));
                        JobError::retry_after(delay, message)
                    }
                    None => JobError::retry(message),
                }
            }
            StatusClass::Permanent => {
                if let Some(location) = location.filter(|_| (300..400).contains(&status)) {
                    message.push_str(&format!(
                        "; moved for good to {location:?}: update the endpoint URL"
                    ));
                }
                JobError::permanent(message)
            }
            StatusClass::Gone => {
                let reason = format!(
                    "410 Gone from {target} while delivering job {} (event {})",
                    ctx.id(),
                    delivery.event_id
                );
                let now = self.queue.now_ms();
                match self
                    .queue
                    .db()
                    .write(|tx| tx.set_endpoint_enabled(id, false, Some(&reason), now))
                {
                    Ok(_) => {
                        log::warn!("litejobs: webhook endpoint {id} disabled: {reason}");
                        message.push_str("; endpoint disabled");
                    }
                    Err(e) => {
                        log::warn!("litejobs: could not disable webhook endpoint {id}: {e}");
                        message.push_str(&format!("; could not disable the endpoint: {e}"));
                    }
                }
                JobError::permanent(message)
            }
        };
        Err(error.with_status_code(status))
    }

    /// No answer: refused by the guard, a bad URL, a timeout or a network failure.
    fn not_answered(
        &self,
        call: BreakerCall<'_>,
        endpoint: &Endpoint,
        target: &Target,
        err: ureq::Error,
    ) -> JobError {
        let id = endpoint.id;
        if let ureq::Error::Other(inner) = &err {
            if let Some(refused) = inner.downcast_ref::<TargetRefused>() {
                // Not the endpoint's fault, so not the breaker's business.
                drop(call);
                return JobError::permanent(format!(
                    "webhook endpoint {id}: refused by the SSRF guard: {refused}; allow \
                     private targets with WebhookOptions::allow_private_targets(true) or \
                     LITEJOBS_WEBHOOK_ALLOW_PRIVATE=1"
                ));
            }
        }
        let permanent = matches!(
            err,
            ureq::Error::BadUri(_)
                | ureq::Error::Http(_)
                | ureq::Error::RequireHttpsOnly(_)
                | ureq::Error::TlsRequired
        );
        if permanent {
            drop(call);
            return JobError::permanent(format!(
                "webhook endpoint {id} ({target}): cannot send: {err}"
            ));
        }
        let message = match &err {
            ureq::Error::Timeout(which) => format!(
                "webhook endpoint {id} ({target}): timed out ({which}) within {:?}",
                self.options.timeout
            ),
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => format!(
                "webhook endpoint {id} ({target}): timed out within {:?}: {io}",
                self.options.timeout
            ),
            ureq::Error::HostNotFound => {
                format!("webhook endpoint {id} ({target}): host not found")
            }
            other => format!("webhook endpoint {id} ({target}): {other}"),
        };
        log::info!("litejobs: {message}");
        let _ = call.failure(&message);
        JobError::retry(message)
    }
}

/// The endpoint as named in messages and logs: host and port only, since paths and query
/// strings of webhook URLs often hold tokens.
struct Target(String);

impl Target {
    fn of(endpoint: &Endpoint) -> Target {
        let named = endpoint
            .url
            .parse::<ureq::http::Uri>()
            .ok()
            .and_then(|uri| {
                let host = uri.host()?.to_string();
                Some(match uri.port_u16() {
                    Some(port) => format!("{host}:{port}"),
                    None => host,
                })
            });
        Target(named.unwrap_or_else(|| "invalid URL".to_string()))
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// At most `max` bytes of the response body as text (invalid UTF-8 replaced), marked when
/// cut. A body that cannot be read is described instead.
fn read_excerpt(body: &mut ureq::Body, max: usize) -> String {
    let mut bytes = Vec::new();
    let read = body
        .as_reader()
        .take(max as u64 + 1)
        .read_to_end(&mut bytes);
    let cut = bytes.len() > max;
    bytes.truncate(max);
    let mut text = String::from_utf8_lossy(&bytes).trim().to_string();
    if cut {
        text.push_str(" …(truncated)");
    }
    if let Err(e) = read {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(&format!("(response body unreadable: {e})"));
    }
    text
}
