//! Measures the two ways to claim a batch of jobs on MySQL/MariaDB, on jobq's own schema:
//!
//! * `skip-locked`: `SELECT … FOR UPDATE SKIP LOCKED` then `UPDATE … WHERE id IN (…)`, one transaction
//!   (what jobq does);
//! * `update-limit`: `UPDATE … ORDER BY … LIMIT n` stamping a per-claim token, then `SELECT` the rows
//!   carrying it.
//!
//! Each claimed row is then finished with jobq's fenced UPDATE. The example creates a scratch database,
//! fills it for each (strategy, claimers, batch) cell, drains it with that many concurrent claimers, and
//! prints jobs/s and the mean claim time.
//!
//! ```sh
//! cargo run --release --example claim_strategies -- mysql://root@127.0.0.1:3306/test
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use jobq::db::{self, ConnectConfig};
use sqlx::{Executor, MySqlPool, Row};

const JOBS: usize = 20_000;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "mysql://root@127.0.0.1:3306/test".into());
    let admin = db::connect(&ConnectConfig::new(&base)).await?;
    admin
        .execute("DROP DATABASE IF EXISTS jobq_claim_strategies")
        .await?;
    admin
        .execute("CREATE DATABASE jobq_claim_strategies")
        .await?;
    let url = format!("{}/jobq_claim_strategies", base.rsplit_once('/').unwrap().0);
    let pool = db::connect(&ConnectConfig::new(&url).max_connections(10)).await?;
    db::migrate::migrate(&pool).await?;

    println!("{JOBS} jobs per cell; jobs/s (mean claim ms)");
    println!(
        "{:<13} {:>3} {:>5} {:>10} {:>9}",
        "strategy", "W", "B", "jobs/s", "claim ms"
    );
    for batch in [1usize, 10, 100] {
        for claimers in [1usize, 4, 8] {
            for strategy in ["skip-locked", "update-limit"] {
                fill(&pool).await?;
                let (rate, claim_ms) = drain(&pool, strategy, claimers, batch).await?;
                println!("{strategy:<13} {claimers:>3} {batch:>5} {rate:>10.0} {claim_ms:>9.2}");
            }
        }
    }
    pool.close().await;
    admin.execute("DROP DATABASE jobq_claim_strategies").await?;
    Ok(())
}

async fn fill(pool: &MySqlPool) -> Result<(), sqlx::Error> {
    pool.execute("TRUNCATE job_queue").await?;
    let values = vec!["('bench')"; 1000].join(",");
    for _ in 0..JOBS / 1000 {
        pool.execute(format!("INSERT INTO job_queue (kind) VALUES {values}").as_str())
            .await?;
    }
    pool.execute("ANALYZE TABLE job_queue").await?;
    Ok(())
}

async fn drain(
    pool: &MySqlPool,
    strategy: &'static str,
    claimers: usize,
    batch: usize,
) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let done = Arc::new(AtomicU64::new(0));
    let claim_us = Arc::new(AtomicU64::new(0));
    let claims = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..claimers {
        let pool = pool.clone();
        let (done, claim_us, claims) = (done.clone(), claim_us.clone(), claims.clone());
        tasks.push(tokio::spawn(async move {
            let mut seq = 0u64;
            loop {
                seq += 1;
                let token = format!("w{w}-{seq}");
                let c0 = Instant::now();
                let ids = loop {
                    let r = match strategy {
                        "skip-locked" => claim_skip_locked(&pool, &token, batch).await,
                        _ => claim_update_limit(&pool, &token, batch).await,
                    };
                    match r {
                        Ok(ids) => break ids,
                        Err(e) if is_retryable(&e) => {
                            tokio::time::sleep(Duration::from_millis(2)).await
                        }
                        Err(e) => panic!("{e}"),
                    }
                };
                claim_us.fetch_add(c0.elapsed().as_micros() as u64, Ordering::Relaxed);
                claims.fetch_add(1, Ordering::Relaxed);
                if ids.is_empty() {
                    break;
                }
                for id in &ids {
                    sqlx::query(
                        "UPDATE job_queue SET state = 'done', claim = NULL, finished_at = NOW(6) \
                         WHERE id = ? AND claim = ? AND attempts = 1 AND state = 'running'",
                    )
                    .bind(id)
                    .bind(&token)
                    .execute(&pool)
                    .await
                    .unwrap();
                }
                done.fetch_add(ids.len() as u64, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let secs = t0.elapsed().as_secs_f64();
    let n = done.load(Ordering::Relaxed);
    assert_eq!(n as usize, JOBS, "every job finished once");
    let mean_ms =
        claim_us.load(Ordering::Relaxed) as f64 / claims.load(Ordering::Relaxed) as f64 / 1000.0;
    Ok((n as f64 / secs, mean_ms))
}

fn is_retryable(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c == "40001" || c == "HY000")
}

async fn claim_skip_locked(
    pool: &MySqlPool,
    token: &str,
    batch: usize,
) -> Result<Vec<u64>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let ids: Vec<u64> = sqlx::query_scalar(
        "SELECT id FROM job_queue FORCE INDEX (claim_order) \
         WHERE ready_queue = 'default' AND run_at <= NOW(6) AND kind IN ('bench') \
         ORDER BY priority, run_at, id LIMIT ? FOR UPDATE SKIP LOCKED",
    )
    .bind(batch as u32)
    .fetch_all(&mut *tx)
    .await?;
    if !ids.is_empty() {
        let list = ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        sqlx::query(&format!(
            "UPDATE job_queue SET state = 'running', claim = ?, claimed_at = NOW(6), \
             attempts = attempts + 1 WHERE id IN ({list})"
        ))
        .bind(token)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(ids)
}

async fn claim_update_limit(
    pool: &MySqlPool,
    token: &str,
    batch: usize,
) -> Result<Vec<u64>, sqlx::Error> {
    let n = sqlx::query(
        "UPDATE job_queue FORCE INDEX (claim_order) SET state = 'running', claim = ?, \
         claimed_at = NOW(6), attempts = attempts + 1 \
         WHERE ready_queue = 'default' AND run_at <= NOW(6) AND kind IN ('bench') \
         ORDER BY priority, run_at, id LIMIT ?",
    )
    .bind(token)
    .bind(batch as u32)
    .execute(pool)
    .await?
    .rows_affected();
    if n == 0 {
        return Ok(Vec::new());
    }
    let rows = sqlx::query("SELECT id FROM job_queue WHERE claim = ? AND state = 'running'")
        .bind(token)
        .fetch_all(pool)
        .await?;
    Ok(rows.iter().map(|r| r.get::<u64, _>(0)).collect())
}
