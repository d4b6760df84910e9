//! `jobq limit set|remove|list`.

use anyhow::Result;
use jobq::{JobLimits, admin::LimitScope};

use super::Env;
use crate::args::limit::{LimitCommand, LimitTarget};
use crate::out::{age, outln};

pub async fn run(env: &Env, cmd: LimitCommand) -> Result<()> {
    let pool = env.migrated_pool(super::SERIAL_CONNECTIONS).await?;
    let limits = JobLimits::new(pool.clone()).by(super::actor());
    match cmd {
        LimitCommand::Set(a) => {
            let (scope, name) = target(&a.target);
            let by = super::actor();
            match a.target.per {
                None => limits.set(scope, name, a.max_jobs, &by).await?,
                Some(p) => limits.set_rate(scope, name, a.max_jobs, p, &by).await?,
            }
            if scope == LimitScope::Kind {
                super::notice::unserved_kind(env, &pool, name).await;
            }
            let what = what(scope);
            match (a.max_jobs, a.target.per) {
                (0, _) => {
                    outln!("{what} {name} held: no job of it starts until the limit is raised")?
                }
                (n, None) => outln!("at most {n} jobs of {what} {name} run at once")?,
                (n, Some(p)) => outln!(
                    "at most {n} jobs of {what} {name} start per {}",
                    humantime::format_duration(p)
                )?,
            }
        }
        LimitCommand::Remove(t) => {
            let (scope, name) = target(&t);
            if limits.remove(scope, name, t.per).await? {
                outln!("{} {name} is no longer limited", what(scope))?;
            } else {
                outln!("{} {name} had no such limit", what(scope))?;
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
                let how = l.per.map_or("at once".to_string(), |p| {
                    format!("per {}", humantime::format_duration(p))
                });
                outln!(
                    "{:<6} {:<32} {:>8} {how:<12} set {} ago by {}",
                    what(l.scope),
                    l.name,
                    l.max_jobs,
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
