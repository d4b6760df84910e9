//! Gathering the "done" finishes of concurrently running jobs into as few statements as possible.
//!
//! Each finish is a commit, and on a durable server (`innodb_flush_log_at_trx_commit = 1`) every commit
//! waits for a log flush: with short jobs that, not the jobs, is what limits a worker. Job tasks hand
//! their successful outcomes to a queue that two parties drain:
//!
//! * **The finisher task** finishes what is pending with one fenced autocommit UPDATE (one round
//!   trip). The jobs of one claim (a [`Cohort`]) tend to end together, and a batch claimed together is
//!   finished together: with finishes pending, the finisher waits until no job of their claims still
//!   runs (bounded by [`MAX_LINGER`]). A lone job's finish goes out at once. Finishes given back by a
//!   claim are made at once.
//! * **The next claim carries the rest.** Finishes pending when the claim loop claims are made by the
//!   UPDATE that stamps the claimed rows (`db::claim`), so they cost no statement of their own.
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

/// Longest linger for the rest of a claim's jobs: bounds how long a done job's row stays `running`
/// after its handler returned when a job of its claim runs on.
const MAX_LINGER: Duration = Duration::from_millis(10);

/// The answer to one job's finish: `Ok(false)` when the fence did not match. The error is shared (an
/// `Arc`, as `Error` holds a database error that cannot be cloned): one failed transaction answers every
/// job of its batch with the same error.
pub(crate) type Reply = Result<bool, Arc<Error>>;

struct Request {
    key: AttemptKey,
    /// The claim the job came with: the finisher waits for the rest of it.
    cohort: Arc<CohortCount>,
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
    /// Signalled when a finish arrives to an empty queue, when a claim's last job has ended, when
    /// [`MAX_BATCH`] finishes are pending, and when finishes are given back.
    arrived: Notify,
    /// Set when finishes were given back: the finisher takes them at once.
    urgent: AtomicBool,
    /// Set while the claim loop holds slots for a claim it has not yet made: that claim will carry
    /// what is pending, so the finisher leaves a finished claim's finishes to it.
    claim_coming: AtomicBool,
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

    /// The claim loop is no longer about to claim: the finisher, if it left finishes to the claim,
    /// looks again.
    fn claim_over(&self) {
        if self.claim_coming.swap(false, Ordering::SeqCst) {
            self.arrived.notify_one();
        }
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

/// The jobs of one claim that have not yet ended (handed in their finish or recorded another outcome).
#[derive(Debug)]
struct CohortCount {
    running: AtomicUsize,
}

/// The jobs of one claim, as the finisher sees them: see [`Finisher::cohort`].
#[derive(Debug, Clone)]
pub(crate) struct Cohort {
    count: Arc<CohortCount>,
    queue: Arc<Queue>,
}

/// One job's place in its [`Cohort`]: dropped when the job has ended, or moved into the job's done
/// finish as it is handed in. The last to go wakes the finisher, which may be waiting for the claim to
/// end.
#[derive(Debug)]
pub(crate) struct Member(Cohort);

impl Cohort {
    /// A place for each job of the claim; call it once per job.
    pub(crate) fn member(&self) -> Member {
        Member(self.clone())
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if self.0.count.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.queue.arrived.notify_one();
        }
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

    /// The cohort of a claim of `jobs` jobs, each of which takes a [`Cohort::member`].
    pub(crate) fn cohort(&self, jobs: usize) -> Cohort {
        Cohort {
            count: Arc::new(CohortCount {
                running: AtomicUsize::new(jobs),
            }),
            queue: self.queue.clone(),
        }
    }

    /// Finishes an attempt as done; `member` is the job's place in its claim, which it leaves now.
    /// `Ok(false)`: the fence did not match.
    pub(crate) async fn done(&self, key: AttemptKey, member: Member) -> Reply {
        let (reply, rx) = oneshot::channel();
        let cohort = member.0.count.clone();
        let (first, full) = {
            let mut pending = self.queue.lock();
            let first = pending.is_empty();
            pending.push(Request { key, cohort, reply });
            (first, pending.len() == MAX_BATCH)
        };
        // After the push: a finisher woken by the last member finds its finish pending.
        drop(member);
        if first || full {
            self.queue.arrived.notify_one();
        }
        rx.await.map_err(|_| stopped())?
    }

    /// Takes the pending finishes for a claim to carry.
    pub(crate) fn take_for_claim(&self) -> Carried {
        let requests = self.queue.take();
        self.queue.claim_over();
        Carried {
            requests,
            queue: Some(self.queue.clone()),
        }
    }

    /// Says that the claim loop holds slots for a claim it is about to make (which will carry the
    /// pending finishes), until [`Finisher::take_for_claim`] or [`Finisher::claim_over`].
    pub(crate) fn claim_coming(&self) {
        self.queue.claim_coming.store(true, Ordering::SeqCst);
    }

    /// Says that the claim loop's claim is over (made, or given up without taking the finishes).
    pub(crate) fn claim_over(&self) {
        self.queue.claim_over();
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

/// With finishes pending: lingers until no job of their claims still runs, and then while a claim that
/// will carry them is coming, for [`MAX_LINGER`] at most; returns at once when finishes were given
/// back or [`MAX_BATCH`] are pending.
///
/// A batch claimed together is then finished together, in one statement. A fixed 1 ms wait between
/// finishes, or a 10 ms linger, split a claim of 1,000 no-op jobs in two on the 2-core VM (520 rows
/// per finish, `jobq bench --sections drain --sweep 2:2000:1000`): starting 1,000 job tasks takes the
/// worker longer than that while the server runs beside it. Left to the coming claim, they cost no
/// statement of their own (at the defaults 104 UPDATEs per 1,000 jobs instead of 202).
async fn wait_for_more(queue: &Queue, in_flight: &AtomicUsize) {
    let cap = tokio::time::Instant::now() + MAX_LINGER;
    loop {
        if queue.urgent.swap(false, Ordering::SeqCst) {
            return;
        }
        {
            let pending = queue.lock();
            if pending.is_empty() || pending.len() >= MAX_BATCH {
                return;
            }
            let ended =
                pending.len() >= in_flight.load(Ordering::Relaxed) || claims_ended(&pending);
            if ended && !queue.claim_coming.load(Ordering::SeqCst) {
                return;
            }
        }
        if tokio::time::timeout_at(cap, queue.arrived.notified())
            .await
            .is_err()
        {
            return;
        }
    }
}

/// Whether every job of the claims of `pending` has ended. Finishes of one claim arrive mostly side by
/// side, so a claim already looked at is skipped while it repeats.
fn claims_ended(pending: &[Request]) -> bool {
    let mut last: Option<&Arc<CohortCount>> = None;
    for r in pending {
        if last.is_some_and(|l| Arc::ptr_eq(l, &r.cohort)) {
            continue;
        }
        if r.cohort.running.load(Ordering::SeqCst) > 0 {
            return false;
        }
        last = Some(&r.cohort);
    }
    true
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

    /// A finisher's handle and the queue behind it, with no task draining it.
    fn finisher() -> (Arc<Queue>, Finisher) {
        let queue = Arc::new(Queue::default());
        let f = Finisher {
            queue: queue.clone(),
        };
        (queue, f)
    }

    /// A pending done finish of job `id` in `cohort`, as a job task hands it in (without waiting for
    /// the answer).
    fn hand_in(queue: &Queue, cohort: &Cohort, id: u64) -> oneshot::Receiver<Reply> {
        let (reply, rx) = oneshot::channel();
        queue.lock().push(Request {
            key: AttemptKey::from((id, 1)),
            cohort: cohort.count.clone(),
            reply,
        });
        rx
    }

    #[tokio::test(start_paused = true)]
    async fn finishes_a_claim_did_not_make_go_back_first_and_are_made_at_once() {
        let (queue, f) = finisher();
        let cohort = f.cohort(10);
        let ra = hand_in(&queue, &cohort, 1);
        let carried = f.take_for_claim();
        assert_eq!(carried.items(), crate::job::keys(&[(1, 1)]));
        let _rb = hand_in(&queue, &cohort, 2);
        f.give_back(carried);
        let ids: Vec<u64> = queue.lock().iter().map(|r| r.key.id.0).collect();
        assert_eq!(ids, vec![1, 2], "the older finish keeps its place");
        // A claim dropped half way (abandoned at shutdown) gives them back too.
        drop(f.take_for_claim());
        assert_eq!(queue.lock().len(), 2, "nothing is lost");
        // With the rest of their claim running the finisher would linger; given-back finishes it makes
        // at once.
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
    async fn a_lone_jobs_finish_goes_at_once_and_one_whose_claim_runs_on_lingers_to_the_bound() {
        let (queue, f) = finisher();
        let lone = f.cohort(1);
        let member = lone.member();
        let _r = hand_in(&queue, &lone, 1);
        drop(member);
        let t0 = tokio::time::Instant::now();
        wait_for_more(&queue, &AtomicUsize::new(50)).await;
        assert_eq!(t0.elapsed(), Duration::ZERO, "its claim has ended");
        f.take_for_claim().done();
        // A job of a claim of two whose other job runs on: the linger, and no longer.
        let pair = f.cohort(2);
        let (first, _second) = (pair.member(), pair.member());
        let _r = hand_in(&queue, &pair, 2);
        drop(first);
        let t1 = tokio::time::Instant::now();
        wait_for_more(&queue, &AtomicUsize::new(50)).await;
        assert_eq!(t1.elapsed(), MAX_LINGER);
    }

    #[tokio::test(start_paused = true)]
    async fn the_linger_ends_when_the_last_job_of_the_claim_ends_whatever_its_outcome() {
        let (queue, f) = finisher();
        let claim = f.cohort(3);
        let members: Vec<Member> = (0..3).map(|_| claim.member()).collect();
        let mut members = members.into_iter();
        let _r1 = hand_in(&queue, &claim, 1);
        drop(members.next());
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move {
                let t0 = tokio::time::Instant::now();
                wait_for_more(&queue, &AtomicUsize::new(100)).await;
                t0.elapsed()
            }
        });
        tokio::task::yield_now().await;
        // The second job is done too: still one to go.
        let answered = tokio::spawn({
            let (f, second) = (f.clone(), members.next().unwrap());
            async move { f.done(AttemptKey::from((2, 1)), second).await }
        });
        tokio::time::sleep(MAX_LINGER / 4).await;
        assert!(
            !waiting.is_finished(),
            "it lingers while a job of the claim runs"
        );
        // The third fails: its outcome is recorded apart, and the claim has ended.
        drop(members.next());
        let lingered = waiting.await.unwrap();
        assert!(
            lingered < MAX_LINGER,
            "woken by the claim's end: {lingered:?}"
        );
        let ids: Vec<u64> = queue.lock().iter().map(|r| r.key.id.0).collect();
        assert_eq!(ids, vec![1, 2], "the claim's finishes go together");
        f.take_for_claim().done();
        assert!(answered.await.unwrap().unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_claims_finishes_are_left_to_a_coming_claim_that_carries_them() {
        let (queue, f) = finisher();
        let claim = f.cohort(1);
        let member = claim.member();
        let _r = hand_in(&queue, &claim, 1);
        drop(member);
        f.claim_coming();
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move {
                let t0 = tokio::time::Instant::now();
                wait_for_more(&queue, &AtomicUsize::new(1)).await;
                t0.elapsed()
            }
        });
        tokio::time::sleep(MAX_LINGER / 2).await;
        assert!(!waiting.is_finished(), "left to the claim");
        let carried = f.take_for_claim();
        assert_eq!(waiting.await.unwrap(), MAX_LINGER / 2, "woken by the take");
        assert_eq!(carried.items(), crate::job::keys(&[(1, 1)]));
        carried.done();
        // A claim that never comes holds them up to the bound only.
        let _r = hand_in(&queue, &claim, 2);
        f.claim_coming();
        let t0 = tokio::time::Instant::now();
        wait_for_more(&queue, &AtomicUsize::new(1)).await;
        assert_eq!(t0.elapsed(), MAX_LINGER);
        // One that is over without taking them hands them back to the finisher at once.
        let t1 = tokio::time::Instant::now();
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move { wait_for_more(&queue, &AtomicUsize::new(1)).await }
        });
        tokio::task::yield_now().await;
        f.claim_over();
        waiting.await.unwrap();
        assert_eq!(t1.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn finishes_of_several_claims_wait_for_each_of_them() {
        let (queue, f) = finisher();
        let (a, b) = (f.cohort(1), f.cohort(2));
        let a1 = a.member();
        let (b1, _b2) = (b.member(), b.member());
        let _r = hand_in(&queue, &a, 1);
        drop(a1);
        let _r = hand_in(&queue, &b, 2);
        drop(b1);
        assert!(!claims_ended(&queue.lock()), "claim b runs on");
        let _r = hand_in(&queue, &a, 3);
        assert!(!claims_ended(&queue.lock()), "b again, after a");
    }
}
