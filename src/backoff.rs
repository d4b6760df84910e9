//! Delays between retries: how long a service waits after a failure before it tries again.
//!
//! Each named delay states what it paces, so that retry timings are not bare literals at call sites.

use std::time::Duration;

/// A delay that doubles after each failure, up to a cap, and starts over after a success.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// Waiting for a database that is unreachable at start: 0.5 s doubling to 15 s.
    pub(crate) const OUTAGE: Backoff =
        Backoff::new(Duration::from_millis(500), Duration::from_secs(15));
    /// Retrying a failed claim, or recording an outcome through an outage: 0.1 s doubling to 5 s.
    pub(crate) const RETRY: Backoff =
        Backoff::new(Duration::from_millis(100), Duration::from_secs(5));

    /// Rebuilding a lost heartbeat session: 0.2 s doubling to one heartbeat `interval`. Sooner than a
    /// whole interval, because the fence is counting down while the session is gone.
    pub(crate) fn session(interval: Duration) -> Backoff {
        Backoff::new(Duration::from_millis(200), interval)
    }

    /// Restarting an in-process service (reaper, scheduler) that failed or panicked: `first` doubling
    /// to a minute, so a service that fails at once does not spin.
    pub(crate) fn restart(first: Duration) -> Backoff {
        Backoff::new(first, Duration::from_secs(60).max(first))
    }

    /// Starts at `first` (or `max`, if that is shorter), doubles up to `max`.
    pub(crate) const fn new(first: Duration, max: Duration) -> Self {
        let first = if first.as_nanos() < max.as_nanos() {
            first
        } else {
            max
        };
        Self {
            first,
            max,
            next: first,
        }
    }

    /// The delay to wait now; the next one is twice as long (up to the cap).
    pub(crate) fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    /// After a success: the next delay is the first again.
    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap_and_starts_over() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(350));
        let got: Vec<u128> = (0..4).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(got, [100, 200, 350, 350]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(100));
        let mut c = Backoff::new(Duration::from_millis(100), Duration::from_millis(50));
        assert_eq!(c.next_delay(), Duration::from_millis(50));
    }
}
