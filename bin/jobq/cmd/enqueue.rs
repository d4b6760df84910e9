//! `jobq enqueue`.

use anyhow::{Context, Result, anyhow};
use chrono::{DateTime, NaiveDateTime, Utc};
use jobq::NewJob;

use super::Env;
use crate::args::EnqueueArgs;
use crate::out::outln;

pub async fn run(env: &Env, args: EnqueueArgs) -> Result<()> {
    let mut job = NewJob::new(&args.kind);
    if let Some(p) = &args.payload {
        job = job.payload_json(p).context("invalid --payload")?;
    }
    if let Some(q) = args.queue {
        job = job.queue(q);
    }
    if let Some(p) = args.priority {
        job = job.priority(p);
    }
    if let Some(t) = &args.run_at {
        job = job.run_at(parse_time(t)?);
    }
    if let Some(d) = args.run_in {
        job = job.run_in(d);
    }
    if let Some(n) = args.max_attempts {
        job = job.max_attempts(n);
    }
    if let Some(t) = args.timeout {
        job = job.timeout(t);
    }
    if let Some(k) = &args.unique_key {
        job = job.unique_key(k);
    }
    if !args.after.is_empty() {
        job = job.after(args.after.iter().map(|id| jobq::JobId(*id)));
    }
    if !args.after_ended.is_empty() {
        job = job.after_all_ended(args.after_ended.iter().map(|id| jobq::JobId(*id)));
    }
    if let Some(p) = args.unique_for {
        job = job.unique_for(p);
    }
    let pool = env.migrated_pool(super::SERIAL_CONNECTIONS).await?;
    let done = jobq::enqueue_unique(&pool, &job).await?;
    let id = done.id();
    if args.format.json {
        crate::out::json(&serde_json::json!({ "id": id, "existing": done.is_existing() }))?;
    } else {
        // stdout stays the bare id either way, for `id=$(jobq enqueue …)`; which one it is goes to stderr.
        outln!("{id}")?;
        if done.is_existing() {
            crate::out::err_line(format_args!(
                "job {id} holds unique key {:?}; nothing inserted",
                crate::out::clean(args.unique_key.as_deref().unwrap_or_default(), false)
            ));
        }
    }
    Ok(())
}

fn parse_time(s: &str) -> Result<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    for fmt in [
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, fmt) {
            return Ok(t.and_utc());
        }
    }
    Err(anyhow!(
        "invalid --run-at {s:?}: use RFC 3339 (2026-05-01T12:00:00Z) or \"YYYY-MM-DD HH:MM:SS\" (UTC)"
    ))
}
