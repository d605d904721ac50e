//! The guides of `docs/`, one module per guide, so that they read on docs.rs and their Rust
//! examples run as doc tests (`cargo test --doc`).
//!
//! - [Jobs and handlers](jobs): the API, payloads, typed jobs, outcomes, statuses, rate limits
//!   and circuit breakers, testing.
//! - [Webhooks](webhooks): delivery, signatures, answers, the breaker, the SSRF guard, the
//!   sidecar, `litejobs webhook`.
//! - [Email](email): the SMTP and development mailers, sending once, the SMTP URL.
//! - [Reports in chunks](reports): `ReportKind`, progress, the finishing job.
//! - [Workflows and batches](workflows): jobs that wait for other jobs, fan-out and fan-in,
//!   callbacks, failures and requeues, held jobs.
//! - [Periodic jobs](periodic): cron and intervals, once per slot, missed slots; schedules
//!   kept in the database for every `litejobs work`.
//! - [Jobs in any language](any_language): `--exec` and `--serve` command handlers.
//! - [The `--serve` protocol](serve_protocol), for implementers.
//! - [The schema, for other languages](schema): plain SQL for SQLite and PostgreSQL.
//! - [Encrypted payloads](encryption): keys, marking jobs and types, rotation, what stays in
//!   clear, the threat model.
//! - [Operating litejobs](operating): the command line, `check`, metrics, retention, the
//!   dead letter.
//! - [The web dashboard](dashboard): pages, security model, limits, routes.
//! - [Running on PostgreSQL](postgres): moving, outages and failover, what differs.
//! - [Guarantees and limits](guarantees), and the tests behind them.
//! - [Benchmarks](benchmarks) and how to reproduce them.
//! - [Development](development): running the tests, the layout.
//!
//! A guide whose examples need a Cargo feature is shown only when the feature is on.

// Links between guides are reference links labelled with the target file (`[text][schema.md]`,
// `[text][schema.md#anchor]`), each guide defining its labels at its end for GitHub. A
// definition given first wins, so these, put before each guide, point the same labels at the
// guides' modules here. tests/docs.rs checks that every label a guide defines is here.
macro_rules! guide_links {
    () => {
        "[any-language.md]: crate::guide::any_language\n\
         [benchmarks.md]: crate::guide::benchmarks\n\
         [benchmarks.md#command-handlers]: crate::guide::benchmarks#command-handlers\n\
         [benchmarks.md#postgresql]: crate::guide::benchmarks#postgresql\n\
         [benchmarks.md#urgent-jobs-under-a-flood]: crate::guide::benchmarks#urgent-jobs-under-a-flood\n\
         [jobs.md#urgent-jobs-beside-a-big-backlog]: crate::guide::jobs#urgent-jobs-beside-a-big-backlog\n\
         [dashboard.md]: crate::guide::dashboard\n\
         [dashboard.md#seeing-workflows]: crate::guide::dashboard#seeing-workflows\n\
         [benchmarks.md#waits-on-postgresql]: crate::guide::benchmarks#waits-on-postgresql\n\
         [encryption.md]: crate::guide::encryption\n\
         [development.md#tests-on-postgresql]: crate::guide::development#tests-on-postgresql\n\
         [guarantees.md#prefetch]: crate::guide::guarantees#prefetch\n\
         [jobs.md]: crate::guide::jobs\n\
         [jobs.md#deadlines]: crate::guide::jobs#deadlines\n\
         [jobs.md#rate-limits-and-circuit-breakers]: crate::guide::jobs#rate-limits-and-circuit-breakers\n\
         [jobs.md#when-a-running-job-is-cancelled]: crate::guide::jobs#when-a-running-job-is-cancelled\n\
         [operating.md#how-errors-group]: crate::guide::operating#how-errors-group\n\
         [operating.md#a-live-view-in-the-terminal-litejobs-top]: crate::guide::operating#a-live-view-in-the-terminal-litejobs-top\n\
         [operating.md#secrets-are-masked]: crate::guide::operating#secrets-are-masked\n\
         [operating.md#workflows-and-batches]: crate::guide::operating#workflows-and-batches\n\
         [periodic.md]: crate::guide::periodic\n\
         [periodic.md#schedules-kept-in-the-database]: crate::guide::periodic#schedules-kept-in-the-database\n\
         [postgres.md]: crate::guide::postgres\n\
         [reports.md]: crate::guide::reports\n\
         [schema.md]: crate::guide::schema\n\
         [schema.md#deadlines-expires_at]: crate::guide::schema#deadlines-expires_at\n\
         [schema.md#dedupe-needs-idempotency_key]: crate::guide::schema#dedupe-needs-idempotency_key\n\
         [schema.md#encrypted-payloads]: crate::guide::schema#encrypted-payloads\n\
         [schema.md#ids-are-never-reused]: crate::guide::schema#ids-are-never-reused\n\
         [schema.md#jobs-that-wait-for-other-jobs]: crate::guide::schema#jobs-that-wait-for-other-jobs\n\
         [schema.md#postgresql]: crate::guide::schema#postgresql\n\
         [serve-protocol.md]: crate::guide::serve_protocol\n\
         [serve-protocol.md#a-cancelled-job-one-line-in-the-jobs-answer-out]: crate::guide::serve_protocol#a-cancelled-job-one-line-in-the-jobs-answer-out\n\
         [webhooks.md#circuit-breaker-and-rate-limit]: crate::guide::webhooks#circuit-breaker-and-rate-limit\n\
         [webhooks.md#webhook-endpoints-from-the-command-line]: crate::guide::webhooks#webhook-endpoints-from-the-command-line\n\
         [workflows.md]: crate::guide::workflows\n\n"
    };
}

/// One guide module: `guide!(name, "file.md")`, or with the feature its examples need.
macro_rules! guide {
    ($name:ident, $file:literal) => {
        #[doc = concat!(guide_links!(), include_str!(concat!("../docs/", $file)))]
        pub mod $name {}
    };
    ($name:ident, $file:literal, $($feature:meta),+) => {
        #[cfg_attr(all($($feature),+), doc = concat!(guide_links!(), include_str!(concat!("../docs/", $file))))]
        #[cfg_attr(
            not(all($($feature),+)),
            doc = concat!("`docs/", $file, "`: shown when the Cargo feature its examples need is on.")
        )]
        pub mod $name {}
    };
}

guide!(jobs, "jobs.md");
guide!(webhooks, "webhooks.md", feature = "webhook");
guide!(email, "email.md", feature = "email");
guide!(reports, "reports.md");
guide!(workflows, "workflows.md");
guide!(periodic, "periodic.md");
guide!(any_language, "any-language.md", unix, feature = "exec");
guide!(serve_protocol, "serve-protocol.md");
guide!(schema, "schema.md");
guide!(encryption, "encryption.md", feature = "encryption");
guide!(operating, "operating.md");
guide!(dashboard, "dashboard.md", feature = "web");
guide!(postgres, "postgres.md");
guide!(guarantees, "guarantees.md");
guide!(benchmarks, "benchmarks.md");
guide!(development, "development.md");
