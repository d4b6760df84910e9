//! `jobq stats`.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use chrono::Utc;
use clap::Args;
use jobq::State;
use jobq::{Jobs, stats::Stats, stats::Unserved};

use super::Env;
use crate::options::{Format, parse_duration};
use crate::out::{age, out, outln};

#[derive(Debug, Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub format: Format,
    /// Count the jobs that have waited for other jobs longer than this (default: the config's
    /// `[reaper] long_wait`, else 1h).
    #[arg(long, value_parser = parse_duration)]
    pub long_wait: Option<std::time::Duration>,
}

pub async fn run(env: &Env, args: StatsArgs) -> Result<()> {
    if env.serves_many() {
        return run_many(env, args).await;
    }
    let stats = Jobs::new(env.migrated_pool(super::SERIAL_CONNECTIONS).await?)
        .stats_waiting_over(long_wait(env, &args))
        .await?;
    if args.format.json {
        return crate::out::json(&with_unserved(&stats));
    }
    text(&stats)
}

/// A config of several databases without `--database`: each database's figures in turn, under its
/// name (with `--json`, one object keyed by database name).
async fn run_many(env: &Env, args: StatsArgs) -> Result<()> {
    let mut all = BTreeMap::new();
    for name in env.config.databases.keys() {
        let db = Env::section(&env.config, env.config_path.clone(), name)?;
        let pool = db
            .migrated_pool(super::SERIAL_CONNECTIONS)
            .await
            .with_context(|| format!("database {name}"))?;
        let stats = Jobs::new(pool.clone())
            .stats_waiting_over(long_wait(&db, &args))
            .await?;
        pool.close().await;
        if args.format.json {
            all.insert(name.as_str(), serde_json::to_value(with_unserved(&stats))?);
        } else {
            outln!(
                "== database {name} ({}) ==",
                db.connect_config()?.redacted_url()
            )?;
            text(&stats)?;
            outln!()?;
        }
    }
    if args.format.json {
        crate::out::json(&all)?;
    }
    Ok(())
}

/// The long-wait threshold: `--long-wait`, else the config's `[reaper] long_wait`, else the default.
fn long_wait(env: &Env, args: &StatsArgs) -> std::time::Duration {
    args.long_wait
        .or(env.config.reaper.long_wait.map(|d| d.0))
        .unwrap_or(Jobs::DEFAULT_LONG_WAIT)
}

fn text(stats: &Stats) -> Result<()> {
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
            Some(l) => outln!(" {:>10} {:>12}", l.due, age(l.oldest_due_secs))?,
            None => outln!(" {:>10} {:>12}", 0, "-")?,
        }
    }

    if !stats.due_by_kind.is_empty() {
        outln!()?;
        print_due_by_kind(stats)?;
    }
    print_paused(stats)?;
    print_held(stats)?;
    let long = &stats.long_waiting;
    if long.count > 0 {
        outln!()?;
        outln!(
            "{} job(s) have waited for other jobs longer than {} (the longest {}): `jobq jobs list --state waiting`",
            long.count,
            age(long.over_secs),
            long.oldest_secs.map_or("-".to_string(), age)
        )?;
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
            "{:<11} {:<20} {:>8} {:<20} {:>9} {:>10}  {}",
            p.role,
            p.host,
            p.pid,
            p.queues,
            age((now - p.started_at).as_seconds_f64()),
            age((now - p.heartbeat_at).as_seconds_f64()),
            p.token
        )?;
    }
    Ok(())
}

/// Due jobs per queue and exact kind, then a line for each group that no live worker will claim.
fn print_due_by_kind(stats: &Stats) -> Result<()> {
    outln!(
        "{:<20} {:<32} {:>10} {:>12}",
        "QUEUE",
        "DUE BY KIND",
        "DUE",
        "OLDEST DUE"
    )?;
    for k in &stats.due_by_kind {
        outln!(
            "{:<20} {:<32} {:>10} {:>12}",
            k.queue,
            shown(&k.kind),
            k.due,
            age(k.oldest_due_secs)
        )?;
    }
    let any_worker = stats.processes.iter().any(|p| p.role == "worker");
    let mut notes = Vec::new();
    for (k, why) in stats.unserved() {
        let what = format!(
            "{} due job(s) of kind {} in queue {}",
            k.due,
            shown(&k.kind),
            k.queue
        );
        match why {
            Unserved::InvalidKind => notes.push(format!(
                "{what} will never be claimed: {} is not a valid kind name (workers match kinds exactly; \
                 fix the rows' kind)",
                shown(&k.kind)
            )),
            Unserved::NoWorkerOnQueue if any_worker => {
                notes.push(format!("{what}: no live worker claims from this queue"));
            }
            Unserved::NoWorkerOnQueue => {}
            Unserved::NoHandler => notes.push(format!(
                "{what}: no live worker on this queue has a handler for the kind"
            )),
        }
    }
    if !any_worker {
        notes.push(
            "no live worker: the due jobs above wait for one (cron-mode workers run only when started)"
                .into(),
        );
    }
    if !notes.is_empty() {
        outln!()?;
        for n in notes {
            outln!("warning: {n}")?;
        }
    }
    Ok(())
}

/// A kind as text an operator can read: quoted (with escapes) when it is not a plain kind name, so a
/// trailing space or a control character shows.
fn shown(kind: &str) -> String {
    let plain = !kind.is_empty()
        && kind
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/'));
    if plain {
        kind.to_string()
    } else {
        format!("{kind:?}")
    }
}

/// Due jobs a pause, a pin, a limit or a worker count of 0 holds back, one line per queue and kind:
/// `queue mail: 49 due of kind email.send held by limit kind email.send 0/0`.
fn print_held(stats: &Stats) -> Result<()> {
    let held = stats.held();
    let zero: Vec<&jobq::admin::ScaleSetting> =
        stats.scale.iter().filter(|s| s.workers == 0).collect();
    if held.is_empty() && zero.is_empty() {
        return Ok(());
    }
    outln!()?;
    for g in held {
        let why: Vec<String> = g.holds.iter().map(ToString::to_string).collect();
        outln!(
            "held: queue {}: {} due of kind {} held by {}",
            g.queue,
            g.due,
            shown(&g.kind),
            why.join("; ")
        )?;
    }
    for s in zero {
        let host = if s.host.is_empty() {
            "every host".to_string()
        } else {
            format!("host {}", s.host)
        };
        outln!(
            "held: supervisors of {host} keep 0 workers (`jobq scale`, set by {}): `jobq scale --reset` \
             or `jobq scale -n N` starts them again",
            s.set_by
        )?;
    }
    Ok(())
}

/// The paused queues, whose due jobs wait for `jobq queue resume`.
fn print_paused(stats: &Stats) -> Result<()> {
    if stats.paused.is_empty() {
        return Ok(());
    }
    outln!()?;
    let now = Utc::now();
    for p in &stats.paused {
        let since = (now - p.paused_at).num_milliseconds() as f64 / 1000.0;
        outln!(
            "queue {} is PAUSED ({} ago, by {}{}): no worker claims from it until `jobq queue resume {}`",
            p.name,
            age(since),
            p.paused_by,
            p.reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default(),
            p.name
        )?;
    }
    Ok(())
}

/// The stats as `--json` prints them: the figures, the groups of due jobs no live worker will claim
/// (`unserved`), and those a pause, a pin or a limit holds back (`held`), each with why.
fn with_unserved(stats: &Stats) -> impl serde::Serialize + '_ {
    #[derive(serde::Serialize)]
    struct Unclaimed<'a> {
        queue: &'a str,
        kind: &'a str,
        due: i64,
        reason: Unserved,
    }
    #[derive(serde::Serialize)]
    struct Out<'a> {
        #[serde(flatten)]
        stats: &'a Stats,
        unserved: Vec<Unclaimed<'a>>,
        held: Vec<jobq::stats::HeldGroup>,
    }
    let unserved = stats
        .unserved()
        .into_iter()
        .map(|(k, reason)| Unclaimed {
            queue: &k.queue,
            kind: &k.kind,
            due: k.due,
            reason,
        })
        .collect();
    Out {
        stats,
        unserved,
        held: stats.held(),
    }
}
