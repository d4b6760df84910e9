//! The server's CPU per job of a drain, by table: one connection claims (jobq's pick-then-lock and
//! `HOLDINGS_WRITE` and `CLAIM_STAMP`, 1,000 rows) and finishes (`FINISH_DONE_BATCH`) until nothing is
//! due, on jobq's table, on copies of it with one part less or as an older schema had it (the index of
//! running and done rows of schemas 34 to 40, the rare rows' index on finished_at of schemas 39 to 41),
//! on jobq's table with a claim that does not write the claimant's holdings list (what the list costs,
//! see [`Drain::Unlisted`]), and on the lean table ([`super::lean`]). Purge's work for the drained rows
//! is counted: the meter stops once the server's history list is back to its length before the drain.
//!
//! The row costs ([`super::rowcost`]) time each statement from the client; this counts what the server
//! spent per job in all, which is what bounds a drain on a machine whose cores the server shares, and
//! it moves less than client-timed figures on a noisy machine.

use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::mysql::MySqlConnection;
use sqlx::{ConnectOptions, Connection, Executor};

use jobq::statements::CLAIM_PICK_AHEAD;

use super::cpu::CpuMeter;
use super::median::median;
use super::rowcost::{finish_sql, list_sql, pick_sql, stamp_sql};
use super::{BResult, BenchError, Ctx};

/// Rows per claim: the throughput settings' batch.
pub(crate) const BATCH: usize = 1000;

/// The copy the drains run on.
const TABLE: &str = "bench_tablecpu";

/// The claim token: as long as a worker's.
const TOKEN: &str = "bench-tablecpu:12345:678:1-1795952503:0123456789abcdef";

/// The longest wait for purge after a drain.
const PURGE_PATIENCE: Duration = Duration::from_secs(10);

/// One table's drains.
#[derive(Debug, Clone, Serialize)]
pub struct TableCpu {
    /// Which table.
    pub table: String,
    /// Jobs per drain.
    pub jobs: u64,
    /// Median throughput of the drains, jobs/s.
    pub jobs_per_sec: f64,
    /// Median server CPU per job, µs (None when the server is not on this machine).
    pub server_us_per_job: Option<f64>,
    /// Every drain claimed and finished each job once.
    pub ok: bool,
}

/// How a table is made and finished.
struct Variant {
    name: &'static str,
    /// The ALTER that makes jobq's table into it; `None`: jobq's as it is.
    alter: Option<&'static str>,
    drain: Drain,
}

/// The statements a variant is drained with.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Drain {
    /// jobq's claim and finish.
    Jobq,
    /// jobq's, but the claim does not write the claimant's holdings list (schema 38): jobq's claim
    /// before the list, to measure what writing it costs.
    Unlisted,
    /// The lean table, with its own statements.
    Lean,
}

fn variants() -> Vec<Variant> {
    let v = |name, alter, drain| Variant { name, alter, drain };
    vec![
        v("jobq's table", None, Drain::Jobq),
        v(
            "without due_kinds",
            Some("DROP INDEX due_kinds"),
            Drain::Jobq,
        ),
        v(
            "with state_claim (schemas 34-40)",
            Some("ADD KEY state_claim (state, claim, finished_at)"),
            Drain::Jobq,
        ),
        v(
            "rare_state on finished_at (schemas 39-41)",
            Some("DROP KEY rare_state, ADD KEY rare_state (rare_state, finished_at)"),
            Drain::Jobq,
        ),
        v("claim without the holdings list", None, Drain::Unlisted),
        v(
            "without the 5 unique/debounce indexes",
            Some(
                "DROP INDEX unique_slot, DROP INDEX debounce_slot, DROP INDEX unique_key, \
                 DROP INDEX unique_live_kind, DROP INDEX debounce_pending_kind",
            ),
            Drain::Jobq,
        ),
        v("the lean table", None, Drain::Lean),
    ]
}

/// Every table, `min(rounds, 3)` drains each, the tables taking turns.
pub(crate) async fn run(ctx: &Ctx) -> BResult<Vec<TableCpu>> {
    let opts = jobq::ConnectConfig::new(&ctx.url)?.connect_options();
    let mut conn = opts.connect().await?;
    for s in jobq::statements::SESSION_SETUP {
        conn.execute(s).await?;
    }
    // The stamp writes the claimant's holdings row, which a worker's registration makes.
    sqlx::query(jobq::statements::HOLD)
        .bind(TOKEN)
        .execute(&mut conn)
        .await?;
    let jobs = (ctx.cfg.raw_jobs * 5).max(BATCH as u64);
    let variants = variants();
    let mut seen: Vec<(Vec<f64>, Vec<f64>, bool)> =
        vec![(Vec::new(), Vec::new(), true); variants.len()];
    for _ in 0..ctx.cfg.rounds.clamp(1, 3) {
        for (i, v) in variants.iter().enumerate() {
            make_table(&mut conn, v).await?;
            fill(&mut conn, v, jobs).await?;
            ctx.settle().await?;
            let history = ctx.purge_backlog().await?;
            let meter = CpuMeter::start(ctx.server_pid.as_deref());
            let t0 = Instant::now();
            let drained = if v.drain == Drain::Lean {
                super::lean::drain_table(&mut conn, TABLE, BATCH as u32, CLAIM_PICK_AHEAD).await?
            } else {
                drain(&mut conn, v).await?
            };
            let secs = t0.elapsed().as_secs_f64();
            let until = Instant::now() + PURGE_PATIENCE;
            // The history list counts transactions (two per claim here), not rows.
            while ctx.purge_backlog().await? > history + 2 && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let cpu = meter.finish(jobs);
            let cell = &mut seen[i];
            cell.0.push(jobs as f64 / secs);
            if let Some(s) = cpu.server_us_per_job {
                cell.1.push(s);
            }
            cell.2 &= drained == jobs;
        }
    }
    conn.execute(format!("DROP TABLE IF EXISTS {TABLE}").as_str())
        .await?;
    let _ = conn.close().await;
    let mut out = Vec::new();
    for (v, (rates, cpus, ok)) in variants.iter().zip(seen) {
        let t = TableCpu {
            table: v.name.to_string(),
            jobs,
            jobs_per_sec: median(&rates),
            server_us_per_job: (!cpus.is_empty()).then(|| median(&cpus)),
            ok,
        };
        ctx.progress(format!(
            "drain by table, {}: {:.0} jobs/s, server {} µs/job",
            t.table,
            t.jobs_per_sec,
            t.server_us_per_job
                .map_or("?".into(), |s| format!("{s:.1}"))
        ));
        ctx.check(
            super::Section::Raw,
            format!(
                "drain by table, {}: every job claimed and finished once",
                v.name
            ),
            ok,
            format!("{jobs} jobs per drain"),
        );
        out.push(t);
    }
    Ok(out)
}

/// A fresh table for `v`.
async fn make_table(conn: &mut MySqlConnection, v: &Variant) -> BResult<()> {
    conn.execute(format!("DROP TABLE IF EXISTS {TABLE}").as_str())
        .await?;
    if v.drain == Drain::Lean {
        conn.execute(super::lean::create_sql(TABLE).as_str())
            .await?;
        return Ok(());
    }
    conn.execute(format!("CREATE TABLE {TABLE} LIKE job_queue").as_str())
        .await?;
    if let Some(alter) = v.alter {
        conn.execute(format!("ALTER TABLE {TABLE} {alter}").as_str())
            .await?;
    }
    Ok(())
}

/// `jobs` due rows, in 1,000-row INSERTs.
async fn fill(conn: &mut MySqlConnection, v: &Variant, jobs: u64) -> BResult<()> {
    let kind = if v.drain == Drain::Lean {
        "bench.lean"
    } else {
        "bench.tablecpu"
    };
    let mut left = jobs;
    while left > 0 {
        let n = left.min(1000) as usize;
        let values = vec![format!("('{kind}')"); n].join(",");
        conn.execute(format!("INSERT INTO {TABLE} (kind) VALUES {values}").as_str())
            .await?;
        left -= n as u64;
    }
    conn.execute(format!("ANALYZE TABLE {TABLE}").as_str())
        .await?;
    Ok(())
}

/// Claims and finishes until nothing is due; the rows finished.
async fn drain(conn: &mut MySqlConnection, v: &Variant) -> BResult<u64> {
    let mut finished = 0;
    loop {
        let mut tx = conn.begin().await?;
        let ids: Vec<u64> = sqlx::query_scalar(&pick_sql(TABLE, "bench.tablecpu", BATCH))
            .fetch_all(&mut *tx)
            .await?;
        if ids.is_empty() {
            tx.rollback().await?;
            return Ok(finished);
        }
        if v.drain != Drain::Unlisted {
            tx.execute(list_sql(TOKEN, &ids).as_str()).await?;
        }
        let stamped = tx
            .execute(stamp_sql(TABLE, TOKEN, &ids).as_str())
            .await?
            .rows_affected();
        if stamped != ids.len() as u64 {
            return Err(BenchError::Setup(format!(
                "drain by table ({}): stamped {stamped} of {} locked rows",
                v.name,
                ids.len()
            )));
        }
        tx.commit().await?;
        let finish = finish_sql(TABLE, TOKEN, &ids);
        let done = conn.execute(finish.as_str()).await?.rows_affected();
        if done != ids.len() as u64 {
            return Err(BenchError::Setup(format!(
                "drain by table ({}): finished {done} of {} claimed rows",
                v.name,
                ids.len()
            )));
        }
        finished += done;
    }
}
