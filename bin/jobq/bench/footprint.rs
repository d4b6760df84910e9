//! Footprint: the peak resident memory (VmHWM) of a real `jobq worker` process, jobq's defaults, draining
//! jobs with a no-op SQL handler (`DO 0`), read from `/proc/<pid>/status` while it runs.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::process::Child;

use super::{BResult, Ctx, FootprintReport, Section};

const KIND: &str = "bench_sql";

/// A worker that has not drained its jobs by then is stopped and the section fails its check.
const LIMIT: Duration = Duration::from_secs(600);

pub(crate) async fn run(ctx: &Ctx) -> BResult<Option<FootprintReport>> {
    let Some(exe) = ctx.cfg.jobq_exe.clone() else {
        ctx.progress("footprint: skipped (no jobq binary to run)");
        return Ok(None);
    };
    let jobs = ctx.cfg.footprint_jobs;
    ctx.fill(KIND, jobs).await?;
    let config = write_config()?;
    let t0 = Instant::now();
    let mut child = super::jobq_child(&exe, &ctx.url)
        .arg("--config")
        .arg(&config)
        .arg("worker")
        .spawn()
        .map_err(|e| io(&format!("spawning {}", exe.display()), e))?;
    let (status, peak_kib) = watch(ctx, &mut child, t0).await?;
    let secs = t0.elapsed().as_secs_f64();
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr).await;
    }
    let _ = std::fs::remove_file(&config);
    let exited_ok = status.is_some_and(|s| s.success());
    ctx.check(
        Section::Footprint,
        "jobq worker exited 0 after draining",
        exited_ok,
        match status {
            Some(s) => format!("{s}; {}", stderr.trim()),
            None => format!("did not finish within {LIMIT:?}"),
        },
    );
    ctx.verify_once(Section::Footprint, "worker process: rows", KIND, jobs, None)
        .await?;
    ctx.progress(format!(
        "footprint: peak RSS {:.1} MB",
        peak_kib as f64 * 1024.0 / 1e6
    ));
    Ok(Some(FootprintReport {
        jobs,
        handler: "SQL `DO 0`".into(),
        peak_rss_mb: peak_kib as f64 * 1024.0 / 1e6,
        secs,
        jobs_per_sec: jobs as f64 / secs,
    }))
}

fn io(context: &str, e: std::io::Error) -> jobq::Error {
    jobq::Error::Io {
        context: format!("footprint: {context}"),
        source: e,
    }
}

/// Writes the worker's config, a no-op SQL handler for the bench's kind, to a fresh temporary file.
fn write_config() -> BResult<PathBuf> {
    let config = std::env::temp_dir().join(format!(
        "jobq-bench-{}-{:08x}.toml",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::write(&config, format!("[handlers.{KIND}]\nsql = \"DO 0\"\n"))
        .map_err(|e| io("writing the worker's config", e))?;
    Ok(config)
}

/// Samples the child's peak resident set every 10 ms until it exits (its status), or runs past
/// [`LIMIT`] or the bench is stopped (killed; `None`). Returns the status and the peak in KiB.
async fn watch(ctx: &Ctx, child: &mut Child, t0: Instant) -> BResult<(Option<ExitStatus>, u64)> {
    let pid = child.id().unwrap_or(0);
    let mut peak_kib = 0u64;
    loop {
        if let Some(kib) = vm_hwm_kib(pid) {
            peak_kib = peak_kib.max(kib);
        }
        match child
            .try_wait()
            .map_err(|e| io("waiting for the worker", e))?
        {
            Some(s) => return Ok((Some(s), peak_kib)),
            None if t0.elapsed() > LIMIT || ctx.stop.is_cancelled() => {
                let _ = child.kill().await;
                return Ok((None, peak_kib));
            }
            None => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// VmHWM (peak resident set) of a process, in KiB.
fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
