//! `jobq queue pause|resume|list|pin|unpin|age`.

use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand};
use jobq::Queues;

use super::Env;
use crate::options::{Format, parse_duration};
use crate::out::{age, outln};

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Stop every worker, on every host, from claiming jobs of QUEUE (within a claim); running jobs
    /// finish, new jobs still go in. Remembered until `jobq queue resume`.
    Pause(PauseArgs),
    /// Let workers claim from QUEUE again.
    Resume(ResumeArgs),
    /// The paused queues (since when, by whom, why) and the queues pinned to hosts.
    List(QueueListArgs),
    /// Serve QUEUE only on these hosts (as `jobq stats` lists them): workers elsewhere leave it alone
    /// within a second. Adds to the hosts it is pinned to already.
    Pin(PinArgs),
    /// Serve QUEUE on every host again (or, with --host, no longer on that one).
    Unpin(UnpinArgs),
    /// Let QUEUE's waiting jobs gain priority as they wait: one step (priority - 1) per --every they
    /// have been due, up to --floor or the queue's most urgent waiting priority, so low-priority
    /// jobs are delayed by urgent ones but never starved. Done by the reaper's passes.
    Age(AgeArgs),
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("how").required(true).args(["every", "off"])))]
pub struct AgeArgs {
    /// The queue whose jobs age.
    pub queue: String,
    /// One step of priority per this long due (`5m`, `1h`, `200ms`; whole milliseconds up to a week).
    #[arg(long, value_name = "STEP", value_parser = parse_duration)]
    pub every: Option<Duration>,
    /// Never raise a job past this priority (default: the most urgent priority among the queue's
    /// waiting jobs).
    #[arg(
        long,
        value_name = "PRIORITY",
        allow_negative_numbers = true,
        requires = "every"
    )]
    pub floor: Option<i16>,
    /// Stop aging QUEUE's jobs (jobs raised already keep their priority until they run).
    #[arg(long)]
    pub off: bool,
}

#[derive(Debug, Args)]
pub struct PinArgs {
    /// The queue to pin.
    pub queue: String,
    /// A host whose workers serve it (repeat for several).
    #[arg(long = "host", required = true)]
    pub hosts: Vec<String>,
}

#[derive(Debug, Args)]
pub struct UnpinArgs {
    /// The queue to unpin.
    pub queue: String,
    /// Only from this host.
    #[arg(long)]
    pub host: Option<String>,
}

#[derive(Debug, Args)]
pub struct PauseArgs {
    /// The queue to pause.
    pub queue: String,
    /// Why (shown by `jobq queue list`, `stats` and the dashboard).
    #[arg(long)]
    pub reason: Option<String>,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The queue to resume.
    pub queue: String,
}

#[derive(Debug, Args)]
pub struct QueueListArgs {
    #[command(flatten)]
    pub format: Format,
}

// Long as a list, not as logic: one short arm per `jobq queue` subcommand, a call and its message.
pub async fn run(env: &Env, cmd: QueueCommand) -> Result<()> {
    let pool = env.migrated_pool(super::SERIAL_CONNECTIONS).await?;
    let queues = Queues::new(pool.clone()).by(super::actor());
    match cmd {
        QueueCommand::Pause(a) => {
            let p = queues
                .pause(&a.queue, &super::actor(), a.reason.as_deref())
                .await?;
            match (p.newly, p.had_waiting_jobs) {
                (false, _) => outln!("queue {} was paused already", a.queue)?,
                (true, true) => outln!(
                    "queue {} paused: no worker claims from it until `jobq queue resume {}`",
                    a.queue,
                    a.queue
                )?,
                (true, false) => outln!(
                    "queue {} paused (it has no waiting jobs: check the name; jobs that come are held)",
                    a.queue
                )?,
            }
        }
        QueueCommand::Resume(a) => {
            if queues.resume(&a.queue).await? {
                outln!("queue {} resumed", a.queue)?;
            } else {
                outln!("queue {} was not paused", a.queue)?;
            }
        }
        QueueCommand::Pin(a) => {
            let hosts: Vec<&str> = a.hosts.iter().map(String::as_str).collect();
            queues.pin(&a.queue, &hosts, &super::actor()).await?;
            outln!(
                "queue {} is served only on {} (and any host it was pinned to before)",
                a.queue,
                hosts.join(", ")
            )?;
            super::notice::unseen_hosts(
                &pool,
                &hosts,
                &format!(
                    "queue {} is not served there until a worker starts there",
                    a.queue
                ),
            )
            .await;
        }
        QueueCommand::Unpin(a) => {
            let n = queues.unpin(&a.queue, a.host.as_deref()).await?;
            match (n, &a.host) {
                (0, _) => outln!("queue {} had no such pin", a.queue)?,
                (_, Some(h)) => outln!("queue {} is no longer served on {h}", a.queue)?,
                (_, None) => outln!("queue {} is served on every host again", a.queue)?,
            }
        }
        QueueCommand::Age(a) => set_aging(&pool, &queues, a).await?,
        QueueCommand::List(a) => {
            let paused = queues.paused().await?;
            let pins = queues.pins().await?;
            let aging = queues.aging().await?;
            if a.format.json {
                return crate::out::json(
                    &serde_json::json!({ "paused": paused, "pins": pins, "aging": aging }),
                );
            }
            for p in &pins {
                outln!("{:<20} pinned to {}", p.queue, p.host)?;
            }
            for g in &aging {
                outln!("{:<20} {}", g.queue, aging_text(g))?;
            }
            if paused.is_empty() {
                outln!("no paused queues")?;
            }
            let now = chrono::Utc::now();
            for p in paused {
                let since = (now - p.paused_at).num_milliseconds() as f64 / 1000.0;
                outln!(
                    "{:<20} paused {} ago by {}{}",
                    p.name,
                    age(since),
                    p.paused_by,
                    p.reason.map(|r| format!(": {r}")).unwrap_or_default()
                )?;
            }
        }
    }
    Ok(())
}

async fn set_aging(pool: &sqlx::MySqlPool, queues: &Queues, a: AgeArgs) -> Result<()> {
    let Some(every) = a.every else {
        match queues.stop_aging(&a.queue).await? {
            true => outln!(
                "queue {}: its jobs no longer age (jobs raised already keep their priority until \
                 they run)",
                a.queue
            )?,
            false => outln!("queue {} had no aging", a.queue)?,
        }
        return Ok(());
    };
    queues
        .age(&a.queue, every, a.floor, &super::actor())
        .await?;
    let g = queues
        .aging()
        .await?
        .into_iter()
        .find(|g| g.queue == a.queue);
    if let Some(g) = g {
        outln!("queue {}: {}", a.queue, aging_text(&g))?;
    }
    super::notice::no_reaper(pool, "jobs age only during a reaper's passes").await;
    Ok(())
}

/// A queue's aging in words: `jobs gain 1 priority per 5m waited, up to 0`.
fn aging_text(g: &jobq::admin::QueueAging) -> String {
    format!(
        "jobs gain 1 priority per {} waited, up to {}",
        humantime::format_duration(g.every),
        g.floor.map_or_else(
            || "the most urgent waiting priority".to_string(),
            |f| f.to_string()
        )
    )
}
