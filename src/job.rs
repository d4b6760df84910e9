//! Jobs as rows: their states and the columns workers and admins read.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
pub use crate::id::JobId;

/// The attempts a job gets when neither the job (its `max_attempts`, NULL unless its enqueuer set one,
/// schema 19) nor its handler sets a number: with the default backoff (2 s doubling to a 1 h cap) a job
/// that keeps failing is retried for about 7 hours before it is dead.
pub const DEFAULT_MAX_ATTEMPTS: u16 = 20;

/// One attempt of one job: what every finish is fenced by, with the claim token. A row changes only
/// while it carries this attempt's number (`attempts`) and the claimant's token, so an outcome of an
/// attempt whose row was reset and claimed again is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, sqlx::FromRow)]
pub(crate) struct AttemptKey {
    /// The job's row id.
    pub(crate) id: JobId,
    /// The attempt's number, as the row's `attempts` counts it.
    #[sqlx(rename = "attempts")]
    pub(crate) attempt: u16,
}

/// `(id, attempt)` pairs as keys, for tests that write them out.
#[cfg(test)]
pub(crate) fn keys(pairs: &[(u64, u16)]) -> Vec<AttemptKey> {
    pairs.iter().copied().map(AttemptKey::from).collect()
}

impl From<(u64, u16)> for AttemptKey {
    /// From `(id, attempts)` as a row reads.
    fn from((id, attempt): (u64, u16)) -> Self {
        Self {
            id: JobId(id),
            attempt,
        }
    }
}

/// The bound as SQL applies it where no handler is known (a reaper's reset, an interrupted attempt):
/// the row's `max_attempts`, else [`DEFAULT_MAX_ATTEMPTS`]. A macro so that it can be spliced into
/// statements' literal text.
macro_rules! row_max_attempts {
    () => {
        "COALESCE(max_attempts, 20)"
    };
}
pub(crate) use row_max_attempts;

/// The attempts a job may use: its own `max_attempts` when it has one, else its handler's, else
/// [`DEFAULT_MAX_ATTEMPTS`].
pub(crate) fn max_attempts(own: Option<u16>, handlers: Option<u16>) -> u16 {
    own.or(handlers).unwrap_or(DEFAULT_MAX_ATTEMPTS)
}

/// The life of a job. The strings are what the `state` column stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Waiting to run once `run_at` has passed.
    Queued,
    /// Claimed by a worker, whose token is in `claim`.
    Running,
    /// Finished successfully.
    Done,
    /// Failed; waiting for `run_at` to try again.
    Retry,
    /// Failed `max_attempts` times (or failed in a way that retrying cannot fix); kept with its last error.
    Dead,
    /// Cancelled by an operator before it finished.
    Cancelled,
    /// Waiting for the jobs it names to be done (schema 16); not claimable until then.
    Waiting,
}

impl State {
    /// Every state: in life order, then `waiting` (schema 16), which comes before `queued` for a job
    /// that has dependencies.
    pub const ALL: [State; 7] = [
        State::Queued,
        State::Running,
        State::Done,
        State::Retry,
        State::Dead,
        State::Cancelled,
        State::Waiting,
    ];

    /// The value stored in the `state` column.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Queued => "queued",
            State::Running => "running",
            State::Done => "done",
            State::Retry => "retry",
            State::Dead => "dead",
            State::Cancelled => "cancelled",
            State::Waiting => "waiting",
        }
    }

    /// True for the states off a job's common path (waiting, retry, dead, cancelled): the ones the
    /// `rare_state` index (schemas 39 and 42) holds, whose entries move only when a job waits, fails,
    /// dies or is cancelled.
    pub(crate) fn is_rare(self) -> bool {
        matches!(
            self,
            State::Waiting | State::Retry | State::Dead | State::Cancelled
        )
    }

    /// True for states a job never leaves on its own.
    pub fn is_final(self) -> bool {
        matches!(self, State::Done | State::Dead | State::Cancelled)
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for State {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        State::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(
                    "job state",
                    format!(
                        "{s:?} is not one of queued, running, done, retry, dead, cancelled, waiting"
                    ),
                )
            })
    }
}

/// A job as an admin sees it: every column of its row. Serializes with these field names (`jobq jobs
/// show --json`), the payload as the JSON it holds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct JobRecord {
    /// Row id.
    pub id: JobId,
    /// Queue name.
    pub queue: String,
    /// Job kind, which picks the handler.
    pub kind: String,
    /// JSON payload, as stored.
    #[serde(serialize_with = "crate::json::embedded")]
    pub payload: String,
    /// Smaller runs first. For a job that priority aging raised, the aged priority (what the claim
    /// orders by).
    pub priority: i16,
    /// The priority the job was enqueued with, when priority aging has raised it since (then
    /// `priority` is smaller); `None` for a job never aged. A retry or a snooze puts the job back at
    /// this priority.
    pub base_priority: Option<i16>,
    /// When the job becomes due.
    pub run_at: DateTime<Utc>,
    /// Current state.
    pub state: State,
    /// Attempts started so far.
    pub attempts: u16,
    /// Attempts allowed before the job is dead: `None` when the job did not set its own, so it gets its
    /// handler's, else [`DEFAULT_MAX_ATTEMPTS`]. A worker writes the bound it applied into the row when an
    /// attempt fails.
    pub max_attempts: Option<u16>,
    /// Per-job timeout in seconds, if set.
    pub timeout_secs: Option<u32>,
    /// The error of the last failed attempt.
    pub last_error: Option<String>,
    /// The claim token of the worker running it.
    pub claim: Option<String>,
    /// When it was claimed.
    pub claimed_at: Option<DateTime<Utc>>,
    /// When it was inserted.
    pub created_at: DateTime<Utc>,
    /// When its last attempt started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it reached done, dead or cancelled.
    pub finished_at: Option<DateTime<Utc>>,
    /// Its unique key, if it has one ([`NewJob::unique_key`](crate::NewJob::unique_key)); bytes that
    /// are not UTF-8 (possible from plain SQL) are shown replaced.
    pub unique_key: Option<String>,
    /// Its debounce key while it takes part in debouncing ([`NewJob::debounce`](crate::NewJob::debounce));
    /// cleared when a started job comes back to the queue or an ended one is retried.
    pub debounce_key: Option<String>,
    /// How many enqueues after the first were merged into it.
    pub debounced: u32,
    /// Its order key, if it was enqueued with one ([`NewJob::order_key`](crate::NewJob::order_key),
    /// [`NewJob::fair_key`](crate::NewJob::fair_key)): it runs after the job enqueued before it in its
    /// lane.
    pub order_key: Option<String>,
    /// How many jobs of its key may run at once: 1 for an ordered key, more for a fair share.
    pub order_lanes: u16,
    /// The W3C trace context it was enqueued under (schema 25; docs/traces.md), as stored: a value
    /// plain SQL wrote past the column's CHECK is shown as it is, though the worker runs the job
    /// without it.
    pub traceparent: Option<String>,
    /// What it last reported of its progress, if it did ([`JobContext::progress`](crate::JobContext::progress),
    /// `jobq_progress`). Its output, which may be large, is read on its own:
    /// [`Jobs::output`](crate::Jobs::output).
    pub progress: Option<Progress>,
}

/// A job's progress as it last reported it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Progress {
    /// From 0 to 100.
    pub percent: f64,
    /// What it said with it.
    pub message: Option<String>,
    /// The attempt that reported it: an earlier attempt's report is history, not the state of the
    /// attempt running now.
    pub attempt: u16,
    /// When.
    pub at: DateTime<Utc>,
}

impl JobRecord {
    /// The attempts the job may use as a person reads them: its own number, or `default` (its
    /// handler's, else [`DEFAULT_MAX_ATTEMPTS`]) when it set none.
    pub fn max_attempts_text(&self) -> String {
        self.max_attempts
            .map_or_else(|| "default".to_string(), |n| n.to_string())
    }

    /// The job's key as a person reads it: `"endpoint:9", one at a time, in order` or `"customer:7", at
    /// most 2 at once`; `None` without one.
    pub fn key_summary(&self) -> Option<String> {
        let key = self.order_key.as_ref()?;
        Some(match self.order_lanes {
            0 | 1 => format!("{key:?}, one at a time, in order"),
            n => format!("{key:?}, at most {n} at once"),
        })
    }

    /// What debouncing did to the job, as a person reads it: `key "customer:7", 999 later enqueues
    /// merged`; `None` for a job that was never debounced.
    pub fn debounce_summary(&self) -> Option<String> {
        let merged = match self.debounced {
            1 => "1 later enqueue merged".to_string(),
            n => format!("{n} later enqueues merged"),
        };
        match (&self.debounce_key, self.debounced) {
            (Some(k), _) => Some(format!("key {k:?}, {merged}")),
            (None, 0) => None,
            (None, _) => Some(format!("{merged} (no longer debounced)")),
        }
    }
}

/// The instants a TIMESTAMP column holds on MySQL 8 and MariaDB before 11.5: 1970-01-01 00:00:01 to
/// 2038-01-19 03:14:07 UTC. Every time jobq stores is checked against this one range: outside it,
/// MariaDB stores the current time instead of refusing the value, and a job or run would happen at once.
pub(crate) const TIMESTAMP_RANGE: std::ops::RangeInclusive<i64> = 1..=i32::MAX as i64;

/// Whether a TIMESTAMP column holds `t` (see [`TIMESTAMP_RANGE`]).
pub(crate) fn storable(t: &DateTime<Utc>) -> bool {
    TIMESTAMP_RANGE.contains(&t.timestamp())
}

/// The first and last instants of [`TIMESTAMP_RANGE`].
pub(crate) fn timestamp_bounds() -> (DateTime<Utc>, DateTime<Utc>) {
    let at = |s: i64| DateTime::from_timestamp(s, 0).expect("in range");
    (at(*TIMESTAMP_RANGE.start()), at(*TIMESTAMP_RANGE.end()))
}

/// [`TIMESTAMP_RANGE`] as messages spell it: `1970-01-01 00:00:01 to 2038-01-19 03:14:07 UTC`.
pub(crate) fn timestamp_range_text() -> String {
    const AS: &str = "%Y-%m-%d %H:%M:%S";
    let (first, last) = timestamp_bounds();
    format!("{} to {} UTC", first.format(AS), last.format(AS))
}

/// A job's `timeout_secs`: whole seconds, rounded up (a limit is never shortened), at most what the
/// column holds.
pub(crate) fn timeout_secs(t: std::time::Duration) -> u32 {
    let secs = t.as_secs() + u64::from(t.subsec_nanos() > 0);
    secs.min(u64::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_round_up_to_whole_seconds_within_the_column() {
        use std::time::Duration;
        assert_eq!(timeout_secs(Duration::from_millis(1500)), 2);
        assert_eq!(timeout_secs(Duration::from_secs(3)), 3);
        assert_eq!(timeout_secs(Duration::from_secs(u64::MAX)), u32::MAX);
    }

    #[test]
    fn a_jobs_own_max_attempts_wins_over_its_handlers() {
        assert_eq!(max_attempts(Some(1), Some(3)), 1);
        assert_eq!(max_attempts(None, Some(3)), 3);
        assert_eq!(max_attempts(None, None), DEFAULT_MAX_ATTEMPTS);
        assert_eq!(
            row_max_attempts!(),
            format!("COALESCE(max_attempts, {DEFAULT_MAX_ATTEMPTS})"),
            "SQL applies the same default"
        );
    }

    #[test]
    fn states_round_trip() {
        for s in State::ALL {
            assert_eq!(s.as_str().parse::<State>().unwrap(), s);
        }
        let e = "finished".parse::<State>().unwrap_err().to_string();
        assert!(e.contains("\"finished\"") && e.contains("queued"), "{e}");
        for s in State::ALL {
            assert!(e.contains(s.as_str()), "every state is named: {e}");
        }
    }
}
