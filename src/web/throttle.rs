//! Slowing down token guessing. Wrong tokens (sign-in form or bearer header alike) count by
//! the client's network: an IPv4 address by its /24 and an IPv6 one by its /64, since
//! rotating through the addresses of one's own network is cheap. After [`MAX_FAILURES`]
//! from one network within [`FAILURE_WINDOW`], that network is locked out: every token it
//! sends, right or wrong, is answered 429 with `Retry-After` without being looked at, for
//! [`FIRST_LOCKOUT`], doubling with each lock-out up to [`MAX_LOCKOUT`].
//!
//! They also count all together: after [`MAX_GLOBAL_FAILURES`] within the window from any
//! networks, every client is locked out the same way, but for addresses that gave the right
//! token within the last [`KNOWN_FOR`] (so a guesser with many addresses does not lock out
//! the scripts and people who use the dashboard). Nothing sleeps: a locked-out request is
//! answered at once. Browsers already signed in are never locked out: only presenting a
//! token is.
//!
//! The tables are bounded ([`MAX_NETWORKS`], [`MAX_KNOWN`]); entries quiet for
//! [`FORGET_AFTER`] are dropped first. The log gets one line for the first failure after a
//! quiet spell and then at most one line per [`LOG_EVERY`] summing up the failures, and one
//! when everybody is locked out (see [`SignInLog`]), however many guesses come.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::server::peer;

/// Wrong tokens from one network, within [`FAILURE_WINDOW`], that start its lock-out.
pub(crate) const MAX_FAILURES: u32 = 5;
/// Wrong tokens from all networks, within [`FAILURE_WINDOW`], that lock everybody out.
pub(crate) const MAX_GLOBAL_FAILURES: u32 = 30;
/// The window the failures are counted in.
pub(crate) const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// The first lock-out; each further one doubles.
pub(crate) const FIRST_LOCKOUT: Duration = Duration::from_secs(30);
/// The longest lock-out.
pub(crate) const MAX_LOCKOUT: Duration = Duration::from_secs(15 * 60);
/// How long an address that gave the right token is spared a lock-out of everybody (a
/// session's lifetime).
pub(crate) const KNOWN_FOR: Duration = Duration::from_secs(12 * 3600);
/// Failed sign-ins after the first one are summed up in one log line this often at most.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(60);
/// A network without a failure for this long starts afresh.
const FORGET_AFTER: Duration = Duration::from_secs(3600);
/// Networks tracked at most.
const MAX_NETWORKS: usize = 4096;
/// Addresses that gave the right token, remembered at most.
const MAX_KNOWN: usize = 256;
/// Networks named in one summary line at most.
const NETWORKS_NAMED: usize = 3;
/// Networks counted in one summary at most (more show as "at least").
const NETWORKS_COUNTED: usize = 1024;
/// IPv4 bits a network keeps.
const V4_NETWORK_BITS: u32 = 24;

/// Failures and lock-outs of one network, or of all of them together.
#[derive(Debug, Clone, Copy)]
struct Record {
    /// Failures since `window_start`.
    failures: u32,
    window_start: Instant,
    last_failure: Instant,
    /// Lock-outs so far: the next one is `FIRST_LOCKOUT * 2^lockouts`.
    lockouts: u32,
    locked_until: Option<Instant>,
}

impl Record {
    fn new(now: Instant) -> Record {
        Record {
            failures: 0,
            window_start: now,
            last_failure: now,
            lockouts: 0,
            locked_until: None,
        }
    }

    /// Counts a failure at `now` against `max`; the lock-out it starts, if it starts one.
    /// Failures during a lock-out do not count (they are refused unseen).
    fn fail(&mut self, now: Instant, max: u32) -> Option<Duration> {
        if self.left(now).is_some() {
            return None;
        }
        if now.saturating_duration_since(self.last_failure) >= FORGET_AFTER {
            self.lockouts = 0;
        }
        if now.saturating_duration_since(self.window_start) >= FAILURE_WINDOW {
            self.failures = 0;
            self.window_start = now;
        }
        self.failures += 1;
        self.last_failure = now;
        if self.failures < max {
            return None;
        }
        let lockout = FIRST_LOCKOUT
            .saturating_mul(1 << self.lockouts.min(16))
            .min(MAX_LOCKOUT);
        self.lockouts = self.lockouts.saturating_add(1);
        self.failures = 0;
        self.window_start = now;
        self.locked_until = Some(now + lockout);
        Some(lockout)
    }

    fn left(&self, now: Instant) -> Option<Duration> {
        self.locked_until
            .map(|until| until.saturating_duration_since(now))
            .filter(|left| !left.is_zero())
    }
}

#[derive(Debug)]
struct State {
    networks: HashMap<IpAddr, Record>,
    global: Record,
    /// Addresses that gave the right token, and when they last did.
    known: HashMap<IpAddr, Instant>,
    log: SignInLog,
}

/// Failed sign-ins by client network, and all together.
#[derive(Debug)]
pub(crate) struct Throttle {
    state: Mutex<State>,
}

impl Default for Throttle {
    fn default() -> Self {
        let now = Instant::now();
        Throttle {
            state: Mutex::new(State {
                networks: HashMap::new(),
                global: Record::new(now),
                known: HashMap::new(),
                log: SignInLog::default(),
            }),
        }
    }
}

fn network(ip: IpAddr) -> IpAddr {
    peer::group(ip, V4_NETWORK_BITS)
}

impl Throttle {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How long `ip` is still locked out, if it is: by its network's lock-out, or by one of
    /// everybody unless it gave the right token lately.
    pub(crate) fn locked(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let state = self.state();
        let own = state.networks.get(&network(ip)).and_then(|r| r.left(now));
        let known = state
            .known
            .get(&ip)
            .is_some_and(|at| now.saturating_duration_since(*at) < KNOWN_FOR);
        let global = if known { None } else { state.global.left(now) };
        own.max(global)
    }

    /// Counts a wrong token from `ip` (`how`: "bearer token", "sign-in form"); the log lines
    /// it calls for, if any (see [`SignInLog`]).
    pub(crate) fn failed(&self, ip: IpAddr, now: Instant, how: &str) -> Vec<String> {
        let mut state = self.state();
        let key = network(ip);
        if !state.networks.contains_key(&key) && state.networks.len() >= MAX_NETWORKS {
            state.networks.retain(|_, r| {
                now.saturating_duration_since(r.last_failure) < FORGET_AFTER
                    || r.locked_until.is_some_and(|until| now < until)
            });
            if state.networks.len() >= MAX_NETWORKS {
                if let Some(quietest) = state
                    .networks
                    .iter()
                    .min_by_key(|(_, r)| r.last_failure)
                    .map(|(k, _)| *k)
                {
                    state.networks.remove(&quietest);
                }
            }
        }
        let own = state
            .networks
            .entry(key)
            .or_insert_with(|| Record::new(now))
            .fail(now, MAX_FAILURES);
        let global = state.global.fail(now, MAX_GLOBAL_FAILURES);
        state.log.failed(ip, key, how, own, global, now)
    }

    /// A right token from `ip`: its network's count starts afresh, and a lock-out of
    /// everybody spares it from now on.
    pub(crate) fn succeeded(&self, ip: IpAddr, now: Instant) {
        let mut state = self.state();
        state.networks.remove(&network(ip));
        if !state.known.contains_key(&ip) && state.known.len() >= MAX_KNOWN {
            if let Some(oldest) = state
                .known
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(k, _)| *k)
            {
                state.known.remove(&oldest);
            }
        }
        state.known.insert(ip, now);
    }

    /// The summary line that is due at `now`, if any: called now and then (the accept loop
    /// wakes every second), so the last failures of an attack are told soon after it ends.
    pub(crate) fn log_due(&self, now: Instant) -> Option<String> {
        self.state().log.due(now, false)
    }

    /// The summary of the failures not told yet, however recent (the dashboard stops).
    pub(crate) fn log_pending(&self, now: Instant) -> Option<String> {
        self.state().log.due(now, true)
    }
}

/// What the log says about failed sign-ins, bounded however many come: the first failure
/// after a quiet spell gets its own line at once; the ones after it are counted and summed
/// up in one line every [`LOG_EVERY`] while they go on; a lock-out of everybody gets its own
/// line (at most one per lock-out, each at least [`FIRST_LOCKOUT`] long).
#[derive(Debug, Default)]
pub(crate) struct SignInLog {
    /// When the current summing-up started; `None` after a quiet spell.
    since: Option<Instant>,
    failures: u64,
    lockouts: u64,
    /// Networks that failed since `since` (at most [`NETWORKS_COUNTED`]), and the first few.
    networks: HashSet<IpAddr>,
    named: Vec<IpAddr>,
}

impl SignInLog {
    fn failed(
        &mut self,
        ip: IpAddr,
        network: IpAddr,
        how: &str,
        own: Option<Duration>,
        global: Option<Duration>,
        now: Instant,
    ) -> Vec<String> {
        let mut lines: Vec<String> = self.due(now, false).into_iter().collect();
        if let Some(lockout) = global {
            lines.push(format!(
                "litejobs web: {MAX_GLOBAL_FAILURES} failed sign-ins within {}s from all \
                 addresses; every client is locked out for {}s, but for addresses that gave \
                 the right token lately",
                FAILURE_WINDOW.as_secs(),
                lockout.as_secs()
            ));
        }
        if self.since.is_none() {
            self.since = Some(now);
            let locked = own.map_or_else(String::new, |lockout| {
                format!(
                    "; too many, so {} is locked out for {}s",
                    peer::shown(network, V4_NETWORK_BITS),
                    lockout.as_secs()
                )
            });
            lines.push(format!(
                "litejobs web: failed sign-in ({how}) from {ip}{locked} (further failed \
                 sign-ins are summed up every {}s)",
                LOG_EVERY.as_secs()
            ));
            return lines;
        }
        self.failures += 1;
        self.lockouts += u64::from(own.is_some());
        if self.networks.len() < NETWORKS_COUNTED {
            self.networks.insert(network);
        }
        if self.named.len() < NETWORKS_NAMED && !self.named.contains(&network) {
            self.named.push(network);
        }
        lines
    }

    /// The summary of the failures since the last line, once [`LOG_EVERY`] has passed (or
    /// at once, when `now_anyway`).
    fn due(&mut self, now: Instant, now_anyway: bool) -> Option<String> {
        let since = self.since?;
        let spell = now.saturating_duration_since(since);
        if spell < LOG_EVERY && !(now_anyway && self.failures > 0) {
            return None;
        }
        if self.failures == 0 {
            // Quiet for a whole spell: the next failure gets its own line again.
            self.since = None;
            return None;
        }
        let networks = self.networks.len();
        let named: Vec<String> = self
            .named
            .iter()
            .map(|n| peer::shown(*n, V4_NETWORK_BITS))
            .collect();
        let line = format!(
            "litejobs web: {} more failed sign-in(s) in the last {}s from {}{} network(s) \
             ({}{}); {} network lock-out(s) started",
            self.failures,
            spell.as_secs().max(1),
            if networks >= NETWORKS_COUNTED {
                "at least "
            } else {
                ""
            },
            networks,
            named.join(", "),
            if networks > named.len() { ", ..." } else { "" },
            self.lockouts
        );
        *self = SignInLog {
            since: Some(now),
            ..SignInLog::default()
        };
        Some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 2));

    /// Fails MAX_FAILURES times at `at`; the network lock-out that starts.
    fn fail_burst(t: &Throttle, ip: IpAddr, at: Instant) -> Option<Duration> {
        let mut started = None;
        for i in 0..MAX_FAILURES {
            t.failed(ip, at, "test");
            started = t.locked(ip, at);
            assert_eq!(
                started.is_some(),
                i + 1 == MAX_FAILURES,
                "failure {i} starts a lock-out only when it is the last"
            );
        }
        started
    }

    #[test]
    fn lockouts_start_after_five_failures_and_grow() {
        let t = Throttle::default();
        let mut now = Instant::now();
        assert_eq!(t.locked(A, now), None);
        let mut expected = FIRST_LOCKOUT;
        for _ in 0..8 {
            assert_eq!(fail_burst(&t, A, now), Some(expected));
            assert_eq!(t.locked(A, now), Some(expected));
            assert_eq!(t.locked(B, now), None, "other networks are not affected");
            now += expected;
            assert_eq!(t.locked(A, now), None, "the lock-out ends");
            expected = (expected * 2).min(MAX_LOCKOUT);
        }
        assert_eq!(expected, MAX_LOCKOUT, "capped");
        // A quiet hour forgives the past lock-outs; a right token does at once.
        now += FORGET_AFTER;
        assert_eq!(fail_burst(&t, A, now), Some(FIRST_LOCKOUT));
        t.succeeded(A, now);
        assert_eq!(t.locked(A, now), None);
    }

    #[test]
    fn failures_count_within_a_minute_only() {
        let t = Throttle::default();
        let mut now = Instant::now();
        for _ in 0..20 {
            for _ in 0..MAX_FAILURES - 1 {
                t.failed(A, now, "test");
            }
            assert_eq!(t.locked(A, now), None);
            now += FAILURE_WINDOW;
        }
    }

    #[test]
    fn ipv4_clients_count_by_their_24_and_ipv6_by_their_64() {
        let t = Throttle::default();
        let now = Instant::now();
        for i in 0..MAX_FAILURES {
            t.failed(
                IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1 + i as u8)),
                now,
                "test",
            );
        }
        assert!(t
            .locked(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 200)), now)
            .is_some());
        assert_eq!(t.locked(IpAddr::V4(Ipv4Addr::new(127, 0, 1, 1)), now), None);
        let v6 = |text: &str| text.parse().unwrap_or(IpAddr::V6(Ipv6Addr::LOCALHOST));
        for i in 0..MAX_FAILURES {
            t.failed(v6(&format!("2001:db8:1:2::{}", i + 1)), now, "test");
        }
        assert!(t.locked(v6("2001:db8:1:2:ffff::1"), now).is_some());
        assert_eq!(t.locked(v6("2001:db8:1:3::1"), now), None);
    }

    #[test]
    fn guesses_from_many_networks_lock_out_everybody_but_known_addresses() {
        let t = Throttle::default();
        let now = Instant::now();
        let known = IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9));
        t.succeeded(known, now);
        // One guess from each of many networks: no network reaches its own limit.
        for i in 0..MAX_GLOBAL_FAILURES {
            let ip = IpAddr::V4(Ipv4Addr::new(127, (i / 256) as u8, (i % 256) as u8, 1));
            assert_eq!(t.locked(ip, now), None, "guess {i} is looked at");
            t.failed(ip, now, "test");
        }
        let fresh = IpAddr::V4(Ipv4Addr::new(127, 200, 0, 1));
        assert_eq!(t.locked(fresh, now), Some(FIRST_LOCKOUT));
        assert_eq!(
            t.locked(known, now),
            None,
            "an address that signed in lately"
        );
        assert_eq!(t.locked(fresh, now + FIRST_LOCKOUT), None, "it ends");
    }

    #[test]
    fn the_log_gets_a_bounded_number_of_lines_however_many_guesses_come() {
        let t = Throttle::default();
        let start = Instant::now();
        let mut lines = Vec::new();
        // 2 000 guesses a second for two minutes, each from another address of 127/8,
        // ignoring lock-outs (the worst case: every one is counted and may log).
        for i in 0..240_000u32 {
            let now = start + Duration::from_micros(500 * u64::from(i));
            let ip = IpAddr::V4(Ipv4Addr::from(0x7f00_0000 | (i % 0x00ff_ffff)));
            lines.extend(t.failed(ip, now, "bearer token"));
            if i % 2000 == 0 {
                lines.extend(t.log_due(now));
            }
        }
        lines.extend(t.log_due(start + Duration::from_secs(200)));
        // The first failure, the summaries (one a minute), the lock-outs of everybody (each
        // at least 30 s, doubling).
        assert!(lines.len() <= 12, "{} lines: {lines:#?}", lines.len());
        assert!(lines[0].contains("failed sign-in (bearer token) from 127.0.0.0"));
        let summed: u64 = lines
            .iter()
            .filter_map(|l| l.strip_prefix("litejobs web: "))
            .filter_map(|l| l.split(" more failed").next()?.parse::<u64>().ok())
            .sum();
        assert_eq!(summed, 240_000 - 1, "every failure is counted in a summary");
        // Quiet now: the next failure gets its own line at once.
        let later = start + Duration::from_secs(400);
        assert_eq!(t.log_due(later), None);
        let next = t.failed(A, later, "sign-in form");
        assert!(
            next.iter()
                .any(|l| l.contains("failed sign-in (sign-in form) from 192.0.2.1")),
            "{next:?}"
        );
    }
}
