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
use std::time::Instant;

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
        status.push(
            jobq::connect(&ConnectConfig::new(url)?.max_connections(STATUS_CONNECTIONS)).await?,
        );
    }
    let mut runs = Vec::new();
    for (layout, settings, n) in plan(urls.len()) {
        runs.push(drain_on(ctx, &pool, &status, layout, settings, &urls[..n]).await?);
    }
    pool.close().await;
    for p in status {
        p.close().await;
    }
    Ok(ClusterReport { runs })
}

/// One drain of `cluster_jobs` jobs laid out as `layout` over `nodes`, checked and counted, its jobs
/// deleted afterwards.
async fn drain_on(
    ctx: &Ctx,
    pool: &MySqlPool,
    status: &[MySqlPool],
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
    let failed = run_workers(ctx, settings, &workers).await?;
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

/// Starts the draining `workers` (node URL, queue) and waits for all of them: the last failure, if one
/// failed.
async fn run_workers(
    ctx: &Ctx,
    settings: Settings,
    workers: &[(&str, String)],
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
    let mut failed = None;
    for r in running {
        if let (_, Some(e)) = r.join().await {
            failed = Some(e);
        }
    }
    Ok(failed)
}

/// Certification failures and brute-force aborts, summed over the nodes.
async fn conflicts(nodes: &[MySqlPool]) -> BResult<u64> {
    let mut sum = 0;
    for pool in nodes {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SHOW GLOBAL STATUS WHERE Variable_name IN \
             ('wsrep_local_cert_failures', 'wsrep_local_bf_aborts')",
        )
        .fetch_all(pool)
        .await?;
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
