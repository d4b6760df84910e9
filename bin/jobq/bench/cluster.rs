//! Cluster: drain throughput on a Galera cluster with one worker per node on 1, 2 and 3 of its nodes,
//! and the certification conflicts that cost, with big claims and with jobq's default small ones; then
//! the two layouts that keep claimers from racing across nodes: a queue per node, and every worker on
//! one node. Runs only when `--cluster URL1,URL2,URL3` names the nodes
//! (scripts/galera.sh prints them); the scratch database is made on the first node and replicated.
//!
//! Conflicts are read from each node's own counters (`wsrep_local_cert_failures`, transactions that
//! failed certification at commit, and `wsrep_local_bf_aborts`, local transactions aborted by a
//! replicated one), summed over the nodes, before and after each drain.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use jobq::{ConnectConfig, Mode};
use sqlx::{ConnectOptions, Connection, Executor, MySqlPool};

use super::drain::{HandlerKind, Work, start_workers};
use super::report::{ClusterReport, ClusterRun, Layout};
use super::{BResult, BenchError, Ctx, Section, Settings, database_url};

const KIND: &str = "bench.cluster";

/// Big claims: each worker takes 50 rows at a time, so claimers meet at the head of the queue rarely.
const BIG_CLAIMS: Settings = Settings {
    workers: 1,
    concurrency: 100,
    batch_size: 50,
};

/// jobq's defaults: claims of up to 10 rows, so claimers on different nodes meet often.
const SMALL_CLAIMS: Settings = Settings::DEFAULTS;

/// The drains, in order: one worker per node on 1, 2 and 3 nodes of one queue, with big and small
/// claims; then with small claims the two layouts that avoid cross-node races: a queue per node, and
/// every worker on one node.
fn plan(nodes: usize) -> Vec<(Layout, Settings, usize)> {
    let mut plan = Vec::new();
    for s in [BIG_CLAIMS, SMALL_CLAIMS] {
        for n in 1..=nodes {
            plan.push((Layout::SharedQueue, s, n));
        }
    }
    if nodes > 1 {
        plan.push((Layout::QueuePerNode, SMALL_CLAIMS, nodes));
        plan.push((Layout::OneWriterNode, SMALL_CLAIMS, nodes));
    }
    plan
}

pub(crate) async fn run(ctx: &Ctx, nodes: &[String]) -> BResult<ClusterReport> {
    let name = format!("jobq_bench_cluster_{:08x}", rand::random::<u32>());
    let mut admin = ConnectConfig::new(&nodes[0])?
        .connect_options()
        .database("")
        .connect()
        .await
        .map_err(|e| BenchError::Setup(format!("cluster: cannot connect to node 1: {e}")))?;
    admin
        .execute(format!("CREATE DATABASE `{name}`").as_str())
        .await?;
    let urls: Vec<String> = nodes.iter().map(|u| database_url(u, &name)).collect();
    let result = measure(ctx, &urls).await;
    let _ = admin
        .execute(format!("DROP DATABASE IF EXISTS `{name}`").as_str())
        .await;
    let _ = admin.close().await;
    result
}

/// Pool sizes of the bench's own connections: one for setup and counting, one per node for its status
/// counters. Neither runs statements concurrently; the workers bring their own pools.
const SETUP_CONNECTIONS: u32 = 2;
const STATUS_CONNECTIONS: u32 = 1;

async fn measure(ctx: &Ctx, urls: &[String]) -> BResult<ClusterReport> {
    let pool =
        jobq::connect(&ConnectConfig::new(&urls[0])?.max_connections(SETUP_CONNECTIONS)).await?;
    jobq::migrate(&pool).await?;
    let mut status = Vec::new();
    for url in urls {
        let config = ConnectConfig::new(url)?;
        let name = config.redacted_url().to_string();
        let pool = jobq::connect(&config.max_connections(STATUS_CONNECTIONS)).await?;
        status.push((name, pool));
    }
    let mut runs = Vec::new();
    for (layout, settings, n) in plan(urls.len()) {
        runs.push(drain_on(ctx, &pool, &status, layout, settings, &urls[..n]).await?);
    }
    pool.close().await;
    for (_, p) in status {
        p.close().await;
    }
    Ok(ClusterReport { runs })
}

/// One drain of `cluster_jobs` jobs laid out as `layout` over `nodes`, checked and counted, its jobs
/// deleted afterwards.
async fn drain_on(
    ctx: &Ctx,
    pool: &MySqlPool,
    status: &[(String, MySqlPool)],
    layout: Layout,
    settings: Settings,
    nodes: &[String],
) -> BResult<ClusterRun> {
    let n = nodes.len();
    let jobs = ctx.cfg.cluster_jobs;
    // Each worker: the node it connects to and the queue it serves.
    let workers: Vec<(&str, String)> = match layout {
        Layout::SharedQueue => nodes
            .iter()
            .map(|u| (u.as_str(), "default".to_string()))
            .collect(),
        Layout::QueuePerNode => nodes
            .iter()
            .enumerate()
            .map(|(i, u)| (u.as_str(), format!("node{}", i + 1)))
            .collect(),
        Layout::OneWriterNode => (0..n)
            .map(|_| (nodes[0].as_str(), "default".to_string()))
            .collect(),
    };
    let queues: Vec<&str> = workers.iter().map(|(_, q)| q.as_str()).collect();
    insert_spread(pool, &queues, jobs).await?;
    pool.execute("ANALYZE TABLE job_queue").await?;
    let before = conflicts(status).await?;
    let t0 = Instant::now();
    let failed = run_workers(ctx, settings, &workers, drain_limit(jobs)).await?;
    let secs = t0.elapsed().as_secs_f64();
    let conflicts = conflicts(status).await? - before;
    let done: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM job_queue WHERE kind = ? AND state = 'done'")
            .bind(KIND)
            .fetch_one(pool)
            .await?;
    let ok = failed.is_none() && done as u64 == jobs;
    ctx.check(
        Section::Cluster,
        format!("cluster drain, {layout}, {settings} on {n} node(s): every job done once"),
        ok,
        match failed {
            Some(e) => format!("a worker failed: {e}"),
            None => format!("{done} of {jobs} done"),
        },
    );
    ctx.progress(format!(
        "cluster: {layout}, {settings}, {n} node(s): {:.0} jobs/s, {conflicts} conflicts",
        jobs as f64 / secs
    ));
    sqlx::query("DELETE FROM job_queue WHERE kind = ?")
        .bind(KIND)
        .execute(pool)
        .await?;
    Ok(ClusterRun {
        layout,
        settings,
        nodes: n as u32,
        workers: workers.len() as u32,
        jobs,
        secs,
        jobs_per_sec: jobs as f64 / secs,
        conflicts,
        conflicts_per_job: conflicts as f64 / jobs as f64,
        ok,
    })
}

/// Inserts `n` jobs of [`KIND`], spread evenly over `queues` (a queue named twice gets twice the share).
async fn insert_spread(pool: &MySqlPool, queues: &[&str], n: u64) -> BResult<()> {
    let rows: Vec<String> = (0..n)
        .map(|i| format!("('{}', '{KIND}')", queues[i as usize % queues.len()]))
        .collect();
    for chunk in rows.chunks(1000) {
        pool.execute(
            format!(
                "INSERT INTO job_queue (queue, kind) VALUES {}",
                chunk.join(",")
            )
            .as_str(),
        )
        .await?;
    }
    Ok(())
}

/// How long one drain of `jobs` jobs may take: long enough for a slow host (200 jobs/s), and a bound
/// on a drain whose node died under it. Its workers then retry that node for as long as they run, as
/// jobq's workers ride out an outage; without a bound the run would wait for them forever. (A node of
/// `scripts/galera.sh` is killed at its memory limit when it grows; see that script.)
fn drain_limit(jobs: u64) -> Duration {
    Duration::from_secs_f64((jobs as f64 / 200.0).max(60.0))
}

/// How long stopped workers get to end, and a node to answer whether it is up.
const STOP_WAIT: Duration = Duration::from_secs(30);
const PROBE_WAIT: Duration = Duration::from_secs(5);

/// Starts the draining `workers` (node URL, queue) and waits for all of them: the last failure, if one
/// failed. A drain still running after `limit` is stopped, and the section fails naming the nodes that
/// do not answer.
async fn run_workers(
    ctx: &Ctx,
    settings: Settings,
    workers: &[(&str, String)],
    limit: Duration,
) -> BResult<Option<String>> {
    let shutdown = ctx.stop.child_token();
    let calls = Arc::new(AtomicU64::new(0));
    let mut running = Vec::new();
    for (url, queue) in workers {
        let work = Work { queue, kind: KIND };
        running.push(
            start_workers(
                url,
                settings,
                Mode::Drain,
                work,
                &HandlerKind::Noop,
                &calls,
                None,
                &shutdown,
            )
            .await?,
        );
    }
    let joined = async {
        let mut failed = None;
        for r in running {
            if let (_, Some(e)) = r.join().await {
                failed = Some(e);
            }
        }
        failed
    };
    let mut joined = std::pin::pin!(joined);
    if let Ok(failed) = tokio::time::timeout(limit, &mut joined).await {
        return Ok(failed);
    }
    shutdown.cancel();
    let _ = tokio::time::timeout(STOP_WAIT, &mut joined).await;
    let mut silent = Vec::new();
    let mut probed = Vec::new();
    for url in workers.iter().map(|(url, _)| *url) {
        if probed.contains(&url) {
            continue;
        }
        probed.push(url);
        if let Err(why) = probe(url).await {
            let name = ConnectConfig::new(url)
                .map_or_else(|_| "?".into(), |c| c.redacted_url().to_string());
            silent.push(format!("{name} ({why})"));
        }
    }
    Err(BenchError::Setup(format!(
        "cluster: a drain did not end within {} s: {}",
        limit.as_secs(),
        match silent.as_slice() {
            [] => "every node answers; the workers were stopped".to_string(),
            _ => format!("not answering: {}", silent.join(", ")),
        }
    )))
}

/// Whether the node at `url` answers a statement within [`PROBE_WAIT`]; why not, if it does not.
async fn probe(url: &str) -> Result<(), String> {
    let answer = async {
        let mut conn = ConnectConfig::new(url)
            .map_err(|e| e.to_string())?
            .connect_options()
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        conn.execute("DO 0").await.map_err(|e| e.to_string())?;
        let _ = conn.close().await;
        Ok(())
    };
    tokio::time::timeout(PROBE_WAIT, answer)
        .await
        .unwrap_or_else(|_| Err(format!("no answer in {} s", PROBE_WAIT.as_secs())))
}

/// Certification failures and brute-force aborts, summed over the nodes (URL without its password, pool).
async fn conflicts(nodes: &[(String, MySqlPool)]) -> BResult<u64> {
    let mut sum = 0;
    for (url, pool) in nodes {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SHOW GLOBAL STATUS WHERE Variable_name IN \
             ('wsrep_local_cert_failures', 'wsrep_local_bf_aborts')",
        )
        .fetch_all(pool)
        .await
        .map_err(|e| {
            BenchError::Setup(format!(
                "cluster: cannot read the conflict counters of the node at {url}: {e}"
            ))
        })?;
        if rows.is_empty() {
            return Err(BenchError::Setup(
                "cluster: a node has no wsrep counters; --cluster must name Galera nodes".into(),
            ));
        }
        sum += rows
            .iter()
            .filter_map(|(_, v)| v.parse::<u64>().ok())
            .sum::<u64>();
    }
    Ok(sum)
}
