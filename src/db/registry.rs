//! The process registry (`jobq_processes`): who is alive, on which session, since when.

use sqlx::{MySqlConnection, MySqlPool};

use crate::claimant::token::{ClaimToken, ServerIdentity};
use crate::error::Result;

/// What a registered process does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Claims and runs jobs.
    Worker,
    /// Recovers jobs of dead claimants.
    Reaper,
    /// Keeps worker processes alive.
    Supervisor,
    /// Turns schedules into jobs.
    Scheduler,
}

impl Role {
    /// The value stored in the `role` column.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::Reaper => "reaper",
            Role::Supervisor => "supervisor",
            Role::Scheduler => "scheduler",
        }
    }
}

/// This session's connection id and the identity of the server it is on.
pub(crate) async fn session_identity(conn: &mut MySqlConnection) -> Result<(u64, ServerIdentity)> {
    let (conn_id, server_id, now): (u64, u64, i64) =
        sqlx::query_as("SELECT CONNECTION_ID(), @@server_id, UNIX_TIMESTAMP()")
            .fetch_one(&mut *conn)
            .await?;
    // SHOW STATUS works on both MariaDB and MySQL 8 (information_schema.GLOBAL_STATUS is gone in MySQL 8).
    let (_, uptime): (String, String) = sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Uptime'")
        .fetch_one(&mut *conn)
        .await?;
    let uptime: i64 = uptime.trim().parse().unwrap_or(0);
    Ok((
        conn_id,
        ServerIdentity {
            server_id,
            epoch: now - uptime,
        },
    ))
}

/// How often a jobq process writes its heartbeat unless configured otherwise: 2 s, so that five beats fit
/// in the default fence bound ([`crate::claimant::fence::DEFAULT_BOUND`]) and a worker whose session dropped has
/// re-registered long before it would have to stop its jobs.
pub(crate) const DEFAULT_HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(2);

/// How a process keeps itself alive in the registry: what reapers judge it by.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// How often it writes its heartbeat.
    pub(crate) heartbeat: std::time::Duration,
    /// Its self-fence bound (see [`crate::claimant::fence`]).
    pub(crate) fence: std::time::Duration,
}

impl Bounds {
    /// The bounds of a process that claims no jobs (reaper, scheduler, supervisor): the worker defaults.
    pub(crate) fn service() -> Self {
        Self {
            heartbeat: DEFAULT_HEARTBEAT,
            fence: crate::claimant::fence::DEFAULT_BOUND,
        }
    }
}

/// Adds this process's row. Called on its anchor session before it claims anything.
pub(crate) async fn register(
    conn: &mut MySqlConnection,
    token: &ClaimToken,
    role: Role,
    queues: &[String],
    kinds: &[String],
    bounds: Bounds,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO jobq_processes \
         (token, role, host, host_id, pid, connection_id, server_id, server_epoch, queues, version, \
          heartbeat_ms, fence_ms, kinds) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(token.to_string())
    .bind(role.as_str())
    .bind(&token.host)
    .bind(&crate::claimant::token::ProcessIdentity::current().host_id)
    .bind(token.pid)
    .bind(token.connection_id)
    .bind(token.server_id)
    .bind(token.server_epoch)
    .bind(queues.join(","))
    .bind(env!("CARGO_PKG_VERSION"))
    .bind(bounds.heartbeat.as_millis().min(u32::MAX as u128) as u32)
    .bind(bounds.fence.as_millis().min(u32::MAX as u128) as u32)
    .bind((!kinds.is_empty()).then(|| kinds.join(",")))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Refreshes the heartbeat and records the session the process is on now. Returns false if the row is
/// gone (a reaper decided this process was dead).
pub(crate) async fn heartbeat(
    conn: &mut MySqlConnection,
    token: &ClaimToken,
    connection_id: u64,
    server: ServerIdentity,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE jobq_processes SET heartbeat_at = NOW(6), connection_id = ?, server_id = ?, \
         server_epoch = ? WHERE token = ?",
    )
    .bind(connection_id)
    .bind(server.server_id)
    .bind(server.epoch)
    .bind(token.to_string())
    .execute(&mut *conn)
    .await?;
    // MySQL reports rows changed, not rows matched: a heartbeat within the same microsecond would read
    // as 0, which NOW(6) makes practically impossible.
    Ok(done.rows_affected() == 1)
}

/// Removes this process's row on a clean exit.
pub(crate) async fn deregister(pool: &MySqlPool, token: &ClaimToken) -> Result<()> {
    sqlx::query("DELETE FROM jobq_processes WHERE token = ?")
        .bind(token.to_string())
        .execute(pool)
        .await?;
    Ok(())
}
