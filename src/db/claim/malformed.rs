//! Due rows whose payload is not valid JSON: a claim sets them aside instead of running them.
//!
//! On MariaDB the JSON column is text with `CHECK (json_valid(payload))`, so such a row can only have
//! been written past the check (a session with `check_constraint_checks = 0`, a restore or copy that
//! disabled it). A handler would be given a payload that is not what the column promises, and every
//! UPDATE with the check on fails on the row with error 4025 (priority aging's among them, see
//! `db::aging`; once, the claim's stamp too, which stalled the row's whole queue). The claim's own
//! statements skip the check (`statements::unchecked`), and the claim looks at the payloads it locked
//! instead: a payload that does not parse here is asked about on the server, and the rows whose
//! `JSON_VALID(payload)` is false there are marked `dead` without running, payload untouched, with a
//! `last_error` that says why and how to run them again; the jobs that wait for them are settled as any
//! dead job's, and the claim goes on with the rest, in the same transaction.
//!
//! MariaDB only in effect: MySQL's JSON type cannot hold invalid JSON (the server's answer is then
//! always none), and `SET STATEMENT` below is MariaDB syntax.

use sqlx::{MySql, MySqlConnection, QueryBuilder};

use super::ClaimedJob;
use crate::db::push_id_list;

/// The `last_error` of a row set aside.
const NOT_JSON: &str = "the payload is not valid JSON (MariaDB checks json_valid(payload) on every \
     change a session with its checks on makes to this row; it was written past that check); set aside, \
     not run. Correct the payload (UPDATE job_queue SET payload = ... WHERE id = ...), then retry the job";

/// Whether a statement failed because a row broke a CHECK constraint (see the module docs).
pub(crate) fn is_check_failure(e: &sqlx::Error) -> bool {
    crate::errno::number(e) == Some(crate::errno::CONSTRAINT_FAILED)
}

/// Of `jobs`, rows a claim has locked and not yet stamped, sets aside those whose payload is not valid
/// JSON (see the module docs) and returns the others. Each payload is parsed here first, so a claim
/// of valid payloads sends nothing more; the server has the last word on the rest, so a payload this
/// parser refuses and `JSON_VALID` accepts runs as usual.
pub(super) async fn set_aside_from(
    tx: &mut MySqlConnection,
    jobs: Vec<ClaimedJob>,
) -> Result<Vec<ClaimedJob>, sqlx::Error> {
    let suspects: Vec<u64> = jobs
        .iter()
        .filter(|j| !parses(&j.payload))
        .map(|j| j.id.0)
        .collect();
    if suspects.is_empty() {
        return Ok(jobs);
    }
    let bad = set_aside_among(tx, &suspects).await?;
    Ok(jobs
        .into_iter()
        .filter(|j| !bad.contains(&j.id.0))
        .collect())
}

/// Whether `text` is one JSON value.
fn parses(text: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
}

/// Marks `dead` those of `ids`, waiting rows the caller's transaction has locked, whose payload is not
/// valid JSON by the server's `JSON_VALID` (see the module docs), and settles the jobs that wait for
/// them. Returns their ids. Also for priority aging, whose UPDATE such a row fails.
pub(crate) async fn set_aside_among(
    tx: &mut MySqlConnection,
    ids: &[u64],
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
    // Only MariaDB gets here (see the module docs); the check would refuse the change.
    let mut update = QueryBuilder::<MySql>::new(concat!(
        crate::statements::unchecked!(),
        "UPDATE job_queue SET state = 'dead', claim = NULL, finished_at = NOW(6), last_error = ",
    ));
    update.push_bind(NOT_JSON);
    update.push(" WHERE state IN ('queued', 'retry') AND id IN (");
    push_id_list(&mut update, &bad);
    update.push(")");
    update.build().execute(&mut *tx).await?;
    crate::db::deps::settle_dependents_of(&mut *tx, &bad).await?;
    tracing::warn!(
        job_ids = ?bad,
        "set aside jobs whose payload is not valid JSON (written past the server's check); they are \
         dead, not run: correct each payload, then retry the job"
    );
    Ok(bad)
}
