//! SQL handlers: run one configured statement per job, with parameters bound from payload fields.
//!
//! `sql = "CALL rollup(?, ?)"` with `params = ["day", "region"]` runs `CALL rollup(<payload.day>,
//! <payload.region>)` as a prepared statement. The statement text comes only from the configuration; a
//! payload field is always bound as a value, never spliced into SQL. Strings, numbers, booleans and null
//! bind as themselves; objects and arrays bind as JSON text. A missing field fails the job for good.
//!
//! A statement that outlives its timeout is stopped with `KILL QUERY` from another connection.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sqlx::MySqlPool;

use super::{BoxFuture, Handler, JobContext, JobError};

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
}

impl SqlHandler {
    /// A handler running `sql` on `pool`, binding the payload fields named in `params`.
    pub fn new(pool: MySqlPool, sql: String, params: Vec<String>) -> Self {
        Self {
            inner: Arc::new(Inner { pool, sql, params }),
        }
    }
}

impl Handler for SqlHandler {
    fn call(&self, job: JobContext) -> BoxFuture<Result<(), JobError>> {
        let inner = self.inner.clone();
        Box::pin(async move { inner.run(job).await })
    }
}

impl Inner {
    async fn run(&self, job: JobContext) -> Result<(), JobError> {
        let args = self.bind_values(job.payload_str())?;
        let mut conn = self.pool.acquire().await?;
        let conn_id: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()")
            .fetch_one(&mut *conn)
            .await?;
        let mut q = sqlx::query(&self.sql);
        for v in &args {
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
        let exec = q.execute(&mut *conn);
        tokio::pin!(exec);
        tokio::select! {
            r = &mut exec => r.map(|_| ()).map_err(|e| JobError::retry(format!("{}: {e}", self.sql))),
            () = job.cancel.cancelled() => {
                let _ = sqlx::query(&format!("KILL QUERY {conn_id}")).execute(&self.pool).await;
                // Let the killed statement return so the connection goes back to the pool clean.
                let _ = tokio::time::timeout(Duration::from_secs(5), &mut exec).await;
                Err(JobError::retry(format!("{}: stopped (KILL QUERY)", self.sql)))
            }
        }
    }

    /// The payload fields to bind, in placeholder order.
    fn bind_values(&self, payload: &str) -> Result<Vec<Value>, JobError> {
        if self.params.is_empty() {
            return Ok(Vec::new());
        }
        let value: Value = serde_json::from_str(payload)
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
                fields.get(name).cloned().ok_or_else(|| {
                    JobError::fatal(format!(
                        "payload has no field {name:?}, which the handler's params bind"
                    ))
                })
            })
            .collect()
    }
}
