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
        "Rows of dead claimants made runnable again (requeued) or ended, by who released them."
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
}

/// A dead claimant's rows were released by `by` (reaper, supervisor): `requeued` made runnable again,
/// `ended` ended for good (their last attempt, or a cancel).
pub(crate) fn released(by: &str, requeued: u64, ended: u64) {
    counter!("jobq_released_jobs_total", "by" => by.to_string(), "now" => "requeued")
        .increment(requeued);
    counter!("jobq_released_jobs_total", "by" => by.to_string(), "now" => "ended").increment(ended);
}

/// `n` finished jobs were pruned.
pub(crate) fn pruned(n: u64) {
    counter!("jobq_pruned_jobs_total").increment(n);
}

/// A schedule created a job, for `cause`.
pub(crate) fn schedule_job(cause: &'static str) {
    counter!("jobq_schedule_jobs_total", "cause" => cause).increment(1);
}

/// What a reaper read from the database: due jobs and the oldest one's wait per queue, and processes
/// per role. Queues and roles that are gone are set to zero.
pub(crate) fn queue_gauges(due: &[(String, i64, f64)], processes: &[(String, i64)]) {
    static SEEN: OnceLock<Mutex<HashSet<(String, bool)>>> = OnceLock::new();
    let mut seen = SEEN
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    for (queue, is_queue) in seen.iter() {
        if *is_queue {
            gauge!("jobq_queue_due_jobs", "queue" => queue.clone()).set(0.0);
            gauge!("jobq_queue_oldest_due_age_seconds", "queue" => queue.clone()).set(0.0);
        } else {
            gauge!("jobq_processes", "role" => queue.clone()).set(0.0);
        }
    }
    for (queue, n, oldest) in due {
        gauge!("jobq_queue_due_jobs", "queue" => queue.clone()).set(*n as f64);
        gauge!("jobq_queue_oldest_due_age_seconds", "queue" => queue.clone()).set(*oldest);
        seen.insert((queue.clone(), true));
    }
    for (role, n) in processes {
        gauge!("jobq_processes", "role" => role.clone()).set(*n as f64);
        seen.insert((role.clone(), false));
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
