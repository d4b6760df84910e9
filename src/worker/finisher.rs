//! Gathering the "done" finishes of concurrently running jobs into as few statements as possible.
//!
//! Each finish is a commit, and on a durable server (`innodb_flush_log_at_trx_commit = 1`) every commit
//! waits for a log flush: with short jobs that, not the jobs, is what limits a worker. Job tasks hand
//! their successful outcomes to a queue that two parties drain:
//!
//! * **The finisher task** takes what is pending as soon as it is free and finishes it with one fenced
//!   autocommit UPDATE (one round trip). While other jobs of the worker are still running it lingers
//!   for their finishes as long as they keep coming (jobs claimed together tend to end together, and
//!   are then finished together); a lone job's finish goes out at once. Finishes given back by a claim are made at once.
//! * **The next claim carries the rest.** Finishes that arrive while the finisher's statement is under
//!   way are pending when the claim loop claims; it takes them and makes them with the UPDATE that
//!   stamps the claimed rows (`db::claim`), so they cost no statement of their own. How much the claim
//!   carries adapts to the server: on an idle one the finisher is free again at once and finishes
//!   beside the claim, on a busy one its statements take longer and more finishes ride on claims.
//!
//! Leaving pending finishes to a coming claim (for up to 10 ms) saves a few statements (0.40 round
//! trips per job at the defaults against 0.41), but then a done row waits for the claim and the
//! finisher's statement cannot run beside it; in alternating rounds of `jobq bench --sections drain`
//! on the 2-core VM the two rules drained within noise of each other (one worker at the defaults, four
//! workers, and two workers with 1,000-row claims), so the simpler rule stays.
//!
//! Either way each finish is fenced by its token and attempt, and each job task gets its own answer.
//! Failures, cancellations and hand-backs carry per-row data and stay one statement each.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sqlx::MySqlPool;
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use crate::claimant::token::TokenText;
use crate::db::dedicated::Dedicated;
use crate::db::finish::finish_done_batch;
use crate::error::{Error, Result};
use crate::job::AttemptKey;

/// Most rows finished by one transaction: at least a whole claim of the largest batch size the bench
/// sweeps, so that a claim's jobs, which end together, are finished together.
const MAX_BATCH: usize = 2048;

/// Longest wait for the next finish while other jobs are still running: the linger goes on while
/// finishes keep arriving closer together than this.
const LINGER: Duration = Duration::from_millis(1);

/// Longest linger in all, however steadily finishes arrive: bounds how long a done job's row stays
/// `running` after its handler returned.
const MAX_LINGER: Duration = Duration::from_millis(10);

/// The answer to one job's finish: `Ok(false)` when the fence did not match. The error is shared (an
/// `Arc`, as `Error` holds a database error that cannot be cloned): one failed transaction answers every
/// job of its batch with the same error.
pub(crate) type Reply = Result<bool, Arc<Error>>;

struct Request {
    key: AttemptKey,
    reply: oneshot::Sender<Reply>,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request").field("key", &self.key).finish()
    }
}

/// What the job tasks, the claim loop and the finisher task share.
#[derive(Debug, Default)]
struct Queue {
    pending: Mutex<Vec<Request>>,
    /// Signalled when a finish arrives and when finishes are given back.
    arrived: Notify,
    /// Set when finishes were given back: the finisher takes them at once.
    urgent: AtomicBool,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, Vec<Request>> {
        crate::sync::lock(&self.pending)
    }

    fn take(&self) -> Vec<Request> {
        let mut pending = self.lock();
        let n = pending.len().min(MAX_BATCH);
        pending.drain(..n).collect()
    }

    /// Puts `requests` back at the head of the queue for the finisher to make at once.
    fn give_back(&self, requests: Vec<Request>) {
        if requests.is_empty() {
            return;
        }
        let mut pending = self.lock();
        let later = std::mem::replace(&mut *pending, requests);
        pending.extend(later);
        drop(pending);
        self.urgent.store(true, Ordering::SeqCst);
        self.arrived.notify_one();
    }
}

/// The job tasks' and the claim loop's handle.
#[derive(Debug, Clone)]
pub(crate) struct Finisher {
    queue: Arc<Queue>,
}

/// Finishes a claim took to carry in its transaction: [`Carried::done`] answers them once the claim
/// committed them; dropped unanswered (the claim fell short, failed, or was abandoned at shutdown),
/// they go back to the finisher, which makes them at once. No job task is ever left without an answer.
#[derive(Debug, Default)]
pub(crate) struct Carried {
    requests: Vec<Request>,
    /// Where unanswered requests go back to (`None` only for the empty default).
    queue: Option<Arc<Queue>>,
}

impl Drop for Carried {
    fn drop(&mut self) {
        if let Some(queue) = &self.queue {
            queue.give_back(std::mem::take(&mut self.requests));
        }
    }
}

impl Carried {
    /// The (id, attempt) pairs to finish.
    pub(crate) fn items(&self) -> Vec<AttemptKey> {
        self.requests.iter().map(|r| r.key).collect()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// Answers every carried finish as made: the claim's transaction changed each row and committed.
    pub(crate) fn done(mut self) {
        for r in std::mem::take(&mut self.requests) {
            let _ = r.reply.send(Ok(true));
        }
    }
}

impl Finisher {
    /// Starts the task. It runs until `stop` is cancelled; `hard_stop` ends its patience with an outage.
    /// `in_flight` counts the worker's running jobs: the finisher lingers only while more of them may
    /// be about to finish.
    pub(crate) fn start(
        pool: MySqlPool,
        token: TokenText,
        in_flight: Arc<AtomicUsize>,
        stop: CancellationToken,
        hard_stop: CancellationToken,
    ) -> (Finisher, tokio::task::JoinHandle<()>) {
        let queue = Arc::new(Queue::default());
        let task = tokio::spawn(run(pool, token, queue.clone(), in_flight, stop, hard_stop));
        (Finisher { queue }, task)
    }

    /// Finishes an attempt as done. `Ok(false)`: the fence did not match.
    pub(crate) async fn done(&self, key: AttemptKey) -> Reply {
        let (reply, rx) = oneshot::channel();
        self.queue.lock().push(Request { key, reply });
        self.queue.arrived.notify_one();
        rx.await.map_err(|_| stopped())?
    }

    /// Takes the pending finishes for a claim to carry.
    pub(crate) fn take_for_claim(&self) -> Carried {
        Carried {
            requests: self.queue.take(),
            queue: Some(self.queue.clone()),
        }
    }

    /// Gives back finishes a claim did not make (its fence did not match every row, or the claim
    /// failed): the finisher makes them at once, exactly, row by row where it must. (Dropping them
    /// does the same; this says so where it happens.)
    pub(crate) fn give_back(&self, carried: Carried) {
        drop(carried);
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
    token: TokenText,
    queue: Arc<Queue>,
    in_flight: Arc<AtomicUsize>,
    stop: CancellationToken,
    hard_stop: CancellationToken,
) {
    // The finisher's own connection: see `Dedicated` for why.
    let mut conn = Dedicated::new(pool);
    run_on(&mut conn, &token, &queue, &in_flight, &stop, &hard_stop).await;
    conn.close().await;
    // Nothing is waiting any more (every job task has ended before `stop`); answer stragglers anyway.
    for r in queue.take() {
        let _ = r.reply.send(Err(stopped()));
    }
}

async fn run_on(
    conn: &mut Dedicated,
    token: &TokenText,
    queue: &Queue,
    in_flight: &AtomicUsize,
    stop: &CancellationToken,
    hard_stop: &CancellationToken,
) {
    loop {
        while queue.lock().is_empty() {
            tokio::select! {
                () = queue.arrived.notified() => {}
                () = stop.cancelled() => return,
            }
        }
        wait_for_more(queue, in_flight).await;
        let batch = queue.take();
        if batch.is_empty() {
            // A claim carried them.
            continue;
        }
        let items: Vec<AttemptKey> = batch.iter().map(|r| r.key).collect();
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

/// With finishes pending: lingers for the finishes of jobs still running while they keep arriving
/// (each within [`LINGER`] of the one before, for [`MAX_LINGER`] at most); returns at once when
/// finishes were given back, [`MAX_BATCH`] are pending, or every running job has handed its finish in.
///
/// Jobs claimed together tend to end together, and a batch claimed together is then finished together,
/// in one statement: with a fixed 1 ms linger a 500-row claim of no-op jobs was finished by 1.2
/// statements on average on the 2-core VM (416.7 rows per finish, `jobq bench --sections drain --sweep
/// 2:500:500`), each of a new length and so a new prepared statement; a job that runs on after the rest
/// of its batch stops the linger one gap after the last of the others.
async fn wait_for_more(queue: &Queue, in_flight: &AtomicUsize) {
    let cap = tokio::time::Instant::now() + MAX_LINGER;
    loop {
        if queue.urgent.swap(false, Ordering::SeqCst) {
            return;
        }
        let pending = queue.lock().len();
        if pending == 0 || pending >= MAX_BATCH || pending >= in_flight.load(Ordering::Relaxed) {
            return;
        }
        let gap_over = (tokio::time::Instant::now() + LINGER).min(cap);
        if tokio::time::timeout_at(gap_over, queue.arrived.notified())
            .await
            .is_err()
        {
            return;
        }
    }
}

/// [`super::patiently`] on the finisher's own connection.
async fn patiently(
    conn: &mut Dedicated,
    token: &TokenText,
    items: &[AttemptKey],
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

#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: u64) -> (Request, oneshot::Receiver<Reply>) {
        let (reply, rx) = oneshot::channel();
        (
            Request {
                key: AttemptKey::from((id, 1)),
                reply,
            },
            rx,
        )
    }

    /// A finisher's handle and the queue behind it, with no task draining it.
    fn finisher() -> (Arc<Queue>, Finisher) {
        let queue = Arc::new(Queue::default());
        let f = Finisher {
            queue: queue.clone(),
        };
        (queue, f)
    }

    #[tokio::test(start_paused = true)]
    async fn finishes_a_claim_did_not_make_go_back_first_and_are_made_at_once() {
        let (queue, f) = finisher();
        let (a, ra) = request(1);
        let (b, _rb) = request(2);
        queue.lock().push(a);
        let carried = f.take_for_claim();
        assert_eq!(carried.items(), crate::job::keys(&[(1, 1)]));
        queue.lock().push(b);
        f.give_back(carried);
        let ids: Vec<u64> = queue.lock().iter().map(|r| r.key.id.0).collect();
        assert_eq!(ids, vec![1, 2], "the older finish keeps its place");
        // A claim dropped half way (abandoned at shutdown) gives them back too.
        drop(f.take_for_claim());
        assert_eq!(queue.lock().len(), 2, "nothing is lost");
        // With other jobs running the finisher would linger; given-back finishes it makes at once.
        let t0 = tokio::time::Instant::now();
        wait_for_more(&queue, &AtomicUsize::new(10)).await;
        assert_eq!(
            t0.elapsed(),
            Duration::ZERO,
            "no wait for finishes given back"
        );
        // Made by a claim: answered as made, and nothing goes back.
        f.take_for_claim().done();
        assert!(queue.lock().is_empty());
        assert!(ra.await.unwrap().unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn pending_finishes_linger_only_while_other_jobs_may_end() {
        let queue = Arc::new(Queue::default());
        let (a, _ra) = request(1);
        queue.lock().push(a);
        // Nothing else running: at once.
        let t0 = tokio::time::Instant::now();
        wait_for_more(&queue, &AtomicUsize::new(1)).await;
        assert_eq!(t0.elapsed(), Duration::ZERO);
        // Others still running: the linger, and no longer.
        let t1 = tokio::time::Instant::now();
        wait_for_more(&queue, &AtomicUsize::new(5)).await;
        assert_eq!(t1.elapsed(), LINGER);
    }

    #[tokio::test(start_paused = true)]
    async fn the_linger_goes_on_while_finishes_keep_coming_up_to_its_bound() {
        let (queue, f) = finisher();
        let (a, _ra) = request(1);
        queue.lock().push(a);
        let t0 = tokio::time::Instant::now();
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move { wait_for_more(&queue, &AtomicUsize::new(1000)).await }
        });
        // A finish every half gap: the linger outlasts one gap, and ends at its bound.
        let mut replies = Vec::new();
        for id in 2.. {
            tokio::time::sleep(LINGER / 2).await;
            if waiting.is_finished() {
                break;
            }
            let (r, rx) = request(id);
            replies.push(rx);
            queue.lock().push(r);
            f.queue.arrived.notify_one();
        }
        waiting.await.unwrap();
        let lingered = t0.elapsed();
        assert!(
            lingered >= MAX_LINGER && lingered <= MAX_LINGER + LINGER,
            "{lingered:?}"
        );
        // Then the finishes stop coming: one gap after the last, it ends.
        let t1 = tokio::time::Instant::now();
        wait_for_more(&queue, &AtomicUsize::new(1000)).await;
        assert_eq!(t1.elapsed(), LINGER);
    }

    #[tokio::test(start_paused = true)]
    async fn the_linger_ends_when_every_running_job_has_handed_in_its_finish() {
        let (queue, f) = finisher();
        let (a, _ra) = request(1);
        queue.lock().push(a);
        let t0 = tokio::time::Instant::now();
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move { wait_for_more(&queue, &AtomicUsize::new(2)).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "it lingers while another job runs");
        let (b, _rb) = request(2);
        queue.lock().push(b);
        f.queue.arrived.notify_one();
        waiting.await.unwrap();
        assert!(
            t0.elapsed() < LINGER,
            "woken by the last finish, not timed out"
        );
    }
}
