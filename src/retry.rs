//! Retry backoff: when a failed job runs again.
//!
//! Exponential with "equal jitter": attempt `n` (1-based) waits a random time between half and all of
//! `base * 2^(n-1)`, never more than `cap`. The random half spreads out jobs that failed together (say,
//! when a downstream service went away), so they do not all come back in the same second. With the
//! defaults (2 s base, 1 h cap) the waits are about 1–2 s, 2–4 s, 4–8 s, … reaching the cap at the 12th
//! attempt; with the default 20 attempts a job keeps being retried for about 7 hours (between 4.6 and 9.1) before it is dead.

use std::time::Duration;

/// Bounds of the backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The wait after the first failure (before jitter).
    pub base: Duration,
    /// The longest wait.
    pub cap: Duration,
}

impl RetryPolicy {
    /// Default base: 2 seconds.
    pub const DEFAULT_BASE: Duration = Duration::from_secs(2);
    /// Default cap: 1 hour.
    pub const DEFAULT_CAP: Duration = Duration::from_secs(3600);

    /// The longest cap accepted: 30 days. A retry's `run_at` is now plus the wait and must stay within
    /// what a TIMESTAMP holds (2038-01-19); a month is far beyond any useful backoff and keeps that true
    /// until the last month of the range.
    pub const MAX_CAP: Duration = Duration::from_secs(30 * 24 * 3600);

    /// Checks the bounds; `base_key` and `cap_key` are the names the caller's user knows them by
    /// (`retry.base` in `[retry]`, `retry_base` in `[handlers.KIND]`).
    ///
    /// # Errors
    /// A zero base (every retry would follow at once), a cap below the base (the backoff could never
    /// reach its own first step), or a cap above [`RetryPolicy::MAX_CAP`].
    pub fn check(&self, base_key: &str, cap_key: &str) -> Result<(), String> {
        let show = |d: Duration| humantime::format_duration(d).to_string();
        if self.base.is_zero() {
            return Err(format!("{base_key} must be above zero"));
        }
        if self.cap < self.base {
            return Err(format!(
                "{cap_key} ({}) is below {base_key} ({})",
                show(self.cap),
                show(self.base)
            ));
        }
        if self.cap > Self::MAX_CAP {
            return Err(format!(
                "{cap_key} ({}) is above the longest backoff jobq takes ({})",
                show(self.cap),
                show(Self::MAX_CAP)
            ));
        }
        Ok(())
    }

    /// The wait before the attempt after failed attempt `attempt` (1-based), given a uniform random
    /// number in `[0, 1)`. Pure, so tests can pin the randomness.
    pub fn delay(&self, attempt: u16, unit_random: f64) -> Duration {
        let doublings = u32::from(attempt.saturating_sub(1)).min(40);
        let full = self
            .base
            .checked_mul(1u32 << doublings.min(31))
            .unwrap_or(self.cap)
            .min(self.cap);
        let half = full / 2;
        half + half.mul_f64(unit_random.clamp(0.0, 1.0))
    }

    /// [`RetryPolicy::delay`] with a fresh random number.
    pub fn next_delay(&self, attempt: u16) -> Duration {
        self.delay(attempt, rand::random::<f64>())
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            base: Self::DEFAULT_BASE,
            cap: Self::DEFAULT_CAP,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_with_equal_jitter_and_caps() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay(1, 0.0), Duration::from_secs(1));
        assert_eq!(p.delay(1, 1.0), Duration::from_secs(2));
        assert_eq!(p.delay(3, 0.0), Duration::from_secs(4));
        assert_eq!(p.delay(3, 1.0), Duration::from_secs(8));
        assert_eq!(p.delay(12, 1.0), Duration::from_secs(3600));
        assert_eq!(p.delay(u16::MAX, 1.0), Duration::from_secs(3600));
        assert_eq!(p.delay(u16::MAX, 0.0), Duration::from_secs(1800));
        for a in 1..30 {
            let d = p.next_delay(a);
            assert!(d <= p.cap);
            assert!(d >= p.delay(a, 0.0));
        }
    }

    #[test]
    fn default_schedule_spans_about_seven_hours() {
        let p = RetryPolicy::default();
        let total: Duration = (1..20).map(|a| p.delay(a, 0.5)).sum();
        assert!(
            total > Duration::from_secs(6 * 3600) && total < Duration::from_secs(8 * 3600),
            "{total:?}"
        );
    }

    #[test]
    fn check_names_the_key_that_is_wrong() {
        let p = |base: u64, cap: u64| RetryPolicy {
            base: Duration::from_secs(base),
            cap: Duration::from_secs(cap),
        };
        assert_eq!(p(1, 10).check("b", "c"), Ok(()));
        assert_eq!(
            p(0, 10).check("b", "c").unwrap_err(),
            "b must be above zero"
        );
        assert_eq!(
            p(10, 1).check("b", "c").unwrap_err(),
            "c (1s) is below b (10s)"
        );
        let too_long = p(1, RetryPolicy::MAX_CAP.as_secs() + 1).check("b", "c");
        assert!(too_long.unwrap_err().starts_with("c (30days 1s) is above"));
    }

    #[test]
    fn zero_base_retries_at_once() {
        let p = RetryPolicy {
            base: Duration::ZERO,
            cap: Duration::from_secs(1),
        };
        assert_eq!(p.delay(5, 0.7), Duration::ZERO);
    }
}
