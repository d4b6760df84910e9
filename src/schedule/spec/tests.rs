//! The spec tests: parsing and its errors, calendar phrases, DST gaps and folds, anchored
//! intervals, and properties of next times.

use super::*;
use chrono::Datelike;
use proptest::prelude::*;

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
}

fn at(tz: &str, y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
    let tz: Tz = tz.parse().unwrap();
    tz.with_ymd_and_hms(y, mo, d, h, mi, 0)
        .earliest()
        .unwrap()
        .with_timezone(&Utc)
}

fn next_n(spec: &str, tz: &str, from: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
    Spec::parse(spec, tz).unwrap().upcoming(from, from, n)
}

fn err(spec: &str, tz: &str) -> String {
    Spec::parse(spec, tz).unwrap_err().to_string()
}

#[test]
fn five_and_six_field_expressions() {
    let t = utc(2030, 1, 1, 0, 0, 0);
    assert_eq!(
        next_n("30 2 * * *", "UTC", t, 2),
        [utc(2030, 1, 1, 2, 30, 0), utc(2030, 1, 2, 2, 30, 0)]
    );
    assert_eq!(
        next_n("*/10 * * * * *", "UTC", t, 3),
        [
            utc(2030, 1, 1, 0, 0, 10),
            utc(2030, 1, 1, 0, 0, 20),
            utc(2030, 1, 1, 0, 0, 30)
        ]
    );
    assert_eq!(next_n("@daily", "UTC", t, 1), [utc(2030, 1, 2, 0, 0, 0)]);
    assert_eq!(
        next_n("0 9 * * MON-FRI", "UTC", utc(2030, 1, 4, 12, 0, 0), 2),
        [utc(2030, 1, 7, 9, 0, 0), utc(2030, 1, 8, 9, 0, 0)]
    );
}

#[test]
fn errors_name_the_field_and_token() {
    let e = err("0 25 * * *", "UTC");
    assert!(
        e.contains("field 2 (hour)") && e.contains("\"25\"") && e.contains("0-23"),
        "{e}"
    );
    let e = err("0 3 1,2,x * *", "UTC");
    assert!(
        e.contains("field 3 (day of month)") && e.contains("\"x\""),
        "{e}"
    );
    let e = err("61 * * * * *", "UTC");
    assert!(e.contains("field 1 (second)"), "{e}");
    let e = err("*/0 * * * *", "UTC");
    assert!(e.contains("field 1 (minute)") && e.contains("step"), "{e}");
    let e = err("* * * *", "UTC");
    assert!(e.contains("has 4"), "{e}");
    let e = err("0 0 0 1 1 * 2030", "UTC");
    assert!(e.contains("has 7"), "{e}");
    let e = err("0 3 30 2 *", "UTC");
    assert!(e.contains("never matches"), "{e}");
    let e = err("@weird", "UTC");
    assert!(e.contains("nickname"), "{e}");
    let e = err("0 3 * * *", "Europe/Pariss");
    assert!(e.contains("unknown time zone \"Europe/Pariss\""), "{e}");
    assert!(err("", "UTC").contains("empty spec"));
}

#[test]
fn calendar_phrases() {
    let t = utc(2030, 1, 30, 12, 0, 0);
    assert_eq!(
        next_n("daily at 02:30", "UTC", t, 1),
        [utc(2030, 1, 31, 2, 30, 0)]
    );
    // 2030-01-30 is a Wednesday.
    assert_eq!(
        next_n("weekly on mon at 09:00", "UTC", t, 2),
        [utc(2030, 2, 4, 9, 0, 0), utc(2030, 2, 11, 9, 0, 0)]
    );
    assert_eq!(
        next_n("monthly on 1 at 00:00:30", "UTC", t, 1),
        [utc(2030, 2, 1, 0, 0, 30)]
    );
    let e = err("monthly on 0 at 10:00", "UTC");
    assert!(e.contains("day of month \"0\""), "{e}");
    let e = err("weekly on funday at 10:00", "UTC");
    assert!(e.contains("weekday \"funday\""), "{e}");
    let e = err("daily at 25:00", "UTC");
    assert!(e.contains("time \"25:00\""), "{e}");
    let e = err("daily 10:00", "UTC");
    assert!(e.contains("expected `daily at HH:MM`"), "{e}");
}

#[test]
fn last_day_of_month_and_leap_years() {
    let from = utc(2027, 12, 15, 0, 0, 0);
    let got = next_n("monthly on -1 at 23:00", "UTC", from, 4);
    assert_eq!(
        got,
        [
            utc(2027, 12, 31, 23, 0, 0),
            utc(2028, 1, 31, 23, 0, 0),
            utc(2028, 2, 29, 23, 0, 0), // 2028 is a leap year
            utc(2028, 3, 31, 23, 0, 0),
        ]
    );
    assert_eq!(
        next_n("0 0 L 2 *", "UTC", utc(2029, 1, 1, 0, 0, 0), 1),
        [utc(2029, 2, 28, 0, 0, 0)]
    );
    // 31 is skipped by months without it.
    let got = next_n("monthly on 31 at 00:00", "UTC", utc(2030, 3, 1, 0, 0, 0), 3);
    assert_eq!(
        got,
        [
            utc(2030, 3, 31, 0, 0, 0),
            utc(2030, 5, 31, 0, 0, 0),
            utc(2030, 7, 31, 0, 0, 0)
        ]
    );
    // February 29 only in leap years; 2100 is not one.
    let got = next_n("0 12 29 2 *", "UTC", utc(2029, 1, 1, 0, 0, 0), 2);
    assert_eq!(
        got,
        [utc(2032, 2, 29, 12, 0, 0), utc(2036, 2, 29, 12, 0, 0)]
    );
    let got = next_n("0 12 29 2 *", "UTC", utc(2097, 1, 1, 0, 0, 0), 1);
    assert_eq!(got, [utc(2104, 2, 29, 12, 0, 0)]);
}

#[test]
fn spring_forward_gap_runs_once_at_the_first_valid_time() {
    // Europe/Berlin, 2030-03-31: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist.
    let from = at("Europe/Berlin", 2030, 3, 30, 12, 0);
    let got = next_n("daily at 02:30", "Europe/Berlin", from, 3);
    assert_eq!(
        got,
        [
            at("Europe/Berlin", 2030, 3, 31, 3, 0),
            at("Europe/Berlin", 2030, 4, 1, 2, 30),
            at("Europe/Berlin", 2030, 4, 2, 2, 30),
        ]
    );
    assert_eq!(got[0], utc(2030, 3, 31, 1, 0, 0));
    // America/New_York, 2030-03-10: 02:00 EST jumps to 03:00 EDT.
    let from = at("America/New_York", 2030, 3, 9, 12, 0);
    let got = next_n("30 2 * * *", "America/New_York", from, 2);
    assert_eq!(got[0], utc(2030, 3, 10, 7, 0, 0)); // 03:00 EDT
    assert_eq!(got[1], utc(2030, 3, 11, 6, 30, 0)); // 02:30 EDT
    // An hourly job has nothing to run at in the missing hour.
    let from = at("Europe/Berlin", 2030, 3, 31, 1, 0);
    let got = next_n("0 * * * *", "Europe/Berlin", from, 2);
    assert_eq!(got, [utc(2030, 3, 31, 1, 0, 0), utc(2030, 3, 31, 2, 0, 0)]);
}

#[test]
fn fall_back_fold_runs_a_fixed_time_once() {
    // Europe/Berlin, 2030-10-27: 03:00 CEST goes back to 02:00 CET; 02:30 happens twice.
    let from = at("Europe/Berlin", 2030, 10, 26, 12, 0);
    let got = next_n("daily at 02:30", "Europe/Berlin", from, 3);
    assert_eq!(
        got,
        [
            utc(2030, 10, 27, 0, 30, 0), // 02:30 CEST, the first pass
            utc(2030, 10, 28, 1, 30, 0), // 02:30 CET the next day
            utc(2030, 10, 29, 1, 30, 0),
        ]
    );
    // Starting between the two passes does not give the second one.
    let got = next_n(
        "daily at 02:30",
        "Europe/Berlin",
        utc(2030, 10, 27, 0, 45, 0),
        1,
    );
    assert_eq!(got, [utc(2030, 10, 28, 1, 30, 0)]);
    // America/New_York, 2030-11-03: 01:30 happens twice.
    let from = at("America/New_York", 2030, 11, 2, 12, 0);
    let got = next_n("30 1 * * *", "America/New_York", from, 2);
    assert_eq!(
        got,
        [utc(2030, 11, 3, 5, 30, 0), utc(2030, 11, 4, 6, 30, 0)]
    );
    // An interval-like expression runs on both passes: elapsed time, not an appointment.
    let from = utc(2030, 10, 26, 23, 59, 0);
    let got = next_n("*/30 * * * *", "Europe/Berlin", from, 6);
    let hours: Vec<_> = got.iter().map(|t| (t.hour(), t.minute())).collect();
    assert_eq!(hours, [(0, 0), (0, 30), (1, 0), (1, 30), (2, 0), (2, 30)]);
}

#[test]
fn intervals_are_anchored_and_do_not_drift() {
    let anchor = utc(2030, 1, 1, 0, 0, 7);
    let spec = Spec::parse("every 5m", "UTC").unwrap();
    // However late each run is looked at, the next planned time stays on the grid.
    let mut planned = anchor;
    for i in 0..10_000 {
        let late = TimeDelta::milliseconds((i * 7919) % 290_000);
        let next = spec.next_after(planned + late, anchor).unwrap();
        assert_eq!(next, planned + TimeDelta::minutes(5), "run {i}");
        planned = next;
    }
    assert_eq!(planned, anchor + TimeDelta::minutes(5 * 10_000));
    assert_eq!(
        spec.next_after(utc(2029, 1, 1, 0, 0, 0), anchor),
        Some(anchor)
    );
    assert_eq!(
        spec.last_at_or_before(anchor + TimeDelta::seconds(301), anchor),
        Some(anchor + TimeDelta::minutes(5))
    );
    assert_eq!(
        spec.last_at_or_before(utc(2029, 1, 1, 0, 0, 0), anchor),
        None
    );
    assert!(err("every 500ms", "UTC").contains("shorter than the minimum"));
    assert!(err("every soon", "UTC").contains("interval \"soon\""));
    assert!(err("every", "UTC").contains("needs an interval"));
    // Elapsed time: DST does not move an interval.
    let s = Spec::parse("every 1h", "Europe/Berlin").unwrap();
    let a = utc(2030, 3, 30, 23, 0, 0);
    let got = s.upcoming(a, a, 4);
    assert!(got.windows(2).all(|w| w[1] - w[0] == TimeDelta::hours(1)));
}

#[test]
fn once_specs() {
    let s = Spec::parse("once at 2030-05-01 12:00", "Europe/Paris").unwrap();
    let t = utc(2030, 5, 1, 10, 0, 0); // 12:00 CEST
    assert!(s.is_once());
    assert_eq!(s.next_after(utc(2030, 1, 1, 0, 0, 0), t), Some(t));
    assert_eq!(s.next_after(t, t), None);
    assert_eq!(s.upcoming(utc(2030, 1, 1, 0, 0, 0), t, 5), [t]);
    let s = Spec::parse("once at 2030-05-01T12:00:00Z", "Europe/Paris").unwrap();
    assert_eq!(
        s.next_after(utc(2030, 1, 1, 0, 0, 0), t),
        Some(utc(2030, 5, 1, 12, 0, 0))
    );
    // In the gap: the first valid time after it.
    let s = Spec::parse("once at 2030-03-31 02:30", "Europe/Berlin").unwrap();
    assert_eq!(
        s.last_at_or_before(utc(2031, 1, 1, 0, 0, 0), t),
        Some(utc(2030, 3, 31, 1, 0, 0))
    );
    assert!(err("once at tomorrow", "UTC").contains("time \"tomorrow\""));
    assert!(err("once 2030-01-01", "UTC").contains("expected `once at"));
}

#[test]
fn last_at_or_before_matches_next_after() {
    let s = Spec::parse("0 */6 * * *", "America/New_York").unwrap();
    let t = utc(2030, 6, 1, 13, 7, 0);
    let prev = s.last_at_or_before(t, t).unwrap();
    assert!(prev <= t);
    assert!(s.next_after(prev, t).unwrap() > t);
    assert_eq!(s.last_at_or_before(prev, t), Some(prev));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Daily wall-clock specs run exactly once per local day in every zone, DST or not.
    #[test]
    fn daily_runs_once_per_local_day(
        day in 0i64..(365 * 6),
        h in 0u32..24, m in 0u32..60,
        tz in prop::sample::select(vec!["Europe/Berlin", "America/New_York", "Australia/Sydney", "UTC", "Asia/Kolkata"]),
    ) {
        let spec = Spec::parse(&format!("daily at {h:02}:{m:02}"), tz).unwrap();
        let zone: Tz = tz.parse().unwrap();
        let start = utc(2026, 1, 1, 0, 0, 0) + TimeDelta::days(day);
        let got = spec.upcoming(start, start, 40);
        prop_assert_eq!(got.len(), 40);
        let days: Vec<NaiveDate> = got.iter().map(|t| t.with_timezone(&zone).date_naive()).collect();
        for w in days.windows(2) {
            prop_assert_eq!(w[1], w[0].succ_opt().unwrap(), "one run per local day: {:?}", got);
        }
        for t in &got {
            let local = t.with_timezone(&zone).time();
            let want = NaiveTime::from_hms_opt(h, m, 0).unwrap();
            // Either the planned wall time, or (in a gap) a time after it within the gap's length.
            prop_assert!(local == want || (local > want && local - want <= TimeDelta::hours(1)),
                "{} local {} want {}", t, local, want);
        }
    }

    /// Monthly on -1 is always the last day of its month.
    #[test]
    fn last_day_is_last(month in 0i64..600) {
        let spec = Spec::parse("monthly on -1 at 00:00", "UTC").unwrap();
        let start = utc(2000, 1, 1, 0, 0, 0) + TimeDelta::days(month * 30);
        let t = spec.next_after(start, start).unwrap();
        prop_assert_eq!(t.date_naive().succ_opt().unwrap().day(), 1);
        prop_assert!(t > start && t - start <= TimeDelta::days(31));
    }

    /// Intervals: times are on the anchor's grid, strictly after `t`, and at most one interval later.
    #[test]
    fn interval_grid(secs in 1i64..100_000, off in -1_000_000i64..10_000_000) {
        let spec = Spec::parse(&format!("every {secs}s"), "UTC").unwrap();
        let anchor = utc(2030, 1, 1, 0, 0, 0);
        let t = anchor + TimeDelta::milliseconds(off * 997);
        let next = spec.next_after(t, anchor).unwrap();
        prop_assert!(next > t);
        prop_assert_eq!((next - anchor).num_milliseconds() % (secs * 1000), 0);
        prop_assert!(next >= anchor);
        if t >= anchor {
            prop_assert!(next - t <= TimeDelta::seconds(secs));
            let last = spec.last_at_or_before(t, anchor).unwrap();
            prop_assert_eq!(spec.next_after(last, anchor), Some(next));
        }
    }

    /// Random cron expressions: `upcoming` is strictly increasing and every time matches again from
    /// just before it.
    #[test]
    fn cron_times_increase(min in 0u32..60, hour in prop::option::of(0u32..24), dom in prop::option::of(1u32..29), start in 0i64..100_000) {
        let expr = format!("{min} {} {} * *",
            hour.map_or("*".into(), |h| h.to_string()), dom.map_or("*".into(), |d| d.to_string()));
        let spec = Spec::parse(&expr, "Europe/Berlin").unwrap();
        let t0 = utc(2028, 1, 1, 0, 0, 0) + TimeDelta::minutes(start * 7);
        let got = spec.upcoming(t0, t0, 5);
        prop_assert_eq!(got.len(), 5);
        prop_assert!(got[0] > t0);
        for w in got.windows(2) { prop_assert!(w[0] < w[1]); }
        for t in &got {
            prop_assert_eq!(spec.first_at_or_after(*t, t0), Some(*t));
        }
    }
}
