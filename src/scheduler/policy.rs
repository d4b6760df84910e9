//! Policy decisions, as pure functions of a schedule's state and `now`: which planned times a tick turns
//! into jobs (overlap, misfire, window, per-tick budget), and what a finished run does to the schedule
//! (error policy, broken after N failures). The scheduler reads the facts, calls these, and writes the
//! result under its conditional update; nothing here touches the database or the clock.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::def::{Misfire, OnError, Overlap, ScheduleState};
use super::spec::Spec;

/// Why a run was created. Stored in `jobq_schedule_runs.cause`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// Its planned time came.
    Scheduled,
    /// A planned time that passed while no scheduler ran (or while the previous run held it back).
    CatchUp,
    /// The scheduler started (`at_startup` schedules).
    Startup,
    /// An operator asked (`jobq schedule run-now`).
    Manual,
}

impl Cause {
    /// The value stored in the `cause` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Scheduled => "scheduled",
            Cause::CatchUp => "catch_up",
            Cause::Startup => "startup",
            Cause::Manual => "manual",
        }
    }
}

/// What one due schedule looks like to a tick.
#[derive(Debug, Clone)]
pub struct DueInput<'a> {
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
pub enum Decision {
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
pub const COUNT_LIMIT: u64 = 10_000;

/// Decides what a tick does with a due schedule.
pub fn decide(i: &DueInput<'_>) -> Decision {
    let horizon = match i.end_at {
        Some(end) => end.min(i.now),
        None => i.now,
    };
    let in_window = |t: &DateTime<Utc>| storable(t) && i.end_at.is_none_or(|end| *t <= end);
    let next_after = |t: DateTime<Utc>| i.spec.next_after(t, i.anchor).filter(in_window);

    // Planned times now due: next_run_at, then every later one up to the horizon.
    let latest = if i.next_run_at > horizon {
        // Only possible when the window ended before next_run_at: nothing more can run.
        None
    } else {
        Some(
            i.spec
                .last_at_or_before(horizon, i.anchor)
                .filter(|t| *t >= i.next_run_at)
                .unwrap_or(i.next_run_at),
        )
    };
    let Some(latest) = latest else {
        return Decision::Advance {
            fire: vec![],
            next_run_at: None,
            skipped: 0,
        };
    };
    let after_now = next_after(i.now.max(latest));

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
    let on_time =
        |t: DateTime<Utc>| i.now - t <= TimeDelta::from_std(i.grace).unwrap_or(TimeDelta::MAX);
    let cause = |t: DateTime<Utc>| {
        if on_time(t) {
            Cause::Scheduled
        } else {
            Cause::CatchUp
        }
    };
    match i.misfire {
        Misfire::Once => Decision::Advance {
            fire: vec![(latest, cause(latest))],
            next_run_at: after_now,
            skipped: count_between(i, i.next_run_at, latest).saturating_sub(1),
        },
        Misfire::Skip => {
            let fire = if on_time(latest) {
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
        Misfire::All => {
            // The newest `max_catch_up` due times, walking back from the latest: bounded however long
            // the outage was. Older ones are skipped.
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
            let fire: Vec<_> = due[..take].iter().map(|t| (*t, cause(*t))).collect();
            let next_run_at = if take < due.len() {
                // The rest stay due for the next tick.
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
pub fn first_run(
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
pub fn storable(t: &DateTime<Utc>) -> bool {
    t.timestamp() <= *crate::job::TIMESTAMP_RANGE.end()
}

/// How a run's job ended, as the scheduler sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The job is done.
    Done,
    /// The job is dead (failed its last attempt).
    Failed,
    /// The job was cancelled (`jobq schedule abort`, `jobq jobs cancel`).
    Cancelled,
    /// The job row is gone (deleted by hand); nothing is known.
    Missing,
}

impl Outcome {
    /// The value stored in `jobq_schedule_runs.outcome`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::Failed => "dead",
            Outcome::Cancelled => "cancelled",
            Outcome::Missing => "missing",
        }
    }
}

/// A schedule's state and failure count after one of its runs ended.
///
/// Only a run that ends dead is a failure: it adds one to the count, pauses the schedule under the
/// `pause` policy, and breaks it once the count reaches `broken_after` (DBMS_JOB's rule, 16 by default).
/// A run that is done resets the count. Cancelled and missing runs change nothing: an operator's abort is
/// not the job's failure. A schedule that is no longer enabled keeps its state (an operator's pause, or
/// `finished`), except that reaching `broken_after` marks it broken whatever it was.
pub fn after_outcome(
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
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn t(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2030, 1, 1, h, m, s).unwrap()
    }

    fn input<'a>(spec: &'a Spec, next: DateTime<Utc>, now: DateTime<Utc>) -> DueInput<'a> {
        DueInput {
            spec,
            anchor: t(0, 0, 0),
            next_run_at: next,
            end_at: None,
            now,
            active_runs: 0,
            overlap: Overlap::Wait,
            misfire: Misfire::Once,
            grace: Duration::from_secs(60),
            max_catch_up: 100,
            budget: 100,
        }
    }

    fn minutely() -> Spec {
        Spec::parse("* * * * *", "UTC").unwrap()
    }

    #[test]
    fn an_on_time_run_fires_under_every_misfire_policy() {
        let s = minutely();
        for misfire in [Misfire::Once, Misfire::All, Misfire::Skip] {
            let d = decide(&DueInput {
                misfire,
                ..input(&s, t(1, 0, 0), t(1, 0, 0) + TimeDelta::milliseconds(300))
            });
            assert_eq!(
                d,
                Decision::Advance {
                    fire: vec![(t(1, 0, 0), Cause::Scheduled)],
                    next_run_at: Some(t(1, 1, 0)),
                    skipped: 0
                },
                "{misfire:?}"
            );
        }
    }

    #[test]
    fn misfire_once_runs_the_latest_missed_time_once() {
        let s = minutely();
        // Down from 01:00 to 03:00:30: 121 planned times passed.
        let d = decide(&input(&s, t(1, 0, 0), t(3, 0, 30)));
        assert_eq!(
            d,
            Decision::Advance {
                fire: vec![(t(3, 0, 0), Cause::Scheduled)],
                next_run_at: Some(t(3, 1, 0)),
                skipped: 120
            }
        );
        // The latest was itself late: a catch-up.
        let daily = Spec::parse("daily at 00:30", "UTC").unwrap();
        let d = decide(&input(&daily, t(0, 30, 0), t(5, 0, 0)));
        assert!(
            matches!(&d, Decision::Advance { fire, .. } if fire == &[(t(0, 30, 0), Cause::CatchUp)]),
            "{d:?}"
        );
    }

    #[test]
    fn misfire_skip_runs_nothing_late() {
        let daily = Spec::parse("daily at 00:30", "UTC").unwrap();
        let d = decide(&DueInput {
            misfire: Misfire::Skip,
            ..input(&daily, t(0, 30, 0), t(5, 0, 0))
        });
        assert_eq!(
            d,
            Decision::Advance {
                fire: vec![],
                next_run_at: Some(Utc.with_ymd_and_hms(2030, 1, 2, 0, 30, 0).unwrap()),
                skipped: 1
            }
        );
        // Many missed, the latest on time: that one runs.
        let s = minutely();
        let d = decide(&DueInput {
            misfire: Misfire::Skip,
            ..input(&s, t(1, 0, 0), t(3, 0, 10))
        });
        assert!(
            matches!(&d, Decision::Advance { fire, skipped: 120, .. } if fire == &[(t(3, 0, 0), Cause::Scheduled)]),
            "{d:?}"
        );
    }

    #[test]
    fn misfire_all_makes_up_each_time_but_never_floods() {
        let s = minutely();
        let d = decide(&DueInput {
            misfire: Misfire::All,
            ..input(&s, t(1, 0, 0), t(1, 4, 30))
        });
        let Decision::Advance {
            fire,
            next_run_at,
            skipped,
        } = d
        else {
            panic!()
        };
        assert_eq!(
            fire.iter().map(|f| f.0).collect::<Vec<_>>(),
            [t(1, 0, 0), t(1, 1, 0), t(1, 2, 0), t(1, 3, 0), t(1, 4, 0)]
        );
        assert_eq!(fire[0].1, Cause::CatchUp);
        assert_eq!(fire[4].1, Cause::Scheduled);
        assert_eq!((next_run_at, skipped), (Some(t(1, 5, 0)), 0));

        // A day's outage of a per-minute schedule: only the newest max_catch_up run.
        let d = decide(&DueInput {
            misfire: Misfire::All,
            max_catch_up: 10,
            ..input(&s, t(0, 0, 0), t(23, 59, 30))
        });
        let Decision::Advance { fire, skipped, .. } = d else {
            panic!()
        };
        assert_eq!(fire.len(), 10);
        assert_eq!(fire[0].0, t(23, 50, 0));
        assert_eq!(skipped, 24 * 60 - 10);

        // The tick budget cuts the batch; the rest stay due.
        let d = decide(&DueInput {
            misfire: Misfire::All,
            budget: 2,
            ..input(&s, t(1, 0, 0), t(1, 4, 30))
        });
        let Decision::Advance {
            fire, next_run_at, ..
        } = d
        else {
            panic!()
        };
        assert_eq!(fire.len(), 2);
        assert_eq!(next_run_at, Some(t(1, 2, 0)));
    }

    #[test]
    fn overlap_policies() {
        let s = minutely();
        let busy = |overlap| DueInput {
            overlap,
            active_runs: 1,
            ..input(&s, t(1, 0, 0), t(1, 0, 1))
        };
        assert_eq!(decide(&busy(Overlap::Wait)), Decision::Hold);
        assert_eq!(
            decide(&busy(Overlap::Skip)),
            Decision::Advance {
                fire: vec![],
                next_run_at: Some(t(1, 1, 0)),
                skipped: 1
            }
        );
        assert!(matches!(
            decide(&busy(Overlap::Allow)),
            Decision::Advance { fire, .. } if fire.len() == 1
        ));
        assert_eq!(
            decide(&DueInput {
                budget: 0,
                ..input(&s, t(1, 0, 0), t(1, 0, 1))
            }),
            Decision::Hold
        );
    }

    #[test]
    fn the_window_end_finishes_the_schedule() {
        let s = minutely();
        // The end falls between this run and the next: run, then finish.
        let d = decide(&DueInput {
            end_at: Some(t(1, 0, 30)),
            ..input(&s, t(1, 0, 0), t(1, 0, 1))
        });
        assert_eq!(
            d,
            Decision::Advance {
                fire: vec![(t(1, 0, 0), Cause::Scheduled)],
                next_run_at: None,
                skipped: 0
            }
        );
        // Down past the end: catch up at most the last time inside the window.
        let d = decide(&DueInput {
            end_at: Some(t(1, 5, 0)),
            ..input(&s, t(1, 0, 0), t(2, 0, 0))
        });
        assert!(
            matches!(&d, Decision::Advance { fire, next_run_at: None, .. } if fire == &[(t(1, 5, 0), Cause::CatchUp)]),
            "{d:?}"
        );
        // A once spec has nothing after its run.
        let once = Spec::parse("once at 2030-01-01 01:00", "UTC").unwrap();
        assert!(matches!(
            decide(&input(&once, t(1, 0, 0), t(1, 0, 0))),
            Decision::Advance { next_run_at: None, fire, .. } if fire.len() == 1
        ));
    }

    #[test]
    fn first_run_respects_the_window() {
        let s = minutely();
        let a = t(0, 0, 0);
        assert_eq!(first_run(&s, a, None, None, t(1, 0, 30)), Some(t(1, 1, 0)));
        assert_eq!(
            first_run(&s, a, Some(t(2, 0, 0)), None, t(1, 0, 30)),
            Some(t(2, 0, 0))
        );
        assert_eq!(
            first_run(&s, a, Some(t(0, 0, 0)), None, t(1, 0, 30)),
            Some(t(1, 1, 0))
        );
        assert_eq!(first_run(&s, a, None, Some(t(1, 0, 45)), t(1, 0, 30)), None);
        let iv = Spec::parse("every 10m", "UTC").unwrap();
        assert_eq!(
            first_run(&iv, t(2, 0, 0), Some(t(2, 0, 0)), None, t(1, 0, 30)),
            Some(t(2, 0, 0))
        );
    }

    #[test]
    fn nothing_is_planned_past_the_timestamp_limit() {
        let once = Spec::parse("once at 2040-01-01 00:00", "UTC").unwrap();
        assert_eq!(first_run(&once, t(0, 0, 0), None, None, t(0, 0, 0)), None);
        let hourly = Spec::parse("every 1h", "UTC").unwrap();
        let last = DateTime::from_timestamp(i64::from(i32::MAX), 0).unwrap();
        let now = last - TimeDelta::minutes(30);
        assert_eq!(first_run(&hourly, now, None, None, now), None);
        let d = decide(&DueInput {
            anchor: now - TimeDelta::hours(1),
            ..input(&hourly, now, now)
        });
        assert!(
            matches!(&d, Decision::Advance { next_run_at: None, fire, .. } if fire.len() == 1),
            "{d:?}"
        );
        let mut def = crate::scheduler::ScheduleDef::new("x", "k", "every 1h");
        def.end_at = Some(DateTime::from_timestamp(2_300_000_000, 0).unwrap());
        let e = def.validate().unwrap_err().to_string();
        assert!(e.contains("outside what a TIMESTAMP holds"), "{e}");
    }

    #[test]
    fn failures_pause_and_break() {
        use ScheduleState::*;
        assert_eq!(
            after_outcome(Enabled, 3, Outcome::Done, OnError::Retry, 16),
            (Enabled, 0)
        );
        assert_eq!(
            after_outcome(Enabled, 3, Outcome::Failed, OnError::Retry, 16),
            (Enabled, 4)
        );
        assert_eq!(
            after_outcome(Enabled, 15, Outcome::Failed, OnError::Keep, 16),
            (Broken, 16)
        );
        assert_eq!(
            after_outcome(Enabled, 0, Outcome::Failed, OnError::Pause, 16),
            (Paused, 1)
        );
        assert_eq!(
            after_outcome(Enabled, 2, Outcome::Cancelled, OnError::Pause, 16),
            (Enabled, 2)
        );
        assert_eq!(
            after_outcome(Finished, 0, Outcome::Failed, OnError::Pause, 16),
            (Finished, 1)
        );
        // broken_after = 0 never breaks.
        assert_eq!(
            after_outcome(Enabled, 100, Outcome::Failed, OnError::Keep, 0),
            (Enabled, 101)
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Whatever the outage, policy and budget: fired times are planned times in order, inside
        /// (next_run_at ..= now], never more than the budget or max_catch_up, and next_run_at moves
        /// forward past everything fired.
        #[test]
        fn decisions_are_bounded_and_ordered(
            iv in 1i64..7200, behind in 0i64..200_000, budget in 0u32..50, cap in 1u32..30,
            misfire in prop::sample::select(vec![Misfire::Once, Misfire::All, Misfire::Skip]),
        ) {
            let spec = Spec::parse(&format!("every {iv}s"), "UTC").unwrap();
            let anchor = t(0, 0, 0);
            let next = anchor + TimeDelta::seconds(iv);
            let now = next + TimeDelta::seconds(behind);
            let d = decide(&DueInput { misfire, budget, max_catch_up: cap, anchor, ..input(&spec, next, now) });
            match d {
                Decision::Hold => prop_assert_eq!(budget, 0),
                Decision::Advance { fire, next_run_at, .. } => {
                    prop_assert!(fire.len() as u32 <= budget.min(cap));
                    for w in fire.windows(2) { prop_assert!(w[0].0 < w[1].0); }
                    for (f, _) in &fire {
                        prop_assert!(*f >= next && *f <= now);
                        prop_assert_eq!((*f - anchor).num_seconds() % iv, 0);
                    }
                    let n = next_run_at.unwrap();
                    prop_assert!(n > next);
                    if let Some((last, _)) = fire.last() { prop_assert!(n > *last); }
                    if misfire != Misfire::All { prop_assert!(n > now); }
                }
            }
        }
    }
}
