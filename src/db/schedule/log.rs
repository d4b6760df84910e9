//! The change log's SQL (`jobq_schedule_log`): a row written in the transaction of the change it
//! records, and a schedule's rows read back by name, so a dropped schedule's history stays readable.

use sqlx::mysql::MySqlRow;
use sqlx::{MySqlConnection, MySqlPool, Row};

use crate::db::row::{opt_text, parsed, text};
use crate::error::Result;
use crate::schedule::{LogAction, ScheduleLogEntry};

/// Who makes a change and why: written with it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Note<'a> {
    pub(crate) actor: &'a str,
    pub(crate) reason: Option<&'a str>,
}

/// A change to log: `action` on the schedule `name`, by and for `note`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Logged<'a> {
    pub(crate) name: &'a str,
    pub(crate) action: LogAction,
    pub(crate) note: Note<'a>,
}

impl<'r> sqlx::FromRow<'r, MySqlRow> for ScheduleLogEntry {
    fn from_row(row: &'r MySqlRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            id: row.try_get("id")?,
            at: row.try_get("at")?,
            schedule: text(row, "schedule")?,
            schedule_id: row.try_get("schedule_id")?,
            action: parsed(row, "action")?,
            actor: text(row, "actor")?,
            reason: opt_text(row, "reason")?,
        })
    }
}

/// Records `action` on schedule `id` (named `name`), in the caller's transaction.
pub(crate) async fn write(
    conn: &mut MySqlConnection,
    id: u64,
    name: &str,
    action: LogAction,
    note: Note<'_>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO jobq_schedule_log (schedule_id, schedule, action, actor, reason) \
         VALUES (?, ?, ?, ?, ?)",
    )
    .bind(id)
    .bind(name)
    .bind(action.as_str())
    .bind(note.actor)
    .bind(note.reason)
    .execute(conn)
    .await?;
    Ok(())
}

/// [`write`] of a [`Logged`] change.
pub(crate) async fn write_logged(
    conn: &mut MySqlConnection,
    id: u64,
    logged: &Logged<'_>,
) -> Result<(), sqlx::Error> {
    write(conn, id, logged.name, logged.action, logged.note).await
}

/// The changes of the schedule(s) named `name`, newest first, at most `limit`.
pub(crate) async fn of_schedule(
    pool: &MySqlPool,
    name: &str,
    limit: u32,
) -> Result<Vec<ScheduleLogEntry>> {
    Ok(sqlx::query_as(
        "SELECT id, at, schedule, schedule_id, action, actor, reason FROM jobq_schedule_log \
         WHERE schedule = ? ORDER BY id DESC LIMIT ?",
    )
    .bind(name)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}
