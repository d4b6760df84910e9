//! SQL handlers: run one configured statement per job, with parameters bound from payload fields.
//!
//! `sql = "CALL rollup(?, ?)"` with `params = ["day", "region"]` runs `CALL rollup(<payload.day>,
//! <payload.region>)` as a prepared statement. The statement text comes only from the configuration; a
//! payload field is always bound as a value, never spliced into SQL. Strings, numbers, booleans and null
//! bind as themselves; objects and arrays bind as JSON text. A missing field fails the job for good.
//! Four names bind the job's own facts instead of a payload field ([`JOB_PARAMS`]): `$job_id`, `$claim`
//! and `$attempt`, what a statement needs to fence its own writes or to call `jobq_progress`,
//! `jobq_output` or `jobq_finish`, and `$traceparent`, the attempt's W3C trace context or NULL
//! (docs/traces.md), for a statement that records which trace its rows came from.
//!
//! A statement that outlives its timeout is stopped with `KILL QUERY` from another connection.
//!
//! **One copy at a time, on the server too.** A statement runs on the server, not in the worker: if the
//! worker loses touch with the database (a network cut), it stops the job's task but cannot send `KILL
//! QUERY`, and the server goes on running the statement until it tries to send the result. So every
//! attempt holds a named lock for its job (`GET_LOCK`, per database and job id) while its statement runs.
//! An attempt that finds the lock held knows an earlier copy still runs there: it ends the holder's
//! session (`IS_USED_LOCK` names it) with `KILL CONNECTION` and waits for the lock before it starts.
//! `KILL QUERY` would not do: it ends only the statement running at the moment, and a procedure goes
//! on with its next one (measured: a `CALL` whose `DO SLEEP(5)` got `KILL QUERY` ran its next `INSERT`
//! and returned success). That session belongs to a claimant judged gone, whose row has been handed
//! on. Named locks are local to one server (on Galera, to one node).
//!
//! **Exactly once, with `transactional = true`.** The statement and the job's fenced done finish run
//! in one transaction on one connection ([`JobContext::finish_in`]): the finish checks that the row
//! still carries this attempt's claim before COMMIT, and rolls the statement back if it does not. A
//! worker killed mid-job, a connection killed mid-statement, a claim handed on while the statement ran:
//! in each case either the effects and the finish commit together, or neither does, so the effects
//! happen exactly once. The statement must not commit by itself (DDL, or COMMIT inside a procedure).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sqlx::MySqlPool;

use super::{BoxFuture, Handler, JobContext, JobError};

/// The per-job lock: unique per database (a hash of its name, since lock names are server-wide and at
/// most 64 characters) and job id.
const JOB_LOCK: &str = "CONCAT('jobq:', LEFT(MD5(DATABASE()), 16), ':', ?)";

/// How long a new attempt waits for an earlier copy's session to end after `KILL CONNECTION`.
const EARLIER_COPY_WAIT: Duration = Duration::from_secs(10);

/// How long a statement stopped with `KILL QUERY` gets to return, so its connection goes back to the
/// pool clean; after that it is dropped with its connection.
const KILLED_RETURN_WAIT: Duration = Duration::from_secs(5);

/// Runs one statement per job.
#[derive(Debug, Clone)]
pub struct SqlHandler {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pool: MySqlPool,
    sql: String,
    params: Vec<String>,
    transactional: bool,
}

impl SqlHandler {
    /// A handler running `sql` on `pool`, binding the payload fields named in `params`.
    pub fn new(pool: MySqlPool, sql: String, params: Vec<String>) -> Self {
        Self {
            inner: Arc::new(Inner {
                pool,
                sql,
                params,
                transactional: false,
            }),
        }
    }

    /// With `true`, the statement and the job's done finish commit together (see the module docs).
    pub fn transactional(self, transactional: bool) -> Self {
        let inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| Inner {
            pool: shared.pool.clone(),
            sql: shared.sql.clone(),
            params: shared.params.clone(),
            transactional: shared.transactional,
        });
        Self {
            inner: Arc::new(Inner {
                transactional,
                ..inner
            }),
        }
    }
}

impl Handler for SqlHandler {
    fn call(&self, job: JobContext) -> BoxFuture<Result<(), JobError>> {
        let inner = self.inner.clone();
        Box::pin(async move { inner.run(job).await })
    }
}

/// The `params` names that bind the job's own facts rather than payload fields.
pub const JOB_PARAMS: &[&str] = &["$job_id", "$claim", "$attempt", "$traceparent"];

/// The value of one of [`JOB_PARAMS`] for `job`; `None` for a payload field's name.
fn job_value(name: &str, job: &JobContext) -> Option<Value> {
    match name {
        "$job_id" => Some(Value::from(job.id.0)),
        "$claim" => Some(Value::String(job.claim.clone())),
        "$attempt" => Some(Value::from(job.attempt)),
        // NULL for a job without a trace context.
        "$traceparent" => Some(
            job.traceparent()
                .map_or(Value::Null, |t| Value::String(t.to_string())),
        ),
        _ => None,
    }
}

impl Inner {
    async fn run(&self, job: JobContext) -> Result<(), JobError> {
        let args = self.bind_values(&job)?;
        let mut conn = self.pool.acquire().await?;
        let (conn_id, locked): (u64, Option<i64>) =
            sqlx::query_as(&format!("SELECT CONNECTION_ID(), GET_LOCK({JOB_LOCK}, 0)"))
                .bind(job.id)
                .fetch_one(&mut *conn)
                .await?;
        if locked != Some(1) {
            self.stop_earlier_copy(&mut conn, job.id).await?;
        }
        let result = if self.transactional {
            self.execute_with_finish(&mut conn, conn_id, &args, &job)
                .await
        } else {
            self.execute(&mut conn, conn_id, &args, &job).await
        };
        // A killed or broken connection releases the lock with its session; `RELEASE_LOCK` on it then
        // fails, which is fine.
        let _ = sqlx::query(&format!("DO RELEASE_LOCK({JOB_LOCK})"))
            .bind(job.id)
            .execute(&mut *conn)
            .await;
        result
    }

    /// Stops the statement of an earlier attempt of this job that still holds its lock, and takes the
    /// lock once it is free.
    async fn stop_earlier_copy(
        &self,
        conn: &mut sqlx::MySqlConnection,
        id: crate::job::JobId,
    ) -> Result<(), JobError> {
        // IS_USED_LOCK's type is a signed INT on MariaDB.
        let holder: Option<i64> = sqlx::query_scalar(&format!("SELECT IS_USED_LOCK({JOB_LOCK})"))
            .bind(id)
            .fetch_one(&mut *conn)
            .await?;
        if let Some(holder) = holder {
            tracing::warn!(
                job_id = id.0,
                holder,
                "an earlier attempt's statement still runs on the server; ending its session (KILL CONNECTION)"
            );
            let _ = sqlx::query(&format!("KILL CONNECTION {holder}"))
                .execute(&self.pool)
                .await;
        }
        let got: Option<i64> = sqlx::query_scalar(&format!(
            "SELECT GET_LOCK({JOB_LOCK}, {})",
            EARLIER_COPY_WAIT.as_secs()
        ))
        .bind(id)
        .fetch_one(&mut *conn)
        .await?;
        if got == Some(1) {
            Ok(())
        } else {
            Err(JobError::retry(format!(
                "an earlier attempt's statement still runs on the server (connection {}); will try again",
                holder.map_or_else(|| "?".into(), |h| h.to_string())
            )))
        }
    }

    /// The statement and the job's fenced done finish in one transaction.
    async fn execute_with_finish(
        &self,
        conn: &mut sqlx::MySqlConnection,
        conn_id: u64,
        args: &[Value],
        job: &JobContext,
    ) -> Result<(), JobError> {
        use sqlx::Connection;
        let mut tx = conn.begin().await?;
        self.execute(&mut tx, conn_id, args, job).await?;
        if !job.finish_in(&mut tx).await? {
            tx.rollback().await?;
            return Err(JobError::retry(
                "the claim was lost before the statement committed; rolled back",
            ));
        }
        tx.commit().await?;
        Ok(())
    }

    async fn execute(
        &self,
        conn: &mut sqlx::MySqlConnection,
        conn_id: u64,
        args: &[Value],
        job: &JobContext,
    ) -> Result<(), JobError> {
        let mut q = sqlx::query(&self.sql);
        for v in args {
            q = match v {
                Value::Null => q.bind(None::<String>),
                Value::Bool(b) => q.bind(*b),
                Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                    (Some(i), _, _) => q.bind(i),
                    (None, Some(u), _) => q.bind(u),
                    (_, _, f) => q.bind(f.unwrap_or(f64::NAN)),
                },
                Value::String(s) => q.bind(s.as_str()),
                other => q.bind(other.to_string()),
            };
        }
        let exec = q.execute(conn);
        tokio::pin!(exec);
        tokio::select! {
            r = &mut exec => r.map(|_| ()).map_err(|e| JobError::retry(format!("{}: {e}", self.sql))),
            () = job.cancel.cancelled() => {
                let _ = sqlx::query(&format!("KILL QUERY {conn_id}")).execute(&self.pool).await;
                // Let the killed statement return so the connection goes back to the pool clean.
                let _ = tokio::time::timeout(KILLED_RETURN_WAIT, &mut exec).await;
                Err(JobError::retry(format!("{}: stopped (KILL QUERY)", self.sql)))
            }
        }
    }

    /// The values to bind, in placeholder order: the job's own for [`JOB_PARAMS`], else payload
    /// fields.
    fn bind_values(&self, job: &JobContext) -> Result<Vec<Value>, JobError> {
        if self.params.iter().all(|p| job_value(p, job).is_some()) {
            return Ok(self
                .params
                .iter()
                .filter_map(|p| job_value(p, job))
                .collect());
        }
        let value: Value = serde_json::from_str(job.payload_str())
            .map_err(|e| JobError::fatal(format!("payload is not JSON: {e}")))?;
        let Value::Object(fields) = value else {
            return Err(JobError::fatal(format!(
                "payload must be a JSON object with fields {}",
                self.params.join(", ")
            )));
        };
        self.params
            .iter()
            .map(|name| {
                if let Some(v) = job_value(name, job) {
                    return Ok(v);
                }
                fields.get(name).cloned().ok_or_else(|| {
                    JobError::fatal(format!(
                        "payload has no field {name:?}, which the handler's params bind"
                    ))
                })
            })
            .collect()
    }
}
