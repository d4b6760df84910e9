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

/// The Galera node this session is on (`wsrep_node_name`), or `None` away from a cluster: a server
/// without Galera (MySQL has no such variables) or with it off. Stored in the registry's `node` column
/// (schema 33), where workers learn which nodes live workers are on (`worker::slices`).
pub(crate) async fn galera_node(conn: &mut MySqlConnection) -> Result<Option<String>, sqlx::Error> {
    let vars: Vec<(String, String)> = sqlx::query_as(
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('wsrep_on', 'wsrep_node_name')",
    )
    .fetch_all(&mut *conn)
    .await?;
    let value = |name: &str| {
        vars.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let on = value("wsrep_on").is_some_and(|v| v.eq_ignore_ascii_case("ON"));
    Ok(value("wsrep_node_name").filter(|n| on && !n.is_empty()))
}

/// A live worker as the slices of a cluster see it: the Galera node its anchor session is on, the
/// queues it serves, and whether that node is the one the asking session is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkerNode {
    pub(crate) node: String,
    pub(crate) queues: Vec<String>,
    pub(crate) mine: bool,
}

/// The live workers that are on a Galera node, in node order. A worker counts as live while its
/// heartbeat is younger than three of its beats (at least 6 s). MariaDB only (`@@wsrep_node_name`):
/// sent only where [`galera_node`] found a cluster.
pub(crate) async fn worker_nodes(
    conn: &mut MySqlConnection,
) -> Result<Vec<WorkerNode>, sqlx::Error> {
    // Converted: sqlx reads a utf8mb4_bin column's text as bytes; the comparison is a BIGINT.
    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT CONVERT(node USING utf8mb4), CONVERT(queues USING utf8mb4), \
         CAST(node = @@wsrep_node_name AS SIGNED) FROM jobq_processes \
         WHERE role = 'worker' AND node IS NOT NULL \
         AND heartbeat_at > NOW(6) - INTERVAL GREATEST(3 * COALESCE(heartbeat_ms, 2000), 6000) * 1000 \
         MICROSECOND ORDER BY node",
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(node, queues, mine)| WorkerNode {
            node,
            queues: queues.split(',').map(str::to_string).collect(),
            mine: mine == 1,
        })
        .collect())
}

/// The queues of each live worker (as [`worker_nodes`] counts them live), away from a cluster: every
/// worker's claims there lock rows on the same server.
pub(crate) async fn worker_queues(
    conn: &mut MySqlConnection,
) -> Result<Vec<Vec<String>>, sqlx::Error> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT CONVERT(queues USING utf8mb4) FROM jobq_processes WHERE role = 'worker' \
         AND heartbeat_at > NOW(6) - INTERVAL GREATEST(3 * COALESCE(heartbeat_ms, 2000), 6000) * 1000 \
         MICROSECOND",
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(queues,)| queues.split(',').map(str::to_string).collect())
        .collect())
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

/// Adds this process's row, and its holdings row (which its claims write). Called on its anchor session
/// before it claims anything, and again when a reaper has removed the row.
pub(crate) async fn register(
    conn: &mut MySqlConnection,
    token: &ClaimToken,
    role: Role,
    queues: &[String],
    kinds: &[String],
    bounds: Bounds,
    node: Option<&str>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO jobq_processes \
         (token, role, host, host_id, pid, connection_id, server_id, server_epoch, queues, version, \
          heartbeat_ms, fence_ms, kinds, node) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
    .bind(node)
    .execute(&mut *conn)
    .await?;
    // After the registry row: the reaper removes holdings rows of no registered claimant that name
    // nothing running (`reap::sweep_unlisted`), which a list made first could be for a moment.
    sqlx::query(crate::statements::HOLD)
        .bind(token.to_string())
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Refreshes the heartbeat and records the session the process is on now (its connection, server and
/// Galera node). Returns false if the row is gone (a reaper decided this process was dead).
pub(crate) async fn heartbeat(
    conn: &mut MySqlConnection,
    token: &ClaimToken,
    connection_id: u64,
    server: ServerIdentity,
    node: Option<&str>,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE jobq_processes SET heartbeat_at = NOW(6), connection_id = ?, server_id = ?, \
         server_epoch = ?, node = ? WHERE token = ?",
    )
    .bind(connection_id)
    .bind(server.server_id)
    .bind(server.epoch)
    .bind(node)
    .bind(token.to_string())
    .execute(&mut *conn)
    .await?;
    // MySQL reports rows changed, not rows matched: a heartbeat within the same microsecond would read
    // as 0, which NOW(6) makes practically impossible.
    Ok(done.rows_affected() == 1)
}

/// Removes this process's row on a clean exit, and its holdings row unless a row still runs under its
/// token (a job abandoned at the stop: the reaper then finds it listed).
pub(crate) async fn deregister(pool: &MySqlPool, token: &ClaimToken) -> Result<()> {
    let token = token.to_string();
    sqlx::query(crate::statements::UNHOLD)
        .bind(&token)
        .execute(pool)
        .await?;
    sqlx::query("DELETE FROM jobq_processes WHERE token = ?")
        .bind(&token)
        .execute(pool)
        .await?;
    Ok(())
}
