//! The model's instance (constants read from jobq, sizes, variants) and its state.

use std::time::Duration;

use jobq::testing::{KILL_GRACE, MARGIN};
use jobq::{ReaperConfig, WorkerConfig};

/// A point in time, in ticks of the database clock (1 tick = 1 s).
pub(crate) type Tick = u8;

/// Seconds as ticks. Only whole seconds scale exactly; a constant that stops being one must be
/// looked at (and the scale maybe changed) rather than silently rounded in the model's favour.
pub(crate) fn ticks(d: Duration) -> Tick {
    assert_eq!(d.subsec_nanos(), 0, "{d:?} is not a whole number of ticks");
    Tick::try_from(d.as_secs()).expect("a constant too large for the model's clock")
}

/// The protocol's timing, each taken from the code so that changing a constant re-checks the rules.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// The worker's fence bound (`WorkerConfig::DEFAULT_FENCE_AFTER`).
    pub(crate) bound: Tick,
    /// What a reaper adds to a claimant's bound (`jobq::testing::MARGIN`).
    pub(crate) margin: Tick,
    /// How long a fenced copy may go on before it is forced (`jobq::testing::KILL_GRACE`).
    pub(crate) kill_grace: Tick,
    /// How often a worker writes its heartbeat (`WorkerConfig::DEFAULT_HEARTBEAT`).
    pub(crate) heartbeat: Tick,
    /// How often the reaper makes a pass (`ReaperConfig::DEFAULT_INTERVAL`).
    pub(crate) reaper_interval: Tick,
    /// The reaper's configured lease: the shortest its config accepts (three heartbeats), so that the
    /// lease rule is reached within the horizon; `lease_for` raises it to at least bound + margin.
    pub(crate) lease: Tick,
}

impl Timing {
    /// The defaults of the code.
    pub(crate) fn from_code() -> Self {
        let heartbeat = ticks(WorkerConfig::DEFAULT_HEARTBEAT);
        Self {
            bound: ticks(WorkerConfig::DEFAULT_FENCE_AFTER),
            margin: ticks(MARGIN),
            kill_grace: ticks(KILL_GRACE),
            heartbeat,
            reaper_interval: ticks(ReaperConfig::DEFAULT_INTERVAL),
            lease: 3 * heartbeat,
        }
    }

    /// The lease a claimant is judged by (`liveness::lease_for`): never shorter than three of its
    /// heartbeats or its bound plus the margin.
    pub(crate) fn lease_for(&self) -> Tick {
        self.lease
            .max(3 * self.heartbeat)
            .max(self.bound + self.margin)
    }
}

/// The instance checked: its sizes, and the faults and rule changes it allows.
#[derive(Debug, Clone)]
pub(crate) struct Instance {
    pub(crate) timing: Timing,
    pub(crate) workers: usize,
    pub(crate) jobs: usize,
    pub(crate) max_attempts: u8,
    /// Faults may happen only before this tick; after it the system must settle.
    pub(crate) faults_until: Tick,
    /// How many faults one run may have.
    pub(crate) fault_budget: u8,
    /// How far (in ticks) a worker's measure of time since its last confirmation may lag behind or
    /// run ahead of the database clock's.
    pub(crate) drift: i8,
    /// The reaper runs on the workers' host and sees their pids (a dead process is gone at once).
    pub(crate) same_host: bool,
    /// The fence stops a worker's copies once its bound has passed (off: broken variant (b)).
    pub(crate) fence: bool,
    /// The reaper resets a claimant in the same step as it judges it. Off, a reset may come later in
    /// the tick than the judgement it acts on, as in the code (`find_dead`, then `reset_claim`).
    pub(crate) atomic_reap: bool,
}

impl Instance {
    /// From this tick on the system must settle: networks come back, stalls end, handlers end,
    /// and whatever can be claimed or finished is. Late enough that a fault begun before
    /// `faults_until` can outlast the fence, the margin and a reaper pass.
    pub(crate) fn settle_at(&self) -> Tick {
        let t = &self.timing;
        self.faults_until
            + t.lease_for()
            + t.kill_grace
            + t.reaper_interval
            + self.drift as Tick
            + 1
    }

    /// The last tick: long enough after `settle_at` for a job to be claimed again and finished.
    pub(crate) fn horizon(&self) -> Tick {
        self.settle_at() + self.timing.reaper_interval + 1
    }
}

/// A job row, as the database holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Row {
    Queued,
    /// `claim` is the claimant's token: one per worker process, kept across reconnects.
    Running {
        claim: usize,
    },
    Done,
    Dead,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Job {
    pub(crate) row: Row,
    pub(crate) attempts: u8,
    /// Ghost: the claimant and attempt of the latest claim (never cleared), for property (2).
    pub(crate) latest: Option<(usize, u8)>,
    /// Ghost: a reaper has reset the row at least once.
    pub(crate) reset: bool,
}

/// What a copy of a job is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Its handler runs.
    Running,
    /// The fence told it to stop; it is forced at this tick at the latest.
    Stopping { forced_at: Tick },
    /// Its handler ended; the worker still has to record the outcome.
    Ended(Outcome),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Outcome {
    Succeeded,
    /// Stopped by the fence: the attempt counts, and the job is queued again or dead.
    Interrupted,
}

/// One copy of a job a worker runs or ran, keyed by (job, attempt).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Copy {
    pub(crate) job: usize,
    pub(crate) attempt: u8,
    pub(crate) phase: Phase,
}

impl Copy {
    /// Whether its handler still executes (a forced or ended copy does not).
    pub(crate) fn executes(&self) -> bool {
        matches!(self.phase, Phase::Running | Phase::Stopping { .. })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Worker {
    pub(crate) alive: bool,
    /// Its statements reach the database.
    pub(crate) network: bool,
    /// Its anchor session exists on the server (the lock is held).
    pub(crate) session: bool,
    /// Its runtime is stalled: no heartbeat, claim or finish (the watchdog thread still runs).
    pub(crate) stalled: bool,
    /// `heartbeat_at` of its registry row (database clock).
    pub(crate) heartbeat_at: Tick,
    /// Send tick of its last confirmed heartbeat, which is never later than the write it confirms.
    pub(crate) confirmed: Tick,
    /// How far its measure of time since `confirmed` lags (positive: its clock ran slow).
    pub(crate) lag: i8,
    /// The fence has tripped and no confirmation came since.
    pub(crate) tripped: bool,
    /// Sorted, so that equal situations are equal states.
    pub(crate) copies: Vec<Copy>,
}

impl Worker {
    pub(crate) fn initial() -> Self {
        Self {
            alive: true,
            network: true,
            session: true,
            stalled: false,
            heartbeat_at: 0,
            confirmed: 0,
            lag: 0,
            tripped: false,
            copies: Vec::new(),
        }
    }

    /// Time since its last confirmation, as its own clock measures it.
    pub(crate) fn since_confirmed(&self, now: Tick) -> i16 {
        i16::from(now - self.confirmed) - i16::from(self.lag)
    }

    /// Whether its runtime can send a statement now.
    pub(crate) fn reaches_database(&self) -> bool {
        self.alive && self.network && !self.stalled
    }
}

/// The reaper between judging and resetting.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Reaper {
    /// The tick of its last pass.
    pub(crate) last_pass: Option<Tick>,
    /// Claimants judged gone this pass and not reset yet.
    pub(crate) judged: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct State {
    pub(crate) now: Tick,
    pub(crate) jobs: Vec<Job>,
    pub(crate) workers: Vec<Worker>,
    pub reaper: Reaper,
    pub(crate) faults_left: u8,
    /// Ghost: a finish was accepted from a copy that is not the job's latest claim.
    pub(crate) stale_finish_accepted: bool,
    /// Ghost: a finish was refused by the fence (for the non-vacuity check).
    pub(crate) stale_finish_refused: bool,
    /// Ghost: a live worker that kept its heartbeat within its bound had its rows reset.
    pub(crate) live_worker_reset: bool,
    /// Ghost: a row was reset and claimed again (for the non-vacuity check).
    pub(crate) reset_and_reclaimed: bool,
}

impl State {
    pub(crate) fn initial(inst: &Instance) -> Self {
        Self {
            now: 0,
            jobs: vec![
                Job {
                    row: Row::Queued,
                    attempts: 0,
                    latest: None,
                    reset: false,
                };
                inst.jobs
            ],
            workers: vec![Worker::initial(); inst.workers],
            reaper: Reaper {
                last_pass: None,
                judged: Vec::new(),
            },
            faults_left: inst.fault_budget,
            stale_finish_accepted: false,
            stale_finish_refused: false,
            live_worker_reset: false,
            reset_and_reclaimed: false,
        }
    }

    /// How many copies of `job` execute at this moment, over all workers.
    pub(crate) fn executing(&self, job: usize) -> usize {
        self.workers
            .iter()
            .flat_map(|w| &w.copies)
            .filter(|c| c.job == job && c.executes())
            .count()
    }
}
