//! Inserting jobs. Applications can equally write the same rows with plain SQL; this is the typed way.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{MySql, QueryBuilder};

use crate::error::{Error, Result};
use crate::job::JobId;
use crate::name::Name;

/// Rows per multi-row INSERT: at most seven placeholders a row stays far below the protocol's 65,535, and the
/// statement stays well under the default `max_allowed_packet` for typical payloads.
const ROWS_PER_INSERT: usize = 1000;

/// A job to insert. Only the kind is required; everything else has the table's default.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    pub(crate) kind: String,
    pub(crate) payload: String,
    pub(crate) queue: Option<String>,
    pub(crate) priority: Option<i16>,
    pub(crate) run_at: Option<RunAt>,
    pub(crate) max_attempts: Option<u16>,
    pub(crate) timeout_secs: Option<u32>,
}

/// When a job becomes due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunAt {
    /// At this instant.
    At(DateTime<Utc>),
    /// This long after the database's `NOW(6)` at insert time (so client clock skew does not matter).
    After(Duration),
}

impl NewJob {
    /// A job of `kind` with an empty object as payload.
    pub fn new(kind: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            payload: "{}".into(),
            queue: None,
            priority: None,
            run_at: None,
            max_attempts: None,
            timeout_secs: None,
        }
    }

    /// Sets the payload from any serializable value.
    pub fn payload<T: serde::Serialize>(mut self, value: &T) -> Result<Self> {
        self.payload = serde_json::to_string(value).map_err(Error::Payload)?;
        Ok(self)
    }

    /// Sets the payload from JSON text, which is checked here so the error names the payload rather than
    /// the server's CHECK constraint.
    pub fn payload_json(mut self, text: &str) -> Result<Self> {
        serde_json::from_str::<serde_json::Value>(text).map_err(Error::Payload)?;
        self.payload = text.to_string();
        Ok(self)
    }

    /// The queue (default `default`).
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Priority: smaller runs first (default 0).
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Due at this instant (default: now).
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(RunAt::At(at));
        self
    }

    /// Due this long after the insert, by the database's clock.
    pub fn run_in(mut self, delay: Duration) -> Self {
        self.run_at = Some(RunAt::After(delay));
        self
    }

    /// Attempts before the job is dead (default 20).
    pub fn max_attempts(mut self, n: u16) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// Maximum run time of one attempt (default: the handler's, else the worker's), in whole seconds,
    /// rounded up.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout_secs = Some(crate::job::timeout_secs(t));
        self
    }

    fn validate(&self) -> Result<()> {
        Name::Kind.check(&self.kind)?;
        if let Some(q) = &self.queue {
            Name::Queue.check(q)?;
        }
        if self.max_attempts == Some(0) {
            return Err(Error::invalid("max_attempts", "must be at least 1"));
        }
        if self.timeout_secs == Some(0) {
            return Err(Error::invalid("timeout", "must be above zero"));
        }
        let due = match self.run_at {
            None => return Ok(()),
            Some(RunAt::At(t)) => t,
            Some(RunAt::After(d)) => chrono::Duration::from_std(d)
                .ok()
                .and_then(|d| Utc::now().checked_add_signed(d))
                .unwrap_or(DateTime::<Utc>::MAX_UTC),
        };
        // Out-of-range values would not be refused by the server: bound as a binary temporal value, MariaDB
        // silently stores the current time instead, and the job would run at once.
        if !(min_run_at()..=max_run_at()).contains(&due) {
            return Err(Error::invalid(
                "run_at",
                format!(
                    "{} is outside what the run_at column holds ({})",
                    due.format("%Y-%m-%d %H:%M:%S UTC"),
                    crate::job::timestamp_range_text(),
                ),
            ));
        }
        Ok(())
    }
}

fn min_run_at() -> DateTime<Utc> {
    crate::job::timestamp_bounds().0
}

fn max_run_at() -> DateTime<Utc> {
    crate::job::timestamp_bounds().1
}

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
}

impl Columns {
    fn of(jobs: &[NewJob]) -> Self {
        Self {
            queue: jobs.iter().any(|j| j.queue.is_some()),
            priority: jobs.iter().any(|j| j.priority.is_some()),
            run_at: jobs.iter().any(|j| j.run_at.is_some()),
            max_attempts: jobs.iter().any(|j| j.max_attempts.is_some()),
            timeout_secs: jobs.iter().any(|j| j.timeout_secs.is_some()),
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

fn push_row(
    mut b: sqlx::query_builder::Separated<'_, '_, MySql, &'static str>,
    job: &NewJob,
    cols: Columns,
) {
    b.push_bind(job.kind.clone());
    b.push_bind(job.payload.clone());
    if cols.queue {
        push_value(&mut b, job.queue.clone());
    }
    if cols.priority {
        push_value(&mut b, job.priority);
    }
    if cols.run_at {
        match job.run_at {
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
}

fn insert_statement<'a>(jobs: &'a [NewJob]) -> QueryBuilder<'a, MySql> {
    let cols = Columns::of(jobs);
    let mut q = QueryBuilder::new(format!("INSERT INTO job_queue ({}) ", cols.names()));
    q.push_values(jobs, |b, job| push_row(b, job, cols));
    q
}

/// Inserts one job and returns its id. `executor` may be a pool, a connection or `&mut *transaction`,
/// so a job can be enqueued in the same transaction as the application's own writes.
pub async fn enqueue<'e, E>(executor: E, job: &NewJob) -> Result<JobId>
where
    E: sqlx::Executor<'e, Database = MySql>,
{
    job.validate()?;
    let done = insert_statement(std::slice::from_ref(job))
        .build()
        .execute(executor)
        .await?;
    Ok(JobId(done.last_insert_id()))
}

/// Inserts many jobs with multi-row INSERTs of up to 1,000 rows and returns how many were inserted. On a
/// connection or transaction the batches share its fate; on a pool each batch commits by itself.
pub async fn enqueue_many(conn: &mut sqlx::MySqlConnection, jobs: &[NewJob]) -> Result<u64> {
    for job in jobs {
        job.validate()?;
    }
    let mut n = 0;
    for chunk in jobs.chunks(ROWS_PER_INSERT) {
        n += insert_statement(chunk)
            .build()
            .execute(&mut *conn)
            .await?
            .rows_affected();
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_at_must_fit_the_column() {
        let far = DateTime::from_timestamp(2_300_000_000, 0).unwrap();
        let e = NewJob::new("k")
            .run_at(far)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("2042") && e.contains("2038-01-19 03:14:07"),
            "{e}"
        );
        assert!(NewJob::new("k").run_at(max_run_at()).validate().is_ok());
        let e = NewJob::new("k")
            .run_in(Duration::from_secs(20 * 366 * 86400))
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("outside"), "{e}");
        let before_1970 = DateTime::from_timestamp(-5, 0).unwrap();
        assert!(NewJob::new("k").run_at(before_1970).validate().is_err());
        let e = NewJob::new("k")
            .timeout(Duration::ZERO)
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("timeout"), "{e}");
        assert_eq!(
            NewJob::new("k")
                .timeout(Duration::from_millis(1500))
                .timeout_secs,
            Some(2)
        );
    }

    #[test]
    fn payload_text_is_checked() {
        let e = NewJob::new("k")
            .payload_json("{oops")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("payload is not valid JSON"), "{e}");
        assert!(NewJob::new("k").payload_json("[1,2]").is_ok());
    }
}
