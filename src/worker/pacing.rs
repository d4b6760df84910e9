//! When the fetch loop claims, waits for work, backs off or stops: pure decisions over what its last
//! step saw, so each rule has a test of its own. The loop does the I/O and asks the [`Pacer`] what next.
//!
//! The rules, and why:
//! * A claim that came back **short** (fewer rows than free slots) emptied the queue as it stood.
//!   Another locking claim right away would most likely come back empty, and a locking claim is the
//!   dearest statement jobq sends (an empty one also walks the claim index with locks, past entries
//!   of rows claimed moments ago that purge has not removed yet). So a forever worker waits for work
//!   next (the wait probes at once, without locking), and a draining one probes before its next claim.
//!   A claim can also come back short because other claims in flight held rows it picked; the probe
//!   then sees the rest due and the next claim follows at once.
//! * A wait that **saw a due job** followed by a claim that got nothing means another transaction holds
//!   those rows (another worker's claim in flight, or an application's long transaction): the next wait
//!   starts with a sleep, or the worker would spin between the wait and the claim.
//! * A draining worker is **drained** only when a claim found nothing while no job was running and
//!   none ended during the claim: a job that ended meanwhile may have left a retry, or enqueued more,
//!   that the claim did not see. While jobs run, it looks again when one ends.
//! * A failed claim is retried with a backoff; a forever worker rides out any outage, a draining one
//!   (cron) gives up after [`DRAIN_CLAIM_TRIES`] transient failures, since the next cron tick starts a
//!   fresh worker anyway.
//! * **How many slots a claim waits for** ([`Pacer::fill`]). A claim costs a transaction whatever it
//!   takes, so one claim per freed slot means a commit per job. When the last claim came back **full**
//!   (the queue is deeper than the worker's slots) and slots are given back **quickly** (a job holds
//!   its slot for under [`SHORT_JOB`]), the claim waits up to [`DEEP_FILL_WAIT`] for every slot a
//!   batch can fill: the slots it waits for free within about a job's time, and one claim then does
//!   the work of several. Otherwise (long jobs, a shallow queue, or nothing measured yet) it waits up
//!   to [`FILL_WAIT`] for half a batch, as long jobs do not free slots in a moment and a job that is
//!   due should not wait behind ones still running. A claim never takes more than the free slots or
//!   the batch size, so a worker never holds jobs another could run; a probing worker waits for
//!   nothing.

use std::time::Duration;

use super::Mode;
use crate::backoff::Backoff;

/// Failed claims in a row (each already retried internally) after which a draining worker gives up:
/// about 3 s of waiting in all.
pub(super) const DRAIN_CLAIM_TRIES: u32 = 5;

/// Slots held for less than this on average count as short jobs: waiting for the rest of a batch to
/// free then costs less than the claim it saves (a claim transaction takes about 1 to 2 ms here).
pub(super) const SHORT_JOB: Duration = Duration::from_millis(2);

/// Longest wait for a whole batch of slots on a deep queue of short jobs: twice [`SHORT_JOB`], so that
/// the slots of jobs claimed together are back before it ends, and a claim behind a job that turns out
/// long is held back by at most this.
pub(super) const DEEP_FILL_WAIT: Duration = Duration::from_millis(4);

/// Longest wait for half a batch of slots otherwise.
pub(super) const FILL_WAIT: Duration = Duration::from_millis(2);

/// What a claim about to be made knows about its slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Slots {
    /// The worker's `concurrency`.
    pub(super) concurrency: u32,
    /// The worker's `batch_size`.
    pub(super) batch_size: u32,
    /// How long a job has held its slot lately (a moving average); `None` before any has ended.
    pub(super) held: Option<Duration>,
}

/// How many free slots the next claim waits for, and for how long at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fill {
    /// Take every free slot up to this many at once; wait for more while fewer are free.
    pub(super) want: u32,
    /// Up to this long.
    pub(super) wait: Duration,
}

/// How the next round starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Before {
    /// Claim; with `probe_first`, only if the cheap non-locking probe sees something due.
    Claim { probe_first: bool },
    /// Wait for work first; with `back_off`, start with a plain sleep.
    WaitForWork { back_off: bool },
}

/// What a claim came back with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Claimed {
    /// `got` rows for `asked` free slots (`got` > 0).
    Rows { got: usize, asked: usize },
    /// Nothing; `idle`: no job was running; `ended_meanwhile`: a job ended while the claim ran.
    Nothing { idle: bool, ended_meanwhile: bool },
    /// The claim failed after its own retries.
    Failed { transient: bool },
}

/// What to do after a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum After {
    /// Start the claimed jobs, then the next round.
    Run,
    /// Next round at once.
    Next,
    /// Wait until a running job ends, then the next round.
    WaitForJobEnd,
    /// Nothing is left: a draining worker returns.
    Drained,
    /// Sleep this long, then the next round.
    RetryIn(Duration),
    /// Return the error.
    GiveUp,
}

/// The fetch loop's pacing state. See the module docs.
#[derive(Debug, Clone)]
pub(super) struct Pacer {
    mode: Mode,
    /// Claim only after a probe saw work (a draining worker after a short claim).
    probing: bool,
    /// The last wait ended because it saw a due job.
    woken: bool,
    /// Wait for work before the next claim (a forever worker after a short or empty claim).
    wait_first: bool,
    /// The last claim filled every slot it asked for: the queue is at least as deep as the claims.
    deep: bool,
    failures: u32,
    idle: Backoff,
    idle_start: Backoff,
    errors: Backoff,
}

impl Pacer {
    /// Idle waits double from `min_poll` up to `poll_interval`.
    pub(super) fn new(mode: Mode, min_poll: Duration, poll_interval: Duration) -> Self {
        let idle = Backoff::new(min_poll, poll_interval);
        Self {
            mode,
            probing: false,
            woken: false,
            wait_first: false,
            deep: false,
            failures: 0,
            idle,
            idle_start: idle,
            errors: Backoff::RETRY,
        }
    }

    /// How the next round starts.
    pub(super) fn before_claim(&mut self) -> Before {
        if std::mem::take(&mut self.wait_first) {
            Before::WaitForWork {
                back_off: std::mem::take(&mut self.woken),
            }
        } else {
            Before::Claim {
                probe_first: self.probing,
            }
        }
    }

    /// Whether the next claim is only looking (it probes first).
    #[cfg(test)]
    pub(super) fn probing(&self) -> bool {
        self.probing
    }

    /// How many slots the next claim waits for (see the module docs).
    pub(super) fn fill(&self, slots: Slots) -> Fill {
        let batch = slots.batch_size.min(slots.concurrency).max(1);
        if self.probing {
            return Fill {
                want: 1,
                wait: Duration::ZERO,
            };
        }
        if self.deep && slots.held.is_some_and(|h| h < SHORT_JOB) {
            return Fill {
                want: batch,
                wait: DEEP_FILL_WAIT,
            };
        }
        Fill {
            want: batch.min(slots.concurrency.div_ceil(2)).max(1),
            wait: FILL_WAIT,
        }
    }

    /// The idle waits' backoff, which the wait advances.
    pub(super) fn idle_wait(&mut self) -> &mut Backoff {
        &mut self.idle
    }

    /// After a wait for work: `saw_due` when it ended because something was due (claim at once),
    /// false when it could not tell (probe before claiming).
    pub(super) fn after_wait(&mut self, saw_due: bool) {
        self.probing = !saw_due;
        self.woken = saw_due;
    }

    /// What to do after a claim.
    pub(super) fn after_claim(&mut self, claimed: Claimed) -> After {
        match claimed {
            Claimed::Failed { transient } => {
                self.deep = false;
                if self.mode == Mode::Forever || (transient && self.failures < DRAIN_CLAIM_TRIES) {
                    self.failures += 1;
                    After::RetryIn(self.errors.next_delay())
                } else {
                    After::GiveUp
                }
            }
            Claimed::Nothing {
                idle,
                ended_meanwhile,
            } => {
                self.claim_worked();
                self.deep = false;
                match self.mode {
                    Mode::Drain if idle && !ended_meanwhile => After::Drained,
                    Mode::Drain if idle => After::Next,
                    Mode::Drain => After::WaitForJobEnd,
                    Mode::Forever => {
                        self.wait_first = true;
                        After::Next
                    }
                }
            }
            Claimed::Rows { got, asked } => {
                self.claim_worked();
                let short = got < asked;
                self.deep = !short;
                self.probing = short && self.mode == Mode::Drain;
                self.wait_first = short && self.mode == Mode::Forever;
                self.woken = false;
                self.idle = self.idle_start;
                After::Run
            }
        }
    }

    fn claim_worked(&mut self) {
        self.failures = 0;
        self.errors.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pacer(mode: Mode) -> Pacer {
        Pacer::new(mode, Duration::from_millis(20), Duration::from_secs(2))
    }

    fn claim(p: &mut Pacer) -> Before {
        p.before_claim()
    }

    #[test]
    fn a_full_claim_claims_again_at_once() {
        for mode in [Mode::Drain, Mode::Forever] {
            let mut p = pacer(mode);
            assert_eq!(claim(&mut p), Before::Claim { probe_first: false });
            assert_eq!(
                p.after_claim(Claimed::Rows { got: 10, asked: 10 }),
                After::Run
            );
            assert_eq!(claim(&mut p), Before::Claim { probe_first: false });
        }
    }

    #[test]
    fn after_a_short_claim_a_forever_worker_waits_and_a_draining_one_probes() {
        let mut p = pacer(Mode::Forever);
        assert_eq!(
            p.after_claim(Claimed::Rows { got: 3, asked: 10 }),
            After::Run
        );
        assert_eq!(claim(&mut p), Before::WaitForWork { back_off: false });
        p.after_wait(true);
        assert_eq!(claim(&mut p), Before::Claim { probe_first: false });

        let mut p = pacer(Mode::Drain);
        assert_eq!(
            p.after_claim(Claimed::Rows { got: 3, asked: 10 }),
            After::Run
        );
        assert_eq!(claim(&mut p), Before::Claim { probe_first: true });
        assert!(p.probing());
    }

    #[test]
    fn a_wait_that_saw_work_then_an_empty_claim_backs_off() {
        let mut p = pacer(Mode::Forever);
        p.after_claim(Claimed::Nothing {
            idle: true,
            ended_meanwhile: false,
        });
        assert_eq!(claim(&mut p), Before::WaitForWork { back_off: false });
        p.after_wait(true);
        assert_eq!(claim(&mut p), Before::Claim { probe_first: false });
        // The due row was locked elsewhere: nothing claimed.
        p.after_claim(Claimed::Nothing {
            idle: true,
            ended_meanwhile: false,
        });
        assert_eq!(claim(&mut p), Before::WaitForWork { back_off: true });
    }

    #[test]
    fn a_draining_worker_is_drained_only_when_idle_and_nothing_ended_during_the_claim() {
        let mut p = pacer(Mode::Drain);
        let nothing = |idle, ended_meanwhile| Claimed::Nothing {
            idle,
            ended_meanwhile,
        };
        assert_eq!(p.after_claim(nothing(false, false)), After::WaitForJobEnd);
        assert_eq!(p.after_claim(nothing(true, true)), After::Next);
        assert_eq!(p.after_claim(nothing(true, false)), After::Drained);
    }

    #[test]
    fn failed_claims_back_off_and_a_draining_worker_gives_up() {
        let mut p = pacer(Mode::Drain);
        let mut waits = Vec::new();
        for _ in 0..DRAIN_CLAIM_TRIES {
            match p.after_claim(Claimed::Failed { transient: true }) {
                After::RetryIn(d) => waits.push(d.as_millis()),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(waits, [100, 200, 400, 800, 1600]);
        assert_eq!(
            p.after_claim(Claimed::Failed { transient: true }),
            After::GiveUp
        );
        let mut p = pacer(Mode::Drain);
        assert_eq!(
            p.after_claim(Claimed::Failed { transient: false }),
            After::GiveUp
        );

        // A forever worker never gives up, and a success starts the backoff over.
        let mut p = pacer(Mode::Forever);
        for _ in 0..20 {
            assert!(matches!(
                p.after_claim(Claimed::Failed { transient: false }),
                After::RetryIn(_)
            ));
        }
        p.after_claim(Claimed::Rows { got: 1, asked: 1 });
        assert_eq!(
            p.after_claim(Claimed::Failed { transient: true }),
            After::RetryIn(Duration::from_millis(100))
        );
    }

    const SETTINGS: Slots = Slots {
        concurrency: 10,
        batch_size: 10,
        held: Some(Duration::from_micros(300)),
    };

    fn full(p: &mut Pacer) {
        p.after_claim(Claimed::Rows { got: 10, asked: 10 });
    }

    #[test]
    fn a_deep_queue_of_short_jobs_waits_a_moment_for_a_whole_batch() {
        let mut p = pacer(Mode::Drain);
        full(&mut p);
        assert_eq!(
            p.fill(SETTINGS),
            Fill {
                want: 10,
                wait: DEEP_FILL_WAIT
            }
        );
    }

    #[test]
    fn long_jobs_claim_half_a_batch_as_slots_free() {
        let mut p = pacer(Mode::Forever);
        full(&mut p);
        let long = Slots {
            held: Some(SHORT_JOB),
            ..SETTINGS
        };
        assert_eq!(
            p.fill(long),
            Fill {
                want: 5,
                wait: FILL_WAIT
            }
        );
    }

    #[test]
    fn a_short_claim_ends_the_wait_for_a_whole_batch() {
        let mut p = pacer(Mode::Forever);
        full(&mut p);
        p.after_claim(Claimed::Rows { got: 4, asked: 10 });
        assert_eq!(p.fill(SETTINGS).want, 5);
        full(&mut p);
        p.after_claim(Claimed::Nothing {
            idle: false,
            ended_meanwhile: false,
        });
        assert_eq!(p.fill(SETTINGS).want, 5);
        full(&mut p);
        p.after_claim(Claimed::Failed { transient: true });
        assert_eq!(p.fill(SETTINGS).want, 5);
    }

    #[test]
    fn before_any_job_has_ended_a_claim_takes_half_a_batch() {
        let mut p = pacer(Mode::Drain);
        full(&mut p);
        let unknown = Slots {
            held: None,
            ..SETTINGS
        };
        assert_eq!(p.fill(unknown).want, 5);
        // A fresh worker has claimed nothing yet.
        assert_eq!(pacer(Mode::Drain).fill(SETTINGS).want, 5);
    }

    #[test]
    fn a_claim_never_waits_for_more_than_the_batch_or_the_slots() {
        let mut p = pacer(Mode::Drain);
        full(&mut p);
        let small_batch = Slots {
            batch_size: 4,
            ..SETTINGS
        };
        assert_eq!(p.fill(small_batch).want, 4);
        let few_slots = Slots {
            concurrency: 3,
            batch_size: 100,
            ..SETTINGS
        };
        assert_eq!(p.fill(few_slots).want, 3);
        let one = Slots {
            concurrency: 1,
            batch_size: 1,
            ..SETTINGS
        };
        assert_eq!(p.fill(one).want, 1);
    }

    #[test]
    fn a_probing_worker_waits_for_no_slot() {
        let mut p = pacer(Mode::Drain);
        full(&mut p);
        p.after_claim(Claimed::Rows { got: 2, asked: 10 });
        assert!(p.probing());
        assert_eq!(
            p.fill(SETTINGS),
            Fill {
                want: 1,
                wait: Duration::ZERO
            }
        );
    }

    #[test]
    fn idle_waits_double_and_start_over_after_work() {
        let mut p = pacer(Mode::Forever);
        let waits: Vec<u128> = (0..8)
            .map(|_| p.idle_wait().next_delay().as_millis())
            .collect();
        assert_eq!(waits, [20, 40, 80, 160, 320, 640, 1280, 2000]);
        p.after_claim(Claimed::Rows { got: 1, asked: 5 });
        assert_eq!(p.idle_wait().next_delay(), Duration::from_millis(20));
    }
}
