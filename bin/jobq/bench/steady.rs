//! Steady state: a producer inserts jobs at a fixed rate (plain multi-row INSERTs every 10 ms, `run_at`
//! set by the server's NOW(6)) while forever-mode workers run them. Pickup latency is the time from a
//! job's `run_at` to its handler's start, the handler's clock (the client's) translated to the server's
//! with the offset measured at the start of the run. A short search doubles the rate until p99 passes
//! a second or jobs are left over (saturation), keeps the highest rate whose p99 stayed under 100 ms,
//! bisects between it and the next rate tried above it, and then measures at half that rate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::drain::{HandlerKind, Work, start_workers};
use super::{
    BResult, Ctx, RatePoint, Section, Settings, SteadyReport, insert_plain, now_us, quantile,
};
use jobq::Mode;

use super::report::P99_LIMIT_MS;

const KIND: &str = "bench.steady";

/// Jobs inserted in the first part of each rate are not counted (workers start idle, backed off).
const WARMUP: Duration = Duration::from_millis(500);

/// How long leftover jobs get after the producer stops before the rate counts as not sustained.
const SETTLE: Duration = Duration::from_secs(10);

pub(crate) async fn run(ctx: &Ctx, s: Settings) -> BResult<SteadyReport> {
    let cfg = &ctx.cfg;
    if !cfg.steady_rates.is_empty() {
        let mut points = Vec::new();
        for &rate in &cfg.steady_rates {
            points.push(at_rate(ctx, s, rate, cfg.steady_window).await?);
        }
        return Ok(SteadyReport {
            kept_up_rate: None,
            settings: s,
            sustainable_rate: None,
            search_capped: false,
            points,
            at_half: None,
            fixed_rates: true,
        });
    }
    let mut points: Vec<RatePoint> = Vec::new();
    let mut rate = cfg.steady_start_rate;
    // Double while the workers keep up (nothing left over, p99 under a second). A rate can keep up and
    // still miss the 100 ms p99 (idle polling adds latency at low rates, which a busier queue does not
    // see), so the search goes on past such a rate and keeps the highest that held.
    let mut capped = true;
    for _ in 0..=cfg.steady_max_doublings {
        let p = at_rate(ctx, s, rate, cfg.steady_window).await?;
        let ok = keeps_up(&p);
        points.push(p);
        if !ok {
            capped = false;
            break;
        }
        rate *= 2.0;
    }
    let best = |points: &[RatePoint]| {
        points
            .iter()
            .filter(|p| p.sustained)
            .map(|p| p.rate)
            .max_by(f64::total_cmp)
    };
    let mut good = best(&points);
    if let Some(mut lo) = good
        && let Some(mut hi) = points
            .iter()
            .filter(|p| p.rate > lo && !p.sustained)
            .map(|p| p.rate)
            .min_by(f64::total_cmp)
    {
        for _ in 0..cfg.steady_bisections {
            let mid = ((lo + hi) / 2.0).round();
            let p = at_rate(ctx, s, mid, cfg.steady_window).await?;
            if p.sustained {
                lo = mid;
            } else {
                hi = mid;
            }
            points.push(p);
        }
        good = Some(lo);
    }
    let at_half = match good {
        Some(r) => Some(at_rate(ctx, s, (r / 2.0).round(), cfg.steady_window * 2).await?),
        None => None,
    };
    let kept_up_rate = points
        .iter()
        .filter(|p| keeps_up(p))
        .map(|p| p.rate)
        .max_by(f64::total_cmp);
    Ok(SteadyReport {
        kept_up_rate,
        settings: s,
        sustainable_rate: good,
        search_capped: capped,
        points,
        at_half,
        fixed_rates: false,
    })
}

/// Nothing left over, the producer achieved the rate, p99 under a second.
fn keeps_up(p: &RatePoint) -> bool {
    p.left_over == 0 && p.insert_rate >= 0.95 * p.rate && p.p99_ms < 1000.0
}

/// What [`produce`] did.
pub(crate) struct Produced {
    /// Jobs inserted.
    pub(crate) inserted: u64,
    /// Over how long, s.
    pub(crate) secs: f64,
    /// Each INSERT's time from its start to its answer, µs, sorted: its rows' `run_at` is its start,
    /// so this much of every pickup passes before a worker can see the rows.
    pub(crate) insert_us: Vec<i64>,
}

/// Inserts jobs of `kind` at `rate` for `span`, a few at a time every 10 ms.
pub(crate) async fn produce(ctx: &Ctx, kind: &str, rate: f64, span: Duration) -> BResult<Produced> {
    let t0 = Instant::now();
    let mut inserted = 0u64;
    let mut insert_us = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let elapsed = t0.elapsed();
        if elapsed >= span {
            break;
        }
        let due = (rate * elapsed.as_secs_f64()) as u64;
        if due > inserted {
            let sent = Instant::now();
            insert_plain(&ctx.pool, kind, due - inserted).await?;
            insert_us.push(sent.elapsed().as_micros() as i64);
            inserted = due;
        }
    }
    insert_us.sort_unstable();
    Ok(Produced {
        inserted,
        secs: t0.elapsed().as_secs_f64(),
        insert_us,
    })
}

/// The pickup latencies (µs, sorted) of the jobs due from `counted_from` on: each job's start by the
/// bench's clock against its `run_at` by the server's; and beside them the part from `run_at` to the
/// claim's stamp, both by the server's clock (µs, sorted).
async fn latencies(
    ctx: &Ctx,
    starts: &Mutex<Vec<(u64, i64)>>,
    counted_from: i64,
) -> BResult<(Vec<i64>, Vec<i64>)> {
    let rows = super::run_and_claim_us(&ctx.pool, KIND).await?;
    let starts = starts.lock().unwrap_or_else(|e| e.into_inner());
    let (mut lat, mut to_stamp): (Vec<i64>, Vec<i64>) = starts
        .iter()
        .filter_map(|(id, t)| {
            let &(due, claimed) = rows.get(id)?;
            (due >= counted_from).then_some((t + ctx.clock_offset_us - due, claimed - due))
        })
        .unzip();
    lat.sort_unstable();
    to_stamp.sort_unstable();
    Ok((lat, to_stamp))
}

/// One rate under forever-mode workers with settings `s`: pickup latencies of the jobs due after the
/// warm-up, and whether the workers kept up.
async fn at_rate(ctx: &Ctx, s: Settings, rate: f64, window: Duration) -> BResult<RatePoint> {
    ctx.truncate().await?;
    let starts: Arc<Mutex<Vec<(u64, i64)>>> = Arc::default();
    let record = {
        let starts = starts.clone();
        Arc::new(move |id: u64| {
            let t = now_us();
            starts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((id, t));
        })
    };
    let calls = Arc::new(AtomicU64::new(0));
    let shutdown = ctx.stop.child_token();
    let running = start_workers(
        &ctx.url,
        s,
        Mode::Forever,
        Work::kind(KIND),
        &HandlerKind::Noop,
        &calls,
        Some(record),
        &shutdown,
    )
    .await?;

    let counted_from = now_us() + WARMUP.as_micros() as i64 + ctx.clock_offset_us;
    let Produced {
        inserted,
        secs: produced_secs,
        insert_us,
    } = produce(ctx, KIND, rate, WARMUP + window).await?;
    let settle_by = Instant::now() + SETTLE;
    while calls.load(Ordering::Relaxed) < inserted && Instant::now() < settle_by {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let left = inserted.saturating_sub(calls.load(Ordering::Relaxed));
    shutdown.cancel();
    let (_, err) = running.join().await;

    let (lat, to_stamp) = latencies(ctx, &starts, counted_from).await?;
    let ms = |q: f64| quantile(&lat, q) as f64 / 1e3;
    let achieved = inserted as f64 / produced_secs;
    let p99 = ms(0.99);
    let due_to_stamp_p50_ms = quantile(&to_stamp, 0.5) as f64 / 1e3;
    let insert_p50_ms = quantile(&insert_us, 0.5) as f64 / 1e3;
    let what = format!("steady {rate:.0}/s");
    if left == 0 {
        ctx.verify_once(
            Section::Steady,
            &format!("{what}: rows"),
            KIND,
            inserted,
            Some(calls.load(Ordering::Relaxed)),
        )
        .await?;
    }
    if let Some(e) = &err {
        ctx.check(
            Section::Steady,
            format!("{what}: workers"),
            false,
            e.clone(),
        );
    }
    ctx.progress(format!(
        "steady {rate:.0}/s: p50 {:.1} ms (the INSERT {insert_p50_ms:.1} ms, due to stamp {due_to_stamp_p50_ms:.1} ms), \
         p99 {p99:.1} ms, {left} left over",
        ms(0.5)
    ));
    Ok(RatePoint {
        rate,
        inserted,
        insert_rate: achieved,
        measured: lat.len() as u64,
        p50_ms: ms(0.5),
        due_to_stamp_p50_ms,
        insert_p50_ms,
        p95_ms: ms(0.95),
        p99_ms: p99,
        max_ms: lat.last().map_or(0.0, |&v| v as f64 / 1e3),
        left_over: left,
        sustained: left == 0 && err.is_none() && p99 <= P99_LIMIT_MS && achieved >= 0.95 * rate,
    })
}
