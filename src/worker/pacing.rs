//! When the fetch loop claims, waits for work, backs off or stops: pure decisions over what its last
//! step saw, so each rule has a test of its own. The loop does the I/O and asks the [`Pacer`] what next.
//!
//! The rules, and why:
//! * A claim that came back **short** (fewer rows than free slots) emptied the queue as it stood.
//!   Another locking claim right away would most likely come back empty, and a locking claim is the
//!   dearest statement jobq sends (it walks the claim index, including entries of rows claimed moments
//!   ago that purge has not removed yet: about 2 ms a claim at 8,000 jobs/s in the slow log). So a
//!   forever worker waits for work next (the wait probes at once, without locking), and a draining
//!   one probes before its next claim.
//! * A wait that **saw a due job** followed by a claim that got nothing means another transaction holds
//!   those rows (another worker's claim in flight, or an application's long transaction): the next wait
//!   starts with a sleep, or the worker would spin between the wait and the claim.
//! * A draining worker is **drained** only when a claim found nothing while no job was running and
//!   none ended during the claim: a job that ended meanwhile may have left a retry, or enqueued more,
//!   that the claim did not see. While jobs run, it looks again when one ends.
//! * A failed claim is retried with a backoff; a forever worker rides out any outage, a draining one
//!   (cron) gives up after [`DRAIN_CLAIM_TRIES`] transient failures, since the next cron tick starts a
//!   fresh worker anyway.

use std::time::Duration;

use super::Mode;
use crate::backoff::Backoff;

/// Failed claims in a row (each already retried internally) after which a draining worker gives up:
/// about 3 s of waiting in all.
pub(super) const DRAIN_CLAIM_TRIES: u32 = 5;

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

    /// Whether the claim should skip waiting for more free slots (it is only looking).
    pub(super) fn probing(&self) -> bool {
        self.probing
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
