//! Big table: drain throughput (claim + finish through the library) with a large history of finished
//! rows kept in job_queue, against the same drain on an empty table. The claim index puts finished rows
//! outside the range a claim reads, so the history should cost little; this measures how little.
//!
//! The history is bulk-loaded fast: 1,000 `done` rows, then doubling with `INSERT … SELECT` from the table
//! itself (at most 100,000 rows a statement, so no single transaction grows huge), then ANALYZE TABLE. An
//! empty twin (`CREATE TABLE … LIKE`) is swapped in and out by RENAME TABLE, so the two tables take turns
//! for `rounds` rounds and are compared by their median: single short drains on a shared machine differ
//! by more than the history costs.

use std::time::Instant;

use sqlx::Executor;

use super::drain::{HandlerKind, drain_with};
use super::median::median;
use super::{BResult, BigReport, Ctx, DrainRun, Section, Settings, insert_plain};

const KIND: &str = "bench.big";

/// Where the table not in use waits.
const PARKED_EMPTY: &str = "jobq_bench_empty";
const PARKED_BIG: &str = "jobq_bench_history";

pub(crate) async fn run(ctx: &Ctx, s: Settings) -> BResult<BigReport> {
    let jobs = ctx.cfg.big_jobs;
    let t0 = Instant::now();
    let rows = load_history(ctx, ctx.cfg.big_rows).await?;
    let load_secs = t0.elapsed().as_secs_f64();
    ctx.progress(format!(
        "big: loaded {rows} finished rows in {load_secs:.1} s"
    ));
    ctx.pool
        .execute(format!("DROP TABLE IF EXISTS {PARKED_EMPTY}, {PARKED_BIG}").as_str())
        .await?;
    ctx.pool
        .execute(format!("CREATE TABLE {PARKED_EMPTY} LIKE job_queue").as_str())
        .await?;
    let (empty, big) = take_turns(ctx, s).await?;
    ctx.pool
        .execute(format!("DROP TABLE IF EXISTS {PARKED_EMPTY}").as_str())
        .await?;
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
    let rate = |v: &[DrainRun]| median(&v.iter().map(|r| r.jobs_per_sec).collect::<Vec<_>>());
    Ok(BigReport {
        settings: s,
        history_rows: rows,
        load_secs,
        jobs,
        ratio: rate(&big) / rate(&empty),
        empty_jobs_per_sec: rate(&empty),
        big_jobs_per_sec: rate(&big),
        empty,
        big,
    })
}

/// The drains of every round, on the empty table and then on the big one: (empty, big). Leaves the big
/// table in place.
async fn take_turns(ctx: &Ctx, s: Settings) -> BResult<(Vec<DrainRun>, Vec<DrainRun>)> {
    let mut empty = Vec::new();
    let mut big = Vec::new();
    let mut big_in_place = true;
    for round in 1..=ctx.cfg.rounds.max(1) {
        for with_history in [false, true] {
            if with_history != big_in_place {
                swap_in(ctx, with_history).await?;
                big_in_place = with_history;
            }
            let run = drain_once(ctx, s).await?;
            ctx.progress(format!(
                "big: round {round}, {}: {:.0} jobs/s",
                if with_history {
                    "with history"
                } else {
                    "empty"
                },
                run.jobs_per_sec
            ));
            if with_history { &mut big } else { &mut empty }.push(run);
        }
    }
    if !big_in_place {
        swap_in(ctx, true).await?;
    }
    Ok((empty, big))
}

/// Inserts `big_jobs` jobs into the table in place and drains them, once the server has written out
/// and purged what the load and the last round left (see [`Ctx::settle`]), so that neither table's
/// rounds pay for the other's.
async fn drain_once(ctx: &Ctx, s: Settings) -> BResult<DrainRun> {
    let jobs = ctx.cfg.big_jobs;
    let last_before: u64 =
        sqlx::query_scalar("SELECT CAST(COALESCE(MAX(id), 0) AS UNSIGNED) FROM job_queue")
            .fetch_one(&ctx.pool)
            .await?;
    insert_plain(&ctx.pool, KIND, jobs).await?;
    ctx.pool.execute("ANALYZE TABLE job_queue").await?;
    ctx.settle().await?;
    let run = drain_with(
        ctx,
        &ctx.url,
        Section::Big,
        s,
        KIND,
        &HandlerKind::Noop,
        jobs,
    )
    .await?;
    // The drained jobs go, so the empty table stays empty and the history stays its size. By primary
    // key: `kind` has no index, and a scan of the whole history would push the pages the next drain
    // needs out of the buffer pool.
    sqlx::query("DELETE FROM job_queue WHERE id > ? AND kind = ?")
        .bind(last_before)
        .bind(KIND)
        .execute(&ctx.pool)
        .await?;
    Ok(run)
}

/// Makes the table with the history (`true`) or its empty twin `job_queue`, parking the other.
async fn swap_in(ctx: &Ctx, history: bool) -> BResult<()> {
    let (park, take) = if history {
        (PARKED_EMPTY, PARKED_BIG)
    } else {
        (PARKED_BIG, PARKED_EMPTY)
    };
    ctx.pool
        .execute(format!("RENAME TABLE job_queue TO {park}, {take} TO job_queue").as_str())
        .await?;
    Ok(())
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
