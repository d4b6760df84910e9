//! Managing schedules: create, update, upsert (config sync), drop, pause, resume, run now, abort, and
//! reading them back. The CLI and library users go through [`Schedules`]; the SQL is in
//! [`crate::db::schedule`].
//!
//! Every change is written to the change log (`jobq_schedule_log`) with who made it and why, in the
//! same transaction as the change where there is one (abort cancels jobs one by one, and logs after).

use chrono::{DateTime, TimeDelta, Utc};
use sqlx::MySqlPool;
use tracing::{info, warn};

use super::Clock;
use super::policy;
use crate::db::schedule::{self as sql, Fire, Logged, Note, Reschedule};
use crate::error::{Error, Result};
use crate::job::JobId;
use crate::schedule::{
    Cause, LIBRARY_ACTOR, LogAction, RunRecord, ScheduleDef, ScheduleLogEntry, ScheduleRecord,
    ScheduleState, Spec,
};

/// The longest actor the log keeps (its column is VARCHAR(255)).
const MAX_ACTOR_CHARS: usize = 255;
/// The longest reason taken: a sentence or a ticket reference, not a document.
const MAX_REASON_CHARS: usize = 1000;

/// Operations on stored schedules. Cheap to create; holds a pool handle, a clock, and who makes the
/// changes and why ([`Schedules::by`], [`Schedules::because`]), which every change writes to the
/// schedule's change log ([`Schedules::log`]).
#[derive(Debug, Clone)]
pub struct Schedules {
    pool: MySqlPool,
    clock: Clock,
    actor: String,
    reason: Option<String>,
}

/// What [`Schedules::upsert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upserted {
    /// A new schedule.
    Created,
    /// The spec, time zone or window changed: the next run was computed again from now.
    Rescheduled,
    /// Other fields changed; state and next run were kept.
    Updated,
    /// Nothing changed.
    Unchanged,
}

/// What [`Schedules::abort`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AbortReport {
    /// Jobs cancelled, or (running ones) asked to stop: their worker tells the handler and ends the job
    /// `cancelled`.
    pub cancelled: u64,
    /// Jobs that ended on their own meanwhile.
    pub already_ended: u64,
}

impl Schedules {
    /// Schedules on `pool`, timed by the database clock.
    pub fn new(pool: MySqlPool) -> Self {
        Self::with_clock(pool, Clock::Database)
    }

    /// Schedules timed by `clock` (tests use a manual clock).
    pub fn with_clock(pool: MySqlPool, clock: Clock) -> Self {
        Self {
            pool,
            clock,
            actor: LIBRARY_ACTOR.to_string(),
            reason: None,
        }
    }

    /// Changes made through the returned value are logged as made by `actor` (default
    /// [`LIBRARY_ACTOR`]): a user name, a service, a ticket system. Checked by each change: an empty
    /// actor or one over 255 characters is [`Error::Invalid`], and nothing is written.
    pub fn by(mut self, actor: impl Into<String>) -> Self {
        self.actor = actor.into();
        self
    }

    /// Changes made through the returned value are logged with `reason` (None: no reason). Checked by
    /// each change: a blank reason or one over 1,000 characters is [`Error::Invalid`], and nothing is
    /// written.
    pub fn because(mut self, reason: Option<impl Into<String>>) -> Self {
        self.reason = reason.map(Into::into);
        self
    }

    /// Who and why, checked: what every change writes to the log.
    fn note(&self) -> Result<Note<'_>> {
        let actor = self.actor.trim();
        if actor.is_empty() {
            return Err(Error::invalid("actor", "must not be empty"));
        }
        let n = actor.chars().count();
        if n > MAX_ACTOR_CHARS {
            return Err(Error::invalid(
                "actor",
                format!("is {n} characters long; at most {MAX_ACTOR_CHARS}"),
            ));
        }
        let reason = match self.reason.as_deref().map(str::trim) {
            None => None,
            Some("") => {
                return Err(Error::invalid(
                    "reason",
                    "is empty; give one, or leave the reason out",
                ));
            }
            Some(r) => {
                let n = r.chars().count();
                if n > MAX_REASON_CHARS {
                    return Err(Error::invalid(
                        "reason",
                        format!("is {n} characters long; at most {MAX_REASON_CHARS}"),
                    ));
                }
                Some(r)
            }
        };
        Ok(Note { actor, reason })
    }

    /// A change of schedule `name` to log, by and for this value's actor and reason.
    fn logged<'a>(&'a self, name: &'a str, action: LogAction) -> Result<Logged<'a>> {
        Ok(Logged {
            name,
            action,
            note: self.note()?,
        })
    }

    async fn now(&self) -> Result<DateTime<Utc>> {
        self.clock.now(&self.pool).await
    }

    /// One schedule.
    ///
    /// # Errors
    /// [`Error::ScheduleNotFound`] when there is none of that name.
    pub async fn get(&self, name: &str) -> Result<ScheduleRecord> {
        sql::get(&self.pool, name)
            .await?
            .ok_or_else(|| Error::ScheduleNotFound {
                name: name.to_string(),
            })
    }

    /// Every schedule, by name.
    pub async fn list(&self) -> Result<Vec<ScheduleRecord>> {
        sql::list(&self.pool).await
    }

    /// A schedule's runs, newest first.
    pub async fn runs(&self, name: &str, limit: u32) -> Result<Vec<RunRecord>> {
        let s = self.get(name).await?;
        sql::runs(&self.pool, s.id, limit).await
    }

    /// The changes made to the schedule(s) of this name, newest first, at most `limit`: also those of
    /// a schedule that was dropped, and of earlier schedules of the same name (see
    /// [`ScheduleLogEntry::schedule_id`]).
    ///
    /// # Errors
    /// [`Error::ScheduleNotFound`] when there is no schedule of that name and none was ever logged.
    pub async fn log(&self, name: &str, limit: u32) -> Result<Vec<ScheduleLogEntry>> {
        let entries = sql::log_of(&self.pool, name, limit).await?;
        if entries.is_empty() {
            // A schedule with no entries (made before the log existed) has an empty log.
            self.get(name).await?;
        }
        Ok(entries)
    }

    /// The next `n` planned times of a stored schedule, from now (or from its next run, if that is
    /// earlier: a due run not yet made is shown too).
    pub async fn next(&self, name: &str, n: usize) -> Result<Vec<DateTime<Utc>>> {
        let s = self.get(name).await?;
        let spec = s.spec()?;
        let Some(first) = s.next_run_at else {
            return Ok(vec![]);
        };
        let mut out = vec![first];
        out.extend(
            spec.upcoming(first, s.anchor_at, n.saturating_sub(1))
                .into_iter()
                .filter(|t| s.def.end_at.is_none_or(|end| *t <= end)),
        );
        out.truncate(n);
        Ok(out)
    }

    /// Timing for a spec set now: anchor, first run, and the error when there is none.
    fn timing(
        def: &ScheduleDef,
        spec: &Spec,
        now: DateTime<Utc>,
    ) -> Result<(DateTime<Utc>, DateTime<Utc>)> {
        // Whole seconds: `every 5m` created at 12:00:03.481 runs at 12:05:03, not 12:05:03.481.
        let now_s = now - TimeDelta::nanoseconds(i64::from(now.timestamp_subsec_nanos()));
        let anchor = def.start_at.unwrap_or(now_s);
        let next = policy::first_run(spec, anchor, def.start_at, def.end_at, now).ok_or_else(
            || Error::ScheduleInvalid {
                name: def.name.clone(),
                reason: if spec.is_once() {
                    format!(
                        "its `once` time has passed, or is outside what a TIMESTAMP holds ({}); \
                         `jobq schedule run-now` runs a schedule now",
                        crate::job::timestamp_range_text()
                    )
                } else {
                    format!(
                        "no planned time is left in its window and in what a TIMESTAMP holds ({})",
                        crate::job::timestamp_range_text()
                    )
                },
            },
        )?;
        Ok((anchor, next))
    }

    /// Creates a schedule. Nothing is written if the definition is invalid.
    ///
    /// # Errors
    /// [`Error::Spec`] or [`Error::ScheduleInvalid`] saying what is wrong (also when the spec leaves no
    /// planned time); [`Error::ScheduleExists`] if the name is taken.
    pub async fn create(&self, def: &ScheduleDef) -> Result<ScheduleRecord> {
        let spec = def.validate()?;
        let note = self.note()?;
        let now = self.now().await?;
        let (anchor, next) = Self::timing(def, &spec, now)?;
        let state = if def.paused {
            ScheduleState::Paused
        } else {
            ScheduleState::Enabled
        };
        sql::insert(&self.pool, def, anchor, Some(next), state, note).await?;
        info!(schedule = %def.name, spec = %spec, next = %next, "schedule created");
        self.get(&def.name).await
    }

    /// Replaces a schedule's definition (found by `def.name`). A changed spec, time zone or window
    /// computes the next run again from now (and a finished schedule becomes enabled); otherwise state
    /// and next run are kept. `def.paused` is ignored: use [`Schedules::pause`] and
    /// [`Schedules::resume`].
    pub async fn update(&self, def: &ScheduleDef) -> Result<Upserted> {
        let spec = def.validate()?;
        self.note()?;
        let current = self.get(&def.name).await?;
        self.apply(&current, def, &spec).await
    }

    async fn apply(
        &self,
        current: &ScheduleRecord,
        def: &ScheduleDef,
        spec: &Spec,
    ) -> Result<Upserted> {
        let cur = &current.def;
        let timing_changed = cur.spec.trim() != def.spec.trim()
            || cur.time_zone.trim() != def.time_zone.trim()
            || cur.start_at != def.start_at
            || cur.end_at != def.end_at;
        let reschedule = if timing_changed {
            let now = self.now().await?;
            let (anchor_at, next) = Self::timing(def, spec, now)?;
            Some(Reschedule {
                anchor_at,
                next_run_at: Some(next),
                state: match current.state {
                    ScheduleState::Finished => ScheduleState::Enabled,
                    s => s,
                },
            })
        } else {
            let unchanged = normalized(cur) == normalized(def);
            if unchanged {
                return Ok(Upserted::Unchanged);
            }
            None
        };
        sql::update_definition(&self.pool, current.id, def, reschedule, self.note()?).await?;
        Ok(if reschedule.is_some() {
            info!(schedule = %def.name, spec = %spec, "schedule rescheduled");
            Upserted::Rescheduled
        } else {
            Upserted::Updated
        })
    }

    /// Creates the schedule, or updates the one of that name (see [`Schedules::update`]).
    pub async fn upsert(&self, def: &ScheduleDef) -> Result<Upserted> {
        let spec = def.validate()?;
        self.note()?;
        if let Some(current) = sql::get(&self.pool, &def.name).await? {
            return self.apply(&current, def, &spec).await;
        }
        match self.create(def).await {
            Ok(_) => Ok(Upserted::Created),
            // Another process created it between our read and insert: update that one instead.
            Err(Error::ScheduleExists { .. }) => {
                let current = self.get(&def.name).await?;
                self.apply(&current, def, &spec).await
            }
            Err(e) => Err(e),
        }
    }

    /// Upserts every definition (the `[schedules.NAME]` sections of `jobq.toml`). Schedules that are not
    /// in `defs` are left alone: removing a section does not drop its schedule (`jobq schedule drop`
    /// does).
    pub async fn sync(&self, defs: &[ScheduleDef]) -> Result<Vec<(String, Upserted)>> {
        let mut out = Vec::with_capacity(defs.len());
        for def in defs {
            let r = self.upsert(def).await?;
            if r != Upserted::Unchanged {
                info!(schedule = %def.name, result = ?r, "schedule synced from config");
            }
            out.push((def.name.clone(), r));
        }
        Ok(out)
    }

    /// Deletes a schedule and its run history. Jobs it created are left as they are (abort them first
    /// to stop them).
    pub async fn remove(&self, name: &str) -> Result<()> {
        let note = self.note()?;
        let s = self.get(name).await?;
        sql::delete(&self.pool, s.id, name, note).await?;
        info!(schedule = %name, "schedule dropped");
        Ok(())
    }

    /// Pauses an enabled schedule (a paused one stays paused): no new runs until [`Schedules::resume`].
    /// Running jobs go on (see [`Schedules::abort`]).
    ///
    /// # Errors
    /// [`Error::ScheduleState`] when the schedule is finished or broken.
    pub async fn pause(&self, name: &str) -> Result<()> {
        let logged = self.logged(name, LogAction::Pause)?;
        let s = self.get(name).await?;
        let ok = sql::set_state(
            &self.pool,
            s.id,
            &[ScheduleState::Enabled, ScheduleState::Paused],
            ScheduleState::Paused,
            None,
            false,
            logged,
        )
        .await?;
        if !ok {
            return Err(Error::ScheduleState {
                name: name.into(),
                state: s.state.to_string(),
                reason: "only an enabled schedule can be paused",
            });
        }
        Ok(())
    }

    /// Resumes a paused or broken schedule (a broken one's failure count starts again at 0). Planned times
    /// that passed while it was paused are not made up: the next run is the first planned time after now.
    ///
    /// # Errors
    /// [`Error::ScheduleState`] when the schedule is finished.
    pub async fn resume(&self, name: &str) -> Result<ScheduleRecord> {
        let logged = self.logged(name, LogAction::Resume)?;
        let s = self.get(name).await?;
        if !matches!(
            s.state,
            ScheduleState::Paused | ScheduleState::Broken | ScheduleState::Enabled
        ) {
            return Err(Error::ScheduleState {
                name: name.into(),
                state: s.state.to_string(),
                reason: "change its spec or window with `jobq schedule update` to run it again",
            });
        }
        let spec = s.spec()?;
        let now = self.now().await?;
        let next = match s.next_run_at {
            Some(t) if t > now => Some(t),
            _ => policy::first_run(&spec, s.anchor_at, s.def.start_at, s.def.end_at, now),
        };
        let state = if next.is_some() {
            ScheduleState::Enabled
        } else {
            ScheduleState::Finished
        };
        sql::set_state(
            &self.pool,
            s.id,
            &[
                ScheduleState::Paused,
                ScheduleState::Broken,
                ScheduleState::Enabled,
            ],
            state,
            Some(next),
            true,
            logged,
        )
        .await?;
        self.get(name).await
    }

    /// Creates a run now, outside the schedule's times and whatever its state, overlap policy and window
    /// (an operator asked). Returns the new job's id.
    ///
    /// # Errors
    /// [`Error::ScheduleRunExists`] when a run for this very instant exists (a scheduled run at the same
    /// microsecond): trying again a moment later works.
    pub async fn run_now(&self, name: &str) -> Result<JobId> {
        let logged = self.logged(name, LogAction::RunNow)?;
        let s = self.get(name).await?;
        let now = self.now().await?;
        let fire = Fire {
            planned_at: now,
            cause: Cause::Manual,
            run_at: now,
        };
        sql::fire_logged(&self.pool, s.id, &fire, Some(logged))
            .await?
            .ok_or_else(|| Error::ScheduleRunExists {
                name: name.into(),
                planned_at: now,
            })
    }

    /// Cancels the schedule's jobs that have not ended: queued and retry jobs at once, running ones
    /// through their worker, which tells the handler to stop and ends the job `cancelled`. The schedule
    /// itself goes on; pause it first to stop new runs too.
    pub async fn abort(&self, name: &str) -> Result<AbortReport> {
        let logged = self.logged(name, LogAction::Abort)?;
        let s = self.get(name).await?;
        let mut report = AbortReport::default();
        for id in sql::active_jobs(&self.pool, s.id).await? {
            match crate::db::admin::cancel_job(&self.pool, id).await {
                Ok(_) => report.cancelled += 1,
                Err(Error::JobState { .. } | Error::JobNotFound(_)) => report.already_ended += 1,
                Err(e) => return Err(e),
            }
        }
        if report.cancelled > 0 {
            warn!(schedule = %name, jobs = report.cancelled, "schedule's jobs aborted");
        }
        // Each cancel is its own statement (a running job's is a request its worker acts on), so the
        // abort is logged once they are made, not in one transaction with them.
        let mut conn = self.pool.acquire().await?;
        crate::db::schedule::write_log(&mut conn, s.id, &logged).await?;
        Ok(report)
    }
}

/// A definition as compared by [`Schedules::update`]: spec and time zone trimmed, the payload as parsed
/// JSON (the server may store it reformatted), and the paused flag left out (state is not definition).
fn normalized(d: &ScheduleDef) -> ScheduleDef {
    let payload = serde_json::from_str::<serde_json::Value>(&d.payload)
        .map_or_else(|_| d.payload.clone(), |v| v.to_string());
    ScheduleDef {
        spec: d.spec.trim().to_string(),
        time_zone: d.time_zone.trim().to_string(),
        payload,
        paused: false,
        ..d.clone()
    }
}
