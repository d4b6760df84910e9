//! The claim of one queue when limits apply there (schema 14): a limit on the queue, or on one of the
//! kinds the worker claims.
//!
//! Rows are taken in the queue's claim order (priority, run_at, id) whatever their kind, limited or
//! not: the due rows of all the claim's kinds are picked as a plain claim picks them, then admitted in
//! that order against the room the limits leave. A row whose limit is full is skipped, and so is its
//! kind for the rest of the claim: the claim picks again without the full kinds, so rows of a full
//! kind never hold back the rows behind them. (Claiming the unlimited kinds first and each limited kind
//! after, as jobq once did, let a steady stream of unlimited jobs starve a limited kind of any
//! priority, even under a limit that never bound.)
//!
//! The limits are read only when they matter: a pick with no row of a limited kind, in a queue without
//! a limit of its own, is stamped and committed as it is, without touching `jobq_limits`, so a limit
//! costs nothing while its kind is not at the front of the queue. Otherwise every limit that applies
//! is locked at once, in one fixed order (so two claims never wait for each other crosswise), by a
//! write to its row: claims under one limit take turns (a locking read would do on one server, but on
//! a Galera cluster only a write is certified). The job rows of the pick are already locked then, but
//! with SKIP LOCKED, so no claim ever waits for them. A limit removed meanwhile no longer holds the
//! claim back. A finish never touches these tables.

use std::sync::atomic::AtomicBool;

use sqlx::MySqlConnection;

use super::{Claim, ClaimArgs, ClaimedJob, Holding, lock_due, stamp, watched};
use crate::db::dedicated::Dedicated;
use crate::db::limits::{self, Applying, LimitKey};
use crate::error::Result;

/// The claim of up to `want` due jobs of `kinds` in `queue` under the limits `applying` (not empty), on
/// the worker's own connection, carrying the done finishes `carry` as [`super::claim_batch_watched`]
/// does. Also returns the limits that are full after it: work they hold back is not worth waiting for
/// until something changes.
pub(crate) async fn claim_limited_watched(
    conn: &mut Dedicated,
    args: ClaimArgs<'_>,
    applying: &Applying,
    uncertain: &AtomicBool,
) -> Result<(Claim, Vec<LimitKey>)> {
    if args.is_idle() {
        return Ok((
            Claim {
                jobs: Vec::new(),
                carried: true,
            },
            Vec::new(),
        ));
    }
    watched(conn, uncertain, |mut c| async move {
        let r =
            claim_once_limited(&mut c, super::keeping_if_unsure(args, uncertain), applying).await;
        (c, r)
    })
    .await
}

/// A limit as one claim sees it: the room it left when the claim locked it, and what the claim took.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Room {
    key: LimitKey,
    left: u32,
    took: u32,
}

/// One try of the limited claim: BEGIN, the carried finishes (as `claim_apart` makes them), then
/// rounds of pick, admit and stamp until the claim has `want` rows or nothing more can be admitted,
/// the rate limits' starts, COMMIT.
// Long on purpose: one transaction whose locks and stamps must come in this order, BEGIN to COMMIT.
async fn claim_once_limited(
    conn: &mut MySqlConnection,
    args: ClaimArgs<'_>,
    applying: &Applying,
) -> Result<(Claim, Vec<LimitKey>), sqlx::Error> {
    let ClaimArgs {
        token,
        kinds,
        limit: want,
        carry,
        holding,
        ..
    } = args;
    let want = if kinds.is_empty() { 0 } else { want };
    let (mut tx, carried) = super::begin_carrying!(conn, token, carry);
    let mut kinds: Vec<String> = kinds.to_vec();
    // Locked and read once a picked row needs them.
    let mut rooms: Option<Vec<Room>> = None;
    let mut jobs = Vec::new();
    let mut set_aside = false;
    while (jobs.len() as u32) < want && !kinds.is_empty() {
        let asked = want - jobs.len() as u32;
        let locked = lock_due(
            &mut tx,
            ClaimArgs {
                kinds: &kinds,
                limit: asked,
                ..args
            },
        )
        .await?;
        set_aside |= locked.set_aside;
        let picked = locked.jobs;
        if picked.is_empty() {
            break;
        }
        let short = (picked.len() as u32) < asked;
        if rooms.is_none()
            && (!applying.queue.is_empty()
                || picked
                    .iter()
                    .any(|j| applying.of_kind(&j.kind).next().is_some()))
        {
            rooms = Some(lock_rooms(&mut tx, applying).await?);
        }
        let (admitted, refused) = match rooms.as_mut() {
            Some(rooms) => admit(picked, applying, rooms),
            None => (picked, Vec::new()),
        };
        // Stamped now: a row locked but not stamped still looks due to this transaction's next pick.
        // Each stamp writes the whole list, so it names the rows this claim stamped before too.
        let running: Vec<u64> = holding
            .running
            .iter()
            .copied()
            .chain(jobs.iter().map(|j: &ClaimedJob| j.id.0))
            .collect();
        let holding = Holding {
            running: &running,
            ..holding
        };
        jobs.extend(stamp(&mut tx, token.as_str(), holding, admitted).await?);
        let queue_full = rooms.as_ref().is_some_and(|rooms| {
            rooms
                .iter()
                .any(|r| applying.queue.contains(&r.key) && r.left == 0)
        });
        if queue_full || (refused.is_empty() && short) {
            break;
        }
        kinds.retain(|k| !refused.contains(k));
    }
    let rooms = rooms.unwrap_or_default();
    for r in rooms.iter().filter(|r| r.key.per_secs > 0 && r.took > 0) {
        limits::record_starts(&mut tx, &r.key, r.took).await?;
    }
    let full = rooms
        .iter()
        .filter(|r| r.left == 0)
        .map(|r| r.key.clone())
        .collect();
    super::end(
        tx,
        set_aside || !jobs.is_empty() || (carried && !carry.is_empty()),
    )
    .await?;
    Ok((Claim { jobs, carried }, full))
}

/// Locks every limit of `applying`, in lock order, and reads the room each leaves. A limit that is
/// gone is left out: it no longer holds anything back.
async fn lock_rooms(
    tx: &mut MySqlConnection,
    applying: &Applying,
) -> Result<Vec<Room>, sqlx::Error> {
    let mut rooms = Vec::new();
    for key in applying.in_lock_order() {
        sqlx::query(
            "UPDATE jobq_limits SET claimed_at = NOW(6) WHERE scope = ? AND name = ? AND per_secs = ?",
        )
        .bind(key.scope.as_str())
        .bind(&key.name)
        .bind(key.per_secs)
        .execute(&mut *tx)
        .await?;
        if let Some(left) = limits::room(&mut *tx, key).await? {
            rooms.push(Room {
                key: key.clone(),
                left,
                took: 0,
            });
        }
    }
    Ok(rooms)
}

/// Admits `picked` (in claim order) against `rooms`: a row is taken while every limit it counts
/// against has room left, and counted in each; a row with a full limit is refused, and its kind with
/// it. Returns the rows taken, in order, and the kinds refused.
fn admit(
    picked: Vec<ClaimedJob>,
    applying: &Applying,
    rooms: &mut [Room],
) -> (Vec<ClaimedJob>, Vec<String>) {
    let mut taken = Vec::new();
    let mut refused: Vec<String> = Vec::new();
    for job in picked {
        if refused.iter().any(|k| **k == *job.kind) {
            continue;
        }
        let counts: Vec<usize> = applying
            .of_kind(&job.kind)
            .filter_map(|key| rooms.iter().position(|r| &r.key == key))
            .collect();
        if counts.iter().any(|&i| rooms[i].left == 0) {
            refused.push(job.kind.to_string());
            continue;
        }
        for i in counts {
            rooms[i].left -= 1;
            rooms[i].took += 1;
        }
        taken.push(job);
    }
    (taken, refused)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::limits::LimitScope;
    use crate::id::JobId;

    fn key(scope: LimitScope, name: &str) -> LimitKey {
        LimitKey {
            scope,
            name: name.into(),
            per_secs: 0,
        }
    }

    fn job(id: u64, kind: &str) -> ClaimedJob {
        ClaimedJob {
            id: JobId(id),
            queue: "q".into(),
            kind: kind.into(),
            payload: "{}".into(),
            attempts: 0,
            max_attempts: None,
            timeout_secs: None,
            waited_us: 0,
            traceparent: None,
        }
    }

    fn room(key: LimitKey, left: u32) -> Room {
        Room { key, left, took: 0 }
    }

    fn ids(jobs: &[ClaimedJob]) -> Vec<u64> {
        jobs.iter().map(|j| j.id.0).collect()
    }

    #[test]
    fn rows_are_admitted_in_claim_order_whatever_their_kind() {
        let limited = key(LimitScope::Kind, "limited");
        let applying = Applying {
            queue: vec![],
            kinds: vec![("limited".into(), vec![limited.clone()])],
        };
        let mut rooms = vec![room(limited, 5)];
        let picked = vec![job(1, "free"), job(2, "limited"), job(3, "free")];
        let (taken, refused) = admit(picked, &applying, &mut rooms);
        assert_eq!(ids(&taken), [1, 2, 3]);
        assert!(refused.is_empty());
        assert_eq!((rooms[0].left, rooms[0].took), (4, 1));
    }

    #[test]
    fn a_full_kind_is_skipped_and_does_not_hold_back_the_rows_behind_it() {
        let limited = key(LimitScope::Kind, "limited");
        let applying = Applying {
            queue: vec![],
            kinds: vec![("limited".into(), vec![limited.clone()])],
        };
        let mut rooms = vec![room(limited, 1)];
        let picked = vec![
            job(1, "limited"),
            job(2, "limited"),
            job(3, "free"),
            job(4, "limited"),
        ];
        let (taken, refused) = admit(picked, &applying, &mut rooms);
        assert_eq!(ids(&taken), [1, 3]);
        assert_eq!(refused, ["limited"]);
        assert_eq!(rooms[0].left, 0);
    }

    #[test]
    fn a_queue_limit_counts_every_kind_and_a_removed_limit_holds_nothing() {
        let q = key(LimitScope::Queue, "q");
        let gone = key(LimitScope::Kind, "gone");
        let applying = Applying {
            queue: vec![q.clone()],
            kinds: vec![("gone".into(), vec![gone])],
        };
        // The kind's limit was removed meanwhile: only the queue's room was read.
        let mut rooms = vec![room(q, 2)];
        let (taken, refused) = admit(
            vec![job(1, "gone"), job(2, "free"), job(3, "free")],
            &applying,
            &mut rooms,
        );
        assert_eq!(ids(&taken), [1, 2]);
        assert_eq!(refused, ["free"]);
    }

    #[test]
    fn limits_are_locked_in_one_order_each_once() {
        let q = key(LimitScope::Queue, "q");
        let a = key(LimitScope::Kind, "a");
        let mut a_rate = key(LimitScope::Kind, "a");
        a_rate.per_secs = 60;
        let applying = Applying {
            queue: vec![q.clone()],
            kinds: vec![
                ("b".into(), vec![key(LimitScope::Kind, "b")]),
                ("a".into(), vec![a_rate.clone(), a.clone()]),
            ],
        };
        let order: Vec<&LimitKey> = applying.in_lock_order();
        assert_eq!(
            order,
            [&a, &a_rate, &key(LimitScope::Kind, "b"), &q],
            "kind before queue, then name, then period"
        );
    }
}
