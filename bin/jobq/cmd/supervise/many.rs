//! `jobq supervise` over a config with `[databases.NAME]` sections: one supervisor per database, each
//! with its own pool, workers, reaper and scheduler, in one process.
//!
//! Databases are isolated by construction: each section's workers are started with that section only
//! (`JOBQ_DATABASE`), so they connect to its URL and load its handlers, and no process of one database
//! opens a connection to another. Every section is checked before any starts, so a bad one is an error
//! at start rather than a set served by halves; once running, a database whose supervisor fails stops
//! them all, so the failure is seen (and a service manager restarts the whole) instead of one database
//! going quietly unserved.

use anyhow::{Context, Result, bail};
use jobq::CancellationToken;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{Instrument, error, info, info_span};

use super::SuperviseArgs;
use super::{check_reload, serve};
use crate::cmd::Env;

pub(super) async fn run(env: &Env, args: SuperviseArgs, shutdown: CancellationToken) -> Result<()> {
    if args.metrics.metrics_addr.is_some() {
        bail!(
            "--metrics-addr serves one database's figures: with [databases.NAME] sections, run one \
             `jobq supervise --database NAME --metrics-addr …` per database"
        );
    }
    let mut databases = Vec::new();
    for name in env.config.databases.keys() {
        let db = Env::section(&env.config, env.config_path.clone(), name)?;
        check_reload(env.config_path.as_deref(), Some(name), &args.opts)
            .with_context(|| format!("databases.{name}"))?;
        databases.push(db);
    }
    check_databases(&databases).await?;
    info!(
        databases = databases
            .iter()
            .filter_map(|d| d.database.as_deref())
            .collect::<Vec<_>>()
            .join(","),
        "supervising several databases"
    );
    let mut reloads = Vec::new();
    let mut tasks = JoinSet::new();
    for db in databases {
        let name = db.database.clone().unwrap_or_default();
        let (tx, rx) = mpsc::channel(1);
        reloads.push((name.clone(), tx));
        let (args, stop) = (args.clone(), shutdown.clone());
        let span = info_span!("database", name = %name);
        tasks.spawn(
            async move {
                let result = serve(&db, &args, stop, rx).await;
                (name, result)
            }
            .instrument(span),
        );
    }
    fan_out_sighup(env, &args, reloads)?;
    let mut failed = None;
    while let Some(joined) = tasks.join_next().await {
        let (name, result) = joined.context("a database's supervisor panicked")?;
        if let Err(e) = result {
            error!(database = %name, error = format!("{e:#}"), "supervisor failed; stopping every database");
            shutdown.cancel();
            failed.get_or_insert((name, e));
        }
    }
    match failed {
        Some((name, e)) => {
            let hint = enable_hint(&name, &e);
            Err(e.context(format!("database {name}{hint}")))
        }
        None => Ok(()),
    }
}

/// Connects to every section's database and checks its schema before any is served: a section that
/// names a database that does not exist, cannot be reached or is not migrated is an error at start that
/// names each such section, and no section's workers start (they would start, then be stopped again
/// when the bad one failed).
async fn check_databases(databases: &[Env]) -> Result<()> {
    let mut bad = Vec::new();
    for db in databases {
        let name = db.database.as_deref().unwrap_or_default();
        match db.migrated_pool(1).await {
            Ok(pool) => pool.close().await,
            Err(e) => bad.push(format!("databases.{name}: {e:#}{}", enable_hint(name, &e))),
        }
    }
    if bad.is_empty() {
        return Ok(());
    }
    bail!(
        "{} of {} databases cannot be served, so none was started:\n  {}",
        bad.len(),
        databases.len(),
        bad.join("\n  ")
    )
}

/// ` (jobq is not enabled there: run `jobq enable NAME`)` when `e` says the database has no jobq schema.
fn enable_hint(name: &str, e: &anyhow::Error) -> String {
    let not_enabled = matches!(
        e.downcast_ref::<jobq::Error>(),
        Some(jobq::Error::NotMigrated { found: None, .. })
    );
    if not_enabled {
        format!(" (jobq is not enabled there: run `jobq enable {name}`)")
    } else {
        String::new()
    }
}

/// On SIGHUP, rolls the workers of each database whose section still passes the checks a new worker
/// would make; a database whose section is now broken keeps its current workers (and says so).
fn fan_out_sighup(
    env: &Env,
    args: &SuperviseArgs,
    reloads: Vec<(String, mpsc::Sender<()>)>,
) -> Result<()> {
    let mut hup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    let (path, opts) = (env.config_path.clone(), args.opts.clone());
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            for (name, tx) in &reloads {
                match check_reload(path.as_deref(), Some(name), &opts) {
                    Ok(()) => {
                        let _ = tx.try_send(());
                    }
                    Err(e) => error!(
                        database = %name,
                        error = format!("{e:#}"),
                        "SIGHUP: the config is invalid for this database; keeping its current workers"
                    ),
                }
            }
        }
    });
    Ok(())
}
