//! Running one claimed job: its handler under a timeout, then the fenced finish.

use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::Shared;
use super::finisher::{Member, Reply};
use super::ledger::Entry;
use super::trace::AttemptTrace;
use crate::db::claim::ClaimedJob;
use crate::db::finish::{ByApplication, Finish, finish_bounded};
use crate::error::Error;
use crate::handler::{BoxFuture, Finished, JobContext, JobError, Reporter};
use crate::job::AttemptKey;
use crate::telemetry::JobFigures;

/// Why the handler stopped.
enum Ended {
    /// It returned, or panicked (the panic's payload).
    Returned(Result<Result<(), JobError>, Panic>),
    TimedOut(Duration),
    HardStop,
    CancelRequested,
    /// The self-fence tripped: this worker could not confirm it was alive.
    Fenced,
    /// The row was taken away from this worker.
    Lost,
}

/// Runs `job` and records its outcome. The permit is the job's slot. A job whose handler succeeded gives
/// it back as soon as its outcome goes to the finisher: the row then waits only for the finisher's next
/// batch, which runs beside the next claim instead of before it, and nothing that job did is still to
/// come (its handler's writes are committed; a done finish makes nothing claimable). Any other job
/// gives it back once its row has been finished, so a draining worker's next claim sees what it left
/// (a retry that is due at once, a job handed back). The ledger keeps the attempt until its outcome is
/// recorded either way. `older` is the entry of an earlier copy of the same job still running here:
/// this copy starts only after it has ended. `member` is the job's place among the jobs of its claim,
/// which the finisher waits for to finish them together: the job leaves it as soon as its outcome is
/// decided.
pub(super) async fn run_job(
    shared: Arc<Shared>,
    mut job: ClaimedJob,
    permit: OwnedSemaphorePermit,
    entry: Entry,
    older: Option<Entry>,
    member: Member,
    figures: Arc<JobFigures>,
) {
    // The task starts as soon as its claim is committed: what passes from here to the handler's start
    // (waiting for an earlier copy, a fence check) is part of the job's pickup delay.
    let claimed = Instant::now();
    let attempt = job.attempt();
    if let Some(older) = older {
        warn!(
            job_id = job.id.0,
            attempt, "claimed again while an earlier copy still stops here; waiting for it"
        );
        tokio::select! {
            () = older.ended.raised() => {}
            () = shared.hard_stop.cancelled() => {}
        }
    }
    let fence = shared.fence.token();
    let mut timed_out = false;
    let mut trace = None;
    let finished = Arc::new(AtomicU8::new(Finished::ByWorker as u8));
    let outcome = if shared.hard_stop.is_cancelled() || fence.is_cancelled() {
        // Claimed but never started: give it back as it was.
        Some(Finish::Release)
    } else {
        let _counted = shared.fence.enter();
        let waited = Duration::from_micros(job.waited_us.max(0) as u64) + claimed.elapsed();
        figures.started(waited);
        let started = Instant::now();
        let report = Reporter::new(shared.pool.clone(), job.key(), shared.token.clone());
        let handed = trace.insert(AttemptTrace::start(&job)).traceparent();
        // Moved to the handler, not copied: nothing after reads it.
        let payload = std::mem::take(&mut job.payload);
        let ended = run_handler(
            &shared, &job, payload, &entry, &fence, &finished, &report, handed,
        )
        .await;
        // A progress report the once-a-second limit held back is written before the outcome.
        report.flush().await;
        // Boxed, as other rare paths below: the task of every job holds this future, and the size of
        // the largest path is what each job's task allocates and moves.
        let ended = if Finished::of(&finished) == Finished::ByApplication {
            Box::pin(check_application_finish(&shared, &job, ended, &finished)).await
        } else {
            ended
        };
        figures.ran(started.elapsed());
        timed_out = matches!(ended, Ended::TimedOut(_));
        entry.recording();
        decide(&shared, &job, ended, entry.cancel_request.is_raised())
    };
    let mut slot = Some(permit);
    let label = match &outcome {
        // The handler committed the done finish with its own work (JobContext::finish_in), or the
        // application did and the row says so (`check_application_finish`).
        Some(Finish::Done) if Finished::of(&finished) != Finished::ByWorker => {
            drop(member);
            shared.counters.done.fetch_add(1, Ordering::Relaxed);
            figures.finished("done");
            debug!(job_id = job.id.0, kind = %job.kind, attempt, "job done (finished in the handler's or the application's transaction)");
            "done"
        }
        Some(Finish::Done) => {
            give_back(&shared, &mut slot, claimed);
            let reply = done_patiently(&shared, shared.finisher.done(job.key(), member)).await;
            record(
                &shared,
                &job,
                &figures,
                attempt,
                &Finish::Done,
                timed_out,
                reply,
            )
        }
        Some(outcome) => {
            drop(member);
            let reply = Box::pin(finish_patiently(&shared, &job, attempt, outcome)).await;
            record(&shared, &job, &figures, attempt, outcome, timed_out, reply)
        }
        None => {
            drop(member);
            shared.counters.lost.fetch_add(1, Ordering::Relaxed);
            figures.finished("claim_lost");
            "claim_lost"
        }
    };
    // Ended once the outcome is recorded, so the span's time covers the finish too.
    if let Some(trace) = trace {
        trace.end(label, outcome.as_ref());
    }
    let gave_back_early = slot.is_none();
    shared.ledger.leave(AttemptKey {
        id: job.id,
        attempt,
    });
    if gave_back_early {
        // The outcome is written now: a draining worker that found nothing while it was being written
        // waits for this to look again (see `Fetch::judge`).
        shared.job_ended.notify_one();
    }
    give_back(&shared, &mut slot, claimed);
}

/// Gives the job's slot back, if it still holds it, and wakes a claim waiting for one. Counted in the
/// ledger first (see [`super::ledger::Ledger::ended`]).
fn give_back(shared: &Shared, slot: &mut Option<OwnedSemaphorePermit>, claimed: Instant) {
    if let Some(permit) = slot.take() {
        shared.ledger.slot_freed(claimed.elapsed());
        drop(permit);
        shared.job_ended.notify_one();
    }
}

#[allow(clippy::too_many_arguments)] // one caller; a struct for them would be built once per job
async fn run_handler(
    shared: &Shared,
    job: &ClaimedJob,
    payload: String,
    entry: &Entry,
    fence: &CancellationToken,
    finished: &Arc<AtomicU8>,
    report: &Reporter,
    traceparent: Option<crate::Traceparent>,
) -> Ended {
    let Some(registered) = shared.handlers.get(&job.kind) else {
        // Claims ask only for registered kinds, but the kind column compares with trailing spaces
        // ignored: a row of kind "quick " can come back for "quick". Retrying cannot fix its kind.
        return Ended::Returned(Ok(Err(JobError::fatal(format!(
            "no handler for kind {:?} in this worker (kinds must match exactly)",
            job.kind
        )))));
    };
    let timeout = job
        .timeout_secs
        .map(|s| Duration::from_secs(u64::from(s)))
        .or(registered.options.timeout)
        .unwrap_or(shared.cfg.default_timeout);
    // Not a child of `hard_stop`: the select below cancels it on a hard stop as on every other end,
    // and a child token takes the parent's lock to join it and again to leave, for every job.
    let cancel = CancellationToken::new();
    let now = chrono::Utc::now();
    let ctx = JobContext {
        id: job.id,
        kind: job.kind.to_string(),
        queue: job.queue.to_string(),
        attempt: job.attempt(),
        max_attempts: max_attempts(shared, job),
        claim: shared.token.as_str().to_owned(),
        payload,
        cancel: cancel.clone(),
        deadline: chrono::Duration::from_std(timeout)
            .ok()
            .and_then(|t| now.checked_add_signed(t))
            .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC),
        run_at: now - chrono::Duration::microseconds(job.waited_us.max(0)),
        finished: finished.clone(),
        report: report.clone(),
        traceparent,
    };
    debug!(job_id = job.id.0, kind = %job.kind, attempt = job.attempt(), "job started");
    // A panic fails the job instead of the worker. Polled here rather than in a task of its own: a
    // second task per job cost a tenth of a draining worker's CPU (`perf record` of `jobq bench`'s
    // worker process), and dropping the future stops the handler as aborting its task did.
    let mut task = CatchPanic(registered.handler.call(ctx));
    // Biased, the handler first: a handler that is done at its first poll returns before the timeout
    // is entered in the timer and the four signals register their waiters, work that every other job
    // did for nothing. When the handler and a stop are ready in the same poll, the handler's outcome
    // wins: the job did end, and its finish is fenced like any other.
    let ended = tokio::select! {
        biased;
        r = &mut task => return Ended::Returned(r),
        () = tokio::time::sleep(timeout) => Ended::TimedOut(timeout),
        () = shared.hard_stop.cancelled() => Ended::HardStop,
        () = entry.cancel_request.raised() => Ended::CancelRequested,
        () = fence.cancelled() => Ended::Fenced,
        () = entry.lost.raised() => Ended::Lost,
    };
    cancel.cancel();
    // A fenced or lost copy must be gone before a reaper may hand the job on (or already has): it gets
    // the fence's short grace, after which its task is dropped (a command's process group is SIGKILLed
    // when its handler future is dropped).
    let grace = match ended {
        Ended::Fenced | Ended::Lost => crate::claimant::fence::KILL_GRACE,
        _ => shared.cfg.cancel_grace,
    };
    if tokio::time::timeout(grace, &mut task).await.is_err() {
        warn!(job_id = job.id.0, kind = %job.kind, "handler did not stop when told to; dropping it");
        // Dropped here, before we report it stopped: nothing of this copy runs after.
        drop(task);
    }
    ended
}

/// A panic's payload.
type Panic = Box<dyn std::any::Any + Send>;

/// A handler's future whose panic is its output instead of the worker's.
struct CatchPanic(BoxFuture<Result<(), JobError>>);

impl Future for CatchPanic {
    type Output = Result<Result<(), JobError>, Panic>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = &mut self.0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(r)) => Poll::Ready(Ok(r)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

/// When the handler returned `Ok(())` after saying that the application finished the job itself, reads
/// the row: a job the application did not finish (its transaction rolled back, or it never called
/// `jobq_finish`) fails the attempt instead of passing as done, and one whose claim was lost meanwhile
/// is left alone. A read that fails leaves the answer unknown: the attempt then fails, and its fenced
/// finish changes nothing if the application's finish did commit.
async fn check_application_finish(
    shared: &Shared,
    job: &ClaimedJob,
    ended: Ended,
    finished: &AtomicU8,
) -> Ended {
    if !matches!(ended, Ended::Returned(Ok(Ok(()))))
        || Finished::of(finished) != Finished::ByApplication
    {
        return ended;
    }
    let not_done = |why: String| {
        finished.store(Finished::ByWorker as u8, Ordering::SeqCst);
        Ended::Returned(Ok(Err(JobError::retry(why))))
    };
    match crate::db::finish::by_application(&shared.pool, job.id, &shared.token, job.attempt())
        .await
    {
        Ok(ByApplication::Finished) => ended,
        Ok(ByApplication::Gone) => Ended::Lost,
        Ok(ByApplication::NotFinished) => not_done(
            "the application answered that it finished the job, but the row still carries this \
             attempt's claim: its CALL jobq_finish(id, claim, attempt) did not commit"
                .into(),
        ),
        Err(e) => not_done(format!(
            "the application answered that it finished the job, and reading the row to check failed: {e}"
        )),
    }
}

/// The attempts a job may use: its own `max_attempts` when it set one, else its handler's, else 20.
fn max_attempts(shared: &Shared, job: &ClaimedJob) -> u16 {
    crate::job::max_attempts(
        job.max_attempts,
        shared
            .handlers
            .get(&job.kind)
            .and_then(|e| e.options.max_attempts),
    )
}

/// Turns how the handler ended into what happens to the row; `None` when the row is no longer ours.
fn decide(
    shared: &Shared,
    job: &ClaimedJob,
    ended: Ended,
    cancel_requested: bool,
) -> Option<Finish> {
    let attempt = job.attempt();
    let cancelled = || Finish::Cancelled {
        reason: "cancelled by an operator while it ran".into(),
    };
    let interrupted = || Finish::Interrupted {
        reason: "interrupted: the worker shut down before the job finished".into(),
    };
    let fenced = || Finish::Interrupted {
        reason: format!(
            "interrupted: the worker could not confirm it was alive for {} and stopped the job",
            humantime::format_duration(shared.cfg.fence_after)
        ),
    };
    let mut asked_delay = None;
    let (message, fatal) = match ended {
        Ended::Lost => {
            warn!(job_id = job.id.0, kind = %job.kind, attempt, claim = %shared.token,
                  "stopped a copy whose row was taken away; leaving the row alone");
            return None;
        }
        Ended::Fenced => return Some(fenced()),
        Ended::Returned(Ok(Ok(()))) => return Some(Finish::Done),
        Ended::CancelRequested => return Some(cancelled()),
        Ended::Returned(_) if cancel_requested => return Some(cancelled()),
        // A handler that returns an error after it was told to stop for shutdown was interrupted; it
        // did not fail on its own.
        Ended::Returned(_) if shared.hard_stop.is_cancelled() => return Some(interrupted()),
        Ended::Returned(Ok(Err(e))) => match e.snoozed() {
            None => {
                asked_delay = e.retry_delay();
                (e.message().to_string(), e.is_fatal())
            }
            // Checked by the worker's clock: the database's is a statement away, and a snooze near the
            // end of the range is a handler's mistake either way.
            Some(delay) => match crate::handler::snooze_until(delay, chrono::Utc::now()) {
                Ok(_) => return Some(Finish::Snooze { delay }),
                Err(why) => (format!("refused to snooze: {why}"), false),
            },
        },
        // The error's text is what the row keeps (`last_error`): "handler panicked: <message>".
        Ended::Returned(Err(panic)) => (Error::panicked("handler", panic).to_string(), false),
        Ended::TimedOut(t) => (
            format!("timed out after {}", humantime::format_duration(t)),
            false,
        ),
        Ended::HardStop => return Some(interrupted()),
    };
    let retry = shared
        .handlers
        .get(&job.kind)
        .and_then(|e| e.options.retry)
        .unwrap_or(shared.cfg.retry);
    Some(if fatal || attempt >= max_attempts(shared, job) {
        Finish::Dead { error: message }
    } else {
        Finish::Retry {
            // A delay past what run_at can hold falls back to the backoff.
            delay: asked_delay
                .filter(|d| crate::handler::snooze_until(*d, chrono::Utc::now()).is_ok())
                .unwrap_or_else(|| retry.next_delay(attempt)),
            error: message,
        }
    })
}

/// Finishes the row with an outcome other than done (done finishes go to the finisher, in batches),
/// riding out a database outage: a live worker that gave up here would leave its own row `running`
/// under a token whose holder is alive, which no reaper may touch. Only a hard stop ends the wait (the
/// worker is exiting; its claim is then recovered like any dead claimant's).
async fn finish_patiently(
    shared: &Shared,
    job: &ClaimedJob,
    attempt: u16,
    outcome: &Finish,
) -> Result<bool, Arc<Error>> {
    // The bound a job without its own was judged by is stored with a failure, so the row shows it (and
    // a reaper, which knows no handler, applies it too).
    let bound = job
        .max_attempts
        .is_none()
        .then(|| max_attempts(shared, job));
    super::patiently(&shared.hard_stop, "the job's outcome", || {
        finish_bounded(&shared.pool, job.id, &shared.token, attempt, outcome, bound)
    })
    .await
    .map_err(Arc::new)
}

/// Waits for the finisher's answer to a done finish, or for a hard stop.
async fn done_patiently(shared: &Shared, done: impl Future<Output = Reply>) -> Reply {
    crate::service::unless_stopped(&shared.hard_stop, done)
        .await
        .unwrap_or_else(|| {
            Err(Arc::new(Error::Io {
                context: "recording a finished job".into(),
                source: std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the database did not answer while stopping",
                ),
            }))
        })
}

/// Counts the attempt by `reply`, the answer to the finish of its row with `outcome`; `timed_out` when
/// the handler was stopped at its timeout. Returns the outcome's label, as counted.
///
/// The error is shared ([`Reply`]) because a done finish may have been one of a batch that failed
/// together.
fn record(
    shared: &Shared,
    job: &ClaimedJob,
    figures: &JobFigures,
    attempt: u16,
    outcome: &Finish,
    timed_out: bool,
    reply: Reply,
) -> &'static str {
    let c = &shared.counters;
    match reply {
        Ok(true) => {
            let counter = match outcome {
                Finish::Done => {
                    debug!(job_id = job.id.0, kind = %job.kind, attempt, "job done");
                    &*c.done
                }
                Finish::Retry { delay, error } => {
                    warn!(job_id = job.id.0, kind = %job.kind, attempt, retry_in = %humantime::format_duration(round(*delay)), error = %error, "job failed; will retry");
                    &c.retried
                }
                Finish::Dead { error } => {
                    error!(job_id = job.id.0, kind = %job.kind, attempt, error = %error, "job failed for good; it is dead");
                    &c.dead
                }
                Finish::Cancelled { .. } => {
                    info!(job_id = job.id.0, kind = %job.kind, attempt, "job cancelled");
                    &c.cancelled
                }
                Finish::Release | Finish::Interrupted { .. } => {
                    debug!(job_id = job.id.0, kind = %job.kind, "job handed back");
                    &c.released
                }
                Finish::Snooze { delay } => {
                    info!(job_id = job.id.0, kind = %job.kind, attempt, run_in = %humantime::format_duration(round(*delay)), "job snoozed; the attempt does not count");
                    &c.snoozed
                }
            };
            counter.fetch_add(1, Ordering::Relaxed);
            let label = outcome_label(outcome, timed_out);
            figures.finished(label);
            label
        }
        Ok(false) => {
            c.lost.fetch_add(1, Ordering::Relaxed);
            figures.finished("claim_lost");
            warn!(job_id = job.id.0, kind = %job.kind, attempt, claim = %shared.token,
                  "claim lost: the row no longer carries this worker's token and attempt; leaving it alone");
            "claim_lost"
        }
        Err(e) => {
            // Kept for the watcher's reconcile, which records it once the database takes it: handing
            // the row back as never run would run the job again as the same attempt.
            shared.ledger.unrecorded(
                AttemptKey {
                    id: job.id,
                    attempt,
                },
                outcome.clone(),
            );
            error!(job_id = job.id.0, kind = %job.kind, attempt, error = %e,
                   "could not record the job's outcome; it will be recorded once the database takes it");
            // Decided, if not yet recorded: the span says what the attempt came to.
            outcome_label(outcome, timed_out)
        }
    }
}

/// The `outcome` label of a recorded finish. An attempt stopped at its timeout is `timeout` whether the
/// job is retried or dead after it: a slow dependency shows as timeouts, not as ordinary failures.
fn outcome_label(outcome: &Finish, timed_out: bool) -> &'static str {
    match outcome {
        Finish::Done => "done",
        Finish::Retry { .. } | Finish::Dead { .. } if timed_out => "timeout",
        Finish::Retry { .. } => "retry",
        Finish::Dead { .. } => "dead",
        Finish::Cancelled { .. } => "cancelled",
        Finish::Release | Finish::Interrupted { .. } => "requeued",
        Finish::Snooze { .. } => "snoozed",
    }
}

fn round(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timed_out_attempt_is_labelled_timeout_whatever_follows() {
        let retry = Finish::Retry {
            delay: Duration::from_secs(1),
            error: "timed out".into(),
        };
        let dead = Finish::Dead {
            error: "timed out".into(),
        };
        assert_eq!(outcome_label(&retry, true), "timeout");
        assert_eq!(outcome_label(&dead, true), "timeout");
        assert_eq!(outcome_label(&retry, false), "retry");
        assert_eq!(outcome_label(&dead, false), "dead");
        assert_eq!(outcome_label(&Finish::Done, false), "done");
    }

    #[test]
    fn every_outcome_label_has_a_registered_counter() {
        let finishes = [
            Finish::Done,
            Finish::Retry {
                delay: Duration::from_secs(1),
                error: "e".into(),
            },
            Finish::Dead { error: "e".into() },
            Finish::Cancelled { reason: "r".into() },
            Finish::Interrupted { reason: "r".into() },
            Finish::Release,
            Finish::Snooze {
                delay: Duration::from_secs(1),
            },
        ];
        for finish in &finishes {
            for timed_out in [false, true] {
                let label = outcome_label(finish, timed_out);
                assert!(
                    crate::telemetry::OUTCOMES.contains(&label),
                    "{label:?} is not in telemetry::OUTCOMES"
                );
            }
        }
    }
}
