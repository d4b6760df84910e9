//! `jobq limit set|remove|list`.

use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand};
use jobq::{JobLimits, admin::LimitScope};

use super::Env;
use crate::options::{Format, parse_duration};
use crate::out::{age, outln};

#[derive(Debug, Subcommand)]
pub enum LimitCommand {
    /// At most N jobs of a kind (or of a queue) run at once, across every worker of every host, or with
    /// --per start per period; 0 holds them. Takes effect within a second; running jobs are never
    /// stopped.
    Set(LimitSetArgs),
    /// Remove a limit (the rate over --per, or the limit at once).
    Remove(LimitTarget),
    /// The limits.
    List(LimitListArgs),
}

/// Which kind or queue a limit is on.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["kind", "queue"])))]
pub struct LimitTarget {
    /// Limit the jobs of this kind, in any queue.
    #[arg(long)]
    pub kind: Option<String>,
    /// Limit the jobs of this queue, of any kind.
    #[arg(long)]
    pub queue: Option<String>,
    /// A rate limit: N jobs start per this period (`1s`, `1m`, `1h`; whole seconds up to a week).
    #[arg(long, value_name = "PERIOD", value_parser = parse_duration)]
    pub per: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct LimitSetArgs {
    #[command(flatten)]
    pub target: LimitTarget,
    /// Most jobs running at once (or starting per --per).
    pub max_jobs: u32,
}

#[derive(Debug, Args)]
pub struct LimitListArgs {
    #[command(flatten)]
    pub format: Format,
}

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
