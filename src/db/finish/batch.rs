//! The done finishes of many jobs at once: one fenced UPDATE over their (id, attempt) pairs, by the
//! finisher on its own connection or carried in the next claim's transaction.

use std::collections::HashSet;

use sqlx::{Connection, MySql, MySqlConnection, QueryBuilder};

use super::{Fence, Finish, Statement, TRIES, finish_parent};
use crate::claimant::token::TokenText;
use crate::db::dedicated::Dedicated;
use crate::db::deps::settle_dependents_of;
use crate::error::Result;
use crate::job::AttemptKey;
use crate::statements::{FINISH_DONE_BATCH, HAS_DEPENDENTS, MIN_PAIRS, NO_DEPENDENTS};

/// Finishes many jobs as done at once: one statement and one commit instead of one per job. Each item
/// is fenced like [`finish`] (token, attempt, still running). Returns, per item, whether it was finished.
///
/// One autocommit UPDATE fences every row at once (`(id, attempts) IN ((…), …)`, a range on the primary
/// key in MariaDB and MySQL alike), one round trip. When it changes fewer rows than there are items (a
/// claim was lost, which is rare), the rows it changed are read back (see `finish_fenced`). A
/// transaction around the UPDATE (BEGIN, UPDATE, COMMIT) would let a short batch be rolled back, at
/// three round trips a batch instead of one: in `jobq bench`'s raw grid at 1,000-row claims that form
/// drained at 49–57 % of the lean schema, a token-fenced autocommit UPDATE at 61–83 %; reading every
/// batch `FOR UPDATE` first drained 13–27 % slower still.
pub(crate) async fn finish_done_batch(
    conn: &mut Dedicated,
    token: &TokenText,
    items: &[AttemptKey],
) -> Result<Vec<bool>> {
    let token = token.as_str();
    if let [AttemptKey { id, attempt }] = items {
        let (id, attempt) = (*id, *attempt);
        let stmt = &Statement::of(&Finish::Done, None);
        let done = conn
            .run("finish", TRIES, |mut c| async move {
                let r = match stmt
                    .run(&mut c, id, token, attempt, Fence::NoDependents)
                    .await
                {
                    Ok(false) => finish_parent(&mut c, stmt, id, token, attempt).await,
                    r => r,
                };
                (c, r)
            })
            .await?;
        return Ok(vec![done]);
    }
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let ids: &[u64] = &items.iter().map(|k| k.id.0).collect::<Vec<_>>();
    let held = conn
        .run("finish batch", TRIES, |mut c| async move {
            let r = finish_fenced(&mut c, token, ids, items).await;
            (c, r)
        })
        .await?;
    Ok(match held {
        None => vec![true; items.len()],
        Some(held) => {
            let held: HashSet<AttemptKey> = held.into_iter().collect();
            items.iter().map(|item| held.contains(item)).collect()
        }
    })
}

/// The done finishes a claim carries, in the claim's transaction (see `db::claim`): the fenced
/// [`FINISH_DONE_BATCH`] over `items` (distinct (id, attempt) pairs). True when it changed every row;
/// when it changed fewer, the caller rolls back and the finisher redoes them exactly.
pub(crate) async fn done_batch_in(
    conn: &mut MySqlConnection,
    token: &TokenText,
    items: &[AttemptKey],
) -> Result<bool, sqlx::Error> {
    let token = token.as_str();
    if items.is_empty() {
        return Ok(true);
    }
    let changed = done_batch(token, items)
        .build()
        .execute(conn)
        .await?
        .rows_affected();
    Ok(changed == items.len() as u64)
}

/// [`FINISH_DONE_BATCH`] with its parameters bound; the pairs are padded to a power of two by repeating
/// the last (as [`crate::db::push_id_list`] pads ids, for the same reason).
fn done_batch<'a>(token: &'a str, pairs: &[AttemptKey]) -> QueryBuilder<'a, MySql> {
    done_batch_text(token, pairs, NO_DEPENDENTS)
}

/// [`done_batch`] with `clause` in place of its [`NO_DEPENDENTS`].
fn done_batch_text<'a>(
    token: &'a str,
    pairs: &[AttemptKey],
    clause: &str,
) -> QueryBuilder<'a, MySql> {
    let [head, pairs_at, tail] = FINISH_DONE_BATCH.parts() else {
        unreachable!("FINISH_DONE_BATCH has two parameters")
    };
    let mut u = QueryBuilder::<MySql>::new(*head);
    u.push_bind(token);
    if clause == NO_DEPENDENTS {
        u.push(*pairs_at);
    } else {
        u.push(pairs_at.replace(NO_DEPENDENTS, clause));
    }
    push_pair_list(&mut u, pairs);
    u.push(*tail);
    u
}

/// Binds (id, attempt) pairs for an `(id, attempts) IN (…)` list, padded to a power of two by
/// repeating the last (as [`crate::db::push_id_list`] pads ids, for the same reason), and never fewer
/// than [`MIN_PAIRS`] (one pair alone makes MariaDB scan the whole table).
pub(crate) fn push_pair_list(q: &mut QueryBuilder<'_, MySql>, pairs: &[AttemptKey]) {
    if pairs.is_empty() {
        return;
    }
    // Two pushes of text per pair, not four: each push is a `write!` into the statement's text, and a
    // finish of a thousand jobs makes a thousand pairs.
    for i in 0..pairs.len().next_power_of_two().max(MIN_PAIRS) {
        let AttemptKey { id, attempt } = pairs[i.min(pairs.len() - 1)];
        q.push(if i == 0 { "(" } else { "), (" });
        q.push_bind(id);
        q.push(", ");
        q.push_bind(attempt);
    }
    q.push(")");
}

/// One try of [`finish_done_batch`]: the rows of `ids` that still carry `token` and the attempt in
/// `items` are finished; returns those rows, or `None` when that is every item (the common case, which
/// then builds no set: hashing each pair twice was a fiftieth of a draining worker's instructions).
/// `ids` are the items' ids; an item repeated is finished once and counts as a short batch.
///
/// One autocommit UPDATE, one round trip: the fence makes it change only rows that are still ours.
/// When it changes fewer rows than it names, the rows it changed are read back: they are `done` at the
/// attempt we claimed them with. A row whose claim was lost is not: the reaper's reset keeps its
/// attempt count but not its state, and the next claim counts another attempt. The same read-back makes
/// a retry exact after a lost reply, when the first try committed and the retry changes nothing.
async fn finish_fenced(
    conn: &mut MySqlConnection,
    token: &str,
    ids: &[u64],
    items: &[AttemptKey],
) -> Result<Option<Vec<AttemptKey>>, sqlx::Error> {
    let mut u = done_batch(token, items);
    let changed = u.build().execute(&mut *conn).await?.rows_affected();
    // Matched rows (CLIENT_FOUND_ROWS): never more than the distinct pairs.
    if changed == items.len() as u64 {
        return Ok(None);
    }
    // Fewer: a claim was lost, or some of the jobs have dependents. Those are finished now, with their
    // dependents settled, in one transaction.
    let mut tx = conn.begin().await?;
    let parents = done_batch_text(token, items, HAS_DEPENDENTS)
        .build()
        .execute(&mut *tx)
        .await?
        .rows_affected();
    if parents > 0 {
        settle_dependents_of(&mut tx, ids).await?;
    }
    tx.commit().await?;
    let mut q = QueryBuilder::<MySql>::new(
        "SELECT id, attempts FROM job_queue FORCE INDEX (PRIMARY) WHERE id IN (",
    );
    crate::db::push_id_list(&mut q, ids);
    q.push(") AND state = 'done' AND claim IS NULL");
    let rows: Vec<AttemptKey> = q.build_query_as().fetch_all(&mut *conn).await?;
    let wanted: HashSet<AttemptKey> = items.iter().copied().collect();
    Ok(Some(
        rows.into_iter()
            .filter(|row| wanted.contains(row))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statements::pair_placeholders;

    #[test]
    fn the_batched_finish_runs_the_published_statement() {
        assert_eq!(
            done_batch("t", &crate::job::keys(&[(1, 1), (2, 1), (3, 2)])).sql(),
            FINISH_DONE_BATCH.sql(&["?", &pair_placeholders(4)])
        );
        // One pair alone would make MariaDB scan the whole table (see MIN_PAIRS).
        assert_eq!(
            done_batch("t", &crate::job::keys(&[(1, 1)])).sql(),
            FINISH_DONE_BATCH.sql(&["?", &pair_placeholders(MIN_PAIRS)])
        );
    }
}
