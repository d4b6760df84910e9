//! Jobs in other languages: what an HTTP handler (posting to a local keep-alive server that does
//! nothing) and a process handler (a no-op Python program speaking the line protocol, started once)
//! cost next to the no-op Rust handler and a command handler that starts the same Python program once
//! per job, all at the same settings in one run, each under forever workers that have run a job already
//! (the handler's start-up is not measured). Each is measured twice: jobs that are all due at once
//! (jobs/s until the last is done), and jobs inserted at a fixed rate that every handler keeps up with,
//! each job's latency from its `run_at` to its `finished_at` (both by the server's clock, so no clock is
//! translated).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use super::drain::{HandlerKind, Work, start_workers};
use super::report::{COMMAND, HTTP, LanguageRow, LanguagesReport, PROCESS, RUST};
use super::{BResult, Ctx, Section, Settings, insert_plain, quantile};
use jobq::Mode;
use jobq::config::HandlerConfig;

const KIND: &str = "bench.lang";

/// The protocol side of the Python program: the reference implementation users copy.
const PY_WORKER: &str = include_str!("../../../clients/python/jobq_worker.py");

/// The no-op program: as a process handler it serves jobs over the protocol; as a command (one run
/// per job, `JOBQ_JOB_ID` set) it loads the same module and exits.
const PY_NOOP: &str = r#"import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jobq_worker
if os.environ.get("JOBQ_JOB_ID"):
    sys.exit(0)
worker = jobq_worker.Worker()
worker.handler("bench.lang")(lambda job: None)
worker.run()
"#;

/// Jobs per second inserted for the latency measurement: well below what the slowest handler (a
/// Python start per job) drains on a 2-core machine, so that latency is a handler's, not a queue's.
const LATENCY_RATE: f64 = 50.0;

pub(crate) async fn run(ctx: &Ctx, s: Settings) -> BResult<LanguagesReport> {
    let server = NoopServer::start().await?;
    let python = python();
    let dir = std::env::temp_dir().join(format!("jobq-bench-lang-{}", std::process::id()));
    let mut handlers: Vec<(&str, HandlerKind)> = vec![
        (RUST, HandlerKind::Noop),
        (
            HTTP,
            configured(HandlerConfig {
                url: Some(server.url.clone()),
                ..Default::default()
            }),
        ),
    ];
    let python = match python {
        Ok(py) => match write_program(&dir) {
            Ok(program) => {
                let argv = vec![py.clone(), program.display().to_string()];
                handlers.push((
                    PROCESS,
                    configured(HandlerConfig {
                        process: Some(argv.clone()),
                        processes: Some(s.concurrency),
                        ..Default::default()
                    }),
                ));
                handlers.push((
                    COMMAND,
                    configured(HandlerConfig {
                        command: Some(argv),
                        ..Default::default()
                    }),
                ));
                Ok(py)
            }
            Err(e) => Err(format!("cannot write the Python program: {e}")),
        },
        Err(e) => Err(e),
    };
    let mut rows = Vec::new();
    for (label, h) in &handlers {
        let row = measure(ctx, s, label, h).await?;
        ctx.progress(format!(
            "handler {label}: {:.0} jobs/s; run_at to done p50 {:.1} ms, p99 {:.1} ms",
            row.jobs_per_sec, row.p50_ms, row.p99_ms
        ));
        rows.push(row);
    }
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(LanguagesReport {
        settings: s,
        python,
        rows,
    })
}

fn configured(c: HandlerConfig) -> HandlerKind {
    HandlerKind::Configured(Box::new(c))
}

/// `JOBQ_PYTHON`, else `python3` on PATH; an error says why there is none.
fn python() -> Result<String, String> {
    let py = std::env::var("JOBQ_PYTHON").unwrap_or_else(|_| "python3".into());
    match std::process::Command::new(&py).arg("--version").output() {
        Ok(o) if o.status.success() => Ok(py),
        Ok(o) => Err(format!("{py} --version exited with {}", o.status)),
        Err(e) => Err(format!(
            "no Python ({py}: {e}); set JOBQ_PYTHON to run the Python rows"
        )),
    }
}

/// Writes the reference worker module and the no-op program into `dir`; returns the program's path.
fn write_program(dir: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("jobq_worker.py"), PY_WORKER)?;
    let program = dir.join("bench_noop.py");
    std::fs::write(&program, PY_NOOP)?;
    Ok(program)
}

/// One handler under forever workers that have run a job already (a process handler's copies are
/// started, an HTTP connection is open: start-up is not what is measured): `handler_jobs` jobs inserted
/// at once and timed until the last is done, then jobs inserted at [`LATENCY_RATE`] for two seconds and
/// each one's run_at → finished_at.
async fn measure(ctx: &Ctx, s: Settings, label: &str, h: &HandlerKind) -> BResult<LanguageRow> {
    ctx.truncate().await?;
    let shutdown = ctx.stop.child_token();
    let calls = Arc::new(AtomicU64::new(0));
    let running = start_workers(
        &ctx.url,
        s,
        Mode::Forever,
        Work::kind(KIND),
        h,
        &calls,
        None,
        &shutdown,
    )
    .await?;
    insert_plain(&ctx.pool, KIND, 1).await?;
    let warm = wait_done(ctx, 1, Duration::from_secs(60)).await?;

    ctx.truncate().await?;
    let jobs = ctx.cfg.handler_jobs;
    let t0 = Instant::now();
    insert_plain(&ctx.pool, KIND, jobs).await?;
    let drained = wait_done(ctx, jobs, Duration::from_secs(300)).await?;
    let secs = t0.elapsed().as_secs_f64();
    let once = ctx
        .verify_once(
            Section::Languages,
            &format!("{label}: {jobs} jobs"),
            KIND,
            jobs,
            None,
        )
        .await?;

    ctx.truncate().await?;
    let inserted = super::steady::produce(ctx, KIND, LATENCY_RATE, Duration::from_secs(2))
        .await?
        .inserted;
    let kept_up = wait_done(ctx, inserted, Duration::from_secs(60)).await?;
    shutdown.cancel();
    let (_, err) = running.join().await;
    ctx.check(
        Section::Languages,
        format!("{label}: warm-up, drain and {LATENCY_RATE:.0} jobs/s all done"),
        warm && drained && once && kept_up && err.is_none(),
        match err {
            Some(e) => format!("a worker failed: {e}"),
            None => format!("warm-up {warm}, drain {drained}, at the rate {kept_up}"),
        },
    );
    let mut lat: Vec<i64> = sqlx::query_scalar(
        "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, run_at, finished_at) AS SIGNED) FROM job_queue \
         WHERE kind = ? AND state = 'done'",
    )
    .bind(KIND)
    .fetch_all(&ctx.pool)
    .await?;
    lat.sort_unstable();
    let ms = |q: f64| quantile(&lat, q) as f64 / 1e3;
    Ok(LanguageRow {
        handler: label.to_string(),
        jobs,
        jobs_per_sec: jobs as f64 / secs,
        latency_jobs: inserted,
        p50_ms: ms(0.5),
        p99_ms: ms(0.99),
    })
}

/// Waits until `n` jobs are done; false when `limit` passed first.
async fn wait_done(ctx: &Ctx, n: u64, limit: Duration) -> BResult<bool> {
    let until = Instant::now() + limit;
    loop {
        let done: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM job_queue WHERE kind = ? AND state = 'done'")
                .bind(KIND)
                .fetch_one(&ctx.pool)
                .await?;
        if done as u64 >= n {
            return Ok(true);
        }
        if Instant::now() >= until || ctx.stop.is_cancelled() {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A local HTTP/1.1 server whose every answer is an empty 200, kept alive: what an application's
/// endpoint costs when it does nothing.
struct NoopServer {
    url: String,
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl NoopServer {
    async fn start() -> BResult<Self> {
        let setup = |e: std::io::Error| {
            super::BenchError::Setup(format!("the no-op HTTP server cannot listen: {e}"))
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(setup)?;
        let addr = listener.local_addr().map_err(setup)?;
        let app = axum::Router::new().route("/noop", axum::routing::post(|| async { "" }));
        let stop = tokio_util::sync::CancellationToken::new();
        let until = stop.clone();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { until.cancelled().await })
                .await;
        });
        Ok(Self {
            url: format!("http://{addr}/noop"),
            stop,
            task,
        })
    }

    async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}
