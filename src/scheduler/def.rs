//! What a schedule is: its definition ([`ScheduleDef`], from code, the CLI or a `[schedules.NAME]`
//! section of `jobq.toml`), its policies, and the rows the database keeps for it ([`ScheduleRecord`],
//! [`RunRecord`]).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::spec::Spec;
use crate::config::HumanDuration;
use crate::db::enqueue::validate_name;
use crate::error::{Error, Result};

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* $variant),+ }

        impl $name {
            /// Every value.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The value stored in the database and written on the command line.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                $name::ALL.iter().copied().find(|v| v.as_str() == s.trim()).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "unknown {} {s:?}; expected one of {}",
                        stringify!($name).to_lowercase(),
                        $name::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", ")
                    ))
                })
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(|e: Error| serde::de::Error::custom(e.to_string()))
            }
        }
    };
}

string_enum! {
    /// What happens when a run's planned time comes while the previous run's job has not ended.
    ///
    /// The default is `wait`, as in pg_cron and DBMS_JOB: runs of one schedule never go side by side
    /// (most periodic jobs are not written to run concurrently with themselves), and the missed time is
    /// not lost: it runs as soon as the previous run ends. It cannot pile up either: however many times
    /// passed meanwhile, the misfire policy decides how many run (`once` by default: one).
    Overlap {
        /// Hold the run until the previous one has ended (default).
        Wait = "wait",
        /// Drop this planned time and go on to the next.
        Skip = "skip",
        /// Run side by side (cron and the MySQL event scheduler do this).
        Allow = "allow",
    }
}

string_enum! {
    /// What a failed run does. Retrying is the worker's exponential backoff on the run's job.
    ///
    /// The default is `retry` (3 attempts in all): a transient failure gets a second try within seconds
    /// instead of at the next planned time (which, for a daily job, is a day later), and a persistent one
    /// still ends after a few seconds, counts as one failure, and leaves the schedule on its times.
    OnError {
        /// The job is retried with backoff up to `max_attempts` (default 3) (default).
        Retry = "retry",
        /// One attempt per run; a failure waits for the next planned time.
        Keep = "keep",
        /// One attempt per run (unless `max_attempts` says more); a run that ends dead pauses the
        /// schedule until an operator resumes it.
        Pause = "pause",
    }
}

string_enum! {
    /// What happens to planned times that passed while no scheduler was running.
    Misfire {
        /// One run makes up for all of them (default; anacron does this).
        Once = "once",
        /// A run for each of them, at most `max_catch_up` (default 100), the newest ones.
        All = "all",
        /// None of them runs; the schedule goes on at its next time.
        Skip = "skip",
    }
}

string_enum! {
    /// The life of a schedule.
    ScheduleState {
        /// Runs at its planned times.
        Enabled = "enabled",
        /// Paused by an operator (or by the `pause` error policy); `jobq schedule resume` goes on.
        Paused = "paused",
        /// No planned time is left (a `once` spec ran, or the window ended).
        Finished = "finished",
        /// Failed `broken_after` times in a row; `jobq schedule resume` resets the count.
        Broken = "broken",
    }
}

/// A schedule as defined by its owner. Only the name, kind and spec are required.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleDef {
    /// Unique name.
    pub name: String,
    /// Kind of the jobs it creates (picks the handler).
    pub kind: String,
    /// The spec text (see [`Spec`]).
    pub spec: String,
    /// IANA time zone of wall-clock specs.
    pub time_zone: String,
    /// JSON payload of its jobs.
    pub payload: String,
    /// Queue of its jobs.
    pub queue: String,
    /// Priority of its jobs.
    pub priority: i16,
    /// Attempts per job; None: 3 with `retry`, 1 otherwise.
    pub max_attempts: Option<u16>,
    /// Run-time limit of its jobs.
    pub timeout: Option<Duration>,
    /// No planned time before this.
    pub start_at: Option<DateTime<Utc>>,
    /// No planned time after this; the schedule is finished then.
    pub end_at: Option<DateTime<Utc>>,
    /// Also run once each time a (`--forever` or in-process) scheduler starts.
    pub at_startup: bool,
    /// Overlap policy.
    pub overlap: Overlap,
    /// Error policy.
    pub on_error: OnError,
    /// Misfire policy.
    pub misfire: Misfire,
    /// Each job's run_at is its planned time plus a random delay up to this.
    pub jitter: Duration,
    /// Consecutive failed runs after which the schedule is broken (0: never).
    pub broken_after: u32,
    /// Created paused.
    pub paused: bool,
}

impl ScheduleDef {
    /// Default `broken_after`: 16, as DBMS_JOB.
    pub const DEFAULT_BROKEN_AFTER: u32 = 16;
    /// Attempts per job under `on_error = retry` when `max_attempts` is not set.
    pub const DEFAULT_RETRY_ATTEMPTS: u16 = 3;
    /// Longest jitter: a day.
    pub const MAX_JITTER: Duration = Duration::from_secs(86_400);

    /// A schedule with every option at its default: UTC, empty payload, queue `default`, priority 0,
    /// overlap `wait`, on_error `retry`, misfire `once`, no jitter, broken after 16 failures.
    pub fn new(name: impl Into<String>, kind: impl Into<String>, spec: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            kind: kind.into(),
            spec: spec.into(),
            time_zone: "UTC".into(),
            payload: "{}".into(),
            queue: "default".into(),
            priority: 0,
            max_attempts: None,
            timeout: None,
            start_at: None,
            end_at: None,
            at_startup: false,
            overlap: Overlap::Wait,
            on_error: OnError::Retry,
            misfire: Misfire::Once,
            jitter: Duration::ZERO,
            broken_after: Self::DEFAULT_BROKEN_AFTER,
            paused: false,
        }
    }

    /// Sets the time zone.
    pub fn time_zone(mut self, tz: impl Into<String>) -> Self {
        self.time_zone = tz.into();
        self
    }

    /// Sets the payload from any serializable value.
    pub fn payload<T: serde::Serialize>(mut self, value: &T) -> Result<Self> {
        self.payload = serde_json::to_string(value).map_err(Error::Payload)?;
        Ok(self)
    }

    /// Sets the queue.
    pub fn queue(mut self, q: impl Into<String>) -> Self {
        self.queue = q.into();
        self
    }

    /// Sets the policies.
    pub fn policies(mut self, overlap: Overlap, on_error: OnError, misfire: Misfire) -> Self {
        self.overlap = overlap;
        self.on_error = on_error;
        self.misfire = misfire;
        self
    }

    /// Attempts each job gets.
    pub fn effective_max_attempts(&self) -> u16 {
        self.max_attempts.unwrap_or(match self.on_error {
            OnError::Retry => Self::DEFAULT_RETRY_ATTEMPTS,
            OnError::Keep | OnError::Pause => 1,
        })
    }

    /// Checks every field and parses the spec.
    ///
    /// # Errors
    /// [`Error::Spec`] for the spec and time zone, [`Error::Schedule`] for the rest, naming the field.
    pub fn validate(&self) -> Result<Spec> {
        let bad = |reason: String| Error::Schedule {
            name: self.name.clone(),
            reason,
        };
        validate_name("schedule name", &self.name, 128)?;
        validate_name("kind", &self.kind, 128).map_err(|e| bad(e.to_string()))?;
        validate_name("queue", &self.queue, 64).map_err(|e| bad(e.to_string()))?;
        serde_json::from_str::<serde_json::Value>(&self.payload)
            .map_err(|e| bad(format!("payload is not valid JSON: {e}")))?;
        let spec = Spec::parse(&self.spec, &self.time_zone)?;
        if self.spec.trim().len() > 255 {
            return Err(bad("spec is longer than 255 characters".into()));
        }
        if self.max_attempts == Some(0) {
            return Err(bad("max_attempts must be at least 1".into()));
        }
        if self.on_error == OnError::Keep && self.max_attempts.is_some_and(|n| n > 1) {
            return Err(bad(
                "on_error = keep runs each job once; use on_error = retry for more attempts".into(),
            ));
        }
        if self.timeout.is_some_and(|t| t.is_zero()) {
            return Err(bad("timeout must be above zero".into()));
        }
        for (what, t) in [("start", self.start_at), ("end", self.end_at)] {
            // Out-of-range values would be stored as the current time by MariaDB, not refused.
            if let Some(t) = t
                && !crate::job::storable(&t)
            {
                return Err(bad(format!(
                    "{what} {t} is outside what a TIMESTAMP holds (1970-01-01 to 2038-01-19 03:14:07 UTC)"
                )));
            }
        }
        if let (Some(s), Some(e)) = (self.start_at, self.end_at)
            && e < s
        {
            return Err(bad(format!("end {e} is before start {s}")));
        }
        if self.jitter > Self::MAX_JITTER {
            return Err(bad("jitter is longer than a day".into()));
        }
        Ok(spec)
    }
}

/// A `[schedules.NAME]` section of `jobq.toml`.
///
/// ```toml
/// [schedules.nightly-report]
/// kind = "report.nightly"
/// spec = "30 2 * * *"
/// time_zone = "Europe/Paris"
/// payload = { format = "pdf" }
/// overlap = "skip"
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSection {
    /// Kind of the jobs.
    pub kind: String,
    /// The spec.
    pub spec: String,
    /// IANA time zone (default UTC).
    pub time_zone: Option<String>,
    /// Payload, any TOML value (written as JSON).
    pub payload: Option<toml::Value>,
    /// Queue.
    pub queue: Option<String>,
    /// Priority.
    pub priority: Option<i16>,
    /// Attempts per job.
    pub max_attempts: Option<u16>,
    /// Run-time limit per job.
    pub timeout: Option<HumanDuration>,
    /// Start of the window (RFC 3339).
    pub start: Option<String>,
    /// End of the window (RFC 3339).
    pub end: Option<String>,
    /// Run at scheduler start too.
    pub at_startup: Option<bool>,
    /// Overlap policy.
    pub overlap: Option<Overlap>,
    /// Error policy.
    pub on_error: Option<OnError>,
    /// Misfire policy.
    pub misfire: Option<Misfire>,
    /// Jitter.
    pub jitter: Option<HumanDuration>,
    /// Failures before broken.
    pub broken_after: Option<u32>,
}

impl ScheduleSection {
    /// The definition this section describes, validated.
    pub fn to_def(&self, name: &str) -> Result<ScheduleDef> {
        let mut d = ScheduleDef::new(name, &self.kind, &self.spec);
        if let Some(tz) = &self.time_zone {
            d.time_zone = tz.clone();
        }
        if let Some(p) = &self.payload {
            d.payload = serde_json::to_string(p).map_err(Error::Payload)?;
        }
        if let Some(q) = &self.queue {
            d.queue = q.clone();
        }
        d.priority = self.priority.unwrap_or(0);
        d.max_attempts = self.max_attempts;
        d.timeout = self.timeout.map(|t| t.0);
        let time = |field: &str, v: &Option<String>| -> Result<Option<DateTime<Utc>>> {
            v.as_deref()
                .map(|s| {
                    DateTime::parse_from_rfc3339(s)
                        .map(|t| t.with_timezone(&Utc))
                        .map_err(|e| Error::Schedule {
                            name: name.to_string(),
                            reason: format!(
                                "{field} {s:?}: {e} (use RFC 3339, e.g. 2030-01-01T00:00:00Z)"
                            ),
                        })
                })
                .transpose()
        };
        d.start_at = time("start", &self.start)?;
        d.end_at = time("end", &self.end)?;
        d.at_startup = self.at_startup.unwrap_or(false);
        d.overlap = self.overlap.unwrap_or(d.overlap);
        d.on_error = self.on_error.unwrap_or(d.on_error);
        d.misfire = self.misfire.unwrap_or(d.misfire);
        d.jitter = self.jitter.map_or(Duration::ZERO, |j| j.0);
        d.broken_after = self.broken_after.unwrap_or(d.broken_after);
        d.validate()?;
        Ok(d)
    }
}

/// Validates every `[schedules.NAME]` section (called by [`crate::config::Config`]'s validation).
pub fn validate_sections(
    sections: &BTreeMap<String, ScheduleSection>,
) -> std::result::Result<(), String> {
    for (name, s) in sections {
        s.to_def(name)
            .map_err(|e| format!("schedules.{name}: {e}"))?;
    }
    Ok(())
}

/// A schedule as stored.
#[derive(Debug, Clone)]
pub struct ScheduleRecord {
    /// Row id.
    pub id: u64,
    /// The definition.
    pub def: ScheduleDef,
    /// Phase of interval specs.
    pub anchor_at: DateTime<Utc>,
    /// Current state.
    pub state: ScheduleState,
    /// The next planned time, if any.
    pub next_run_at: Option<DateTime<Utc>>,
    /// Planned time of the latest run created.
    pub last_run_at: Option<DateTime<Utc>>,
    /// Failed runs in a row.
    pub consecutive_failures: u32,
    /// Runs created so far.
    pub total_runs: u64,
    /// Runs that ended dead so far.
    pub total_failures: u64,
    /// Planned times passed over without a job (overlap `skip`, misfires).
    pub skipped_runs: u64,
    /// Error of the latest failed run.
    pub last_error: Option<String>,
    /// When the row was created.
    pub created_at: DateTime<Utc>,
    /// When the row last changed.
    pub updated_at: DateTime<Utc>,
}

impl ScheduleRecord {
    /// The parsed spec.
    pub fn spec(&self) -> Result<Spec> {
        Spec::parse(&self.def.spec, &self.def.time_zone)
    }
}

/// One run of a schedule: one planned time and the one job created for it.
#[derive(Debug, Clone)]
pub struct RunRecord {
    /// Row id.
    pub id: u64,
    /// The schedule.
    pub schedule_id: u64,
    /// The planned time.
    pub planned_at: DateTime<Utc>,
    /// scheduled, catch_up, startup or manual.
    pub cause: String,
    /// The job.
    pub job_id: Option<u64>,
    /// When the job was created.
    pub created_at: DateTime<Utc>,
    /// The job's state now (None if the job row is gone).
    pub job_state: Option<String>,
    /// When the job's last attempt started.
    pub started_at: Option<DateTime<Utc>>,
    /// When the job ended.
    pub finished_at: Option<DateTime<Utc>>,
    /// done, dead, cancelled or missing once the scheduler has seen the job end; None before.
    pub outcome: Option<String>,
    /// The job's last error.
    pub error: Option<String>,
}
