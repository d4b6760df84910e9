//! `jobq enqueue`.

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use chrono::{DateTime, NaiveDateTime, Utc};
use clap::Args;
use jobq::NewJob;

use super::Env;
use crate::options::{Format, JobHelp, JobOptions, parse_duration};
use crate::out::outln;

/// The help of `enqueue`'s [`JobOptions`]: about the one job it inserts.
#[derive(Debug)]
pub struct OneJob;

impl JobHelp for OneJob {
    const PAYLOAD: &'static str = "JSON payload. Default {}";
    const QUEUE: &'static str = "Queue. Default \"default\"";
    const PRIORITY: &'static str = "Priority: smaller runs first. Default 0";
    const MAX_ATTEMPTS: &'static str = "Attempts before the job is dead. Default 20";
    const TIMEOUT: &'static str = "Run-time limit of one attempt (e.g. 90s)";
}

/// When the job is due, in [`JobOptions`]'s due-time slot.
#[derive(Debug, Args)]
pub struct Due {
    /// Due at this time: RFC 3339 (2026-05-01T12:00:00Z) or "YYYY-MM-DD HH:MM:SS" in UTC.
    #[arg(long, conflicts_with = "run_in")]
    pub run_at: Option<String>,

    /// Due after this long (e.g. 30s, 5m, 2h).
    #[arg(long = "in", value_parser = parse_duration)]
    pub run_in: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct EnqueueArgs {
    /// Job kind: picks the handler.
    pub kind: String,

    #[command(flatten)]
    pub job: JobOptions<OneJob, Due>,

    /// Unique key (up to 255 bytes): while a job with this key is queued, waiting to retry or running,
    /// print that job's id instead of inserting another.
    #[arg(long)]
    pub unique_key: Option<String>,

    /// With --unique-key: a done job with the key also holds it for this long after it finished
    /// (e.g. 1h).
    #[arg(long, value_parser = parse_duration, requires = "unique_key")]
    pub unique_for: Option<Duration>,

    /// With --unique-key: debounce. While a job of the kind with the key is queued and has not
    /// started, this enqueue replaces its payload and moves its run to this long from now (e.g. 5s),
    /// instead of inserting another.
    #[arg(long, value_parser = parse_duration, requires = "unique_key", conflicts_with_all = ["unique_for", "run_at", "run_in"])]
    pub debounce: Option<Duration>,

    /// With --debounce: the longest the job waits after the first enqueue of its key, however many
    /// follow (e.g. 1m). Default ten windows
    #[arg(long, value_parser = parse_duration, requires = "debounce")]
    pub debounce_max: Option<Duration>,

    /// Order key: jobs with the same key run one at a time, in the order they were enqueued (this
    /// one waits until the one before it has ended)
    #[arg(long, conflicts_with_all = ["unique_key", "after", "after_ended", "fair_key"])]
    pub order_key: Option<String>,

    /// Fair share key: at most --fair-max jobs with this key run at once, and keys take turns at the
    /// head of the queue (e.g. customer:7)
    #[arg(long, requires = "fair_max", conflicts_with_all = ["unique_key", "after", "after_ended"])]
    pub fair_key: Option<String>,

    /// With --fair-key: how many jobs of the key may run at once (1 to 64)
    #[arg(long, requires = "fair_key")]
    pub fair_max: Option<u16>,

    /// With --order-key or --fair-key: at most N jobs of the key start per period, spaced evenly
    /// (e.g. 100/1m)
    #[arg(long, value_name = "N/PERIOD", value_parser = parse_rate)]
    pub fair_rate: Option<(u32, Duration)>,

    /// With --order-key or --fair-key: if this job ends dead, the jobs after it wait until it is
    /// retried, cancelled or deleted, instead of going on without it
    #[arg(long)]
    pub order_halt: bool,

    /// Job ids this job waits for (comma-separated): it runs once every one is done (the last one's
    /// finish queues it), and is cancelled if one ends dead or cancelled.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "ID,ID",
        conflicts_with = "after_ended"
    )]
    pub after: Vec<u64>,

    /// A batch callback: job ids this job waits for until each has ended in any way (done, dead or
    /// cancelled); it then runs once with "jobq_batch": {"done": N, "dead": N, "cancelled": N} added to
    /// its payload.
    #[arg(long, value_delimiter = ',', value_name = "ID,ID")]
    pub after_ended: Vec<u64>,

    /// The W3C trace context to enqueue the job under (00-<32 hex trace id>-<16 hex span id>-<2 hex
    /// flags), handed to its handlers and the parent of its spans. Default: the TRACEPARENT environment
    /// variable when it holds a valid value (a job's command that enqueues more jobs links them to its
    /// own trace); an invalid one there is ignored with a warning, as OpenTelemetry's SDKs ignore it
    #[arg(long, value_name = "TRACEPARENT")]
    pub traceparent: Option<jobq::Traceparent>,

    #[command(flatten)]
    pub format: Format,
}

pub async fn run(env: &Env, args: EnqueueArgs) -> Result<()> {
    let mut job = NewJob::new(&args.kind);
    if let Some(p) = &args.job.payload {
        job = job.payload_json(p).context("invalid --payload")?;
    }
    if let Some(q) = args.job.queue {
        job = job.queue(q);
    }
    if let Some(p) = args.job.priority {
        job = job.priority(p);
    }
    if let Some(t) = &args.job.due.run_at {
        job = job.run_at(parse_time(t)?);
    }
    if let Some(d) = args.job.due.run_in {
        job = job.run_in(d);
    }
    if let Some(n) = args.job.max_attempts {
        job = job.max_attempts(n);
    }
    if let Some(t) = args.job.timeout {
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
    if let Some(k) = &args.order_key {
        job = job.order_key(k);
    }
    if let (Some(k), Some(max)) = (&args.fair_key, args.fair_max) {
        job = job.fair_key(k, max);
    }
    if args.order_halt {
        job = job.order_halt(true);
    }
    if let Some((n, per)) = args.fair_rate {
        job = job.fair_rate(n, per);
    }
    if let Some(w) = args.debounce {
        job = job.debounce(w);
    }
    if let Some(m) = args.debounce_max {
        job = job.debounce_max(m);
    }
    job = job.trace_parent(args.traceparent.or_else(traceparent_from_env));
    let pool = env.migrated_pool(super::SERIAL_CONNECTIONS).await?;
    let done = jobq::enqueue_unique(&pool, &job).await?;
    let id = done.id();
    if args.format.json {
        crate::out::json(&serde_json::json!({
            "id": id,
            "existing": done.is_existing(),
            "merged": matches!(done, jobq::Enqueued::Merged(_)),
        }))?;
    } else {
        // stdout stays the bare id either way, for `id=$(jobq enqueue …)`; which one it is goes to stderr.
        outln!("{id}")?;
        let key = crate::out::clean(args.unique_key.as_deref().unwrap_or_default(), false);
        match done {
            jobq::Enqueued::Inserted(_) => {}
            jobq::Enqueued::Existing(_) => crate::out::err_line(format_args!(
                "job {id} holds unique key {key:?}; nothing inserted"
            )),
            jobq::Enqueued::Merged(_) => crate::out::err_line(format_args!(
                "merged into job {id} (debounce key {key:?}): it takes this payload and runs later"
            )),
        }
    }
    Ok(())
}

/// `100/1m`: a count and a period.
fn parse_rate(s: &str) -> std::result::Result<(u32, Duration), String> {
    let (n, per) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?} is not N/PERIOD (e.g. 100/1m)"))?;
    let n = n
        .trim()
        .parse::<u32>()
        .map_err(|e| format!("{n:?} is not a count: {e}"))?;
    Ok((n, parse_duration(per.trim())?))
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

/// The name OpenTelemetry's SDKs and tools (and jobq's command handlers) pass a trace context under.
const TRACEPARENT_ENV: &str = "TRACEPARENT";

/// `TRACEPARENT` from the environment, when `--traceparent` is not given. Unlike the flag, whose bad
/// value is refused, a bad value here is ignored with a warning: the variable is ambient (inherited
/// from whatever started this process), and a trace link is not worth failing an enqueue for.
fn traceparent_from_env() -> Option<jobq::Traceparent> {
    let value = std::env::var(TRACEPARENT_ENV).ok()?;
    if value.is_empty() {
        return None;
    }
    match value.parse() {
        Ok(t) => Some(t),
        Err(e) => {
            crate::out::err_line(format_args!(
                "ignoring {TRACEPARENT_ENV}={:?}: {e}",
                crate::out::clean(&value, false)
            ));
            None
        }
    }
}
