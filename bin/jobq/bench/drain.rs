//! Drain throughput through the library: N no-op jobs drained by W [`Worker`]s in the bench's own process
//! (each with its own pool, as separate `jobq worker` processes would have), first with jobq's defaults,
//! then with the best settings of a sweep; the cost of a command and of an SQL handler; and, through a
//! counting relay, the commands jobq sends per job next to the raw loop's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use sqlx::MySqlPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::cpu::CpuMeter;
use super::report::{HandlerCost, HeadToHead, RawCell, WireProfile};
use super::wire::Relay;
use super::{BResult, Ctx, DrainReport, DrainRun, FinishMode, RawReport, Section, Settings, raw};
use jobq::ConnectConfig;
use jobq::config::{Config, HandlerConfig};
use jobq::{Handlers, JobContext, Mode, Worker, WorkerConfig, WorkerReport};

use super::workers::{KIND, pool_size};

/// Which handler the drained jobs get.
#[derive(Debug, Clone)]
pub(crate) enum HandlerKind {
    /// An async Rust function that counts its calls.
    Noop,
    /// A command handler running `true`.
    Command,
    /// An SQL handler running `DO 0`.
    Sql,
    /// Any handler `jobq.toml` can configure (HTTP, process, a command of the caller's choice).
    Configured(Box<HandlerConfig>),
}

impl HandlerKind {
    fn is_noop(&self) -> bool {
        matches!(self, HandlerKind::Noop)
    }

    /// The handler's entry of a `jobq.toml`, for every kind but the in-process no-op.
    fn config(&self) -> Option<HandlerConfig> {
        match self {
            HandlerKind::Noop => None,
            HandlerKind::Command => Some(HandlerConfig {
                command: Some(vec!["true".into()]),
                ..Default::default()
            }),
            HandlerKind::Sql => Some(HandlerConfig {
                sql: Some("DO 0".into()),
                ..Default::default()
            }),
            HandlerKind::Configured(c) => Some((**c).clone()),
        }
    }

    /// A short name for checks and progress lines.
    fn label(&self) -> &'static str {
        match self {
            HandlerKind::Noop => "Noop",
            HandlerKind::Command => "Command",
            HandlerKind::Sql => "Sql",
            HandlerKind::Configured(_) => "Configured",
        }
    }
}

/// Workers started by [`start_workers`].
pub(crate) struct Running {
    handles: Vec<JoinHandle<jobq::Result<WorkerReport>>>,
    pools: Vec<MySqlPool>,
}

impl Running {
    /// Waits for every worker; returns the summed report and the first error.
    pub(crate) async fn join(self) -> (WorkerReport, Option<String>) {
        let mut sum = WorkerReport::default();
        let mut err = None;
        for h in self.handles {
            match h.await {
                Ok(Ok(r)) => {
                    sum.claimed += r.claimed;
                    sum.done += r.done;
                    sum.retried += r.retried;
                    sum.dead += r.dead;
                    sum.lost += r.lost;
                    sum.claim_errors += r.claim_errors;
                }
                Ok(Err(e)) => err = Some(e.to_string()),
                Err(e) => err = Some(e.to_string()),
            }
        }
        for p in self.pools {
            p.close().await;
        }
        (sum, err)
    }
}

/// What a bench worker serves: one kind, in one queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Work<'a> {
    pub(crate) queue: &'a str,
    pub(crate) kind: &'a str,
}

impl<'a> Work<'a> {
    /// Jobs of `kind` in the default queue, where `insert_plain` puts them.
    pub(crate) fn kind(kind: &'a str) -> Self {
        Work {
            queue: "default",
            kind,
        }
    }
}

/// Starts `s.workers` workers on `url` for jobs of `work`. `on_start` is called with the job id when a
/// no-op handler starts.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn start_workers(
    url: &str,
    s: Settings,
    mode: Mode,
    work: Work<'_>,
    handler: &HandlerKind,
    calls: &Arc<AtomicU64>,
    on_start: Option<Arc<dyn Fn(u64) + Send + Sync>>,
    shutdown: &CancellationToken,
) -> BResult<Running> {
    let kind = work.kind;
    let mut handles = Vec::new();
    let mut pools = Vec::new();
    for _ in 0..s.workers {
        let pool = jobq::connect(&ConnectConfig::new(url)?.max_connections(pool_size(s))).await?;
        let handlers = match handler.config() {
            None => {
                let (calls, on_start) = (calls.clone(), on_start.clone());
                Handlers::new().register(kind, move |job: JobContext| {
                    let (calls, on_start) = (calls.clone(), on_start.clone());
                    async move {
                        if let Some(f) = on_start {
                            f(job.id.0);
                        }
                        calls.fetch_add(1, Ordering::Relaxed);
                        Ok::<(), jobq::JobError>(())
                    }
                })?
            }
            Some(h) => {
                let config = Config {
                    handlers: BTreeMap::from([(kind.to_string(), h)]),
                    ..Default::default()
                };
                config.handlers(&pool)?
            }
        };
        let cfg = WorkerConfig {
            concurrency: s.concurrency,
            batch_size: s.batch_size,
            mode,
            queues: vec![work.queue.to_string()],
            ..WorkerConfig::default()
        };
        let worker = Worker::new(pool.clone(), handlers, cfg)?;
        handles.push(tokio::spawn(worker.run(shutdown.clone())));
        pools.push(pool);
    }
    Ok(Running { handles, pools })
}

/// Drains the `jobs` jobs of `kind` already in the table with settings `s`, and checks that each ran and
/// finished once.
pub(crate) async fn drain_with(
    ctx: &Ctx,
    url: &str,
    section: Section,
    s: Settings,
    kind: &str,
    handler: &HandlerKind,
    jobs: u64,
) -> BResult<DrainRun> {
    let calls = Arc::new(AtomicU64::new(0));
    let shutdown = ctx.stop.child_token();
    let meter = CpuMeter::start(ctx.server_pid.as_deref());
    let t0 = Instant::now();
    let running = start_workers(
        url,
        s,
        Mode::Drain,
        Work::kind(kind),
        handler,
        &calls,
        None,
        &shutdown,
    )
    .await?;
    let (report, err) = running.join().await;
    let secs = t0.elapsed().as_secs_f64();
    let cpu = meter.finish(jobs);
    let what = format!("drain {s} {} {jobs} jobs", handler.label());
    let counted_ok = err.is_none() && report.done == jobs && report.lost == 0;
    ctx.check(
        section,
        format!("{what}: workers"),
        counted_ok,
        match err {
            Some(e) => format!("a worker failed: {e}"),
            None => format!(
                "workers report {} claimed, {} done, {} retried, {} lost",
                report.claimed, report.done, report.retried, report.lost
            ),
        },
    );
    let calls = handler.is_noop().then(|| calls.load(Ordering::Relaxed));
    let db_ok = ctx
        .verify_once(section, &format!("{what}: rows"), kind, jobs, calls)
        .await?;
    let (claim_stmts, finish_stmts) = super::statement_counts(&ctx.pool, kind).await?;
    Ok(DrainRun {
        rows_per_claim: jobs as f64 / claim_stmts.max(1) as f64,
        rows_per_finish: jobs as f64 / finish_stmts.max(1) as f64,
        settings: s,
        jobs,
        secs,
        jobs_per_sec: jobs as f64 / secs,
        cpu,
        ok: counted_ok && db_ok,
    })
}

pub(crate) async fn run(ctx: &Ctx, raw: Option<&RawReport>) -> BResult<DrainReport> {
    let (defaults, sweep, best, winner) = sweep(ctx).await?;
    let handlers = handler_costs(ctx).await?;
    let mut wire: Vec<WireProfile> = Vec::new();
    for s in [Settings::DEFAULTS, best] {
        if wire.iter().any(|w| w.settings == s) {
            continue;
        }
        if let Some(w) = wire_profile(ctx, s).await? {
            wire.push(w);
        }
    }
    let head_to_head = match raw.and_then(RawReport::best_any) {
        Some(limit) => Some(head_to_head(ctx, limit, best).await?),
        None => None,
    };
    Ok(DrainReport::new(
        defaults,
        sweep,
        winner,
        handlers,
        wire,
        raw,
        head_to_head,
    ))
}

/// Drains with jobq's defaults, then with each swept setting, then again at full size with the two best
/// ones. Returns the defaults' run, the sweep, the best settings and the winner's run.
async fn sweep(ctx: &Ctx) -> BResult<(DrainRun, Vec<DrainRun>, Settings, DrainRun)> {
    let cfg = &ctx.cfg;
    let (url, noop) = (ctx.url.as_str(), &HandlerKind::Noop);
    ctx.fill(KIND, cfg.jobs).await?;
    let defaults = drain_with(
        ctx,
        url,
        Section::Drain,
        Settings::DEFAULTS,
        KIND,
        noop,
        cfg.jobs,
    )
    .await?;
    ctx.progress(format!(
        "drain defaults ({}): {:.0} jobs/s",
        Settings::DEFAULTS,
        defaults.jobs_per_sec
    ));
    let mut sweep = Vec::new();
    for &s in &cfg.sweep {
        ctx.fill(KIND, cfg.sweep_jobs).await?;
        let r = drain_with(ctx, url, Section::Drain, s, KIND, noop, cfg.sweep_jobs).await?;
        ctx.progress(format!("drain sweep {s}: {:.0} jobs/s", r.jobs_per_sec));
        sweep.push(r);
    }
    // One short run per setting picks too much by luck (a setting that won its 20,000 jobs by a
    // tenth has lost the full size by as much): the two best run again at the full size, and the
    // faster of those is the winner.
    let mut ranked: Vec<&DrainRun> = sweep.iter().collect();
    ranked.sort_by(|a, b| b.jobs_per_sec.total_cmp(&a.jobs_per_sec));
    let mut finalists: Vec<DrainRun> = Vec::new();
    for r in ranked.into_iter().take(2) {
        let run = if r.settings == Settings::DEFAULTS {
            defaults.clone()
        } else {
            ctx.fill(KIND, cfg.jobs).await?;
            drain_with(ctx, url, Section::Drain, r.settings, KIND, noop, cfg.jobs).await?
        };
        ctx.progress(format!(
            "drain finalist ({}): {:.0} jobs/s",
            run.settings, run.jobs_per_sec
        ));
        finalists.push(run);
    }
    let winner = finalists
        .into_iter()
        .max_by(|a, b| a.jobs_per_sec.total_cmp(&b.jobs_per_sec))
        .unwrap_or_else(|| defaults.clone());
    let best = winner.settings;
    ctx.progress(format!(
        "drain winner ({best}): {:.0} jobs/s",
        winner.jobs_per_sec
    ));
    Ok((defaults, sweep, best, winner))
}

/// What a command and an SQL handler cost over the no-op one, at jobq's defaults.
async fn handler_costs(ctx: &Ctx) -> BResult<Vec<HandlerCost>> {
    let mut handlers = Vec::new();
    let mut noop_rate = None;
    for (label, h) in [
        ("no-op Rust fn", HandlerKind::Noop),
        ("command `true`", HandlerKind::Command),
        ("SQL `DO 0`", HandlerKind::Sql),
    ] {
        let jobs = ctx.cfg.handler_jobs;
        ctx.fill(KIND, jobs).await?;
        let s = Settings::DEFAULTS;
        let r = drain_with(ctx, &ctx.url, Section::Drain, s, KIND, &h, jobs).await?;
        let base = *noop_rate.get_or_insert(r.jobs_per_sec);
        ctx.progress(format!("handler {label}: {:.0} jobs/s", r.jobs_per_sec));
        handlers.push(HandlerCost {
            handler: label.to_string(),
            jobs: r.jobs,
            jobs_per_sec: r.jobs_per_sec,
            extra_us_per_job: 1e6 / r.jobs_per_sec - 1e6 / base,
            client_cpu_us_per_job: r.cpu.client_us_per_job,
        });
    }
    Ok(handlers)
}

/// Measures the best raw cell and jobq's best settings again at the full drain size, alternately, for
/// `ctx.cfg.rounds` rounds (see [`HeadToHead`]).
async fn head_to_head(ctx: &Ctx, limit: &RawCell, best: Settings) -> BResult<HeadToHead> {
    let jobs = ctx.cfg.jobs;
    let mut h = HeadToHead {
        jobs,
        raw_workers: limit.workers,
        raw_batch: limit.batch,
        raw_finish: limit.finish,
        settings: best,
        raw: Vec::new(),
        jobq: Vec::new(),
        raw_same: Vec::new(),
        lean: Vec::new(),
        procs: Vec::new(),
        procs_at_lean: Vec::new(),
        ok: true,
    };
    for round in 1..=ctx.cfg.rounds.max(1) {
        let l = super::lean::measure(ctx, limit.workers, limit.batch, jobs).await?;
        h.ok &= l.ok;
        h.lean.push(l.jobs_per_sec);
        let r = raw::measure(ctx, limit.workers, limit.batch, limit.finish, jobs).await?;
        // The raw loop at jobq's own W and B, unless the limit is that cell: the worker against the
        // loop of its own statements, judged on the same alternating rounds as the rest.
        let same = (limit.workers, limit.batch, limit.finish)
            == (best.workers, best.batch_size, FinishMode::JOBQ);
        let r_same = if same {
            r.jobs_per_sec
        } else {
            let c =
                raw::measure(ctx, best.workers, best.batch_size, FinishMode::JOBQ, jobs).await?;
            h.ok &= c.ok;
            c.jobs_per_sec
        };
        ctx.fill(KIND, jobs).await?;
        let j = drain_with(
            ctx,
            &ctx.url,
            Section::Drain,
            best,
            KIND,
            &HandlerKind::Noop,
            jobs,
        )
        .await?;
        let p = super::procs::drain(ctx, best, jobs).await?;
        // Processes at the lean loop's own W and B too, when the sweep's winner has others.
        let at_lean = HeadToHead::procs_at_lean_settings_for(limit.workers, limit.batch);
        let p_lean = if at_lean == best {
            None
        } else {
            super::procs::drain(ctx, at_lean, jobs).await?
        };
        let rate = |p: Option<f64>| p.map_or("-".to_string(), |p| format!("{p:.0}"));
        ctx.progress(format!(
            "head to head round {round}: lean {:.0} jobs/s, raw {:.0}, raw at jobq's W and B {r_same:.0}, jobq {:.0}, jobq processes {}, at lean's W and B {}",
            l.jobs_per_sec,
            r.jobs_per_sec,
            j.jobs_per_sec,
            rate(p),
            rate(p_lean)
        ));
        h.ok &= r.ok && j.ok;
        h.raw.push(r.jobs_per_sec);
        h.jobq.push(j.jobs_per_sec);
        h.raw_same.push(r_same);
        h.procs.extend(p);
        h.procs_at_lean.extend(p_lean);
    }
    Ok(h)
}

/// Runs the winning settings and the raw loop at the same W and B through the counting relay.
async fn wire_profile(ctx: &Ctx, s: Settings) -> BResult<Option<WireProfile>> {
    let opts = jobq::ConnectConfig::new(&ctx.url)?.connect_options();
    if opts.get_socket().is_some() {
        return Ok(None);
    }
    let relay = match Relay::start(opts.get_host().to_string(), opts.get_port()).await {
        Ok(r) => r,
        Err(_) => return Ok(None),
    };
    let jobs = ctx.cfg.sweep_jobs;
    ctx.fill(KIND, jobs).await?;
    let before = relay.counts.snapshot();
    let jobq_run = drain_with(
        ctx,
        &relay.url(&ctx.url),
        Section::Drain,
        s,
        KIND,
        &HandlerKind::Noop,
        jobs,
    )
    .await?;
    let jobq = relay.counts.snapshot().since(&before);
    let (raw_cell, raw) =
        raw::wire_profile(ctx, &relay, s.workers, s.batch_size, FinishMode::JOBQ, jobs).await?;
    ctx.progress(format!(
        "wire {s}: jobq {:.3} round trips/job, raw {:.3}",
        jobq.round_trips() as f64 / jobs as f64,
        raw.round_trips() as f64 / jobs as f64
    ));
    Ok(Some(WireProfile {
        settings: s,
        jobs,
        jobq_rows_per_claim: jobq_run.rows_per_claim,
        jobq_rows_per_finish: jobq_run.rows_per_finish,
        raw_rows_per_claim: raw_cell.rows_per_claim,
        raw_rows_per_finish: raw_cell.rows_per_finish,
        jobq,
        raw,
        jobq_jobs_per_sec: jobq_run.jobs_per_sec,
        raw_jobs_per_sec: raw_cell.jobs_per_sec,
        jobq_cpu: jobq_run.cpu,
        raw_cpu: raw_cell.cpu,
    }))
}
