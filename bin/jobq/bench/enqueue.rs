//! Enqueue: rows per second inserted one at a time and 1,000 at a time, through the library
//! ([`jobq::enqueue`], [`jobq::enqueue_many`]) and through plain SQL, all on one connection. The four
//! are interleaved, and in the full run measured twice, keeping the better of each, so slow drift of a
//! shared machine does not favour one.

use std::time::Instant;

use sqlx::MySqlConnection;

use super::{BResult, Ctx, EnqueueReport, Section};
use jobq::NewJob;

const KIND: &str = "bench.enqueue";

#[derive(Clone, Copy)]
enum Way {
    LibSingle,
    SqlSingle,
    LibMulti,
    SqlMulti,
}

pub(crate) async fn run(ctx: &Ctx) -> BResult<EnqueueReport> {
    let rounds = if ctx.cfg.quick { 1 } else { 2 };
    let mut best = [0.0f64; 4];
    let mut conn = ctx.pool.acquire().await?;
    for _ in 0..rounds {
        for (i, way) in [Way::SqlSingle, Way::LibSingle, Way::SqlMulti, Way::LibMulti]
            .into_iter()
            .enumerate()
        {
            let n = match way {
                Way::LibSingle | Way::SqlSingle => ctx.cfg.enqueue_single,
                Way::LibMulti | Way::SqlMulti => ctx.cfg.enqueue_multi,
            };
            ctx.truncate().await?;
            let t0 = Instant::now();
            insert(&mut conn, way, n).await?;
            let rate = n as f64 / t0.elapsed().as_secs_f64();
            let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue WHERE kind = ?")
                .bind(KIND)
                .fetch_one(&mut *conn)
                .await?;
            ctx.check(
                Section::Enqueue,
                format!("enqueue {}: rows", label(way)),
                count as u64 == n,
                format!("{count} of {n} rows inserted"),
            );
            let slot = [1, 0, 3, 2][i];
            best[slot] = best[slot].max(rate);
        }
    }
    ctx.progress(format!(
        "enqueue rows/s: library single {:.0}, SQL single {:.0}, library 1,000-row {:.0}, SQL 1,000-row {:.0}",
        best[0], best[1], best[2], best[3]
    ));
    Ok(EnqueueReport {
        single_rows: ctx.cfg.enqueue_single,
        multi_rows: ctx.cfg.enqueue_multi,
        library_single: best[0],
        sql_single: best[1],
        library_multi: best[2],
        sql_multi: best[3],
    })
}

fn label(way: Way) -> &'static str {
    match way {
        Way::LibSingle => "jobq::enqueue, one row at a time",
        Way::SqlSingle => "plain SQL, one row at a time",
        Way::LibMulti => "jobq::enqueue_many, 1,000 rows a statement",
        Way::SqlMulti => "plain SQL, 1,000 rows a statement",
    }
}

async fn insert(conn: &mut MySqlConnection, way: Way, n: u64) -> BResult<()> {
    match way {
        Way::LibSingle => {
            for _ in 0..n {
                jobq::enqueue(&mut *conn, &NewJob::new(KIND)).await?;
            }
        }
        Way::SqlSingle => {
            for _ in 0..n {
                sqlx::query("INSERT INTO job_queue (kind, payload) VALUES (?, ?)")
                    .bind(KIND)
                    .bind("{}")
                    .execute(&mut *conn)
                    .await?;
            }
        }
        Way::LibMulti => {
            let mut left = n;
            while left > 0 {
                let k = left.min(1000);
                let jobs: Vec<NewJob> = (0..k).map(|_| NewJob::new(KIND)).collect();
                jobq::enqueue_many(&mut *conn, &jobs).await?;
                left -= k;
            }
        }
        Way::SqlMulti => {
            let mut left = n;
            while left > 0 {
                let k = left.min(1000) as usize;
                let sql = format!(
                    "INSERT INTO job_queue (kind, payload) VALUES {}",
                    vec!["(?, ?)"; k].join(", ")
                );
                let mut q = sqlx::query(&sql);
                for _ in 0..k {
                    q = q.bind(KIND).bind("{}");
                }
                q.execute(&mut *conn).await?;
                left -= k as u64;
            }
        }
    }
    Ok(())
}
