//! Finishing claimed jobs. Every statement here is fenced: it changes a row only while the row still
//! carries the claimant's token and the attempt number it was claimed with. A claimant whose row was
//! reset (by the reaper, or by an operator) and claimed again by someone else changes nothing, and is
//! told so by the returned `false`.
//!
//! Every finish is also fenced with `has_dependents = 0` ([`NO_DEPENDENTS`]): a job nothing waits for is
//! finished by one statement, as ever. One that falls short is tried again for a job with dependents,
//! in a transaction that settles them (`db::deps`): the dependents whose last dependency just ended are
//! queued, or cancelled, with the finish. A lost claim falls short of both (one statement more).

use std::sync::LazyLock;
use std::time::Duration;

use sqlx::{Connection, MySql, MySqlConnection, MySqlPool};

use crate::claimant::token::TokenText;
use crate::db::aging::unaged;
use crate::db::deps::settle_dependents_of;
use crate::id::JobId;
use crate::job::row_max_attempts;
use crate::statements::{FINISH_DONE, HAS_DEPENDENTS, NO_DEPENDENTS};

use crate::db::retry_transient;

mod batch;
use crate::error::Result;
pub(crate) use batch::{done_batch_in, finish_done_batch, push_pair_list};

/// The longest `last_error` kept, in bytes. The column is TEXT (64 KiB); the tail of a long error is the
/// part worth keeping, and the head names what failed, so both ends are kept.
const MAX_ERROR_BYTES: usize = 8 * 1024;

/// How a claimed row ends this attempt.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(not(feature = "test-util"), allow(unreachable_pub))] // public through `testing`
pub enum Finish {
    /// Succeeded.
    Done,
    /// Failed; runnable again after `delay`.
    Retry {
        /// How long to wait before the next attempt.
        delay: Duration,
        /// What went wrong.
        error: String,
    },
    /// Failed for good.
    Dead {
        /// What went wrong.
        error: String,
    },
    /// Cancelled while it ran.
    Cancelled {
        /// Why.
        reason: String,
    },
    /// Never started: hand the row back untouched (the attempt is not counted).
    Release,
    /// Stopped part way (a shutdown, the self-fence): runnable again at once, or dead if that was its
    /// last attempt; the attempt counts.
    Interrupted {
        /// Why.
        reason: String,
    },
    /// The handler asked to run again after `delay` without failing: queued again with `run_at` that
    /// far ahead by the database clock, and the attempt is not counted (`attempts` goes back down), so
    /// snoozes never make a job dead. `last_error` is left as it was.
    Snooze {
        /// How long from now, by the database clock.
        delay: Duration,
    },
}

/// Finishes tries this many times in all on deadlocks and lost connections (about half a minute), so a
/// short database outage does not lose an outcome. If it still fails, the row stays `running` under
/// our token and is recovered like any dead claimant's.
pub(super) const TRIES: u32 = 14;

/// The done finish of job `id` on the caller's connection, inside the caller's transaction: the
/// fenced [`crate::statements::FINISH_DONE`] (the row must still carry `token` and `attempt` and be
/// running), and for a job with dependents the same finish with them settled. True when it changed the
/// row; the caller commits its own work with it, or rolls both back. Not retried here: a retry is the
/// caller's whole transaction.
pub(crate) async fn done_in(
    conn: &mut sqlx::MySqlConnection,
    id: JobId,
    token: &TokenText,
    attempt: u16,
) -> std::result::Result<bool, sqlx::Error> {
    let token = token.as_str();
    Statement::of(&Finish::Done, None)
        .run_settling(conn, id, token, attempt)
        .await
}

/// The fence of every finish of one job: the row is still this attempt's, under this claim, and
/// running. Its parameters: id, claim token, attempt.
macro_rules! fenced {
    () => {
        " WHERE id = ? AND claim = ? AND attempts = ? AND state = 'running'"
    };
}
pub(crate) use fenced;

/// What a row says after its handler answered that the application finished the job itself (see
/// [`crate::JobContext::finished_by_application`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ByApplication {
    /// Done at this attempt: the application's `jobq_finish` committed. Its dependents are settled.
    Finished,
    /// Still running under this claim and attempt: nothing finished it.
    NotFinished,
    /// Neither: the claim was lost to a reset (or the row was deleted) before the answer came.
    Gone,
}

/// Reads job `id` after the application said it finished it, and when it did and other jobs wait for
/// it, settles them (the procedure leaves that to whoever ran the job; see migration 21). One primary
/// key read for the common job.
pub(crate) async fn by_application(
    pool: &MySqlPool,
    id: JobId,
    token: &TokenText,
    attempt: u16,
) -> Result<ByApplication> {
    let token = token.as_str();
    let row: Option<(String, bool, u16, bool)> = retry_transient("finish check", TRIES, || {
        sqlx::query_as(
            "SELECT CAST(state AS CHAR), claim <=> ?, attempts, has_dependents FROM job_queue \
             WHERE id = ?",
        )
        .bind(token)
        .bind(id)
        .fetch_optional(pool)
    })
    .await?;
    let Some((state, ours, attempts, has_dependents)) = row else {
        return Ok(ByApplication::Gone);
    };
    if attempts != attempt {
        return Ok(ByApplication::Gone);
    }
    match state.as_str() {
        "running" if ours => Ok(ByApplication::NotFinished),
        // The procedure clears the claim; a later attempt would have counted another.
        "done" => {
            if has_dependents {
                retry_transient("settle dependents", TRIES, || async {
                    let mut tx = pool.begin().await?;
                    settle_dependents_of(&mut tx, &[id.0]).await?;
                    tx.commit().await?;
                    Ok(())
                })
                .await?;
            }
            Ok(ByApplication::Finished)
        }
        _ => Ok(ByApplication::Gone),
    }
}

/// Applies `finish` to job `id` if the row still carries `token` and `attempt`. Returns false when the
/// fence did not match (the claim was lost), true when the row changed.
pub(crate) async fn finish(
    pool: &MySqlPool,
    id: JobId,
    token: &TokenText,
    attempt: u16,
    finish: &Finish,
) -> Result<bool> {
    finish_bounded(pool, id, token, attempt, finish, None).await
}

/// [`finish`], and a failure (retry or dead) also stores `max_attempts` in the row when given: the
/// bound the worker applied (a handler's own), so that the row shows the bound it was judged by.
pub(crate) async fn finish_bounded(
    pool: &MySqlPool,
    id: JobId,
    token: &TokenText,
    attempt: u16,
    finish: &Finish,
    max_attempts: Option<u16>,
) -> Result<bool> {
    let token = token.as_str();
    let stmt = Statement::of(finish, max_attempts);
    let Some(outcome) = attempt_outcome(finish) else {
        return retry_transient("finish", TRIES, || async {
            // The common job, which nothing waits for: one autocommit statement.
            if stmt
                .run(pool, id, token, attempt, Fence::NoDependents)
                .await?
            {
                return Ok(true);
            }
            finish_parent(&mut *pool.acquire().await?, &stmt, id, token, attempt).await
        })
        .await;
    };
    let note = attempt_note(finish).or_else(|| stmt.text.clone());
    // A snoozed attempt is recorded before the change, while the row still holds its number (the
    // change takes it back); the transaction undoes the record if the fence does not match.
    let before = matches!(finish, Finish::Snooze { .. });
    // An attempt that did not end done is recorded with the change, in one transaction.
    retry_transient("finish", TRIES, || async {
        let mut tx = pool.begin().await?;
        if before {
            crate::db::attempts::record(&mut tx, &[id.0], outcome, token, note.as_deref()).await?;
        }
        if !stmt.run_settling(&mut tx, id, token, attempt).await? {
            tx.rollback().await?;
            return Ok(false);
        }
        if !before {
            crate::db::attempts::record(&mut tx, &[id.0], outcome, token, note.as_deref()).await?;
        }
        tx.commit().await?;
        Ok(true)
    })
    .await
}

/// How a finish's attempt is recorded in `jobq_attempts` (an SQL expression over the changed row), or
/// None when it is not: done (the job row holds it) and release (it never started and does not count).
fn attempt_outcome(finish: &Finish) -> Option<&'static str> {
    match finish {
        Finish::Done | Finish::Release => None,
        // A cancel requested while it ran turns the retry into a cancel.
        Finish::Retry { .. } => Some("IF(state = 'cancelled', 'cancelled', 'retry')"),
        Finish::Dead { .. } => Some("'dead'"),
        Finish::Cancelled { .. } => Some("'cancelled'"),
        Finish::Interrupted { .. } => Some("'interrupted'"),
        // Read before the change (see `finish_bounded`): the cancel request decides, as it does there.
        Finish::Snooze { .. } => Some("IF(cancel_requested_at IS NULL, 'snoozed', 'cancelled')"),
    }
}

/// The error column of an attempt record that is not the row's new `last_error`.
fn attempt_note(finish: &Finish) -> Option<String> {
    match finish {
        Finish::Snooze { delay } => Some(format!(
            "snoozed for {}",
            humantime::format_duration(*delay)
        )),
        _ => None,
    }
}

/// Which rows a finish's fence lets through (see [`NO_DEPENDENTS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fence {
    /// Jobs nothing waits for: the one statement of the common finish.
    NoDependents,
    /// Jobs with dependents, which the transaction then settles.
    HasDependents,
}

/// One fenced finish: the UPDATE (without its dependents clause) and what it binds before the fence.
pub(super) struct Statement {
    sql: &'static str,
    /// The done finish, whose text is [`FINISH_DONE`].
    done: bool,
    delay_us: Option<i64>,
    text: Option<String>,
    /// `Some` for the failures, whose statements bind a `max_attempts` to store (NULL: keep the row's).
    max_attempts: Option<Option<u16>>,
}

/// A delay as the statements bind it: microseconds.
fn micros(delay: Duration) -> i64 {
    delay.as_micros().min(i64::MAX as u128) as i64
}

impl Statement {
    // Long on purpose: a table of one statement per kind of finish, side by side so their rules compare.
    pub(super) fn of(finish: &Finish, max_attempts: Option<u16>) -> Self {
        let (sql, delay_us, text): (&str, Option<i64>, Option<String>) = match finish {
            // The published text, which has its dependents clause already (see `text`).
            Finish::Done => ("", None, None),
            // A cancel requested while the attempt ran wins over another attempt. The job ran: its
            // wait is over, and so is what priority aging gave it for it (schema 29).
            Finish::Retry { delay, error } => (
                concat!(
                    crate::statements::unchecked!(),
                    "UPDATE job_queue SET \
                 state = IF(cancel_requested_at IS NULL, 'retry', 'cancelled'), \
                 finished_at = IF(cancel_requested_at IS NULL, NULL, NOW(6)), claim = NULL, \
                 run_at = NOW(6) + INTERVAL ? MICROSECOND, last_error = ?, \
                 max_attempts = COALESCE(?, max_attempts), ",
                    unaged!(),
                    fenced!()
                ),
                Some(micros(*delay)),
                Some(truncate_error(error)),
            ),
            Finish::Dead { error } => (
                concat!(
                    crate::statements::unchecked!(),
                    "UPDATE job_queue SET state = 'dead', claim = NULL, finished_at = NOW(6), last_error = ?, \
                 max_attempts = COALESCE(?, max_attempts)",
                    fenced!()
                ),
                None,
                Some(truncate_error(error)),
            ),
            Finish::Cancelled { reason } => (
                concat!(
                    crate::statements::unchecked!(),
                    "UPDATE job_queue SET state = 'cancelled', claim = NULL, finished_at = NOW(6), last_error = ?",
                    fenced!()
                ),
                None,
                Some(truncate_error(reason)),
            ),
            Finish::Release => (
                concat!(
                    crate::statements::unchecked!(),
                    "UPDATE job_queue SET \
                 state = IF(cancel_requested_at IS NULL, 'queued', 'cancelled'), \
                 finished_at = IF(cancel_requested_at IS NULL, NULL, NOW(6)), \
                 claim = NULL, claimed_at = NULL, started_at = NULL, debounce_key = NULL, \
                 attempts = attempts - 1",
                    fenced!()
                ),
                None,
                None,
            ),
            // The same rule as a reaper's reset of a dead claimant's row (`reap::reset_claim`): the
            // interrupted attempt counts, so a row that used its last one ends dead rather than
            // queued with no attempt left (its next claim would show more attempts than it allows).
            Finish::Interrupted { reason } => (
                concat!(
                    crate::statements::unchecked!(),
                    "UPDATE job_queue SET \
                     state = CASE WHEN cancel_requested_at IS NOT NULL THEN 'cancelled' \
                                  WHEN attempts >= ",
                    row_max_attempts!(),
                    " THEN 'dead' ELSE 'queued' END, \
                     finished_at = IF(cancel_requested_at IS NULL AND attempts < ",
                    row_max_attempts!(),
                    ", NULL, NOW(6)), claim = NULL, debounce_key = NULL, last_error = ?",
                    fenced!()
                ),
                None,
                Some(truncate_error(reason)),
            ),
            // As a release, but later: the attempt is given back, and the row waits for `delay`. A
            // cancel requested meanwhile wins, and the attempt then counts like any cancelled one.
            // Unlike a release, the job ran: back to its base priority, as after a retry.
            Finish::Snooze { delay } => (
                concat!(
                    crate::statements::unchecked!(),
                    "UPDATE job_queue SET \
                 state = IF(cancel_requested_at IS NULL, 'queued', 'cancelled'), \
                 finished_at = IF(cancel_requested_at IS NULL, NULL, NOW(6)), \
                 run_at = IF(cancel_requested_at IS NULL, NOW(6) + INTERVAL ? MICROSECOND, run_at), \
                 attempts = IF(cancel_requested_at IS NULL, attempts - 1, attempts), \
                 claimed_at = IF(cancel_requested_at IS NULL, NULL, claimed_at), \
                 started_at = IF(cancel_requested_at IS NULL, NULL, started_at), \
                 claim = NULL, debounce_key = NULL, ",
                    unaged!(),
                    fenced!()
                ),
                Some(micros(*delay)),
                None,
            ),
        };
        let fails = matches!(finish, Finish::Retry { .. } | Finish::Dead { .. });
        Self {
            sql,
            done: matches!(finish, Finish::Done),
            delay_us,
            text,
            max_attempts: fails.then_some(max_attempts),
        }
    }

    /// The statement's text with `fence`'s dependents clause.
    fn text(&self, fence: Fence) -> std::borrow::Cow<'static, str> {
        if self.done {
            return match fence {
                Fence::NoDependents => FINISH_DONE_SQL.as_str().into(),
                Fence::HasDependents => FINISH_DONE_PARENT_SQL.as_str().into(),
            };
        }
        let clause = match fence {
            Fence::NoDependents => NO_DEPENDENTS,
            Fence::HasDependents => HAS_DEPENDENTS,
        };
        format!("{}{clause}", self.sql).into()
    }

    /// Runs the UPDATE for a job with dependents and, when it changed the row, settles the dependents
    /// (in the caller's transaction). True when the row changed.
    async fn run_with_dependents(
        &self,
        conn: &mut MySqlConnection,
        id: JobId,
        token: &str,
        attempt: u16,
    ) -> Result<bool, sqlx::Error> {
        if !self
            .run(&mut *conn, id, token, attempt, Fence::HasDependents)
            .await?
        {
            return Ok(false);
        }
        settle_dependents_of(conn, &[id.0]).await?;
        Ok(true)
    }

    /// Runs the UPDATE in the caller's transaction: for a job nothing waits for, and when that changed
    /// nothing, for a job with dependents, which are then settled. True when the row changed.
    async fn run_settling(
        &self,
        conn: &mut MySqlConnection,
        id: JobId,
        token: &str,
        attempt: u16,
    ) -> Result<bool, sqlx::Error> {
        Ok(self
            .run(&mut *conn, id, token, attempt, Fence::NoDependents)
            .await?
            || self.run_with_dependents(conn, id, token, attempt).await?)
    }

    /// Runs the UPDATE once; true when the row changed.
    pub(super) async fn run<'e, E>(
        &self,
        exec: E,
        id: JobId,
        token: &str,
        attempt: u16,
        fence: Fence,
    ) -> Result<bool, sqlx::Error>
    where
        E: sqlx::Executor<'e, Database = MySql>,
    {
        let sql = self.text(fence);
        let mut q = sqlx::query(&sql);
        if let Some(us) = self.delay_us {
            q = q.bind(us);
        }
        if let Some(t) = &self.text {
            q = q.bind(t.as_str());
        }
        if let Some(max) = self.max_attempts {
            q = q.bind(max);
        }
        let r = q.bind(id).bind(token).bind(attempt).execute(exec).await?;
        Ok(r.rows_affected() == 1)
    }
}

/// [`FINISH_DONE`] as the finish of one job binds it.
static FINISH_DONE_SQL: LazyLock<String> = LazyLock::new(|| FINISH_DONE.sql(&["?", "?", "?"]));

/// [`FINISH_DONE_SQL`] for a job with dependents.
static FINISH_DONE_PARENT_SQL: LazyLock<String> =
    LazyLock::new(|| FINISH_DONE_SQL.replace(NO_DEPENDENTS, HAS_DEPENDENTS));

/// The finish of one job with dependents, in a transaction of its own on `conn` with the settling of
/// its dependents, which must commit with it.
pub(super) async fn finish_parent(
    conn: &mut MySqlConnection,
    stmt: &Statement,
    id: JobId,
    token: &str,
    attempt: u16,
) -> Result<bool, sqlx::Error> {
    let mut tx = conn.begin().await?;
    let done = stmt
        .run_with_dependents(&mut tx, id, token, attempt)
        .await?;
    tx.commit().await?;
    Ok(done)
}

/// Keeps the head and the tail of a long error message, cut on character boundaries.
pub(crate) fn truncate_error(s: &str) -> String {
    if s.len() <= MAX_ERROR_BYTES {
        return s.to_string();
    }
    let keep = MAX_ERROR_BYTES / 2 - 16;
    let mut head_end = keep;
    while !s.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = s.len() - keep;
    while !s.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    format!("{}\n[…]\n{}", &s[..head_end], &s[tail_start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_errors_keep_both_ends() {
        let s = format!("HEAD{}é{}TAIL", "x".repeat(10_000), "y".repeat(10_000));
        let t = truncate_error(&s);
        assert!(t.len() <= MAX_ERROR_BYTES);
        assert!(t.starts_with("HEAD") && t.ends_with("TAIL"));
        assert_eq!(truncate_error("short"), "short");
    }
}
