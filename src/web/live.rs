//! The overview's changing figures ([`Live`]), and the last reading of them that every
//! polling browser shares for a moment ([`LiveCache`], kept in the dashboard's state).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

/// The last reading of the live figures.
#[derive(Debug, Default)]
pub(crate) struct LiveCache {
    /// When it was taken, how long reading took, what was read.
    pub(crate) taken: Option<(Instant, Duration, Live)>,
}

/// The overview's changing figures, as displayed, by `data-key`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Live {
    /// When they were read (ms, queue clock).
    pub(crate) at_ms: i64,
    /// Queues and their paused switches: when it changes, the page reloads (rows and buttons
    /// change, not just numbers).
    pub(crate) shape: String,
    /// Display text by key.
    pub(crate) values: BTreeMap<String, String>,
    /// When the browser should ask again (ms from now).
    pub(crate) next_poll_ms: i64,
}
