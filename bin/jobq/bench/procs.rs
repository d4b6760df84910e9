//! The drain as a user runs it: W separate `jobq` worker processes (the hidden `__bench-worker`
//! subcommand: a [`jobq::Worker`] in drain mode with the bench's no-op handler, so the figure is jobq's
//! and not a handler's), timed from the first spawn to the last exit, start-up included.
//!
//! In-process workers share one runtime and one allocator and skip process start; separate processes
//! are what `jobq worker` from cron or a supervisor gives. Both run beside the limit in the head-to-head.

use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

use super::workers::KIND;
use super::{BResult, Ctx, Section, Settings};

/// The hidden subcommand each process runs.
pub(crate) const SUBCOMMAND: &str = "__bench-worker";

/// Processes that have not drained by then are killed and the run fails its check.
const LIMIT: Duration = Duration::from_secs(600);

/// Fills the queue with `jobs` no-op jobs and drains them with `s.workers` processes of `s.concurrency`
/// and `s.batch_size`. `None` when there is no jobq binary to start.
pub(crate) async fn drain(ctx: &Ctx, s: Settings, jobs: u64) -> BResult<Option<f64>> {
    let Some(exe) = ctx.cfg.jobq_exe.clone() else {
        return Ok(None);
    };
    ctx.fill(KIND, jobs).await?;
    let t0 = Instant::now();
    let mut children = Vec::new();
    for _ in 0..s.workers {
        let child = super::jobq_child(&exe, &ctx.url)
            .arg(SUBCOMMAND)
            .args(["--concurrency", &s.concurrency.to_string()])
            .args(["--batch-size", &s.batch_size.to_string()])
            .args(["--kind", KIND])
            .spawn()
            .map_err(|e| super::BenchError::Setup(format!("spawning {}: {e}", exe.display())))?;
        children.push(child);
    }
    let mut failures = Vec::new();
    for mut child in children {
        let status = tokio::time::timeout(LIMIT, child.wait()).await;
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut stderr).await;
        }
        match status {
            Ok(Ok(s)) if s.success() => {}
            Ok(Ok(s)) => failures.push(format!("{s}: {}", stderr.trim())),
            Ok(Err(e)) => failures.push(e.to_string()),
            Err(_) => failures.push(format!("did not drain within {LIMIT:?}")),
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    ctx.check(
        Section::Drain,
        format!("{} worker processes exited 0 after draining", s.workers),
        failures.is_empty(),
        failures.join("; "),
    );
    ctx.verify_once(Section::Drain, "worker processes: rows", KIND, jobs, None)
        .await?;
    Ok(Some(jobs as f64 / secs))
}
