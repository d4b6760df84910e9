//! A process's anchor session: the one database connection whose life stands for the process's life.
//!
//! The claim token names this connection. The process registers itself on it, holds a named lock on it
//! (`GET_LOCK`, released by the server the moment the session ends, and `IS_USED_LOCK` tells which
//! connection holds it) and refreshes its heartbeat through it. If the connection is lost while the
//! process lives, the heartbeat opens a new one, takes the lock again and records the new connection id
//! in the registry; the token stays the same.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::{Connection, MySqlConnection, MySqlPool};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::backoff::Backoff;
use crate::claimant::fence::Fence;
use crate::claimant::token::{ClaimToken, ServerIdentity};
use crate::db::registry::{Bounds, Role};
use crate::db::{self, registry};
use crate::error::Result;

/// A registered process's anchor session.
#[derive(Debug)]
pub(crate) struct Session {
    /// Where a lost anchor reconnects: the pool's options of the moment, which follow the pool to
    /// another host of the URL ([`crate::db::hosts`]).
    pool: MySqlPool,
    conn: Option<MySqlConnection>,
    token: ClaimToken,
    role: Role,
    queues: Vec<String>,
    kinds: Vec<String>,
    connection_id: u64,
    server: ServerIdentity,
    /// The Galera node the anchor session is on (`None` away from a cluster).
    node: Option<String>,
    bounds: Bounds,
    fence: Fence,
    /// Unix milliseconds of the last heartbeat written by someone else on this process's behalf (an idle
    /// worker's server-side wait writes one); while recent, a beat only pings the anchor.
    beat_elsewhere: Arc<AtomicU64>,
    /// Beats in a row that only pinged: every [`PINGS_BETWEEN_WRITES`] the session writes its own.
    pinged: u32,
    /// Jobs this process saw finish done, counted by its worker (zero for other roles).
    done: Arc<AtomicU64>,
    /// How many of `done` are in `jobq_done_minutes` already.
    done_written: u64,
}

/// How many beats in a row may only ping the anchor because a heartbeat was written elsewhere. The
/// idle wait's heartbeat cannot tell whether the registry row is still there, so the session writes
/// one itself every few beats: a row a reaper removed while the worker idled is registered again
/// within a few intervals.
const PINGS_BETWEEN_WRITES: u32 = 2;

/// The name of the lock a claimant holds on its anchor session. MySQL limits lock names to 64
/// characters, so it is derived from the token's unique parts rather than the whole token.
pub(crate) fn lock_name(token: &ClaimToken) -> String {
    format!("jobq:{:016x}:{}", token.nonce, token.connection_id)
}

impl Session {
    /// Opens an anchor connection, draws the token, takes the lock and registers the process with
    /// its `bounds`. The session's [`Fence`] counts from before the registration was sent.
    pub(crate) async fn open(
        pool: &MySqlPool,
        role: Role,
        queues: &[String],
        kinds: &[String],
        bounds: Bounds,
    ) -> Result<Session> {
        let fence = Fence::new(bounds.fence);
        let mut conn = db::open_anchor(&pool.connect_options()).await?;
        let (connection_id, server) = registry::session_identity(&mut conn).await?;
        let node = registry::galera_node(&mut conn).await?;
        let token = ClaimToken::new(connection_id, server);
        take_lock(&mut conn, &token).await?;
        registry::register(
            &mut conn,
            &token,
            role,
            queues,
            kinds,
            bounds,
            node.as_deref(),
        )
        .await?;
        Ok(Session {
            pool: pool.clone(),
            conn: Some(conn),
            token,
            role,
            queues: queues.to_vec(),
            kinds: kinds.to_vec(),
            connection_id,
            server,
            node,
            bounds,
            fence,
            beat_elsewhere: Arc::default(),
            pinged: 0,
            done: Arc::default(),
            done_written: 0,
        })
    }

    /// This process's claim token.
    pub(crate) fn token(&self) -> &ClaimToken {
        &self.token
    }

    /// This process's fence, confirmed by every heartbeat the session writes.
    pub(crate) fn fence(&self) -> &Fence {
        &self.fence
    }

    /// Where to record a heartbeat written elsewhere (as Unix milliseconds), so this session's next beat
    /// can skip its own UPDATE and only check that the anchor is alive.
    pub(crate) fn beat_recorder(&self) -> Arc<AtomicU64> {
        self.beat_elsewhere.clone()
    }

    /// The count of jobs this process saw finish done, which its worker bumps and each heartbeat adds
    /// to `jobq_done_minutes` (the dashboard's chart of the last hour) since the last it wrote.
    pub(crate) fn done_counter(&self) -> Arc<AtomicU64> {
        self.done.clone()
    }

    /// Writes the done jobs counted since the last write. A failure is logged and the count kept for
    /// the next heartbeat: these are figures for a chart, and must not fail the heartbeat that keeps the
    /// fence confirmed.
    async fn write_done<'e>(
        done: &AtomicU64,
        written: &mut u64,
        ex: impl sqlx::MySqlExecutor<'e>,
        token: &ClaimToken,
    ) {
        let counted = done.load(Ordering::Relaxed);
        if counted == *written {
            return;
        }
        let token = token.to_string();
        match db::done_minutes::add(ex, &token, counted - *written).await {
            Ok(()) => *written = counted,
            Err(e) => {
                warn!(error = %e, claim = %token, "could not add this process's done jobs to jobq_done_minutes; trying again with the next heartbeat")
            }
        }
    }

    /// Refreshes the heartbeat every heartbeat interval until `stop` is cancelled, re-establishing the
    /// session if it is lost. Returns the session for [`Session::close`].
    ///
    /// While the session is being rebuilt the fence is marked unhealthy, so a worker claims nothing
    /// until it is registered on a live anchor again. Each beat is bounded in time: on a cut network a
    /// statement can hang until TCP gives up, and the fence would trip before a second try was made.
    pub(crate) async fn heartbeat(mut self, stop: CancellationToken) -> Session {
        let interval = self.bounds.heartbeat;
        let beat_timeout = (self.bounds.fence / 3).max(Duration::from_secs(1));
        let mut wait = interval;
        let mut retry = Backoff::session(interval);
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => return self,
                () = tokio::time::sleep(wait) => {}
            }
            let outcome = match tokio::time::timeout(beat_timeout, self.beat_once()).await {
                Ok(r) => r,
                Err(_) => Err(crate::error::Error::Io {
                    context: "heartbeat".into(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no answer within {beat_timeout:?}"),
                    ),
                }),
            };
            crate::telemetry::database_up(outcome.is_ok());
            match outcome {
                Ok(()) => {
                    retry.reset();
                    wait = interval;
                }
                Err(e) => {
                    self.fence.set_healthy(false);
                    wait = retry.next_delay();
                    warn!(error = %e, claim = %self.token, retry_in = ?wait, since_confirmed = ?self.fence.since_confirmed(),
                          "heartbeat failed; re-establishing the session");
                    self.conn = None;
                }
            }
        }
    }

    /// One heartbeat, then the done jobs counted since the last.
    async fn beat_once(&mut self) -> Result<()> {
        self.beat().await?;
        let conn = self
            .conn
            .as_mut()
            .expect("a beat that went through leaves a connection");
        Self::write_done(&self.done, &mut self.done_written, &mut *conn, &self.token).await;
        Ok(())
    }

    async fn beat(&mut self) -> Result<()> {
        if self.conn.is_none() {
            let mut conn = db::open_anchor(&self.pool.connect_options()).await?;
            let (connection_id, server) = registry::session_identity(&mut conn).await?;
            let node = registry::galera_node(&mut conn).await?;
            take_lock(&mut conn, &self.token).await?;
            self.connection_id = connection_id;
            self.server = server;
            self.node = node;
            self.conn = Some(conn);
            warn!(claim = %self.token, connection_id, "anchor session re-established");
        }
        let conn = self.conn.as_mut().expect("set above");
        let elsewhere = self.beat_elsewhere.load(Ordering::Relaxed);
        if self.fence.is_healthy()
            && elsewhere > 0
            && now_millis().saturating_sub(elsewhere) < self.bounds.heartbeat.as_millis() as u64
            && self.pinged < PINGS_BETWEEN_WRITES
        {
            // The registry row is fresh already (and the fence confirmed by whoever wrote it); a ping
            // (not a statement) proves the anchor still lives.
            conn.ping().await?;
            self.pinged += 1;
            return Ok(());
        }
        self.pinged = 0;
        let sent = Instant::now();
        let node = self.node.as_deref();
        let alive =
            registry::heartbeat(conn, &self.token, self.connection_id, self.server, node).await?;
        if !alive {
            warn!(claim = %self.token, "registry row was removed; registering again");
            registry::register(
                conn,
                &self.token,
                self.role,
                &self.queues,
                &self.kinds,
                self.bounds,
                node,
            )
            .await?;
            registry::heartbeat(conn, &self.token, self.connection_id, self.server, node).await?;
        }
        self.fence.confirm(sent);
        self.fence.set_healthy(true);
        debug!(claim = %self.token, "heartbeat");
        Ok(())
    }

    /// Deregisters and closes the anchor session (which also releases the lock).
    pub(crate) async fn close(mut self, pool: &MySqlPool) {
        Self::write_done(&self.done, &mut self.done_written, pool, &self.token).await;
        if let Err(e) = registry::deregister(pool, &self.token).await {
            warn!(error = %e, claim = %self.token, "could not remove registry row; the reaper will");
        }
        if let Some(conn) = self.conn.take() {
            let _ = conn.close().await;
        }
    }
}

/// Now, in Unix milliseconds.
pub(crate) fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

async fn take_lock(conn: &mut MySqlConnection, token: &ClaimToken) -> Result<()> {
    let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
        .bind(lock_name(token))
        .fetch_one(&mut *conn)
        .await?;
    if got != Some(1) {
        warn!(claim = %token, "anchor lock is held by another session");
    }
    Ok(())
}
