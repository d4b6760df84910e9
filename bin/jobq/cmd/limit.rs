//! `jobq limit set|remove|list`.

use anyhow::Result;
use jobq::{ConcurrencyLimits, LimitScope};

use super::Env;
use crate::args::limit::{LimitCommand, LimitTarget};
use crate::out::{age, outln};

pub async fn run(env: &Env, cmd: LimitCommand) -> Result<()> {
    let limits = ConcurrencyLimits::new(env.migrated_pool(super::SERIAL_CONNECTIONS).await?);
    match cmd {
        LimitCommand::Set(a) => {
            let (scope, name) = target(&a.target);
            limits
                .set(scope, name, a.max_running, &super::actor())
                .await?;
            match a.max_running {
                0 => outln!(
                    "{} {name} held: no job of it starts until the limit is raised",
                    what(scope)
                )?,
                n => outln!("at most {n} jobs of {} {name} run at once", what(scope))?,
            }
        }
        LimitCommand::Remove(t) => {
            let (scope, name) = target(&t);
            if limits.remove(scope, name).await? {
                outln!("{} {name} is no longer limited", what(scope))?;
            } else {
                outln!("{} {name} had no limit", what(scope))?;
            }
        }
        LimitCommand::List(a) => {
            let all = limits.list().await?;
            if a.format.json {
                return crate::out::json(&all);
            }
            if all.is_empty() {
                outln!("no limits")?;
            }
            let now = chrono::Utc::now();
            for l in all {
                let since = (now - l.set_at).num_milliseconds() as f64 / 1000.0;
                outln!(
                    "{:<6} {:<32} {:>8} at once   set {} ago by {}",
                    what(l.scope),
                    l.name,
                    l.max_running,
                    age(since),
                    l.set_by
                )?;
            }
        }
    }
    Ok(())
}

fn target(t: &LimitTarget) -> (LimitScope, &str) {
    match (&t.kind, &t.queue) {
        (Some(k), _) => (LimitScope::Kind, k),
        (None, Some(q)) => (LimitScope::Queue, q),
        (None, None) => unreachable!("clap requires --kind or --queue"),
    }
}

fn what(scope: LimitScope) -> &'static str {
    match scope {
        LimitScope::Kind => "kind",
        LimitScope::Queue => "queue",
    }
}
