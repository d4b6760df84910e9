//! Idle cost: one forever-mode worker with jobq's defaults and nothing to do. Its statements are counted
//! at the wire by a relay between it and the server (see [`super::wire`]): performance_schema is often
//! off, and the server's global `Questions` counter also counts every other client of a shared server
//! (it is reported too, as a cross-check). Then jobs are inserted into the idle queue, one at a time at
//! a random moment, and the time from each INSERT's `run_at` (NOW(6)) to its handler's start is measured.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::drain::{HandlerKind, Work, start_workers};
use super::wire::{Commands, Relay};
use super::{BResult, Ctx, IdleReport, Section, Settings, now_us};
use jobq::{Mode, WorkerConfig};

const KIND: &str = "bench.idle";

pub(crate) async fn run(ctx: &Ctx) -> BResult<IdleReport> {
    ctx.truncate().await?;
    let relay = relay_for(ctx).await?;
    let url = relay
        .as_ref()
        .map_or_else(|| ctx.url.clone(), |r| r.url(&ctx.url));
    // What the server's global counters do without the worker: other clients of a shared server.
    let baseline_window =
        Duration::from_secs_f64((ctx.cfg.idle_window.as_secs_f64() / 3.0).max(1.0));
    let baseline = count_statements(ctx, None, baseline_window).await?;

    let (tx, mut rx) = mpsc::unbounded_channel::<(u64, i64)>();
    let on_start = Arc::new(move |id: u64| {
        let _ = tx.send((id, now_us()));
    });
    let calls = Arc::new(AtomicU64::new(0));
    let shutdown = ctx.stop.child_token();
    let running = start_workers(
        &url,
        Settings::DEFAULTS,
        Mode::Forever,
        Work::kind(KIND),
        &HandlerKind::Noop,
        &calls,
        Some(on_start),
        &shutdown,
    )
    .await?;

    // Let the worker start and back off to its longest poll (50 + 100 + … + 800 ms = 1.55 s).
    let warmup = if ctx.cfg.quick { 1.7 } else { 3.0 };
    tokio::time::sleep(Duration::from_secs_f64(warmup)).await;
    let idle = count_statements(ctx, relay.as_ref(), ctx.cfg.idle_window).await?;
    ctx.progress(format!(
        "idle: {} over {:.1} s",
        idle.wire.map_or("no wire counts".into(), |w| format!(
            "{} statements, {} pings",
            w.statements(),
            w.ping
        )),
        idle.secs
    ));

    let (starts_ms, missed) = time_starts(ctx, &mut rx).await?;
    shutdown.cancel();
    let (_, err) = running.join().await;
    if let Some(e) = err {
        ctx.check(Section::Idle, "idle worker", false, e);
    }
    let n = u64::from(ctx.cfg.idle_samples);
    ctx.check(
        Section::Idle,
        "every job inserted into the idle queue started",
        missed == 0,
        format!("{} of {n} started within 10 s", n - u64::from(missed)),
    );
    let ran = calls.load(std::sync::atomic::Ordering::Relaxed);
    ctx.verify_once(Section::Idle, "idle queue: rows", KIND, n, Some(ran))
        .await?;
    let max = starts_ms.iter().copied().fold(0.0, f64::max);
    let mean = starts_ms.iter().sum::<f64>() / starts_ms.len().max(1) as f64;
    let secs = idle.secs;
    Ok(IdleReport {
        window_secs: secs,
        counted_at_wire: idle.wire.is_some(),
        statements_per_sec: idle.wire.map(|w| w.statements() as f64 / secs),
        round_trips_per_sec: idle.wire.map(|w| w.round_trips() as f64 / secs),
        commands: idle.wire,
        server_questions_per_sec: idle.questions_per_sec,
        server_queries_per_sec: idle.queries_per_sec,
        baseline_questions_per_sec: baseline.questions_per_sec,
        baseline_queries_per_sec: baseline.queries_per_sec,
        start_ms: starts_ms,
        start_mean_ms: mean,
        start_max_ms: max,
    })
}

/// A counting relay in front of the server, when it is reached over TCP (a Unix socket cannot be
/// relayed; the server's counters are then all there is).
async fn relay_for(ctx: &Ctx) -> BResult<Option<Relay>> {
    let opts = jobq::ConnectConfig::new(&ctx.url)?.connect_options();
    if opts.get_socket().is_some() {
        return Ok(None);
    }
    Ok(Relay::start(opts.get_host().to_string(), opts.get_port())
        .await
        .ok())
}

/// Statements counted over one window.
struct Counted {
    secs: f64,
    /// At the wire, through the relay, when there is one.
    wire: Option<Commands>,
    /// The server's global counters, per second.
    questions_per_sec: Option<f64>,
    queries_per_sec: Option<f64>,
}

/// Counts statements for `window`: at the wire through `relay`, and by the server's global counters
/// (the bench's own two SHOW statements in between are taken off).
async fn count_statements(ctx: &Ctx, relay: Option<&Relay>, window: Duration) -> BResult<Counted> {
    let w0 = relay.map(|r| r.counts.snapshot());
    let q0 = global_status(ctx, "Questions").await?;
    let qq0 = global_status(ctx, "Queries").await?;
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let q1 = global_status(ctx, "Questions").await?;
    let qq1 = global_status(ctx, "Queries").await?;
    let secs = t0.elapsed().as_secs_f64();
    let per_sec = |a: Option<u64>, b: Option<u64>| {
        a.zip(b)
            .map(|(a, b)| a.saturating_sub(b).saturating_sub(2) as f64 / secs)
    };
    Ok(Counted {
        secs,
        wire: relay.zip(w0).map(|(r, w0)| r.counts.snapshot().since(&w0)),
        questions_per_sec: per_sec(q1, q0),
        queries_per_sec: per_sec(qq1, qq0),
    })
}

/// Inserts `idle_samples` jobs into the idle queue, each at a random phase of the worker's longest
/// poll, and times each from its `run_at` to its handler's start. Returns the times (ms) and how many
/// did not start within 10 s.
async fn time_starts(
    ctx: &Ctx,
    started_rx: &mut mpsc::UnboundedReceiver<(u64, i64)>,
) -> BResult<(Vec<f64>, u32)> {
    let mut starts_ms = Vec::new();
    let mut missed = 0u32;
    for _ in 0..ctx.cfg.idle_samples {
        let pause =
            1.6 + rand::random_range(0.0..WorkerConfig::DEFAULT_POLL_INTERVAL.as_secs_f64());
        tokio::time::sleep(Duration::from_secs_f64(pause)).await;
        let id = sqlx::query("INSERT INTO job_queue (kind) VALUES (?)")
            .bind(KIND)
            .execute(&ctx.pool)
            .await?
            .last_insert_id();
        let started = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some((got, t)) = started_rx.recv().await {
                if got == id {
                    return Some(t);
                }
            }
            None
        })
        .await
        .ok()
        .flatten();
        let run_at: i64 = sqlx::query_scalar(
            "SELECT CAST(UNIX_TIMESTAMP(run_at) * 1000000 AS SIGNED) FROM job_queue WHERE id = ?",
        )
        .bind(id)
        .fetch_one(&ctx.pool)
        .await?;
        match started {
            Some(t) => starts_ms.push((t + ctx.clock_offset_us - run_at) as f64 / 1e3),
            None => missed += 1,
        }
    }
    Ok((starts_ms, missed))
}

/// A global status counter: `Questions` (statements clients sent) or `Queries` (those plus statements
/// run inside stored programs), over every client of the server.
async fn global_status(ctx: &Ctx, name: &str) -> BResult<Option<u64>> {
    let row: Option<(String, String)> =
        sqlx::query_as(&format!("SHOW GLOBAL STATUS LIKE '{name}'"))
            .fetch_optional(&ctx.pool)
            .await?;
    Ok(row.and_then(|(_, v)| v.parse().ok()))
}
