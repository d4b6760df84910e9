//! Enqueue: rows per second inserted one at a time and 1,000 at a time, through the library
//! ([`jobq::enqueue`], [`jobq::enqueue_many`]) and through plain SQL, all on one connection. Each
//! library way runs right beside its plain-SQL twin, which goes first alternating by round, and the
//! full run makes [`ROUNDS`] rounds: the shares are medians of each round's pair, as the drain's head to
//! head compares, so a shared machine's drift between one pass and the next moves neither side alone
//! (one pass of each, the best of two, moved the 1,000-row share between 84 % and 120 %).

use std::time::Instant;

use sqlx::MySqlConnection;

use super::median::median;
use super::{BResult, Ctx, EnqueueReport, Section};
use jobq::NewJob;

const KIND: &str = "bench.enqueue";

/// Rounds of the full run (a quick run makes one).
const ROUNDS: u32 = 5;

/// The four ways, in the order of the report's rates.
#[derive(Clone, Copy)]
enum Way {
    LibSingle = 0,
    SqlSingle = 1,
    LibMulti = 2,
    SqlMulti = 3,
}

pub(crate) async fn run(ctx: &Ctx) -> BResult<EnqueueReport> {
    let rounds = if ctx.cfg.quick { 1 } else { ROUNDS };
    // rates[way][round], indexed by `Way`.
    let mut rates = [const { Vec::<f64>::new() }; 4];
    let mut conn = ctx.pool.acquire().await?;
    for round in 0..rounds {
        // Each pair (library, plain SQL) runs back to back, which goes first alternating by round.
        let pairs = [
            [Way::LibSingle, Way::SqlSingle],
            [Way::LibMulti, Way::SqlMulti],
        ];
        for mut pair in pairs {
            if round % 2 == 1 {
                pair.reverse();
            }
            for way in pair {
                let rate = measure(ctx, &mut conn, way).await?;
                rates[way as usize].push(rate);
            }
        }
    }
    let ratios = |lib: Way, sql: Way| {
        let r: Vec<f64> = rates[lib as usize]
            .iter()
            .zip(&rates[sql as usize])
            .map(|(l, s)| l / s)
            .collect();
        median(&r)
    };
    let report = EnqueueReport {
        single_rows: ctx.cfg.enqueue_single,
        multi_rows: ctx.cfg.enqueue_multi,
        rounds,
        library_single: median(&rates[Way::LibSingle as usize]),
        sql_single: median(&rates[Way::SqlSingle as usize]),
        library_multi: median(&rates[Way::LibMulti as usize]),
        sql_multi: median(&rates[Way::SqlMulti as usize]),
        single_ratio: ratios(Way::LibSingle, Way::SqlSingle),
        multi_ratio: ratios(Way::LibMulti, Way::SqlMulti),
    };
    ctx.progress(format!(
        "enqueue rows/s (medians of {rounds}): library single {:.0}, SQL single {:.0}, library 1,000-row {:.0}, \
         SQL 1,000-row {:.0}",
        report.library_single, report.sql_single, report.library_multi, report.sql_multi
    ));
    Ok(report)
}

/// One pass of `way` into an empty table: rows per second, the rows counted.
async fn measure(ctx: &Ctx, conn: &mut MySqlConnection, way: Way) -> BResult<f64> {
    let n = match way {
        Way::LibSingle | Way::SqlSingle => ctx.cfg.enqueue_single,
        Way::LibMulti | Way::SqlMulti => ctx.cfg.enqueue_multi,
    };
    ctx.truncate().await?;
    let t0 = Instant::now();
    insert(conn, way, n).await?;
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
    Ok(rate)
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
