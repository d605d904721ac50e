//! `GET /`: the queue at a glance. Figures that change (counts, ages, rates) carry a
//! `data-key`; `GET /api/overview` returns the same figures by key, and `app.js` polls it
//! and swaps the text in place. Without JavaScript the page is complete, just not live.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::job::JobStatus;
use crate::queue::reads::{Health, DEFAULT_HEALTH_WINDOW};
use crate::storage::reads::StatusCount;

use crate::web::app::{App, Ctx};
use crate::web::chart::{self, Axis};
use crate::web::format::{ago, clip, count, group_field, human_ms, percent, TITLE_CHARS};
use crate::web::html::{action_button, esc, page, Nav};
use crate::web::live::Live;
use crate::web::server::http::{percent_encode, query_string, Response};

/// How long polling browsers share one reading of the figures, at least; a reading that
/// took long is shared longer (four times what it took).
const LIVE_CACHE_MIN: Duration = Duration::from_secs(1);
/// The browsers' polling period: ten times what a reading took, within these bounds, so
/// a large database is not kept busy by an open tab.
const POLL_MIN_MS: i64 = 5_000;
const POLL_MAX_MS: i64 = 60_000;
const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
/// Days in the longer chart.
const DAYS: usize = 14;

/// One row of the queues table.
struct QueueRow {
    name: String,
    counts: [i64; 6],
    oldest_due_ms: Option<i64>,
    paused: bool,
}

/// Everything the page and the live endpoint show, read at once.
struct Reading {
    health: Health,
    stats: Vec<StatusCount>,
    queues: Vec<QueueRow>,
}

fn status_index(status: JobStatus) -> usize {
    JobStatus::ALL
        .iter()
        .position(|s| *s == status)
        .unwrap_or(0)
}

fn read(app: &App) -> Result<Reading> {
    // One snapshot, one pass over the live jobs.
    let overview = app.queue.overview(DEFAULT_HEALTH_WINDOW, 0)?;
    let health = overview.health;
    let stats = overview.counts;
    let oldest: BTreeMap<String, i64> = overview.oldest_due_by_queue.into_iter().collect();
    let paused: BTreeSet<&str> = health.paused_queues.iter().map(String::as_str).collect();
    let mut counts: BTreeMap<&str, [i64; 6]> = BTreeMap::new();
    for c in &stats {
        counts.entry(&c.queue).or_default()[status_index(c.status)] += c.count;
    }
    for name in paused
        .iter()
        .copied()
        .chain(oldest.keys().map(String::as_str))
    {
        counts.entry(name).or_default();
    }
    let queues = counts
        .into_iter()
        .map(|(name, counts)| QueueRow {
            name: name.to_string(),
            counts,
            oldest_due_ms: oldest.get(name).copied(),
            paused: paused.contains(name),
        })
        .collect();
    Ok(Reading {
        health,
        stats,
        queues,
    })
}

/// Dead jobs already requeued: the queues table's `dead` column counts them (their status
/// stays `dead`), the Dead card does not. Both come from one snapshot.
fn requeued_dead(reading: &Reading) -> i64 {
    let all: i64 = reading
        .stats
        .iter()
        .filter(|c| c.status == JobStatus::Dead)
        .map(|c| c.count)
        .sum();
    (all - reading.health.dead).max(0)
}

fn oldest_text(age: Option<i64>) -> String {
    age.map_or_else(|| "–".to_string(), human_ms)
}

fn failure_text(h: &Health) -> (String, String) {
    match h.failure_rate {
        Some(rate) => (
            percent(rate),
            format!(
                "{} of {} attempts failed",
                count(h.failed_attempts),
                count(h.failed_attempts + h.succeeded)
            ),
        ),
        None => ("–".to_string(), "no attempts finished".to_string()),
    }
}

fn live_from(reading: &Reading) -> Live {
    let h = &reading.health;
    let mut values = BTreeMap::new();
    let mut put = |k: String, v: String| {
        values.insert(k, v);
    };
    put("due_now".into(), count(h.due_now));
    put("oldest_due".into(), oldest_text(h.oldest_due_age_ms));
    put("scheduled".into(), count(h.scheduled));
    put("waiting_dependants".into(), count(h.waiting_dependants));
    put("running".into(), count(h.running));
    put("dead".into(), count(h.dead));
    put("dead_requeued".into(), count(requeued_dead(reading)));
    put("dead_last_hour".into(), count(h.dead_last_hour));
    put("succeeded_window".into(), count(h.succeeded));
    put("expired_last_hour".into(), count(h.expired_last_hour));
    let (rate, detail) = failure_text(h);
    put("failure_rate".into(), rate);
    put("failure_detail".into(), detail);
    let mut shape = String::new();
    for q in &reading.queues {
        for status in JobStatus::ALL {
            put(
                format!("q:{}:{}", q.name, status.as_str()),
                count(q.counts[status_index(status)]),
            );
        }
        put(format!("q:{}:oldest", q.name), oldest_text(q.oldest_due_ms));
        let _ = writeln!(shape, "{}={}", q.name, q.paused);
    }
    Live {
        at_ms: h.at_ms,
        shape,
        values,
        next_poll_ms: POLL_MIN_MS,
    }
}

/// The live figures. One reading is shared by every polling browser for a while (the lock
/// is held while reading, so browsers arriving meanwhile wait for it rather than read too).
pub(crate) fn live(app: &App) -> Result<Live> {
    let mut cache = app.live.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((at, took, live)) = &cache.taken {
        if at.elapsed() < LIVE_CACHE_MIN.max(*took * 4) {
            return Ok(live.clone());
        }
    }
    let started = Instant::now();
    let mut live = live_from(&read(app)?);
    let took = started.elapsed();
    let took_ms = i64::try_from(took.as_millis()).unwrap_or(i64::MAX);
    live.next_poll_ms = took_ms.saturating_mul(10).clamp(POLL_MIN_MS, POLL_MAX_MS);
    cache.taken = Some((Instant::now(), took, live.clone()));
    Ok(live)
}

/// A figure the live update may replace.
fn live_span(live: &Live, key: &str) -> String {
    format!(
        "<span data-key=\"{}\">{}</span>",
        esc(key),
        esc(live.values.get(key).map_or("", String::as_str))
    )
}

fn card(
    out: &mut String,
    live: &Live,
    label: &str,
    key: &str,
    sub: &str,
    href: Option<&str>,
    alert: bool,
) {
    let class = if alert { "card card-alert" } else { "card" };
    let value = live_span(live, key);
    let value = match href {
        Some(href) => format!("<a href=\"{}\">{value}</a>", esc(href)),
        None => value,
    };
    let _ = write!(
        out,
        "<div class=\"{class}\"><div class=\"card-label\">{label}</div><div class=\"card-value\">{value}</div><div class=\"card-sub\">{sub}</div></div>"
    );
}

/// The overview page.
pub(crate) fn render(app: &App, ctx: &Ctx) -> Result<Response> {
    let started = Instant::now();
    let reading = read(app)?;
    let took_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
    let live = live_from(&reading);
    let h = &reading.health;
    let mut body = String::new();
    body.push_str("<div class=\"page-head\"><h1>Overview</h1><span id=\"live-status\" class=\"muted\"></span></div>\n");

    body.push_str("<section class=\"cards\">");
    card(
        &mut body,
        &live,
        "Due now",
        "due_now",
        &format!("oldest waiting {}", live_span(&live, "oldest_due")),
        Some("/jobs?status=queued"),
        false,
    );
    card(
        &mut body,
        &live,
        "Scheduled",
        "scheduled",
        &format!(
            "retries in backoff, delayed jobs · {} <a href=\"/workflows\">waiting for other jobs</a>",
            live_span(&live, "waiting_dependants")
        ),
        None,
        false,
    );
    card(
        &mut body,
        &live,
        "Running",
        "running",
        "under a lease",
        Some("/jobs?status=running"),
        false,
    );
    card(
        &mut body,
        &live,
        "Dead, not requeued",
        "dead",
        &format!(
            "{} requeued · {} died in the last hour",
            live_span(&live, "dead_requeued"),
            live_span(&live, "dead_last_hour")
        ),
        Some("/dead"),
        h.dead > 0,
    );
    card(
        &mut body,
        &live,
        "Failure rate, last hour",
        "failure_rate",
        &live_span(&live, "failure_detail"),
        None,
        h.failure_rate.is_some_and(|r| r >= 0.2),
    );
    card(
        &mut body,
        &live,
        "Succeeded, last hour",
        "succeeded_window",
        "jobs finished",
        Some("/jobs?status=succeeded"),
        false,
    );
    card(
        &mut body,
        &live,
        "Expired, last hour",
        "expired_last_hour",
        "not started by their deadline",
        Some("/jobs?status=cancelled"),
        false,
    );
    body.push_str("</section>\n");

    queues_table(&mut body, ctx, &live, &reading.queues);
    activity_section(&mut body, app)?;
    types_table(&mut body, &reading.stats);
    errors_section(&mut body, app, ctx)?;

    let attrs = format!(
        "data-live=\"overview\" data-shape=\"{}\" data-poll=\"{}\"",
        esc(&live.shape),
        took_ms.saturating_mul(10).clamp(POLL_MIN_MS, POLL_MAX_MS)
    );
    Ok(Response::html(
        200,
        page(ctx, Nav::Overview, "Overview", &attrs, &body),
    ))
}

fn queues_table(out: &mut String, ctx: &Ctx, live: &Live, queues: &[QueueRow]) {
    out.push_str("<h2>Queues</h2>\n");
    if queues.is_empty() {
        out.push_str("<p class=\"empty\">No jobs yet. Enqueue one and it shows up here.</p>\n");
        return;
    }
    out.push_str("<table class=\"grid\"><thead><tr><th>Queue</th><th>State</th>");
    for status in JobStatus::ALL {
        let _ = write!(out, "<th class=\"num\">{}</th>", status.as_str());
    }
    out.push_str("<th class=\"num\">Oldest due</th><th></th></tr></thead><tbody>\n");
    for q in queues {
        let name = esc(&q.name);
        let _ = write!(
            out,
            "<tr><td><a href=\"/jobs{}\">{name}</a></td><td>{}</td>",
            esc(&query_string(&[("queue", &q.name)])),
            if q.paused {
                "<span class=\"badge badge-paused\">paused</span>"
            } else {
                "<span class=\"badge badge-active\">active</span>"
            }
        );
        for status in JobStatus::ALL {
            let key = format!("q:{}:{}", q.name, status.as_str());
            let _ = write!(
                out,
                "<td class=\"num\"><a href=\"/jobs{}\">{}</a></td>",
                esc(&query_string(&[
                    ("queue", &q.name),
                    ("status", status.as_str())
                ])),
                live_span(live, &key)
            );
        }
        let _ = write!(
            out,
            "<td class=\"num\">{}</td><td class=\"actions\">",
            live_span(live, &format!("q:{}:oldest", q.name))
        );
        let path = format!("/queues/{}", percent_encode(&q.name));
        if q.paused {
            out.push_str(&action_button(
                ctx,
                &format!("{path}/resume"),
                "Resume",
                "btn-small",
                None,
            ));
        } else {
            out.push_str(&action_button(
                ctx,
                &format!("{path}/pause"),
                "Pause",
                "btn-small btn-quiet",
                Some("Pause this queue in every worker process?"),
            ));
        }
        out.push_str("</td></tr>\n");
    }
    out.push_str(
        "</tbody></table>\n<p class=\"legend muted small\">Counts by status: <em>dead</em> \
         counts requeued dead jobs too (they stay dead; each is a new job now), which the Dead \
         card leaves out.</p>\n",
    );
}

fn activity_section(out: &mut String, app: &App) -> Result<()> {
    let hours = app.queue.activity(Duration::from_secs(3600), 24)?;
    let days = app.queue.activity(Duration::from_secs(24 * 3600), DAYS)?;
    out.push_str("<h2>Activity</h2>\n<div class=\"charts\">");
    let _ = write!(
        out,
        "<figure><figcaption>Last 24 hours, per hour</figcaption>{}</figure>",
        chart::activity(
            &hours,
            Axis {
                bucket_ms: HOUR_MS,
                label_every: 3,
                label: "%H:00",
                tooltip: "%H:%M",
            },
            "jobs per hour over the last 24 hours",
        )
    );
    let _ = write!(
        out,
        "<figure><figcaption>Last {DAYS} days, per day</figcaption>{}</figure>",
        chart::activity(
            &days,
            Axis {
                bucket_ms: DAY_MS,
                label_every: 2,
                label: "%b %d",
                tooltip: "%b %d %H:%M",
            },
            "jobs per day over the last two weeks",
        )
    );
    out.push_str("</div>\n<p class=\"legend\"><span class=\"key key-ok\"></span>succeeded <span class=\"key key-fail\"></span>failed attempts <span class=\"key key-dead\"></span>died <span class=\"muted\">· hover a bar for its figures; pruned jobs are not counted</span></p>\n");
    Ok(())
}

fn types_table(out: &mut String, counts: &[StatusCount]) {
    if counts.is_empty() {
        return;
    }
    let mut rows: BTreeMap<(&str, &str), [i64; 6]> = BTreeMap::new();
    for c in counts {
        rows.entry((&c.queue, &c.job_type)).or_default()[status_index(c.status)] += c.count;
    }
    let _ = write!(
        out,
        "<details class=\"types\"><summary>By job type ({} kinds)</summary><table class=\"grid\"><thead><tr><th>Queue</th><th>Type</th>",
        rows.len()
    );
    for status in JobStatus::ALL {
        let _ = write!(out, "<th class=\"num\">{}</th>", status.as_str());
    }
    out.push_str("</tr></thead><tbody>\n");
    for ((queue, job_type), n) in rows {
        let _ = write!(
            out,
            "<tr><td>{}</td><td><a href=\"/jobs{}\">{}</a></td>",
            esc(queue),
            esc(&query_string(&[("queue", queue), ("type", job_type)])),
            esc(job_type)
        );
        for v in n {
            let _ = write!(out, "<td class=\"num\">{}</td>", count(v));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table></details>\n");
}

fn errors_section(out: &mut String, app: &App, ctx: &Ctx) -> Result<()> {
    let groups = app.queue.error_groups(5)?;
    out.push_str("<h2>Most common errors</h2>\n");
    if groups.is_empty() {
        out.push_str("<p class=\"empty\">No failing jobs.</p>\n");
        return Ok(());
    }
    out.push_str("<table class=\"grid\"><thead><tr><th class=\"num\">Jobs</th><th class=\"num\">Retrying</th><th class=\"num\">Dead</th><th>Types</th><th>Last seen</th><th>Error</th></tr></thead><tbody>\n");
    for g in &groups {
        let _ = writeln!(
            out,
            "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td><td class=\"error-cell\"><a href=\"/jobs{}\" title=\"{}\">{}</a></td></tr>",
            count(g.count),
            count(g.failed),
            count(g.dead),
            esc(&g.job_types.join(", ")),
            esc(&ago(g.last_seen_at, ctx.now)),
            esc(&query_string(&[group_field(&g.group)])),
            esc(&clip(&g.error, TITLE_CHARS)),
            esc(&clip(&g.headline, 120))
        );
    }
    out.push_str("</tbody></table>\n");
    Ok(())
}
