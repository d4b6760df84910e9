//! What the library drains measured: the defaults, the sweep and its winner, the head-to-head against
//! the raw loop, handler costs and commands per job at the wire.

use serde::Serialize;

use super::{RawCell, RawReport};
use crate::bench::cpu::CpuUse;
use crate::bench::median::median;
use crate::bench::wire::Commands;
use crate::bench::{FinishMode, Settings};

/// One library drain.
#[derive(Debug, Clone, Serialize)]
pub struct DrainRun {
    /// Worker settings.
    pub settings: Settings,
    /// Jobs drained.
    pub jobs: u64,
    /// Wall time, from starting the workers to the last one returning.
    pub secs: f64,
    /// Throughput.
    pub jobs_per_sec: f64,
    /// Mean rows per claim statement (from distinct `claimed_at`).
    pub rows_per_claim: f64,
    /// Mean rows per finish statement (from distinct `finished_at`).
    pub rows_per_finish: f64,
    /// CPU use.
    pub cpu: CpuUse,
    /// Correctness checks passed.
    pub ok: bool,
}

/// Cost of a handler kind, at jobq's default settings.
#[derive(Debug, Clone, Serialize)]
pub struct HandlerCost {
    /// Which handler.
    pub handler: String,
    /// Jobs drained.
    pub jobs: u64,
    /// Throughput.
    pub jobs_per_sec: f64,
    /// Wall time per job above the no-op handler's, µs.
    pub extra_us_per_job: f64,
    /// The bench process's CPU per job, µs.
    pub client_cpu_us_per_job: f64,
}

/// Commands per job of jobq and of the raw loop at the same settings, counted at the wire.
#[derive(Debug, Clone, Serialize)]
pub struct WireProfile {
    /// Settings of both (W workers/connections, batch B).
    pub settings: Settings,
    /// Jobs drained by each.
    pub jobs: u64,
    /// jobq's mean rows per claim statement.
    pub jobq_rows_per_claim: f64,
    /// jobq's mean rows per finish statement.
    pub jobq_rows_per_finish: f64,
    /// The raw loop's mean rows per claim statement.
    pub raw_rows_per_claim: f64,
    /// The raw loop's mean rows per finish statement.
    pub raw_rows_per_finish: f64,
    /// jobq's commands.
    pub jobq: Commands,
    /// The raw loop's commands.
    pub raw: Commands,
    /// jobq's throughput through the relay.
    pub jobq_jobs_per_sec: f64,
    /// The raw loop's throughput through the relay.
    pub raw_jobs_per_sec: f64,
    /// jobq's CPU use.
    pub jobq_cpu: CpuUse,
    /// The raw loop's CPU use.
    pub raw_cpu: CpuUse,
}

/// The limit and jobq's winner measured again, alternately, at the full drain size. The grid's best
/// cell is the best of many short runs and the winner one run, so comparing those two alone would favour
/// the limit by its luckiest cell; here both get the same number of tries at the same size, and the
/// medians are compared.
#[derive(Debug, Clone, Serialize)]
pub struct HeadToHead {
    /// Jobs per run.
    pub jobs: u64,
    /// The raw cell re-measured: connections.
    pub raw_workers: u32,
    /// The raw cell re-measured: rows per claim.
    pub raw_batch: u32,
    /// The raw cell re-measured: finishes.
    pub raw_finish: FinishMode,
    /// jobq's settings re-measured.
    pub settings: Settings,
    /// The raw loop's jobs/s, one per round.
    pub raw: Vec<f64>,
    /// jobq's jobs/s, one per round.
    pub jobq: Vec<f64>,
    /// The raw loop at jobq's W and B with jobq's finish (carried), one per round: the same runs as
    /// `raw` when the limit is that cell.
    pub raw_same: Vec<f64>,
    /// The lean-schema loop at the raw cell's W and B, one per round.
    pub lean: Vec<f64>,
    /// jobq's settings as separate worker processes, one per round (empty without a jobq binary).
    pub procs: Vec<f64>,
    /// jobq as worker processes at the lean loop's own W and B ([`Self::procs_at_lean_settings`]),
    /// one per round (empty when those are `settings`, or without a jobq binary): the sweep picks its
    /// settings on single short in-process drains, where one process against two, or 500 rows a claim
    /// against 1,000, moved the share by several points between runs; how many processes a user
    /// starts, and how many rows a claim takes, are theirs to choose as the lean cell's are.
    pub procs_at_lean: Vec<f64>,
    /// Every run of every round passed its checks.
    pub ok: bool,
}

impl HeadToHead {
    /// Median of the raw runs.
    pub fn raw_median(&self) -> f64 {
        median(&self.raw)
    }

    /// Median of jobq's runs.
    pub fn jobq_median(&self) -> f64 {
        median(&self.jobq)
    }

    /// jobq's median over the raw loop's.
    pub fn ratio(&self) -> f64 {
        self.jobq_median() / self.raw_median()
    }

    /// jobq's median over the raw loop's at the same W and B (`None` without such runs).
    pub fn same_ratio(&self) -> Option<f64> {
        (!self.raw_same.is_empty()).then(|| self.jobq_median() / median(&self.raw_same))
    }

    /// Median of the raw runs at jobq's W and B.
    pub fn raw_same_median(&self) -> f64 {
        median(&self.raw_same)
    }

    /// Median of the lean-schema runs.
    pub fn lean_median(&self) -> f64 {
        median(&self.lean)
    }

    /// Median of the worker-process runs.
    pub fn procs_median(&self) -> f64 {
        median(&self.procs)
    }

    /// Median of the worker-process runs at the lean loop's W and B.
    pub fn procs_at_lean_median(&self) -> f64 {
        median(&self.procs_at_lean)
    }

    /// The worker processes' settings as run at the lean loop's W and B.
    pub fn procs_at_lean_settings(&self) -> Settings {
        Self::procs_at_lean_settings_for(self.raw_workers, self.raw_batch)
    }

    /// `workers` processes of `batch` rows a claim, running twice that many jobs at once (as the
    /// sweep's larger settings do, so that a worker claims its next batch while the last one's
    /// finishes are recorded).
    pub fn procs_at_lean_settings_for(workers: u32, batch: u32) -> Settings {
        Settings {
            workers,
            concurrency: batch
                .saturating_mul(2)
                .min(jobq::WorkerConfig::MAX_CONCURRENCY),
            batch_size: batch,
        }
    }

    /// The faster of the worker-process medians, at jobq's settings or at the lean loop's W and B, with the
    /// settings it ran with (`None` without process runs).
    pub fn procs_best(&self) -> Option<(Settings, f64)> {
        let at_winner = (!self.procs.is_empty()).then(|| (self.settings, self.procs_median()));
        let at_lean = (!self.procs_at_lean.is_empty())
            .then(|| (self.procs_at_lean_settings(), self.procs_at_lean_median()));
        match (at_winner, at_lean) {
            (Some(a), Some(b)) => Some(if b.1 > a.1 { b } else { a }),
            (a, b) => a.or(b),
        }
    }
}

/// The jobs/s of each run, comma-separated.
pub(crate) fn rates(runs: &[DrainRun]) -> String {
    runs.iter()
        .map(|r| format!("{:.0}", r.jobs_per_sec))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Library drain results.
#[derive(Debug, Clone, Serialize)]
pub struct DrainReport {
    /// jobq's defaults at N.
    pub defaults: DrainRun,
    /// The sweep (at the sweep size).
    pub sweep: Vec<DrainRun>,
    /// The best sweep settings at N.
    pub winner: DrainRun,
    /// Winner / best raw cell of the grid.
    pub vs_best_raw: Option<f64>,
    /// The winner and the best raw cell re-measured alternately at N: the figure the target uses.
    pub head_to_head: Option<HeadToHead>,
    /// Winner / raw cell at the same W and B, with jobq's batched done finish.
    pub vs_raw_same: Option<f64>,
    /// Defaults / raw cell at W=1, B=10, with jobq's batched done finish.
    pub defaults_vs_raw_same: Option<f64>,
    /// Handler costs.
    pub handlers: Vec<HandlerCost>,
    /// Commands per job, at jobq's defaults and at the winning settings.
    pub wire: Vec<WireProfile>,
}

impl DrainReport {
    pub(crate) fn new(
        defaults: DrainRun,
        sweep: Vec<DrainRun>,
        winner: DrainRun,
        handlers: Vec<HandlerCost>,
        wire: Vec<WireProfile>,
        raw: Option<&RawReport>,
        head_to_head: Option<HeadToHead>,
    ) -> Self {
        let ratio = |run: &DrainRun, cell: Option<&RawCell>| {
            cell.map(|c| run.jobs_per_sec / c.jobs_per_sec)
        };
        let s = winner.settings;
        let d = defaults.settings;
        Self {
            vs_best_raw: ratio(&winner, raw.and_then(RawReport::best_any)),
            head_to_head,
            vs_raw_same: ratio(
                &winner,
                raw.and_then(|r| r.at(s.workers, s.batch_size, FinishMode::JOBQ)),
            ),
            defaults_vs_raw_same: ratio(
                &defaults,
                raw.and_then(|r| r.at(d.workers, d.batch_size, FinishMode::JOBQ)),
            ),
            defaults,
            sweep,
            winner,
            handlers,
            wire,
        }
    }
}
