//! The claim's statements with their parameters bound: the texts of [`crate::statements`], in the
//! order their placeholders come.

use sqlx::{MySql, QueryBuilder};

use super::Slice;
use crate::job::AttemptKey;
use crate::statements::{
    CLAIM_PICK_AHEAD, CLAIM_SELECT, CLAIM_SELECT_PAST_LOCKED, CLAIM_STAMP, CLAIM_STAMP_CARRYING,
    CLAIM_STAMP_CARRYING_LISTING, CLAIM_STAMP_LISTING, HOLDINGS_WRITE,
};

/// [`CLAIM_SELECT`] with its parameters bound: the pick from `slice` of the due rows, `ahead` times
/// `limit` of them (at most [`CLAIM_PICK_AHEAD`] times).
pub(super) fn claim_select<'a>(
    queue: &'a str,
    kinds: &'a [String],
    slice: Slice,
    limit: u32,
    ahead: u32,
) -> QueryBuilder<'a, MySql> {
    let [
        due @ ..,
        of_at,
        index_at,
        pick_at,
        recheck_at,
        limit_at,
        tail,
    ] = CLAIM_SELECT.parts()
    else {
        unreachable!("CLAIM_SELECT has thirteen parameters")
    };
    let mut select = kinds_due(due, queue, kinds);
    select.push(*of_at);
    select.push_bind(slice.of);
    select.push(*index_at);
    select.push_bind(slice.index);
    select.push(*pick_at);
    select.push_bind(limit.saturating_mul(ahead.clamp(1, CLAIM_PICK_AHEAD)));
    select.push(*recheck_at);
    select.push_bind(queue);
    select.push(*limit_at);
    select.push_bind(limit);
    select.push(*tail);
    select
}

/// [`CLAIM_SELECT_PAST_LOCKED`] with its parameters bound.
pub(super) fn claim_select_past_locked<'a>(
    queue: &'a str,
    kinds: &'a [String],
    limit: u32,
) -> QueryBuilder<'a, MySql> {
    let [due @ .., limit_at, tail] = CLAIM_SELECT_PAST_LOCKED.parts() else {
        unreachable!("CLAIM_SELECT_PAST_LOCKED has nine parameters")
    };
    let mut select = kinds_due(due, queue, kinds);
    select.push(*limit_at);
    select.push_bind(limit);
    select.push(*tail);
    select
}

/// The part both claim SELECTs share, up to the list of kinds: the due rows of `queue` with a kind of
/// `kinds`, unless the queue is paused or pinned elsewhere or nothing of `kinds` is due there.
fn kinds_due<'a>(
    parts: &[&'static str],
    queue: &'a str,
    kinds: &'a [String],
) -> QueryBuilder<'a, MySql> {
    let [
        head,
        paused_at,
        unpinned_at,
        pinned_at,
        host_at,
        guard_queue_at,
        guard_kinds_at,
        kinds_at,
    ] = parts
    else {
        unreachable!("the claim's due rows have eight parameters")
    };
    let mut select = QueryBuilder::<MySql>::new(*head);
    select.push_bind(queue);
    select.push(*paused_at);
    select.push_bind(queue);
    select.push(*unpinned_at);
    select.push_bind(queue);
    select.push(*pinned_at);
    select.push_bind(queue);
    select.push(*host_at);
    select.push_bind(this_host());
    select.push(*guard_queue_at);
    select.push_bind(queue);
    select.push(*guard_kinds_at);
    push_list(&mut select, kinds);
    select.push(*kinds_at);
    push_list(&mut select, kinds);
    select
}

/// The host name this process registers, which queue pins name (schema 15).
pub(crate) fn this_host() -> &'static str {
    &crate::claimant::token::ProcessIdentity::current().host
}

/// Step 2a's statement, [`HOLDINGS_WRITE`], with its parameters bound: `holding` with `ids` becomes
/// `token`'s holdings list.
pub(super) fn holdings_write<'a>(
    token: &'a str,
    holding: Holding<'_>,
    ids: &[u64],
) -> QueryBuilder<'a, MySql> {
    let [head, list_at, token_at, tail] = HOLDINGS_WRITE.parts() else {
        unreachable!("HOLDINGS_WRITE has three parameters")
    };
    let mut update = QueryBuilder::<MySql>::new(*head);
    update.push_bind(holding.keep);
    update.push(*list_at);
    update.push_bind(holding.list_with(ids));
    update.push(*token_at);
    update.push_bind(token);
    update.push(*tail);
    update
}

/// Step 2's statement, [`CLAIM_STAMP`] (after [`holdings_write`]) or, with `holding` to write in the
/// same statement, [`CLAIM_STAMP_LISTING`], with its parameters bound (the ids padded, see
/// [`crate::db::push_id_list`]).
pub(super) fn claim_stamp<'a>(
    token: &'a str,
    holding: Option<Holding<'_>>,
    ids: &[u64],
) -> QueryBuilder<'a, MySql> {
    let (mut update, [ids_at, tail]) = match holding {
        None => {
            let [head, ids_at, tail] = CLAIM_STAMP.parts() else {
                unreachable!("CLAIM_STAMP has two parameters")
            };
            let mut update = QueryBuilder::<MySql>::new(*head);
            update.push_bind(token);
            (update, [ids_at, tail])
        }
        Some(holding) => {
            let [head, keep_at, list_at, token_at, ids_at, tail] = CLAIM_STAMP_LISTING.parts()
            else {
                unreachable!("CLAIM_STAMP_LISTING has five parameters")
            };
            let mut update = listing([head, keep_at, list_at], token, holding, ids);
            update.push(*token_at);
            update.push_bind(token);
            (update, [ids_at, tail])
        }
    };
    update.push(*ids_at);
    crate::db::push_id_list(&mut update, ids);
    update.push(*tail);
    update
}

/// [`CLAIM_STAMP_CARRYING`] (after [`holdings_write`]) or, with `holding` to write in the same
/// statement, [`CLAIM_STAMP_CARRYING_LISTING`], with its parameters bound: the finishes `carry`
/// (distinct (id, attempt) pairs) and the locked `ids`, both lists padded to a power of two (see
/// [`crate::db::push_id_list`]).
pub(super) fn claim_stamp_carrying<'a>(
    token: &'a str,
    holding: Option<Holding<'_>>,
    carry: &[AttemptKey],
    ids: &[u64],
) -> QueryBuilder<'a, MySql> {
    let (mut update, [fence_at, pairs_at, ids_at, tail]) = match holding {
        None => {
            let [head, fence_at, pairs_at, ids_at, tail] = CLAIM_STAMP_CARRYING.parts() else {
                unreachable!("CLAIM_STAMP_CARRYING has four parameters")
            };
            let mut update = QueryBuilder::<MySql>::new(*head);
            update.push_bind(token);
            (update, [fence_at, pairs_at, ids_at, tail])
        }
        Some(holding) => {
            let [
                head,
                keep_at,
                list_at,
                token_at,
                fence_at,
                pairs_at,
                ids_at,
                tail,
            ] = CLAIM_STAMP_CARRYING_LISTING.parts()
            else {
                unreachable!("CLAIM_STAMP_CARRYING_LISTING has seven parameters")
            };
            let mut update = listing([head, keep_at, list_at], token, holding, ids);
            update.push(*token_at);
            update.push_bind(token);
            (update, [fence_at, pairs_at, ids_at, tail])
        }
    };
    update.push(*fence_at);
    update.push_bind(token);
    update.push(*pairs_at);
    crate::db::finish::push_pair_list(&mut update, carry);
    update.push(*ids_at);
    crate::db::push_id_list(&mut update, ids);
    update.push(*tail);
    update
}

/// The part every joined stamp begins with, up to the token it stamps: the join with the claimant's
/// holdings row and the list it writes there, `holding` with `ids`.
fn listing<'a>(
    [head, keep_at, list_at]: [&&'static str; 3],
    token: &'a str,
    holding: Holding<'_>,
    ids: &[u64],
) -> QueryBuilder<'a, MySql> {
    let mut update = QueryBuilder::<MySql>::new(*head);
    update.push_bind(token);
    update.push(*keep_at);
    update.push_bind(holding.keep);
    update.push(*list_at);
    update.push_bind(holding.list_with(ids));
    update
}

/// What a claim writes to its claimant's holdings list (schema 38, [`HOLDINGS_WRITE`]): the rows the
/// claimant may still be running besides the ones it stamps, and whether the list keeps what it held.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Holding<'a> {
    /// Rows stamped earlier that may still run under the token.
    pub(crate) running: &'a [u64],
    /// Keep what the list holds (a claim of this claimant may have committed unseen, or the claim is
    /// made without a worker that knows what it runs).
    pub(crate) keep: bool,
}

impl Holding<'_> {
    /// The list as the statement takes it: a JSON array of `running` and `ids`.
    fn list_with(&self, ids: &[u64]) -> String {
        let mut out = String::with_capacity((self.running.len() + ids.len()) * 8 + 2);
        let mut digits = itoa::Buffer::new();
        out.push('[');
        for (i, id) in self.running.iter().chain(ids).enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(digits.format(*id));
        }
        out.push(']');
        out
    }
}

fn push_list<'a>(q: &mut QueryBuilder<'a, MySql>, items: &'a [String]) {
    let mut list = q.separated(", ");
    for item in items {
        list.push_bind(item.as_str());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statements::placeholders;

    #[test]
    fn the_claim_runs_the_published_statements() {
        let kinds = vec!["a".to_string(), "b".to_string()];
        let two = placeholders(2);
        assert_eq!(
            claim_select("q", &kinds, Slice::WHOLE, 10, CLAIM_PICK_AHEAD).sql(),
            CLAIM_SELECT.sql(&[
                "?", "?", "?", "?", "?", "?", &two, &two, "?", "?", "?", "?", "?"
            ])
        );
        assert_eq!(
            claim_select_past_locked("q", &kinds, 10).sql(),
            CLAIM_SELECT_PAST_LOCKED.sql(&["?", "?", "?", "?", "?", "?", &two, &two, "?"])
        );
        let none = Holding {
            running: &[],
            keep: false,
        };
        assert_eq!(
            holdings_write("t", none, &[1, 2, 3]).sql(),
            HOLDINGS_WRITE.sql(&["?", "?", "?"])
        );
        assert_eq!(
            claim_stamp("t", None, &[1, 2, 3]).sql(),
            CLAIM_STAMP.sql(&["?", &placeholders(4)])
        );
        assert_eq!(
            claim_stamp("t", Some(none), &[1, 2, 3]).sql(),
            CLAIM_STAMP_LISTING.sql(&["?", "?", "?", "?", &placeholders(4)])
        );
        let three = crate::job::keys(&[(1, 1), (2, 1), (3, 2)]);
        let pairs = crate::statements::pair_placeholders(4);
        assert_eq!(
            claim_stamp_carrying("t", None, &three, &[7, 8]).sql(),
            CLAIM_STAMP_CARRYING.sql(&["?", "?", &pairs, &placeholders(2)])
        );
        assert_eq!(
            claim_stamp_carrying("t", Some(none), &three, &[7, 8]).sql(),
            CLAIM_STAMP_CARRYING_LISTING.sql(&["?", "?", "?", "?", "?", &pairs, &placeholders(2)])
        );
        assert_eq!(
            claim_stamp_carrying("t", None, &crate::job::keys(&[(1, 1)]), &[7]).sql(),
            CLAIM_STAMP_CARRYING.sql(&[
                "?",
                "?",
                &crate::statements::pair_placeholders(crate::statements::MIN_PAIRS),
                &placeholders(1)
            ])
        );
    }

    #[test]
    fn the_holdings_list_names_the_rows_running_and_the_rows_stamped() {
        let h = Holding {
            running: &[4, 9],
            keep: false,
        };
        assert_eq!(h.list_with(&[12]), "[4,9,12]");
        let empty = Holding {
            running: &[],
            keep: true,
        };
        assert_eq!(empty.list_with(&[]), "[]");
        assert_eq!(empty.list_with(&[1, 2]), "[1,2]");
    }
}
