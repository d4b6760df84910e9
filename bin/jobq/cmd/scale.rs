//! `jobq scale`.

use anyhow::Result;
use clap::Args;
use jobq::Scale;

use super::Env;
use crate::options::Format;
use crate::out::{age, outln};

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("change").args(["workers", "reset"])))]
pub struct ScaleArgs {
    /// Workers each supervisor keeps from now on (0 stops them all; the supervisors stay up). Without
    /// -n or --reset: show the stored counts.
    #[arg(short = 'n', long = "workers", value_name = "N")]
    pub workers: Option<u32>,

    /// Only the supervisors of this host (as `jobq stats` lists hosts); a host's count wins over the
    /// count for every host.
    #[arg(long)]
    pub host: Option<String>,

    /// Forget stored counts. With --host, that host's count only (its supervisors then follow the
    /// count for every host, if one is stored). Without, every stored count (the one for every host and
    /// each host's): every supervisor goes back to its own -n.
    #[arg(long)]
    pub reset: bool,

    #[command(flatten)]
    pub format: Format,
}

pub async fn run(env: &Env, args: ScaleArgs) -> Result<()> {
    let pool = env.migrated_pool(super::SERIAL_CONNECTIONS).await?;
    let scale = Scale::new(pool.clone()).by(super::actor());
    let scope = args
        .host
        .as_deref()
        .map_or("every host".to_string(), |h| format!("host {h}"));
    if let Some(n) = args.workers {
        scale.set(args.host.as_deref(), n, &super::actor()).await?;
        outln!("supervisors of {scope} keep {n} workers (within 2 s)")?;
        if let Some(host) = args.host.as_deref() {
            super::notice::unseen_hosts(
                &pool,
                &[host],
                "the count applies when a supervisor starts there",
            )
            .await;
        }
        return Ok(());
    }
    if args.reset {
        let gone = scale.reset(args.host.as_deref()).await?;
        match (gone, args.host.as_deref()) {
            (0, Some(h)) => outln!("no count was stored for host {h}")?,
            (0, None) => outln!("no counts were stored")?,
            (_, Some(h)) => outln!(
                "the stored count for host {h} is gone: supervisors there follow the count for every \
                 host if one is stored, else their own -n"
            )?,
            (n, None) => outln!(
                "{n} stored count(s) gone (for every host and for each host): every supervisor goes \
                 back to its own -n"
            )?,
        }
        return Ok(());
    }
    let settings = scale.settings().await?;
    if args.format.json {
        return crate::out::json(&settings);
    }
    if settings.is_empty() {
        outln!("no stored counts: every supervisor keeps its own -n")?;
    }
    let now = chrono::Utc::now();
    for s in settings {
        let since = (now - s.set_at).num_milliseconds() as f64 / 1000.0;
        let host = if s.host.is_empty() {
            "(every host)"
        } else {
            &s.host
        };
        outln!(
            "{host:<24} {:>5} workers   set {} ago by {}",
            s.workers,
            age(since),
            s.set_by
        )?;
    }
    Ok(())
}
