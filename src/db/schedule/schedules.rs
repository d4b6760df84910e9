//! The schedules themselves (`jobq_schedules`): their definitions, states and next runs, as the
//! scheduler and `jobq schedule` read and change them. The run-making statements are in `runs.rs`.

use chrono::{DateTime, Utc};
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, MySqlPool, QueryBuilder, Row};

use super::TRIES;
use super::log::{self, Logged, Note};
use crate::db::retry_transient;
use crate::db::row::{opt_text, parsed, text};
use crate::errno::is_duplicate_entry;
use crate::error::{Error, Result};
use crate::schedule::{
    LogAction, Misfire, OnError, Overlap, ScheduleDef, ScheduleRecord, ScheduleState,
};

const SCHEDULE_COLUMNS: &str = "id, name, kind, payload, queue, priority, max_attempts, timeout_secs, \
     spec, time_zone, anchor_at, start_at, end_at, at_startup, overlap, on_error, misfire, jitter_ms, \
     broken_after, state, next_run_at, last_run_at, consecutive_failures, total_runs, total_failures, \
     skipped_runs, last_error, created_at, updated_at";

impl<'r> sqlx::FromRow<'r, MySqlRow> for ScheduleRecord {
    fn from_row(row: &'r MySqlRow) -> Result<Self, sqlx::Error> {
        let jitter_ms: u32 = row.try_get("jitter_ms")?;
        let timeout_secs: Option<u32> = row.try_get("timeout_secs")?;
        let def = ScheduleDef {
            name: text(row, "name")?,
            kind: text(row, "kind")?,
            spec: text(row, "spec")?,
            time_zone: text(row, "time_zone")?,
            payload: text(row, "payload")?,
            queue: text(row, "queue")?,
            priority: row.try_get("priority")?,
            max_attempts: row.try_get("max_attempts")?,
            timeout: timeout_secs.map(|s| std::time::Duration::from_secs(s.into())),
            start_at: row.try_get("start_at")?,
            end_at: row.try_get("end_at")?,
            at_startup: row.try_get("at_startup")?,
            overlap: parsed::<Overlap>(row, "overlap")?,
            on_error: parsed::<OnError>(row, "on_error")?,
            misfire: parsed::<Misfire>(row, "misfire")?,
            jitter: std::time::Duration::from_millis(jitter_ms.into()),
            broken_after: row.try_get("broken_after")?,
            paused: false,
        };
        let state: ScheduleState = parsed(row, "state")?;
        Ok(Self {
            id: row.try_get("id")?,
            def: ScheduleDef {
                paused: state == ScheduleState::Paused,
                ..def
            },
            anchor_at: row.try_get("anchor_at")?,
            state,
            next_run_at: row.try_get("next_run_at")?,
            last_run_at: row.try_get("last_run_at")?,
            consecutive_failures: row.try_get("consecutive_failures")?,
            total_runs: row.try_get("total_runs")?,
            total_failures: row.try_get("total_failures")?,
            skipped_runs: row.try_get("skipped_runs")?,
            last_error: opt_text(row, "last_error")?,
            created_at: row.try_get("created_at")?,
            updated_at: row.try_get("updated_at")?,
        })
    }
}

fn timeout_secs(def: &ScheduleDef) -> Option<u32> {
    def.timeout.map(crate::job::timeout_secs)
}

fn jitter_ms(def: &ScheduleDef) -> u32 {
    def.jitter.as_millis().min(u128::from(u32::MAX)) as u32
}

/// Inserts a schedule, and its `create` in the change log in the same transaction. A taken name is
/// [`Error::ScheduleExists`]: `name` is the table's only unique key besides the id it assigns.
pub(crate) async fn insert(
    pool: &MySqlPool,
    def: &ScheduleDef,
    anchor_at: DateTime<Utc>,
    next_run_at: Option<DateTime<Utc>>,
    state: ScheduleState,
    note: Note<'_>,
) -> Result<u64> {
    let id = retry_transient("create schedule", TRIES, || async {
        let mut tx = pool.begin().await?;
        let r = sqlx::query(
            "INSERT INTO jobq_schedules (name, kind, payload, queue, priority, max_attempts, \
             timeout_secs, spec, time_zone, anchor_at, start_at, end_at, at_startup, overlap, on_error, \
             misfire, jitter_ms, broken_after, state, next_run_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&def.name)
        .bind(&def.kind)
        .bind(&def.payload)
        .bind(&def.queue)
        .bind(def.priority)
        .bind(def.max_attempts)
        .bind(timeout_secs(def))
        .bind(def.spec.trim())
        .bind(def.time_zone.trim())
        .bind(anchor_at)
        .bind(def.start_at)
        .bind(def.end_at)
        .bind(def.at_startup)
        .bind(def.overlap.as_str())
        .bind(def.on_error.as_str())
        .bind(def.misfire.as_str())
        .bind(jitter_ms(def))
        .bind(def.broken_after)
        .bind(state.as_str())
        .bind(next_run_at)
        .execute(&mut *tx)
        .await;
        let id = match r {
            Ok(done) => done.last_insert_id(),
            Err(e) if is_duplicate_entry(&e) => {
                tx.rollback().await?;
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        log::write(&mut tx, id, &def.name, LogAction::Create, note).await?;
        tx.commit().await?;
        Ok(Some(id))
    })
    .await?;
    id.ok_or_else(|| Error::ScheduleExists {
        name: def.name.clone(),
    })
}

/// A new spec's timing, written together with a definition change.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reschedule {
    pub(crate) anchor_at: DateTime<Utc>,
    pub(crate) next_run_at: Option<DateTime<Utc>>,
    pub(crate) state: ScheduleState,
}

/// Rewrites a schedule's definition; with `reschedule`, also its anchor, next run and state. Without it
/// the schedule keeps its state and next run (an unchanged spec from a config sync). The `update` is
/// logged in the same transaction.
pub(crate) async fn update_definition(
    pool: &MySqlPool,
    id: u64,
    def: &ScheduleDef,
    reschedule: Option<Reschedule>,
    note: Note<'_>,
) -> Result<()> {
    retry_transient("update schedule", TRIES, || async move {
        let mut tx = pool.begin().await?;
        definition_update(id, def, reschedule)
            .build()
            .execute(&mut *tx)
            .await?;
        log::write(&mut tx, id, &def.name, LogAction::Update, note).await?;
        tx.commit().await
    })
    .await
}

/// The UPDATE of [`update_definition`], built afresh for each try (a built query gives its arguments
/// away).
fn definition_update<'a>(
    id: u64,
    def: &'a ScheduleDef,
    reschedule: Option<Reschedule>,
) -> QueryBuilder<'a, MySql> {
    let mut q = QueryBuilder::<MySql>::new("UPDATE jobq_schedules SET kind = ");
    q.push_bind(&def.kind)
        .push(", payload = ")
        .push_bind(&def.payload)
        .push(", queue = ")
        .push_bind(&def.queue)
        .push(", priority = ")
        .push_bind(def.priority)
        .push(", max_attempts = ")
        .push_bind(def.max_attempts)
        .push(", timeout_secs = ")
        .push_bind(timeout_secs(def))
        .push(", spec = ")
        .push_bind(def.spec.trim())
        .push(", time_zone = ")
        .push_bind(def.time_zone.trim())
        .push(", start_at = ")
        .push_bind(def.start_at)
        .push(", end_at = ")
        .push_bind(def.end_at)
        .push(", at_startup = ")
        .push_bind(def.at_startup)
        .push(", overlap = ")
        .push_bind(def.overlap.as_str())
        .push(", on_error = ")
        .push_bind(def.on_error.as_str())
        .push(", misfire = ")
        .push_bind(def.misfire.as_str())
        .push(", jitter_ms = ")
        .push_bind(jitter_ms(def))
        .push(", broken_after = ")
        .push_bind(def.broken_after);
    if let Some(r) = reschedule {
        q.push(", anchor_at = ")
            .push_bind(r.anchor_at)
            .push(", next_run_at = ")
            .push_bind(r.next_run_at)
            .push(", state = ")
            .push_bind(r.state.as_str());
    }
    q.push(" WHERE id = ").push_bind(id);
    q
}

/// One schedule by name.
pub(crate) async fn get(pool: &MySqlPool, name: &str) -> Result<Option<ScheduleRecord>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {SCHEDULE_COLUMNS} FROM jobq_schedules WHERE name = ?"
    ))
    .bind(name)
    .fetch_optional(pool)
    .await?)
}

/// Every schedule, by name.
pub(crate) async fn list(pool: &MySqlPool) -> Result<Vec<ScheduleRecord>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {SCHEDULE_COLUMNS} FROM jobq_schedules ORDER BY name"
    ))
    .fetch_all(pool)
    .await?)
}

/// Enabled schedules whose next planned time has come, earliest first.
pub(crate) async fn due(
    pool: &MySqlPool,
    now: DateTime<Utc>,
    limit: u32,
) -> Result<Vec<ScheduleRecord>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {SCHEDULE_COLUMNS} FROM jobq_schedules \
         WHERE state = 'enabled' AND next_run_at <= ? ORDER BY next_run_at, id LIMIT ?"
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

/// Enabled schedules that also run when a scheduler starts.
pub(crate) async fn startup_schedules(pool: &MySqlPool) -> Result<Vec<ScheduleRecord>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {SCHEDULE_COLUMNS} FROM jobq_schedules WHERE state = 'enabled' AND at_startup ORDER BY id"
    ))
    .fetch_all(pool)
    .await?)
}

/// Changes a schedule's state if it is in one of `from`, and logs the change in the same transaction.
/// `next_run_at`, when given, is written too; `reset_failures` zeroes the failure count. Returns false
/// when the state was not one of `from` (nothing is written then).
pub(crate) async fn set_state(
    pool: &MySqlPool,
    id: u64,
    from: &[ScheduleState],
    to: ScheduleState,
    next_run_at: Option<Option<DateTime<Utc>>>,
    reset_failures: bool,
    logged: Logged<'_>,
) -> Result<bool> {
    retry_transient("change schedule state", TRIES, || async move {
        let mut tx = pool.begin().await?;
        let changed = state_update(id, from, to, next_run_at, reset_failures)
            .build()
            .execute(&mut *tx)
            .await?;
        if changed.rows_affected() != 1 {
            tx.rollback().await?;
            return Ok(false);
        }
        log::write_logged(&mut tx, id, &logged).await?;
        tx.commit().await?;
        Ok(true)
    })
    .await
}

/// The UPDATE of [`set_state`], built afresh for each try.
fn state_update(
    id: u64,
    from: &[ScheduleState],
    to: ScheduleState,
    next_run_at: Option<Option<DateTime<Utc>>>,
    reset_failures: bool,
) -> QueryBuilder<'static, MySql> {
    let mut q = QueryBuilder::<MySql>::new("UPDATE jobq_schedules SET state = ");
    q.push_bind(to.as_str());
    if let Some(next) = next_run_at {
        q.push(", next_run_at = ").push_bind(next);
    }
    if reset_failures {
        q.push(", consecutive_failures = 0");
    }
    q.push(" WHERE id = ").push_bind(id).push(" AND state IN (");
    let mut sep = q.separated(", ");
    for s in from {
        sep.push_bind(s.as_str());
    }
    q.push(")");
    q
}

/// Deletes a schedule and its run history, and logs the `drop` (the log itself stays). Jobs it created
/// stay in the queue.
pub(crate) async fn delete(pool: &MySqlPool, id: u64, name: &str, note: Note<'_>) -> Result<()> {
    retry_transient("drop schedule", TRIES, || async {
        let mut tx = pool.begin().await?;
        sqlx::query("DELETE FROM jobq_schedule_runs WHERE schedule_id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM jobq_schedules WHERE id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        log::write(&mut tx, id, name, LogAction::Drop, note).await?;
        tx.commit().await
    })
    .await
}
