//! Schedule specs: what the text means and when its planned times are.
//!
//! A spec is one of:
//! * a cron expression of 5 fields (`30 2 * * *`) or 6 with seconds first (`*/10 * * * * *`), with `L`
//!   (last day of the month), `#` (nth weekday), `W`, names (`MON`, `JAN`) and `@daily`-style nicknames;
//! * `every 5m`: a fixed interval, anchored to the schedule's anchor instant (`planned = anchor + k ×
//!   interval`), never to when a run finished, so the times do not drift (DBMS_JOB computes `NEXT_DATE`
//!   from the end of a run, and its jobs creep later every day);
//! * `daily at 02:30`, `weekly on mon at 09:00`, `monthly on 1 at 00:00`, `monthly on -1 at 23:00` (the
//!   last day of the month): the calendar specs of DBMS_JOB / the MySQL event scheduler, compiled to cron so
//!   that both share one, tested, walk through the calendar;
//! * `once at 2026-05-01 12:00` (in the schedule's time zone) or `once at 2026-05-01T12:00:00Z`.
//!
//! Wall-clock specs (cron and calendar) are read in the schedule's IANA time zone. Across a DST change:
//! * a time that does not exist (the spring-forward gap, e.g. 02:30 in Europe/Berlin on the last Sunday
//!   of March) runs once, at the first valid instant after the gap (03:00);
//! * a time that exists twice (the fall-back fold) runs once, at the first of the two instants, when the
//!   expression fixes the second, minute and hour (a "fixed-time" job); expressions with a wildcard or a
//!   step in those fields (`*/30 * * * *`) run on both passes, as Vixie cron does, because they describe
//!   elapsed time rather than an appointment.
//!
//! Everything here is a pure function of its arguments: the scheduler passes `now` in.
//!
//! # Why croner
//! We use the `croner` crate rather than `cron`: croner reads the standard 5-field form (the `cron` crate
//! requires seconds, so every crontab line would have to be rewritten) as well as the 6-field one, supports
//! `L` in the day-of-month field (needed for "last day of the month"; `cron` has no `L` there), follows
//! POSIX/Vixie weekday numbering and the day-of-month OR day-of-week rule that crontab users expect, and
//! resolves DST gaps and folds in the way described above (checked by the tests below; `cron` skips a
//! run that falls in a gap). Its parse errors do not say which field is wrong, so [`Spec::parse`] finds
//! the field and token itself before it reports one.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{
    DateTime, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta, TimeZone, Timelike, Utc,
    Weekday,
};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};

use crate::error::{Error, Result};

/// The cron fields, in the 6-field order (seconds first).
const FIELDS: [(&str, &str); 6] = [
    ("second", "0-59"),
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day of month", "1-31, L, W"),
    ("month", "1-12 or JAN-DEC"),
    ("day of week", "0-7 or SUN-SAT, #, L"),
];

/// Shortest interval of an `every` spec. The scheduler ticks once a second; anything shorter would only
/// pile up runs.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// A parsed spec together with its time zone.
#[derive(Debug, Clone)]
pub struct Spec {
    text: String,
    tz: Tz,
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    /// A cron expression, or a calendar spec compiled to one.
    Cron(Box<Cron>),
    /// A fixed interval from the anchor.
    Every(TimeDelta),
    /// A single run.
    Once(DateTime<Utc>),
}

impl Spec {
    /// Parses `text` in the time zone named `tz` (an IANA name such as `Europe/Paris`, or `UTC`).
    ///
    /// # Errors
    /// [`Error::Spec`] saying what is wrong and where: the unknown time zone, the cron field and token that
    /// is out of range, the malformed calendar phrase, an expression that never matches.
    pub fn parse(text: &str, tz: &str) -> Result<Spec> {
        let tz = parse_tz(text, tz)?;
        let trimmed = text.trim();
        let err = |reason: String| Error::Spec {
            spec: trimmed.to_string(),
            reason,
        };
        if trimmed.is_empty() {
            return Err(err(
                "empty spec; use a cron expression, `every 5m`, `daily at 02:30`, `weekly on mon at 09:00`, \
                 `monthly on -1 at 23:00` or `once at 2030-01-01 12:00`"
                    .into(),
            ));
        }
        let lower = trimmed.to_ascii_lowercase();
        let words: Vec<&str> = lower.split_whitespace().collect();
        let kind = match words[0] {
            "every" => Kind::Every(parse_every(&words[1..]).map_err(err)?),
            "daily" | "weekly" | "monthly" => {
                Kind::Cron(Box::new(parse_calendar(&words).map_err(err)?))
            }
            "once" => Kind::Once(parse_once(trimmed, &words, tz).map_err(err)?),
            _ => Kind::Cron(Box::new(parse_cron(trimmed).map_err(err)?)),
        };
        let spec = Spec {
            text: trimmed.to_string(),
            tz,
            kind,
        };
        if let Kind::Cron(c) = &spec.kind {
            // croner accepts expressions that can never match (`0 0 30 2 *`) and only fails when asked for
            // a time; refuse them now, while the user is looking.
            let probe = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).unwrap();
            if c.find_next_occurrence(&probe.with_timezone(&tz), false)
                .is_err()
            {
                return Err(err(
                    "the expression never matches a real date (for example February 30)".into(),
                ));
            }
        }
        Ok(spec)
    }

    /// The spec as written (trimmed).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The time zone wall-clock specs are read in.
    pub fn tz(&self) -> Tz {
        self.tz
    }

    /// True for `every` specs, whose phase comes from the anchor.
    pub fn is_interval(&self) -> bool {
        matches!(self.kind, Kind::Every(_))
    }

    /// True for `once` specs.
    pub fn is_once(&self) -> bool {
        matches!(self.kind, Kind::Once(_))
    }

    /// The first planned time strictly after `t`, or `None` when there is none (a `once` spec whose time
    /// has passed). `anchor` fixes the phase of `every` specs (their times are `anchor + k × interval`,
    /// `k ≥ 0`) and is ignored by the others.
    pub fn next_after(&self, t: DateTime<Utc>, anchor: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.kind {
            Kind::Once(at) => (*at > t).then_some(*at),
            Kind::Every(iv) => {
                if t < anchor {
                    return Some(anchor);
                }
                let k = steps(t - anchor, *iv)?.checked_add(1)?;
                mul_add(anchor, *iv, k)
            }
            Kind::Cron(c) => {
                // croner walks whole seconds; from the whole second at or before `t`, the next match is
                // strictly after `t` too.
                let start = t.with_nanosecond(0)?.with_timezone(&self.tz);
                let next = c.find_next_occurrence(&start, false).ok()?;
                Some(next.with_timezone(&Utc))
            }
        }
    }

    /// The last planned time at or before `t`, if any.
    pub fn last_at_or_before(
        &self,
        t: DateTime<Utc>,
        anchor: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        match &self.kind {
            Kind::Once(at) => (*at <= t).then_some(*at),
            Kind::Every(iv) => {
                if t < anchor {
                    return None;
                }
                mul_add(anchor, *iv, steps(t - anchor, *iv)?)
            }
            Kind::Cron(c) => {
                let start = t.with_nanosecond(0)?.with_timezone(&self.tz);
                let prev = c.find_previous_occurrence(&start, true).ok()?;
                Some(prev.with_timezone(&Utc))
            }
        }
    }

    /// The first planned time at or after `t`.
    pub fn first_at_or_after(
        &self,
        t: DateTime<Utc>,
        anchor: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        self.next_after(t - TimeDelta::microseconds(1), anchor)
    }

    /// Up to `n` planned times strictly after `t`, in order.
    pub fn upcoming(
        &self,
        t: DateTime<Utc>,
        anchor: DateTime<Utc>,
        n: usize,
    ) -> Vec<DateTime<Utc>> {
        let mut out = Vec::with_capacity(n.min(1000));
        let mut cur = t;
        while out.len() < n {
            match self.next_after(cur, anchor) {
                Some(next) => {
                    out.push(next);
                    cur = next;
                }
                None => break,
            }
        }
        out
    }
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.text, self.tz)
    }
}

/// Whole intervals in `d` (floor), for `d ≥ 0`.
fn steps(d: TimeDelta, iv: TimeDelta) -> Option<i64> {
    let d = d.num_microseconds()?;
    let iv = iv.num_microseconds()?;
    Some(d.div_euclid(iv))
}

/// `anchor + k × iv`, if it fits.
fn mul_add(anchor: DateTime<Utc>, iv: TimeDelta, k: i64) -> Option<DateTime<Utc>> {
    let us = iv.num_microseconds()?.checked_mul(k)?;
    anchor.checked_add_signed(TimeDelta::microseconds(us))
}

/// Parses an IANA time zone name.
pub(crate) fn parse_tz(spec: &str, tz: &str) -> Result<Tz> {
    Tz::from_str(tz.trim()).map_err(|_| Error::Spec {
        spec: spec.trim().to_string(),
        reason: format!(
            "unknown time zone {tz:?}; use an IANA name such as UTC, Europe/Paris or America/New_York"
        ),
    })
}

fn parse_every(rest: &[&str]) -> std::result::Result<TimeDelta, String> {
    if rest.is_empty() {
        return Err("`every` needs an interval, e.g. `every 5m` or `every 1h 30m`".into());
    }
    let text = rest.join(" ");
    let d = humantime::parse_duration(&text)
        .map_err(|e| format!("interval {text:?}: {e} (examples: 30s, 5m, 2h, 1d)"))?;
    if d < MIN_INTERVAL {
        return Err(format!(
            "interval {text:?} is shorter than the minimum of {}",
            humantime::format_duration(MIN_INTERVAL)
        ));
    }
    TimeDelta::from_std(d)
        .ok()
        .filter(|d| *d <= TimeDelta::days(366 * 100))
        .ok_or_else(|| format!("interval {text:?} is too long"))
}

/// `daily at HH:MM[:SS]`, `weekly on DAY at HH:MM[:SS]`, `monthly on N at HH:MM[:SS]` (N in 1..=31 or -1).
fn parse_calendar(words: &[&str]) -> std::result::Result<Cron, String> {
    let usage = "expected `daily at HH:MM`, `weekly on DAY at HH:MM` or `monthly on DAY at HH:MM` \
                 (DAY of the month 1-31, or -1 for the last day)";
    let (day_part, at) = match words {
        ["daily", "at", t] => (None, *t),
        ["weekly" | "monthly", "on", d, "at", t] => (Some(*d), *t),
        _ => return Err(usage.into()),
    };
    let time = parse_clock(at)?;
    let (dom, dow) = match (words[0], day_part) {
        ("daily", _) => ("*".to_string(), "*".to_string()),
        ("weekly", Some(d)) => {
            let wd = Weekday::from_str(d)
                .map_err(|_| format!("weekday {d:?}: use mon, tue, wed, thu, fri, sat or sun"))?;
            ("*".to_string(), wd.num_days_from_sunday().to_string())
        }
        ("monthly", Some(d)) => match d.parse::<i32>() {
            Ok(-1) => ("L".to_string(), "*".to_string()),
            Ok(n @ 1..=31) => (n.to_string(), "*".to_string()),
            _ => {
                return Err(format!(
                    "day of month {d:?}: use 1-31, or -1 for the last day of the month \
                     (a day a month does not have, such as 31 in April, is skipped that month)"
                ));
            }
        },
        _ => return Err(usage.into()),
    };
    let expr = format!(
        "{} {} {} {dom} * {dow}",
        time.second(),
        time.minute(),
        time.hour()
    );
    parser()
        .parse(&expr)
        .map_err(|e| format!("internal: {expr:?}: {e}"))
}

fn parse_clock(s: &str) -> std::result::Result<NaiveTime, String> {
    NaiveTime::parse_from_str(s, "%H:%M:%S")
        .or_else(|_| NaiveTime::parse_from_str(s, "%H:%M"))
        .map_err(|_| format!("time {s:?}: use HH:MM or HH:MM:SS on a 24-hour clock"))
}

/// `once at TIME`: RFC 3339 with an offset, or a local date and time in the schedule's zone.
fn parse_once(
    original: &str,
    words: &[&str],
    tz: Tz,
) -> std::result::Result<DateTime<Utc>, String> {
    if words.get(1) != Some(&"at") || words.len() < 3 {
        return Err("expected `once at 2030-01-01 12:00` or `once at 2030-01-01T12:00:00Z`".into());
    }
    // Keep the user's case (the `T` and `Z` of RFC 3339).
    let text = original
        .split_whitespace()
        .skip(2)
        .collect::<Vec<_>>()
        .join(" ");
    if let Ok(t) = DateTime::parse_from_rfc3339(&text) {
        return Ok(t.with_timezone(&Utc));
    }
    let naive = [
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
    ]
    .iter()
    .find_map(|f| NaiveDateTime::parse_from_str(&text, f).ok())
    .or_else(|| {
        NaiveDate::parse_from_str(&text, "%Y-%m-%d")
            .ok()
            .map(|d| d.and_time(NaiveTime::MIN))
    })
    .ok_or_else(|| {
        format!(
            "time {text:?}: use YYYY-MM-DD HH:MM[:SS] (in the schedule's time zone) or RFC 3339 \
                 (2030-01-01T12:00:00Z)"
        )
    })?;
    Ok(match tz.from_local_datetime(&naive) {
        LocalResult::Single(t) => t.with_timezone(&Utc),
        // The first of the two instants, as for recurring specs.
        LocalResult::Ambiguous(first, _) => first.with_timezone(&Utc),
        // In a spring-forward gap: the first valid instant after it, as for recurring specs.
        LocalResult::None => (1..=4 * 60)
            .find_map(|m| {
                tz.from_local_datetime(&(naive + TimeDelta::minutes(m)))
                    .earliest()
            })
            .map(|t| {
                t.with_timezone(&Utc)
                    .with_second(0)
                    .unwrap_or(t.with_timezone(&Utc))
            })
            .ok_or_else(|| format!("time {text:?} does not exist in {tz}"))?,
    })
}

fn parser() -> CronParser {
    // Seconds optional: 5 fields are minute-based crontab lines, 6 put seconds first.
    CronParser::builder().seconds(Seconds::Optional).build()
}

/// Parses a cron expression, and on failure finds the field and token at fault.
fn parse_cron(expr: &str) -> std::result::Result<Cron, String> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    if expr.starts_with('@') {
        return parser().parse(expr).map_err(|_| {
            format!(
                "unknown nickname {expr:?}; use @yearly, @annually, @monthly, @weekly, @daily or @hourly"
            )
        });
    }
    if !(5..=6).contains(&fields.len()) {
        return Err(format!(
            "a cron expression has 5 fields (minute hour day-of-month month day-of-week) or 6 (with \
             seconds first); this one has {}. Other forms: `every 5m`, `daily at 02:30`, \
             `weekly on mon at 09:00`, `monthly on -1 at 23:00`, `once at 2030-01-01 12:00`",
            fields.len()
        ));
    }
    match parser().parse(expr) {
        Ok(c) => Ok(c),
        Err(e) => Err(diagnose(&fields).unwrap_or_else(|| format!("invalid cron expression: {e}"))),
    }
}

/// Finds the first field (and within it the first comma-separated token) that croner refuses, by parsing
/// each one alone with every other field a wildcard.
fn diagnose(fields: &[&str]) -> Option<String> {
    let offset = 6 - fields.len(); // a 5-field expression starts at the minute
    for (i, field) in fields.iter().enumerate() {
        let (name, range) = FIELDS[i + offset];
        if probe(i + offset, field).is_ok() {
            continue;
        }
        let token = field
            .split(',')
            .find(|t| probe(i + offset, t).is_err())
            .unwrap_or(field);
        let why = probe(i + offset, token)
            .err()
            .map(|e| short_reason(&e))
            .unwrap_or_default();
        return Some(format!(
            "field {} ({name}) {token:?}: {why}; allowed: {range}, with * , - /",
            i + 1
        ));
    }
    None
}

fn probe(position: usize, token: &str) -> std::result::Result<Cron, croner::errors::CronError> {
    let mut parts = ["0", "*", "*", "*", "*", "*"];
    parts[position] = token;
    parser().parse(&parts.join(" "))
}

fn short_reason(e: &croner::errors::CronError) -> String {
    use croner::errors::CronError as E;
    match e {
        E::ComponentError(m) | E::InvalidPattern(m) => m.trim_end_matches('.').to_lowercase(),
        E::IllegalCharacters(_) => "not a number, name or range".into(),
        other => other.to_string().trim_end_matches('.').to_lowercase(),
    }
}

#[cfg(test)]
mod tests;
