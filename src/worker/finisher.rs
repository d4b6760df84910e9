//! Gathering the "done" finishes of concurrently running jobs into one fenced transaction.
//!
//! Each finish is a commit, and on a durable server (`innodb_flush_log_at_trx_commit = 1`) every commit
//! waits for a log flush: with short jobs that, not the jobs, is what limits a worker. Job tasks hand their
//! successful outcomes to this one task, which takes everything that arrived while it was busy with the
//! previous batch and finishes it in one transaction. While other jobs of the worker are still running it
//! lingers up to a millisecond for their finishes (jobs claimed together tend to end together); a lone
//! job's finish goes out at once.
//!
//! Failures, cancellations and hand-backs carry per-row data and stay one statement each.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::MySqlPool;

use crate::db::dedicated::Dedicated;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::db::finish::finish_done_batch;
use crate::error::{Error, Result};

/// Most rows finished by one transaction: at least a whole claim of the largest batch size the bench
/// sweeps, so that a claim's jobs, which end together, are finished together.
const MAX_BATCH: usize = 2048;

/// Longest wait for more finishes while other jobs are still running.
const LINGER: std::time::Duration = std::time::Duration::from_millis(1);

/// The answer to one job's finish: `Ok(false)` when the fence did not match. The error is shared (an
/// `Arc`, as `Error` holds a database error that cannot be cloned): one failed transaction answers every
/// job of its batch with the same error.
pub(crate) type Reply = Result<bool, Arc<Error>>;

struct Request {
    id: u64,
    attempt: u16,
    reply: oneshot::Sender<Reply>,
}

/// The job tasks' handle.
#[derive(Debug, Clone)]
pub(crate) struct Finisher {
    tx: mpsc::UnboundedSender<Request>,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request").field("id", &self.id).finish()
    }
}

impl Finisher {
    /// Starts the task. It runs until `stop` is cancelled; `hard_stop` ends its patience with an outage.
    /// `in_flight` counts the worker's running jobs: the finisher lingers only while more of them may
    /// be about to finish.
    pub(crate) fn start(
        pool: MySqlPool,
        token: String,
        in_flight: Arc<AtomicUsize>,
        stop: CancellationToken,
        hard_stop: CancellationToken,
    ) -> (Finisher, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(pool, token, rx, in_flight, stop, hard_stop));
        (Finisher { tx }, task)
    }

    /// Finishes job `id` (claimed as `attempt`) as done. `Ok(false)`: the fence did not match.
    pub(crate) async fn done(&self, id: u64, attempt: u16) -> Reply {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Request { id, attempt, reply })
            .map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }
}

/// The answer when the finisher task is gone (its channel closed).
fn stopped() -> Arc<Error> {
    Arc::new(Error::Task {
        task: "finisher",
        reason: "has stopped".into(),
    })
}

async fn run(
    pool: MySqlPool,
    token: String,
    mut rx: mpsc::UnboundedReceiver<Request>,
    in_flight: Arc<AtomicUsize>,
    stop: CancellationToken,
    hard_stop: CancellationToken,
) {
    // The finisher's own connection: see `Dedicated` for why.
    let mut conn = Dedicated::new(pool);
    run_on(&mut conn, &token, &mut rx, &in_flight, &stop, &hard_stop).await;
    conn.close().await;
}

async fn run_on(
    conn: &mut Dedicated,
    token: &str,
    rx: &mut mpsc::UnboundedReceiver<Request>,
    in_flight: &AtomicUsize,
    stop: &CancellationToken,
    hard_stop: &CancellationToken,
) {
    loop {
        let first = tokio::select! {
            r = rx.recv() => match r {
                Some(r) => r,
                None => return,
            },
            () = stop.cancelled() => return,
        };
        let mut batch = vec![first];
        // Take what has queued up, then linger a moment for the finishes that are about to come: jobs
        // claimed together tend to end together, and one commit for all of them beats one each.
        let deadline = tokio::time::Instant::now() + LINGER;
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) if batch.len() < in_flight.load(Ordering::Relaxed) => {
                    match tokio::time::timeout_at(deadline, rx.recv()).await {
                        Ok(Some(r)) => batch.push(r),
                        _ => break,
                    }
                }
                Err(_) => break,
            }
        }
        let items: Vec<(u64, u16)> = batch.iter().map(|r| (r.id, r.attempt)).collect();
        let result = patiently(conn, token, &items, hard_stop)
            .await
            .map_err(Arc::new);
        for (i, req) in batch.into_iter().enumerate() {
            let reply = match &result {
                Ok(flags) => Ok(flags[i]),
                Err(e) => Err(Arc::clone(e)),
            };
            let _ = req.reply.send(reply);
        }
    }
}

/// [`super::patiently`] on the finisher's own connection.
async fn patiently(
    conn: &mut Dedicated,
    token: &str,
    items: &[(u64, u16)],
    hard_stop: &CancellationToken,
) -> Result<Vec<bool>> {
    let mut patience = super::Patience::new(hard_stop);
    loop {
        let sent = std::time::Instant::now();
        match finish_done_batch(conn, token, items).await {
            Err(e) if patience.wait_after(&e, "finished jobs").await => {}
            other => {
                if other.is_ok() {
                    crate::telemetry::finished_batch(items.len(), sent.elapsed());
                }
                return other;
            }
        }
    }
}
