//! The lean-schema limit: the same raw loop as [`super::raw`] against the smallest table the
//! claim-token design needs, beside jobq's own schema, so every run shows what jobq's schema costs.
//!
//! The lean table has only what a claim and a finish touch: a numeric state, the queue, priority and due
//! time in one claim index `(state, queue, priority, run_at, id)`, a 16-byte claim token per claim
//! (`(claim, state)` indexed), the attempt, and two times; finished rows are kept, as in jobq. Against
//! jobq's schema it lacks the stored generated `ready_queue`, the `finished (state, finished_at)` index,
//! the kinds in the claim index, the cancel column, the attempt history and the per-row attempt fence: a
//! claim moves each row in two secondary indexes, and the done finish of a whole claim is one `UPDATE …
//! WHERE claim = ? AND state = 1`.

use std::time::Instant;

use serde::Serialize;
use sqlx::mysql::MySqlConnection;
use sqlx::{ConnectOptions, Connection, Executor, Row};

use super::{BResult, Ctx, Section};

/// The lean table's name.
const TABLE: &str = "bench_lean_queue";

// language=MySQL
const CREATE: &str = "CREATE TABLE IF NOT EXISTS bench_lean_queue (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  kind VARCHAR(64) NOT NULL,
  queue VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'default',
  payload JSON NOT NULL DEFAULT ('{}'),
  priority SMALLINT NOT NULL DEFAULT 0,
  run_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  state TINYINT NOT NULL DEFAULT 0,
  attempt INT NOT NULL DEFAULT 0,
  claim VARBINARY(16) NULL,
  claimed_at DATETIME(6) NULL,
  finished_at DATETIME(6) NULL,
  KEY claim_order (state, queue, priority, run_at, id),
  KEY claimant (claim, state)
) ENGINE = InnoDB";

// language=MySQL
const LOCK_DUE: &str = "SELECT id FROM bench_lean_queue FORCE INDEX (claim_order) \
     WHERE state = 0 AND queue = 'default' AND run_at <= NOW(6) \
     ORDER BY priority, run_at, id LIMIT ? FOR UPDATE SKIP LOCKED";

/// The claim's first step in jobq's form (`jobq::statements::CLAIM_SELECT`): the due rows picked from
/// the claim index without locks, then locked by primary key; [`LOCK_DUE`], the locking walk, only when
/// none of them could be locked. Measured against the walk alone (`--sections raw --raw-workers 2
/// --raw-batches 1000 --raw-jobs 50000`, two rounds each): 30,148–32,618 jobs/s against 19,598–21,130.
// language=MySQL
const LOCK_PICKED: &str = "SELECT j.id FROM (SELECT id FROM bench_lean_queue FORCE INDEX (claim_order) \
     WHERE state = 0 AND queue = 'default' AND run_at <= NOW(6) \
     ORDER BY priority, run_at, id LIMIT ?) p STRAIGHT_JOIN bench_lean_queue j FORCE INDEX (PRIMARY) \
     ON j.id = p.id WHERE j.state = 0 AND j.run_at <= NOW(6) LIMIT ? FOR UPDATE SKIP LOCKED";

// language=MySQL
const FINISH: &str =
    "UPDATE bench_lean_queue SET state = 2, finished_at = NOW(6) WHERE claim = ? AND state = 1";

/// One lean cell.
#[derive(Debug, Clone, Serialize)]
pub struct LeanCell {
    /// Connections.
    pub workers: u32,
    /// Rows per claim.
    pub batch: u32,
    /// Jobs drained.
    pub jobs: u64,
    /// How long it took.
    pub secs: f64,
    /// Throughput.
    pub jobs_per_sec: f64,
    /// Every job claimed and finished exactly once.
    pub ok: bool,
}

/// One cell per raw worker count at the raw grid's largest claim, where the limit is.
pub(crate) async fn run(ctx: &Ctx) -> BResult<Vec<LeanCell>> {
    let batch = ctx.cfg.raw_batches.iter().copied().max().unwrap_or(1000);
    let jobs = super::raw::cell_jobs(ctx.cfg.raw_jobs, batch);
    ctx.pool.execute(CREATE).await?;
    let mut cells = Vec::new();
    for &w in &ctx.cfg.raw_workers {
        let cell = cell(ctx, w, batch, jobs).await?;
        ctx.progress(format!(
            "raw lean schema W={w} B={batch}: {:.0} jobs/s",
            cell.jobs_per_sec
        ));
        cells.push(cell);
    }
    ctx.pool
        .execute("DROP TABLE IF EXISTS bench_lean_queue")
        .await?;
    Ok(cells)
}

/// One lean cell on a table created for it and dropped after (the head-to-head's re-measurement).
pub(crate) async fn measure(ctx: &Ctx, workers: u32, batch: u32, jobs: u64) -> BResult<LeanCell> {
    ctx.pool.execute(CREATE).await?;
    let c = cell(ctx, workers, batch, jobs).await;
    ctx.pool
        .execute("DROP TABLE IF EXISTS bench_lean_queue")
        .await?;
    c
}

async fn fill(ctx: &Ctx, jobs: u64) -> BResult<()> {
    ctx.pool.execute("TRUNCATE TABLE bench_lean_queue").await?;
    let mut left = jobs;
    while left > 0 {
        let n = left.min(1000) as usize;
        let sql = format!(
            "INSERT INTO bench_lean_queue (kind) VALUES {}",
            vec!["('bench.lean')"; n].join(",")
        );
        ctx.pool.execute(sql.as_str()).await?;
        left -= n as u64;
    }
    ctx.pool.execute("ANALYZE TABLE bench_lean_queue").await?;
    Ok(())
}

async fn cell(ctx: &Ctx, workers: u32, batch: u32, jobs: u64) -> BResult<LeanCell> {
    fill(ctx, jobs).await?;
    let opts = jobq::ConnectConfig::new(&ctx.url)?.connect_options();
    let mut conns = Vec::new();
    for _ in 0..workers {
        let mut c = opts.connect().await?;
        for s in jobq::statements::SESSION_SETUP {
            c.execute(s).await?;
        }
        conns.push(c);
    }
    let t0 = Instant::now();
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|c| tokio::spawn(drain_one(c, batch, jobq::statements::pick_ahead(workers))))
        .collect();
    let mut claimed = 0u64;
    let mut failure = None;
    for t in tasks {
        match t.await {
            Ok(Ok(n)) => claimed += n,
            Ok(Err(e)) => failure = Some(e.to_string()),
            Err(e) => failure = Some(e.to_string()),
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let row = sqlx::query(
        "SELECT CAST(SUM(state = 2) AS SIGNED) AS done, CAST(SUM(attempt <> 1) AS SIGNED) AS twice \
         FROM bench_lean_queue",
    )
    .fetch_one(&ctx.pool)
    .await?;
    let (done, twice): (i64, i64) = (row.try_get("done")?, row.try_get("twice")?);
    let ok = failure.is_none() && claimed == jobs && done as u64 == jobs && twice == 0;
    ctx.check(
        Section::Raw,
        format!("raw lean schema W={workers} B={batch}: claimed and finished once"),
        ok,
        match failure {
            Some(e) => format!("a task failed: {e}"),
            None => {
                format!("{jobs} jobs: {claimed} claimed, {done} done, {twice} not claimed once")
            }
        },
    );
    Ok(LeanCell {
        workers,
        batch,
        jobs,
        secs,
        jobs_per_sec: jobs as f64 / secs,
        ok,
    })
}

/// Claims and finishes until nothing is due; the rows it claimed.
async fn drain_one(mut conn: MySqlConnection, batch: u32, ahead: u32) -> Result<u64, sqlx::Error> {
    let claimed = drain_table(&mut conn, TABLE, batch, ahead).await;
    let _ = conn.close().await;
    claimed
}

/// [`CREATE`] for a table named `table`.
pub(crate) fn create_sql(table: &str) -> String {
    CREATE.replace(TABLE, table)
}

/// Claims and finishes the lean table `table` (made by [`create_sql`]) on `conn` until nothing is due,
/// each pick reading `ahead` claims' worth; the rows it claimed.
pub(crate) async fn drain_table(
    conn: &mut MySqlConnection,
    table: &str,
    batch: u32,
    ahead: u32,
) -> Result<u64, sqlx::Error> {
    let finish = FINISH.replace(TABLE, table);
    let mut claimed = 0;
    loop {
        let token: [u8; 16] = rand::random();
        let n = retried!(claim(&mut *conn, table, &token, batch, ahead).await)?;
        if n == 0 {
            break;
        }
        // Idempotent: a retry after a deadlock finishes what is still running under the token.
        retried!(
            sqlx::query(&finish)
                .bind(&token[..])
                .execute(&mut *conn)
                .await
        )?;
        claimed += n;
    }
    Ok(claimed)
}

/// One claim: lock the first due rows, stamp them with the claim's token, commit.
async fn claim(
    conn: &mut MySqlConnection,
    table: &str,
    token: &[u8; 16],
    batch: u32,
    ahead: u32,
) -> Result<u64, sqlx::Error> {
    let mut tx = conn.begin().await?;
    let mut ids: Vec<u64> = sqlx::query_scalar(&LOCK_PICKED.replace(TABLE, table))
        .bind(batch * ahead)
        .bind(batch)
        .fetch_all(&mut *tx)
        .await?;
    if ids.is_empty() {
        ids = sqlx::query_scalar(&LOCK_DUE.replace(TABLE, table))
            .bind(batch)
            .fetch_all(&mut *tx)
            .await?;
    }
    if ids.is_empty() {
        tx.rollback().await?;
        return Ok(0);
    }
    let list = ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    sqlx::query(&format!(
        "UPDATE {table} SET state = 1, claim = ?, claimed_at = NOW(6), attempt = attempt + 1 \
         WHERE id IN ({list})"
    ))
    .bind(&token[..])
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(ids.len() as u64)
}
