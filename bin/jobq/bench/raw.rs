//! The raw-SQL limit: jobq's own claim and finish statements in a hand-written loop, with no jobq code
//! around them (no pool, no worker, no tasks per job, no retries beyond the loop's own).
//!
//! The statements are jobq's own, from [`jobq::statements`], the texts the library builds its claim
//! and finish from: the session set-up, the claim (the locking SELECT, then the stamping UPDATE, then
//! COMMIT), and the done finish (one fenced UPDATE per job, or one UPDATE fenced by token and (id,
//! attempt) pairs, in autocommit, in a transaction of its own, or in the next claim's).
//!
//! Each cell drains N jobs with W tasks, each on a connection of its own, claiming B rows at a time and
//! finishing the claimed rows in one of four ways ([`FinishMode`]): one fenced UPDATE per job (jobq's
//! `finish`, used for a lone job and for failures), jobq's batched done finish in autocommit (its
//! finisher's), the same UPDATE between BEGIN and COMMIT (not in jobq), or carried by the next claim's
//! transaction (what jobq's worker does on a deep queue). Every cell checks that each job was claimed
//! once and finished once.

use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::mysql::MySqlConnection;
use sqlx::{ConnectOptions, Connection, Executor, Row};

use jobq::statements::{
    CLAIM_SELECT, CLAIM_SELECT_PAST_LOCKED, CLAIM_STAMP, CLAIM_STAMP_CARRYING,
    CLAIM_STAMP_CARRYING_LISTING, CLAIM_STAMP_LISTING, FINISH_DONE, FINISH_DONE_BATCH,
    HOLDINGS_WRITE, LIST_APART_FROM, MIN_PAIRS, SESSION_SETUP, Statement, pair_placeholders,
    placeholders,
};

use super::cpu::CpuMeter;
use super::wire::Relay;
use super::{BResult, Ctx, RawCell, RawReport, Section};

const KIND: &str = "bench.raw";
const QUEUE: &str = "default";

/// How the raw loop finishes the rows it claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FinishMode {
    /// One fenced `UPDATE … WHERE id = ? AND claim = ? AND attempts = ? AND state = 'running'` per job,
    /// autocommit: what jobq does.
    PerJob,
    /// jobq's `finish_done_batch` per claimed batch: `UPDATE … WHERE claim = ? AND state = 'running' AND
    /// (id, attempts) IN ((?, ?), …)`, autocommit (a lone row gets the per-job UPDATE, as in jobq): what
    /// jobq's finisher sends.
    Batched,
    /// The same UPDATE in a transaction of its own: BEGIN, UPDATE, COMMIT. Not in jobq.
    BatchTx,
    /// One claim's rows finished by the next claim's transaction: BEGIN, the claim's SELECT, one UPDATE
    /// finishing those rows and stamping the new ones (`CLAIM_STAMP_CARRYING`), COMMIT (the last
    /// claim, which finds nothing, commits the last finish with jobq's batched done UPDATE). What jobq's
    /// worker sends on a deep queue.
    Carried,
}

impl FinishMode {
    /// The variant that mirrors what jobq's worker sends for done jobs on a deep queue of short jobs.
    pub(crate) const JOBQ: FinishMode = FinishMode::Carried;

    /// Every variant, in the order the report shows them.
    pub(crate) const ALL: [FinishMode; 4] = [
        FinishMode::PerJob,
        FinishMode::BatchTx,
        FinishMode::Batched,
        FinishMode::Carried,
    ];
}

impl FinishMode {
    pub(crate) fn label(self) -> &'static str {
        match self {
            FinishMode::PerJob => "per-job",
            FinishMode::BatchTx => "batch-tx",
            FinishMode::Batched => "batched",
            FinishMode::Carried => "carried",
        }
    }
}

pub(crate) async fn run(ctx: &Ctx) -> BResult<RawReport> {
    let cfg = &ctx.cfg;
    let mut cells = Vec::new();
    for &finish in &cfg.raw_finishes {
        for &b in &cfg.raw_batches {
            for &w in &cfg.raw_workers {
                let jobs = cell_jobs(cfg.raw_jobs, b);
                ctx.fill(KIND, jobs).await?;
                let cell = cell(ctx, &ctx.url, w, b, finish, jobs).await?;
                ctx.progress(format!(
                    "raw W={w} B={b} {}: {:.0} jobs/s",
                    finish.label(),
                    cell.jobs_per_sec
                ));
                cells.push(cell);
            }
        }
    }
    Ok(RawReport::new(cfg.raw_jobs, cells))
}

/// Jobs drained by a cell: a quarter of `raw_jobs` for one row per claim (the slowest cells by far,
/// where more jobs would add time and no information), twice `raw_jobs` from 100 rows per claim up (the
/// fastest cells, which would otherwise be a handful of claims and noisy).
pub(crate) fn cell_jobs(raw_jobs: u64, batch: u32) -> u64 {
    match batch {
        1 => (raw_jobs / 4).max(100),
        2..100 => raw_jobs,
        _ => raw_jobs * 2,
    }
}

/// Fills the table and drains it with one raw cell's settings.
pub(crate) async fn measure(
    ctx: &Ctx,
    workers: u32,
    batch: u32,
    finish: FinishMode,
    jobs: u64,
) -> BResult<RawCell> {
    ctx.fill(KIND, jobs).await?;
    cell(ctx, &ctx.url, workers, batch, finish, jobs).await
}

/// The commands one raw cell sends per job, counted through a relay (see [`super::wire`]).
pub(crate) async fn wire_profile(
    ctx: &Ctx,
    relay: &Relay,
    workers: u32,
    batch: u32,
    finish: FinishMode,
    jobs: u64,
) -> BResult<(RawCell, super::wire::Commands)> {
    ctx.fill(KIND, jobs).await?;
    let before = relay.counts.snapshot();
    let cell = cell(ctx, &relay.url(&ctx.url), workers, batch, finish, jobs).await?;
    Ok((cell, relay.counts.snapshot().since(&before)))
}

/// Drains `jobs` jobs (already inserted) with `workers` connections claiming `batch` rows at a time.
pub(crate) async fn cell(
    ctx: &Ctx,
    url: &str,
    workers: u32,
    batch: u32,
    finish: FinishMode,
    jobs: u64,
) -> BResult<RawCell> {
    let conns = connections(url, workers).await?;
    let meter = CpuMeter::start(ctx.server_pid.as_deref());
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for (w, conn) in conns.into_iter().enumerate() {
        let token = format!(
            "bench-raw:{}:{w}:1-0:{:016x}",
            std::process::id(),
            rand::random::<u64>()
        );
        // Each pick reads a claim's worth for each connection, as a worker's does for each claimer.
        let ahead = jobq::statements::pick_ahead(workers);
        tasks.push(tokio::spawn(drain_one(conn, token, batch, ahead, finish)));
    }
    let (sum, failure) = join_all(tasks, jobs).await;
    let TaskResult {
        ids: mut claimed,
        finished,
        claims,
        claim_time,
    } = sum;
    let secs = t0.elapsed().as_secs_f64();
    let cpu = meter.finish(jobs);
    let n_claimed = claimed.len() as u64;
    claimed.sort_unstable();
    claimed.dedup();
    let unique = claimed.len() as u64;
    let what = format!("raw W={workers} B={batch} {}", finish.label());
    let loop_ok = failure.is_none() && n_claimed == jobs && unique == jobs && finished == jobs;
    ctx.check(
        Section::Raw,
        format!("{what}: claimed and finished once"),
        loop_ok,
        match &failure {
            Some(e) => format!("a task failed: {e}"),
            None => format!(
                "{jobs} jobs: {n_claimed} claims of {unique} distinct rows, {finished} fenced finishes"
            ),
        },
    );
    let db_ok = ctx
        .verify_once(Section::Raw, &format!("{what}: rows"), KIND, jobs, None)
        .await?;
    let (claim_stmts, finish_stmts) = super::statement_counts(&ctx.pool, KIND).await?;
    Ok(RawCell {
        rows_per_claim: jobs as f64 / claim_stmts.max(1) as f64,
        rows_per_finish: jobs as f64 / finish_stmts.max(1) as f64,
        workers,
        batch,
        finish,
        jobs,
        secs,
        jobs_per_sec: jobs as f64 / secs,
        claim_ms: claim_time.as_secs_f64() * 1e3 / claims.max(1) as f64,
        cpu,
        ok: loop_ok && db_ok,
    })
}

/// `n` connections to `url`, their sessions set up as jobq sets up its own.
pub(crate) async fn connections(url: &str, n: u32) -> BResult<Vec<MySqlConnection>> {
    let opts = jobq::ConnectConfig::new(url)?.connect_options();
    let mut conns = Vec::new();
    for _ in 0..n {
        let mut c = opts.connect().await?;
        for s in SESSION_SETUP {
            c.execute(s).await?;
        }
        conns.push(c);
    }
    Ok(conns)
}

/// Waits for every task: what they did, summed, and the last failure.
async fn join_all(
    tasks: Vec<tokio::task::JoinHandle<Result<TaskResult, sqlx::Error>>>,
    jobs: u64,
) -> (TaskResult, Option<String>) {
    let mut sum = TaskResult {
        ids: Vec::with_capacity(jobs as usize),
        finished: 0,
        claims: 0,
        claim_time: Duration::ZERO,
    };
    let mut failure = None;
    for t in tasks {
        match t.await {
            Ok(Ok(r)) => {
                sum.ids.extend(r.ids);
                sum.finished += r.finished;
                sum.claims += r.claims;
                sum.claim_time += r.claim_time;
            }
            Ok(Err(e)) => failure = Some(e.to_string()),
            Err(e) => failure = Some(e.to_string()),
        }
    }
    (sum, failure)
}

struct TaskResult {
    ids: Vec<u64>,
    finished: u64,
    claims: u64,
    claim_time: Duration,
}

async fn drain_one(
    mut conn: MySqlConnection,
    token: String,
    batch: u32,
    ahead: u32,
    finish: FinishMode,
) -> Result<TaskResult, sqlx::Error> {
    let mut r = TaskResult {
        ids: Vec::new(),
        finished: 0,
        claims: 0,
        claim_time: Duration::ZERO,
    };
    // The rows the next claim finishes first (carried finishes only).
    let mut carry: Vec<(u64, u16)> = Vec::new();
    // As a worker registers: its stamps write its holdings row.
    sqlx::query(jobq::statements::HOLD)
        .bind(&token)
        .execute(&mut conn)
        .await?;
    loop {
        let c0 = Instant::now();
        let (rows, carried) = retried!(claim(&mut conn, &token, batch, ahead, &carry).await)?;
        r.claim_time += c0.elapsed();
        r.claims += 1;
        r.finished += carried;
        carry.clear();
        if rows.is_empty() {
            break;
        }
        if finish == FinishMode::Carried {
            carry.clone_from(&rows);
        } else {
            r.finished += retried!(finish_rows(&mut conn, &token, &rows, finish).await)?;
        }
        r.ids.extend(rows.iter().map(|&(id, _)| id));
    }
    // As a worker's stop does: a list left behind would be read by every later look at running jobs
    // (the dashboard's overview at 1,000,000 rows took 0.8 s reading 319,075 ids of such lists).
    sqlx::query(jobq::statements::UNHOLD)
        .bind(&token)
        .execute(&mut conn)
        .await?;
    let _ = conn.close().await;
    Ok(r)
}

/// Finishes the rows of one claim; returns how many were finished. Each call is all or nothing (a
/// transaction, or a single statement), except per-job finishes, which retry each statement themselves so
/// that a retry of the whole never recounts.
async fn finish_rows(
    conn: &mut MySqlConnection,
    token: &str,
    rows: &[(u64, u16)],
    finish: FinishMode,
) -> Result<u64, sqlx::Error> {
    match finish {
        FinishMode::BatchTx if rows.len() > 1 => finish_batch_tx(conn, token, rows).await,
        FinishMode::Batched if rows.len() > 1 => done_batch(conn, token, rows).await,
        FinishMode::PerJob | FinishMode::BatchTx | FinishMode::Batched => {
            let mut finished = 0;
            let sql = FINISH_DONE.sql(&["?", "?", "?"]);
            for &(id, attempt) in rows {
                let one = || sqlx::query(&sql).bind(id).bind(token).bind(attempt);
                finished += retried!(one().execute(&mut *conn).await)?.rows_affected();
            }
            Ok(finished)
        }
        // Made by the next claim instead (see `drain_one`).
        FinishMode::Carried => Ok(0),
    }
}

/// jobq's batched done UPDATE for the rows of one claim in a transaction of its own; returns how many
/// were finished.
async fn finish_batch_tx(
    conn: &mut MySqlConnection,
    token: &str,
    items: &[(u64, u16)],
) -> Result<u64, sqlx::Error> {
    let mut tx = conn.begin().await?;
    let n = done_batch(&mut tx, token, items).await?;
    tx.commit().await?;
    Ok(n)
}

/// (id, attempt) pairs as jobq sends them: at least [`MIN_PAIRS`], the last repeated.
fn as_sent(pairs: &[(u64, u16)]) -> Vec<(u64, u16)> {
    let mut sent = pairs.to_vec();
    while let Some(&last) = sent.last()
        && sent.len() < MIN_PAIRS
    {
        sent.push(last);
    }
    sent
}

/// jobq's batched done UPDATE over `items`, in the caller's transaction; the rows it changed.
async fn done_batch(
    conn: &mut MySqlConnection,
    token: &str,
    items: &[(u64, u16)],
) -> Result<u64, sqlx::Error> {
    let items = as_sent(items);
    let sql = FINISH_DONE_BATCH.sql(&["?", &pair_placeholders(items.len())]);
    let mut q = sqlx::query(&sql).bind(token);
    for &(id, attempt) in &items {
        q = q.bind(id).bind(attempt);
    }
    Ok(q.execute(conn).await?.rows_affected())
}

/// Claim step 1 as the library takes it: the pick locked by primary key, and the walk when that
/// locked nothing.
async fn lock_due(
    tx: &mut MySqlConnection,
    batch: u32,
    ahead: u32,
) -> Result<Vec<sqlx::mysql::MySqlRow>, sqlx::Error> {
    // The queue's due rows: the parameters both statements share, up to their LIMIT.
    let due = |sql| {
        sqlx::query(sql)
            .bind(QUEUE)
            .bind(QUEUE)
            .bind(QUEUE)
            .bind(QUEUE)
            .bind("bench")
            .bind(QUEUE)
            .bind(KIND)
            .bind(KIND)
    };
    let pick = CLAIM_SELECT.sql(&[
        "?", "?", "?", "?", "?", "?", "?", "?", "?", "?", "?", "?", "?",
    ]);
    // The whole queue as the slice, as a worker away from a cluster picks.
    let rows = due(&pick)
        .bind(1)
        .bind(0)
        .bind(batch * ahead)
        .bind(QUEUE)
        .bind(batch)
        .fetch_all(&mut *tx)
        .await?;
    if !rows.is_empty() {
        return Ok(rows);
    }
    let walk = CLAIM_SELECT_PAST_LOCKED.sql(&["?", "?", "?", "?", "?", "?", "?", "?", "?"]);
    due(&walk).bind(batch).fetch_all(tx).await
}

/// One claim transaction, finishing the rows of `carry` (the previous claim's, as done) in it; returns
/// (id, attempt) of the rows claimed and how many rows it finished.
async fn claim(
    conn: &mut MySqlConnection,
    token: &str,
    batch: u32,
    ahead: u32,
    carry: &[(u64, u16)],
) -> Result<(Vec<(u64, u16)>, u64), sqlx::Error> {
    let mut tx = conn.begin().await?;
    let rows = lock_due(&mut tx, batch, ahead).await?;
    if rows.is_empty() {
        if carry.is_empty() {
            tx.rollback().await?;
            return Ok((Vec::new(), 0));
        }
        let finished = done_batch(&mut tx, token, carry).await?;
        tx.commit().await?;
        return Ok((Vec::new(), finished));
    }
    let mut claimed = Vec::with_capacity(rows.len());
    for row in &rows {
        let id: u64 = row.try_get("id")?;
        let attempts: u16 = row.try_get("attempts")?;
        claimed.push((id, attempts + 1));
    }
    // The holdings list, as a worker writes it: the rows it may still run (the ones this claim
    // finishes) and the rows it stamps.
    let held = held_list(carry.iter().chain(&claimed).map(|&(id, _)| id));
    // Apart from the stamp for a large claim, in it for a small one, as a worker writes it.
    let apart = claimed.len() >= LIST_APART_FROM;
    if apart {
        sqlx::query(&HOLDINGS_WRITE.sql(&["?", "?", "?"]))
            .bind(false)
            .bind(&held)
            .bind(token)
            .execute(&mut *tx)
            .await?;
    }
    let joined = (!apart).then_some((token, held.as_str()));
    if carry.is_empty() {
        let sql = stamp_text(
            apart,
            [&CLAIM_STAMP, &CLAIM_STAMP_LISTING],
            &["?", &placeholders(claimed.len())],
        );
        let mut q = bind_list(sqlx::query(&sql), joined).bind(token);
        for &(id, _) in &claimed {
            q = q.bind(id);
        }
        q.execute(&mut *tx).await?;
        tx.commit().await?;
        return Ok((claimed, 0));
    }
    let carry = as_sent(carry);
    let sql = stamp_text(
        apart,
        [&CLAIM_STAMP_CARRYING, &CLAIM_STAMP_CARRYING_LISTING],
        &[
            "?",
            "?",
            &pair_placeholders(carry.len()),
            &placeholders(claimed.len()),
        ],
    );
    let mut q = bind_list(sqlx::query(&sql), joined).bind(token).bind(token);
    for &(id, attempt) in &carry {
        q = q.bind(id).bind(attempt);
    }
    for &(id, _) in &claimed {
        q = q.bind(id);
    }
    let changed = q.execute(&mut *tx).await?.rows_affected();
    tx.commit().await?;
    // A joined list's holdings row is one more matched row.
    let finished = changed.saturating_sub(claimed.len() as u64 + u64::from(!apart));
    Ok((claimed, finished))
}

/// A stamp's text with `gaps` for its own parameters: `single` when the list is written `apart`, else
/// `joined`, whose list parameters come first (the token of the holdings row, the flag, the list).
pub(crate) fn stamp_text(apart: bool, [single, joined]: [&Statement; 2], gaps: &[&str]) -> String {
    if apart {
        single.sql(gaps)
    } else {
        joined.sql(&[&["?", "?", "?"][..], gaps].concat())
    }
}

/// The parameters a joined stamp begins with (the token of the holdings row, keep nothing, the list),
/// when `joined` gives them.
pub(crate) fn bind_list<'q>(
    q: sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    joined: Option<(&'q str, &'q str)>,
) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
    match joined {
        Some((token, list)) => q.bind(token).bind(false).bind(list),
        None => q,
    }
}

/// A holdings list as the claim writes it: a JSON array of ids.
pub(crate) fn held_list(ids: impl Iterator<Item = u64>) -> String {
    let ids: Vec<String> = ids.map(|id| id.to_string()).collect();
    format!("[{}]", ids.join(","))
}
