//! A connection held by one long-running loop of a worker (the claim loop, the finisher) rather than
//! checked out of the pool for each statement.
//!
//! Why: sqlx pings every connection it takes back into the pool, and each pooled connection keeps its own
//! prepared-statement cache. A loop that checks a connection out per statement therefore pays one ping
//! round trip per statement, and a prepare for every statement shape on every connection it happens to
//! get. Measured at the wire by `jobq bench` (drain section, commands per job) at the default settings,
//! the pings were a fifth of a worker's round trips, and at 1,000-row claims the prepares of the long
//! `IN (…)` lists showed up as server CPU per job.
//!
//! The connection is detached from the pool, so it does not take a slot that handlers, heartbeats and
//! failure finishes need, and a pool as small as the caller chose still works.

use std::future::Future;

use sqlx::{Connection, MySqlConnection, MySqlPool};

use crate::errno::is_lock_conflict;
use crate::error::Result;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Dedicated {
    pool: MySqlPool,
    /// `None` until first needed, after a failure that may have broken it, and while an operation has
    /// it: an operation whose future is dropped part way (a `select!` that picked shutdown) takes the
    /// connection, in the middle of a statement, down with it, and the next operation gets a fresh one.
    conn: Option<MySqlConnection>,
    /// Lock conflicts (deadlocks, lock wait timeouts, failed certification on Galera) met so far, retried
    /// or not: what tells a worker on a cluster that another node's claimers share its slice.
    lock_conflicts: u64,
}

impl Dedicated {
    /// Connections are taken from `pool` (with its session set-up) when first needed.
    pub(crate) fn new(pool: MySqlPool) -> Self {
        Self {
            pool,
            conn: None,
            lock_conflicts: 0,
        }
    }

    /// Lock conflicts met on this connection so far.
    pub(crate) fn lock_conflicts(&self) -> u64 {
        self.lock_conflicts
    }

    /// Runs `op` on the connection, which it gets by value and hands back with its result, trying up to
    /// `tries` times in all on transient failures with the same backoff as
    /// [`crate::db::retry_transient`]. After a failure other than a lock conflict the connection is
    /// dropped and the next try gets a fresh one.
    pub(crate) async fn run<T, F, Fut>(&mut self, what: &str, tries: u32, mut op: F) -> Result<T>
    where
        F: FnMut(MySqlConnection) -> Fut,
        Fut: Future<Output = (MySqlConnection, Result<T, sqlx::Error>)>,
    {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let conn = match self.conn.take() {
                Some(c) => c,
                None => match self.pool.acquire().await {
                    Ok(c) => c.detach(),
                    Err(e) => {
                        if crate::db::try_again(what, attempt, tries, &e).await {
                            continue;
                        }
                        return Err(e.into());
                    }
                },
            };
            let (conn, result) = op(conn).await;
            match result {
                Ok(v) => {
                    self.conn = Some(conn);
                    return Ok(v);
                }
                Err(e) => {
                    // Kept only after a lock conflict. Any other failure drops it, a read-only server
                    // included: the next try connects again (and reaches the new primary after a
                    // failover), and the pool stops handing out connections that predate the error.
                    if is_lock_conflict(&e) {
                        self.lock_conflicts += 1;
                        self.conn = Some(conn);
                    }
                    if !crate::db::try_again(what, attempt, tries, &e).await {
                        return Err(e.into());
                    }
                }
            }
        }
    }

    /// Closes the connection politely (the server logs no aborted connection).
    pub(crate) async fn close(mut self) {
        if let Some(conn) = self.conn.take() {
            let _ = conn.close().await;
        }
    }
}
