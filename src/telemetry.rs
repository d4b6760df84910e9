//! What jobq measures, recorded through the `metrics` facade: the names, labels and units live here, in
//! one place. The library installs no recorder: a program that wants the figures installs one (the
//! `jobq` binary serves them in Prometheus's text format on `--metrics-addr`), before it starts its
//! workers: a worker registers the figures of each queue and kind it runs once, when it first claims
//! such a job, and a figure registered with no recorder installed records nowhere.
//!
//! Names follow Prometheus's conventions: one `jobq_` prefix, base units (seconds), `_total` counters.
//! No label is unbounded: never a job id, a claim token or a payload; kinds are folded to `other` past
//! [`MAX_KINDS`] distinct ones, since kind names come from rows anyone can insert.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use metrics::{
    Counter, Gauge, Histogram, Unit, counter, describe_counter, describe_gauge, describe_histogram,
    gauge, histogram,
};

/// Most distinct `kind` label values one process reports; later kinds are reported as `other`.
pub const MAX_KINDS: usize = 100;

/// Most distinct `queue` label values of the per-queue-and-state gauge; later queues are summed as
/// `other`. Queue names, like kinds, come from rows anyone can insert.
pub const MAX_QUEUES: usize = 100;

/// A label's values as reported: the first `max` distinct values as themselves, later ones as `other`.
struct Bounded {
    max: usize,
    seen: Mutex<BTreeSet<String>>,
}

impl Bounded {
    const fn new(max: usize) -> Self {
        Self {
            max,
            seen: Mutex::new(BTreeSet::new()),
        }
    }

    fn label(&self, value: &str) -> String {
        let mut seen = crate::sync::lock(&self.seen);
        if seen.contains(value) {
            return value.to_string();
        }
        if seen.len() < self.max {
            seen.insert(value.to_string());
            return value.to_string();
        }
        "other".into()
    }
}

/// `kind` as a label value: itself while fewer than [`MAX_KINDS`] kinds were seen, else `other`.
fn kind_label(kind: &str) -> String {
    static KINDS: Bounded = Bounded::new(MAX_KINDS);
    KINDS.label(kind)
}

/// The `queue` label values of `jobq_queue_jobs`.
static QUEUES: Bounded = Bounded::new(MAX_QUEUES);

/// What kind of metric a name is, for [`describe_metrics`].
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Every metric jobq records: its name, kind, unit (seconds or none) and help text.
const METRICS: &[(&str, Kind, Option<Unit>, &str)] = &[
    (
        "jobq_jobs_claimed_total",
        Kind::Counter,
        None,
        "Jobs claimed by this process's workers, by queue and kind.",
    ),
    (
        "jobq_jobs_finished_total",
        Kind::Counter,
        None,
        "Attempts ended by this process's workers, by queue, kind and outcome (done, retry, dead, timeout, \
      cancelled, requeued, snoozed, claim_lost); a timed-out attempt is timeout, whether the job is retried or dead.",
    ),
    (
        "jobq_job_duration_seconds",
        Kind::Histogram,
        Some(Unit::Seconds),
        "Time a job's handler ran, by queue and kind.",
    ),
    (
        "jobq_jobs_running",
        Kind::Gauge,
        None,
        "Jobs this process is running now.",
    ),
    (
        "jobq_job_pickup_delay_seconds",
        Kind::Histogram,
        Some(Unit::Seconds),
        "How long jobs had been due when their handler started (run_at to the claim by the database's \
      clock, then to the handler's start by this process's), by queue.",
    ),
    (
        "jobq_claims_total",
        Kind::Counter,
        None,
        "Claim transactions by result: full (as many rows as asked), short, empty.",
    ),
    (
        "jobq_claim_duration_seconds",
        Kind::Histogram,
        Some(Unit::Seconds),
        "Time one claim took, probe and transaction included.",
    ),
    (
        "jobq_released_jobs_total",
        Kind::Counter,
        None,
        "Rows of dead claimants made runnable again (requeued) or ended, by who released them (reaper, \
      supervisor) and why (process_gone, lease_expired, session_gone, worker_exited).",
    ),
    (
        "jobq_db_retries_total",
        Kind::Counter,
        None,
        "Statements retried after a transient failure, by kind (deadlock, lock_wait, read_only, \
      connection).",
    ),
    (
        "jobq_database_up",
        Kind::Gauge,
        None,
        "1 while this process's heartbeat reaches the database, 0 after it failed.",
    ),
    (
        "jobq_aged_jobs_total",
        Kind::Counter,
        None,
        "Waiting jobs whose priority the reaper's aging pass raised.",
    ),
    (
        "jobq_pruned_jobs_total",
        Kind::Counter,
        None,
        "Finished jobs deleted past their retention.",
    ),
    (
        "jobq_schedule_jobs_total",
        Kind::Counter,
        None,
        "Jobs created by schedules, by cause (scheduled, catch_up, startup, manual).",
    ),
    (
        "jobq_queue_due_jobs",
        Kind::Gauge,
        None,
        "Jobs due now and not running, by queue (read from the database by a reaper).",
    ),
    (
        "jobq_queue_oldest_due_age_seconds",
        Kind::Gauge,
        Some(Unit::Seconds),
        "How long the oldest due job of each queue has waited (read by a reaper).",
    ),
    (
        "jobq_processes",
        Kind::Gauge,
        None,
        "Registered jobq processes, by role (read by a reaper).",
    ),
    (
        "jobq_claim_rows",
        Kind::Histogram,
        None,
        "Rows one claim took (0 for an empty claim).",
    ),
    (
        "jobq_finish_duration_seconds",
        Kind::Histogram,
        Some(Unit::Seconds),
        "Time one batched finish of done jobs took (one transaction).",
    ),
    (
        "jobq_finish_rows",
        Kind::Histogram,
        None,
        "Done jobs recorded by one batched finish.",
    ),
    (
        "jobq_schedule_lateness_seconds",
        Kind::Histogram,
        Some(Unit::Seconds),
        "How late a schedule's run was created after its planned time.",
    ),
    (
        "jobq_jobs",
        Kind::Gauge,
        None,
        "Jobs by state (waiting, queued, running, retry, done, dead, cancelled), each counted up to \
      100,000, done jobs among the newest 20,000 ids (read by a reaper).",
    ),
    (
        "jobq_queue_jobs",
        Kind::Gauge,
        None,
        "Jobs by queue and state: queued, retry and running exact; dead, cancelled and waiting \
      counted among each state's 10,000 most recent rows, done among the newest 10,000 done rows of the \
      newest 20,000 ids, so past that a lower bound (the dashboard \
      shows it as N+); queues past the first 100 are summed as other (read by a reaper).",
    ),
    (
        "jobq_queue_waiting_jobs",
        Kind::Gauge,
        None,
        "Queued and retry jobs, due or not, by queue (read by a reaper).",
    ),
    (
        "jobq_queue_running_jobs",
        Kind::Gauge,
        None,
        "Running jobs by queue (read by a reaper).",
    ),
    (
        "jobq_queue_paused",
        Kind::Gauge,
        None,
        "1 while a queue is paused (jobq queue pause), 0 once it is resumed: its due jobs wait on \
      purpose, which an alert on their wait leaves out (read by a reaper).",
    ),
    (
        "jobq_queue_held_jobs",
        Kind::Gauge,
        None,
        "Due jobs of a queue that something holds back, by reason: paused (the queue is paused), \
      pinned_away (pinned to hosts where no live worker serves it), limit (a concurrency limit is \
      full, or a limit is 0); a job held for two reasons counts under both (read by a reaper).",
    ),
    (
        "jobq_waiting_long_jobs",
        Kind::Gauge,
        None,
        "Jobs that have waited for other jobs longer than the reaper's long_wait (default 1 h; read \
      by a reaper).",
    ),
    (
        "jobq_oldest_running_age_seconds",
        Kind::Gauge,
        Some(Unit::Seconds),
        "How long the longest-running job has run (read by a reaper; 0 when none runs).",
    ),
    (
        "jobq_schedules",
        Kind::Gauge,
        None,
        "Schedules by state: enabled, paused, broken, finished (read by a reaper).",
    ),
    (
        "jobq_innodb_history_length",
        Kind::Gauge,
        None,
        "InnoDB's history list length (undo not yet purged), which slows claims as it grows (read by \
      a reaper when its user may read information_schema.INNODB_METRICS).",
    ),
];

/// Gives every metric its help text and unit. The `jobq` binary calls it when it installs its recorder;
/// a program with its own recorder may too.
pub fn describe_metrics() {
    for &(name, kind, unit, help) in METRICS {
        match (kind, unit) {
            (Kind::Counter, _) => describe_counter!(name, help),
            (Kind::Gauge, Some(unit)) => describe_gauge!(name, unit, help),
            (Kind::Gauge, None) => describe_gauge!(name, help),
            (Kind::Histogram, Some(unit)) => describe_histogram!(name, unit, help),
            (Kind::Histogram, None) => describe_histogram!(name, help),
        }
    }
}

/// A statement failed in a way worth retrying (`kind`: deadlock, lock_wait, read_only, connection)
/// and is tried again.
pub(crate) fn db_retry(kind: &'static str) {
    counter!("jobq_db_retries_total", "kind" => kind).increment(1);
}

/// This process's heartbeat reached the database (`true`) or failed (`false`).
pub(crate) fn database_up(up: bool) {
    gauge!("jobq_database_up").set(if up { 1.0 } else { 0.0 });
}

/// The figures of the jobs of one queue and kind, as one worker records them: registered with the
/// recorder once, when the worker first claims such a job, so that each job then costs a few atomic
/// updates. Registered per job, as the `counter!` macros do at every call, the four figures built
/// their keys and allocated their labels for every job, with or without a recorder: about an eighth
/// of a draining worker's instructions (`valgrind --tool=callgrind` of `jobq __bench-worker`).
/// Handles taken before a recorder is installed record nowhere, so a program installs its recorder
/// before it starts its workers (as the `jobq` binary does).
#[derive(Debug)]
pub(crate) struct JobFigures {
    queue: String,
    kind: String,
    claimed: Counter,
    pickup: Histogram,
    duration: Histogram,
    running: Gauge,
    /// `jobq_jobs_finished_total` by outcome (in the order of [`OUTCOMES`]), registered at an
    /// outcome's first use so that outcomes that never happen add no series.
    finished: [OnceLock<Counter>; OUTCOMES.len()],
    kind_label: String,
}

/// The `outcome` labels of `jobq_jobs_finished_total`.
pub(crate) const OUTCOMES: [&str; 8] = [
    "done",
    "timeout",
    "retry",
    "dead",
    "cancelled",
    "requeued",
    "snoozed",
    "claim_lost",
];

impl JobFigures {
    fn new(queue: &str, kind: &str) -> Self {
        let kind_label = kind_label(kind);
        Self {
            claimed: counter!("jobq_jobs_claimed_total", "queue" => queue.to_string(), "kind" => kind_label.clone()),
            pickup: histogram!("jobq_job_pickup_delay_seconds", "queue" => queue.to_string()),
            duration: histogram!("jobq_job_duration_seconds", "queue" => queue.to_string(), "kind" => kind_label.clone()),
            running: gauge!("jobq_jobs_running"),
            finished: Default::default(),
            queue: queue.to_string(),
            kind: kind.to_string(),
            kind_label,
        }
    }

    /// Whether these are the figures of jobs of `queue` and `kind`.
    pub(crate) fn are_for(&self, queue: &str, kind: &str) -> bool {
        self.queue == queue && self.kind == kind
    }

    /// A job was claimed.
    pub(crate) fn claimed(&self) {
        self.claimed.increment(1);
    }

    /// A job's handler started, `waited` after the job was due.
    pub(crate) fn started(&self, waited: Duration) {
        self.running.increment(1.0);
        self.pickup.record(waited.as_secs_f64());
    }

    /// A handler ran for `took`.
    pub(crate) fn ran(&self, took: Duration) {
        self.running.decrement(1.0);
        self.duration.record(took.as_secs_f64());
    }

    /// An attempt ended with `outcome` (one of [`OUTCOMES`]).
    pub(crate) fn finished(&self, outcome: &'static str) {
        let Some(at) = OUTCOMES.iter().position(|o| *o == outcome) else {
            // An outcome missing from OUTCOMES (the unit test in `worker::execute` guards the list)
            // is still counted, registered at this call.
            debug_assert!(false, "outcome {outcome:?} is not in OUTCOMES");
            self.finished_counter(outcome).increment(1);
            return;
        };
        self.finished[at]
            .get_or_init(|| self.finished_counter(outcome))
            .increment(1);
    }

    /// Registers the counter of attempts of this queue and kind that ended with `outcome`.
    fn finished_counter(&self, outcome: &'static str) -> Counter {
        counter!(
            "jobq_jobs_finished_total",
            "queue" => self.queue.clone(),
            "kind" => self.kind_label.clone(),
            "outcome" => outcome
        )
    }
}

/// One worker's [`JobFigures`], by queue and kind. A worker claims only its own queues and the kinds
/// it has handlers for, so this holds at most one entry per pair of them.
#[derive(Debug, Default)]
pub(crate) struct FiguresByJob {
    by_queue: Mutex<HashMap<String, HashMap<String, Arc<JobFigures>>>>,
}

impl FiguresByJob {
    /// The figures of jobs of `queue` and `kind`, registered at the first call.
    pub(crate) fn of(&self, queue: &str, kind: &str) -> Arc<JobFigures> {
        let mut by_queue = crate::sync::lock(&self.by_queue);
        let by_kind = match by_queue.get_mut(queue) {
            Some(k) => k,
            None => by_queue.entry(queue.to_string()).or_default(),
        };
        if let Some(f) = by_kind.get(kind) {
            return f.clone();
        }
        let f = Arc::new(JobFigures::new(queue, kind));
        by_kind.insert(kind.to_string(), f.clone());
        f
    }
}

/// A claim asked for `asked` rows, got `got`, and took `took`.
pub(crate) fn claimed(asked: usize, got: usize, took: Duration) {
    let result = match got {
        0 => "empty",
        n if n < asked => "short",
        _ => "full",
    };
    counter!("jobq_claims_total", "result" => result).increment(1);
    histogram!("jobq_claim_duration_seconds").record(took.as_secs_f64());
    histogram!("jobq_claim_rows").record(got as f64);
}

/// A batched finish recorded `rows` done jobs in `took`.
pub(crate) fn finished_batch(rows: usize, took: Duration) {
    histogram!("jobq_finish_duration_seconds").record(took.as_secs_f64());
    histogram!("jobq_finish_rows").record(rows as f64);
}

/// A schedule's run was created `late` after its planned time.
pub(crate) fn schedule_lateness(late: Duration) {
    histogram!("jobq_schedule_lateness_seconds").record(late.as_secs_f64());
}

/// A dead claimant's rows were released by `by` (reaper, supervisor) for `reason` (process_gone,
/// lease_expired, session_gone, worker_exited): `requeued` made runnable again, `ended` ended for good
/// (their last attempt, or a cancel).
pub(crate) fn released(by: &str, reason: &'static str, requeued: u64, ended: u64) {
    for (now, n) in [("requeued", requeued), ("ended", ended)] {
        counter!("jobq_released_jobs_total", "by" => by.to_string(), "reason" => reason, "now" => now)
            .increment(n);
    }
}

/// The aging pass raised the priority of `n` waiting jobs.
pub(crate) fn aged(n: u64) {
    counter!("jobq_aged_jobs_total").increment(n);
}

/// `n` finished jobs were pruned.
pub(crate) fn pruned(n: u64) {
    counter!("jobq_pruned_jobs_total").increment(n);
}

/// A schedule created a job, for `cause`.
pub(crate) fn schedule_job(cause: &'static str) {
    counter!("jobq_schedule_jobs_total", "cause" => cause).increment(1);
}

/// What a reaper read from the database, as gauges. Labels seen before and missing now are set to zero,
/// so a queue that emptied does not keep its last value.
#[derive(Debug, Default)]
pub(crate) struct DbGauges {
    /// Per queue: due jobs and the oldest one's wait.
    pub(crate) due: Vec<(String, i64, f64)>,
    /// Per queue: waiting (queued and retry) and running jobs.
    pub(crate) queues: Vec<(String, i64, i64)>,
    /// The paused queues. Their names come from `jobq_queues`, which holds a row only while a queue is
    /// paused, so the label is bounded by what operators pause; a resumed queue's gauge drops to 0.
    pub(crate) paused: Vec<String>,
    /// Per queue and reason: due jobs held back (`paused`, `pinned_away`, `limit`).
    pub(crate) held: Vec<(String, &'static str, i64)>,
    /// Registered processes per role.
    pub(crate) processes: Vec<(String, i64)>,
    /// Jobs per state, capped.
    pub(crate) states: Vec<(&'static str, i64)>,
    /// Jobs per queue and state, each state's rows capped.
    pub(crate) queue_states: Vec<(String, &'static str, i64)>,
    /// Schedules per state.
    pub(crate) schedules: Vec<(String, i64)>,
    /// The longest-running job's run time so far.
    pub(crate) oldest_running_secs: f64,
    /// Jobs waiting for other jobs longer than the reaper's `long_wait`.
    pub(crate) waiting_long: i64,
    /// InnoDB's history list length, when readable.
    pub(crate) history_length: Option<i64>,
}

/// A gauge's name and its labels' names and values.
type LabelledGauge = (&'static str, Vec<(&'static str, String)>);

/// Sets the gauges read from the database.
pub(crate) fn db_gauges(g: &DbGauges) {
    static SEEN: OnceLock<Mutex<HashSet<LabelledGauge>>> = OnceLock::new();
    let mut seen = crate::sync::lock(SEEN.get_or_init(Mutex::default));
    for (name, labels) in seen.iter() {
        gauge!(*name, labels).set(0.0);
    }
    let mut set = |name: &'static str, labels: Vec<(&'static str, String)>, v: f64| {
        gauge!(name, &labels).set(v);
        seen.insert((name, labels));
    };
    let one = |label: &'static str, value: &str| vec![(label, value.to_string())];
    for (queue, n, oldest) in &g.due {
        set("jobq_queue_due_jobs", one("queue", queue), *n as f64);
        set(
            "jobq_queue_oldest_due_age_seconds",
            one("queue", queue),
            *oldest,
        );
    }
    for (queue, waiting, running) in &g.queues {
        set(
            "jobq_queue_waiting_jobs",
            one("queue", queue),
            *waiting as f64,
        );
        set(
            "jobq_queue_running_jobs",
            one("queue", queue),
            *running as f64,
        );
    }
    for queue in &g.paused {
        set("jobq_queue_paused", one("queue", queue), 1.0);
    }
    for (queue, reason, n) in &g.held {
        let labels = vec![("queue", queue.clone()), ("reason", reason.to_string())];
        set("jobq_queue_held_jobs", labels, *n as f64);
    }
    for (role, n) in &g.processes {
        set("jobq_processes", one("role", role), *n as f64);
    }
    for (state, n) in &g.states {
        set("jobq_jobs", one("state", state), *n as f64);
    }
    for ((queue, state), n) in fold_queues(&QUEUES, &g.queue_states) {
        let labels = vec![("queue", queue), ("state", state.to_string())];
        set("jobq_queue_jobs", labels, n as f64);
    }
    for (state, n) in &g.schedules {
        set("jobq_schedules", one("state", state), *n as f64);
    }
    gauge!("jobq_oldest_running_age_seconds").set(g.oldest_running_secs);
    gauge!("jobq_waiting_long_jobs").set(g.waiting_long as f64);
    if let Some(h) = g.history_length {
        gauge!("jobq_innodb_history_length").set(h as f64);
    }
}

/// Per queue and state counts with the queues past [`MAX_QUEUES`] summed as `other`.
fn fold_queues(
    queues: &Bounded,
    counts: &[(String, &'static str, i64)],
) -> BTreeMap<(String, &'static str), i64> {
    let mut out = BTreeMap::new();
    for (queue, state, n) in counts {
        *out.entry((queues.label(queue), *state)).or_default() += n;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_past_the_bound_are_folded() {
        for i in 0..MAX_KINDS * 2 {
            let k = format!("k{i}");
            let label = kind_label(&k);
            assert!(label == k || label == "other");
        }
        assert_eq!(kind_label("a-kind-never-seen-before"), "other");
    }

    #[test]
    fn queues_past_the_bound_are_summed_as_other() {
        let counts: Vec<(String, &'static str, i64)> = (0..MAX_QUEUES + 5)
            .map(|i| (format!("q{i}"), "queued", 1))
            .collect();
        let folded = fold_queues(&Bounded::new(MAX_QUEUES), &counts);
        assert_eq!(folded.len(), MAX_QUEUES + 1);
        assert_eq!(folded[&("other".to_string(), "queued")], 5);
        assert_eq!(folded.values().sum::<i64>(), (MAX_QUEUES + 5) as i64);
    }
}
