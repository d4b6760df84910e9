//! Due rows a claim cannot stamp because their payload is not valid JSON.
//!
//! On MariaDB the JSON column is text with `CHECK (json_valid(payload))`, and MariaDB checks a row's
//! CHECK constraints on every UPDATE of it, whatever columns the UPDATE sets. A row written past the
//! check (a session with `check_constraint_checks = 0`, a restore or copy that disabled it) therefore
//! fails the claim's stamp with error 4025, and with it every other row of the claim, claim after
//! claim: one such row at the head of a queue stalled every job behind it, and a draining worker gave
//! up at once. A claim that fails so sets those rows aside: it marks them `dead` without running them,
//! payload untouched, with a `last_error` that says why and how to run them again, settles the jobs
//! that wait for them as any dead job's, and claims again.
//!
//! MariaDB only: MySQL's JSON type cannot hold invalid JSON, and `SET STATEMENT` is MariaDB syntax.

use sqlx::{Connection, MySql, MySqlConnection, QueryBuilder};

use super::{ClaimArgs, lock_due};
use crate::db::push_id_list;

/// The `last_error` of a row set aside.
const NOT_JSON: &str = "the payload is not valid JSON, so the server refuses every change to \
     this row (MariaDB checks json_valid(payload) on each UPDATE; the row was written past that check); \
     set aside, not to be run (again) as it is. Correct the payload (UPDATE job_queue SET payload = ... WHERE id = ...), \
     then retry the job";

/// Claims set aside rows at most this many times in a row before the error stands: each time sets
/// aside every such row of the claim's pick.
pub(super) const TRIES: u32 = 8;

/// Whether a claim failed because a row broke a CHECK constraint (see the module docs).
pub(crate) fn is_check_failure(e: &sqlx::Error) -> bool {
    crate::errno::number(e) == Some(crate::errno::CONSTRAINT_FAILED)
}

/// After a claim failed with `e`, a CHECK failure: sets aside the rows of the claim whose payload is
/// not valid JSON, so that the claim can be made again; `e` when there were none (another CHECK
/// failed, which the caller reports as it is).
pub(super) async fn set_aside_or(
    conn: &mut MySqlConnection,
    args: ClaimArgs<'_>,
    e: sqlx::Error,
) -> Result<(), sqlx::Error> {
    if set_aside(conn, args).await?.is_empty() {
        return Err(e);
    }
    Ok(())
}

/// Locks the rows the claim would take, and marks those whose payload is not valid JSON `dead` (see
/// the module docs), in one transaction. Returns their ids.
async fn set_aside(
    conn: &mut MySqlConnection,
    args: ClaimArgs<'_>,
) -> Result<Vec<u64>, sqlx::Error> {
    let mut tx = conn.begin().await?;
    let locked: Vec<u64> = lock_due(&mut tx, args)
        .await?
        .iter()
        .map(|j| j.id.0)
        .collect();
    let bad = set_aside_among(&mut tx, &locked).await?;
    if !bad.is_empty() {
        tx.commit().await?;
    }
    Ok(bad)
}

/// Marks `dead` those of `ids`, waiting rows the caller's transaction has locked, whose payload is not
/// valid JSON (see the module docs), and settles the jobs that wait for them. Returns their ids. Also
/// for the other writers of waiting rows (priority aging), which such a row fails the same way.
pub(crate) async fn set_aside_among(
    tx: &mut MySqlConnection,
    ids: &[u64],
) -> Result<Vec<u64>, sqlx::Error> {
    set_aside_where(tx, ids, None).await
}

/// As [`set_aside_among`], for rows running under `claim` that the caller's transaction has locked: a
/// reaper resetting a gone claimant's rows meets such a row when its payload was made invalid while it
/// ran (written past the check), and the reset of every row of that claimant failed with it.
pub(crate) async fn set_aside_running(
    tx: &mut MySqlConnection,
    ids: &[u64],
    claim: &str,
) -> Result<Vec<u64>, sqlx::Error> {
    set_aside_where(tx, ids, Some(claim)).await
}

/// Waiting rows (`claim` None) or rows running under `claim`.
async fn set_aside_where(
    tx: &mut MySqlConnection,
    ids: &[u64],
    claim: Option<&str>,
) -> Result<Vec<u64>, sqlx::Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut find = QueryBuilder::<MySql>::new(
        "SELECT id FROM job_queue WHERE NOT JSON_VALID(payload) AND id IN (",
    );
    push_id_list(&mut find, ids);
    find.push(")");
    let bad: Vec<u64> = find.build_query_scalar().fetch_all(&mut *tx).await?;
    if bad.is_empty() {
        return Ok(bad);
    }
    // The one statement that changes such a row: the check is off for it alone, and it does not write
    // the payload.
    let mut update = QueryBuilder::<MySql>::new(
        "SET STATEMENT check_constraint_checks = 0 FOR UPDATE job_queue SET state = 'dead', \
         claim = NULL, finished_at = NOW(6), last_error = ",
    );
    update.push_bind(NOT_JSON);
    match claim {
        None => update.push(" WHERE state IN ('queued', 'retry') AND id IN ("),
        Some(token) => update
            .push(" WHERE state = 'running' AND claim = ")
            .push_bind(token)
            .push(" AND id IN ("),
    };
    push_id_list(&mut update, &bad);
    update.push(")");
    update.build().execute(&mut *tx).await?;
    crate::db::deps::settle_dependents_of(&mut *tx, &bad).await?;
    tracing::warn!(
        job_ids = ?bad,
        "set aside jobs whose payload is not valid JSON (the server refuses every change to such a row); \
         they are dead and will not run (again) as they are: correct each payload, then retry the job"
    );
    Ok(bad)
}
