//! Slowing down token guessing: after [`MAX_FAILURES`] wrong tokens from one address within
//! [`FAILURE_WINDOW`] (sign-in form or bearer header alike), that address is locked out:
//! every token it sends, right or wrong, is answered 429 with `Retry-After` without being
//! looked at, for [`FIRST_LOCKOUT`], doubling with each lock-out up to [`MAX_LOCKOUT`].
//! Nothing sleeps: a locked-out request is answered at once.
//!
//! IPv6 clients are counted by their /64, which one host usually has whole. The table is
//! bounded ([`MAX_ADDRESSES`]); addresses quiet for [`FORGET_AFTER`] are dropped first.
//! Browsers already signed in are never locked out: only presenting a token is.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Wrong tokens from one address, within [`FAILURE_WINDOW`], that start a lock-out.
pub(crate) const MAX_FAILURES: u32 = 5;
/// The window the failures are counted in.
pub(crate) const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// The first lock-out; each further one doubles.
pub(crate) const FIRST_LOCKOUT: Duration = Duration::from_secs(30);
/// The longest lock-out.
pub(crate) const MAX_LOCKOUT: Duration = Duration::from_secs(15 * 60);
/// An address without a failure for this long starts afresh.
const FORGET_AFTER: Duration = Duration::from_secs(3600);
/// Addresses tracked at most.
const MAX_ADDRESSES: usize = 4096;

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

/// Failed sign-ins by client address.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    table: Mutex<HashMap<IpAddr, Record>>,
}

/// The key an address is counted under: IPv4 as it is, IPv6 by its /64.
fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
        v4 => v4,
    }
}

impl Throttle {
    /// How long `ip` is still locked out, if it is.
    pub(crate) fn locked(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        table
            .get(&client_key(ip))
            .and_then(|r| r.locked_until)
            .map(|until| until.saturating_duration_since(now))
            .filter(|left| !left.is_zero())
    }

    /// Counts a wrong token from `ip`; the lock-out it starts, if it starts one.
    pub(crate) fn failed(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let key = client_key(ip);
        if !table.contains_key(&key) && table.len() >= MAX_ADDRESSES {
            table.retain(|_, r| {
                now.saturating_duration_since(r.last_failure) < FORGET_AFTER
                    || r.locked_until.is_some_and(|until| now < until)
            });
            if table.len() >= MAX_ADDRESSES {
                if let Some(quietest) = table
                    .iter()
                    .min_by_key(|(_, r)| r.last_failure)
                    .map(|(k, _)| *k)
                {
                    table.remove(&quietest);
                }
            }
        }
        let record = table.entry(key).or_insert(Record {
            failures: 0,
            window_start: now,
            last_failure: now,
            lockouts: 0,
            locked_until: None,
        });
        if now.saturating_duration_since(record.last_failure) >= FORGET_AFTER {
            record.lockouts = 0;
        }
        if now.saturating_duration_since(record.window_start) >= FAILURE_WINDOW {
            record.failures = 0;
            record.window_start = now;
        }
        record.failures += 1;
        record.last_failure = now;
        if record.failures < MAX_FAILURES {
            return None;
        }
        let lockout = FIRST_LOCKOUT
            .saturating_mul(1 << record.lockouts.min(16))
            .min(MAX_LOCKOUT);
        record.lockouts = record.lockouts.saturating_add(1);
        record.failures = 0;
        record.window_start = now;
        record.locked_until = Some(now + lockout);
        Some(lockout)
    }

    /// A right token from `ip`: its count starts afresh.
    pub(crate) fn succeeded(&self, ip: IpAddr) {
        self.table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&client_key(ip));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 2));

    /// Fails MAX_FAILURES times at `at`; the lock-out that starts.
    fn fail_burst(t: &Throttle, ip: IpAddr, at: Instant) -> Option<Duration> {
        let mut started = None;
        for i in 0..MAX_FAILURES {
            started = t.failed(ip, at);
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
            assert_eq!(t.locked(B, now), None, "other addresses are not affected");
            now += expected;
            assert_eq!(t.locked(A, now), None, "the lock-out ends");
            expected = (expected * 2).min(MAX_LOCKOUT);
        }
        assert_eq!(expected, MAX_LOCKOUT, "capped");
        // A quiet hour forgives the past lock-outs; a right token does at once.
        now += FORGET_AFTER;
        assert_eq!(fail_burst(&t, A, now), Some(FIRST_LOCKOUT));
        t.succeeded(A);
        assert_eq!(t.locked(A, now), None);
    }

    #[test]
    fn failures_count_within_a_minute_only() {
        let t = Throttle::default();
        let mut now = Instant::now();
        for _ in 0..20 {
            for _ in 0..MAX_FAILURES - 1 {
                assert_eq!(t.failed(A, now), None);
            }
            now += FAILURE_WINDOW;
        }
        assert_eq!(t.locked(A, now), None);
    }

    #[test]
    fn ipv6_clients_count_by_their_64() {
        let t = Throttle::default();
        let now = Instant::now();
        for i in 0..MAX_FAILURES {
            let ip: IpAddr = format!("2001:db8:1:2::{}", i + 1)
                .parse()
                .unwrap_or(IpAddr::V6(Ipv6Addr::LOCALHOST));
            t.failed(ip, now);
        }
        let neighbour: IpAddr = "2001:db8:1:2:ffff::1"
            .parse()
            .unwrap_or(IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert!(t.locked(neighbour, now).is_some());
        let elsewhere: IpAddr = "2001:db8:1:3::1"
            .parse()
            .unwrap_or(IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert_eq!(t.locked(elsewhere, now), None);
    }
}
