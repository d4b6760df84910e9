//! How an attempt that did not succeed says so: a failure (retried, or dead at once) or a snooze.

use std::fmt;
use std::time::Duration;

/// An attempt that did not succeed: it failed (retried with backoff, or dead at once if fatal), or it
/// asked to run again later without failing (a snooze).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobError {
    message: String,
    kind: ErrorKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ErrorKind {
    Retry,
    RetryAfter(Duration),
    Fatal,
    Snooze(Duration),
}

impl JobError {
    /// A failure worth retrying (the default): the job runs again after a backoff, until max_attempts.
    pub fn retry(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            kind: ErrorKind::Retry,
        }
    }

    /// A failure worth retrying after `delay` (by the database clock) instead of the backoff's next
    /// step: the program knows better (a rate limit's reset, a `Retry-After`). It counts as an attempt
    /// like [`JobError::retry`]; at `max_attempts` the job is dead.
    pub fn retry_after(message: impl Into<String>, delay: Duration) -> Self {
        Self {
            message: message.into(),
            kind: ErrorKind::RetryAfter(delay),
        }
    }

    /// A failure retrying cannot fix: the job is dead at once.
    pub fn fatal(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            kind: ErrorKind::Fatal,
        }
    }

    /// Not a failure: run the job again after `delay` (by the database clock). The attempt is not
    /// counted, so a job that snoozes while it waits for something (a rate limit, a file that is not
    /// there yet) never uses up its `max_attempts`, which keeps bounding real failures. The row goes
    /// back to `queued` with its `last_error` untouched, and `jobq_attempts` records the attempt as
    /// `snoozed`. A delay that would put `run_at` past what a TIMESTAMP holds (2038-01-19) is refused:
    /// the attempt then fails with an error that says so.
    pub fn snooze(delay: Duration) -> Self {
        Self {
            message: format!("snoozed for {}", humantime::format_duration(delay)),
            kind: ErrorKind::Snooze(delay),
        }
    }

    /// The message kept in `last_error` (for a snooze, which keeps `last_error` as it was: the one
    /// recorded in `jobq_attempts`).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// True when the job must not be retried.
    pub fn is_fatal(&self) -> bool {
        self.kind == ErrorKind::Fatal
    }

    /// The delay a [`JobError::retry_after`] asked for; None for every other error.
    pub fn retry_delay(&self) -> Option<Duration> {
        match self.kind {
            ErrorKind::RetryAfter(d) => Some(d),
            _ => None,
        }
    }

    /// The delay of a [`JobError::snooze`]; None for failures.
    pub fn snoozed(&self) -> Option<Duration> {
        match self.kind {
            ErrorKind::Snooze(d) => Some(d),
            _ => None,
        }
    }
}

/// When a snooze of `delay` from `now` ends, or why it cannot: `run_at` is a TIMESTAMP, and past its
/// range MariaDB would store the current time instead and the job would run again at once.
pub(crate) fn snooze_until(
    delay: Duration,
    now: chrono::DateTime<chrono::Utc>,
) -> std::result::Result<chrono::DateTime<chrono::Utc>, String> {
    let until = chrono::Duration::from_std(delay)
        .ok()
        .and_then(|d| now.checked_add_signed(d));
    match until {
        Some(t) if crate::job::storable(&t) => Ok(t),
        _ => Err(format!(
            "a snooze of {} would put run_at past what a TIMESTAMP holds ({})",
            humantime::format_duration(delay),
            crate::job::timestamp_range_text()
        )),
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Any error converts into a retryable [`JobError`], so handlers can use `?`.
impl<E: std::error::Error> From<E> for JobError {
    fn from(e: E) -> Self {
        JobError::retry(e.to_string())
    }
}
