//! Policy decisions, as pure functions of a schedule's state and `now`: which planned times a tick turns
//! into jobs (overlap, misfire, window, per-tick budget), and what a finished run does to the schedule
//! (error policy, broken after N failures). The scheduler reads the facts, calls these, and writes the
//! result under its conditional update; nothing here touches the database or the clock.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::schedule::{Cause, Misfire, OnError, Outcome, Overlap, ScheduleState, Spec};

/// What one due schedule looks like to a tick.
#[derive(Debug, Clone)]
pub(crate) struct DueInput<'a> {
    /// The parsed spec.
    pub spec: &'a Spec,
    /// Phase of interval specs.
    pub anchor: DateTime<Utc>,
    /// The planned time the schedule row says is next (at or before `now`, or it would not be due).
    pub next_run_at: DateTime<Utc>,
    /// End of the window, if any.
    pub end_at: Option<DateTime<Utc>>,
    /// The tick's time.
    pub now: DateTime<Utc>,
    /// Runs of this schedule whose jobs have not ended.
    pub active_runs: u64,
    /// Overlap policy.
    pub overlap: Overlap,
    /// Misfire policy.
    pub misfire: Misfire,
    /// How late a planned time may be and still count as on time.
    pub grace: Duration,
    /// Most missed runs the `all` policy makes up for.
    pub max_catch_up: u32,
    /// Jobs this tick may still create.
    pub budget: u32,
}

/// What a tick does with one due schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Leave the schedule as it is: the previous run is still going (overlap `wait`), or this tick's job
    /// budget is spent. It stays due and is looked at again next tick.
    Hold,
    /// Create a job for each of `fire` (possibly none), then set `next_run_at` (None: the schedule is
    /// finished). `skipped` counts planned times passed over without a job.
    Advance {
        /// Planned times to create jobs for, in order.
        fire: Vec<(DateTime<Utc>, Cause)>,
        /// The next planned time, or None when there is none left in the window.
        next_run_at: Option<DateTime<Utc>>,
        /// Planned times skipped (at least this many; counting stops at [`COUNT_LIMIT`]).
        skipped: u64,
    },
}

/// Skipped planned times are counted up to this many per decision (a long outage of a per-second
/// schedule would otherwise make the count itself expensive).
pub(crate) const COUNT_LIMIT: u64 = 10_000;

/// Decides what a tick does with a due schedule.
pub(crate) fn decide(i: &DueInput<'_>) -> Decision {
    let Some(latest) = latest_due(i) else {
        return Decision::Advance {
            fire: vec![],
            next_run_at: None,
            skipped: 0,
        };
    };
    let after_now = next_in_window(i, i.now.max(latest));

    if i.active_runs > 0 {
        match i.overlap {
            Overlap::Wait => return Decision::Hold,
            Overlap::Skip => {
                return Decision::Advance {
                    fire: vec![],
                    next_run_at: after_now,
                    skipped: count_between(i, i.next_run_at, latest),
                };
            }
            Overlap::Allow => {}
        }
    }
    if i.budget == 0 {
        return Decision::Hold;
    }
    match i.misfire {
        Misfire::Once => Decision::Advance {
            fire: vec![(latest, cause(i, latest))],
            next_run_at: after_now,
            skipped: count_between(i, i.next_run_at, latest).saturating_sub(1),
        },
        Misfire::Skip => {
            let fire = if on_time(i, latest) {
                vec![(latest, Cause::Scheduled)]
            } else {
                vec![]
            };
            Decision::Advance {
                skipped: count_between(i, i.next_run_at, latest).saturating_sub(fire.len() as u64),
                fire,
                next_run_at: after_now,
            }
        }
        Misfire::All => catch_up_all(i, latest, after_now),
    }
}

/// The latest planned time now due: `next_run_at`, or a later one up to now (or the window's end).
/// None when the window ended before `next_run_at`: nothing more can run.
fn latest_due(i: &DueInput<'_>) -> Option<DateTime<Utc>> {
    let horizon = match i.end_at {
        Some(end) => end.min(i.now),
        None => i.now,
    };
    if i.next_run_at > horizon {
        return None;
    }
    Some(
        i.spec
            .last_at_or_before(horizon, i.anchor)
            .filter(|t| *t >= i.next_run_at)
            .unwrap_or(i.next_run_at),
    )
}

/// The first planned time after `t` that the window (and the TIMESTAMP column) still holds.
fn next_in_window(i: &DueInput<'_>, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    i.spec
        .next_after(t, i.anchor)
        .filter(|t| storable(t) && i.end_at.is_none_or(|end| *t <= end))
}

/// True when `t` is still within the misfire grace: its run is on time, not a catch-up.
fn on_time(i: &DueInput<'_>, t: DateTime<Utc>) -> bool {
    i.now - t <= TimeDelta::from_std(i.grace).unwrap_or(TimeDelta::MAX)
}

fn cause(i: &DueInput<'_>, t: DateTime<Utc>) -> Cause {
    if on_time(i, t) {
        Cause::Scheduled
    } else {
        Cause::CatchUp
    }
}

/// Misfire `all`: a run for each of the newest `max_catch_up` due times, walking back from `latest`,
/// so the catch-up is bounded however long the outage was; older ones are skipped. At most `budget`
/// runs now; the rest stay due for the next tick.
fn catch_up_all(
    i: &DueInput<'_>,
    latest: DateTime<Utc>,
    after_now: Option<DateTime<Utc>>,
) -> Decision {
    let keep = i.max_catch_up.max(1) as usize;
    let mut due = vec![latest];
    while due.len() < keep {
        let before = *due.last().expect("non-empty") - TimeDelta::microseconds(1);
        match i.spec.last_at_or_before(before, i.anchor) {
            Some(t) if t >= i.next_run_at => due.push(t),
            _ => break,
        }
    }
    due.reverse();
    let oldest_kept = due[0];
    let skipped = if oldest_kept > i.next_run_at {
        count_between(i, i.next_run_at, oldest_kept).saturating_sub(1)
    } else {
        0
    };
    let take = due.len().min(i.budget as usize);
    let fire: Vec<_> = due[..take].iter().map(|t| (*t, cause(i, *t))).collect();
    let next_run_at = if take < due.len() {
        Some(due[take])
    } else {
        after_now
    };
    Decision::Advance {
        fire,
        next_run_at,
        skipped,
    }
}

/// Planned times in `[from, to]`, counted up to [`COUNT_LIMIT`].
fn count_between(i: &DueInput<'_>, from: DateTime<Utc>, to: DateTime<Utc>) -> u64 {
    if from > to {
        return 0;
    }
    let mut n = 1;
    let mut t = from;
    while n < COUNT_LIMIT {
        match i.spec.next_after(t, i.anchor) {
            Some(next) if next <= to => {
                n += 1;
                t = next;
            }
            _ => break,
        }
    }
    n
}

/// The first planned time of a schedule whose spec was just set (created, changed, or resumed): the
/// first at or after the start of the window when that is still ahead, else the first after `now`;
/// None when it falls past the end of the window (or a `once` time has passed).
pub(crate) fn first_run(
    spec: &Spec,
    anchor: DateTime<Utc>,
    start_at: Option<DateTime<Utc>>,
    end_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let t = match start_at {
        Some(start) if start > now => spec.first_at_or_after(start, anchor),
        _ => spec.next_after(now, anchor),
    }?;
    (storable(&t) && end_at.is_none_or(|end| t <= end)).then_some(t)
}

/// True for instants a TIMESTAMP column holds (up to 2038-01-19 03:14:07 UTC on MySQL 8 and MariaDB
/// before 11.5). A later planned time cannot be stored (MariaDB would silently store the current time
/// instead, and the run would happen at once), so a schedule whose next time is past it is finished.
pub(crate) fn storable(t: &DateTime<Utc>) -> bool {
    t.timestamp() <= *crate::job::TIMESTAMP_RANGE.end()
}

/// A schedule's state and failure count after one of its runs ended.
///
/// Only a run that ends dead is a failure: it adds one to the count, pauses the schedule under the
/// `pause` policy, and breaks it once the count reaches `broken_after` (DBMS_JOB's rule, 16 by default).
/// A run that is done resets the count. Cancelled and missing runs change nothing: an operator's abort is
/// not the job's failure. A schedule that is no longer enabled keeps its state (an operator's pause, or
/// `finished`), except that reaching `broken_after` marks it broken whatever it was.
pub(crate) fn after_outcome(
    state: ScheduleState,
    failures: u32,
    outcome: Outcome,
    on_error: OnError,
    broken_after: u32,
) -> (ScheduleState, u32) {
    match outcome {
        Outcome::Done => (state, 0),
        Outcome::Cancelled | Outcome::Missing => (state, failures),
        Outcome::Failed => {
            let failures = failures.saturating_add(1);
            let state = if broken_after > 0 && failures >= broken_after {
                ScheduleState::Broken
            } else if on_error == OnError::Pause && state == ScheduleState::Enabled {
                ScheduleState::Paused
            } else {
                state
            };
            (state, failures)
        }
    }
}

#[cfg(test)]
mod tests;
