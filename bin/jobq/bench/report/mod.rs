//! The report of one run: typed (serde for `--json`; the library drains' part in drain.rs), its targets
//! with PASS/MISS (targets.rs), and the text `jobq bench` prints (render/).

mod backlog;
mod drain;
mod languages;
mod render;
mod targets;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::cpu::{self, CpuUse};
use super::wire::Commands;
use super::{BenchConfig, FinishMode, Section, Settings};

pub use backlog::{BacklogReport, ClaimCost, UrgentPickup};
pub(crate) use drain::rates;
pub use drain::{DrainReport, DrainRun, HandlerCost, HeadToHead, WireProfile};
pub use languages::{COMMAND, HTTP, LanguageRow, LanguagesReport, PROCESS, RUST};
pub use render::render_text;

/// p99 pickup latency above this, and a rate is not sustained.
pub(crate) const P99_LIMIT_MS: f64 = 100.0;

/// A 1-minute load average above this (at the start of a run), or other processes keeping this many
/// cores busy on average during it, marks the run as taken under load.
pub const LOAD_THRESHOLD: f64 = 1.5;
pub(crate) const OTHER_CORES_THRESHOLD: f64 = 0.5;

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// When the run started.
    pub started_at: DateTime<Utc>,
    /// The scratch database.
    pub database: String,
    /// The CI-sized configuration was used.
    pub quick: bool,
    /// The machine the bench ran on.
    pub host: String,
    /// CPUs available to the bench.
    pub cores: usize,
    /// What the CPU calls itself (`model name` in /proc/cpuinfo): machines of one kind differ, and
    /// rates measured on two of them compare only as shares of a limit measured beside them.
    pub cpu_model: Option<String>,
    /// Server version and settings.
    pub server: ServerInfo,
    /// Load averages and whether the run counts as under load.
    pub load: Load,
    /// Wall time of the whole run.
    pub elapsed_secs: f64,
    /// Raw-SQL grid.
    pub raw: Option<RawReport>,
    /// Library drain.
    pub drain: Option<DrainReport>,
    /// Steady state: at jobq's defaults, then at the drain's winning settings when they differ.
    pub steady: Vec<SteadyReport>,
    /// Big table.
    pub big: Option<BigReport>,
    /// Idle worker.
    pub idle: Option<IdleReport>,
    /// Worker process memory.
    pub footprint: Option<FootprintReport>,
    /// Enqueue rates.
    pub enqueue: Option<EnqueueReport>,
    /// Dashboard response times.
    pub web: Option<WebReport>,
    /// Drains over a Galera cluster's nodes.
    pub cluster: Option<ClusterReport>,
    /// The deep, wide backlog.
    pub backlog: Option<BacklogReport>,
    /// HTTP and process handlers beside the Rust no-op and a command.
    pub languages: Option<LanguagesReport>,
    /// Targets next to the measured values.
    pub targets: Vec<Target>,
    /// Correctness checks; a run is good only if all pass.
    pub checks: Vec<Check>,
}

/// Server version and the settings that matter for throughput.
#[derive(Debug, Clone, Serialize)]
pub struct ServerInfo {
    /// `SELECT VERSION()`.
    pub version: String,
    /// Global variables by name, plus jobq's session isolation.
    pub settings: BTreeMap<String, String>,
}

/// The machine's load.
#[derive(Debug, Clone, Serialize)]
pub struct Load {
    /// 1/5/15-minute load averages when the run started.
    pub start: Option<[f64; 3]>,
    /// … and when it ended (includes the bench's own load).
    pub end: Option<[f64; 3]>,
    /// Cores other processes kept busy, on average, during the drain measurements (the bench's own
    /// process and the database server excluded).
    pub other_cores: Option<f64>,
    /// The figures were taken under load.
    pub under_load: bool,
}

/// One correctness check.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Section it belongs to.
    pub section: Section,
    /// What was checked.
    pub what: String,
    /// It held.
    pub ok: bool,
    /// What was seen.
    pub detail: String,
}

/// A target next to its measured value.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// What is measured.
    pub name: String,
    /// The goal, as text.
    pub goal: String,
    /// The measured value, as text.
    pub measured: String,
    /// The goal is met.
    pub pass: bool,
}

/// One raw-SQL cell.
#[derive(Debug, Clone, Serialize)]
pub struct RawCell {
    /// Connections (one task each).
    pub workers: u32,
    /// Rows per claim.
    pub batch: u32,
    /// Finish variant.
    pub finish: FinishMode,
    /// Jobs drained.
    pub jobs: u64,
    /// Wall time.
    pub secs: f64,
    /// Throughput.
    pub jobs_per_sec: f64,
    /// Mean time of one claim transaction, ms.
    pub claim_ms: f64,
    /// Mean rows per claim statement (from distinct `claimed_at`).
    pub rows_per_claim: f64,
    /// Mean rows per finish statement (from distinct `finished_at`).
    pub rows_per_finish: f64,
    /// CPU use.
    pub cpu: CpuUse,
    /// Correctness checks passed.
    pub ok: bool,
}

/// The raw-SQL grid.
#[derive(Debug, Clone, Serialize)]
pub struct RawReport {
    /// Jobs per cell.
    pub jobs_per_cell: u64,
    /// Every cell.
    pub cells: Vec<RawCell>,
    /// The same loop against the leanest claim-token table ([`crate::bench::lean`]).
    pub lean: Vec<crate::bench::lean::LeanCell>,
    /// The server's time per row of each statement a job meets, on jobq's table and on copies with one
    /// part less or more ([`crate::bench::rowcost`]).
    pub row_costs: Vec<crate::bench::rowcost::RowCost>,
    /// The server's CPU per job of a one-connection drain, by table ([`crate::bench::tablecpu`]).
    pub table_cpu: Vec<crate::bench::tablecpu::TableCpu>,
}

impl RawReport {
    pub(crate) fn new(jobs_per_cell: u64, cells: Vec<RawCell>) -> Self {
        Self {
            jobs_per_cell,
            cells,
            lean: Vec::new(),
            row_costs: Vec::new(),
            table_cpu: Vec::new(),
        }
    }

    /// The best cell of a finish variant.
    pub fn best(&self, finish: FinishMode) -> Option<&RawCell> {
        self.cells
            .iter()
            .filter(|c| c.finish == finish)
            .max_by(|a, b| a.jobs_per_sec.total_cmp(&b.jobs_per_sec))
    }

    /// The best cell of the grid, whatever its finishes: the limit.
    pub fn best_any(&self) -> Option<&RawCell> {
        self.cells
            .iter()
            .max_by(|a, b| a.jobs_per_sec.total_cmp(&b.jobs_per_sec))
    }

    /// The cell at W and B with the given finishes.
    pub fn at(&self, workers: u32, batch: u32, finish: FinishMode) -> Option<&RawCell> {
        self.cells
            .iter()
            .find(|c| c.finish == finish && c.workers == workers && c.batch == batch)
    }
}

/// One offered rate of the steady-state search.
#[derive(Debug, Clone, Serialize)]
pub struct RatePoint {
    /// Offered rate, jobs/s.
    pub rate: f64,
    /// Jobs inserted.
    pub inserted: u64,
    /// Rate the producer achieved.
    pub insert_rate: f64,
    /// Jobs whose latency was counted (after the warm-up).
    pub measured: u64,
    /// Pickup latency quantiles, ms.
    pub p50_ms: f64,
    /// The first part of the pickup, by the server's clock alone: p50 of run_at to the claim's stamp
    /// (its UPDATE's NOW(6)), ms. The rest is the stamp, the COMMIT and the worker starting the job.
    pub due_to_stamp_p50_ms: f64,
    /// p50 of the producer's INSERTs, start to answer, ms (by the bench's clock): the part of the
    /// pickup that passes before the rows are there to see (their `run_at` is the INSERT's start).
    pub insert_p50_ms: f64,
    /// p95, ms.
    pub p95_ms: f64,
    /// p99, ms.
    pub p99_ms: f64,
    /// Max, ms.
    pub max_ms: f64,
    /// Jobs not started 10 s after the producer stopped.
    pub left_over: u64,
    /// p99 ≤ 100 ms, nothing left over, producer kept up.
    pub sustained: bool,
}

/// Steady-state results.
#[derive(Debug, Clone, Serialize)]
pub struct SteadyReport {
    /// Worker settings (forever mode).
    pub settings: Settings,
    /// Highest rate sustained with p99 ≤ 100 ms.
    pub sustainable_rate: Option<f64>,
    /// The search stopped at its last doubling without finding a rate that failed.
    pub search_capped: bool,
    /// Highest rate tried that the workers kept up with (nothing left over, p99 under a second),
    /// whatever its p99: the capacity, as opposed to the latency limit.
    pub kept_up_rate: Option<f64>,
    /// Every rate tried.
    pub points: Vec<RatePoint>,
    /// At half the sustainable rate.
    pub at_half: Option<RatePoint>,
    /// The rates were given (`--steady-rates`), not searched: no sustainable rate, no target.
    pub fixed_rates: bool,
}

/// Big-table results.
#[derive(Debug, Clone, Serialize)]
pub struct BigReport {
    /// Worker settings.
    pub settings: Settings,
    /// Finished rows kept in the table.
    pub history_rows: u64,
    /// Time to load them.
    pub load_secs: f64,
    /// Jobs per drain.
    pub jobs: u64,
    /// Drains on the empty table, one per round.
    pub empty: Vec<DrainRun>,
    /// Drains with the history, one per round.
    pub big: Vec<DrainRun>,
    /// Median of the empty table's drains.
    pub empty_jobs_per_sec: f64,
    /// Median of the drains with the history.
    pub big_jobs_per_sec: f64,
    /// big / empty, of the medians.
    pub ratio: f64,
}

/// Idle-worker results.
#[derive(Debug, Clone, Serialize)]
pub struct IdleReport {
    /// How long the idle worker was watched.
    pub window_secs: f64,
    /// Statements were counted at the wire (through the relay).
    pub counted_at_wire: bool,
    /// Statements per second (COM_QUERY + COM_STMT_EXECUTE) of the idle worker.
    pub statements_per_sec: Option<f64>,
    /// Every command per second, pings and prepares included.
    pub round_trips_per_sec: Option<f64>,
    /// The commands seen.
    pub commands: Option<Commands>,
    /// The server's global Questions per second over the same window (all clients of the server).
    pub server_questions_per_sec: Option<f64>,
    /// The server's global Queries per second (Questions plus statements inside stored programs).
    pub server_queries_per_sec: Option<f64>,
    /// Questions per second before the worker started (other clients).
    pub baseline_questions_per_sec: Option<f64>,
    /// Queries per second before the worker started (other clients).
    pub baseline_queries_per_sec: Option<f64>,
    /// INSERT-to-start times, ms.
    pub start_ms: Vec<f64>,
    /// Their mean.
    pub start_mean_ms: f64,
    /// Their max.
    pub start_max_ms: f64,
}

/// Worker process memory.
#[derive(Debug, Clone, Serialize)]
pub struct FootprintReport {
    /// Jobs drained.
    pub jobs: u64,
    /// Handler used.
    pub handler: String,
    /// Peak RSS (VmHWM), MB (10^6 bytes).
    pub peak_rss_mb: f64,
    /// Wall time of the process.
    pub secs: f64,
    /// Its throughput.
    pub jobs_per_sec: f64,
}

/// Enqueue rates, rows/s.
#[derive(Debug, Clone, Serialize)]
pub struct EnqueueReport {
    /// Rows per single-row measurement.
    pub single_rows: u64,
    /// Rows per multi-row measurement.
    pub multi_rows: u64,
    /// Rounds, each a pass of every way (the rates are medians over them).
    pub rounds: u32,
    /// `jobq::enqueue`, one row per statement.
    pub library_single: f64,
    /// Plain `INSERT … VALUES (?, ?)`.
    pub sql_single: f64,
    /// `jobq::enqueue_many`, 1,000 rows per statement.
    pub library_multi: f64,
    /// Plain 1,000-row INSERT.
    pub sql_multi: f64,
    /// Median over the rounds of `jobq::enqueue`'s rate over plain SQL's in the same round.
    pub single_ratio: f64,
    /// The same for `jobq::enqueue_many` and the plain 1,000-row INSERT.
    pub multi_ratio: f64,
}

/// Drains with one worker on each of 1, 2, 3 nodes of a Galera cluster.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterReport {
    /// One run per layout, settings and node count.
    pub runs: Vec<ClusterRun>,
}

/// How a cluster drain lays its workers out over nodes and queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// One worker per node, all on one queue: claimers on different nodes chase the same head.
    SharedQueue,
    /// One worker per node, each on a queue of its own (the jobs spread evenly): disjoint claim ranges.
    QueuePerNode,
    /// As many workers as nodes, all connected to the first node: one writer node by choice.
    OneWriterNode,
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Layout::SharedQueue => "one queue, a worker per node",
            Layout::QueuePerNode => "a queue per node",
            Layout::OneWriterNode => "all workers on node 1",
        })
    }
}

/// One cluster drain.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterRun {
    /// How the workers were laid out.
    pub layout: Layout,
    /// Each worker's settings.
    pub settings: Settings,
    /// Nodes with a worker.
    pub nodes: u32,
    /// Workers in all.
    pub workers: u32,
    /// Jobs drained.
    pub jobs: u64,
    /// How long it took.
    pub secs: f64,
    /// Throughput.
    pub jobs_per_sec: f64,
    /// Certification failures and brute-force aborts over all nodes during the drain.
    pub conflicts: u64,
    /// `conflicts` per job.
    pub conflicts_per_job: f64,
    /// Every job done.
    pub ok: bool,
}

/// Dashboard response times with a long history.
#[derive(Debug, Clone, Serialize)]
pub struct WebReport {
    /// Rows in job_queue while timed.
    pub rows: u64,
    /// How long loading them took.
    pub load_secs: f64,
    /// Each page timed.
    pub pages: Vec<WebPage>,
}

/// One dashboard page's response times, connect to last byte, ms.
#[derive(Debug, Clone, Serialize)]
pub struct WebPage {
    /// What it is.
    pub name: String,
    /// Its path.
    pub path: String,
    /// The first view (the overview's counts the whole hour for its chart then).
    pub first_ms: f64,
    /// Median of the timed views.
    pub p50_ms: f64,
    /// 95th percentile of the timed views.
    pub p95_ms: f64,
    /// Timed views.
    pub views: u32,
}

impl BenchReport {
    pub(crate) fn new(
        cfg: &BenchConfig,
        database: &str,
        server: ServerInfo,
        load_start: Option<[f64; 3]>,
    ) -> Self {
        Self {
            started_at: Utc::now(),
            database: database.to_string(),
            quick: cfg.quick,
            host: gethostname::gethostname().to_string_lossy().into_owned(),
            cores: cpu::cores(),
            cpu_model: cpu::model(),
            server,
            load: Load {
                start: load_start,
                end: None,
                other_cores: None,
                under_load: false,
            },
            elapsed_secs: 0.0,
            raw: None,
            drain: None,
            steady: Vec::new(),
            big: None,
            idle: None,
            footprint: None,
            enqueue: None,
            web: None,
            cluster: None,
            backlog: None,
            languages: None,
            targets: Vec::new(),
            checks: Vec::new(),
        }
    }

    /// True when every correctness check passed.
    pub fn all_checks_pass(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }
}
