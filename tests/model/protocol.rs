//! The claim protocol's steps and the properties checked over them.

use stateright::{Model, Property};

use crate::state::{Copy, Instance, Outcome, Phase, Row, State, Tick, Worker};

/// One step of one actor. Everything but `Tick` happens at the current tick, in any order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Action {
    /// The database clock advances; refused while something due at this tick has not happened.
    Tick,
    /// The worker writes `heartbeat_at = NOW()` and confirms it; a lost session is rebuilt first.
    Heartbeat {
        worker: usize,
    },
    /// The claim: token stamped, `attempts + 1`, state running; the worker starts a copy.
    Claim {
        worker: usize,
        job: usize,
    },
    HandlerEnds {
        worker: usize,
        job: usize,
        attempt: u8,
    },
    /// The fenced finish: it changes the row only while the row carries the worker's token and the
    /// copy's attempt.
    Finish {
        worker: usize,
        job: usize,
        attempt: u8,
    },
    /// The watchdog saw the bound pass: every running copy is told to stop.
    FenceTrips {
        worker: usize,
    },
    /// A fenced copy stops (by itself, or forced at the end of its grace).
    CopyStops {
        worker: usize,
        job: usize,
        attempt: u8,
    },
    /// Reconciling: a row stamped with the worker's token that it does not run goes back to the queue.
    HandBack {
        worker: usize,
        job: usize,
    },
    /// The reaper's pass reads the facts and judges every claimant of a running row.
    ReaperJudges,
    /// The reaper resets the running rows of a claimant it judged gone.
    ReaperResets {
        claimant: usize,
    },
    ClockDrifts {
        worker: usize,
        slower: bool,
    },
    RestoreNetwork {
        worker: usize,
    },
    Resume {
        worker: usize,
    },
    Fault(Fault),
}

/// What can go wrong, each within the run's fault budget and before `faults_until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Fault {
    /// Its statements stop reaching the database, for as long as the run likes.
    CutNetwork { worker: usize },
    /// The server ends its anchor session (`KILL`, `wait_timeout`, a proxy restart); it lives on.
    DropSession { worker: usize },
    /// SIGKILL: its copies stop at once (handlers die with their worker), its session ends.
    Kill { worker: usize },
    /// Its runtime takes no steps for a while; the watchdog thread still runs.
    Stall { worker: usize },
    /// The heartbeat is written but its reply never arrives: the database saw it, the worker did not.
    HeartbeatReplyLost { worker: usize },
    /// The claim committed but its reply never arrived: the row is stamped, no copy runs.
    ClaimReplyLost { worker: usize, job: usize },
    /// A Galera commit (a claim or a finish) fails certification: nothing changes, it is retried.
    CertificationFails { worker: usize },
}

/// The model: an instance and its rules.
#[derive(Debug, Clone)]
pub(crate) struct Protocol(pub Instance);

impl Protocol {
    fn calm(&self, s: &State) -> bool {
        s.now >= self.0.faults_until
    }

    fn settling(&self, s: &State) -> bool {
        s.now >= self.0.settle_at()
    }

    fn heartbeat_due(&self, s: &State, w: &Worker) -> bool {
        w.reaches_database() && (!w.session || s.now - w.heartbeat_at >= self.0.timing.heartbeat)
    }

    /// `Fence::may_claim`: confirmed, not fenced, and at least half the bound left.
    fn may_claim(&self, s: &State, w: &Worker) -> bool {
        w.reaches_database()
            && !w.tripped
            && 2 * w.since_confirmed(s.now) < i16::from(self.0.timing.bound)
    }

    fn fence_due(&self, s: &State, w: &Worker) -> bool {
        self.0.fence
            && w.alive
            && !w.tripped
            && w.since_confirmed(s.now) >= i16::from(self.0.timing.bound)
    }

    fn reaper_due(&self, s: &State) -> bool {
        s.now.is_multiple_of(self.0.timing.reaper_interval) && s.reaper.last_pass != Some(s.now)
    }

    /// `liveness::judge` over what the model's reaper can see of claimant `c`.
    fn gone(&self, s: &State, c: usize) -> bool {
        let w = &s.workers[c];
        if self.0.same_host && !w.alive {
            return true;
        }
        let t = &self.0.timing;
        let age = s.now - w.heartbeat_at;
        if age > t.lease_for() {
            return true;
        }
        !w.session && age > t.bound + t.margin
    }

    fn orphans(&self, s: &State, wi: usize) -> impl Iterator<Item = usize> {
        let w = &s.workers[wi];
        s.jobs
            .iter()
            .enumerate()
            .filter(move |(j, job)| {
                job.row == Row::Running { claim: wi }
                    && !w
                        .copies
                        .iter()
                        .any(|c| c.job == *j && c.attempt == job.attempts)
            })
            .map(|(j, _)| j)
            .collect::<Vec<_>>()
            .into_iter()
    }

    /// The steps of worker `wi`, faults aside.
    fn worker_steps(&self, s: &State, wi: usize, out: &mut Vec<Action>) {
        let w = &s.workers[wi];
        if !w.alive {
            return;
        }
        let worker = wi;
        if self.heartbeat_due(s, w) {
            out.push(Action::Heartbeat { worker });
        }
        if self.may_claim(s, w) {
            for (job, j) in s.jobs.iter().enumerate() {
                if j.row == Row::Queued {
                    out.push(Action::Claim { worker, job });
                }
            }
        }
        for c in &w.copies {
            let (job, attempt) = (c.job, c.attempt);
            match c.phase {
                Phase::Running => out.push(Action::HandlerEnds {
                    worker,
                    job,
                    attempt,
                }),
                Phase::Stopping { .. } => out.push(Action::CopyStops {
                    worker,
                    job,
                    attempt,
                }),
                Phase::Ended(_) if w.reaches_database() => out.push(Action::Finish {
                    worker,
                    job,
                    attempt,
                }),
                Phase::Ended(_) => {}
            }
        }
        if self.fence_due(s, w) {
            out.push(Action::FenceTrips { worker });
        }
        if w.reaches_database() {
            out.extend(
                self.orphans(s, wi)
                    .map(|job| Action::HandBack { worker, job }),
            );
        }
        if !w.tripped {
            for slower in [true, false] {
                let lag = w.lag + if slower { 1 } else { -1 };
                if lag.abs() <= self.0.drift {
                    out.push(Action::ClockDrifts { worker, slower });
                }
            }
        }
        if !w.network {
            out.push(Action::RestoreNetwork { worker });
        }
        if w.stalled {
            out.push(Action::Resume { worker });
        }
    }

    fn faults(&self, s: &State, wi: usize, out: &mut Vec<Fault>) {
        let w = &s.workers[wi];
        if !w.alive || self.calm(s) || s.faults_left == 0 {
            return;
        }
        let worker = wi;
        if w.network {
            out.push(Fault::CutNetwork { worker });
        }
        if w.session {
            out.push(Fault::DropSession { worker });
        }
        if s.workers.iter().filter(|o| o.alive).count() > 1 {
            out.push(Fault::Kill { worker });
        }
        if !w.stalled {
            out.push(Fault::Stall { worker });
        }
        if self.heartbeat_due(s, w) && w.session {
            out.push(Fault::HeartbeatReplyLost { worker });
        }
        let claims = self.may_claim(s, w) && s.jobs.iter().any(|j| j.row == Row::Queued);
        if self.may_claim(s, w) {
            for (job, j) in s.jobs.iter().enumerate() {
                if j.row == Row::Queued {
                    out.push(Fault::ClaimReplyLost { worker, job });
                }
            }
        }
        let finishes =
            w.reaches_database() && w.copies.iter().any(|c| matches!(c.phase, Phase::Ended(_)));
        if claims || finishes {
            out.push(Fault::CertificationFails { worker });
        }
    }

    /// Whether something due at this tick has not happened yet: time may not pass over it.
    fn must_act(&self, s: &State) -> bool {
        if self.reaper_due(s) || !s.reaper.judged.is_empty() {
            return true;
        }
        let settling = self.settling(s);
        s.workers.iter().enumerate().any(|(wi, w)| {
            let forced = w
                .copies
                .iter()
                .any(|c| matches!(c.phase, Phase::Stopping { forced_at } if forced_at <= s.now));
            let settling = settling
                && w.alive
                && (!w.network
                    || w.stalled
                    || w.copies.iter().any(|c| c.phase == Phase::Running)
                    || (w.reaches_database() && !w.copies.is_empty())
                    || (w.reaches_database() && self.orphans(s, wi).next().is_some())
                    || (self.may_claim(s, w) && s.jobs.iter().any(|j| j.row == Row::Queued)));
            forced || settling || self.fence_due(s, w) || self.heartbeat_due(s, w)
        })
    }

    fn reset(&self, s: &mut State, claimant: usize) {
        let w = &s.workers[claimant];
        if w.alive && s.now - w.heartbeat_at <= self.0.timing.bound {
            s.live_worker_reset = true;
        }
        let max = self.0.max_attempts;
        for job in s
            .jobs
            .iter_mut()
            .filter(|j| j.row == Row::Running { claim: claimant })
        {
            job.row = if job.attempts >= max {
                Row::Dead
            } else {
                Row::Queued
            };
            job.reset = true;
        }
    }

    fn claim(&self, s: &mut State, worker: usize, job: usize) {
        let j = &mut s.jobs[job];
        j.row = Row::Running { claim: worker };
        j.attempts += 1;
        j.latest = Some((worker, j.attempts));
        if j.reset {
            s.reset_and_reclaimed = true;
        }
    }

    fn finish(&self, s: &mut State, worker: usize, job: usize, attempt: u8) {
        let w = &mut s.workers[worker];
        let at = w
            .copies
            .iter()
            .position(|c| (c.job, c.attempt) == (job, attempt))
            .expect("a copy");
        let Phase::Ended(outcome) = w.copies.remove(at).phase else {
            unreachable!("only an ended copy finishes")
        };
        let j = &mut s.jobs[job];
        if j.row != (Row::Running { claim: worker }) || j.attempts != attempt {
            s.stale_finish_refused = true;
            return;
        }
        if j.latest != Some((worker, attempt)) {
            s.stale_finish_accepted = true;
        }
        j.row = match outcome {
            Outcome::Succeeded => Row::Done,
            Outcome::Interrupted if j.attempts >= self.0.max_attempts => Row::Dead,
            Outcome::Interrupted => Row::Queued,
        };
    }

    fn set_phase(w: &mut Worker, job: usize, attempt: u8, phase: Phase) {
        let c = w
            .copies
            .iter_mut()
            .find(|c| (c.job, c.attempt) == (job, attempt))
            .expect("a copy");
        c.phase = phase;
        w.copies.sort();
    }

    fn fault(&self, s: &mut State, f: Fault) {
        s.faults_left -= 1;
        let now = s.now;
        match f {
            Fault::CutNetwork { worker } => s.workers[worker].network = false,
            Fault::DropSession { worker } => s.workers[worker].session = false,
            Fault::Kill { worker } => {
                let heartbeat_at = s.workers[worker].heartbeat_at;
                // Only what the reaper can still see of it matters: the rest is normalised away.
                s.workers[worker] = Worker {
                    alive: false,
                    session: false,
                    heartbeat_at,
                    ..Worker::initial()
                };
            }
            Fault::Stall { worker } => s.workers[worker].stalled = true,
            Fault::HeartbeatReplyLost { worker } => s.workers[worker].heartbeat_at = now,
            Fault::ClaimReplyLost { worker, job } => self.claim(s, worker, job),
            Fault::CertificationFails { .. } => {}
        }
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State::initial(&self.0)]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        if s.now >= self.0.horizon() {
            return;
        }
        if !self.must_act(s) {
            out.push(Action::Tick);
        }
        if self.reaper_due(s) {
            out.push(Action::ReaperJudges);
        }
        out.extend(
            s.reaper
                .judged
                .iter()
                .map(|&claimant| Action::ReaperResets { claimant }),
        );
        let mut faults = Vec::new();
        for wi in 0..s.workers.len() {
            self.worker_steps(s, wi, out);
            self.faults(s, wi, &mut faults);
        }
        out.extend(faults.into_iter().map(Action::Fault));
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let now = s.now;
        match action {
            Action::Tick => s.now += 1,
            Action::Heartbeat { worker } => {
                let w = &mut s.workers[worker];
                w.session = true;
                w.heartbeat_at = now;
                w.confirmed = now;
                w.lag = 0;
                w.tripped = false;
            }
            Action::Claim { worker, job } => {
                self.claim(&mut s, worker, job);
                let attempt = s.jobs[job].attempts;
                let w = &mut s.workers[worker];
                w.copies.push(Copy {
                    job,
                    attempt,
                    phase: Phase::Running,
                });
                w.copies.sort();
            }
            Action::HandlerEnds {
                worker,
                job,
                attempt,
            } => Self::set_phase(
                &mut s.workers[worker],
                job,
                attempt,
                Phase::Ended(Outcome::Succeeded),
            ),
            Action::CopyStops {
                worker,
                job,
                attempt,
            } => Self::set_phase(
                &mut s.workers[worker],
                job,
                attempt,
                Phase::Ended(Outcome::Interrupted),
            ),
            Action::Finish {
                worker,
                job,
                attempt,
            } => self.finish(&mut s, worker, job, attempt),
            Action::FenceTrips { worker } => {
                let w = &mut s.workers[worker];
                w.tripped = true;
                let forced_at: Tick = now + self.0.timing.kill_grace;
                for c in w.copies.iter_mut().filter(|c| c.phase == Phase::Running) {
                    c.phase = Phase::Stopping { forced_at };
                }
                w.copies.sort();
            }
            Action::HandBack { job, .. } => s.jobs[job].row = Row::Queued,
            Action::ReaperJudges => {
                s.reaper.last_pass = Some(now);
                let mut judged: Vec<usize> = (0..s.workers.len())
                    .filter(|&c| s.jobs.iter().any(|j| j.row == Row::Running { claim: c }))
                    .filter(|&c| self.gone(&s, c))
                    .collect();
                if self.0.atomic_reap {
                    for c in judged.drain(..) {
                        self.reset(&mut s, c);
                    }
                }
                s.reaper.judged = judged;
            }
            Action::ReaperResets { claimant } => {
                s.reaper.judged.retain(|&c| c != claimant);
                self.reset(&mut s, claimant);
            }
            Action::ClockDrifts { worker, slower } => {
                s.workers[worker].lag += if slower { 1 } else { -1 }
            }
            Action::RestoreNetwork { worker } => s.workers[worker].network = true,
            Action::Resume { worker } => s.workers[worker].stalled = false,
            Action::Fault(f) => self.fault(&mut s, f),
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        crate::properties::all()
    }
}
