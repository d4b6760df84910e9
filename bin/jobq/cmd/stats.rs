//! `jobq stats`.

use std::collections::BTreeMap;

use anyhow::Result;
use chrono::Utc;
use jobq::State;

use super::Env;

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
    print!("{:<20}", "QUEUE");
    for s in State::ALL {
        print!(" {:>10}", s.as_str().to_uppercase());
    }
    println!(" {:>10} {:>12}", "DUE", "OLDEST DUE");
    if by_queue.is_empty() {
        println!("(no jobs)");
    }
    for (queue, states) in &by_queue {
        print!("{queue:<20}");
        for s in State::ALL {
            print!(" {:>10}", states.get(s.as_str()).copied().unwrap_or(0));
        }
        match stats.lag.iter().find(|l| l.queue == *queue) {
            Some(l) => println!(" {:>10} {:>11.1}s", l.due, l.oldest_due_secs),
            None => println!(" {:>10} {:>12}", 0, "-"),
        }
    }

    println!();
    if stats.processes.is_empty() {
        println!("no live jobq processes");
        return Ok(());
    }
    println!(
        "{:<11} {:<20} {:>8} {:<20} {:>9} {:>10}  CLAIM TOKEN",
        "ROLE", "HOST", "PID", "QUEUES", "UP", "HEARTBEAT"
    );
    let now = Utc::now();
    for p in &stats.processes {
        println!(
            "{:<11} {:<20} {:>8} {:<20} {:>8}s {:>9}s  {}",
            p.role,
            p.host,
            p.pid,
            p.queues,
            (now - p.started_at).num_seconds(),
            (now - p.heartbeat_at).num_seconds(),
            p.token
        );
    }
    Ok(())
}
