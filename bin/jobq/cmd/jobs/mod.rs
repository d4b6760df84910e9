//! `jobq jobs list|show|output|retry|run-now|cancel|bulk`.

use anyhow::{Context, Result};
use jobq::{
    JobFilter, JobRecord, Jobs, admin::AttemptRecord, admin::CancelOutcome, admin::Dependencies,
    admin::Link,
};

mod args;

pub(crate) use args::{BulkArgs, JobsCommand};

use super::Env;
use crate::out::{clean, outln};

pub async fn run(env: &Env, cmd: JobsCommand) -> Result<()> {
    let jobs = Jobs::new(env.migrated_pool(super::SERIAL_CONNECTIONS).await?).by(super::actor());
    match cmd {
        JobsCommand::List(a) => {
            let filter = JobFilter {
                state: a.filter.state,
                queue: a.filter.queue,
                kind: a.filter.kind,
                limit: a.limit,
                ..JobFilter::default()
            };
            let list = jobs.list(&filter).await?;
            if a.format.json {
                crate::out::json(&list)?;
            } else {
                print_list(&list)?;
            }
        }
        JobsCommand::Show { id, format } => {
            let job = jobs.get(id).await?;
            let attempts = jobs.attempts(id).await?;
            let deps = jobs.dependencies(id).await?;
            let output = jobs.output(id).await?;
            if format.json {
                /// The job's fields, its recorded attempts beside them (`attempts` is the count), and
                /// the jobs it waits for and that wait for it (`waits_for`, `dependents`).
                #[derive(serde::Serialize)]
                struct Shown<'a> {
                    #[serde(flatten)]
                    job: &'a JobRecord,
                    attempt_history: &'a [AttemptRecord],
                    #[serde(flatten)]
                    deps: &'a Dependencies,
                    output: Option<Box<serde_json::value::RawValue>>,
                }
                crate::out::json(&Shown {
                    job: &job,
                    attempt_history: &attempts,
                    deps: &deps,
                    output: output.and_then(|o| serde_json::value::RawValue::from_string(o).ok()),
                })?;
            } else {
                print_one(&job, output.as_deref())?;
                print_links("waits for:   ", &deps.waits_for)?;
                print_links("dependents:  ", &deps.dependents)?;
                print_attempts(&attempts)?;
            }
        }
        JobsCommand::Output { id } => match jobs.output(id).await? {
            Some(o) => outln!("{}", clean(&o, false))?,
            None => {
                return Err(anyhow::anyhow!("job {id} has left no output"));
            }
        },
        JobsCommand::Retry { id } => {
            jobs.retry(id).await?;
            outln!("job {id} is queued to run now, with a fresh attempt budget")?;
        }
        JobsCommand::RunNow { id } => {
            if jobs.run_now(id).await? {
                outln!("job {id} is due now")?;
            } else {
                outln!("job {id} was already due")?;
            }
        }
        JobsCommand::Bulk(a) => bulk(&jobs, a).await?,
        JobsCommand::Cancel { id } => match jobs.cancel(id).await? {
            CancelOutcome::Cancelled => outln!("job {id} is cancelled")?,
            CancelOutcome::Requested => outln!(
                "job {id} is running: its worker was asked to stop it; it will end cancelled"
            )?,
        },
    }
    Ok(())
}

/// `jobq jobs bulk`: counts the matching jobs, and with `--yes` does the action to each, with a progress
/// bar on a terminal.
async fn bulk(jobs: &Jobs, a: BulkArgs) -> Result<()> {
    let filter = JobFilter {
        state: a.filter.state,
        queue: a.filter.queue.clone(),
        kind: a.filter.kind.clone(),
        error_contains: a.error.clone(),
        limit: a.limit,
        ..JobFilter::default()
    };
    let verb = a.action.as_str();
    if !a.yes {
        let ids = jobs.bulk_ids(&filter, a.all).await?;
        outln!(
            "{} job(s) match; run again with --yes to {verb} them",
            ids.len()
        )?;
        return Ok(());
    }
    // The filter is read again here: the action takes what matches now.
    let bar = indicatif::ProgressBar::new(0).with_style(
        indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_prefix(verb.to_string());
    let outcome = jobs
        .apply_matching(a.action, &filter, a.all, |n, of| {
            bar.set_length(of as u64);
            bar.set_position(n as u64);
        })
        .await?;
    if let Some(e) = outcome.stopped {
        bar.abandon();
        return Err(e).with_context(|| format!("{verb}: stopped after {} job(s)", outcome.done));
    }
    bar.finish_and_clear();
    outln!("{verb}: {} of {} job(s)", outcome.done, outcome.matched)?;
    if let Some(first) = outcome.refused.first() {
        outln!(
            "{} refused; the first: {}",
            outcome.refused.len(),
            clean(first, false)
        )?;
    }
    Ok(())
}

fn print_list(jobs: &[JobRecord]) -> Result<()> {
    outln!(
        "{:>10} {:<9} {:<12} {:<24} {:>8} {:<26} LAST ERROR",
        "ID",
        "STATE",
        "QUEUE",
        "KIND",
        "ATTEMPTS",
        "RUN AT (UTC)"
    )?;
    for j in jobs {
        let err = j
            .last_error
            .as_deref()
            .map(|e| {
                clean(e.lines().next().unwrap_or(""), false)
                    .chars()
                    .take(60)
                    .collect::<String>()
            })
            .unwrap_or_default();
        outln!(
            "{:>10} {:<9} {:<12} {:<24} {:>8} {:<26} {}",
            j.id,
            j.state,
            clean(&j.queue, false),
            clean(&j.kind, false),
            format!("{}/{}", j.attempts, j.max_attempts_text()),
            j.run_at.format("%Y-%m-%d %H:%M:%S%.3f"),
            err
        )?;
    }
    if jobs.is_empty() {
        outln!("(no jobs)")?;
    }
    Ok(())
}

/// Jobs linked to the shown one, on one line after `label`: `12 (done), 14 (running, until ended)`;
/// nothing when there are none.
fn print_links(label: &str, links: &[Link]) -> Result<()> {
    if links.is_empty() {
        return Ok(());
    }
    let text = links
        .iter()
        .map(|l| {
            let state = l.state.map_or("does not exist", |s| s.as_str());
            if l.until == "ended" {
                format!("{} ({state}, until ended)", l.id)
            } else {
                format!("{} ({state})", l.id)
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    outln!("{label} {text}")?;
    Ok(())
}

/// The attempts that did not end done, one line each, after the job's fields.
fn print_attempts(attempts: &[AttemptRecord]) -> Result<()> {
    if attempts.is_empty() {
        return Ok(());
    }
    outln!("attempts that did not end done:")?;
    for a in attempts {
        let started = a.started_at.map_or("-".to_string(), |t| {
            t.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
        });
        outln!(
            "  #{:<3} {:<11} started {}  ended {}  by {}",
            a.attempt,
            a.outcome,
            started,
            a.ended_at.format("%Y-%m-%d %H:%M:%S%.3f"),
            clean(a.claim.as_deref().unwrap_or("-"), false)
        )?;
        if let Some(e) = &a.error {
            outln!("       {}", clean(e, true).replace('\n', "\n       "))?;
        }
    }
    Ok(())
}

fn print_one(j: &JobRecord, output: Option<&str>) -> Result<()> {
    let t = |v: Option<chrono::DateTime<chrono::Utc>>| {
        v.map_or_else(
            || "-".to_string(),
            |t| t.format("%Y-%m-%d %H:%M:%S%.6f UTC").to_string(),
        )
    };
    outln!("id:           {}", j.id)?;
    outln!("state:        {}", j.state)?;
    // Row text is written through `clean`: whoever inserted the row chose it.
    outln!("queue:        {}", clean(&j.queue, false))?;
    outln!("kind:         {}", clean(&j.kind, false))?;
    match j.base_priority {
        Some(base) => outln!("priority:     {} (aged from {base})", j.priority)?,
        None => outln!("priority:     {}", j.priority)?,
    }
    outln!(
        "attempts:     {} of {}",
        j.attempts,
        match j.max_attempts {
            Some(n) => n.to_string(),
            None => format!(
                "default (the handler's, else {})",
                jobq::admin::DEFAULT_MAX_ATTEMPTS
            ),
        }
    )?;
    outln!(
        "timeout:      {}",
        j.timeout_secs.map_or("-".to_string(), |s| format!("{s}s"))
    )?;
    outln!("run at:       {}", t(Some(j.run_at)))?;
    outln!("created at:   {}", t(Some(j.created_at)))?;
    outln!("claimed at:   {}", t(j.claimed_at))?;
    outln!("started at:   {}", t(j.started_at))?;
    outln!("finished at:  {}", t(j.finished_at))?;
    outln!(
        "claim:        {}",
        clean(j.claim.as_deref().unwrap_or("-"), false)
    )?;
    if let Some(k) = &j.unique_key {
        outln!("unique key:   {}", clean(k, false))?;
    }
    if let Some(k) = j.key_summary() {
        outln!("key:          {}", clean(&k, false))?;
    }
    if let Some(d) = j.debounce_summary() {
        outln!("debounce:     {}", clean(&d, false))?;
    }
    if let Some(tp) = &j.traceparent {
        outln!("traceparent:  {}", clean(tp, false))?;
    }
    if let Some(p) = &j.progress {
        let stale = if p.attempt == j.attempts {
            String::new()
        } else {
            format!(" (attempt {})", p.attempt)
        };
        outln!(
            "progress:     {}%{}{stale}, at {}",
            p.percent,
            p.message
                .as_deref()
                .map_or(String::new(), |m| format!(" {}", clean(m, false))),
            t(Some(p.at))
        )?;
    }
    let payload = serde_json::from_str::<serde_json::Value>(&j.payload)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| j.payload.clone());
    outln!(
        "payload:      {}",
        clean(&payload, true).replace('\n', "\n              ")
    )?;
    match &j.last_error {
        Some(e) => outln!(
            "last error:   {}",
            clean(e, true).replace('\n', "\n              ")
        )?,
        None => outln!("last error:   -")?,
    }
    if let Some(o) = output {
        outln!(
            "output:       {}",
            pretty(o).replace('\n', "\n              ")
        )?;
    }
    Ok(())
}

/// JSON text from a row, indented, and cleaned of what a terminal would act on.
fn pretty(json: &str) -> String {
    let text = serde_json::from_str::<serde_json::Value>(json)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| json.to_string());
    clean(&text, true).into_owned()
}
