//! One history of what happened to jobs under a fault, and one checker of the promise over it
//! (`check`): a job runs twice only when the claimant running it died or fenced itself (or the test
//! took its row away), never two copies at once, attempts only go forward, a done job took exactly
//! one finish, nothing is left running. Fault tests fill a history from what their handlers wrote,
//! the job rows, `jobq_attempts` and the worker logs, instead of each parsing its own evidence its
//! own way.
//!
//! Times: the database's own (`claimed_at`, `finished_at`, `jobq_attempts.ended_at`) for what a row
//! records, and the host's clock for what handlers and the test saw. Command handlers are shell
//! scripts, and `date +%s%6N` is the only sub-second clock a shell has; it is the clock the database
//! server on this host stamps rows with too (every node of the test cluster as well: they all run on
//! this host), so the two line up in one timeline. Library handlers and programs read the same host
//! clock. The checker's overlap rule compares handler times with handler times only.

mod check;
mod library;
mod sql;
#[cfg(test)]
mod unit;
mod victims;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

pub use check::{
    Expectations, Rule, Summary, Violation, assert_clean, assert_ran_again_once, check, cut_short,
};
pub use library::LibraryCopies;
pub use sql::{
    CopyRow, SqlEffectRow, copies_table, copy_statement, effects_table,
    effects_table_kept_on_rollback, recorded_procedure,
};
pub use victims::{
    children_of, last_heartbeat_us, lock_held, released_us, sole_worker_token, worker_token_of,
    worker_tokens,
};

/// A job id as the rows hold it.
pub type JobId = u64;

/// Where an event's time comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// The server's NOW(6) when it wrote the row.
    Database,
    /// This host's clock, read by a handler or by the test.
    Host,
}

/// Microseconds since the Unix epoch on one of the two clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct At {
    pub micros: i64,
    pub clock: Clock,
}

impl At {
    /// Now on the host's clock, for what the test itself observes (a copy seen gone).
    pub fn now() -> At {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        At::host(since.as_micros() as i64)
    }

    /// A time the database wrote (a row's NOW(6) or SYSDATE(6)).
    pub fn database(micros: i64) -> At {
        At {
            micros,
            clock: Clock::Database,
        }
    }

    /// A time read on this host's clock.
    pub fn host(micros: i64) -> At {
        At {
            micros,
            clock: Clock::Host,
        }
    }
}

/// Where an event was read from, shown in timelines so a reader can go back to the evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Effects,
    JobRow,
    Attempts,
    WorkerLog,
    Test,
}

/// What happened. A handler copy is one process running one attempt: job, attempt and pid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// The row was claimed for this attempt.
    Claimed,
    /// A handler copy started.
    HandlerStarted { pid: u32 },
    /// A handler copy ran to its end.
    HandlerEnded { pid: u32 },
    /// A handler copy found another copy of the job holding its lock, so two were live at once.
    LockTaken { pid: u32 },
    /// The test saw a copy gone without an end (killed with its worker, stopped by the fence).
    Gone { pid: u32 },
    /// The row took this attempt's outcome (done, retry, dead, cancelled, interrupted, snoozed).
    FinishAccepted { outcome: String },
    /// A worker's finish met a row that no longer carried its token and attempt.
    FinishRefused,
    /// A reaper or supervisor took the row back from a claimant it judged dead.
    Reset,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Claimed => write!(f, "claimed"),
            Kind::HandlerStarted { pid } => write!(f, "handler started (pid {pid})"),
            Kind::HandlerEnded { pid } => write!(f, "handler ended (pid {pid})"),
            Kind::LockTaken { pid } => write!(f, "handler found the job's lock taken (pid {pid})"),
            Kind::Gone { pid } => write!(f, "handler seen gone without an end (pid {pid})"),
            Kind::FinishAccepted { outcome } => write!(f, "finish accepted: {outcome}"),
            Kind::FinishRefused => write!(f, "finish refused: the row is no longer this claim's"),
            Kind::Reset => write!(f, "reset by a reaper or supervisor"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub job: JobId,
    pub attempt: u16,
    pub kind: Kind,
    pub at: At,
    /// The claim token of the claimant concerned, where the source names it.
    pub claimant: Option<String>,
    pub source: Source,
}

/// The events of a test's jobs, and each job's state when the test looked last.
#[derive(Debug, Default, Clone)]
pub struct History {
    pub events: Vec<Event>,
    pub final_states: BTreeMap<JobId, String>,
}

/// The shell lines a command handler runs to record its copy in `effects`, and to hold `lock` for as
/// long as any process of the copy lives (the descriptor is inherited by everything it starts): a
/// copy that cannot take the lock at once records that and exits. `body` runs between start and end.
pub fn recorded_command(effects: &Path, lock: &Path, body: &str) -> String {
    let line = |what: &str| {
        format!(
            "echo \"{what} job=$JOBQ_JOB_ID attempt=$JOBQ_ATTEMPT pid=$$ at=$(date +%s%6N) \
             claim=$JOBQ_CLAIM\" >> {}",
            effects.display()
        )
    };
    format!(
        "exec 9>>{lock}\nif ! flock -n 9; then {taken}; exit 1; fi\n{start}\n{body}\n{end}\n",
        lock = lock.display(),
        taken = line("lock-taken"),
        start = line("start"),
        end = line("end"),
    )
}

/// The config of a command handler `kind` whose program is `script` (a [`recorded_command`]) in sh.
pub fn command_handler(kind: &str, script: &str) -> String {
    format!("[handlers.{kind}]\ncommand = [\"sh\", \"-c\", '''\n{script}''']\n")
}

impl History {
    /// The history of a test whose command handlers recorded their copies in `effects`: those copies
    /// and what the job rows and `jobq_attempts` record.
    pub async fn of_commands(effects: &Path, pool: &sqlx::MySqlPool) -> History {
        let mut h = History::default();
        h.read_effects_file(effects);
        h.read_database(pool).await;
        h
    }

    /// Adds the copies recorded by [`recorded_command`] lines in `text`. Lines of any other shape
    /// are an error: a handler that writes something else is not the one the test thinks it runs.
    pub fn read_effects(&mut self, text: &str) {
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let (what, rest) = line.split_once(' ').unwrap_or((line, ""));
            let field = |name: &str| {
                rest.split(' ')
                    .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                    .unwrap_or_else(|| panic!("no {name} in effect line {line:?}"))
            };
            let pid: u32 = field("pid").parse().unwrap();
            let kind = match what {
                "start" => Kind::HandlerStarted { pid },
                "end" => Kind::HandlerEnded { pid },
                "lock-taken" => Kind::LockTaken { pid },
                _ => panic!("unknown effect line {line:?}"),
            };
            self.events.push(Event {
                job: field("job").parse().unwrap(),
                attempt: field("attempt").parse().unwrap(),
                kind,
                at: At::host(field("at").parse().unwrap()),
                claimant: Some(field("claim").to_string()).filter(|c| !c.is_empty()),
                source: Source::Effects,
            });
        }
    }

    /// Adds the effects file `path` (missing: nothing ran).
    pub fn read_effects_file(&mut self, path: &Path) {
        self.read_effects(&std::fs::read_to_string(path).unwrap_or_default());
    }

    /// Adds what the job rows and `jobq_attempts` record, and takes each job's state as its final
    /// one. A done attempt lives in the row only (schema 9 writes no attempt row for it); every other
    /// ended attempt has an attempt row, so the row's dead or cancelled is not counted twice.
    pub async fn read_database(&mut self, pool: &sqlx::MySqlPool) {
        type JobRow = (u64, Vec<u8>, u16, Option<Vec<u8>>, Option<i64>, Option<i64>);
        let jobs: Vec<JobRow> = sqlx::query_as(
            "SELECT id, CAST(state AS BINARY), attempts, CAST(claim AS BINARY), \
             CAST(UNIX_TIMESTAMP(claimed_at) * 1000000 AS SIGNED), \
             CAST(UNIX_TIMESTAMP(finished_at) * 1000000 AS SIGNED) FROM job_queue ORDER BY id",
        )
        .fetch_all(pool)
        .await
        .unwrap();
        for (job, state, attempt, claim, claimed_at, finished_at) in jobs {
            let state = String::from_utf8(state).unwrap();
            let claimant = claim.map(|c| String::from_utf8(c).unwrap());
            let mut push = |kind: Kind, micros: i64| {
                self.events.push(Event {
                    job,
                    attempt,
                    kind,
                    at: At::database(micros),
                    claimant: claimant.clone(),
                    source: Source::JobRow,
                })
            };
            if let Some(at) = claimed_at.filter(|_| attempt > 0) {
                push(Kind::Claimed, at);
            }
            if let Some(at) = finished_at.filter(|_| state == "done") {
                push(
                    Kind::FinishAccepted {
                        outcome: state.clone(),
                    },
                    at,
                );
            }
            self.final_states.insert(job, state);
        }
        type AttemptRow = (u64, u16, Vec<u8>, Option<Vec<u8>>, Option<i64>, i64);
        let attempts: Vec<AttemptRow> = sqlx::query_as(
            "SELECT job_id, attempt, CAST(outcome AS BINARY), CAST(claim AS BINARY), \
             CAST(UNIX_TIMESTAMP(started_at) * 1000000 AS SIGNED), \
             CAST(UNIX_TIMESTAMP(ended_at) * 1000000 AS SIGNED) FROM jobq_attempts ORDER BY id",
        )
        .fetch_all(pool)
        .await
        .unwrap();
        for (job, attempt, outcome, claim, started_at, ended_at) in attempts {
            let outcome = String::from_utf8(outcome).unwrap();
            let claimant = claim.map(|c| String::from_utf8(c).unwrap());
            let ended = match outcome.as_str() {
                "released" => Kind::Reset,
                _ => Kind::FinishAccepted { outcome },
            };
            for (kind, micros) in [(Kind::Claimed, started_at), (ended, Some(ended_at))] {
                let Some(micros) = micros else { continue };
                self.events.push(Event {
                    job,
                    attempt,
                    kind,
                    at: At::database(micros),
                    claimant: claimant.clone(),
                    source: Source::Attempts,
                });
            }
        }
    }

    /// Adds the refused finishes a worker's log (`jobq -v worker`) reports.
    pub fn read_worker_log(&mut self, log: &str) {
        for line in log.lines().filter(|l| l.contains("leaving it alone")) {
            let Some((stamp, rest)) = line.split_once(' ') else {
                continue;
            };
            let Ok(at) = chrono::DateTime::parse_from_rfc3339(stamp) else {
                continue;
            };
            let field = |name: &str| {
                rest.split(' ')
                    .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
            };
            let (Some(job), Some(attempt)) = (field("job_id"), field("attempt")) else {
                continue;
            };
            self.events.push(Event {
                job: job.parse().unwrap(),
                attempt: attempt.parse().unwrap(),
                kind: Kind::FinishRefused,
                at: At::host(at.timestamp_micros()),
                claimant: field("claim").map(str::to_string),
                source: Source::WorkerLog,
            });
        }
    }

    /// Records that the test saw the copies of `job`'s `attempt` gone at `at` (no process holds the
    /// job's lock any more), for copies that were stopped or killed before they could write an end.
    pub fn saw_gone(&mut self, job: JobId, attempt: u16, at: At) {
        let unended: Vec<Event> = self
            .copies(job)
            .into_iter()
            .filter(|c| c.attempt == attempt && c.end.is_none())
            .map(|c| Event {
                job,
                attempt,
                kind: Kind::Gone { pid: c.pid },
                at,
                claimant: c.claimant,
                source: Source::Test,
            })
            .collect();
        self.events.extend(unended);
    }

    /// Records every copy that started before `at` and has no end as seen gone at `at`: the test
    /// knows no copy could live on past that moment (the server that ran them stopped).
    pub fn saw_every_copy_gone(&mut self, at: At) {
        let mut gone = Vec::new();
        for job in self.jobs() {
            for c in self.copies(job) {
                if c.end.is_none() && c.start.micros <= at.micros {
                    gone.push(Event {
                        job,
                        attempt: c.attempt,
                        kind: Kind::Gone { pid: c.pid },
                        at,
                        claimant: c.claimant,
                        source: Source::Test,
                    });
                }
            }
        }
        self.events.extend(gone);
    }

    /// Records each copy that has no end and was followed by another copy of its job as gone when
    /// that copy started. Sound only where every copy holds a lock of its job for as long as any of
    /// its processes lives and records its start only once it holds the lock (a
    /// [`recorded_command`] with a lock per job): the later copy's start is then the proof that
    /// nothing of the earlier one was left. A later copy that found the lock taken recorded that
    /// instead of a start, and the checker reports it as an overlap.
    pub fn saw_gone_at_lock_handoffs(&mut self) {
        let mut gone = Vec::new();
        for job in self.jobs() {
            let copies = self.copies(job);
            for (i, c) in copies.iter().enumerate() {
                let Some(next) = copies.get(i + 1) else {
                    continue;
                };
                if c.end.is_none() {
                    gone.push(Event {
                        job,
                        attempt: c.attempt,
                        kind: Kind::Gone { pid: c.pid },
                        at: next.start,
                        claimant: c.claimant.clone(),
                        source: Source::Test,
                    });
                }
            }
        }
        self.events.extend(gone);
    }

    /// The handler copies of `job`, in the order they started.
    pub fn copies(&self, job: JobId) -> Vec<HandlerCopy> {
        let mut copies: Vec<HandlerCopy> = Vec::new();
        for e in self.events_of(job) {
            match e.kind {
                Kind::HandlerStarted { pid } => copies.push(HandlerCopy {
                    attempt: e.attempt,
                    pid,
                    claimant: e.claimant.clone(),
                    start: e.at,
                    end: None,
                    ran_to_end: false,
                }),
                Kind::HandlerEnded { pid } | Kind::Gone { pid } => {
                    if let Some(c) = copies
                        .iter_mut()
                        .find(|c| c.attempt == e.attempt && c.pid == pid && c.end.is_none())
                    {
                        c.end = Some(e.at);
                        c.ran_to_end = matches!(e.kind, Kind::HandlerEnded { .. });
                    }
                }
                _ => {}
            }
        }
        copies
    }

    /// The events of `job` in time order (ties in the order they were added).
    pub fn events_of(&self, job: JobId) -> Vec<&Event> {
        let mut events: Vec<&Event> = self.events.iter().filter(|e| e.job == job).collect();
        events.sort_by_key(|e| e.at.micros);
        events
    }

    /// The jobs none of whose copies ran to its end: done ones among them took a done without
    /// their handler's whole effect.
    pub fn jobs_without_a_whole_copy(&self) -> Vec<JobId> {
        let whole = |job: &JobId| self.copies(*job).iter().any(|c| c.ran_to_end);
        self.jobs().into_iter().filter(|j| !whole(j)).collect()
    }

    /// Every job the history knows of.
    pub fn jobs(&self) -> Vec<JobId> {
        let mut jobs: Vec<JobId> = self.events.iter().map(|e| e.job).collect();
        jobs.extend(self.final_states.keys());
        jobs.sort_unstable();
        jobs.dedup();
        jobs
    }

    /// `job`'s events, one a line, with times relative to its first event.
    pub fn timeline(&self, job: JobId) -> String {
        let events = self.events_of(job);
        let origin = events.first().map_or(0, |e| e.at.micros);
        let mut out = String::new();
        for e in events {
            let secs = (e.at.micros - origin) as f64 / 1e6;
            let clock = match e.at.clock {
                Clock::Database => "db",
                Clock::Host => "host",
            };
            let by = e.claimant.as_deref().unwrap_or("?");
            out.push_str(&format!(
                "  {secs:+9.3}s {clock:<4} {:<9} attempt {} {} [claimant {by}]\n",
                format!("{:?}", e.source),
                e.attempt,
                e.kind,
            ));
        }
        if let Some(state) = self.final_states.get(&job) {
            out.push_str(&format!("  at the end the row is {state}\n"));
        }
        out
    }
}

/// One handler copy: a process that ran one attempt of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerCopy {
    pub attempt: u16,
    pub pid: u32,
    pub claimant: Option<String>,
    pub start: At,
    /// When it ended or was seen gone; None while it may still run.
    pub end: Option<At>,
    /// Whether it wrote its own end (false: killed or stopped part way).
    pub ran_to_end: bool,
}
