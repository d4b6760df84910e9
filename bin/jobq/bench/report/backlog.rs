//! The backlog section's figures (the section itself is `bench/backlog.rs`): kept with the other
//! reports so that the report does not import the section that fills it.

use serde::Serialize;

use crate::bench::Settings;

/// Claims timed on one table.
#[derive(Debug, Clone, Serialize)]
pub struct ClaimCost {
    /// Due rows in the table.
    pub rows: u64,
    /// Time to insert them.
    pub load_secs: f64,
    /// Claims timed.
    pub claims: u32,
    /// Mean rows per claim.
    pub rows_per_claim: f64,
    /// Mean time of one claim transaction (SELECT … FOR UPDATE SKIP LOCKED per queue until the batch is
    /// full, the stamp, the end of the transaction), ms.
    pub mean_ms: f64,
    /// Median, ms.
    pub p50_ms: f64,
    /// What one claim loop would claim per second at that cost: rows per claim / mean time.
    pub jobs_per_sec: f64,
    /// Index entries the claiming session read per claim (`Handler_read_*` and `Handler_icp_attempts`,
    /// see `index_reads` in the section).
    pub index_reads_per_claim: f64,
    /// Pages the server read from disk per claim (the global `Innodb_buffer_pool_reads`: other
    /// clients' reads count too).
    pub disk_reads_per_claim: f64,
}

/// The high-priority job behind the backlog.
#[derive(Debug, Clone, Serialize)]
pub struct UrgentPickup {
    /// Worker settings.
    pub settings: Settings,
    /// Low-priority due jobs of the served kinds in its queue when it was enqueued.
    pub backlog: u64,
    /// It was picked up within the patience.
    pub picked_up: bool,
    /// Claims stamped after its INSERT committed and before the claim that took it.
    pub claims_passed_by: u64,
    /// Its INSERT (run_at) to its handler's start, ms.
    pub wait_ms: f64,
}

/// The section's results.
#[derive(Debug, Clone, Serialize)]
pub struct BacklogReport {
    /// Queues and kinds in the table; queues and kinds served.
    pub shape: [u32; 4],
    /// Rows per claim asked for.
    pub batch: u32,
    /// The deep table.
    pub deep: ClaimCost,
    /// The small table of the same shape.
    pub small: ClaimCost,
    /// deep / small, of the median claim times (a median, as the machine may be shared).
    pub ratio: f64,
    /// The deep table with the served queues but the last run dry of the served kinds.
    pub deep_drained: ClaimCost,
    /// The small table likewise.
    pub small_drained: ClaimCost,
    /// deep / small, of their median claim times.
    pub drained_ratio: f64,
    /// The high-priority job.
    pub urgent: UrgentPickup,
}
