//! The checker: the promise under partial failure, rule by rule, over a [`History`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::{At, HandlerCopy, History, JobId, Kind};

/// What the test did to claimants: the ones it killed or cut off, and the rows it took away; only
/// copies these explain may have been cut short and run again. Any other duplicate run breaks the
/// promise.
#[derive(Debug, Default, Clone)]
pub struct Expectations {
    /// Each lost claimant, with the time after which a copy it started is no longer explained by
    /// its loss (None: any copy of it is).
    lost: BTreeMap<String, Option<i64>>,
    taken: BTreeSet<(JobId, u16)>,
}

impl Expectations {
    /// Nothing was done to any claimant: every job must run exactly as often as it has attempts.
    pub fn no_faults() -> Expectations {
        Expectations::default()
    }

    /// The claimant with this token died or fenced itself during the test.
    pub fn lost(mut self, token: &str) -> Expectations {
        self.lost.insert(token.to_string(), None);
        self
    }

    /// The claimant with this token died or was cut off, and had recovered (or was replaced) by
    /// `until`: its copies that started by then may have been cut short, but one it started later
    /// was not cut short by this loss. A test that strikes many faults says which copies each one
    /// explains, so a duplicate long after a fault is not put down to it. Several losses of one
    /// claimant keep the latest.
    pub fn lost_until(mut self, token: &str, until: At) -> Expectations {
        let entry = self.lost.entry(token.to_string()).or_insert(Some(i64::MIN));
        if let Some(latest) = entry {
            *latest = (*latest).max(until.micros);
        }
        self
    }

    /// The test took `job`'s row away from the claimant running `attempt` (as an operator's reset or
    /// a reaper's mistaken verdict would): that attempt's copy may be cut short. Narrower than
    /// [`Expectations::lost`], because that claimant lives on and runs other copies, maybe this job's
    /// next attempt.
    pub fn taken(mut self, job: JobId, attempt: u16) -> Expectations {
        self.taken.insert((job, attempt));
        self
    }

    /// Whether the test lost `claimant` by the time `micros`.
    fn lost_by(&self, claimant: Option<&String>, micros: i64) -> bool {
        let Some(until) = claimant.and_then(|t| self.lost.get(t)) else {
            return false;
        };
        until.is_none_or(|until| micros <= until)
    }

    /// Whether what the test did explains `job`'s copy `c` being cut short or run again: the loss
    /// of its claimant, or its row taken away.
    fn explains(&self, job: JobId, c: &HandlerCopy) -> bool {
        self.lost_by(c.claimant.as_ref(), c.start.micros) || self.taken.contains(&(job, c.attempt))
    }
}

/// What a clean history held, for the test's own assertions on top.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub jobs: usize,
    /// Handler copies started, across all jobs.
    pub copies: usize,
    /// Copies cut short and run again (each explained by what the test did).
    pub rerun: usize,
    /// Copies cut short whose attempt the worker saw fail and recorded so (`retry` or `dead`, with
    /// the error): a session killed under an SQL handler's statement. Run again as a retry, not as
    /// a duplicate.
    pub failed: usize,
    pub done: usize,
}

/// Which rule a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Two copies of one job were live at once.
    Overlap,
    /// An attempt was claimed or started after a later one.
    AttemptWentBack,
    /// A done job without exactly one accepted done, or an attempt with two outcomes.
    Finish,
    /// A copy cut short and run again that nothing the test did explains.
    UnexplainedRerun,
    /// A job or copy still running when the test looked last.
    LeftRunning,
}

#[derive(Debug, Clone)]
pub struct Violation {
    pub job: JobId,
    pub rule: Rule,
    pub detail: String,
    /// The job's timeline, to read the violation against.
    pub timeline: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "job {} ({:?}): {}\n{}",
            self.job, self.rule, self.detail, self.timeline
        )
    }
}

/// Checks every job of `history` against the promise; a clean history gives what it held.
pub fn check(history: &History, expect: &Expectations) -> Result<Summary, Vec<Violation>> {
    let mut violations = Vec::new();
    let mut summary = Summary {
        jobs: 0,
        copies: 0,
        rerun: 0,
        failed: 0,
        done: 0,
    };
    for job in history.jobs() {
        let copies = history.copies(job);
        let mut found: Vec<(Rule, String)> = Vec::new();
        found.extend(overlaps(history, job, &copies));
        found.extend(attempts_went_back(history, job, expect));
        found.extend(finishes(history, job));
        let (rerun, failed, unexplained) = reruns(history, job, &copies, expect);
        found.extend(unexplained);
        found.extend(left_running(history, job, &copies));
        summary.jobs += 1;
        summary.copies += copies.len();
        summary.rerun += rerun;
        summary.failed += failed;
        summary.done += usize::from(history.final_states.get(&job).is_some_and(|s| s == "done"));
        violations.extend(found.into_iter().map(|(rule, detail)| Violation {
            job,
            rule,
            detail,
            timeline: history.timeline(job),
        }));
    }
    if violations.is_empty() {
        Ok(summary)
    } else {
        Err(violations)
    }
}

/// [`check`], panicking with every violation's report.
pub fn assert_clean(history: &History, expect: &Expectations) -> Summary {
    check(history, expect).unwrap_or_else(|violations| {
        let reports: Vec<String> = violations.iter().map(ToString::to_string).collect();
        panic!("the history breaks the promise:\n{}", reports.join("\n"))
    })
}

/// The history of `job`, whose first copy died with its claimant `killed` and whose next copy ran to
/// its end: checked clean, with two copies, one of them a rerun, and the job done once (its timeline
/// when not).
pub fn assert_ran_again_once(history: &History, killed: &str, job: JobId) -> Summary {
    let summary = assert_clean(history, &Expectations::no_faults().lost(killed));
    assert_eq!(
        (summary.copies, summary.rerun, summary.done),
        (2, 1, 1),
        "{}",
        history.timeline(job)
    );
    summary
}

fn describe(c: &HandlerCopy) -> String {
    format!(
        "attempt {} (pid {}, claimant {})",
        c.attempt,
        c.pid,
        c.claimant.as_deref().unwrap_or("?")
    )
}

/// A copy that starts before an earlier one's end (or while that one never ended) runs beside it;
/// a copy that met the job's lock taken saw the same from the inside.
fn overlaps(history: &History, job: JobId, copies: &[HandlerCopy]) -> Vec<(Rule, String)> {
    let mut out = Vec::new();
    for (i, later) in copies.iter().enumerate() {
        for earlier in &copies[..i] {
            if earlier
                .end
                .is_none_or(|end| end.micros > later.start.micros)
            {
                out.push((
                    Rule::Overlap,
                    format!(
                        "{} started while {} still ran",
                        describe(later),
                        describe(earlier)
                    ),
                ));
            }
        }
    }
    for e in history.events_of(job) {
        if let Kind::LockTaken { pid } = e.kind {
            out.push((
                Rule::Overlap,
                format!(
                    "attempt {} (pid {pid}) found another copy holding the job's lock",
                    e.attempt
                ),
            ));
        }
    }
    out
}

/// Claims and handler starts, in time order, never name an attempt below one seen before.
///
/// But a lost claimant's copy may start after a later attempt's claim, never after a later copy's
/// start: a worker SIGKILLed just after it sent an SQL job's statement has it begin on the server
/// after its death, and so after the reset that death allows and the next claim (measured: 9-12 ms
/// after it, under the drain in transactional.rs). Its next copy then waits for that statement (the
/// overlap rule checks that it ended first).
fn attempts_went_back(history: &History, job: JobId, expect: &Expectations) -> Vec<(Rule, String)> {
    let (mut claimed, mut started) = (0, 0);
    let mut out = Vec::new();
    for e in history.events_of(job) {
        let highest = match e.kind {
            Kind::Claimed => claimed.max(started),
            Kind::HandlerStarted { .. } if expect.lost_by(e.claimant.as_ref(), e.at.micros) => {
                started
            }
            Kind::HandlerStarted { .. } => claimed.max(started),
            _ => continue,
        };
        if e.attempt < highest {
            out.push((
                Rule::AttemptWentBack,
                format!("attempt {} {} after attempt {highest}", e.attempt, e.kind),
            ));
        }
        match e.kind {
            Kind::Claimed => claimed = claimed.max(e.attempt),
            _ => started = started.max(e.attempt),
        }
    }
    out
}

/// A done job took exactly one done, and no attempt took two outcomes.
fn finishes(history: &History, job: JobId) -> Vec<(Rule, String)> {
    let accepted: Vec<(u16, &str)> = history
        .events_of(job)
        .into_iter()
        .filter_map(|e| match &e.kind {
            Kind::FinishAccepted { outcome } => Some((e.attempt, outcome.as_str())),
            _ => None,
        })
        .collect();
    let mut out = Vec::new();
    let dones = accepted.iter().filter(|(_, o)| *o == "done").count();
    if history.final_states.get(&job).is_some_and(|s| s == "done") && dones != 1 {
        out.push((
            Rule::Finish,
            format!("the job is done with {dones} accepted done finishes"),
        ));
    }
    let attempts: BTreeSet<u16> = accepted.iter().map(|(a, _)| *a).collect();
    for attempt in attempts {
        let outcomes: Vec<&str> = accepted
            .iter()
            .filter(|(a, _)| *a == attempt)
            .map(|(_, o)| *o)
            .collect();
        if outcomes.len() > 1 {
            out.push((
                Rule::Finish,
                format!(
                    "attempt {attempt} took {} outcomes: {outcomes:?}",
                    outcomes.len()
                ),
            ));
        }
    }
    out
}

/// How one copy of a job ended, as the checker judges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// The one copy of its attempt, run to its end, whose outcome the row took.
    Stands,
    /// Cut short, and its attempt recorded as failed (`retry` or `dead`): its worker saw it fail
    /// and said so, and the next copy is a retry.
    Failed,
    /// Cut short or run beside another copy of its attempt: a duplicate run.
    CutShort,
}

/// The standing of each of `job`'s copies, in the order they started.
fn standings(history: &History, job: JobId, copies: &[HandlerCopy]) -> Vec<Standing> {
    if copies.len() < 2 {
        return vec![Standing::Stands; copies.len()];
    }
    let mut accepted: BTreeMap<u16, &str> = BTreeMap::new();
    for e in history.events_of(job) {
        if let Kind::FinishAccepted { outcome } = &e.kind {
            accepted.insert(e.attempt, outcome);
        }
    }
    copies
        .iter()
        .map(|c| {
            let alone = copies.iter().filter(|o| o.attempt == c.attempt).count() == 1;
            match accepted.get(&c.attempt) {
                Some(_) if alone && c.ran_to_end => Standing::Stands,
                Some(&("retry" | "dead")) if alone => Standing::Failed,
                _ => Standing::CutShort,
            }
        })
        .collect()
}

/// `job`'s copies that were cut short and run again (each must belong to a lost claimant), with the
/// copy that ran next: what a report of duplicates and rescue times reads.
pub fn cut_short(history: &History, job: JobId) -> Vec<(HandlerCopy, Option<HandlerCopy>)> {
    let copies = history.copies(job);
    standings(history, job, &copies)
        .into_iter()
        .enumerate()
        .filter(|(_, s)| *s == Standing::CutShort)
        .map(|(i, _)| (copies[i].clone(), copies.get(i + 1).cloned()))
        .collect()
}

/// When a job's handler started more than once, every copy that does not stand for its attempt was
/// cut short; the test must have lost its claimant or taken its row, unless the row records the
/// attempt as failed.
/// Returns how many copies were cut short and run again, how many failed so, and the ones that are
/// not explained.
fn reruns(
    history: &History,
    job: JobId,
    copies: &[HandlerCopy],
    expect: &Expectations,
) -> (usize, usize, Vec<(Rule, String)>) {
    let (mut rerun, mut failed) = (0, 0);
    let mut out = Vec::new();
    for (c, standing) in copies.iter().zip(standings(history, job, copies)) {
        match standing {
            Standing::Stands => continue,
            Standing::Failed => {
                failed += 1;
                continue;
            }
            Standing::CutShort => {}
        }
        rerun += 1;
        if !expect.explains(job, c) {
            out.push((
                Rule::UnexplainedRerun,
                format!(
                    "{} was cut short or run twice, and the test neither lost such a claimant by \
                     then nor took its row",
                    describe(c)
                ),
            ));
        }
    }
    (rerun, failed, out)
}

/// Nothing runs once the test is over: no row in running, no copy without an end.
fn left_running(history: &History, job: JobId, copies: &[HandlerCopy]) -> Vec<(Rule, String)> {
    let mut out = Vec::new();
    if history
        .final_states
        .get(&job)
        .is_some_and(|s| s == "running")
    {
        out.push((Rule::LeftRunning, "the row is still running".to_string()));
    }
    for c in copies.iter().filter(|c| c.end.is_none()) {
        out.push((
            Rule::LeftRunning,
            format!("{} never ended and was not seen gone", describe(c)),
        ));
    }
    out
}
