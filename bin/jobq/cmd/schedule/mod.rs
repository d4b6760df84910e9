//! `jobq schedule create|update|drop|list|show|runs|pause|resume|run-now|next|abort|log`.

use anyhow::{Result, anyhow};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use jobq::State;
use jobq::schedule::{Outcome, RunRecord, ScheduleDef, ScheduleLogEntry, ScheduleRecord, Spec};
use jobq::{Schedules, scheduler::Upserted};

mod args;

pub(crate) use args::ScheduleCommand;
use args::{ScheduleCreateArgs, ScheduleNextArgs, ScheduleOptions, ScheduleUpdateArgs};

use super::Env;
use crate::out::{clean, outln};

pub async fn run(env: &Env, cmd: ScheduleCommand) -> Result<()> {
    // `next --spec` needs no database; everything else is checked before it is touched.
    if let ScheduleCommand::Next(a) = &cmd
        && let Some(text) = &a.spec
    {
        return next_of_spec(text, a);
    }
    let create = match &cmd {
        ScheduleCommand::Create(a) => Some(create_def(a)?),
        _ => None,
    };
    let pool = env.migrated_pool(super::ONE_OFF_CONNECTIONS).await?;
    // Every change is logged with the OS user who made it and the --reason given.
    let schedules = Schedules::new(pool)
        .by(super::actor())
        .because(cmd.reason());
    match cmd {
        ScheduleCommand::Create(_) => {
            let def = create.expect("built above");
            let s = schedules.create(&def).await?;
            outln!(
                "schedule {} created; next run {}",
                s.def.name,
                fmt_opt(s.next_run_at, s.spec()?.tz())
            )?;
        }
        ScheduleCommand::Update(a) => update(&schedules, &a).await?,
        ScheduleCommand::Drop { name, .. } => {
            schedules.remove(&name).await?;
            outln!("schedule {name} dropped")?;
        }
        ScheduleCommand::Pause { name, .. } => {
            schedules.pause(&name).await?;
            outln!("schedule {name} paused")?;
        }
        ScheduleCommand::Resume { name, .. } => {
            let s = schedules.resume(&name).await?;
            outln!(
                "schedule {name} is {}; next run {}",
                s.state,
                fmt_opt(s.next_run_at, s.spec()?.tz())
            )?;
        }
        ScheduleCommand::RunNow { name, .. } => {
            let id = schedules.run_now(&name).await?;
            outln!("{id}")?;
        }
        ScheduleCommand::Abort { name, pause, .. } => abort(&schedules, &name, pause).await?,
        read => show_what(&schedules, read).await?,
    }
    Ok(())
}

/// The commands that only read: list, show, runs, next, log.
async fn show_what(schedules: &Schedules, cmd: ScheduleCommand) -> Result<()> {
    match cmd {
        ScheduleCommand::List { format } => {
            let list = schedules.list().await?;
            if format.json {
                crate::out::json(&list)?;
            } else {
                print_list(&list)?;
            }
        }
        ScheduleCommand::Show { name, runs, format } => {
            show(schedules, &name, runs, format.json).await?
        }
        ScheduleCommand::Runs {
            name,
            limit,
            format,
        } => {
            let runs = schedules.runs(&name, limit).await?;
            if format.json {
                crate::out::json(&runs)?;
            } else {
                print_runs(&runs)?;
            }
        }
        ScheduleCommand::Next(a) => {
            let name = a
                .name
                .ok_or_else(|| anyhow!("give a schedule name or --spec"))?;
            next(schedules, &name, a.count, a.format.json).await?;
        }
        ScheduleCommand::Log {
            name,
            limit,
            format,
        } => {
            let log = schedules.log(&name, limit).await?;
            if format.json {
                crate::out::json(&log)?;
            } else {
                print_log(&log)?;
            }
        }
        _ => unreachable!("the commands that change schedules are handled by run"),
    }
    Ok(())
}

/// `log NAME`: one change a line, newest first.
fn print_log(log: &[ScheduleLogEntry]) -> Result<()> {
    if log.is_empty() {
        outln!("no changes logged")?;
        return Ok(());
    }
    outln!("{:<27} {:<8} {:<24} REASON", "AT (UTC)", "ACTION", "BY")?;
    for e in log {
        outln!(
            "{:<27} {:<8} {:<24} {}",
            e.at.format("%Y-%m-%d %H:%M:%S%.6f"),
            e.action,
            clean(&e.actor, false),
            e.reason.as_deref().map_or("-".into(), |r| clean(r, false))
        )?;
    }
    Ok(())
}

/// `next --spec TEXT`: the upcoming times of a spec that is not (yet) a schedule.
fn next_of_spec(text: &str, a: &ScheduleNextArgs) -> Result<()> {
    let spec = Spec::parse(text, a.time_zone.as_deref().unwrap_or("UTC"))?;
    let now = Utc::now();
    let times = spec.upcoming(now, now, a.count);
    if a.format.json {
        return crate::out::json(&times);
    }
    print_times(&times, spec.tz())
}

/// `show NAME`: the schedule and its latest runs.
async fn show(schedules: &Schedules, name: &str, runs: u32, json: bool) -> Result<()> {
    let s = schedules.get(name).await?;
    let runs = schedules.runs(name, runs).await?;
    if json {
        #[derive(serde::Serialize)]
        struct Show<'a> {
            schedule: &'a ScheduleRecord,
            runs: &'a [RunRecord],
        }
        return crate::out::json(&Show {
            schedule: &s,
            runs: &runs,
        });
    }
    print_one(&s)?;
    outln!()?;
    print_runs(&runs)
}

async fn update(schedules: &Schedules, a: &ScheduleUpdateArgs) -> Result<()> {
    let mut def = schedules.get(&a.name).await?.def;
    update_def(&mut def, a)?;
    let r = schedules.update(&def).await?;
    let s = schedules.get(&a.name).await?;
    outln!(
        "schedule {} {}; next run {}",
        s.def.name,
        match r {
            Upserted::Rescheduled => "updated and rescheduled",
            Upserted::Unchanged => "unchanged",
            _ => "updated",
        },
        fmt_opt(s.next_run_at, s.spec()?.tz())
    )?;
    Ok(())
}

async fn next(schedules: &Schedules, name: &str, count: usize, json: bool) -> Result<()> {
    let s = schedules.get(name).await?;
    let times = schedules.next(name, count).await?;
    if json {
        return crate::out::json(&times);
    }
    if times.is_empty() {
        outln!("schedule {name} is {} and has no next run", s.state)?;
    }
    print_times(&times, s.spec()?.tz())?;
    Ok(())
}

async fn abort(schedules: &Schedules, name: &str, pause: bool) -> Result<()> {
    if pause {
        schedules.pause(name).await?;
    }
    let r = schedules.abort(name).await?;
    outln!(
        "schedule {name}: {} job(s) cancelled or told to stop{}",
        r.cancelled,
        if pause { "; schedule paused" } else { "" }
    )?;
    Ok(())
}

fn create_def(a: &ScheduleCreateArgs) -> Result<ScheduleDef> {
    let mut def = ScheduleDef::new(&a.name, &a.kind, &a.spec);
    def.paused = a.paused;
    apply_options(&mut def, &a.options)?;
    def.validate()?;
    Ok(def)
}

fn update_def(def: &mut ScheduleDef, a: &ScheduleUpdateArgs) -> Result<()> {
    if let Some(k) = &a.kind {
        def.kind = k.clone();
    }
    if let Some(s) = &a.spec {
        def.spec = s.clone();
    }
    apply_options(def, &a.options)?;
    def.validate()?;
    Ok(())
}

fn apply_options(def: &mut ScheduleDef, o: &ScheduleOptions) -> Result<()> {
    if let Some(tz) = &o.time_zone {
        def.time_zone = tz.clone();
    }
    if let Some(p) = &o.job.payload {
        serde_json::from_str::<serde_json::Value>(p)
            .map_err(|e| anyhow!("invalid --payload: payload is not valid JSON: {e}"))?;
        def.payload = p.clone();
    }
    if let Some(q) = &o.job.queue {
        def.queue = q.clone();
    }
    if let Some(p) = o.job.priority {
        def.priority = p;
    }
    if let Some(n) = o.job.max_attempts {
        def.max_attempts = Some(n);
    }
    if let Some(t) = o.job.timeout {
        def.timeout = Some(t);
    }
    if let Some(s) = &o.start {
        def.start_at = parse_time("--start", s)?;
    }
    if let Some(s) = &o.end {
        def.end_at = parse_time("--end", s)?;
    }
    if let Some(b) = o.at_startup {
        def.at_startup = b;
    }
    if let Some(v) = o.overlap {
        def.overlap = v;
    }
    if let Some(v) = o.on_error {
        def.on_error = v;
    }
    if let Some(v) = o.misfire {
        def.misfire = v;
    }
    if let Some(j) = o.jitter {
        def.jitter = j;
    }
    if let Some(n) = o.broken_after {
        def.broken_after = n;
    }
    Ok(())
}

fn parse_time(flag: &str, s: &str) -> Result<Option<DateTime<Utc>>> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    DateTime::parse_from_rfc3339(s)
        .map(|t| Some(t.with_timezone(&Utc)))
        .map_err(|e| anyhow!("invalid {flag} {s:?}: {e}; use RFC 3339, e.g. 2030-01-01T00:00:00Z"))
}

fn fmt_utc(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

fn fmt_opt(t: Option<DateTime<Utc>>, tz: Tz) -> String {
    t.map_or_else(|| "-".to_string(), |t| fmt_both(t, tz))
}

/// UTC, and the schedule's local time when it is not UTC.
fn fmt_both(t: DateTime<Utc>, tz: Tz) -> String {
    if tz == chrono_tz::UTC {
        fmt_utc(t)
    } else {
        format!(
            "{} ({})",
            fmt_utc(t),
            t.with_timezone(&tz).format("%Y-%m-%d %H:%M:%S %Z")
        )
    }
}

fn print_times(times: &[DateTime<Utc>], tz: Tz) -> Result<()> {
    for t in times {
        outln!("{}", fmt_both(*t, tz))?;
    }
    Ok(())
}

/// The first line of an error, made safe for the terminal (errors carry handlers' stderr).
fn first_line(s: Option<&str>, max: usize) -> String {
    s.map(|e| {
        clean(e.lines().next().unwrap_or(""), false)
            .chars()
            .take(max)
            .collect()
    })
    .unwrap_or_default()
}

fn print_list(list: &[ScheduleRecord]) -> Result<()> {
    outln!(
        "{:<24} {:<9} {:<24} {:<16} {:<23} {:>6} {:>5}  LAST ERROR",
        "NAME",
        "STATE",
        "SPEC",
        "TIME ZONE",
        "NEXT RUN (UTC)",
        "RUNS",
        "FAILS"
    )?;
    for s in list {
        outln!(
            "{:<24} {:<9} {:<24} {:<16} {:<23} {:>6} {:>5}  {}",
            s.def.name,
            s.state,
            s.def.spec,
            s.def.time_zone,
            s.next_run_at.map_or_else(|| "-".into(), fmt_utc),
            s.total_runs,
            s.consecutive_failures,
            first_line(s.last_error.as_deref(), 60)
        )?;
    }
    if list.is_empty() {
        outln!("(no schedules)")?;
    }
    Ok(())
}

fn print_one(s: &ScheduleRecord) -> Result<()> {
    let d = &s.def;
    let tz = s.spec().map(|sp| sp.tz()).unwrap_or(chrono_tz::UTC);
    let opt = |t: Option<DateTime<Utc>>| fmt_opt(t, tz);
    outln!("name:          {}", d.name)?;
    outln!("state:         {}", s.state)?;
    outln!("spec:          {} ({})", d.spec, d.time_zone)?;
    outln!("kind:          {}", d.kind)?;
    outln!("queue:         {} (priority {})", d.queue, d.priority)?;
    outln!("payload:       {}", clean(&d.payload, true))?;
    outln!(
        "attempts:      {} per run{}",
        d.effective_max_attempts(),
        d.timeout
            .map(|t| format!(", timeout {}", humantime::format_duration(t)))
            .unwrap_or_default()
    )?;
    outln!(
        "policies:      overlap {}, on error {}, misfire {}, jitter {}, broken after {}",
        d.overlap,
        d.on_error,
        d.misfire,
        humantime::format_duration(d.jitter),
        d.broken_after
    )?;
    outln!("window:        {} to {}", opt(d.start_at), opt(d.end_at))?;
    outln!("at startup:    {}", if d.at_startup { "yes" } else { "no" })?;
    outln!("next run:      {}", opt(s.next_run_at))?;
    outln!("last run:      {}", opt(s.last_run_at))?;
    outln!(
        "runs:          {} created, {} failed, {} skipped",
        s.total_runs,
        s.total_failures,
        s.skipped_runs
    )?;
    outln!(
        "failures:      {} in a row{}",
        s.consecutive_failures,
        if d.broken_after > 0 {
            format!(" (broken at {})", d.broken_after)
        } else {
            String::new()
        }
    )?;
    match &s.last_error {
        Some(e) => outln!(
            "last error:    {}",
            clean(e, true).replace('\n', "\n               ")
        )?,
        None => outln!("last error:    -")?,
    }
    outln!("created at:    {}", fmt_utc(s.created_at))?;
    Ok(())
}

fn print_runs(runs: &[RunRecord]) -> Result<()> {
    outln!(
        "{:<23} {:<9} {:>10} {:<9} {:<23} {:<23} {:<9}  ERROR",
        "PLANNED (UTC)",
        "CAUSE",
        "JOB",
        "JOB STATE",
        "STARTED (UTC)",
        "FINISHED (UTC)",
        "OUTCOME"
    )?;
    for r in runs {
        outln!(
            "{:<23} {:<9} {:>10} {:<9} {:<23} {:<23} {:<9}  {}",
            fmt_utc(r.planned_at),
            r.cause,
            r.job_id.map_or_else(|| "-".into(), |j| j.to_string()),
            r.job_state.map_or("-", State::as_str),
            r.started_at.map_or_else(|| "-".into(), fmt_utc),
            r.finished_at.map_or_else(|| "-".into(), fmt_utc),
            r.outcome.map_or("-", Outcome::as_str),
            first_line(r.error.as_deref(), 60)
        )?;
    }
    if runs.is_empty() {
        outln!("(no runs yet)")?;
    }
    Ok(())
}
