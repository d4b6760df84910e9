//! `jobq queue pause|resume|list`.

use anyhow::Result;
use clap::{Args, Subcommand};
use jobq::Queues;

use super::Env;
use crate::options::Format;
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
        QueueCommand::List(a) => {
            let paused = queues.paused().await?;
            let pins = queues.pins().await?;
            if a.format.json {
                return crate::out::json(&serde_json::json!({ "paused": paused, "pins": pins }));
            }
            for p in &pins {
                outln!("{:<20} pinned to {}", p.queue, p.host)?;
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
