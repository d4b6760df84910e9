//! The multi-row `INSERT INTO job_queue` statement, built with only the columns the batch sets, so
//! that it stays as short as the application's own INSERT and every unset column keeps its `DEFAULT`.

use std::borrow::Borrow;
use std::time::Duration;

use sqlx::{MySql, QueryBuilder};

use super::new_job::{NewJob, RunAt};

/// Rows per multi-row INSERT: at most twelve placeholders a row stays far below the protocol's 65,535, and the
/// statement stays well under the default `max_allowed_packet` for typical payloads.
pub(super) const ROWS_PER_INSERT: usize = 1000;
/// The optional columns, in statement order. A column goes into the statement only when some row of the
/// batch sets it, and a row that does not set it gets the column's `DEFAULT`: the statement stays as
/// short as the application's own `INSERT INTO job_queue (kind, payload) VALUES …`.
#[derive(Debug, Clone, Copy)]
struct Columns {
    queue: bool,
    priority: bool,
    run_at: bool,
    max_attempts: bool,
    timeout_secs: bool,
    unique_key: bool,
    debounce_key: bool,
    order_key: bool,
    traceparent: bool,
}

impl Columns {
    fn of<J: Borrow<NewJob>>(jobs: &[J]) -> Self {
        let jobs = || jobs.iter().map(Borrow::borrow);
        Self {
            queue: jobs().any(|j| j.queue.is_some()),
            priority: jobs().any(|j| j.priority.is_some()),
            run_at: jobs().any(|j| j.run_at.is_some() || j.debounce.is_some()),
            max_attempts: jobs().any(|j| j.max_attempts.is_some()),
            timeout_secs: jobs().any(|j| j.timeout_secs.is_some()),
            unique_key: jobs().any(|j| j.unique_key.is_some() && j.debounce.is_none()),
            debounce_key: jobs().any(|j| j.debounce.is_some()),
            order_key: jobs().any(|j| j.order_key.is_some()),
            traceparent: jobs().any(|j| j.traceparent.is_some()),
        }
    }

    fn names(self) -> String {
        let mut names = vec!["kind", "payload"];
        for (on, name) in [
            (self.queue, "queue"),
            (self.priority, "priority"),
            (self.run_at, "run_at"),
            (self.max_attempts, "max_attempts"),
            (self.timeout_secs, "timeout_secs"),
            (self.unique_key, "unique_key"),
            (self.debounce_key, "debounce_key"),
            (self.order_key, "order_key"),
            (self.order_key, "order_lanes"),
            (self.order_key, "order_spacing_us"),
            (self.traceparent, "traceparent"),
        ] {
            if on {
                names.push(name);
            }
        }
        names.join(", ")
    }
}

fn push_value<T>(b: &mut sqlx::query_builder::Separated<'_, '_, MySql, &'static str>, v: Option<T>)
where
    T: for<'q> sqlx::Encode<'q, MySql> + sqlx::Type<MySql> + Send + 'static,
{
    match v {
        Some(v) => b.push_bind(v),
        None => b.push("DEFAULT"),
    };
}

/// One row's values. The kind and the payload are bound as borrowed text: a batch of a thousand rows
/// copies none of them before they are written to the packet.
fn push_row<'a>(
    mut b: sqlx::query_builder::Separated<'_, 'a, MySql, &'static str>,
    job: &'a NewJob,
    cols: Columns,
) {
    b.push_bind(job.kind.as_str());
    b.push_bind(job.payload.as_str());
    if cols.queue {
        push_value(&mut b, job.queue.clone());
    }
    if cols.priority {
        push_value(&mut b, job.priority);
    }
    if cols.run_at {
        // A debounced job is due its window after the enqueue (validate refused a due time of its own).
        let due = job.debounce.map(|d| RunAt::After(d.window)).or(job.run_at);
        match due {
            None => b.push("DEFAULT"),
            Some(RunAt::At(t)) => b.push_bind(t),
            Some(RunAt::After(d)) => b
                .push("NOW(6) + INTERVAL ")
                .push_bind_unseparated(d.as_micros().min(i64::MAX as u128) as i64)
                .push_unseparated(" MICROSECOND"),
        };
    }
    if cols.max_attempts {
        push_value(&mut b, job.max_attempts);
    }
    if cols.timeout_secs {
        push_value(&mut b, job.timeout_secs);
    }
    // A debounced job's key goes to debounce_key, any other's to unique_key.
    let key = || job.unique_key.as_ref().map(|k| k.as_bytes().to_vec());
    if cols.unique_key {
        push_value(&mut b, key().filter(|_| job.debounce.is_none()));
    }
    if cols.debounce_key {
        push_value(&mut b, key().filter(|_| job.debounce.is_some()));
    }
    if cols.order_key {
        push_value(
            &mut b,
            job.order_key.as_ref().map(|k| k.as_bytes().to_vec()),
        );
        push_value(&mut b, job.order_key.as_ref().map(|_| job.order_lanes));
        push_value(&mut b, job.order_spacing_us());
    }
    if cols.traceparent {
        push_value(&mut b, job.traceparent.map(|t| t.to_string()));
    }
}

/// `INSERT INTO job_queue …`, or `INSERT IGNORE` when `skip_duplicates`: only for rows that
/// [`NewJob::validate`] passed, because IGNORE also turns a value the column cannot hold into a warning.
pub(super) fn insert_statement<'a, J: Borrow<NewJob>>(
    jobs: &'a [J],
    skip_duplicates: bool,
) -> QueryBuilder<'a, MySql> {
    let cols = Columns::of(jobs);
    let ignore = if skip_duplicates { " IGNORE" } else { "" };
    let mut q = QueryBuilder::new(format!("INSERT{ignore} INTO job_queue ({}) ", cols.names()));
    q.push_values(jobs, |b, job| push_row(b, job.borrow(), cols));
    q
}

/// The INSERT of debounced jobs that share one maximum wait: a row whose kind and key a queued,
/// never-started job holds (the UNIQUE index on `debounce_slot`, schema 30) updates that
/// job instead: the new payload, run_at moved to the new row's (now + its window) but never past `max`
/// after the job was first enqueued, and one more merged enqueue counted. `id = LAST_INSERT_ID(id)`
/// makes the merged job's id the statement's insert id, as a new row's is.
///
/// The server reports 1 affected row per inserted row and 2 per merged one (the counter always
/// changes, so a merge is never "unchanged").
///
/// `VALUES(col)` is the form both servers take: MySQL 8.0.20+ prefers a row alias (`AS new`) and warns
/// that `VALUES()` is deprecated, but MariaDB has no row alias.
pub(super) fn debounce_statement<'a, J: Borrow<NewJob>>(
    jobs: &'a [J],
    max: Duration,
) -> QueryBuilder<'a, MySql> {
    let mut q = insert_statement(jobs, false);
    // Assignments apply left to right; none of these reads a column an earlier one wrote.
    q.push(
        " ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id), payload = VALUES(payload), \
         run_at = LEAST(VALUES(run_at), created_at + INTERVAL ",
    )
    .push_bind(max.as_micros().min(i64::MAX as u128) as i64)
    .push(" MICROSECOND), debounced = debounced + 1");
    q
}
