//! Every default litejobs uses, by name, in one place. Each option's documentation says which
//! of these it defaults to; the values are part of the documented behaviour.
//!
//! ```
//! use litejobs::defaults;
//! assert_eq!(defaults::DEFAULT_QUEUE, "default");
//! assert_eq!(defaults::DEFAULT_MAX_ATTEMPTS, 6);
//! ```

pub use crate::handler::MAX_ERROR_BYTES;
pub use crate::job::{DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_QUEUE};
pub use crate::job::{DEFAULT_RETRY_BASE, DEFAULT_RETRY_JITTER, DEFAULT_RETRY_MAX_DELAY};
pub use crate::maintenance::pruner::{
    DEFAULT_PRUNE_CHUNK, DEFAULT_PRUNE_INTERVAL, DEFAULT_RETENTION,
};
pub use crate::maintenance::reaper::DEFAULT_REAP_INTERVAL;
pub use crate::maintenance::scheduler::MIN_PERIODIC_INTERVAL;
pub use crate::queue::reads::{DEFAULT_HEALTH_WINDOW, MAX_ACTIVITY_BUCKETS};
pub use crate::queue::{DEFAULT_BUSY_TIMEOUT, DEFAULT_IDEMPOTENCY_WINDOW, DEFAULT_POOL_SIZE};
pub use crate::storage::reads::DEFAULT_LIST_LIMIT;
pub use crate::worker::{
    DEFAULT_CHANGE_CHECK_INTERVAL, DEFAULT_CONCURRENCY, DEFAULT_JOB_TIMEOUT, DEFAULT_LEASE_GRACE,
    DEFAULT_POLL_INTERVAL, DEFAULT_PREFETCH, DEFAULT_PREFETCH_SERVER, DEFAULT_SHUTDOWN_GRACE,
};
