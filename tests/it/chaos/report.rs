//! The table a chaos run prints: what ran, what struck, and what the checks found.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::faults::{Fault, Struck};
use super::workload::Kept;
use crate::history::{History, Summary, Violation, cut_short};

/// A duplicate run: a copy cut short and run again, the fault that explains it, and how long after
/// that fault the next copy started.
pub struct Duplicate {
    pub cause: Option<Fault>,
    pub rescue_secs: Option<f64>,
}

/// Which token's process a copy's claimant is: `host:pid:…`.
pub fn pid_of(token: &str) -> Option<u32> {
    token.split(':').nth(1)?.parse().ok()
}

/// The earliest fault that cost `pid` a copy started at `start` (micros).
fn cause(struck: &[Struck], pid: u32, start: i64) -> Option<&Struck> {
    struck
        .iter()
        .filter(|s| s.victims.contains(&pid) && start <= s.until.micros)
        .min_by_key(|s| s.until.micros)
}

pub fn duplicates(h: &History, struck: &[Struck]) -> Vec<Duplicate> {
    let mut out = Vec::new();
    for job in h.jobs() {
        for (copy, next) in cut_short(h, job) {
            let s = copy
                .claimant
                .as_deref()
                .and_then(pid_of)
                .and_then(|pid| cause(struck, pid, copy.start.micros));
            out.push(Duplicate {
                cause: s.map(|s| s.fault),
                rescue_secs: s
                    .zip(next)
                    .map(|(s, n)| (n.start.micros - s.at.micros) as f64 / 1e6),
            });
        }
    }
    out
}

pub struct Report<'a> {
    pub seconds: u64,
    pub seed: u64,
    /// (kind, state, jobs)
    pub jobs: &'a [(String, String, i64)],
    pub struck: &'a [Struck],
    pub checked: &'a Result<Summary, Vec<Violation>>,
    pub duplicates: &'a [Duplicate],
    pub kept: &'a Kept,
    pub unexpected_exits: &'a [String],
    pub stop_problems: &'a [String],
}

impl Report<'_> {
    pub fn jobs_not_done(&self) -> i64 {
        self.jobs
            .iter()
            .filter(|(_, state, _)| state != "done")
            .map(|(_, _, n)| n)
            .sum()
    }

    /// The table, in Markdown.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let total: i64 = self.jobs.iter().map(|(_, _, n)| n).sum();
        let mut by_kind: BTreeMap<&str, i64> = BTreeMap::new();
        for (kind, _, n) in self.jobs {
            *by_kind.entry(kind).or_default() += n;
        }
        let kinds: Vec<String> = by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let row = |t: &mut String, what: &str, value: String| {
            writeln!(t, "| {what} | {value} |").unwrap();
        };
        writeln!(t, "| | |\n|---|---|").unwrap();
        row(
            &mut t,
            "run",
            format!("{} s of faults, seed {}", self.seconds, self.seed),
        );
        row(&mut t, "jobs", format!("{total} ({})", kinds.join(", ")));
        let mut faults: BTreeMap<Fault, usize> = BTreeMap::new();
        for s in self.struck {
            *faults.entry(s.fault).or_default() += 1;
        }
        row(&mut t, "faults", format!("{}", self.struck.len()));
        for (f, n) in &faults {
            row(
                &mut t,
                &format!("&nbsp;&nbsp;{}", f.describe()),
                n.to_string(),
            );
        }
        row(
            &mut t,
            "jobs lost (not done at the end)",
            self.jobs_not_done().to_string(),
        );
        let violations: &[Violation] = match self.checked {
            Ok(_) => &[],
            Err(v) => v,
        };
        let count = |rule| violations.iter().filter(|v| v.rule == rule).count();
        use crate::history::Rule;
        row(
            &mut t,
            "copies of one job side by side",
            count(Rule::Overlap).to_string(),
        );
        let mut causes: BTreeMap<Option<Fault>, usize> = BTreeMap::new();
        for d in self.duplicates {
            *causes.entry(d.cause).or_default() += 1;
        }
        row(
            &mut t,
            "duplicate runs (a copy cut short, run again)",
            self.duplicates.len().to_string(),
        );
        for (c, n) in &causes {
            let what = c.map_or("no fault explains it", Fault::describe);
            row(&mut t, &format!("&nbsp;&nbsp;after: {what}"), n.to_string());
        }
        if let Ok(summary) = self.checked {
            row(
                &mut t,
                "attempts failed and retried (a session killed under an SQL job)",
                summary.failed.to_string(),
            );
        }
        row(
            &mut t,
            "other broken rules (attempts back, finishes, left running)",
            (violations.len() - count(Rule::Overlap) - count(Rule::UnexplainedRerun)).to_string(),
        );
        let mut rescues: Vec<f64> = self
            .duplicates
            .iter()
            .filter_map(|d| d.rescue_secs)
            .collect();
        rescues.sort_by(f64::total_cmp);
        if let Some(longest) = rescues.last() {
            row(
                &mut t,
                "rescue: fault to the next copy's start",
                format!(
                    "median {:.1} s, longest {longest:.1} s",
                    rescues[rescues.len() / 2]
                ),
            );
        }
        let k = self.kept;
        row(
            &mut t,
            "exactly-once effects kept (`txn` jobs)",
            format!(
                "{} of {}",
                k.txn_jobs - k.txn_broken.len() as i64,
                k.txn_jobs
            ),
        );
        row(
            &mut t,
            "schedule: planned seconds, each with one job",
            format!("{} ({} broken)", k.planned_runs, k.schedule_broken.len()),
        );
        row(
            &mut t,
            "dependencies kept (started after the job waited for was done)",
            format!("{} of {}", k.pairs - k.order_broken.len(), k.pairs),
        );
        row(
            &mut t,
            "limit of 2 at once broken",
            k.over_limit.to_string(),
        );
        row(
            &mut t,
            "processes that exited by themselves",
            self.unexpected_exits.len().to_string(),
        );
        t
    }

    /// Everything that breaks the promise, for the run's failure message.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.jobs_not_done() > 0 {
            p.push(format!("{} jobs did not end done", self.jobs_not_done()));
        }
        if let Err(v) = self.checked {
            p.extend(v.iter().map(ToString::to_string));
        }
        let k = self.kept;
        p.extend(k.txn_broken.iter().cloned());
        p.extend(k.schedule_broken.iter().cloned());
        p.extend(k.order_broken.iter().cloned());
        if k.over_limit > 0 {
            p.push(format!(
                "{} copies of `limited` ran past its limit",
                k.over_limit
            ));
        }
        p.extend(
            self.unexpected_exits
                .iter()
                .map(|e| format!("exited by itself: {e}")),
        );
        p.extend(self.stop_problems.iter().cloned());
        p
    }
}
