//! The checks a [`NewJob`] passes before anything is sent: the server would refuse some bad values only
//! with an unclear error, and silently store others (an out-of-range `run_at`). Kept apart from the
//! builder so that each rule and its message sit together.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::name::{Name, check_unique_key};

use super::new_job::{Debounce, MAX_LANES, NewJob, RunAt};

impl NewJob {
    pub(super) fn validate(&self) -> Result<()> {
        Name::Kind.check(&self.kind)?;
        if self.after.len() > crate::db::deps::MAX_DEPENDENCIES {
            return Err(Error::invalid(
                "after",
                format!(
                    "{} jobs; a job waits for at most {}",
                    self.after.len(),
                    crate::db::deps::MAX_DEPENDENCIES
                ),
            ));
        }
        if self.after_ended
            && !serde_json::from_str::<serde_json::Value>(&self.payload)
                .is_ok_and(|v| v.is_object())
        {
            return Err(Error::invalid(
                "payload",
                "a batch callback's payload must be a JSON object (its members' outcome counts are added to it)",
            ));
        }
        if !self.after.is_empty() && self.unique_key.is_some() {
            return Err(Error::invalid(
                "after",
                "a job with a unique key cannot also wait for other jobs",
            ));
        }
        match (&self.unique_key, self.unique_for) {
            (Some(key), _) => check_unique_key(key)?,
            (None, Some(_)) => return Err(Error::invalid("unique_for", "needs a unique key")),
            (None, None) => {}
        }
        if let Some(d) = self.debounce {
            self.validate_debounce(d)?;
        }
        self.validate_order()?;
        if self.unique_for == Some(Duration::ZERO) {
            return Err(Error::invalid("unique_for", "must be above zero"));
        }
        if let Some(q) = &self.queue {
            Name::Queue.check(q)?;
        }
        if self.max_attempts == Some(0) {
            return Err(Error::invalid("max_attempts", "must be at least 1"));
        }
        if self.timeout_secs == Some(0) {
            return Err(Error::invalid("timeout", "must be above zero"));
        }
        let due = match self.run_at {
            None => return Ok(()),
            Some(RunAt::At(t)) => t,
            Some(RunAt::After(d)) => chrono::Duration::from_std(d)
                .ok()
                .and_then(|d| Utc::now().checked_add_signed(d))
                .unwrap_or(DateTime::<Utc>::MAX_UTC),
        };
        // Out-of-range values would not be refused by the server: bound as a binary temporal value, MariaDB
        // silently stores the current time instead, and the job would run at once.
        if !(min_run_at()..=max_run_at()).contains(&due) {
            return Err(Error::invalid(
                "run_at",
                format!(
                    "{} is outside what the run_at column holds ({})",
                    due.format("%Y-%m-%d %H:%M:%S UTC"),
                    crate::job::timestamp_range_text(),
                ),
            ));
        }
        Ok(())
    }
    fn validate_debounce(&self, d: Debounce) -> Result<()> {
        let refuse = |why: &str| Err(Error::invalid("debounce", why.to_string()));
        if self.unique_key.is_none() {
            return refuse("needs a unique key: the key names the jobs that merge");
        }
        if self.unique_for.is_some() {
            return refuse("cannot be combined with unique_for");
        }
        if !self.after.is_empty() {
            return refuse("a debounced job cannot wait for other jobs");
        }
        if self.run_at.is_some() {
            return refuse(
                "a debounced job runs its window after the last enqueue; it takes no due time",
            );
        }
        if d.window.is_zero() {
            return refuse("the window must be above zero");
        }
        if d.max < d.window {
            return Err(Error::invalid(
                "debounce_max",
                format!(
                    "{} is shorter than the window ({})",
                    humantime::format_duration(d.max),
                    humantime::format_duration(d.window)
                ),
            ));
        }
        // Both end up as microseconds added to NOW(6): keep them inside the run_at column.
        if d.max > Duration::from_secs(366 * 86_400) {
            return Err(Error::invalid(
                "debounce_max",
                "is longer than a year; a debounced job waits at most that",
            ));
        }
        Ok(())
    }

    fn validate_order(&self) -> Result<()> {
        let Some(key) = &self.order_key else {
            if self.order_halt {
                return Err(Error::invalid("order_halt", "needs an order key"));
            }
            if self.order_rate.is_some() {
                return Err(Error::invalid(
                    "fair_rate",
                    "needs an order key or a fair key",
                ));
            }
            return Ok(());
        };
        if let Some((n, per)) = self.order_rate
            && (n == 0 || per.is_zero() || per > Duration::from_secs(86_400))
        {
            return Err(Error::invalid(
                "fair_rate",
                format!(
                    "{n} per {}: give at least 1 per a period above zero and at most a day",
                    humantime::format_duration(per)
                ),
            ));
        }
        crate::name::check_key("order key", key)?;
        if !(1..=MAX_LANES).contains(&self.order_lanes) {
            return Err(Error::invalid(
                "fair_key",
                format!(
                    "at most {} at once: it must be from 1 to {MAX_LANES}",
                    self.order_lanes
                ),
            ));
        }
        let refuse = |why: &str| Err(Error::invalid("order_key", why.to_string()));
        if self.unique_key.is_some() {
            return refuse("cannot be combined with a unique key or debounce");
        }
        if !self.after.is_empty() {
            return refuse(
                "an ordered job waits for the job before it; it takes no other dependencies",
            );
        }
        Ok(())
    }
}
fn min_run_at() -> DateTime<Utc> {
    crate::job::timestamp_bounds().0
}

fn max_run_at() -> DateTime<Utc> {
    crate::job::timestamp_bounds().1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_at_must_fit_the_column() {
        let far = DateTime::from_timestamp(2_300_000_000, 0).unwrap();
        let e = NewJob::new("k")
            .run_at(far)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("2042") && e.contains("2038-01-19 03:14:07"),
            "{e}"
        );
        assert!(NewJob::new("k").run_at(max_run_at()).validate().is_ok());
        let e = NewJob::new("k")
            .run_in(Duration::from_secs(20 * 366 * 86400))
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("outside"), "{e}");
        let before_1970 = DateTime::from_timestamp(-5, 0).unwrap();
        assert!(NewJob::new("k").run_at(before_1970).validate().is_err());
        let e = NewJob::new("k")
            .timeout(Duration::ZERO)
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("timeout"), "{e}");
        assert_eq!(
            NewJob::new("k")
                .timeout(Duration::from_millis(1500))
                .timeout_secs,
            Some(2)
        );
    }

    #[test]
    fn payload_text_is_checked() {
        let e = NewJob::new("k")
            .payload_json("{oops")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("payload is not valid JSON"), "{e}");
        assert!(NewJob::new("k").payload_json("[1,2]").is_ok());
    }
}
