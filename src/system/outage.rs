//! A database server that cannot be reached, as the rest of the crate sees it: how long to
//! wait before the next try ([`Backoff`]), and what the log says ([`Outage`]): one warning
//! when an outage starts, one line when the server is back, and nothing per try in between,
//! however many threads and connections (the pool, a worker's `LISTEN` connection) keep
//! trying.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Waits between tries of something that keeps failing: `first`, doubling, up to `cap`.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    first: Duration,
    cap: Duration,
    next: Duration,
}

impl Backoff {
    /// A back-off that starts at `first` and doubles up to `cap`.
    pub(crate) fn new(first: Duration, cap: Duration) -> Backoff {
        Backoff {
            first,
            cap,
            next: first,
        }
    }

    /// Another failure: how long to wait before the next try.
    pub(crate) fn failed(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(self.cap);
        wait
    }

    /// A try went through: the next failure waits `first` again.
    pub(crate) fn succeeded(&mut self) {
        self.next = self.first;
    }
}

/// How often a warning repeats while an outage goes on, so a worker that has been cut off
/// for hours still says so now and then.
const REMIND_EVERY: Duration = Duration::from_secs(300);

/// The outages of one database server, shared by every connection to it in this process.
#[derive(Debug)]
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) struct Outage {
    /// The server as messages name it (no password).
    server: String,
    /// Fast path for the many successful calls: nothing to report while false.
    down: AtomicBool,
    /// Bumped when an outage starts: connections made before it may be dead.
    generation: AtomicU64,
    state: Mutex<Option<Down>>,
}

#[derive(Debug)]
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
struct Down {
    since: Instant,
    /// The latest failure's first line.
    cause: String,
    /// When the last warning was logged.
    warned_at: Instant,
    /// Whether "no connection slot" was said in this outage.
    said_no_slot: bool,
    /// Spaces the tries of new connections ([`Outage::may_try`]).
    backoff: Backoff,
    next_try: Instant,
}

/// The first wait between two tries to connect during an outage, and the longest.
pub(crate) const RETRY_FIRST: Duration = Duration::from_millis(100);
pub(crate) const RETRY_CAP: Duration = Duration::from_secs(2);

#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
impl Outage {
    /// No outage yet, of the server `server` names (without a password).
    pub(crate) fn new(server: impl Into<String>) -> Outage {
        Outage {
            server: server.into(),
            down: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            state: Mutex::new(None),
        }
    }

    /// The server as messages name it.
    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    /// True from a failed try until one goes through.
    pub(crate) fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }

    /// Counts the outages begun: a connection made in an earlier generation may have been
    /// cut by the latest one.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// A try failed because the server could not be reached or had no connection slot.
    /// The first failure of an outage is logged as a warning (and a missing connection slot
    /// once more, when that becomes the cause); later ones only every few minutes.
    pub(crate) fn failed(&self, error: &str) {
        let now = Instant::now();
        let error = first_line(error);
        let no_slot = is_no_slot(error);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match state.as_mut() {
            None => {
                self.generation.fetch_add(1, Ordering::AcqRel);
                self.down.store(true, Ordering::Release);
                let mut backoff = Backoff::new(RETRY_FIRST, RETRY_CAP);
                *state = Some(Down {
                    since: now,
                    cause: error.to_string(),
                    warned_at: now,
                    said_no_slot: no_slot,
                    next_try: now + backoff.failed(),
                    backoff,
                });
                log::warn!("litejobs: {}", self.describe(error, no_slot, None));
            }
            Some(down) => {
                down.cause = error.to_string();
                let remind = now.duration_since(down.warned_at) >= REMIND_EVERY;
                if (no_slot && !down.said_no_slot) || remind {
                    down.warned_at = now;
                    down.said_no_slot |= no_slot;
                    let since = now.duration_since(down.since);
                    log::warn!("litejobs: {}", self.describe(error, no_slot, Some(since)));
                }
            }
        }
    }

    /// Whether a new connection may be tried now: always while the server is up; during an
    /// outage once per back-off (100 ms doubling to 2 s), however many threads ask.
    pub(crate) fn may_try(&self) -> bool {
        if !self.is_down() {
            return true;
        }
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match state.as_mut() {
            Some(down) if now < down.next_try => false,
            Some(down) => {
                down.next_try = now + down.backoff.failed();
                true
            }
            None => true,
        }
    }

    /// Why the server cannot be reached, as its latest failure said (empty when it can).
    pub(crate) fn cause(&self) -> String {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state
            .as_ref()
            .map_or(String::new(), |down| down.cause.clone())
    }

    /// A try went through: if an outage was on, it ends, and the log says after how long.
    pub(crate) fn recovered(&self) {
        if !self.is_down() {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(down) = state.take() {
            self.down.store(false, Ordering::Release);
            log::info!(
                "litejobs: connection to {} back after {:.1} s",
                self.server,
                down.since.elapsed().as_secs_f64()
            );
        }
    }

    /// The warning for a failure: the outage began (`since` is `None`), or goes on.
    fn describe(&self, error: &str, no_slot: bool, since: Option<Duration>) -> String {
        let server = &self.server;
        match (no_slot, since) {
            (true, _) => format!(
                "{server} has no connection slot for this process: its max_connections (or a \
                 connection limit of the role or database) is reached ({error}); retrying with \
                 back-off, quietly until one is free"
            ),
            (false, None) => format!(
                "lost the connection to {server} ({error}); retrying with back-off, quietly \
                 until it is back"
            ),
            (false, Some(since)) => format!(
                "still no connection to {server} after {:.0} s ({error}); retrying with back-off",
                since.as_secs_f64()
            ),
        }
    }
}

/// The first line of a (libpq: often multi-line) error, trimmed, without the prefix the
/// crate's own errors have.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
fn first_line(error: &str) -> &str {
    let line = error.lines().map(str::trim).find(|l| !l.is_empty());
    line.unwrap_or("").trim_start_matches("PostgreSQL: ")
}

/// True for PostgreSQL's refusals for want of a connection slot: `max_connections`
/// ("sorry, too many clients already", "remaining connection slots are reserved …") and the
/// per-role and per-database connection limits ("too many connections for role …").
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn is_no_slot(error: &str) -> bool {
    error.contains("too many clients")
        || error.contains("too many connections")
        || error.contains("connection slots are reserved")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_back_off_doubles_up_to_its_cap_and_starts_over_after_a_success() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(2000));
        let waits: Vec<_> = (0..7).map(|_| b.failed()).collect();
        assert_eq!(
            waits,
            [
                ms(100),
                ms(200),
                ms(400),
                ms(800),
                ms(1600),
                ms(2000),
                ms(2000)
            ]
        );
        b.succeeded();
        assert_eq!(b.failed(), ms(100));
    }

    #[test]
    fn an_outage_counts_generations_and_ends_once() {
        let outage = Outage::new("postgres://app@db/jobs");
        assert!(!outage.is_down());
        outage.failed("connection refused\n\tIs the server running?");
        outage.failed("connection refused");
        assert!(outage.is_down());
        assert_eq!(outage.generation(), 1);
        outage.recovered();
        outage.recovered();
        assert!(!outage.is_down());
        outage.failed("server closed the connection unexpectedly");
        assert_eq!(outage.generation(), 2);
    }

    #[test]
    fn refusals_for_want_of_a_slot_are_told_apart() {
        assert!(is_no_slot("FATAL:  sorry, too many clients already"));
        assert!(is_no_slot(
            "FATAL:  remaining connection slots are reserved for non-replication superuser connections"
        ));
        assert!(is_no_slot("FATAL:  too many connections for role \"app\""));
        assert!(!is_no_slot("Connection refused"));
        assert_eq!(first_line("\n  a\n\tb"), "a");
    }
}
