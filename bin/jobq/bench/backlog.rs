//! A deep, wide backlog: a million due jobs spread over [`QUEUES`] queues and [`KINDS`] kinds, of which a
//! worker serves [`SERVED_QUEUES`] queues and [`SERVED_KINDS`] kinds.
//!
//! * **Claim cost**: the claim as a worker sends it (jobq's published claim statements, the served queues
//!   in order, the served kinds, one batch) timed on the deep table and on a small table of the same
//!   shape. Each timed claim is rolled back, so every claim of a series sees the same table: what is
//!   compared is the table's size, not how far a drain got. Each table is timed twice: as filled, and
//!   with the served kinds of all served queues but the last marked done, as the workers leave those
//!   queues once they have run them dry (the kinds nobody serves stay at the head of their claim
//!   ranges). The server's `Handler_read_*` counters of the claiming session say how many index
//!   entries a claim read.
//! * **A high-priority job behind a long low-priority backlog**: forever workers run the backlog (all
//!   of it low priority); one job of high priority is enqueued into the first served queue, and the
//!   section counts the claims that were stamped after its INSERT committed and before the one that
//!   took it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::{Connection, Executor, MySqlConnection, Row};

use super::report::{BacklogReport, ClaimCost, UrgentPickup};
use super::{BResult, Ctx, Section, Settings, now_us, quantile};
use jobq::statements::{
    CLAIM_PICK_AHEAD, CLAIM_SELECT, CLAIM_SELECT_PAST_LOCKED, CLAIM_STAMP, CLAIM_STAMP_LISTING,
    HOLDINGS_WRITE, LIST_APART_FROM, placeholders,
};
use jobq::{
    CancellationToken, ConnectConfig, Handlers, JobContext, Mode, NewJob, Worker, WorkerConfig,
    WorkerReport,
};
use sqlx::MySqlPool;
use tokio::task::JoinHandle;

/// Queues the backlog is spread over.
pub(crate) const QUEUES: u32 = 100;
/// Kinds the backlog is spread over.
pub(crate) const KINDS: u32 = 50;
/// Queues the workers serve (the first ones).
pub(crate) const SERVED_QUEUES: u32 = 10;
/// Kinds the workers serve (the first ones).
pub(crate) const SERVED_KINDS: u32 = 20;
/// Priority of the backlog (smaller runs first).
const LOW: i16 = 10;
/// Priority of the job that must get past it.
const HIGH: i16 = -5;
/// How long the high-priority job may take before the section records that it was not picked up.
const URGENT_PATIENCE: Duration = Duration::from_secs(30);

fn queue(i: u32) -> String {
    format!("bl-q{i:02}")
}

fn kind(i: u32) -> String {
    format!("bench.bl.k{i:02}")
}

pub(crate) async fn run(ctx: &Ctx, s: Settings) -> BResult<BacklogReport> {
    let cfg = &ctx.cfg;
    let note = |c: &ClaimCost, state: &str| {
        ctx.progress(format!(
            "backlog {} rows, {state}: {:.2} ms/claim, {:.0} index reads/claim",
            c.rows, c.mean_ms, c.index_reads_per_claim
        ));
    };
    let (small, small_drained) = claim_cost(ctx, cfg.backlog_small_rows, s.batch_size).await?;
    note(&small, "as filled");
    note(&small_drained, "heads drained");
    // The priority run below needs the deep table as filled.
    let (deep, deep_drained) = claim_cost(ctx, cfg.backlog_rows, s.batch_size).await?;
    note(&deep, "as filled");
    note(&deep_drained, "heads drained");
    fill(ctx, cfg.backlog_rows).await?;
    let urgent = urgent_pickup(ctx, s).await?;
    ctx.progress(format!(
        "backlog: high-priority job picked up {:.1} ms after its INSERT, {} claims passed it by",
        urgent.wait_ms, urgent.claims_passed_by
    ));
    ctx.truncate().await?;
    Ok(BacklogReport {
        shape: [QUEUES, KINDS, SERVED_QUEUES, SERVED_KINDS],
        batch: s.batch_size,
        ratio: deep.p50_ms / small.p50_ms,
        drained_ratio: deep_drained.p50_ms / small_drained.p50_ms,
        deep,
        small,
        deep_drained,
        small_drained,
        urgent,
    })
}

/// Empties job_queue and inserts `rows` due jobs of priority [`LOW`], row `i` in queue `i % QUEUES`
/// and kind `i / QUEUES % KINDS`, with 1,000-row INSERTs; then refreshes the statistics.
async fn fill(ctx: &Ctx, rows: u64) -> BResult<f64> {
    ctx.truncate().await?;
    let t0 = Instant::now();
    let mut i = 0u64;
    while i < rows {
        let n = (rows - i).min(1000);
        let values: Vec<String> = (i..i + n)
            .map(|r| {
                let (q, k) = (
                    (r % u64::from(QUEUES)) as u32,
                    (r / u64::from(QUEUES) % u64::from(KINDS)) as u32,
                );
                format!("('{}', '{}', {LOW})", queue(q), kind(k))
            })
            .collect();
        let sql = format!(
            "INSERT INTO job_queue (queue, kind, priority) VALUES {}",
            values.join(",")
        );
        ctx.pool.execute(sql.as_str()).await?;
        i += n;
    }
    ctx.pool.execute("ANALYZE TABLE job_queue").await?;
    let secs = t0.elapsed().as_secs_f64();
    ctx.settle().await?;
    Ok(secs)
}

/// Fills a table of `rows` and times [`BenchConfig::backlog_claims`](super::BenchConfig) claims of
/// `batch` rows on it, each rolled back: first as filled, then with the served kinds of every served
/// queue but the last marked done, as if workers had run them (see [`drain_heads`]).
async fn claim_cost(ctx: &Ctx, rows: u64, batch: u32) -> BResult<(ClaimCost, ClaimCost)> {
    let load_secs = fill(ctx, rows).await?;
    let fresh = time_claims(ctx, rows, load_secs, batch, "as filled").await?;
    drain_heads(ctx).await?;
    let drained = time_claims(ctx, rows, load_secs, batch, "heads drained").await?;
    Ok((fresh, drained))
}

/// Marks done the due jobs of the served kinds in every served queue but the last, as the workers
/// would leave them after running those queues dry: what stays at the head of those queues' claim
/// ranges are the kinds no worker serves, which a claim of the served kinds walks past in each of them
/// before it reaches the last queue.
async fn drain_heads(ctx: &Ctx) -> BResult<()> {
    let queues: Vec<String> = (0..SERVED_QUEUES - 1).map(queue).collect();
    let kinds: Vec<String> = (0..SERVED_KINDS).map(kind).collect();
    let sql = format!(
        "UPDATE job_queue SET state = 'done', finished_at = NOW(6) \
         WHERE state = 'queued' AND queue IN ({}) AND kind IN ({})",
        placeholders(queues.len()),
        placeholders(kinds.len())
    );
    let mut q = sqlx::query(&sql);
    for v in queues.iter().chain(&kinds) {
        q = q.bind(v);
    }
    q.execute(&ctx.pool).await?;
    Ok(())
}

/// Times the claims on the table as it is; `state` names it in the check.
async fn time_claims(
    ctx: &Ctx,
    rows: u64,
    load_secs: f64,
    batch: u32,
    state: &str,
) -> BResult<ClaimCost> {
    let before = not_queued(ctx).await?;
    let mut conn = super::raw::connections(&ctx.url, 1).await?.remove(0);
    // As a worker registers: without its holdings row the stamp would stamp nothing.
    sqlx::query(jobq::statements::HOLD)
        .bind("bench-backlog")
        .execute(&mut conn)
        .await?;
    let claims = ctx.cfg.backlog_claims.max(1);
    let served_kinds: Vec<String> = (0..SERVED_KINDS).map(kind).collect();
    let reads_before = index_reads(&mut conn).await?;
    let disk_before = ctx.global_status("Innodb_buffer_pool_reads").await?;
    let (mut times, mut got) = (Vec::new(), 0u64);
    for _ in 0..claims {
        let t0 = Instant::now();
        got += claim_rolled_back(&mut conn, &served_kinds, batch).await?;
        times.push(t0.elapsed().as_micros() as i64);
    }
    // The counters' own SHOW is one more read of a few rows: not worth subtracting.
    let reads = index_reads(&mut conn).await? - reads_before;
    let disk = ctx.global_status("Innodb_buffer_pool_reads").await? - disk_before;
    let _ = conn.close().await;
    let after = not_queued(ctx).await?;
    ctx.check(
        Section::Backlog,
        format!("backlog {rows} rows, {state}: timed claims left the table as it was"),
        after == before,
        format!("{before} rows not queued before {claims} rolled-back claims, {after} after"),
    );
    let mean_ms = times.iter().sum::<i64>() as f64 / times.len() as f64 / 1e3;
    times.sort_unstable();
    let rows_per_claim = got as f64 / f64::from(claims);
    Ok(ClaimCost {
        rows,
        load_secs,
        claims,
        rows_per_claim,
        mean_ms,
        p50_ms: quantile(&times, 0.5) as f64 / 1e3,
        jobs_per_sec: rows_per_claim / mean_ms * 1e3,
        index_reads_per_claim: reads as f64 / f64::from(claims),
        disk_reads_per_claim: disk as f64 / f64::from(claims),
    })
}

async fn not_queued(ctx: &Ctx) -> BResult<i64> {
    Ok(
        sqlx::query_scalar("SELECT COUNT(*) FROM job_queue WHERE state <> 'queued'")
            .fetch_one(&ctx.pool)
            .await?,
    )
}

/// The session's index reads so far: `Handler_read_key`, `_next`, `_first`, `_rnd_next`, and
/// `Handler_icp_attempts`. The claim's kind filter is checked inside InnoDB on the index entry (index
/// condition pushdown), and an entry it rejects never reaches `Handler_read_next`: only the ICP counter
/// sees the entries of kinds nobody serves that a claim walks past.
async fn index_reads(conn: &mut MySqlConnection) -> BResult<i64> {
    let rows = sqlx::query(
        "SHOW SESSION STATUS WHERE Variable_name IN ('Handler_read_key', 'Handler_read_next', \
         'Handler_read_first', 'Handler_read_rnd_next', 'Handler_icp_attempts')",
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut sum = 0i64;
    for r in rows {
        let v: String = r.try_get(1)?;
        sum += v.parse::<i64>().unwrap_or(0);
    }
    Ok(sum)
}

/// One claim as a worker makes it (the served queues in order until `batch` rows are locked), stamped
/// and rolled back; the rows it would have claimed.
async fn claim_rolled_back(
    conn: &mut MySqlConnection,
    kinds: &[String],
    batch: u32,
) -> Result<u64, sqlx::Error> {
    let kind_list = placeholders(kinds.len());
    let pick = CLAIM_SELECT.sql(&[
        "?", "?", "?", "?", "?", "?", &kind_list, &kind_list, "?", "?", "?", "?", "?",
    ]);
    let walk =
        CLAIM_SELECT_PAST_LOCKED.sql(&["?", "?", "?", "?", "?", "?", &kind_list, &kind_list, "?"]);
    let mut tx = conn.begin().await?;
    let mut ids: Vec<u64> = Vec::new();
    // The pick in each queue; the locking walk only when the picks found nothing anywhere, as a worker
    // claims.
    for walk_past_held in [false, true] {
        for q in (0..SERVED_QUEUES).map(queue) {
            let want = batch - ids.len() as u32;
            let mut query = sqlx::query(if walk_past_held { &walk } else { &pick })
                .bind(&q)
                .bind(&q)
                .bind(&q)
                .bind(&q)
                .bind("bench")
                .bind(&q);
            for k in kinds.iter().chain(kinds) {
                query = query.bind(k);
            }
            let rows = if walk_past_held {
                query.bind(want)
            } else {
                // The whole queue as the slice, as a worker away from a cluster picks.
                query
                    .bind(1)
                    .bind(0)
                    .bind(want * CLAIM_PICK_AHEAD)
                    .bind(&q)
                    .bind(want)
            }
            .fetch_all(&mut *tx)
            .await?;
            for row in &rows {
                ids.push(row.try_get("id")?);
            }
            if ids.len() as u32 >= batch {
                break;
            }
        }
        if !ids.is_empty() {
            break;
        }
    }
    if !ids.is_empty() {
        // As a worker writes the list: apart from the stamp for a large claim, in it for a small one.
        let held = super::raw::held_list(ids.iter().copied());
        let apart = ids.len() >= LIST_APART_FROM;
        if apart {
            sqlx::query(&HOLDINGS_WRITE.sql(&["?", "?", "?"]))
                .bind(false)
                .bind(&held)
                .bind("bench-backlog")
                .execute(&mut *tx)
                .await?;
        }
        let sql = super::raw::stamp_text(
            apart,
            [&CLAIM_STAMP, &CLAIM_STAMP_LISTING],
            &["?", &placeholders(ids.len())],
        );
        let joined = (!apart).then_some(("bench-backlog", held.as_str()));
        let mut q = super::raw::bind_list(sqlx::query(&sql), joined).bind("bench-backlog");
        for id in &ids {
            q = q.bind(*id);
        }
        q.execute(&mut *tx).await?;
    }
    tx.rollback().await?;
    Ok(ids.len() as u64)
}

/// Forever workers on the deep table (left by [`claim_cost`]); once they are busy, one job of priority
/// [`HIGH`] goes into the first served queue.
async fn urgent_pickup(ctx: &Ctx, s: Settings) -> BResult<UrgentPickup> {
    let started: Arc<Mutex<Option<(u64, i64)>>> = Arc::default();
    let watched = Arc::new(AtomicU64::new(0));
    let calls = Arc::new(AtomicU64::new(0));
    let shutdown = ctx.stop.child_token();
    let (handles, pools) = start_watching(ctx, s, &started, &watched, &calls, &shutdown).await?;
    // Busy: a few batches run.
    let busy_by = Instant::now() + Duration::from_secs(10);
    while calls.load(Ordering::Relaxed) < u64::from(s.batch_size) * 3 && Instant::now() < busy_by {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let first = queue(0);
    let served: Vec<String> = (0..SERVED_KINDS).map(kind).collect();
    let backlog = backlog_in(ctx, &first, &served).await?;
    // The id is known only once the INSERT returns: a handler that starts before then is matched
    // below by the row's claimed_at instead.
    let id = jobq::enqueue(
        &ctx.pool,
        &NewJob::new(kind(0)).queue(&first).priority(HIGH),
    )
    .await?
    .0;
    watched.store(id, Ordering::SeqCst);
    let claimed = wait_claimed(ctx, id).await?;
    shutdown.cancel();
    for h in handles {
        let _ = h.await;
    }
    for p in pools {
        p.close().await;
    }
    let report = match claimed {
        Some((claimed_at, run_at)) => {
            let passed: i64 = sqlx::query_scalar(
                "SELECT COUNT(DISTINCT claimed_at) FROM job_queue \
                 WHERE claimed_at > FROM_UNIXTIME(? / 1000000) AND claimed_at < FROM_UNIXTIME(? / 1000000)",
            )
            .bind(run_at)
            .bind(claimed_at)
            .fetch_one(&ctx.pool)
            .await?;
            let start = started
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .map_or(claimed_at, |(_, t)| t + ctx.clock_offset_us);
            UrgentPickup {
                settings: s,
                backlog,
                picked_up: true,
                claims_passed_by: passed as u64,
                wait_ms: (start - run_at) as f64 / 1e3,
            }
        }
        None => UrgentPickup {
            settings: s,
            backlog,
            picked_up: false,
            claims_passed_by: 0,
            wait_ms: URGENT_PATIENCE.as_secs_f64() * 1e3,
        },
    };
    ctx.check(
        Section::Backlog,
        "backlog: the high-priority job was picked up",
        report.picked_up,
        format!(
            "job {id}, {} low-priority jobs ahead in its queue",
            report.backlog
        ),
    );
    Ok(report)
}

/// Forever workers on the served queues and kinds, whose handlers count their calls and note the start
/// of job `watched` (once it is set): [`urgent_pickup`]'s workers.
async fn start_watching(
    ctx: &Ctx,
    s: Settings,
    started: &Arc<Mutex<Option<(u64, i64)>>>,
    watched: &Arc<AtomicU64>,
    calls: &Arc<AtomicU64>,
    shutdown: &CancellationToken,
) -> BResult<(Vec<JoinHandle<jobq::Result<WorkerReport>>>, Vec<MySqlPool>)> {
    let mut handles = Vec::new();
    let mut pools = Vec::new();
    for _ in 0..s.workers {
        let pool = jobq::connect(
            &ConnectConfig::new(&ctx.url)?.max_connections(super::workers::pool_size(s)),
        )
        .await?;
        let mut handlers = Handlers::new();
        for k in (0..SERVED_KINDS).map(kind) {
            let (started, watched, calls) = (started.clone(), watched.clone(), calls.clone());
            handlers = handlers.register(&k, move |job: JobContext| {
                let (started, watched, calls) = (started.clone(), watched.clone(), calls.clone());
                async move {
                    if job.id.0 == watched.load(Ordering::SeqCst) {
                        *started.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some((job.id.0, now_us()));
                    }
                    calls.fetch_add(1, Ordering::Relaxed);
                    Ok::<(), jobq::JobError>(())
                }
            })?;
        }
        let cfg = WorkerConfig {
            concurrency: s.concurrency,
            batch_size: s.batch_size,
            mode: Mode::Forever,
            queues: (0..SERVED_QUEUES).map(queue).collect(),
            ..WorkerConfig::default()
        };
        let worker = Worker::new(pool.clone(), handlers, cfg)?;
        handles.push(tokio::spawn(worker.run(shutdown.clone())));
        pools.push(pool);
    }
    Ok((handles, pools))
}

/// The claim time and `run_at` of job `id` (microseconds, server clock) once a worker has claimed it;
/// `None` if none did within [`URGENT_PATIENCE`].
async fn wait_claimed(ctx: &Ctx, id: u64) -> BResult<Option<(i64, i64)>> {
    let deadline = Instant::now() + URGENT_PATIENCE;
    let claimed = loop {
        let row: Option<(Option<i64>, i64)> = sqlx::query_as(
            "SELECT CAST(UNIX_TIMESTAMP(claimed_at) * 1000000 AS SIGNED), \
             CAST(UNIX_TIMESTAMP(run_at) * 1000000 AS SIGNED) FROM job_queue WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(&ctx.pool)
        .await?;
        match row {
            Some((Some(c), run_at)) => break Some((c, run_at)),
            _ if Instant::now() >= deadline => break None,
            _ => tokio::time::sleep(Duration::from_millis(2)).await,
        }
    };
    Ok(claimed)
}

/// Due jobs of `kinds` waiting in `queue`.
async fn backlog_in(ctx: &Ctx, queue: &str, kinds: &[String]) -> BResult<u64> {
    let sql = format!(
        "SELECT COUNT(*) FROM job_queue WHERE queue = ? AND state = 'queued' AND kind IN ({})",
        placeholders(kinds.len())
    );
    let mut q = sqlx::query_scalar::<_, i64>(&sql).bind(queue);
    for k in kinds {
        q = q.bind(k);
    }
    Ok(q.fetch_one(&ctx.pool).await? as u64)
}
