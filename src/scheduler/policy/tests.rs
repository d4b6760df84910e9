//! The policy tests: one per rule of `decide` and `after_outcome`, and a property test of
//! `decide` over outages, budgets and misfire policies.

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
    let mut def = crate::schedule::ScheduleDef::new("x", "k", "every 1h");
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
