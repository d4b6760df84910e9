//! The scheduler: turns schedules into jobs, exactly one job per planned time, however many schedulers run.
//!
//! Each tick reads the clock once (the database's `NOW(6)`, so schedulers on hosts with skewed clocks
//! agree), then:
//! 1. records the outcome of runs whose jobs ended (done, dead, cancelled), which counts consecutive
//!    failures, pauses a schedule under the `pause` error policy and breaks it after `broken_after`
//!    failures in a row;
//! 2. walks the enabled schedules whose `next_run_at` has come and, for each, asks
//!    `policy::decide` what to do (overlap, misfire, window, this tick's job budget), then writes the
//!    decision with `db::schedule`'s conditional update: the jobs and run rows are created in the
//!    same transaction that moves `next_run_at` on from the value this scheduler read, so a scheduler that
//!    lost the race to another writes nothing. There is no leader to elect or lose: any number of
//!    schedulers (one per host, or one inside each supervisor) can run.
//!
//! A planned time becomes a job when it has come (the scheduler plans nothing ahead): the job's `run_at` is
//! the planned time plus the schedule's jitter, and a worker picks it up like any other job.
//!
//! Defaults, as named constants on [`SchedulerConfig`]: a tick a second; at most 100 jobs per tick
//! (schedules past that stay due for the next tick, so a burst is spread instead of flooding the queue);
//! a planned time more than 60 s late counts as missed (Quartz's misfire threshold), which is when the
//! misfire policy applies; the `all` misfire policy makes up for at most 100 missed times per schedule.
//!
//! The service follows River's maintenance services: [`Scheduler::run_once`] is one pass returning
//! counts (what tests call, with a [`Clock::Manual`] instead of sleeping), and [`Scheduler::run`] loops
//! on a ticker until cancelled, always finishing the pass it is in.

mod clock;
pub(crate) mod manage;
pub(crate) mod policy;

use std::time::Duration;

use crate::service::{PassReport, Register, run_every};
use chrono::{DateTime, TimeDelta, Utc};
use sqlx::MySqlPool;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::db::registry::Role;
use crate::db::schedule::{self as sql, Advance, Fire};
use crate::error::{Error, Result};
use crate::schedule::{Cause, Outcome, Overlap, ScheduleRecord, ScheduleState};
use policy::{Decision, DueInput};

pub(crate) use crate::schedule::ScheduleDef;
pub use clock::{Clock, ManualClock};
pub use manage::{AbortReport, Schedules, Upserted};

/// Scheduler settings. `Default` gives the documented defaults.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Time between ticks of [`Scheduler::run`].
    pub interval: Duration,
    /// Most jobs one tick creates, over all schedules.
    pub max_jobs_per_tick: u32,
    /// Most missed times the `all` misfire policy makes up for, per schedule and outage.
    pub max_catch_up: u32,
    /// How late a planned time may be and still count as on time.
    pub misfire_grace: Duration,
    /// How often the scheduler refreshes its registry row.
    pub heartbeat_interval: Duration,
    /// Where "now" comes from.
    pub clock: Clock,
    /// Schedules to upsert when the scheduler starts (the `[schedules.NAME]` sections of `jobq.toml`).
    pub definitions: Vec<ScheduleDef>,
}

impl SchedulerConfig {
    /// Default `interval`: 1 s, so a job starts within about a second of its planned time.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
    /// Default `max_jobs_per_tick`: 100.
    pub const DEFAULT_MAX_JOBS_PER_TICK: u32 = 100;
    /// Default `max_catch_up`: 100.
    pub const DEFAULT_MAX_CATCH_UP: u32 = 100;
    /// Default `misfire_grace`: 60 s, Quartz's misfire threshold.
    pub const DEFAULT_MISFIRE_GRACE: Duration = Duration::from_secs(60);
    /// Default `heartbeat_interval`: as the worker's.
    pub const DEFAULT_HEARTBEAT: Duration = crate::worker::WorkerConfig::DEFAULT_HEARTBEAT;

    fn validate(&self) -> Result<()> {
        for (name, d) in [
            ("scheduler interval", self.interval),
            ("scheduler heartbeat interval", self.heartbeat_interval),
        ] {
            if d.is_zero() {
                return Err(Error::invalid(name, "must be above zero"));
            }
        }
        for (name, n) in [
            ("scheduler max_jobs_per_tick", self.max_jobs_per_tick),
            ("scheduler max_catch_up", self.max_catch_up),
        ] {
            if n == 0 {
                return Err(Error::invalid(name, "must be at least 1"));
            }
        }
        for d in &self.definitions {
            d.validate()?;
        }
        Ok(())
    }
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            interval: Self::DEFAULT_INTERVAL,
            max_jobs_per_tick: Self::DEFAULT_MAX_JOBS_PER_TICK,
            max_catch_up: Self::DEFAULT_MAX_CATCH_UP,
            misfire_grace: Self::DEFAULT_MISFIRE_GRACE,
            heartbeat_interval: Self::DEFAULT_HEARTBEAT,
            clock: Clock::Database,
            definitions: Vec::new(),
        }
    }
}

/// Counts of one tick.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Jobs created.
    pub created: u64,
    /// Due schedules looked at.
    pub due: u64,
    /// Planned times passed over without a job (overlap `skip`, misfires).
    pub skipped: u64,
    /// Due schedules left due: waiting for their previous run (overlap `wait`), or past this tick's budget.
    pub held: u64,
    /// Schedules that ended (no planned time left).
    pub finished: u64,
    /// Due schedules another scheduler handled first.
    pub lost_races: u64,
    /// Runs whose job ended, recorded this tick.
    pub ended_runs: u64,
    /// Of those, runs whose job ended dead.
    pub failed_runs: u64,
    /// Schedules paused by the `pause` error policy this tick.
    pub paused: u64,
    /// Schedules broken this tick.
    pub broken: u64,
}

crate::counts::counters!(TickReport {
    created,
    due,
    skipped,
    held,
    finished,
    lost_races,
    ended_runs,
    failed_runs,
    paused,
    broken
});

impl PassReport for TickReport {
    fn is_quiet(&self) -> bool {
        self.created == 0
            && self.skipped == 0
            && self.finished == 0
            && self.failed_runs == 0
            && self.paused == 0
            && self.broken == 0
    }
}

/// Due schedules read per page; a tick reads pages until its job budget is spent.
const PAGE: u32 = 100;
/// Most pages one tick reads, so a tick stays short even with many held schedules.
const MAX_PAGES: u32 = 20;
/// Most ended runs recorded per tick.
const OUTCOMES_PER_TICK: u32 = 1000;

/// Turns schedules into jobs. See the module docs.
#[derive(Debug)]
pub struct Scheduler {
    pool: MySqlPool,
    cfg: SchedulerConfig,
}

impl Scheduler {
    /// A scheduler on `pool`.
    ///
    /// # Errors
    /// When a setting is out of range or a definition in `cfg.definitions` is invalid.
    pub fn new(pool: MySqlPool, cfg: SchedulerConfig) -> Result<Scheduler> {
        cfg.validate()?;
        Ok(Scheduler { pool, cfg })
    }

    /// Managing schedules with this scheduler's clock.
    pub fn schedules(&self) -> Schedules {
        Schedules::with_clock(self.pool.clone(), self.cfg.clock.clone())
    }

    /// Upserts `cfg.definitions` (see [`Schedules::sync`]).
    pub async fn sync_definitions(&self) -> Result<Vec<(String, Upserted)>> {
        let why = Some("synced from the configuration's [schedules] sections");
        let schedules = self.schedules().by(crate::schedule::SCHEDULER_ACTOR);
        schedules.because(why).sync(&self.cfg.definitions).await
    }

    /// Runs until `shutdown` is cancelled: registers in the process registry, syncs the configured
    /// definitions, creates the startup runs, then ticks every `interval`. A tick in progress when
    /// `shutdown` is cancelled is finished first.
    ///
    /// # Errors
    /// When the database is not migrated, the scheduler cannot register, or a configured definition
    /// cannot be written. Errors of single ticks are logged and the next tick tries again.
    pub async fn run(self, shutdown: CancellationToken) -> Result<()> {
        let register = Register {
            role: Role::Scheduler,
            queues: &[],
            kinds: &[],
            bounds: crate::db::registry::Bounds {
                heartbeat: self.cfg.heartbeat_interval,
                fence: crate::claimant::fence::DEFAULT_BOUND.max(self.cfg.heartbeat_interval * 3),
            },
            wait_for_database: true,
            watch_fence: None,
        };
        let Some(registration) = register.open(&self.pool, &shutdown).await? else {
            return Ok(());
        };
        info!(claim = %registration.token(), interval = ?self.cfg.interval, "scheduler started");
        let result = self.serve(&shutdown).await;
        registration.close(&self.pool).await;
        info!("scheduler stopped");
        result
    }

    async fn serve(&self, shutdown: &CancellationToken) -> Result<()> {
        self.sync_definitions().await?;
        match self.startup().await {
            Ok(0) => {}
            Ok(n) => info!(jobs = n, "startup runs created"),
            Err(e) => warn!(error = %e, "startup runs failed"),
        }
        run_every("scheduler", self.cfg.interval, shutdown, || self.run_once()).await;
        Ok(())
    }

    /// Creates a run for each enabled `at_startup` schedule whose window is open, unless its previous
    /// run is still going and its overlap policy is not `allow`. Called by [`Scheduler::run`]; not by
    /// `jobq scheduler --once`, which cron starts every minute. Returns the number of jobs created.
    pub async fn startup(&self) -> Result<u64> {
        let now = self.cfg.clock.now(&self.pool).await?;
        let mut created = 0;
        for s in sql::startup_schedules(&self.pool).await? {
            let open =
                s.def.start_at.is_none_or(|t| t <= now) && s.def.end_at.is_none_or(|t| now <= t);
            if !open {
                continue;
            }
            if s.def.overlap != Overlap::Allow
                && !sql::active_jobs(&self.pool, s.id).await?.is_empty()
            {
                debug!(schedule = %s.def.name, "previous run still going; no startup run");
                continue;
            }
            let fire = Fire {
                planned_at: now,
                cause: Cause::Startup,
                run_at: jittered(now, s.def.jitter),
            };
            if sql::fire_one(&self.pool, s.id, &fire).await?.is_some() {
                created += 1;
            }
        }
        Ok(created)
    }

    /// One pass: record ended runs, then turn due planned times into jobs. Returns what it did.
    ///
    /// # Errors
    /// Database errors that outlived their retries. What was committed before stays committed, and the
    /// next pass goes on from there.
    pub async fn run_once(&self) -> Result<TickReport> {
        let now = self.cfg.clock.now(&self.pool).await?;
        let mut report = TickReport::default();
        self.record_outcomes(&mut report).await?;

        let mut budget = self.cfg.max_jobs_per_tick;
        let mut seen = std::collections::HashSet::new();
        'pages: for _ in 0..MAX_PAGES {
            let page = sql::due(&self.pool, now, PAGE + seen.len() as u32).await?;
            let fresh: Vec<_> = page.into_iter().filter(|s| !seen.contains(&s.id)).collect();
            if fresh.is_empty() {
                break;
            }
            for s in fresh {
                seen.insert(s.id);
                if budget == 0 && s.def.overlap != Overlap::Skip {
                    report.held += 1;
                    continue;
                }
                report.due += 1;
                match self.tick_one(&s, now, budget, &mut report).await {
                    Ok(n) => budget = budget.saturating_sub(n as u32),
                    Err(e) => warn!(schedule = %s.def.name, error = %e, "schedule tick failed"),
                }
            }
            if budget == 0 {
                break 'pages;
            }
        }
        Ok(report)
    }

    async fn record_outcomes(&self, report: &mut TickReport) -> Result<()> {
        for run in sql::ended_runs(&self.pool, OUTCOMES_PER_TICK).await? {
            let outcome = run.outcome;
            let changed = sql::record_outcome(
                &self.pool,
                &run,
                |state, failures, on_error, broken_after| {
                    policy::after_outcome(state, failures, outcome, on_error, broken_after)
                },
            )
            .await?;
            let Some((before, after)) = changed else {
                continue;
            };
            report.ended_runs += 1;
            if outcome == Outcome::Failed {
                report.failed_runs += 1;
            }
            if before != after {
                match after {
                    ScheduleState::Paused => report.paused += 1,
                    ScheduleState::Broken => report.broken += 1,
                    _ => {}
                }
                warn!(schedule_id = run.schedule_id, from = %before, to = %after,
                      error = run.error.as_deref().unwrap_or(""), "schedule state changed by a failed run");
            }
        }
        Ok(())
    }

    /// Handles one due schedule. Returns the number of jobs it created.
    async fn tick_one(
        &self,
        s: &ScheduleRecord,
        now: DateTime<Utc>,
        budget: u32,
        report: &mut TickReport,
    ) -> Result<u64> {
        let Some(expected_next) = s.next_run_at else {
            return Ok(0);
        };
        let spec = s.spec()?;
        let active_runs = match s.def.overlap {
            Overlap::Allow => 0,
            _ => sql::active_jobs(&self.pool, s.id).await?.len() as u64,
        };
        let decision = policy::decide(&DueInput {
            spec: &spec,
            anchor: s.anchor_at,
            next_run_at: expected_next,
            end_at: s.def.end_at,
            now,
            active_runs,
            overlap: s.def.overlap,
            misfire: s.def.misfire,
            grace: self.cfg.misfire_grace,
            max_catch_up: self.cfg.max_catch_up,
            budget,
        });
        let (fire, next_run_at, skipped) = match decision {
            Decision::Hold => {
                report.held += 1;
                return Ok(0);
            }
            Decision::Advance {
                fire,
                next_run_at,
                skipped,
            } => (fire, next_run_at, skipped),
        };
        let fire: Vec<Fire> = fire
            .into_iter()
            .map(|(planned_at, cause)| Fire {
                planned_at,
                cause,
                run_at: jittered(planned_at, s.def.jitter),
            })
            .collect();
        let state = if next_run_at.is_some() {
            ScheduleState::Enabled
        } else {
            ScheduleState::Finished
        };
        let advanced = sql::advance(
            &self.pool,
            &Advance {
                id: s.id,
                expected_next,
                next_run_at,
                state,
                fire: &fire,
                skipped,
            },
        )
        .await?;
        let Some(created) = advanced else {
            report.lost_races += 1;
            return Ok(0);
        };
        report.created += created;
        report.skipped += skipped;
        if state == ScheduleState::Finished {
            report.finished += 1;
            info!(schedule = %s.def.name, "schedule finished: no planned time left");
        }
        if skipped > 0 {
            info!(schedule = %s.def.name, skipped, misfire = %s.def.misfire, overlap = %s.def.overlap,
                  "planned times skipped");
        }
        Ok(created)
    }
}

/// `t` plus a random delay of up to `jitter` (whole milliseconds).
fn jittered(t: DateTime<Utc>, jitter: Duration) -> DateTime<Utc> {
    let ms = jitter.as_millis().min(i64::MAX as u128) as i64;
    if ms == 0 {
        return t;
    }
    t + TimeDelta::milliseconds(rand::random_range(0..=ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn jitter_stays_within_bounds() {
        let t = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
        assert_eq!(jittered(t, Duration::ZERO), t);
        for _ in 0..1000 {
            let j = jittered(t, Duration::from_secs(30));
            assert!(j >= t && j <= t + TimeDelta::seconds(30));
        }
    }

    #[test]
    fn config_is_validated() {
        let pool_free = SchedulerConfig {
            max_jobs_per_tick: 0,
            ..Default::default()
        };
        let e = pool_free.validate().unwrap_err().to_string();
        assert_eq!(e, "invalid scheduler max_jobs_per_tick: must be at least 1");
        let still = SchedulerConfig {
            heartbeat_interval: Duration::ZERO,
            ..Default::default()
        };
        let e = still.validate().unwrap_err().to_string();
        assert_eq!(
            e,
            "invalid scheduler heartbeat interval: must be above zero"
        );
        let bad_def = SchedulerConfig {
            definitions: vec![ScheduleDef::new("x", "k", "0 25 * * *")],
            ..Default::default()
        };
        let e = bad_def.validate().unwrap_err().to_string();
        assert!(e.contains("field 2 (hour)"), "{e}");
        assert!(SchedulerConfig::default().validate().is_ok());
    }
}
