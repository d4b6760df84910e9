//! `jobq scale`.

use anyhow::Result;
use jobq::Scale;

use super::Env;
use crate::args::scale::ScaleArgs;
use crate::out::{age, outln};

pub async fn run(env: &Env, args: ScaleArgs) -> Result<()> {
    let scale = Scale::new(env.migrated_pool(super::SERIAL_CONNECTIONS).await?);
    let scope = args
        .host
        .as_deref()
        .map_or("every host".to_string(), |h| format!("host {h}"));
    if let Some(n) = args.workers {
        scale.set(args.host.as_deref(), n, &super::actor()).await?;
        outln!("supervisors of {scope} keep {n} workers (within 2 s)")?;
        return Ok(());
    }
    if args.reset {
        if scale.reset(args.host.as_deref()).await? {
            outln!(
                "the stored count for {scope} is gone: supervisors there go back to their own -n"
            )?;
        } else {
            outln!("no count was stored for {scope}")?;
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
