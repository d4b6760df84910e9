//! What jobq measures, recorded through the `metrics` facade: the names, labels and units live here, in
//! one place. The library installs no recorder: a program that wants the figures installs one (the
//! `jobq` binary serves them in Prometheus's text format on `--metrics-addr`); without one, recording
//! costs next to nothing.
//!
//! Names follow Prometheus's conventions: one `jobq_` prefix, base units (seconds), `_total` counters.
//! No label is unbounded: never a job id, a claim token or a payload; kinds are folded to `other` past
//! [`MAX_KINDS`] distinct ones, since kind names come from rows anyone can insert.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};

/// Most distinct `kind` label values one process reports; later kinds are reported as `other`.
pub const MAX_KINDS: usize = 100;

/// `kind` as a label value: itself while fewer than [`MAX_KINDS`] kinds were seen, else `other`.
fn kind_label(kind: &str) -> String {
    static SEEN: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let mut seen = SEEN
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if seen.contains(kind) {
        return kind.to_string();
    }
    if seen.len() < MAX_KINDS {
        seen.insert(kind.to_string());
        return kind.to_string();
    }
    "other".into()
}

/// Gives every metric its help text and unit. The `jobq` binary calls it when it installs its recorder;
/// a program with its own recorder may too.
pub fn describe_metrics() {
    describe_counter!(
        "jobq_jobs_claimed_total",
        "Jobs claimed by this process's workers, by queue and kind."
    );
    describe_counter!(
        "jobq_jobs_finished_total",
        "Attempts ended by this process's workers, by queue, kind and outcome (done, retry, dead, \
         cancelled, requeued, claim_lost)."
    );
    describe_histogram!(
        "jobq_job_duration_seconds",
        Unit::Seconds,
        "Time a job's handler ran, by queue and kind."
    );
    describe_gauge!("jobq_jobs_running", "Jobs this process is running now.");
    describe_histogram!(
        "jobq_job_pickup_delay_seconds",
        Unit::Seconds,
        "How long jobs had been due when this process claimed them (run_at to claim, by the \
         database's clock), by queue."
    );
    describe_counter!(
        "jobq_claims_total",
        "Claim transactions by result: full (as many rows as asked), short, empty."
    );
    describe_histogram!(
        "jobq_claim_duration_seconds",
        Unit::Seconds,
        "Time one claim took, probe and transaction included."
    );
    describe_counter!(
        "jobq_released_jobs_total",
        "Rows of dead claimants made runnable again (requeued) or ended, by who released them (reaper, \
         supervisor) and why (process_gone, lease_expired, session_gone, worker_exited)."
    );
    describe_counter!(
        "jobq_db_retries_total",
        "Statements retried after a transient failure, by kind (deadlock, lock_wait, read_only, \
         connection)."
    );
    describe_gauge!(
        "jobq_database_up",
        "1 while this process's heartbeat reaches the database, 0 after it failed."
    );
    describe_counter!(
        "jobq_pruned_jobs_total",
        "Finished jobs deleted past their retention."
    );
    describe_counter!(
        "jobq_schedule_jobs_total",
        "Jobs created by schedules, by cause (scheduled, catch_up, startup, manual)."
    );
    describe_gauge!(
        "jobq_queue_due_jobs",
        "Jobs due now and not running, by queue (read from the database by a reaper)."
    );
    describe_gauge!(
        "jobq_queue_oldest_due_age_seconds",
        Unit::Seconds,
        "How long the oldest due job of each queue has waited (read by a reaper)."
    );
    describe_gauge!(
        "jobq_processes",
        "Registered jobq processes, by role (read by a reaper)."
    );
    describe_counter!(
        "jobq_job_timeouts_total",
        "Attempts stopped at their timeout, by queue and kind (each is also counted as retry or dead)."
    );
    describe_histogram!(
        "jobq_claim_rows",
        "Rows one claim took (0 for an empty claim)."
    );
    describe_histogram!(
        "jobq_finish_duration_seconds",
        Unit::Seconds,
        "Time one batched finish of done jobs took (one transaction)."
    );
    describe_histogram!(
        "jobq_finish_rows",
        "Done jobs recorded by one batched finish."
    );
    describe_histogram!(
        "jobq_schedule_lateness_seconds",
        Unit::Seconds,
        "How late a schedule's run was created after its planned time."
    );
    describe_gauge!(
        "jobq_jobs",
        "Jobs by state, each counted up to 100,000 (read by a reaper)."
    );
    describe_gauge!(
        "jobq_queue_waiting_jobs",
        "Queued and retry jobs, due or not, by queue (read by a reaper)."
    );
    describe_gauge!(
        "jobq_queue_running_jobs",
        "Running jobs by queue (read by a reaper)."
    );
    describe_gauge!(
        "jobq_oldest_running_age_seconds",
        Unit::Seconds,
        "How long the longest-running job has run (read by a reaper; 0 when none runs)."
    );
    describe_gauge!(
        "jobq_schedules",
        "Schedules by state: enabled, paused, broken, finished (read by a reaper)."
    );
    describe_gauge!(
        "jobq_innodb_history_length",
        "InnoDB's history list length (undo not yet purged), which slows claims as it grows (read by \
         a reaper when its user may read information_schema.INNODB_METRICS)."
    );
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

/// A job was claimed, `waited_us` after it was due.
pub(crate) fn job_claimed(queue: &str, kind: &str, waited_us: i64) {
    counter!("jobq_jobs_claimed_total", "queue" => queue.to_string(), "kind" => kind_label(kind))
        .increment(1);
    histogram!("jobq_job_pickup_delay_seconds", "queue" => queue.to_string())
        .record(waited_us.max(0) as f64 / 1e6);
}

/// An attempt ended with `outcome`.
pub(crate) fn job_finished(queue: &str, kind: &str, outcome: &'static str) {
    counter!(
        "jobq_jobs_finished_total",
        "queue" => queue.to_string(),
        "kind" => kind_label(kind),
        "outcome" => outcome
    )
    .increment(1);
}

/// A handler ran for `took`.
pub(crate) fn job_ran(queue: &str, kind: &str, took: Duration) {
    histogram!("jobq_job_duration_seconds", "queue" => queue.to_string(), "kind" => kind_label(kind))
        .record(took.as_secs_f64());
}

/// A job started (`+1`) or ended (`-1`) here.
pub(crate) fn running(delta: f64) {
    gauge!("jobq_jobs_running").increment(delta);
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

/// An attempt was stopped at its timeout.
pub(crate) fn job_timed_out(queue: &str, kind: &str) {
    counter!("jobq_job_timeouts_total", "queue" => queue.to_string(), "kind" => kind_label(kind))
        .increment(1);
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
    /// Registered processes per role.
    pub(crate) processes: Vec<(String, i64)>,
    /// Jobs per state, capped.
    pub(crate) states: Vec<(&'static str, i64)>,
    /// Schedules per state.
    pub(crate) schedules: Vec<(String, i64)>,
    /// The longest-running job's run time so far.
    pub(crate) oldest_running_secs: f64,
    /// InnoDB's history list length, when readable.
    pub(crate) history_length: Option<i64>,
}

/// A gauge with one label: its name, its label's name, the label's value.
type LabelledGauge = (&'static str, &'static str, String);

pub(crate) fn db_gauges(g: &DbGauges) {
    static SEEN: OnceLock<Mutex<HashSet<LabelledGauge>>> = OnceLock::new();
    let mut seen = SEEN
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    for (name, label, value) in seen.iter() {
        gauge!(*name, *label => value.clone()).set(0.0);
    }
    let mut set = |name: &'static str, label: &'static str, value: &str, v: f64| {
        gauge!(name, label => value.to_string()).set(v);
        seen.insert((name, label, value.to_string()));
    };
    for (queue, n, oldest) in &g.due {
        set("jobq_queue_due_jobs", "queue", queue, *n as f64);
        set("jobq_queue_oldest_due_age_seconds", "queue", queue, *oldest);
    }
    for (queue, waiting, running) in &g.queues {
        set("jobq_queue_waiting_jobs", "queue", queue, *waiting as f64);
        set("jobq_queue_running_jobs", "queue", queue, *running as f64);
    }
    for (role, n) in &g.processes {
        set("jobq_processes", "role", role, *n as f64);
    }
    for (state, n) in &g.states {
        set("jobq_jobs", "state", state, *n as f64);
    }
    for (state, n) in &g.schedules {
        set("jobq_schedules", "state", state, *n as f64);
    }
    gauge!("jobq_oldest_running_age_seconds").set(g.oldest_running_secs);
    if let Some(h) = g.history_length {
        gauge!("jobq_innodb_history_length").set(h as f64);
    }
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
}
