//! The claim loop: when to claim, how many slots a claim may fill, and the idle wait between claims.
//! The decisions are [`Pacer`]'s (pure, in `pacing.rs`); this module gathers the facts and acts.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use super::finisher::Carried;
use super::limits::{HELD_RECHECK, Limits};
use super::pacing::{After, Before, Claimed, Pacer, Slots};
use super::slices::Slices;
use super::{Shared, WorkerConfig, execute};
use crate::backoff::Backoff;
use crate::db::claim;
use crate::db::dedicated::Dedicated;
use crate::db::limits::LimitKey;
use crate::error::Result;
use crate::service::{sleep_or_stop, unless_stopped};
use crate::telemetry::JobFigures;

/// Claims while there is room and work; returns when drained or told to stop.
pub(super) async fn fetch_loop(
    shared: &Arc<Shared>,
    conn: &mut Dedicated,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) -> Result<()> {
    let cfg = &shared.cfg;
    let mut f = Fetch {
        shared,
        slots: Arc::new(Semaphore::new(cfg.concurrency as usize)),
        kinds: shared.handlers.kinds(),
        pacer: Pacer::new(cfg.mode, WorkerConfig::DEFAULT_MIN_POLL, cfg.poll_interval),
        shutdown,
        limits: Limits::default(),
        slices: Slices::default(),
    };
    loop {
        let probe_first = match f.until_claim(conn).await {
            Ready::Claim { probe_first } => probe_first,
            Ready::Again => continue,
            Ready::Stop => return Ok(()),
        };
        let Some(permits) = f.take_slots().await else {
            return Ok(());
        };
        let gate = shared.claim_gate.lock().await;
        let ended_before_claim = shared.ledger.ended.load(Ordering::SeqCst);
        // A claim on a connection whose network went silent can hang for many minutes: a shutdown
        // waits for it at most STOP_PATIENCE. A claim abandoned then may have committed unseen; its
        // rows go back through the reaper like those of any claimant that is gone.
        let claim = claim_some(
            shared,
            conn,
            &f.kinds,
            &mut f.limits,
            &mut f.slices,
            permits.len() as u32,
            probe_first,
        );
        let sent = Instant::now();
        let result = unless_stopped(shutdown, claim).await;
        shared.finisher.claim_over();
        let Some(result) = result else {
            warn!("a claim did not answer while stopping; abandoning it");
            return Ok(());
        };
        if let Ok(jobs) = &result {
            crate::telemetry::claimed(permits.len(), jobs.len(), sent.elapsed());
        }
        #[cfg(feature = "test-util")]
        shared.signals.record(|c| {
            c.claims += 1;
            c.claimed += result.as_ref().map_or(0, |jobs| jobs.len() as u64);
        });
        let claimed = f.judge(&result, permits.len(), ended_before_claim);
        match f.pacer.after_claim(claimed) {
            After::Run => {
                let jobs = result.expect("rows were claimed");
                f.start(jobs, permits, tracker);
                drop(gate);
            }
            After::Next => {}
            After::Drained => {
                debug!("nothing due; drained");
                return Ok(());
            }
            After::WaitForJobEnd => {
                drop((gate, permits));
                // Jobs are still running: they may enqueue more, so look again when one ends.
                tokio::select! {
                    biased;
                    () = shutdown.cancelled() => return Ok(()),
                    () = shared.job_ended.notified() => {}
                }
            }
            After::RetryIn(wait) => {
                drop((gate, permits));
                if retry_after_failed_claim(shared, &result, wait, shutdown).await {
                    return Ok(());
                }
            }
            After::GiveUp => return result.map(|_| ()),
        }
    }
}

/// Counts and logs a failed claim and waits `wait` before the next; true on shutdown.
async fn retry_after_failed_claim(
    shared: &Shared,
    result: &Result<Vec<claim::ClaimedJob>>,
    wait: Duration,
    shutdown: &CancellationToken,
) -> bool {
    shared.counters.claim_errors.fetch_add(1, Ordering::Relaxed);
    match result {
        // Lost races are counted (jobq_db_retries_total) rather than logged: on a Galera cluster,
        // claimers on different nodes lose them as a matter of course.
        Err(e) if e.is_conflict() => {
            debug!(error = %e, retry_in = ?wait, "claim lost a race; trying again");
        }
        Err(e) => warn!(error = %e, retry_in = ?wait, "claim failed"),
        Ok(_) => {}
    }
    sleep_or_stop(wait, shutdown).await
}

/// The claim loop's state between claims.
struct Fetch<'a> {
    shared: &'a Arc<Shared>,
    /// One permit per job that may run at once.
    slots: Arc<Semaphore>,
    /// The kinds this worker has handlers for: the only ones it claims.
    kinds: Vec<String>,
    pacer: Pacer,
    shutdown: &'a CancellationToken,
    /// The concurrency limits, as last read, and which were full at the last claim.
    limits: Limits,
    /// The slice of the due rows this worker picks from first (on a Galera cluster).
    slices: Slices,
}

/// Whether the loop may claim now.
enum Ready {
    /// Claim, first probing without locks when `probe_first`.
    Claim { probe_first: bool },
    /// Not yet: look again.
    Again,
    /// Shutdown.
    Stop,
}

impl Fetch<'_> {
    /// Waits, as the pacer says, until a claim is worth making and the fence allows it.
    async fn until_claim(&mut self, conn: &mut Dedicated) -> Ready {
        let probe_first = match self.pacer.before_claim() {
            Before::WaitForWork { back_off } => {
                let idle_wait = self.pacer.idle_wait();
                // Work a full limit holds back is not waited for: it would wake the wait at once, again
                // and again, while every claim comes back empty.
                let (queues, kinds) = self.limits.open(&self.shared.cfg.queues, &self.kinds);
                match wait_until_due(
                    self.shared,
                    conn,
                    &queues,
                    &kinds,
                    self.limits.full(),
                    idle_wait,
                    back_off,
                    self.shutdown,
                )
                .await
                {
                    Some(probe) => {
                        self.pacer.after_wait(!probe);
                        probe
                    }
                    None => return Ready::Stop,
                }
            }
            Before::Claim { probe_first } => probe_first,
        };
        // Register before claiming, always: while the session is being rebuilt, or with less than half
        // the fence bound left, a claim could take jobs that the fence would stop a moment later or that
        // a reaper is entitled to reset.
        if !self.shared.fence.may_claim() {
            return if wait_for_fence(self.shared, self.shutdown).await {
                Ready::Stop
            } else {
                Ready::Again
            };
        }
        Ready::Claim { probe_first }
    }

    /// The free slots the next claim may fill: at least one (waiting for it), at most a batch, and as
    /// many as the pacer says are worth a short wait (see [`Pacer::fill`]). `None` on shutdown.
    async fn take_slots(&self) -> Option<Vec<OwnedSemaphorePermit>> {
        let cfg = &self.shared.cfg;
        // The claim these slots are for will carry the finishes pending by then. Said before the first
        // slot is free: a done job gives its slot back before it hands its finish in, so when a claim's
        // last job has ended this claim is on its way.
        self.shared.finisher.claim_coming();
        let first = tokio::select! {
            biased;
            () = self.shutdown.cancelled() => {
                self.shared.finisher.claim_over();
                return None;
            }
            p = self.slots.clone().acquire_owned() => p.expect("semaphore is never closed"),
        };
        let mut permits = vec![first];
        let fill = self.pacer.fill(Slots {
            concurrency: cfg.concurrency,
            batch_size: cfg.batch_size,
            held: self.shared.ledger.slot_time(),
        });
        let deadline = tokio::time::Instant::now() + fill.wait;
        while permits.len() < cfg.batch_size as usize {
            match self.slots.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) if permits.len() < fill.want as usize => {
                    match tokio::time::timeout_at(deadline, self.slots.clone().acquire_owned())
                        .await
                    {
                        Ok(p) => permits.push(p.expect("semaphore is never closed")),
                        Err(_) => break,
                    }
                }
                Err(_) => break,
            }
        }
        Some(permits)
    }

    /// What a claim of `asked` rows came to, as the pacer needs to know it.
    fn judge(
        &self,
        result: &Result<Vec<claim::ClaimedJob>>,
        asked: usize,
        ended_before_claim: u64,
    ) -> Claimed {
        match result {
            // Idle: no slot taken, and no job whose outcome is still being written. A done job gives
            // its slot back before its finish is made, so that the next claim can carry it; a finish
            // that releases waiting jobs (dependents, the next job of an order key) is made by the
            // finisher after that claim, and a draining worker that stopped then would leave the
            // released jobs to the next cron tick.
            Ok(jobs) if jobs.is_empty() => Claimed::Nothing {
                idle: self.slots.available_permits() + asked
                    == self.shared.cfg.concurrency as usize
                    && self.shared.ledger.in_flight.load(Ordering::SeqCst) == 0,
                ended_meanwhile: self.shared.ledger.ended.load(Ordering::SeqCst)
                    != ended_before_claim,
            },
            Ok(jobs) => Claimed::Rows {
                got: jobs.len(),
                asked,
            },
            Err(e) => Claimed::Failed {
                transient: e.is_transient(),
            },
        }
    }

    /// Enters the claimed jobs in the ledger and starts one task per job, each holding one slot.
    fn start(
        &self,
        jobs: Vec<claim::ClaimedJob>,
        permits: Vec<OwnedSemaphorePermit>,
        tracker: &TaskTracker,
    ) {
        let shared = self.shared;
        shared
            .counters
            .claimed
            .fetch_add(jobs.len() as u64, Ordering::Relaxed);
        let cohort = shared.finisher.cohort(jobs.len());
        // A claim's jobs are nearly always of one queue and kind: their figures are looked up once.
        let mut figures: Option<Arc<JobFigures>> = None;
        for (job, permit) in jobs.into_iter().zip(permits) {
            let figures = match &figures {
                Some(f) if f.are_for(&job.queue, &job.kind) => f.clone(),
                _ => figures
                    .insert(shared.figures.of(&job.queue, &job.kind))
                    .clone(),
            };
            figures.claimed();
            let (entry, older) = shared.ledger.enter(job.key());
            let member = cohort.member();
            // Boxed: the job's future is large, and tokio moves a task's future by value through each
            // layer of its spawn and again at each change of the task's stage; a box moves as a pointer.
            tracker.spawn(Box::pin(execute::run_job(
                shared.clone(),
                job,
                permit,
                entry,
                older,
                member,
                figures,
            )));
        }
    }
}

/// How often a worker that may not claim looks again whether its session is back.
const FENCE_RECHECK: Duration = Duration::from_millis(50);

/// Waits until the fence allows claims again; true on shutdown.
async fn wait_for_fence(shared: &Shared, shutdown: &CancellationToken) -> bool {
    info!(since_confirmed = ?shared.fence.since_confirmed(),
          "not claiming until this worker is registered on a live session again");
    while !shared.fence.may_claim() {
        if sleep_or_stop(FENCE_RECHECK, shutdown).await {
            return true;
        }
    }
    info!("registered on a live session; claiming again");
    false
}

/// Idle waits until work is due (`Some(false)`: claim at once), until the server-side wait turns out to
/// be unusable (`Some(true)`: probe before claiming), or until shutdown (`None`). Each wait is twice as
/// long as the last, up to the poll interval; with `back_off`, the first is a plain sleep. While `held`
/// limits are full, each wait is at most [`HELD_RECHECK`], and after it a read-only look tells whether
/// one of them has room again (then claim).
#[allow(clippy::too_many_arguments)]
async fn wait_until_due(
    shared: &Shared,
    conn: &mut Dedicated,
    queues: &[String],
    kinds: &[String],
    held: &[LimitKey],
    idle_wait: &mut Backoff,
    back_off: bool,
    shutdown: &CancellationToken,
) -> Option<bool> {
    if back_off && sleep_or_stop(idle_wait.next_delay(), shutdown).await {
        return None;
    }
    loop {
        let wait = match held {
            [] => idle_wait.next_delay(),
            _ => idle_wait.next_delay().min(HELD_RECHECK),
        };
        let outcome = idle_wait_for_work(shared, conn, queues, kinds, wait, shutdown).await;
        match outcome {
            IdleWait::Stop => return None,
            // Work is due: claim at once, without a probe first.
            IdleWait::Due => return Some(false),
            IdleWait::Nothing if !held.is_empty() => {
                let room = conn
                    .run("limit room", 3, |mut c| async move {
                        let r = crate::db::limits::any_room(&mut c, held).await;
                        (c, r)
                    })
                    .await;
                if room.unwrap_or(true) {
                    return Some(false);
                }
            }
            // The server-side wait already looked: wait again rather than probe again.
            IdleWait::Nothing if shared.server_wait.load(Ordering::Relaxed) => {}
            IdleWait::Nothing => return Some(true),
        }
    }
}

enum IdleWait {
    Stop,
    Due,
    Nothing,
}

/// Waits up to `wait` for work while idle. With the server-side wait (schema 6) that is one statement,
/// which also writes the heartbeat and returns as soon as a job is due; without it, a sleep followed by
/// the next claim's probe.
async fn idle_wait_for_work(
    shared: &Shared,
    conn: &mut Dedicated,
    queues: &[String],
    kinds: &[String],
    wait: Duration,
    shutdown: &CancellationToken,
) -> IdleWait {
    #[cfg(feature = "test-util")]
    shared.signals.record(|c| {
        c.idle_waits += 1;
        c.idle_wait = wait;
    });
    // With every queue or kind held back by a full limit there is nothing to wait for but time.
    let nothing_open = queues.is_empty() || kinds.is_empty();
    if shared.server_wait.load(Ordering::Relaxed) && !nothing_open {
        // The wait writes the heartbeat only when the last one it wrote is half an interval old: a busy
        // worker that waits every few milliseconds would otherwise commit a registry write each time,
        // on the path between a job's INSERT and its start.
        let last_beat = shared.beat_recorder.load(Ordering::Relaxed);
        let beat_due = crate::session::now_millis().saturating_sub(last_beat)
            >= shared.cfg.heartbeat_interval.as_millis() as u64 / 2;
        let token = beat_due.then_some(shared.token.as_str());
        let sent = Instant::now();
        let call = crate::db::idle::wait_for_work(conn, token, queues, kinds, wait);
        let result = tokio::select! {
            biased;
            () = shutdown.cancelled() => return IdleWait::Stop,
            r = call => r,
        };
        match result {
            Ok(due) => {
                // The wait cannot tell whether the registry row is there; its heartbeat confirms the
                // fence only while the anchor session says it is.
                if beat_due && shared.fence.is_healthy() {
                    shared.fence.confirm(sent);
                    shared
                        .beat_recorder
                        .store(crate::session::now_millis(), Ordering::Relaxed);
                }
                return if due {
                    IdleWait::Due
                } else {
                    IdleWait::Nothing
                };
            }
            Err(e) if e.is_transient() => {
                debug!(error = %e, "idle wait failed; sleeping instead");
            }
            Err(e) => {
                warn!(error = %e, "the server-side idle wait is unusable; polling instead");
                shared.server_wait.store(false, Ordering::Relaxed);
            }
        }
    }
    if sleep_or_stop(wait, shutdown).await {
        IdleWait::Stop
    } else {
        IdleWait::Nothing
    }
}

/// One claim across the worker's queues, in order. While idle it first sends the cheap probe and claims
/// only if the probe saw something due.
async fn claim_some(
    shared: &Shared,
    conn: &mut Dedicated,
    kinds: &[String],
    limits: &mut Limits,
    slices: &mut Slices,
    limit: u32,
    probing: bool,
) -> Result<Vec<claim::ClaimedJob>> {
    if probing && !crate::db::idle::any_due(conn, &shared.cfg.queues, kinds).await? {
        return Ok(Vec::new());
    }
    limits.refresh(conn).await;
    limits.clear_full();
    // The done finishes waiting to be made ride in the first claim's transaction; what no claim made
    // goes back to the finisher.
    let mut carry = shared.finisher.take_for_claim();
    // What the claims' stamps list on the holdings row besides their own rows: every row this worker
    // may still be running (jobs that leave the ledger meanwhile stay listed until the next claim).
    let running = shared.ledger.holding();
    // On a cluster, each queue's pick in this worker's slice first (see `slices`); then the rows each
    // queue's pick finds first; only when that finds none anywhere, past the rows other claims hold
    // (see `claim::Reach`).
    let sliced = slices.before_claim(conn).await.then_some(Pass {
        reach: claim::Reach::Picked,
        sliced: true,
        slices,
        running: &running,
    });
    let whole = [claim::Reach::Picked, claim::Reach::PastHeld].map(|reach| Pass {
        reach,
        sliced: false,
        slices,
        running: &running,
    });
    let mut result = Ok(Vec::new());
    for pass in sliced.into_iter().chain(whole) {
        result = claim_parts(shared, conn, kinds, limits, limit, &mut carry, pass).await;
        if !matches!(&result, Ok(jobs) if jobs.is_empty()) {
            break;
        }
    }
    shared.finisher.give_back(carry);
    result
}

/// How far one pass of [`claim_some`] looks in each queue, and whether in this worker's slice of its due
/// rows (else the whole queue).
#[derive(Debug, Clone, Copy)]
struct Pass<'a> {
    reach: claim::Reach,
    sliced: bool,
    /// The slices, and how many claimers share each queue (how deep its pick reads).
    slices: &'a Slices,
    /// The rows the worker may still be running, which every stamp lists (see `claim::Holding`).
    running: &'a [u64],
}

/// The claims of [`claim_some`], queue by queue: the plain claim where no limit applies, else the claim
/// under limits (which keeps the queue's order across limited and unlimited kinds). The first claim
/// carries `carry` (answered and emptied once made). Each stamp lists `running` and the rows claimed
/// before it on the worker's holdings row.
async fn claim_parts(
    shared: &Shared,
    conn: &mut Dedicated,
    kinds: &[String],
    limits: &mut Limits,
    limit: u32,
    carry: &mut Carried,
    Pass {
        reach,
        sliced,
        slices,
        running,
    }: Pass<'_>,
) -> Result<Vec<claim::ClaimedJob>> {
    let mut jobs = Vec::new();
    let mut listed = running.to_vec();
    for queue in &shared.cfg.queues {
        let want = limit - jobs.len() as u32;
        if want == 0 && carry.is_empty() {
            return Ok(jobs);
        }
        let uncertain = shared.ledger.uncertain_flag();
        let applying = limits.applying(queue, kinds);
        let items = carry.items();
        let sent = Instant::now();
        let args = claim::ClaimArgs {
            token: &shared.token,
            holding: claim::Holding {
                running: &listed,
                keep: false,
            },
            queue,
            kinds,
            limit: want,
            carry: &items,
            reach,
            slice: if sliced {
                slices.of(queue)
            } else {
                claim::Slice::WHOLE
            },
            ahead: slices.ahead(queue),
        };
        let claim = if applying.is_empty() {
            claim::claim_batch_watched(conn, args, uncertain).await?
        } else {
            let (claim, full) =
                claim::claim_limited_watched(conn, args, &applying, uncertain).await?;
            limits.note_full(full);
            claim
        };
        if !items.is_empty() {
            if claim.carried {
                crate::telemetry::finished_batch(items.len(), sent.elapsed());
                std::mem::take(carry).done();
            } else {
                shared.finisher.give_back(std::mem::take(carry));
            }
        }
        listed.extend(claim.jobs.iter().map(|j| j.id.0));
        jobs.extend(claim.jobs);
    }
    Ok(jobs)
}
