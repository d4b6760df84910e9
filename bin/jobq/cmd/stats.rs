//! `jobq stats`.

use std::collections::BTreeMap;

use anyhow::Result;
use chrono::Utc;
use jobq::State;

use super::Env;
use crate::out::{out, outln};

pub async fn run(env: &Env) -> Result<()> {
    let pool = env.migrated_pool(1).await?;
    let stats = jobq::db::admin::stats(&pool).await?;

    let mut by_queue: BTreeMap<&str, BTreeMap<&str, i64>> = BTreeMap::new();
    for c in &stats.counts {
        *by_queue
            .entry(&c.queue)
            .or_default()
            .entry(&c.state)
            .or_default() += c.count;
    }
    out!("{:<20}", "QUEUE")?;
    for s in State::ALL {
        out!(" {:>10}", s.as_str().to_uppercase())?;
    }
    outln!(" {:>10} {:>12}", "DUE", "OLDEST DUE")?;
    if by_queue.is_empty() {
        outln!("(no jobs)")?;
    }
    for (queue, states) in &by_queue {
        out!("{queue:<20}")?;
        for s in State::ALL {
            out!(" {:>10}", states.get(s.as_str()).copied().unwrap_or(0))?;
        }
        match stats.lag.iter().find(|l| l.queue == *queue) {
            Some(l) => outln!(" {:>10} {:>11.1}s", l.due, l.oldest_due_secs)?,
            None => outln!(" {:>10} {:>12}", 0, "-")?,
        }
    }

    outln!()?;
    if stats.processes.is_empty() {
        outln!("no live jobq processes")?;
        return Ok(());
    }
    outln!(
        "{:<11} {:<20} {:>8} {:<20} {:>9} {:>10}  CLAIM TOKEN",
        "ROLE",
        "HOST",
        "PID",
        "QUEUES",
        "UP",
        "HEARTBEAT"
    )?;
    let now = Utc::now();
    for p in &stats.processes {
        outln!(
            "{:<11} {:<20} {:>8} {:<20} {:>8}s {:>9}s  {}",
            p.role,
            p.host,
            p.pid,
            p.queues,
            (now - p.started_at).num_seconds(),
            (now - p.heartbeat_at).num_seconds(),
            p.token
        )?;
    }
    Ok(())
}
