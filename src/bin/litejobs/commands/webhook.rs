//! `litejobs webhook add | list | show | enable | disable | rotate | remove`: the webhook
//! endpoints of a database, for programs in any language. Everything goes through
//! `litejobs::builtin::webhook::Endpoints` and `litejobs::limits::Breaker`, so it works the
//! same on SQLite and PostgreSQL.
//!
//! A secret is printed once, by the command that makes it (`add` without `--secret`,
//! `rotate`), and never again: `list` and `show` leave it out of tables and JSON alike. URLs
//! are printed as the dashboard shows them (`webhook::shown_url`): the host deliveries go
//! to, without the password, query string and fragment, which often carry tokens.

use std::collections::HashMap;
use std::io::Write;

use litejobs::builtin::webhook::{self, shown_url, Endpoint, Endpoints, NewEndpoint};
use litejobs::limits::{Breaker, BreakerState, BreakerStatus};
use litejobs::{JobFilter, JobRecord, JobStatus, Queue};
use serde::Serialize;

use super::{CliError, Ctx, Exit};
use crate::args::{
    EndpointIdArgs, WebhookAddArgs, WebhookCommand, WebhookDisableArgs, WebhookRotateArgs,
};
use crate::duration::{ago, utc};
use crate::output::{clip, one_line, or_dash, write_json, Table};

/// `show` looks for an endpoint's failed deliveries among this many of the newest retrying
/// and of the newest dead `deliver_webhook` jobs: a payload holds the endpoint id, which no
/// index covers, so the search is bounded rather than a scan of the whole table.
const FAILED_SCAN: usize = 500;
/// `show` lists at most this many failed deliveries, newest first.
const FAILED_SHOWN: usize = 10;

/// Runs a `webhook` subcommand.
pub fn run(ctx: &Ctx, cmd: &WebhookCommand, out: &mut dyn Write) -> Result<Exit, CliError> {
    match cmd {
        WebhookCommand::Add(args) => add(ctx, args, out),
        WebhookCommand::List => list(ctx, out),
        WebhookCommand::Show(args) => show(ctx, args, out),
        WebhookCommand::Enable(args) => enable(ctx, args, out),
        WebhookCommand::Disable(args) => disable(ctx, args, out),
        WebhookCommand::Rotate(args) => rotate(ctx, args, out),
        WebhookCommand::Remove(args) => remove(ctx, args, out),
    }
}

/// The sentence that goes with every secret printed.
const STORE_IT: &str = "store it now: it is not shown again";

#[derive(Serialize)]
struct AddedJson<'a> {
    id: i64,
    url: String,
    /// The generated secret; `null` when it was given with `--secret` (not printed back).
    secret: Option<&'a str>,
}

fn add(ctx: &Ctx, args: &WebhookAddArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    // An existing database only: a typo in --db must not create an empty one.
    let queue = ctx.open_existing()?;
    let generated = match &args.secret {
        Some(_) => None,
        None => Some(webhook::generate_secret()?),
    };
    let secret = args
        .secret
        .as_deref()
        .or(generated.as_deref())
        .unwrap_or_default();
    let mut endpoint = NewEndpoint::new(&args.url, secret).description(&args.description);
    if let Some(rate) = args.rate {
        endpoint = endpoint.rate_limit(rate);
    }
    if args.disabled {
        endpoint = endpoint.disabled();
    }
    let id = Endpoints::new(&queue).add(endpoint).map_err(|e| {
        // The library's advice names its Rust function; here the option is the way.
        CliError::from(e).map_message(|m| {
            m.replace(
                "(make one with webhook::generate_secret)",
                "(leave out --secret and one is generated)",
            )
        })
    })?;
    let url = shown_url(&args.url);
    if ctx.json {
        write_json(
            out,
            &AddedJson {
                id,
                url,
                secret: generated.as_deref(),
            },
        )?;
        return Ok(Exit::Ok);
    }
    writeln!(out, "webhook endpoint {id} added: {}", one_line(&url))?;
    match &generated {
        Some(secret) => {
            writeln!(out, "secret  {secret}")?;
            writeln!(
                out,
                "{STORE_IT} (give it to the receiver, which verifies the signatures; \
                 `litejobs webhook rotate {id}` makes a new one)"
            )?;
        }
        None => writeln!(out, "signed with the secret given with --secret")?,
    }
    if args.disabled {
        writeln!(
            out,
            "disabled: deliveries go dead until `litejobs webhook enable {id}`"
        )?;
    }
    Ok(Exit::Ok)
}

/// An endpoint as `list` and `show` print it: every field but the secrets.
#[derive(Serialize)]
struct EndpointJson<'a> {
    id: i64,
    url: String,
    enabled: bool,
    disabled_reason: Option<&'a str>,
    rate_limit: Option<i64>,
    rate_period_ms: i64,
    description: &'a str,
    created_at: i64,
    updated_at: i64,
    /// While a rotation overlaps: when the previous secret stops signing (ms).
    previous_secret_expires_at: Option<i64>,
    breaker: BreakerJson<'a>,
}

/// An endpoint's circuit breaker; closed with no failures when it never failed.
#[derive(Serialize)]
struct BreakerJson<'a> {
    state: BreakerState,
    /// Failures in a row.
    failures: i64,
    /// Open: when the cool-down ends; half-open: when the probe's turn lapses (ms).
    open_until: Option<i64>,
    opened_at: Option<i64>,
    last_error: Option<&'a str>,
    /// When the breaker's state last changed (ms); `null` when it never failed.
    updated_at: Option<i64>,
}

impl<'a> EndpointJson<'a> {
    fn new(endpoint: &'a Endpoint, breaker: Option<&'a BreakerStatus>, now: i64) -> Self {
        EndpointJson {
            id: endpoint.id,
            url: shown_url(&endpoint.url),
            enabled: endpoint.enabled,
            disabled_reason: endpoint.disabled_reason.as_deref(),
            rate_limit: endpoint.rate_limit,
            rate_period_ms: endpoint.rate_period_ms,
            description: &endpoint.description,
            created_at: endpoint.created_at,
            updated_at: endpoint.updated_at,
            previous_secret_expires_at: endpoint
                .previous_secret_expires_at
                .filter(|until| *until > now),
            breaker: BreakerJson {
                state: breaker.map_or(BreakerState::Closed, |b| b.state),
                failures: breaker.map_or(0, |b| b.failures),
                open_until: breaker.and_then(|b| b.open_until),
                opened_at: breaker.and_then(|b| b.opened_at),
                last_error: breaker.and_then(|b| b.last_error.as_deref()),
                updated_at: breaker.map(|b| b.updated_at),
            },
        }
    }
}

/// Every breaker with stored state, by key (one read for the whole list); an endpoint's
/// is under `webhook::limit_key(id)`.
fn breakers_by_key(queue: &Queue) -> Result<HashMap<String, BreakerStatus>, CliError> {
    Ok(Breaker::list(queue)?
        .into_iter()
        .map(|status| (status.key.clone(), status))
        .collect())
}

#[derive(Serialize)]
struct ListJson<'a> {
    endpoints: Vec<EndpointJson<'a>>,
}

fn list(ctx: &Ctx, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_read_only()?;
    let endpoints = Endpoints::new(&queue).list()?;
    let breakers = breakers_by_key(&queue)?;
    let now = queue.now_ms();
    if ctx.json {
        let endpoints = endpoints
            .iter()
            .map(|e| EndpointJson::new(e, breakers.get(&webhook::limit_key(e.id)), now))
            .collect();
        write_json(out, &ListJson { endpoints })?;
        return Ok(Exit::Ok);
    }
    if endpoints.is_empty() {
        writeln!(
            out,
            "no webhook endpoints; add one with `litejobs webhook add URL`"
        )?;
        return Ok(Exit::Ok);
    }
    let mut table = Table::new(&[
        "ID>",
        "STATE",
        "BREAKER",
        "FAILS>",
        "RATE",
        "URL",
        "LAST FAILURE",
        "DESCRIPTION",
    ]);
    for e in &endpoints {
        let breaker = breakers.get(&webhook::limit_key(e.id));
        table.row(vec![
            e.id.to_string(),
            clip(&state_text(e), 40),
            breaker_short(breaker, now),
            breaker.map_or(0, |b| b.failures).to_string(),
            e.rate_text(),
            clip(&shown_url(&e.url), 60),
            clip(&or_dash(breaker.and_then(|b| b.last_error.as_deref())), 50),
            clip(&e.description, 40),
        ]);
    }
    table.write(out)?;
    Ok(Exit::Ok)
}

/// A failed delivery as `show --json` prints it (no body: it may be large or private).
#[derive(Serialize)]
struct FailedJson<'a> {
    id: i64,
    status: JobStatus,
    event_id: Option<&'a str>,
    event_type: Option<&'a str>,
    attempts: i64,
    max_attempts: i64,
    last_status_code: Option<i64>,
    last_error: Option<&'a str>,
    updated_at: i64,
    /// When a retrying delivery is due next (ms).
    run_at: i64,
    requeued_as: Option<i64>,
}

impl<'a> FailedJson<'a> {
    fn new(job: &'a JobRecord) -> Self {
        let text = |field: &str| job.payload.get(field).and_then(|v| v.as_str());
        FailedJson {
            id: job.id,
            status: job.status,
            event_id: text("event_id"),
            event_type: text("event_type"),
            attempts: job.attempts,
            max_attempts: job.max_attempts,
            last_status_code: job.last_status_code,
            last_error: job.last_error.as_deref(),
            updated_at: job.updated_at,
            run_at: job.run_at,
            requeued_as: job.requeued_as,
        }
    }
}

#[derive(Serialize)]
struct ShowJson<'a> {
    endpoint: EndpointJson<'a>,
    failed_deliveries: Vec<FailedJson<'a>>,
}

/// The endpoint `id`, or the one-line refusal.
fn get(queue: &Queue, id: i64) -> Result<Endpoint, CliError> {
    Endpoints::new(queue)
        .get(id)?
        .ok_or_else(|| CliError::new(format!("no webhook endpoint with id {id}")))
}

/// The newest failed deliveries to `id` (retrying or dead), among the newest
/// [`FAILED_SCAN`] of each.
fn failed_deliveries(queue: &Queue, id: i64) -> Result<Vec<JobRecord>, CliError> {
    let mut jobs = Vec::new();
    for status in [JobStatus::Failed, JobStatus::Dead] {
        let filter = JobFilter::new()
            .job_type(webhook::JOB_TYPE)
            .status(status)
            .limit(FAILED_SCAN);
        jobs.extend(
            queue
                .list(&filter)?
                .into_iter()
                .filter(|job| job.payload.get("endpoint_id").and_then(|v| v.as_i64()) == Some(id)),
        );
    }
    jobs.sort_by_key(|job| std::cmp::Reverse((job.updated_at, job.id)));
    jobs.truncate(FAILED_SHOWN);
    Ok(jobs)
}

fn show(ctx: &Ctx, args: &EndpointIdArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_read_only()?;
    let endpoint = get(&queue, args.id)?;
    let breaker = Breaker::status(&queue, &webhook::limit_key(args.id))?;
    let failed = failed_deliveries(&queue, args.id)?;
    let now = queue.now_ms();
    if ctx.json {
        write_json(
            out,
            &ShowJson {
                endpoint: EndpointJson::new(&endpoint, breaker.as_ref(), now),
                failed_deliveries: failed.iter().map(FailedJson::new).collect(),
            },
        )?;
        return Ok(Exit::Ok);
    }
    let at = |ms: i64| format!("{} ({})", utc(ms), ago(ms, now));
    let mut fields: Vec<(&str, String)> = vec![
        ("endpoint", endpoint.id.to_string()),
        ("url", shown_url(&endpoint.url)),
        ("state", state_text(&endpoint)),
        ("rate limit", endpoint.rate_text()),
    ];
    if !endpoint.description.is_empty() {
        fields.push(("description", endpoint.description.clone()));
    }
    fields.push(("created", at(endpoint.created_at)));
    fields.push(("changed", at(endpoint.updated_at)));
    if let Some(until) = endpoint.previous_secret_expires_at.filter(|u| *u > now) {
        fields.push((
            "rotation",
            format!(
                "the previous secret also signs deliveries until {}",
                at(until)
            ),
        ));
    }
    fields.push(("breaker", breaker_long(breaker.as_ref(), now)));
    if let Some(b) = &breaker {
        fields.push(("failures", format!("{} in a row", b.failures)));
        if let Some(error) = &b.last_error {
            fields.push((
                "last failure",
                litejobs::human::excerpt(error, litejobs::human::ERROR_EXCERPT_BYTES).into_owned(),
            ));
        }
        fields.push(("breaker changed", at(b.updated_at)));
    }
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (name, value) in &fields {
        writeln!(out, "{name:<width$}  {}", one_line(value))?;
    }
    writeln!(out)?;
    if failed.is_empty() {
        writeln!(
            out,
            "no failed deliveries among the newest {FAILED_SCAN} retrying and {FAILED_SCAN} \
             dead {} jobs",
            webhook::JOB_TYPE
        )?;
        return Ok(Exit::Ok);
    }
    writeln!(out, "recent failed deliveries (newest first):")?;
    let mut table = Table::new(&["JOB>", "STATUS", "TRIES", "WHEN", "CODE>", "EVENT", "ERROR"]);
    for job in &failed {
        let status = match job.requeued_as {
            Some(new_id) => format!("{} (requeued as {new_id})", job.status),
            None => job.status.to_string(),
        };
        let when = match job.status {
            JobStatus::Failed => format!("retry {}", ago(job.run_at, now)),
            _ => format!(
                "died {}",
                ago(job.finished_at.unwrap_or(job.updated_at), now)
            ),
        };
        table.row(vec![
            job.id.to_string(),
            status,
            format!("{}/{}", job.attempts, job.max_attempts),
            when,
            or_dash(job.last_status_code),
            clip(
                job.payload
                    .get("event_id")
                    .and_then(|v| v.as_str())
                    .unwrap_or("-"),
                30,
            ),
            clip(&or_dash(job.last_error.as_deref()), 60),
        ]);
    }
    table.write(out)?;
    writeln!(
        out,
        "(`litejobs show JOB` gives a delivery's attempt history)"
    )?;
    Ok(Exit::Ok)
}

#[derive(Serialize)]
struct EnabledJson<'a> {
    id: i64,
    enabled: bool,
    disabled_reason: Option<&'a str>,
}

fn enable(ctx: &Ctx, args: &EndpointIdArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_existing()?;
    Endpoints::new(&queue).enable(args.id)?;
    if ctx.json {
        write_json(
            out,
            &EnabledJson {
                id: args.id,
                enabled: true,
                disabled_reason: None,
            },
        )?;
    } else {
        writeln!(
            out,
            "webhook endpoint {} enabled (deliveries that went dead while it was disabled \
             can be requeued with `litejobs dead requeue`)",
            args.id
        )?;
    }
    Ok(Exit::Ok)
}

fn disable(ctx: &Ctx, args: &WebhookDisableArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_existing()?;
    let id = args.endpoint.id;
    Endpoints::new(&queue).disable(id, &args.reason)?;
    if ctx.json {
        write_json(
            out,
            &EnabledJson {
                id,
                enabled: false,
                disabled_reason: Some(&args.reason),
            },
        )?;
    } else {
        writeln!(
            out,
            "webhook endpoint {id} disabled: {}; its deliveries go dead until \
             `litejobs webhook enable {id}`",
            one_line(&args.reason)
        )?;
    }
    Ok(Exit::Ok)
}

#[derive(Serialize)]
struct RotatedJson<'a> {
    id: i64,
    secret: &'a str,
    previous_secret_expires_at: i64,
}

fn rotate(ctx: &Ctx, args: &WebhookRotateArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_existing()?;
    let id = args.endpoint.id;
    let endpoints = Endpoints::new(&queue);
    let secret = webhook::generate_secret()?;
    endpoints.rotate_secret(id, &secret, args.overlap)?;
    // The stored end of the overlap, as the library computed it.
    let until = get(&queue, id)?
        .previous_secret_expires_at
        .unwrap_or_else(|| queue.now_ms());
    if ctx.json {
        write_json(
            out,
            &RotatedJson {
                id,
                secret: &secret,
                previous_secret_expires_at: until,
            },
        )?;
        return Ok(Exit::Ok);
    }
    let now = queue.now_ms();
    writeln!(out, "webhook endpoint {id} has a new secret")?;
    writeln!(out, "secret  {secret}")?;
    writeln!(
        out,
        "{STORE_IT}. The old secret also signs deliveries until {} ({}): update the \
         receiver before then",
        utc(until),
        ago(until, now)
    )?;
    Ok(Exit::Ok)
}

#[derive(Serialize)]
struct RemovedJson {
    removed: i64,
}

fn remove(ctx: &Ctx, args: &EndpointIdArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_existing()?;
    Endpoints::new(&queue).remove(args.id)?;
    if ctx.json {
        write_json(out, &RemovedJson { removed: args.id })?;
    } else {
        writeln!(
            out,
            "webhook endpoint {} removed; deliveries still waiting for it go dead when they run",
            args.id
        )?;
    }
    Ok(Exit::Ok)
}

/// `enabled`, or `disabled: why`.
fn state_text(endpoint: &Endpoint) -> String {
    if endpoint.enabled {
        "enabled".to_string()
    } else {
        format!(
            "disabled: {}",
            endpoint
                .disabled_reason
                .as_deref()
                .unwrap_or("no reason given")
        )
    }
}

/// The breaker in a table cell: `closed`, `open, probe in 42s`, `half_open, probing`.
fn breaker_short(breaker: Option<&BreakerStatus>, now: i64) -> String {
    match breaker {
        None => "closed".to_string(),
        Some(b) => match (b.state, b.open_until) {
            (BreakerState::Closed, _) => "closed".to_string(),
            (BreakerState::Open, Some(until)) if until > now => {
                format!("open, probe {}", ago(until, now))
            }
            (BreakerState::Open, _) => "open, next delivery probes".to_string(),
            (BreakerState::HalfOpen, _) => "half_open, probing".to_string(),
        },
    }
}

/// The breaker in a sentence, with times.
fn breaker_long(breaker: Option<&BreakerStatus>, now: i64) -> String {
    let at = |ms: i64| format!("{} ({})", utc(ms), ago(ms, now));
    match breaker {
        None => "closed (it never failed)".to_string(),
        Some(b) => match (b.state, b.open_until) {
            (BreakerState::Closed, _) => "closed".to_string(),
            (BreakerState::Open, Some(until)) if until > now => format!(
                "open since {}: deliveries wait (no attempt spent) until {}, then one probes",
                b.opened_at.map_or_else(|| "-".to_string(), at),
                at(until)
            ),
            (BreakerState::Open, _) => "open, cool-down over: the next delivery probes".to_string(),
            (BreakerState::HalfOpen, until) => format!(
                "half_open: one delivery probes; its result closes or reopens the breaker \
                 (its turn lapses {})",
                until.map_or_else(|| "-".to_string(), at)
            ),
        },
    }
}
