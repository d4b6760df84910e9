//! What a bench run measures and how big: its sections, the worker settings it sweeps, and the presets
//! (`full`, `--quick`, `--smoke`).

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;

use super::raw::FinishMode;

/// The sections of a run, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Section {
    /// The raw-SQL grid.
    Raw,
    /// Library drain throughput and handler costs.
    Drain,
    /// Fixed-rate producer; pickup latency.
    Steady,
    /// A million finished rows in the table.
    Big,
    /// An idle forever worker.
    Idle,
    /// Peak RSS of a worker process.
    Footprint,
    /// Enqueue rates.
    Enqueue,
    /// Dashboard response times with a long history.
    Web,
    /// Drains over a Galera cluster's nodes (only with `--cluster`).
    Cluster,
    /// A deep, wide backlog: claim cost at a million due rows; a high-priority job behind it.
    Backlog,
    /// HTTP and process handlers beside the Rust no-op and a command, at the same settings.
    Languages,
}

impl Section {
    /// Every section, in run order.
    pub const ALL: [Section; 11] = [
        Section::Raw,
        Section::Drain,
        Section::Steady,
        Section::Big,
        Section::Idle,
        Section::Footprint,
        Section::Enqueue,
        Section::Web,
        Section::Cluster,
        Section::Backlog,
        Section::Languages,
    ];

    /// The name used by `--sections`.
    pub fn name(self) -> &'static str {
        match self {
            Section::Raw => "raw",
            Section::Drain => "drain",
            Section::Steady => "steady",
            Section::Big => "big",
            Section::Idle => "idle",
            Section::Footprint => "footprint",
            Section::Enqueue => "enqueue",
            Section::Web => "web",
            Section::Cluster => "cluster",
            Section::Backlog => "backlog",
            Section::Languages => "languages",
        }
    }
}

impl FromStr for Section {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Section::ALL
            .into_iter()
            .find(|x| x.name() == s.trim())
            .ok_or_else(|| {
                format!(
                    "unknown section {s:?}; sections are {}",
                    Section::ALL.map(Section::name).join(",")
                )
            })
    }
}

/// Worker settings tried by the drain sweep: processes-worth of workers (all in one process), concurrency
/// and batch size of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Settings {
    /// Workers (each a [`Worker`](jobq::Worker) with its own pool), all in the bench's process.
    pub workers: u32,
    /// `concurrency` of each worker.
    pub concurrency: u32,
    /// `batch_size` of each worker.
    pub batch_size: u32,
}

impl Settings {
    /// jobq's defaults: one worker, concurrency 10, batch 10.
    pub const DEFAULTS: Settings = Settings {
        workers: 1,
        concurrency: jobq::WorkerConfig::DEFAULT_CONCURRENCY,
        batch_size: jobq::WorkerConfig::DEFAULT_BATCH_SIZE,
    };
}

impl std::fmt::Display for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "W={} c={} b={}",
            self.workers, self.concurrency, self.batch_size
        )
    }
}

impl FromStr for Settings {
    type Err = String;
    /// `W:c:b`, as `--sweep` takes them: workers, concurrency, batch size.
    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.trim().split(':').collect();
        let bad =
            || format!("sweep setting {s:?}: expected WORKERS:CONCURRENCY:BATCH, e.g. 2:1000:500");
        let [w, c, b] = parts.as_slice() else {
            return Err(bad());
        };
        let num = |x: &str| x.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(bad);
        Ok(Settings {
            workers: num(w)?,
            concurrency: num(c)?,
            batch_size: num(b)?,
        })
    }
}

/// What to run and how big. [`BenchConfig::full`] is `jobq bench`; [`BenchConfig::quick`] is the
/// CI-sized run (`--quick`), which only proves that everything works.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// The server, as a URL; its database part is replaced by the scratch database.
    pub url: String,
    /// Sections to run.
    pub sections: Vec<Section>,
    /// Jobs drained by the library with the defaults and with the winning settings (default 100,000).
    pub jobs: u64,
    /// Jobs drained by each raw-SQL cell.
    pub raw_jobs: u64,
    /// Connections swept by the raw grid.
    pub raw_workers: Vec<u32>,
    /// Rows per claim swept by the raw grid.
    pub raw_batches: Vec<u32>,
    /// Finish variants of the raw grid.
    pub raw_finishes: Vec<FinishMode>,
    /// Jobs per sweep point of the library drain (the winner is measured again with `jobs`).
    pub sweep_jobs: u64,
    /// Settings the library drain sweeps.
    pub sweep: Vec<Settings>,
    /// Jobs per handler-cost measurement (no-op, command `true`, SQL `DO 0`).
    pub handler_jobs: u64,
    /// How long each steady-state rate is offered (after a short warm-up).
    pub steady_window: Duration,
    /// First rate tried by the steady-state search, jobs/s; it doubles until p99 passes 100 ms.
    pub steady_start_rate: f64,
    /// Most doublings of the steady-state search.
    pub steady_max_doublings: u32,
    /// Bisection steps between the last sustained rate and the first one that was not.
    pub steady_bisections: u32,
    /// Finished rows kept in the table by the big-table section (default 1,000,000).
    pub big_rows: u64,
    /// Jobs drained on the empty and on the big table.
    pub big_jobs: u64,
    /// How long the idle worker is watched.
    pub idle_window: Duration,
    /// INSERT-to-start samples taken on the idle queue.
    pub idle_samples: u32,
    /// Jobs drained by the worker process whose memory is measured.
    pub footprint_jobs: u64,
    /// Rows inserted one at a time, per enqueue measurement.
    pub enqueue_single: u64,
    /// Rows inserted 1,000 at a time, per enqueue measurement.
    pub enqueue_multi: u64,
    /// Rows in job_queue while the dashboard is timed.
    pub web_rows: u64,
    /// The Galera nodes of the cluster section (`--cluster`); the section is skipped without them.
    pub cluster_urls: Vec<String>,
    /// Jobs per cluster drain.
    pub cluster_jobs: u64,
    /// Due rows of the backlog section's deep table (default 1,000,000).
    pub backlog_rows: u64,
    /// Due rows of the small table it is compared with (default 10,000).
    pub backlog_small_rows: u64,
    /// Claims timed on each of the two tables.
    pub backlog_claims: u32,
    /// Longest wait, after a fill and before a timed drain on a big table, for the server to write out
    /// the pages the fill dirtied and to purge what earlier rounds deleted (see `Ctx::settle`).
    pub settle: Duration,
    /// Timed views of each dashboard page (after a first, untimed-for-the-median one).
    pub web_views: u32,
    /// Rates to measure in the steady-state section instead of searching for the sustainable rate.
    pub steady_rates: Vec<f64>,
    /// Worker settings of the steady-state and big-table sections; by default the drain's winner (or
    /// jobq's defaults when the drain section does not run).
    pub settings_override: Option<Settings>,
    /// Rounds of the head-to-head re-measurement of the limit and the winner (see
    /// [`HeadToHead`]).
    pub rounds: u32,
    /// Keep the scratch database at the end (its name is in the report).
    pub keep_db: bool,
    /// The `jobq` binary run by the footprint section (`std::env::current_exe()` under `jobq bench`).
    /// Without one, the section is skipped.
    pub jobq_exe: Option<PathBuf>,
    /// Print progress lines to stderr.
    pub progress: bool,
    /// True for the CI-sized configuration.
    pub quick: bool,
}

impl BenchConfig {
    /// The full run: 100,000 jobs, the whole raw grid, a million-row history.
    pub fn full(url: impl Into<String>) -> Self {
        let mut sweep = Vec::new();
        for workers in [1, 2, 4] {
            // Concurrency twice the batch lets a worker claim its next batch while the last one's
            // finishes are being recorded.
            for (concurrency, batch_size) in
                [(10, 10), (100, 100), (500, 500), (1000, 500), (2000, 1000)]
            {
                sweep.push(Settings {
                    workers,
                    concurrency,
                    batch_size,
                });
            }
        }
        Self {
            url: url.into(),
            sections: Section::ALL.to_vec(),
            jobs: 100_000,
            raw_jobs: 10_000,
            raw_workers: vec![1, 2, 4, 8],
            raw_batches: vec![1, 10, 100, 500, 1000],
            raw_finishes: FinishMode::ALL.to_vec(),
            sweep_jobs: 20_000,
            sweep,
            handler_jobs: 2_000,
            steady_window: Duration::from_secs(5),
            steady_start_rate: 250.0,
            steady_max_doublings: 8,
            steady_bisections: 2,
            big_rows: 1_000_000,
            big_jobs: 50_000,
            idle_window: Duration::from_secs(30),
            idle_samples: 5,
            footprint_jobs: 20_000,
            enqueue_single: 2_000,
            enqueue_multi: 50_000,
            web_rows: 1_000_000,
            web_views: 20,
            cluster_urls: Vec::new(),
            cluster_jobs: 50_000,
            backlog_rows: 1_000_000,
            backlog_small_rows: 10_000,
            backlog_claims: 500,
            settle: Duration::from_secs(60),
            rounds: 5,
            steady_rates: Vec::new(),
            settings_override: None,
            keep_db: false,
            jobq_exe: None,
            progress: false,
            quick: false,
        }
    }

    /// The CI-sized run: every section at a tiny size and a reduced grid, a few seconds in all. Its
    /// figures mean little; its correctness checks are what it is for.
    pub fn quick(url: impl Into<String>) -> Self {
        Self {
            jobs: 2_000,
            raw_jobs: 1_000,
            raw_workers: vec![1, 4],
            raw_batches: vec![10, 100],
            sweep_jobs: 1_000,
            sweep: vec![
                Settings::DEFAULTS,
                Settings {
                    workers: 2,
                    concurrency: 100,
                    batch_size: 100,
                },
            ],
            handler_jobs: 100,
            steady_window: Duration::from_millis(700),
            steady_start_rate: 200.0,
            steady_max_doublings: 1,
            steady_bisections: 0,
            big_rows: 10_000,
            big_jobs: 1_000,
            idle_window: Duration::from_secs(2),
            idle_samples: 1,
            footprint_jobs: 1_000,
            enqueue_single: 100,
            enqueue_multi: 2_000,
            web_rows: 10_000,
            web_views: 5,
            cluster_urls: Vec::new(),
            cluster_jobs: 5_000,
            backlog_rows: 50_000,
            backlog_small_rows: 5_000,
            backlog_claims: 100,
            rounds: 1,
            quick: true,
            ..Self::full(url)
        }
    }

    /// The smallest run (`--smoke`), for tests: every section end to end in a few seconds, so that its
    /// correctness checks run on every change. Its figures mean nothing.
    pub fn smoke(url: impl Into<String>) -> Self {
        Self {
            jobs: 500,
            raw_jobs: 300,
            sweep_jobs: 300,
            handler_jobs: 50,
            big_rows: 2_000,
            big_jobs: 300,
            footprint_jobs: 300,
            enqueue_single: 50,
            enqueue_multi: 1_000,
            web_rows: 2_000,
            web_views: 2,
            cluster_urls: Vec::new(),
            cluster_jobs: 1_000,
            backlog_rows: 3_000,
            backlog_small_rows: 1_000,
            backlog_claims: 10,
            settle: Duration::from_secs(1),
            idle_window: Duration::from_secs(1),
            steady_window: Duration::from_millis(300),
            steady_max_doublings: 0,
            ..Self::quick(url)
        }
    }

    /// Sets the drain size, and scales the other sizes that follow it.
    pub fn with_jobs(mut self, jobs: u64) -> Self {
        let jobs = jobs.max(100);
        self.jobs = jobs;
        self.raw_jobs = self.raw_jobs.min(jobs);
        self.sweep_jobs = self.sweep_jobs.min(jobs);
        self.big_jobs = self.big_jobs.min(jobs);
        self.footprint_jobs = self.footprint_jobs.min(jobs);
        self.enqueue_multi = self.enqueue_multi.min(jobs.max(1_000));
        self
    }

    pub(super) fn runs(&self, s: Section) -> bool {
        self.sections.contains(&s)
    }
}
