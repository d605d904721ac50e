//! Every default litejobs uses, by name, in one place: each is defined beside the code it
//! configures and re-exported here (the list below shows where), and each option's
//! documentation says which of these it defaults to. The values are part of the documented
//! behaviour. A few fixed bounds that no option changes are here too, because users meet
//! them as often as the defaults: [`MAX_ERROR_BYTES`], [`MIN_PERIODIC_INTERVAL`],
//! [`MAX_ACTIVITY_BUCKETS`].
//!
//! The defaults of a Cargo feature are here when it is on: the webhook's, the email's, the
//! command handlers', the dashboard's. The built-in kinds' retry schedules are functions,
//! `builtin::webhook::default_retry_policy` and `builtin::email::default_retry_policy`.
//!
//! ```
//! use litejobs::defaults;
//! assert_eq!(defaults::DEFAULT_QUEUE, "default");
//! assert_eq!(defaults::DEFAULT_MAX_ATTEMPTS, 6);
//! ```

// Jobs and their retries.
pub use crate::handler::MAX_ERROR_BYTES;
pub use crate::job::{
    DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_QUEUE, DEFAULT_RETRY_BASE,
    DEFAULT_RETRY_JITTER, DEFAULT_RETRY_MAX_DELAY,
};

// The queue, its reads.
pub use crate::queue::reads::{DEFAULT_HEALTH_WINDOW, MAX_ACTIVITY_BUCKETS};
pub use crate::queue::{DEFAULT_BUSY_TIMEOUT, DEFAULT_IDEMPOTENCY_WINDOW, DEFAULT_POOL_SIZE};
pub use crate::storage::reads::DEFAULT_LIST_LIMIT;

// Workers, and the maintenance they run.
pub use crate::worker::maintenance::periodic::MIN_PERIODIC_INTERVAL;
pub use crate::worker::maintenance::pruner::{
    DEFAULT_PRUNE_CHUNK, DEFAULT_PRUNE_INTERVAL, DEFAULT_RETENTION,
};
pub use crate::worker::maintenance::reaper::DEFAULT_REAP_INTERVAL;
pub use crate::worker::{
    DEFAULT_CHANGE_CHECK_INTERVAL, DEFAULT_CONCURRENCY, DEFAULT_JOB_TIMEOUT, DEFAULT_LEASE_GRACE,
    DEFAULT_POLL_INTERVAL, DEFAULT_PREFETCH, DEFAULT_PREFETCH_ON_SERVER, DEFAULT_SHUTDOWN_GRACE,
};

// Rate limits and circuit breakers, masking, reports.
pub use crate::builtin::report::{DEFAULT_CHUNK_TIMEOUT, DEFAULT_REPORT_CONCURRENCY};
pub use crate::limits::{
    DEFAULT_BREAKER_COOL_DOWN, DEFAULT_BREAKER_FAILURES, DEFAULT_BREAKER_PROBE_TIMEOUT,
};
pub use crate::redact::DEFAULT_SECRET_FIELDS;

// Webhook delivery (feature `webhook`).
#[cfg(feature = "webhook")]
pub use crate::builtin::webhook::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_RETRY_AFTER, DEFAULT_TOLERANCE, DEFAULT_WEBHOOK_TIMEOUT,
};

// Email (feature `email`).
#[cfg(feature = "email")]
pub use crate::builtin::email::{DEFAULT_EMAIL_TIMEOUT, DEFAULT_SMTP_TIMEOUT};

// Command handlers (feature `exec`, Unix).
#[cfg(all(unix, feature = "exec"))]
pub use crate::exec::{DEFAULT_KILL_GRACE, DEFAULT_SNOOZE};

// The dashboard (feature `web`).
#[cfg(feature = "web")]
pub use crate::web::{
    DEFAULT_ADDR, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_CLIENT, DEFAULT_THREADS, DEFAULT_TIMEOUT,
};
