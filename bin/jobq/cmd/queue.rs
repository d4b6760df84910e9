//! `jobq queue pause|resume|list`.

use anyhow::Result;
use jobq::Queues;

use super::Env;
use crate::args::queue::QueueCommand;
use crate::out::{age, outln};

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
