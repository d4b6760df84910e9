//! `jobq bench`: which sections run, at what sizes, over which settings.

use clap::Args;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Jobs drained by the library drain (default 100000; 2000 with --quick).
    #[arg(long)]
    pub jobs: Option<u64>,

    /// The CI-sized run: tiny sizes and a reduced grid, to prove the bench works. Figures mean little.
    #[arg(long, conflicts_with = "smoke")]
    pub quick: bool,

    /// The smallest run, for tests: proves every section works end to end in a few seconds. Figures
    /// mean nothing.
    #[arg(long)]
    pub smoke: bool,

    /// Print the report as JSON instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Sections to run (comma-separated): raw,drain,steady,big,idle,footprint,enqueue,web,cluster,backlog,
    /// languages.
    /// Default all (cluster only with --cluster).
    #[arg(long, value_delimiter = ',')]
    pub sections: Vec<String>,

    /// Finished rows kept in the table by the big-table section (default 1000000).
    #[arg(long)]
    pub big_rows: Option<u64>,

    /// Due rows of the backlog section's deep table (default 1000000), spread over 100 queues and 50
    /// kinds.
    #[arg(long)]
    pub backlog_rows: Option<u64>,

    /// Due rows of the small table the backlog section compares the deep one with (default 10000).
    #[arg(long)]
    pub backlog_small_rows: Option<u64>,

    /// The nodes of a Galera cluster (URLs, comma-separated; `scripts/galera.sh urls`): adds the cluster
    /// section, drains with a worker on 1, 2 and 3 of them.
    #[arg(long, value_delimiter = ',', value_name = "URL,URL,URL")]
    pub cluster: Vec<String>,

    /// Jobs per cluster drain (default 50000; 5000 with --quick).
    #[arg(long)]
    pub cluster_jobs: Option<u64>,

    /// Jobs per raw-SQL cell (default 10000; a quarter at 1 row per claim, twice from 100 rows).
    #[arg(long)]
    pub raw_jobs: Option<u64>,

    /// Drain settings to sweep instead of the built-in list, as WORKERS:CONCURRENCY:BATCH
    /// (comma-separated), e.g. `--sweep 1:10:10,2:1000:500`.
    #[arg(long, value_delimiter = ',')]
    pub sweep: Vec<String>,

    /// Connections swept by the raw grid (comma-separated; default 1,2,4,8).
    #[arg(long, value_delimiter = ',')]
    pub raw_workers: Vec<u32>,

    /// Rows per claim swept by the raw grid (comma-separated; default 1,10,100,500,1000).
    #[arg(long, value_delimiter = ',')]
    pub raw_batches: Vec<u32>,

    /// Measure pickup latency at these rates (jobs/s, comma-separated) instead of searching for the
    /// sustainable rate.
    #[arg(long, value_delimiter = ',')]
    pub steady_rates: Vec<f64>,

    /// Worker settings (WORKERS:CONCURRENCY:BATCH) for the steady and big-table sections, instead of
    /// the drain's winner.
    #[arg(long)]
    pub settings: Option<String>,

    /// Keep the scratch database at the end (its name is printed).
    #[arg(long)]
    pub keep_db: bool,
}
