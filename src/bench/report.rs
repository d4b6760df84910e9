//! The report of one run: typed (serde for `--json`), its targets with PASS/MISS, and a text renderer.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::cpu::{self, CpuUse};
use super::drain::JOBQ_FINISH as JOBQ;
use super::wire::Commands;
use super::{BenchConfig, FinishMode, Section, Settings, steady};

/// A 1-minute load average above this (at the start of a run), or other processes keeping this many
/// cores busy on average during it, marks the run as taken under load.
pub const LOAD_THRESHOLD: f64 = 1.5;
const OTHER_CORES_THRESHOLD: f64 = 0.5;

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
}

impl RawReport {
    pub(crate) fn new(jobs_per_cell: u64, cells: Vec<RawCell>) -> Self {
        Self {
            jobs_per_cell,
            cells,
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
}

fn rates(runs: &[DrainRun]) -> String {
    runs.iter()
        .map(|r| format!("{:.0}", r.jobs_per_sec))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
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
                raw.and_then(|r| r.at(s.workers, s.batch_size, JOBQ)),
            ),
            defaults_vs_raw_same: ratio(
                &defaults,
                raw.and_then(|r| r.at(d.workers, d.batch_size, JOBQ)),
            ),
            defaults,
            sweep,
            winner,
            handlers,
            wire,
        }
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
    /// `jobq::enqueue`, one row per statement.
    pub library_single: f64,
    /// Plain `INSERT … VALUES (?, ?)`.
    pub sql_single: f64,
    /// `jobq::enqueue_many`, 1,000 rows per statement.
    pub library_multi: f64,
    /// Plain 1,000-row INSERT.
    pub sql_multi: f64,
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
            targets: Vec::new(),
            checks: Vec::new(),
        }
    }

    /// True when every correctness check passed.
    pub fn all_checks_pass(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    /// Computes the load verdict and the targets.
    pub(crate) fn finish(&mut self) {
        let mut others: Vec<f64> = Vec::new();
        if let Some(r) = &self.raw {
            others.extend(r.cells.iter().map(|c| c.cpu.other_cores));
        }
        if let Some(d) = &self.drain {
            others.push(d.defaults.cpu.other_cores);
            others.push(d.winner.cpu.other_cores);
            others.extend(d.sweep.iter().map(|r| r.cpu.other_cores));
        }
        let other = (!others.is_empty()).then(|| others.iter().sum::<f64>() / others.len() as f64);
        self.load.other_cores = other;
        self.load.under_load = self.load.start.is_some_and(|l| l[0] > LOAD_THRESHOLD)
            || other.is_some_and(|o| o > OTHER_CORES_THRESHOLD);
        self.targets = self.compute_targets();
    }

    fn compute_targets(&self) -> Vec<Target> {
        let mut t = Vec::new();
        let mut add = |name: &str, goal: &str, measured: String, pass: bool| {
            t.push(Target {
                name: name.into(),
                goal: goal.into(),
                measured,
                pass,
            })
        };
        if let Some(h) = self.drain.as_ref().and_then(|d| d.head_to_head.as_ref()) {
            add(
                "best jobq drain vs best raw-SQL cell",
                ">= 90%",
                format!(
                    "{:.0}% (medians of {} alternating runs of {} jobs: jobq {} {:.0} vs raw W={} B={} {} {:.0} jobs/s)",
                    h.ratio() * 100.0,
                    h.jobq.len(),
                    h.jobs,
                    h.settings,
                    h.jobq_median(),
                    h.raw_workers,
                    h.raw_batch,
                    h.raw_finish.label(),
                    h.raw_median(),
                ),
                h.ratio() >= 0.9,
            );
        }
        if let Some(b) = &self.big {
            add(
                "big table vs empty table",
                ">= 0.85x",
                format!(
                    "{:.2}x ({:.0} vs {:.0} jobs/s, {} finished rows)",
                    b.ratio, b.big_jobs_per_sec, b.empty_jobs_per_sec, b.history_rows
                ),
                b.ratio >= 0.85,
            );
        }
        for s in self.steady.iter().filter(|s| !s.fixed_rates) {
            let at = format!("at half the sustainable rate, {}", s.settings);
            match &s.at_half {
                Some(h) => {
                    add(
                        &format!("pickup latency p50 {at}"),
                        "<= 5 ms",
                        format!("{:.1} ms at {:.0}/s", h.p50_ms, h.rate),
                        h.p50_ms <= 5.0,
                    );
                    add(
                        &format!("pickup latency p99 {at}"),
                        "<= 50 ms",
                        format!("{:.1} ms at {:.0}/s", h.p99_ms, h.rate),
                        h.p99_ms <= 50.0,
                    );
                }
                None => add(
                    &format!("pickup latency {at}"),
                    "p50 <= 5 ms, p99 <= 50 ms",
                    format!("no rate kept p99 <= {} ms", steady::P99_LIMIT_MS),
                    false,
                ),
            }
        }
        if let Some(i) = &self.idle {
            if let Some(sps) = i.statements_per_sec {
                add(
                    "idle worker statements/s",
                    "<= 1/s",
                    format!(
                        "{sps:.2}/s ({:.2}/s with pings)",
                        i.round_trips_per_sec.unwrap_or(sps)
                    ),
                    sps <= 1.0,
                );
            }
            add(
                "INSERT into an idle queue to job start",
                "<= 1 s",
                format!(
                    "max {:.0} ms, mean {:.0} ms ({} samples)",
                    i.start_max_ms,
                    i.start_mean_ms,
                    i.start_ms.len()
                ),
                !i.start_ms.is_empty() && i.start_max_ms <= 1000.0,
            );
        }
        if let Some(f) = &self.footprint {
            add(
                "worker peak RSS while draining",
                "<= 20 MB",
                format!("{:.1} MB", f.peak_rss_mb),
                f.peak_rss_mb <= 20.0,
            );
        }
        if let Some(e) = &self.enqueue {
            let r = e.library_multi / e.sql_multi;
            add(
                "enqueue_many vs plain multi-row SQL",
                ">= 90%",
                format!(
                    "{:.0}% ({:.0} vs {:.0} rows/s)",
                    r * 100.0,
                    e.library_multi,
                    e.sql_multi
                ),
                r >= 0.9,
            );
        }
        t
    }
}

fn load_text(l: Option<[f64; 3]>) -> String {
    l.map_or("?".into(), |l| {
        format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2])
    })
}

fn cpu_text(c: &CpuUse) -> String {
    match c.server_us_per_job {
        Some(s) => format!(
            "{:>6.0} {:>6.0} {:>5.2}",
            c.client_us_per_job, s, c.other_cores
        ),
        None => format!(
            "{:>6.0} {:>6} {:>5.2}",
            c.client_us_per_job, "-", c.other_cores
        ),
    }
}

/// Renders the report as the text `jobq bench` prints.
pub fn render_text(r: &BenchReport) -> String {
    let mut o = String::new();
    let load_mark = if r.load.under_load {
        "  ** UNDER LOAD **"
    } else {
        ""
    };
    let _ = writeln!(
        o,
        "jobq bench {} ({}), {} on {} ({} cores), {}{}",
        env!("CARGO_PKG_VERSION"),
        if r.quick { "quick" } else { "full" },
        r.started_at.format("%Y-%m-%d %H:%M UTC"),
        r.host,
        r.cores,
        format_args!("{:.0} s", r.elapsed_secs),
        load_mark
    );
    let _ = writeln!(
        o,
        "load average at start {}, at end {} (end includes the bench itself){}",
        load_text(r.load.start),
        load_text(r.load.end),
        r.load.other_cores.map_or(String::new(), |c| format!(
            "; other processes used {c:.2} cores during the drains"
        ))
    );
    let _ = writeln!(o, "server {}", r.server.version);
    let settings: Vec<String> = r
        .server
        .settings
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let _ = writeln!(o, "  {}", settings.join(", "));
    let _ = writeln!(
        o,
        "CPU columns: client = this process µs/job, server = database server µs/job, other = cores used by other processes"
    );

    if let Some(raw) = &r.raw {
        let _ = writeln!(
            o,
            "\n1. RAW SQL LIMIT: jobq's claim (SELECT … FOR UPDATE SKIP LOCKED + UPDATE … WHERE id IN + COMMIT) in a \
             hand-written loop, {} jobs per cell ({} at B=1, {} from B=100), W connections, B rows per claim; \
             * = under load, ! = check failed",
            raw.jobs_per_cell,
            super::raw::cell_jobs(raw.jobs_per_cell, 1),
            super::raw::cell_jobs(raw.jobs_per_cell, 100)
        );
        let _ = writeln!(
            o,
            "   finishes: per-job = one fenced UPDATE per job (jobq's `finish`, for a lone job and for failures);\n   \
             batch-tx = jobq's `finish_done_batch` per claim (BEGIN + UPDATE … WHERE claim = ? AND state = 'running' AND (id, attempts) IN (…) + COMMIT, for done jobs);\n   \
             one-update = one UPDATE … WHERE claim = ? AND state = 'running' AND id IN (…) per claim, autocommit, no attempt fence (not in jobq)"
        );
        for finish in [FinishMode::PerJob, FinishMode::BatchTx, FinishMode::Batch] {
            let cells: Vec<&RawCell> = raw.cells.iter().filter(|c| c.finish == finish).collect();
            if cells.is_empty() {
                continue;
            }
            let mut ws: Vec<u32> = cells.iter().map(|c| c.workers).collect();
            ws.sort_unstable();
            ws.dedup();
            let mut bs: Vec<u32> = cells.iter().map(|c| c.batch).collect();
            bs.sort_unstable();
            bs.dedup();
            let _ = write!(o, "   {:<10} jobs/s", finish.label());
            for b in &bs {
                let _ = write!(o, " {:>8}", format!("B={b}"));
            }
            o.push('\n');
            for w in &ws {
                let _ = write!(o, "   {:<17}", format!("W={w}"));
                for b in &bs {
                    let cell = cells.iter().find(|c| c.workers == *w && c.batch == *b);
                    let _ = write!(
                        o,
                        " {:>8}",
                        cell.map_or("-".into(), |c| format!(
                            "{:.0}{}{}",
                            c.jobs_per_sec,
                            if c.cpu.other_cores > OTHER_CORES_THRESHOLD {
                                "*"
                            } else {
                                ""
                            },
                            if c.ok { "" } else { "!" }
                        ))
                    );
                }
                o.push('\n');
            }
            if let Some(b) = raw.best(finish) {
                let _ = writeln!(
                    o,
                    "   best {}: {:.0} jobs/s at W={} B={} (claim {:.2} ms; {:.1} rows/finish; cpu client/server/other {})",
                    finish.label(),
                    b.jobs_per_sec,
                    b.workers,
                    b.batch,
                    b.claim_ms,
                    b.rows_per_finish,
                    cpu_text(&b.cpu)
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join("/")
                );
            }
        }
    }

    if let Some(d) = &r.drain {
        let _ = writeln!(
            o,
            "\n2. DRAIN through the library: no-op Rust handler, W workers in one process (each its own pool)"
        );
        let _ = writeln!(
            o,
            "   {:<22} {:>7} {:>9} {:>7} {:>7}  {:>6} {:>6} {:>5}",
            "settings", "jobs", "jobs/s", "rows/cl", "rows/fi", "client", "server", "other"
        );
        let row = |o: &mut String, label: &str, run: &DrainRun| {
            let _ = writeln!(
                o,
                "   {:<22} {:>7} {:>9.0} {:>7.1} {:>7.1}  {}{}{}",
                label,
                run.jobs,
                run.jobs_per_sec,
                run.rows_per_claim,
                run.rows_per_finish,
                cpu_text(&run.cpu),
                if run.cpu.other_cores > OTHER_CORES_THRESHOLD {
                    " *"
                } else {
                    ""
                },
                if run.ok { "" } else { "  CHECK FAILED" }
            );
        };
        row(
            &mut o,
            &format!("defaults {}", d.defaults.settings),
            &d.defaults,
        );
        for s in &d.sweep {
            row(&mut o, &format!("sweep {}", s.settings), s);
        }
        row(&mut o, &format!("winner {}", d.winner.settings), &d.winner);
        let pct = |x: Option<f64>| x.map_or("n/a".into(), |v| format!("{:.0}%", v * 100.0));
        let _ = writeln!(
            o,
            "   winner vs best raw cell: {}; vs raw batch-tx at same W and B: {}; defaults vs raw batch-tx W=1 B=10: {}",
            pct(d.vs_best_raw),
            pct(d.vs_raw_same),
            pct(d.defaults_vs_raw_same)
        );
        if let Some(h) = &d.head_to_head {
            let runs = |v: &[f64]| {
                v.iter()
                    .map(|x| format!("{x:.0}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let _ = writeln!(
                o,
                "   head to head, {} alternating rounds of {} jobs: raw W={} B={} {} median {:.0} jobs/s ({}); jobq {} median {:.0} ({}): {:.0}%{}",
                h.raw.len(),
                h.jobs,
                h.raw_workers,
                h.raw_batch,
                h.raw_finish.label(),
                h.raw_median(),
                runs(&h.raw),
                h.settings,
                h.jobq_median(),
                runs(&h.jobq),
                h.ratio() * 100.0,
                if h.ok { "" } else { "  CHECK FAILED" }
            );
        }
        let _ = writeln!(
            o,
            "   handler cost at jobq's defaults ({}):",
            Settings::DEFAULTS
        );
        for h in &d.handlers {
            let _ = writeln!(
                o,
                "     {:<16} {:>6} jobs {:>8.0} jobs/s  {:>+8.0} µs/job wall vs no-op  client cpu {:.0} µs/job",
                h.handler, h.jobs, h.jobs_per_sec, h.extra_us_per_job, h.client_cpu_us_per_job
            );
        }
        let _ = writeln!(
            o,
            "   rows/cl, rows/fi = mean rows per claim and per finish statement; * = other processes used > {OTHER_CORES_THRESHOLD} cores (under load)"
        );
        for w in &d.wire {
            let per = |c: &Commands, f: fn(&Commands) -> u64| f(c) as f64 / w.jobs as f64;
            let _ = writeln!(
                o,
                "   commands per job at the wire ({}, {} jobs, through a counting relay; raw = same W and B, batch-tx):",
                w.settings, w.jobs
            );
            for (label, c, rate, cpu, claim, fin) in [
                (
                    "jobq",
                    &w.jobq,
                    w.jobq_jobs_per_sec,
                    &w.jobq_cpu,
                    w.jobq_rows_per_claim,
                    w.jobq_rows_per_finish,
                ),
                (
                    "raw",
                    &w.raw,
                    w.raw_jobs_per_sec,
                    &w.raw_cpu,
                    w.raw_rows_per_claim,
                    w.raw_rows_per_finish,
                ),
            ] {
                let _ = writeln!(
                    o,
                    "     {label:<5} {:.3} round trips = {:.3} statements ({:.3} text, {:.3} prepared) + {:.3} pings + {:.3} prepares + {:.3} other; \
                     {claim:.1} rows/claim, {fin:.1} rows/finish; {:.0} jobs/s; cpu client/server {:.0}/{} µs/job",
                    per(c, Commands::round_trips),
                    per(c, Commands::statements),
                    per(c, |c| c.query),
                    per(c, |c| c.execute),
                    per(c, |c| c.ping),
                    per(c, |c| c.prepare),
                    per(c, |c| c.other),
                    rate,
                    cpu.client_us_per_job,
                    cpu.server_us_per_job
                        .map_or("-".into(), |s| format!("{s:.0}"))
                );
            }
        }
    }

    for s in &r.steady {
        let _ = writeln!(
            o,
            "\n3. STEADY STATE: producer at a fixed rate, forever workers {}; pickup latency = run_at (NOW(6)) to handler start",
            s.settings
        );
        let _ = writeln!(
            o,
            "   {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6}",
            "rate/s", "p50 ms", "p95 ms", "p99 ms", "max ms", "left", "held"
        );
        for p in s.points.iter().chain(s.at_half.iter()) {
            let _ = writeln!(
                o,
                "   {:>8.0} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8} {:>6}",
                p.rate,
                p.p50_ms,
                p.p95_ms,
                p.p99_ms,
                p.max_ms,
                p.left_over,
                if p.sustained { "yes" } else { "no" }
            );
        }
        if s.fixed_rates {
            continue;
        }
        let _ = writeln!(
            o,
            "   sustainable with p99 <= 100 ms: {}{}; last row is half that rate\n   \
             kept up (nothing left over, p99 < 1 s) up to: {}",
            s.sustainable_rate
                .map_or("none".into(), |r| format!("{r:.0} jobs/s")),
            if s.search_capped {
                " (search capped: higher rates not tried)"
            } else {
                ""
            },
            s.kept_up_rate
                .map_or("none".into(), |r| format!("{r:.0} jobs/s"))
        );
    }

    if let Some(b) = &r.big {
        let _ = writeln!(
            o,
            "\n4. BIG TABLE: drain {} of {} jobs, {} alternating rounds; empty table median {:.0} jobs/s ({}), with {} finished rows median {:.0} jobs/s ({}) = {:.2}x (history loaded in {:.1} s)",
            b.settings,
            b.jobs,
            b.empty.len(),
            b.empty_jobs_per_sec,
            rates(&b.empty),
            b.history_rows,
            b.big_jobs_per_sec,
            rates(&b.big),
            b.ratio,
            b.load_secs
        );
    }

    if let Some(i) = &r.idle {
        let _ = writeln!(
            o,
            "\n5. IDLE: one forever worker with jobq's defaults, watched {:.0} s",
            i.window_secs
        );
        match (&i.commands, i.statements_per_sec) {
            (Some(c), Some(sps)) => {
                let _ = writeln!(
                    o,
                    "   {sps:.2} statements/s counted at the wire ({} text + {} prepared statements, {} pings, {} prepares in {:.0} s)",
                    c.query, c.execute, c.ping, c.prepare, i.window_secs
                );
            }
            _ => {
                let _ = writeln!(
                    o,
                    "   (no wire count: the server is reached through a socket)"
                );
            }
        }
        if let Some(q) = i.server_questions_per_sec {
            let f = |v: Option<f64>| v.map_or("?".into(), |v: f64| format!("{v:.2}"));
            let _ = writeln!(
                o,
                "   server-wide counters over the same window (every client of the server): Questions {q:.2}/s, \
                 Queries (which also counts statements inside stored procedures) {}/s;\n   \
                 the same counters before the worker started: Questions {}/s, Queries {}/s",
                f(i.server_queries_per_sec),
                f(i.baseline_questions_per_sec),
                f(i.baseline_queries_per_sec)
            );
        }
        let samples: Vec<String> = i.start_ms.iter().map(|v| format!("{v:.0}")).collect();
        let _ = writeln!(
            o,
            "   INSERT into the idle queue to job start: mean {:.0} ms, max {:.0} ms (samples: {} ms)",
            i.start_mean_ms,
            i.start_max_ms,
            samples.join(", ")
        );
    }

    if let Some(f) = &r.footprint {
        let _ = writeln!(
            o,
            "\n6. FOOTPRINT: `jobq worker` process, defaults, {} handler, {} jobs in {:.1} s ({:.0} jobs/s): peak RSS {:.1} MB",
            f.handler, f.jobs, f.secs, f.jobs_per_sec, f.peak_rss_mb
        );
    }

    if let Some(e) = &r.enqueue {
        let _ = writeln!(o, "\n7. ENQUEUE rows/s, one connection");
        let _ = writeln!(
            o,
            "   one row a statement ({} rows): jobq::enqueue {:.0}, plain SQL {:.0} ({:.0}%)",
            e.single_rows,
            e.library_single,
            e.sql_single,
            e.library_single / e.sql_single * 100.0
        );
        let _ = writeln!(
            o,
            "   1,000 rows a statement ({} rows): jobq::enqueue_many {:.0}, plain SQL {:.0} ({:.0}%)",
            e.multi_rows,
            e.library_multi,
            e.sql_multi,
            e.library_multi / e.sql_multi * 100.0
        );
    }

    let _ = writeln!(
        o,
        "\nTARGETS{}",
        if r.load.under_load {
            " (measured under load)"
        } else {
            ""
        }
    );
    for t in &r.targets {
        let _ = writeln!(
            o,
            "   {:<4} {:<50} {:<10} {}",
            if t.pass { "PASS" } else { "MISS" },
            t.name,
            t.goal,
            t.measured
        );
    }
    let failed: Vec<&Check> = r.checks.iter().filter(|c| !c.ok).collect();
    let _ = writeln!(
        o,
        "\nCORRECTNESS: {} of {} checks passed (every job claimed and finished exactly once){}",
        r.checks.len() - failed.len(),
        r.checks.len(),
        if failed.is_empty() { "" } else { "; FAILED:" }
    );
    for c in failed {
        let _ = writeln!(o, "   {}: {}: {}", c.section.name(), c.what, c.detail);
    }
    o
}
