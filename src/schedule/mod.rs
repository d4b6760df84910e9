//! What a schedule is, as plain data: its definition ([`ScheduleDef`], from code, the CLI or a
//! `[schedules.NAME]` section of `jobq.toml`), its spec and planned times ([`Spec`]), its policies and
//! states, why a run was made and how it ended, and the rows the database keeps for it
//! ([`ScheduleRecord`], [`RunRecord`]).
//!
//! This is the leaf the scheduling code builds on, as `job.rs` is for jobs: `db::schedule` stores these
//! types and the [`Scheduler`](crate::Scheduler) decides with them, and nothing here does I/O or
//! depends on either.

/// An enum stored as text: `as_str` is the value in the database and on the command line, `FromStr`
/// and `Deserialize` (config files) accept exactly those values, and an unknown one is an error that
/// lists them, naming the type as `$what` ("on error").
macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident ($what:literal) { $($(#[$vm:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
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

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::error::Error;
            fn from_str(s: &str) -> $crate::error::Result<Self> {
                $name::ALL.iter().copied().find(|v| v.as_str() == s.trim()).ok_or_else(|| {
                    $crate::error::Error::invalid(
                        $what,
                        format!(
                            "{s:?} is not one of {}",
                            $name::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", ")
                        ),
                    )
                })
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> ::std::result::Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> ::std::result::Result<Self, D::Error> {
                let s = <String as ::serde::Deserialize>::deserialize(d)?;
                s.parse().map_err(|e: $crate::error::Error| ::serde::de::Error::custom(e.to_string()))
            }
        }
    };
}

mod def;
mod log;
mod record;
mod spec;

pub(crate) use def::validate_sections;
pub use def::{ScheduleDef, ScheduleSection};
pub use log::{LIBRARY_ACTOR, LogAction, SCHEDULER_ACTOR, ScheduleLogEntry};
pub use record::{RunRecord, ScheduleRecord};
pub use spec::Spec;

use crate::job::State;

string_enum! {
    /// What happens when a run's planned time comes while the previous run's job has not ended.
    ///
    /// The default is `wait`, as in pg_cron and DBMS_JOB: runs of one schedule never go side by side
    /// (most periodic jobs are not written to run concurrently with themselves), and the missed time is
    /// not lost: it runs as soon as the previous run ends. It cannot pile up either: however many times
    /// passed meanwhile, the misfire policy decides how many run (`once` by default: one).
    Overlap ("overlap") {
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
    OnError ("on error") {
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
    Misfire ("misfire") {
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
    ScheduleState ("schedule state") {
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

string_enum! {
    /// Why a run was created. Stored in `jobq_schedule_runs.cause`.
    Cause ("cause") {
        /// Its planned time came.
        Scheduled = "scheduled",
        /// A planned time that passed while no scheduler ran (or while the previous run held it back).
        CatchUp = "catch_up",
        /// The scheduler started (`at_startup` schedules).
        Startup = "startup",
        /// An operator asked (`jobq schedule run-now`).
        Manual = "manual",
    }
}

string_enum! {
    /// How a run's job ended, as the scheduler sees it. Stored in `jobq_schedule_runs.outcome`.
    Outcome ("outcome") {
        /// The job is done.
        Done = "done",
        /// The job is dead (failed its last attempt).
        Failed = "dead",
        /// The job was cancelled (`jobq schedule abort`, `jobq jobs cancel`).
        Cancelled = "cancelled",
        /// The job row is gone (deleted by hand); nothing is known.
        Missing = "missing",
    }
}

impl Outcome {
    /// The outcome of a run whose job is in `job` (None: the job row is gone), or None while the job
    /// has not ended.
    pub fn of_job(job: Option<State>) -> Option<Outcome> {
        match job {
            None => Some(Outcome::Missing),
            Some(State::Done) => Some(Outcome::Done),
            Some(State::Dead) => Some(Outcome::Failed),
            Some(State::Cancelled) => Some(Outcome::Cancelled),
            Some(State::Waiting | State::Queued | State::Retry | State::Running) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T>(all: &[T])
    where
        T: Copy + PartialEq + std::fmt::Debug + std::fmt::Display + std::str::FromStr,
        T::Err: std::fmt::Debug,
    {
        for v in all {
            assert_eq!(v.to_string().parse::<T>().unwrap(), *v);
        }
    }

    #[test]
    fn stored_values_round_trip() {
        round_trip(Overlap::ALL);
        round_trip(OnError::ALL);
        round_trip(Misfire::ALL);
        round_trip(ScheduleState::ALL);
        round_trip(Cause::ALL);
        round_trip(Outcome::ALL);
        assert_eq!(Outcome::Failed.as_str(), "dead");
        assert_eq!(Cause::CatchUp.as_str(), "catch_up");
        assert_eq!(" skip ".parse::<Overlap>().unwrap(), Overlap::Skip);
    }

    #[test]
    fn an_unknown_value_lists_the_known_ones() {
        let e = "sometimes".parse::<Misfire>().unwrap_err().to_string();
        assert_eq!(
            e,
            "invalid misfire: \"sometimes\" is not one of once, all, skip"
        );
        #[derive(Debug, serde::Deserialize)]
        struct Section {
            #[allow(dead_code)]
            overlap: Overlap,
        }
        let e = toml::from_str::<Section>("overlap = \"never\"")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"never\" is not one of wait, skip, allow"),
            "{e}"
        );
        let e = "x".parse::<ScheduleState>().unwrap_err().to_string();
        assert!(e.starts_with("invalid schedule state: \"x\""), "{e}");
    }

    #[test]
    fn only_ended_jobs_have_an_outcome() {
        assert_eq!(Outcome::of_job(None), Some(Outcome::Missing));
        assert_eq!(Outcome::of_job(Some(State::Done)), Some(Outcome::Done));
        assert_eq!(Outcome::of_job(Some(State::Dead)), Some(Outcome::Failed));
        assert_eq!(
            Outcome::of_job(Some(State::Cancelled)),
            Some(Outcome::Cancelled)
        );
        for s in [State::Queued, State::Retry, State::Running] {
            assert_eq!(Outcome::of_job(Some(s)), None, "{s}");
        }
    }
}
