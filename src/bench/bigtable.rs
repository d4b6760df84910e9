//! Big table: drain throughput (claim + finish through the library, the winning drain settings) with a
//! large history of finished rows kept in job_queue, against the same drain on an empty table. The claim
//! index puts finished rows outside the range a claim reads, so the history should cost little; this
//! measures how little.
//!
//! The history is bulk-loaded fast: 1,000 `done` rows, then doubling with `INSERT … SELECT` from the table
//! itself (at most 100,000 rows a statement, so no single transaction grows huge), then ANALYZE TABLE.

use std::time::Instant;

use sqlx::Executor;

use super::drain::{HandlerKind, drain_with};
use super::{BResult, BigReport, Ctx, Section, Settings, insert_plain};

const KIND: &str = "bench.big";

pub(crate) async fn run(ctx: &Ctx, s: Settings) -> BResult<BigReport> {
    let jobs = ctx.cfg.big_jobs;
    ctx.fill(KIND, jobs).await?;
    let empty = drain_with(
        ctx,
        &ctx.url,
        Section::Big,
        s,
        KIND,
        HandlerKind::Noop,
        jobs,
    )
    .await?;
    ctx.progress(format!("big: empty table {:.0} jobs/s", empty.jobs_per_sec));

    let t0 = Instant::now();
    let rows = load_history(ctx, ctx.cfg.big_rows).await?;
    let load_secs = t0.elapsed().as_secs_f64();
    ctx.progress(format!(
        "big: loaded {rows} finished rows in {load_secs:.1} s"
    ));
    insert_plain(&ctx.pool, KIND, jobs).await?;
    ctx.pool.execute("ANALYZE TABLE job_queue").await?;
    let big = drain_with(
        ctx,
        &ctx.url,
        Section::Big,
        s,
        KIND,
        HandlerKind::Noop,
        jobs,
    )
    .await?;
    ctx.progress(format!(
        "big: {rows} finished rows {:.0} jobs/s",
        big.jobs_per_sec
    ));
    let history_ok: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM job_queue WHERE kind = 'bench.history'")
            .fetch_one(&ctx.pool)
            .await?;
    ctx.check(
        Section::Big,
        "history rows untouched",
        history_ok as u64 == rows,
        format!("{history_ok} of {rows} history rows still there"),
    );
    Ok(BigReport {
        settings: s,
        history_rows: rows,
        load_secs,
        ratio: big.jobs_per_sec / empty.jobs_per_sec,
        empty,
        big,
    })
}

/// Empties the table and fills it with `target` finished rows; returns how many it holds.
async fn load_history(ctx: &Ctx, target: u64) -> BResult<u64> {
    ctx.truncate().await?;
    let seed = target.clamp(1, 1000);
    let sql = format!(
        "INSERT INTO job_queue (kind, state, attempts, claimed_at, started_at, finished_at) VALUES {}",
        vec![
            "('bench.history', 'done', 1, NOW(6) - INTERVAL 1 HOUR, NOW(6) - INTERVAL 1 HOUR, NOW(6) - INTERVAL 1 HOUR)";
            seed as usize
        ]
        .join(",")
    );
    ctx.pool.execute(sql.as_str()).await?;
    let mut have = seed;
    while have < target {
        let k = have.min(target - have).min(100_000);
        sqlx::query(
            "INSERT INTO job_queue (kind, state, attempts, claimed_at, started_at, finished_at) \
             SELECT kind, state, attempts, claimed_at, started_at, finished_at FROM job_queue LIMIT ?",
        )
        .bind(k)
        .execute(&ctx.pool)
        .await?;
        have += k;
    }
    ctx.pool.execute("ANALYZE TABLE job_queue").await?;
    Ok(have)
}
