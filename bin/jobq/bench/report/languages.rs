//! The languages section's figures (the section itself is `bench/languages.rs`): kept with the other
//! reports so that the report does not import the section that fills it.

use serde::Serialize;

use crate::bench::Settings;

/// One handler's figures.
#[derive(Debug, Clone, Serialize)]
pub struct LanguageRow {
    /// What ran the jobs.
    pub handler: String,
    /// Jobs drained.
    pub jobs: u64,
    /// Drain throughput.
    pub jobs_per_sec: f64,
    /// Jobs measured at the latency rate (`LATENCY_RATE` in the section).
    pub latency_jobs: u64,
    /// run_at → finished_at, median.
    pub p50_ms: f64,
    /// run_at → finished_at, 99th percentile.
    pub p99_ms: f64,
}

/// The section's results.
#[derive(Debug, Clone, Serialize)]
pub struct LanguagesReport {
    /// Worker settings for every handler (a process handler runs as many copies as the concurrency).
    pub settings: Settings,
    /// The Python interpreter, or why the Python rows are missing.
    pub python: Result<String, String>,
    /// Rust no-op, HTTP, process (Python), command (the same Python program).
    pub rows: Vec<LanguageRow>,
}

impl LanguagesReport {
    /// The row of `handler`, when it ran.
    pub fn row(&self, handler: &str) -> Option<&LanguageRow> {
        self.rows.iter().find(|r| r.handler == handler)
    }
}

/// Row names, also used by the targets.
pub const RUST: &str = "no-op Rust fn";
pub const HTTP: &str = "HTTP, keep-alive no-op server";
pub const PROCESS: &str = "process, no-op Python worker";
pub const COMMAND: &str = "command, the same Python program";
