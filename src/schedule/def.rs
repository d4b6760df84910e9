//! A schedule's definition: [`ScheduleDef`] and its checks, and the `[schedules.NAME]` sections of
//! `jobq.toml` that describe one.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::spec::Spec;
use super::{Misfire, OnError, Overlap};
use crate::duration::HumanDuration;
use crate::error::{Error, Result};
use crate::name::Name;

/// A schedule as defined by its owner. Only the name, kind and spec are required. Serializes with
/// these field names, durations in seconds and the payload as the JSON it holds.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
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
    #[serde(serialize_with = "crate::json::embedded")]
    pub payload: String,
    /// Queue of its jobs.
    pub queue: String,
    /// Priority of its jobs.
    pub priority: i16,
    /// Attempts per job; None: 3 with `retry`, 1 otherwise.
    pub max_attempts: Option<u16>,
    /// Run-time limit of its jobs.
    #[serde(serialize_with = "crate::json::opt_secs")]
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
    #[serde(serialize_with = "crate::json::secs")]
    pub jitter: Duration,
    /// Consecutive failed runs after which the schedule is broken (0: never).
    pub broken_after: u32,
    /// Created paused. (Not serialized: a stored schedule's `state` says whether it is paused.)
    #[serde(skip_serializing)]
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
    /// [`Error::Spec`] for the spec and time zone, [`Error::ScheduleInvalid`] for the rest, naming the
    /// field.
    pub fn validate(&self) -> Result<Spec> {
        let bad = |reason: String| Error::ScheduleInvalid {
            name: self.name.clone(),
            reason,
        };
        Name::Schedule
            .check(&self.name)
            .map_err(|e| bad(e.to_string()))?;
        Name::Kind
            .check(&self.kind)
            .map_err(|e| bad(e.to_string()))?;
        Name::Queue
            .check(&self.queue)
            .map_err(|e| bad(e.to_string()))?;
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
                    "{what} {t} is outside what a TIMESTAMP holds ({})",
                    crate::job::timestamp_range_text()
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
                        .map_err(|e| Error::ScheduleInvalid {
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
pub(crate) fn validate_sections(
    sections: &BTreeMap<String, ScheduleSection>,
) -> std::result::Result<(), String> {
    for (name, s) in sections {
        s.to_def(name)
            .map_err(|e| format!("schedules.{name}: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reason of a definition refused as invalid (not a spec error).
    fn invalid(d: &ScheduleDef) -> String {
        match d.validate() {
            Err(Error::ScheduleInvalid { name, reason }) => {
                assert_eq!(name, d.name);
                reason
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_bad_field_is_named() {
        let ok = ScheduleDef::new("nightly", "report", "daily at 02:30");
        assert!(ok.validate().is_ok());
        let with = |f: &dyn Fn(&mut ScheduleDef)| {
            let mut d = ok.clone();
            f(&mut d);
            invalid(&d)
        };
        assert!(with(&|d| d.name = "a b".into()).starts_with("invalid schedule name: \"a b\""));
        assert!(with(&|d| d.kind = String::new()).starts_with("invalid kind: must not be empty"));
        assert!(with(&|d| d.queue = "q!".into()).starts_with("invalid queue: \"q!\""));
        assert!(with(&|d| d.payload = "{".into()).starts_with("payload is not valid JSON"));
        assert!(with(&|d| d.max_attempts = Some(0)).contains("max_attempts"));
        let keep_twice = with(&|d| {
            d.on_error = OnError::Keep;
            d.max_attempts = Some(2);
        });
        assert!(keep_twice.contains("on_error = retry"), "{keep_twice}");
        assert!(with(&|d| d.timeout = Some(Duration::ZERO)).contains("timeout"));
        assert!(with(&|d| d.jitter = Duration::from_secs(86_401)).contains("jitter"));
        let t = |s: i64| DateTime::from_timestamp(s, 0).unwrap();
        let backwards = with(&|d| {
            d.start_at = Some(t(2_000_000_000));
            d.end_at = Some(t(1_900_000_000));
        });
        assert!(backwards.contains("is before start"), "{backwards}");
    }

    #[test]
    fn spec_errors_stay_spec_errors() {
        let d = ScheduleDef::new("x", "k", "every banana");
        assert!(matches!(d.validate(), Err(Error::Spec { .. })));
        let d = ScheduleDef::new("x", "k", "daily at 02:30").time_zone("Mars/Base");
        assert!(matches!(d.validate(), Err(Error::Spec { .. })));
    }

    #[test]
    fn a_section_becomes_a_definition() {
        let s: ScheduleSection = toml::from_str(
            "kind = \"report\"\nspec = \"30 2 * * *\"\npayload = { format = \"pdf\" }\n\
             timeout = \"5m\"\nstart = \"2030-01-01T00:00:00Z\"\noverlap = \"skip\"\n",
        )
        .unwrap();
        let d = s.to_def("nightly").unwrap();
        assert_eq!(d.payload, r#"{"format":"pdf"}"#);
        assert_eq!(d.timeout, Some(Duration::from_secs(300)));
        assert_eq!(d.overlap, Overlap::Skip);
        assert_eq!(d.misfire, Misfire::Once);
        assert_eq!(d.start_at, DateTime::from_timestamp(1_893_456_000, 0));

        let bad = ScheduleSection {
            start: Some("tomorrow".into()),
            ..s
        };
        let e = bad.to_def("nightly").unwrap_err();
        assert!(
            matches!(&e, Error::ScheduleInvalid { reason, .. } if reason.contains("RFC 3339")),
            "{e}"
        );
        let sections = BTreeMap::from([("nightly".to_string(), bad)]);
        let e = validate_sections(&sections).unwrap_err();
        assert!(
            e.starts_with("schedules.nightly: schedule \"nightly\": start"),
            "{e}"
        );
    }
}
