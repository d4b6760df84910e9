//! Where a job's server time goes: the server's time per row of each statement a job meets (its INSERT,
//! the claim, the done finish), on jobq's table and on copies of it without one part each (an index, the
//! payload's JSON check) or with the index of running and done rows that schemas 34 to 40 had, so every
//! run shows what each part of the schema costs a job.
//!
//! One connection sends batches of [`ROWS`] rows through the three statements in jobq's forms (the
//! claim's pick-then-lock, `HOLDINGS_WRITE` and `CLAIM_STAMP`, `FINISH_DONE_BATCH`), with two payloads: `{}` and a
//! 2 KB object. The tables take turns within each round, so a slow moment of this noisy machine falls on
//! all of them. Figures are client-timed round trips per row (one connection, nothing else running), so
//! they include the protocol; the differences between tables are the server's.

use std::time::Instant;

use serde::Serialize;
use sqlx::mysql::MySqlConnection;
use sqlx::{ConnectOptions, Connection, Executor};

use jobq::statements::{CLAIM_PICK_AHEAD, CLAIM_STAMP, FINISH_DONE_BATCH, HOLDINGS_WRITE};

use super::median::median;
use super::{BResult, BenchError, Ctx};

/// Rows per statement: about what a claim of the throughput settings carries at half the sustainable
/// rate, and enough that a statement's fixed cost is small per row.
const ROWS: usize = 100;

/// The copy the statements run on.
const TABLE: &str = "bench_rowcost";

/// The claim token the statements stamp: as long as a worker's.
const TOKEN: &str = "bench-rowcost:12345:678:1-1795952503:0123456789abcdef";

/// What one row cost each statement, in µs, on one table with one payload.
#[derive(Debug, Clone, Serialize)]
pub struct RowCost {
    /// Which table: jobq's, or jobq's with one part less or more.
    pub table: String,
    /// The payload's size in bytes.
    pub payload_bytes: usize,
    /// The INSERT, per row.
    pub insert_us: f64,
    /// The claim (BEGIN, the locking SELECT, the stamp, COMMIT), per row.
    pub claim_us: f64,
    /// The done finish of the claimed rows, per row.
    pub finish_us: f64,
    /// Batches measured.
    pub batches: usize,
}

impl RowCost {
    /// The three together.
    pub fn total_us(&self) -> f64 {
        self.insert_us + self.claim_us + self.finish_us
    }
}

/// The tables: a name and the ALTER that makes jobq's table into it (`None`: jobq's as it is).
fn tables(mariadb: bool) -> Vec<(&'static str, Option<&'static str>)> {
    let mut t = vec![
        ("jobq's table", None),
        ("without due_kinds", Some("DROP INDEX due_kinds")),
        (
            "with state_claim (schemas 34-40)",
            Some("ADD KEY state_claim (state, claim, finished_at)"),
        ),
        (
            "without the 5 unique/debounce indexes",
            Some(
                "DROP INDEX unique_slot, DROP INDEX debounce_slot, DROP INDEX unique_key, \
                 DROP INDEX unique_live_kind, DROP INDEX debounce_pending_kind",
            ),
        ),
    ];
    // MySQL's JSON type is checked as it is written, not on every UPDATE of the row.
    if mariadb {
        t.push((
            "without the payload's JSON check",
            Some(
                "MODIFY payload LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL \
                 DEFAULT '{}'",
            ),
        ));
    }
    t
}

/// Every table with both payloads, `ctx.cfg.rounds` rounds of batches each.
pub(crate) async fn run(ctx: &Ctx, mariadb: bool) -> BResult<Vec<RowCost>> {
    let opts = jobq::ConnectConfig::new(&ctx.url)?.connect_options();
    let mut conn = opts.connect().await?;
    for s in jobq::statements::SESSION_SETUP {
        conn.execute(s).await?;
    }
    let batches = (ctx.cfg.raw_jobs as usize / ROWS).clamp(3, 50);
    let payloads = ["{}".to_string(), two_kb_payload()];
    let tables = tables(mariadb);
    // Per table and payload: the per-row times of every batch, over all rounds.
    let mut times: Vec<[Vec<f64>; 3]> = vec![Default::default(); tables.len() * payloads.len()];
    for _ in 0..ctx.cfg.rounds.max(1) {
        for (t, (_, alter)) in tables.iter().enumerate() {
            for (p, payload) in payloads.iter().enumerate() {
                make_table(&mut conn, *alter).await?;
                let cell = &mut times[t * payloads.len() + p];
                for _ in 0..batches {
                    let [i, c, f] = batch(&mut conn, payload).await?;
                    cell[0].push(i);
                    cell[1].push(c);
                    cell[2].push(f);
                }
            }
        }
    }
    conn.execute(format!("DROP TABLE IF EXISTS {TABLE}").as_str())
        .await?;
    let _ = conn.close().await;
    let mut out = Vec::new();
    for (t, (name, _)) in tables.iter().enumerate() {
        for (p, payload) in payloads.iter().enumerate() {
            let [i, c, f] = &times[t * payloads.len() + p];
            let cost = RowCost {
                table: (*name).to_string(),
                payload_bytes: payload.len(),
                insert_us: median(i),
                claim_us: median(c),
                finish_us: median(f),
                batches: i.len(),
            };
            ctx.progress(format!(
                "row cost, {name}, {} B payload: insert {:.1} µs, claim {:.1}, finish {:.1}",
                cost.payload_bytes, cost.insert_us, cost.claim_us, cost.finish_us
            ));
            out.push(cost);
        }
    }
    Ok(out)
}

/// A JSON object of about 2 KB, as an application's payload might be.
fn two_kb_payload() -> String {
    let fields: Vec<String> = (0..70)
        .map(|i| format!("\"field{i:02}\": \"{}\"", "v".repeat(20)))
        .collect();
    format!("{{{}}}", fields.join(", "))
}

/// A fresh copy of jobq's table, changed by `alter`.
async fn make_table(conn: &mut MySqlConnection, alter: Option<&str>) -> BResult<()> {
    conn.execute(format!("DROP TABLE IF EXISTS {TABLE}").as_str())
        .await?;
    conn.execute(format!("CREATE TABLE {TABLE} LIKE job_queue").as_str())
        .await?;
    if let Some(alter) = alter {
        conn.execute(format!("ALTER TABLE {TABLE} {alter}").as_str())
            .await?;
    }
    // The stamp writes the claimant's holdings row, which a worker's registration makes.
    sqlx::query(jobq::statements::HOLD)
        .bind(TOKEN)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// One batch: INSERT [`ROWS`] rows, claim them, finish them. µs per row of each.
async fn batch(conn: &mut MySqlConnection, payload: &str) -> BResult<[f64; 3]> {
    let per_row = |t: Instant| t.elapsed().as_secs_f64() * 1e6 / ROWS as f64;
    let values = vec![format!("('bench.rowcost', '{payload}')"); ROWS].join(", ");
    let t = Instant::now();
    conn.execute(format!("INSERT INTO {TABLE} (kind, payload) VALUES {values}").as_str())
        .await?;
    let insert = per_row(t);

    let t = Instant::now();
    let mut tx = conn.begin().await?;
    let ids: Vec<u64> = sqlx::query_scalar(&pick_sql(TABLE, "bench.rowcost", ROWS))
        .fetch_all(&mut *tx)
        .await?;
    // Literal lists, sent as text: a prepared statement per list would time its prepare as well.
    tx.execute(list_sql(TOKEN, &ids).as_str()).await?;
    tx.execute(stamp_sql(TABLE, TOKEN, &ids).as_str()).await?;
    tx.commit().await?;
    let claim = per_row(t);

    let finish = finish_sql(TABLE, TOKEN, &ids);
    let t = Instant::now();
    let done = conn.execute(finish.as_str()).await?;
    let finish_us = per_row(t);
    if done.rows_affected() != ROWS as u64 || ids.len() != ROWS {
        return Err(BenchError::Setup(format!(
            "row cost: claimed {} and finished {} of {ROWS} rows",
            ids.len(),
            done.rows_affected()
        )));
    }
    Ok([insert, claim, finish_us])
}

/// jobq's claim, step 1 (the pick, then the lock by primary key) on the copy `table`, for `rows` rows
/// of `kind` in the default queue.
pub(crate) fn pick_sql(table: &str, kind: &str, rows: usize) -> String {
    format!(
        "SELECT j.id FROM (SELECT id FROM {table} FORCE INDEX (claim_order) \
         WHERE ready_queue = 'default' AND run_at <= NOW(6) AND kind IN ('{kind}') \
         ORDER BY priority, run_at, id LIMIT {}) pick STRAIGHT_JOIN {table} j FORCE INDEX (PRIMARY) \
         ON j.id = pick.id WHERE j.ready_queue = 'default' AND j.run_at <= NOW(6) LIMIT {rows} \
         FOR UPDATE SKIP LOCKED",
        rows as u32 * CLAIM_PICK_AHEAD
    )
}

/// jobq's claim, step 2a ([`HOLDINGS_WRITE`]), with literal values: the claimant's holdings list (its
/// row must exist, see [`jobq::statements::HOLD`]) set to the claim's rows.
pub(crate) fn list_sql(token: &str, ids: &[u64]) -> String {
    let held = format!("'{}'", super::raw::held_list(ids.iter().copied()));
    HOLDINGS_WRITE.sql(&["FALSE", &held, &format!("'{token}'")])
}

/// jobq's claim, step 2b ([`CLAIM_STAMP`]) on the copy `table`, with literal values.
pub(crate) fn stamp_sql(table: &str, token: &str, ids: &[u64]) -> String {
    CLAIM_STAMP
        .sql(&[&format!("'{token}'"), &id_list(ids)])
        .replace("job_queue", table)
}

/// jobq's batched done finish ([`FINISH_DONE_BATCH`]) of first attempts on the copy `table`, with
/// literal values.
pub(crate) fn finish_sql(table: &str, token: &str, ids: &[u64]) -> String {
    let pairs = ids
        .iter()
        .map(|id| format!("({id}, 1)"))
        .collect::<Vec<_>>()
        .join(", ");
    FINISH_DONE_BATCH
        .sql(&[&format!("'{token}'"), &pairs])
        .replace("job_queue", table)
}

fn id_list(ids: &[u64]) -> String {
    ids.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
