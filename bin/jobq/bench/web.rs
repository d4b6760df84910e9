//! Dashboard: how fast `jobq web` answers with a long history in job_queue. The pages are served by the
//! library's router on a local port and fetched over HTTP, as a browser would, each view timed from
//! connect to the last byte.
//!
//! The history is bulk-loaded like the big-table section's, but spread the way a busy queue leaves it:
//! finished times over the last two hours (so the chart's first view counts half of it), five kinds, one
//! row in a hundred dead with an error, a few hundred waiting.

use std::time::{Duration, Instant};

use sqlx::Executor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::report::{WebPage, WebReport};
use super::{BResult, BenchError, Ctx, Section, quantile};

/// The pages timed: what an operator opens first, and the filtered lists that must stay fast.
fn pages(mid_id: u64, some_id: u64) -> Vec<(&'static str, String)> {
    vec![
        ("overview", "/".into()),
        ("overview JSON", "/api/overview".into()),
        ("jobs, newest", "/jobs".into()),
        ("jobs, dead", "/jobs?state=dead".into()),
        (
            "jobs, one kind, deep page",
            format!("/jobs?kind=bench.web.3&before={mid_id}"),
        ),
        (
            "jobs, dead with error text",
            "/jobs?state=dead&error=timeout".into(),
        ),
        (
            "jobs, done with error text",
            "/jobs?state=done&error=timeout".into(),
        ),
        ("one job", format!("/jobs/{some_id}")),
    ]
}

pub(crate) async fn run(ctx: &Ctx) -> BResult<WebReport> {
    let t0 = Instant::now();
    let rows = load(ctx, ctx.cfg.web_rows).await?;
    let load_secs = t0.elapsed().as_secs_f64();
    ctx.progress(format!("web: loaded {rows} rows in {load_secs:.1} s"));
    let (min_id, max_id): (u64, u64) = sqlx::query_as("SELECT MIN(id), MAX(id) FROM job_queue")
        .fetch_one(&ctx.pool)
        .await?;

    let pool = jobq::connect(&jobq::ConnectConfig::new(&ctx.url)?.max_connections(8)).await?;
    let app = jobq::web::router(pool.clone(), jobq::web::WebConfig::default())?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| BenchError::Setup(format!("web: cannot listen on 127.0.0.1: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| BenchError::Setup(format!("web: {e}")))?;
    let stop = ctx.stop.child_token();
    let server = tokio::spawn(
        axum::serve(listener, app)
            .with_graceful_shutdown(stop.clone().cancelled_owned())
            .into_future(),
    );

    let mut timed = Vec::new();
    for (name, path) in pages((min_id + max_id) / 2, min_id + 7) {
        let first_ms = fetch(&addr.to_string(), &path).await?;
        let mut views = Vec::new();
        for _ in 0..ctx.cfg.web_views.max(1) {
            views.push((fetch(&addr.to_string(), &path).await? * 1e3) as i64);
        }
        views.sort_unstable();
        let ms = |q: f64| quantile(&views, q) as f64 / 1e3;
        let p50_ms = ms(0.5);
        ctx.progress(format!(
            "web: {name}: first {first_ms:.1} ms, p50 {p50_ms:.1} ms"
        ));
        timed.push(WebPage {
            name: name.into(),
            path,
            first_ms,
            p50_ms,
            p95_ms: ms(0.95),
            views: views.len() as u32,
        });
    }
    check_figures(ctx, &addr.to_string()).await?;
    stop.cancel();
    let _ = server.await;
    pool.close().await;
    ctx.truncate().await?;
    Ok(WebReport {
        rows,
        load_secs,
        pages: timed,
    })
}

/// The ids the dashboard counts done rows among: the newest this many (`DONE_WINDOW` in
/// src/db/gauges.rs).
const DONE_WINDOW: u64 = 20_000;

/// The overview's figures against the tables: the done count (the done rows among the newest
/// [`DONE_WINDOW`] ids, marked capped when older rows exist) and the last hour's done jobs (the workers' counts, over
/// the same minutes). Tried three times, since a minute may turn between the two reads.
async fn check_figures(ctx: &Ctx, addr: &str) -> BResult<()> {
    let mut detail = String::new();
    let mut ok = false;
    for _ in 0..3 {
        let (_, body) = get(addr, "/api/overview").await?;
        let o: serde_json::Value = serde_json::from_str(&body)
            .map_err(|e| BenchError::Setup(format!("web: /api/overview is not JSON: {e}")))?;
        let (done, older, hour): (i64, i64, i64) = sqlx::query_as(&format!(
            "SELECT (SELECT COUNT(*) FROM job_queue WHERE state = 'done' \
                       AND id > (SELECT COALESCE(MAX(id), 0) - {window} FROM job_queue)), \
                    (SELECT COUNT(*) FROM job_queue \
                       WHERE id <= (SELECT COALESCE(MAX(id), 0) - {window} FROM job_queue)), \
                    (SELECT CAST(COALESCE(SUM(done), 0) AS SIGNED) FROM jobq_done_minutes \
                       WHERE minute >= FLOOR(UNIX_TIMESTAMP(NOW(6)) / 60) - 59)",
            window = DONE_WINDOW
        ))
        .fetch_one(&ctx.pool)
        .await?;
        let state = o["states"]
            .as_array()
            .and_then(|a| a.iter().find(|s| s["state"] == "done"));
        let shown = state.and_then(|s| s["count"].as_i64()).unwrap_or(-1);
        let capped = state.and_then(|s| s["capped"].as_bool());
        let shown_hour: i64 = o["last_hour"]
            .as_array()
            .map_or(-1, |a| a.iter().filter_map(|m| m["done"].as_i64()).sum());
        detail = format!(
            "done shown {shown} (capped: {capped:?}) of {done} among the newest {DONE_WINDOW} ids \
             ({older} rows older); last hour shown {shown_hour}, counted {hour}"
        );
        ok = shown == done && capped == Some(older > 0) && shown_hour == hour;
        if ok {
            break;
        }
    }
    ctx.check(
        Section::Web,
        "overview figures match the tables",
        ok,
        detail,
    );
    Ok(())
}

/// `GET path` over a new connection; the milliseconds until the whole answer was read. Anything but a
/// 200 is an error naming the page.
async fn fetch(addr: &str, path: &str) -> BResult<f64> {
    Ok(get(addr, path).await?.0)
}

/// `GET path`: the milliseconds until the whole answer was read, and the body.
async fn get(addr: &str, path: &str) -> BResult<(f64, String)> {
    let t = Instant::now();
    let fail = |why: String| BenchError::Setup(format!("web: GET {path}: {why}"));
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| fail(e.to_string()))?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .map_err(|e| fail(e.to_string()))?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut answer))
        .await
        .map_err(|_| fail("no answer within 60 s".into()))?
        .map_err(|e| fail(e.to_string()))?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let head = String::from_utf8_lossy(&answer[..answer.len().min(64)]).into_owned();
    if !head.starts_with("HTTP/1.1 200") {
        return Err(fail(format!(
            "answered {:?}",
            head.lines().next().unwrap_or("")
        )));
    }
    let text = String::from_utf8_lossy(&answer);
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((ms, body))
}

/// Empties the table and fills it with about `target` rows (see the module docs); returns how many.
async fn load(ctx: &Ctx, target: u64) -> BResult<u64> {
    ctx.truncate().await?;
    let seed = target.clamp(1, 1000);
    let values: Vec<String> = (0..seed)
        .map(|i| {
            let dead = i % 100 == 0;
            format!(
                "('bench.web.{}', '{}', {}, {}, NOW(6) - INTERVAL {} SECOND)",
                i % 5,
                if dead { "dead" } else { "done" },
                if dead { 20 } else { 1 },
                if dead {
                    "'handler timed out after 30 s'"
                } else {
                    "NULL"
                },
                (i * 7) % 7200
            )
        })
        .collect();
    ctx.pool
        .execute(
            format!(
                "INSERT INTO job_queue (kind, state, attempts, last_error, finished_at) VALUES {}",
                values.join(",")
            )
            .as_str(),
        )
        .await?;
    let mut have = seed;
    while have < target {
        let k = have.min(target - have).min(100_000);
        // Copies land at other times in the same two hours, so every minute gets its share.
        sqlx::query(
            "INSERT INTO job_queue (kind, state, attempts, last_error, finished_at) \
             SELECT kind, state, attempts, last_error, \
                    NOW(6) - INTERVAL ((id * 7919) % 7200) SECOND FROM job_queue LIMIT ?",
        )
        .bind(k)
        .execute(&ctx.pool)
        .await?;
        have += k;
    }
    // The chart's done jobs are what the workers counted (schema 40): as workers that finished these
    // rows would have written them, instead of what the earlier sections' workers wrote.
    ctx.pool.execute("DELETE FROM jobq_done_minutes").await?;
    ctx.pool
        .execute(
            "INSERT INTO jobq_done_minutes (minute, holder, done) \
             SELECT FLOOR(UNIX_TIMESTAMP(finished_at) / 60), 'bench.web', COUNT(*) FROM job_queue \
             WHERE state = 'done' GROUP BY 1",
        )
        .await?;
    // A few hundred waiting jobs, so the queue lines have something to count.
    super::insert_plain(&ctx.pool, "bench.web.waiting", (target / 2000).max(1)).await?;
    ctx.pool.execute("ANALYZE TABLE job_queue").await?;
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue")
        .fetch_one(&ctx.pool)
        .await?;
    Ok(n as u64)
}
