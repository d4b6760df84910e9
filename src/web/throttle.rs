//! Slowing down password guessing: after [`FREE_FAILURES`] failed logins from one address, that
//! address is refused with 429 for a while before its credentials are even looked at, for twice as long
//! after each further failure ([`lockout`]). A success forgets the address's failures; so does
//! [`FORGET_AFTER`] without one.
//!
//! Addresses are what the connection came from ([`axum::extract::ConnectInfo`]): behind a reverse
//! proxy every client shares the proxy's, so one guesser slows everyone down (forwarded-for headers are
//! not trusted: any client can write them). IPv6 addresses count by their /64, the block one machine
//! normally holds. A request without a client address (a router served by something that does not
//! insert `ConnectInfo`) is logged but not counted: one shared count would let anyone lock everyone out.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed logins let through before the first lockout: room for a few typos.
pub(super) const FREE_FAILURES: u32 = 5;
/// The first lockout; each further failure doubles it.
const FIRST_LOCKOUT: Duration = Duration::from_secs(5);
/// The longest lockout: about four guesses an hour.
const MAX_LOCKOUT: Duration = Duration::from_secs(15 * 60);
/// An address's failures are forgotten this long after its last one.
const FORGET_AFTER: Duration = Duration::from_secs(30 * 60);
/// Most addresses remembered: a bound on memory when many addresses fail (the oldest go first).
const MAX_TRACKED: usize = 10_000;

/// How long an address is refused after its `failures`-th failure in a row, if at all.
pub(super) fn lockout(failures: u32) -> Option<Duration> {
    let beyond = failures.checked_sub(FREE_FAILURES)?;
    Some(
        FIRST_LOCKOUT
            .saturating_mul(1u32.checked_shl(beyond).unwrap_or(u32::MAX))
            .min(MAX_LOCKOUT),
    )
}

/// One address's failed logins.
#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last: Instant,
    locked_until: Option<Instant>,
}

/// Failed logins by address.
#[derive(Debug, Default)]
pub(super) struct LoginThrottle {
    by_address: Mutex<HashMap<IpAddr, Failures>>,
}

impl LoginThrottle {
    /// How much longer `ip` is refused, if it is.
    pub(super) fn locked(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let map = crate::sync::lock(&self.by_address);
        map.get(&key(ip))
            .and_then(|f| f.locked_until)
            .and_then(|until| until.checked_duration_since(now))
            .filter(|left| !left.is_zero())
    }

    /// Counts a failed login from `ip`: the address's failures in a row, and the lockout it starts.
    pub(super) fn failed(&self, ip: IpAddr, now: Instant) -> (u32, Option<Duration>) {
        let mut map = crate::sync::lock(&self.by_address);
        let k = key(ip);
        if !map.contains_key(&k) && map.len() >= MAX_TRACKED {
            map.retain(|_, f| now.saturating_duration_since(f.last) < FORGET_AFTER);
            if map.len() >= MAX_TRACKED
                && let Some(oldest) = map.iter().min_by_key(|(_, f)| f.last).map(|(k, _)| *k)
            {
                map.remove(&oldest);
            }
        }
        let f = map.entry(k).or_insert(Failures {
            count: 0,
            last: now,
            locked_until: None,
        });
        if now.saturating_duration_since(f.last) >= FORGET_AFTER {
            f.count = 0;
        }
        f.count = f.count.saturating_add(1);
        f.last = now;
        let lock = lockout(f.count);
        f.locked_until = lock.map(|d| now + d);
        (f.count, lock)
    }

    /// A login from `ip` succeeded: its failures are forgotten.
    pub(super) fn succeeded(&self, ip: IpAddr) {
        let mut map = crate::sync::lock(&self.by_address);
        if !map.is_empty() {
            map.remove(&key(ip));
        }
    }
}

/// The address failures are counted under: IPv4 as it is, IPv6 by its /64.
fn key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lockouts_start_after_the_free_failures_and_double_up_to_the_cap() {
        for n in 0..FREE_FAILURES {
            assert_eq!(lockout(n), None, "{n}");
        }
        assert_eq!(lockout(FREE_FAILURES), Some(Duration::from_secs(5)));
        assert_eq!(lockout(FREE_FAILURES + 1), Some(Duration::from_secs(10)));
        assert_eq!(lockout(FREE_FAILURES + 7), Some(Duration::from_secs(640)));
        assert_eq!(lockout(FREE_FAILURES + 8), Some(MAX_LOCKOUT));
        assert_eq!(lockout(u32::MAX), Some(MAX_LOCKOUT));
    }

    #[test]
    fn an_address_is_locked_after_its_failures_and_freed_by_time_or_a_success() {
        let t = LoginThrottle::default();
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        let t0 = Instant::now();
        for n in 1..FREE_FAILURES {
            assert_eq!(t.failed(ip, t0), (n, None));
            assert_eq!(t.locked(ip, t0), None);
        }
        assert_eq!(
            t.failed(ip, t0),
            (FREE_FAILURES, Some(Duration::from_secs(5)))
        );
        assert_eq!(
            t.locked(ip, t0 + Duration::from_secs(1)),
            Some(Duration::from_secs(4))
        );
        assert_eq!(t.locked(other, t0), None, "other addresses are not slowed");
        let later = t0 + Duration::from_secs(5);
        assert_eq!(t.locked(ip, later), None, "the lockout ends");
        assert_eq!(
            t.failed(ip, later).1,
            Some(Duration::from_secs(10)),
            "and doubles with the next failure"
        );
        t.succeeded(ip);
        assert_eq!(t.locked(ip, later), None);
        assert_eq!(t.failed(ip, later), (1, None));
        // Long quiet: forgotten.
        let quiet = later + FORGET_AFTER;
        assert_eq!(t.failed(ip, quiet), (1, None));
    }

    #[test]
    fn ipv6_counts_by_its_64_and_mapped_ipv4_as_ipv4() {
        let t = LoginThrottle::default();
        let now = Instant::now();
        for i in 0..FREE_FAILURES {
            t.failed(format!("2001:db8:1:2::{i:x}").parse().unwrap(), now);
        }
        assert!(
            t.locked("2001:db8:1:2::ffff".parse().unwrap(), now)
                .is_some()
        );
        assert!(t.locked("2001:db8:1:3::1".parse().unwrap(), now).is_none());
        for _ in 0..FREE_FAILURES {
            t.failed("::ffff:192.0.2.1".parse().unwrap(), now);
        }
        assert!(t.locked("192.0.2.1".parse().unwrap(), now).is_some());
    }
}
