//! Claiming due jobs. Every statement that stamps a claim token on a ready row lives here.
//!
//! A claim is one short transaction on the claim index:
//!
//! 1. `SELECT … FOR UPDATE SKIP LOCKED` the first `n` due rows of one queue, in claim order
//!    (priority, run_at, id): picked from the claim index without locks, then locked by primary key
//!    ([`CLAIM_SELECT`] says why in two steps). SKIP LOCKED lets concurrent claimers pass each other
//!    instead of queueing behind the same first rows; the total ORDER BY means every claimer picks
//!    rows in the same order.
//! 2. `UPDATE … WHERE id IN (…)` on exactly those rows, by primary key: stamp the token, count the
//!    attempt, mark them running, and write the claimant's holdings list: the rows it may still run and
//!    the rows it stamps (schema 38; in the same statement, or for a claim of
//!    `jobq::statements::LIST_APART_FROM` rows or more in one of its own just before). The UPDATE
//!    checks again that each row is still claimable and the claim keeps only the rows it stamped (see
//!    [`stamp_selected`]).
//! 3. COMMIT.
//!
//! A claim may also carry done finishes of the worker's earlier jobs (`worker::finisher`): step 2 is
//! then one UPDATE that finishes those rows, fenced by token and attempt, and stamps the locked ones
//! ([`CLAIM_STAMP_CARRYING`]), so one commit (one log flush on a durable server) and four round trips
//! (five with the list apart) record a batch of outcomes and claim the next batch. At jobq's defaults (10-row claims of short
//! jobs) that took a worker from 0.70 round trips per job (a claim of four, a finish of three) to
//! 0.50 with the finish as a statement of its own in the claim's transaction, and to about 0.40 with
//! this (`jobq bench --sections drain --sweep 1:10:10`, commands per job at the wire). When the UPDATE
//! changes fewer rows than it names, the claim is made again with the finish first on its own; if
//! that falls short too (a claim was lost meanwhile), it is rolled back, the claim is made without
//! the finishes, and the caller gives them back to the finisher, which redoes them exactly.
//!
//! Why not a single `UPDATE … ORDER BY … LIMIT n` stamping the token: a comparison program (since
//! retired; `jobq bench`'s raw grid now measures the form jobq runs) drained 20,000 jobs with each form (each job then finished by jobq's fenced UPDATE) on MariaDB 10.11, 2 cores,
//! server and claimers on one machine. On a quiet machine the two were within noise of each other
//! (jobs/s, SKIP LOCKED vs UPDATE LIMIT): 1 claimer × 10 rows 1,613 vs 1,738; 8 × 10 3,493 vs 3,489;
//! 8 × 100 4,385 vs 4,553, with the one-statement-per-job finish dominating. Under load (load average
//! 4–5) SKIP LOCKED was ahead with many claimers (8 × 10: 3,251 vs 2,584; 4 × 100: 3,884 vs 3,354), and
//! an earlier measurement on this server saw UPDATE LIMIT claimers queue behind each other on the first
//! ready rows (mean time per 100-row claim ~4 ms with 1 claimer, ~35 ms with 8). SKIP LOCKED also never
//! waits on another claimer's locks, and returns the claimed rows from the same statement that picks them,
//! where UPDATE LIMIT needs a second query to read back what it stamped. So: SKIP LOCKED.
//! SKIP LOCKED needs MariaDB 10.6+ or MySQL 8.0.1+.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sqlx::mysql::MySqlRow;
use sqlx::{Connection, MySql, MySqlConnection, MySqlPool, QueryBuilder, Row};
use tracing::trace;

use crate::claimant::token::TokenText;
use crate::db::dedicated::Dedicated;
use crate::db::row::{opt_text, text};
use crate::error::Result;
use crate::id::JobId;
use crate::job::AttemptKey;
use crate::statements::LIST_APART_FROM;
pub(crate) use stamp::Holding;
pub(crate) use stamp::this_host;
use stamp::{
    claim_select, claim_select_past_locked, claim_stamp, claim_stamp_carrying, holdings_write,
};

/// BEGIN, and the carried finishes made apart, each fenced: when one falls short they are rolled back
/// and left out (the worker makes them on their own), and the claim goes on in a fresh transaction.
/// Gives the transaction and whether they were made (or there were none). A macro, not a function:
/// a function returning the transaction cannot begin a second one on the same connection after the
/// first is rolled back (the borrow checker keeps the first borrow alive through the return).
macro_rules! begin_carrying {
    ($conn:expr, $token:expr, $carry:expr) => {{
        let mut tx = sqlx::Connection::begin(&mut *$conn).await?;
        let carried =
            $carry.is_empty() || crate::db::finish::done_batch_in(&mut tx, $token, $carry).await?;
        if !carried {
            tx.rollback().await?;
            tx = sqlx::Connection::begin(&mut *$conn).await?;
        }
        (tx, carried)
    }};
}
pub(super) use begin_carrying;

/// A row this worker has just claimed.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "test-util"), allow(unreachable_pub))] // public through `testing`
pub struct ClaimedJob {
    /// Row id.
    pub id: JobId,
    /// Queue it came from (shared by the jobs of a claim that came from it).
    pub queue: Arc<str>,
    /// Kind, which picks the handler (shared by the jobs of a claim of that kind).
    pub kind: Arc<str>,
    /// JSON payload text.
    pub payload: String,
    /// Attempts before this claim; this attempt is `attempts + 1` (see [`ClaimedJob::attempt`]).
    pub(crate) attempts: u16,
    /// Attempts allowed, when the job set its own (`None`: its handler's, else 20; see
    /// [`crate::job::max_attempts`]).
    pub max_attempts: Option<u16>,
    /// Per-job timeout in seconds, if the row sets one.
    pub timeout_secs: Option<u32>,
    /// How long the row had been due when it was claimed, in µs by the server's clock.
    pub(crate) waited_us: i64,
    /// The `traceparent` column as stored (schema 25): checked when the job runs, not here, so that a
    /// malformed value written by plain SQL fails nothing (`worker::execute` logs it and runs the job
    /// without a parent).
    pub(crate) traceparent: Option<String>,
}

impl<'r> sqlx::FromRow<'r, MySqlRow> for ClaimedJob {
    fn from_row(row: &'r MySqlRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            id: row.try_get("id")?,
            queue: text(row, "queue")?.into(),
            kind: text(row, "kind")?.into(),
            payload: text(row, "payload")?,
            attempts: row.try_get("attempts")?,
            max_attempts: row.try_get("max_attempts")?,
            timeout_secs: row.try_get("timeout_secs")?,
            // Absent where rows are read back without it (tests that build claims by hand).
            waited_us: row.try_get("waited_us").unwrap_or(0),
            // Absent too where rows are read back without it (the same tests).
            traceparent: match opt_text(row, "traceparent") {
                Err(sqlx::Error::ColumnNotFound(_)) => None,
                other => other?,
            },
        })
    }
}

impl ClaimedJob {
    /// A row of [`CLAIM_SELECT`](crate::statements::CLAIM_SELECT) or
    /// [`CLAIM_SELECT_PAST_LOCKED`](crate::statements::CLAIM_SELECT_PAST_LOCKED), read by position:
    /// looking each of a thousand rows' nine columns up by name was a twentieth of a draining worker's
    /// instructions (`valgrind --tool=callgrind`). The test
    /// `the_claim_selects_name_the_columns_in_the_order_they_are_read` holds the order. `names` keeps
    /// the queue and kind of the rows read before: a claim's rows nearly always share them.
    fn from_claim_row(row: &MySqlRow, names: &mut Names) -> Result<Self, sqlx::Error> {
        Ok(Self {
            id: row.try_get(0)?,
            queue: names.queue.read(row, 1)?,
            kind: names.kind.read(row, 2)?,
            payload: text(row, 3)?,
            attempts: row.try_get(4)?,
            max_attempts: row.try_get(5)?,
            timeout_secs: row.try_get(6)?,
            traceparent: opt_text(row, 7)?,
            waited_us: row.try_get(8)?,
        })
    }

    /// The number of this attempt, starting at 1: the value the row's `attempts` has while it runs, and
    /// half of the fence that a finish must match.
    #[cfg_attr(not(feature = "test-util"), allow(unreachable_pub))] // public through `testing`
    pub fn attempt(&self) -> u16 {
        self.attempts + 1
    }

    /// This attempt's fence key: the row id and [`ClaimedJob::attempt`].
    pub(crate) fn key(&self) -> AttemptKey {
        AttemptKey {
            id: self.id,
            attempt: self.attempt(),
        }
    }
}

/// The queue and kind of the rows a claim has read so far, which the next row's are compared with:
/// each job of a claim then shares its claim's strings instead of two allocations of its own, and the
/// bytes are checked to be UTF-8 once per claim, not once per row.
#[derive(Default)]
struct Names {
    queue: Last,
    kind: Last,
}

/// The last value read from one text column.
#[derive(Default)]
struct Last(Option<Arc<str>>);

impl Last {
    /// Column `col` of `row`: the last value again when the bytes are the same.
    fn read(&mut self, row: &MySqlRow, col: usize) -> Result<Arc<str>, sqlx::Error> {
        let bytes: &[u8] = row.try_get(col)?;
        match &self.0 {
            Some(last) if last.as_bytes() == bytes => Ok(last.clone()),
            _ => {
                let value: Arc<str> = crate::db::row::utf8_str(col, bytes)?.into();
                Ok(self.0.insert(value).clone())
            }
        }
    }
}

mod limited;
pub(crate) mod malformed;
mod stamp;
pub(crate) use limited::claim_limited_watched;

/// Deadlocks and lock timeouts are retried this many times in all before the error reaches the worker.
const TRIES: u32 = 8;

/// How far a claim looks in a queue: only at the rows it picks, or past every row other claims hold.
///
/// [`CLAIM_SELECT`] locks only rows of its pick: the first due entries of the claim index, read
/// without locks, which include rows other claims are stamping. When all of them are held, more rows
/// may be due behind them, and only a walk that locks as it goes ([`CLAIM_SELECT_PAST_LOCKED`]) finds
/// those. The walk is not sent after every empty pick: in a queue with nothing due for the claim's
/// kinds, the pick has already read every entry of the queue's due range (the kinds nobody serves),
/// and the walk would read them all again (`jobq bench --sections backlog`, 1,000,000 rows: 108,224
/// index entries per claim with the walk after every empty pick, against 54,069 before the pick
/// existed). A worker claims with [`Reach::Picked`] and, when the whole claim across its queues came
/// back empty, once more with [`Reach::PastHeld`] before it believes nothing is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// The rows of the pick only.
    Picked,
    /// The first free due rows, however many held rows come first: the locking walk.
    PastHeld,
}

/// The part of a queue's due rows a pick takes from: the rows whose `CRC32(id) MOD of` is `index`
/// (`PICK_SLICE` in [`crate::statements`] says why). Claimers on different Galera nodes pick from
/// different slices first (`worker::slices`); everywhere else a pick takes from the whole queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slice {
    /// How many slices the due rows are cut into.
    pub(crate) of: u32,
    /// Which one this is, from 0.
    pub(crate) index: u32,
}

impl Slice {
    /// Every row.
    pub(crate) const WHOLE: Slice = Slice { of: 1, index: 0 };
}

/// What one claim of one queue asks for: the worker's token, the queue, the kinds it runs, how many rows
/// at most, the done finishes it carries ((id, attempt) pairs of rows `token` runs, distinct), how
/// far it looks (see [`Reach`]), the slice of the due rows its pick takes from (the locking walk
/// takes from the whole queue), and what its stamp writes to the claimant's holdings list besides the
/// rows it stamps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimArgs<'a> {
    pub(crate) token: &'a TokenText,
    pub(crate) holding: Holding<'a>,
    pub(crate) queue: &'a str,
    pub(crate) kinds: &'a [String],
    pub(crate) limit: u32,
    pub(crate) carry: &'a [AttemptKey],
    pub(crate) reach: Reach,
    pub(crate) slice: Slice,
    /// How many times `limit` the pick reads ([`CLAIM_SELECT`]): one for each claimer that may be
    /// locking rows of the same pick, this one among them, at most
    /// [`crate::statements::CLAIM_PICK_AHEAD`].
    pub(crate) ahead: u32,
}

impl ClaimArgs<'_> {
    /// True when there is nothing to claim and nothing to carry.
    fn is_idle(&self) -> bool {
        (self.limit == 0 || self.kinds.is_empty()) && self.carry.is_empty()
    }
}

/// Claims up to `limit` due jobs of `queue` whose kind is in `kinds`, stamping `token` on them, on a
/// connection of `pool`: the claim without a worker, for tests.
#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(not(feature = "test-util"), allow(unreachable_pub))] // public through `testing`
pub async fn claim_batch(
    pool: &MySqlPool,
    token: &str,
    queue: &str,
    kinds: &[String],
    limit: u32,
) -> Result<Vec<ClaimedJob>> {
    if limit == 0 || kinds.is_empty() {
        return Ok(Vec::new());
    }
    Ok(claim_batch_carrying(pool, token, queue, kinds, limit, &[])
        .await?
        .0)
}

/// [`claim_batch`] carrying the done finishes `carry` (distinct (id, attempt) pairs of rows `token`
/// runs) in its transaction, as a worker's claim does: the rows claimed, and whether the finishes were
/// made (false: their fence did not match every row, and none of them was made).
#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(not(feature = "test-util"), allow(unreachable_pub))] // public through `testing`
pub async fn claim_batch_carrying(
    pool: &MySqlPool,
    token: &str,
    queue: &str,
    kinds: &[String],
    limit: u32,
    carry: &[(u64, u16)],
) -> Result<(Vec<ClaimedJob>, bool)> {
    let token = &TokenText::from(token);
    let carry: &[AttemptKey] = &carry
        .iter()
        .copied()
        .map(AttemptKey::from)
        .collect::<Vec<_>>();
    // As a worker claims: the pick, then the walk when the pick locked nothing.
    let mut carried = carry.is_empty();
    for reach in [Reach::Picked, Reach::PastHeld] {
        let args = ClaimArgs {
            token,
            // Without a worker that knows what it runs, the list only grows.
            holding: Holding {
                running: &[],
                keep: true,
            },
            queue,
            kinds,
            limit,
            carry: if carried { &[] } else { carry },
            reach,
            slice: Slice::WHOLE,
            ahead: crate::statements::CLAIM_PICK_AHEAD,
        };
        let claim = crate::db::retry_transient("claim", TRIES, || async {
            let mut conn = pool.acquire().await?;
            hold(&mut conn, token).await?;
            claim_once(&mut conn, args).await
        })
        .await?;
        carried |= claim.carried;
        if !claim.jobs.is_empty() {
            return Ok((claim.jobs, carried));
        }
    }
    Ok((Vec::new(), carried))
}

/// Gives `token` a holdings row (schema 38) if it has none, as a worker's registration does, so that
/// its first stamp lists its rows at once.
#[cfg(any(test, feature = "test-util"))]
async fn hold(conn: &mut MySqlConnection, token: &TokenText) -> Result<(), sqlx::Error> {
    sqlx::query(crate::statements::HOLD)
        .bind(token.as_str())
        .execute(conn)
        .await?;
    Ok(())
}

/// What a claim did: the rows it claimed, and whether it made the finishes it was asked to carry.
#[derive(Debug)]
pub(crate) struct Claim {
    pub(crate) jobs: Vec<ClaimedJob>,
    /// True when the carried finishes were made and committed with the claim (also when there were
    /// none); false when their fence did not match every row and they were left out.
    pub(crate) carried: bool,
}

/// The claim on the worker's own connection, carrying the done finishes `carry` ((id, attempt) pairs,
/// distinct) in its transaction, and setting `uncertain` when a try failed in a way that may have
/// committed anyway: a connection lost after COMMIT was sent, or a Galera node cut off from its cluster
/// while the COMMIT was replicated, leaves rows stamped with `token` that the caller never saw. A
/// worker that sees the flag reconciles: it hands back the rows under its token that it is not
/// running. (The carried finishes of such a try are given back to the finisher, whose fenced retry
/// finds out whether they were made.)
pub(crate) async fn claim_batch_watched(
    conn: &mut Dedicated,
    args: ClaimArgs<'_>,
    uncertain: &AtomicBool,
) -> Result<Claim> {
    if args.is_idle() {
        return Ok(Claim {
            jobs: Vec::new(),
            carried: true,
        });
    }
    watched(conn, uncertain, |mut c| async move {
        let r = claim_once(&mut c, keeping_if_unsure(args, uncertain)).await;
        (c, r)
    })
    .await
}

/// `args`, whose stamp keeps what the holdings list held when an earlier try or claim may have
/// committed rows the worker never saw: they stay listed until its reconcile hands them back.
fn keeping_if_unsure<'a>(args: ClaimArgs<'a>, uncertain: &AtomicBool) -> ClaimArgs<'a> {
    let mut args = args;
    args.holding.keep |= uncertain.load(Ordering::SeqCst);
    args
}

/// Runs a claim on the worker's connection, raising `uncertain` when a try failed in a way that may
/// have committed anyway (anything but a lock conflict: see [`crate::errno::may_have_committed`]), or
/// when the claim failed.
async fn watched<T, F, Fut>(conn: &mut Dedicated, uncertain: &AtomicBool, mut op: F) -> Result<T>
where
    F: FnMut(MySqlConnection) -> Fut,
    Fut: std::future::Future<Output = (MySqlConnection, Result<T, sqlx::Error>)>,
{
    let result = conn
        .run("claim", TRIES, |c| {
            let attempt = op(c);
            async move {
                let (c, r) = attempt.await;
                if matches!(&r, Err(e) if crate::errno::may_have_committed(e)) {
                    uncertain.store(true, Ordering::SeqCst);
                }
                (c, r)
            }
        })
        .await;
    if result.is_err() {
        uncertain.store(true, Ordering::SeqCst);
    }
    result
}

/// Which of `ids` still run under `token`, with their attempt numbers and whether an operator asked to
/// cancel them: what a worker compares with what it runs, once a second, to stop a copy whose row was
/// taken away and to stop cancelled jobs. By primary key: one lookup per job it runs.
pub(crate) async fn held_rows(
    pool: &MySqlPool,
    token: &TokenText,
    ids: &[u64],
) -> Result<Vec<HeldRow>> {
    let mut held = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(crate::db::ID_CHUNK) {
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT id, attempts, cancel_requested_at IS NOT NULL AS cancel_requested \
             FROM job_queue FORCE INDEX (PRIMARY) WHERE state = 'running' AND claim = ",
        );
        q.push_bind(token.as_str()).push(" AND id IN (");
        crate::db::push_id_list(&mut q, chunk);
        q.push(")");
        held.extend(q.build_query_as::<HeldRow>().fetch_all(pool).await?);
    }
    Ok(held)
}

/// Every running row stamped with `token`, through its holdings list (which a claim that may have
/// committed unseen keeps whole): what a worker's reconcile hands back after such a claim.
pub(crate) async fn listed_rows(pool: &MySqlPool, token: &TokenText) -> Result<Vec<HeldRow>> {
    Ok(sqlx::query_as(concat!(
        "SELECT DISTINCT q.id, q.attempts, q.cancel_requested_at IS NOT NULL AS cancel_requested \
         FROM jobq_holdings h JOIN ",
        crate::statements::listed_running!(),
        " WHERE h.holder = ?"
    ))
    .bind(token.as_str())
    .fetch_all(pool)
    .await?)
}

/// A running row that carries a worker's token.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct HeldRow {
    pub(crate) id: JobId,
    #[sqlx(rename = "attempts")]
    pub(crate) attempt: u16,
    pub(crate) cancel_requested: bool,
}

/// One try of a claim, with the finishes it carries (see the module docs).
async fn claim_once(conn: &mut MySqlConnection, args: ClaimArgs<'_>) -> Result<Claim, sqlx::Error> {
    if !args.carry.is_empty()
        && let Some(claim) = claim_carrying(conn, args).await?
    {
        return Ok(claim);
    }
    claim_apart(conn, args).await
}

/// The claim that carries finishes, in four round trips: BEGIN, the locking SELECT,
/// [`CLAIM_STAMP_CARRYING`] (or the finish alone when nothing is due), COMMIT; five with the holdings
/// list apart (see [`stamp_listed`]). `None`, rolled back,
/// when the UPDATE changed fewer rows than it named: a finish's fence did not match or a row was not
/// claimable after all, and the UPDATE cannot say which.
async fn claim_carrying(
    conn: &mut MySqlConnection,
    args: ClaimArgs<'_>,
) -> Result<Option<Claim>, sqlx::Error> {
    let ClaimArgs {
        token,
        carry,
        holding,
        ..
    } = args;
    let mut clock = Clock::start();
    let mut tx = conn.begin().await?;
    clock.begun();
    let Locked { jobs, .. } = lock_due(&mut tx, args).await?;
    clock.picked();
    let all_changed = if jobs.is_empty() {
        crate::db::finish::done_batch_in(&mut tx, token, carry).await?
    } else {
        let ids: Vec<u64> = jobs.iter().map(|j| j.id.0).collect();
        let apart = ids.len() >= LIST_APART_FROM;
        if apart {
            write_list(&mut tx, token.as_str(), holding, &ids).await?;
        }
        let changed =
            claim_stamp_carrying(token.as_str(), (!apart).then_some(holding), carry, &ids)
                .build()
                .execute(&mut *tx)
                .await?
                .rows_affected();
        // A joined list's holdings row is one more matched row.
        changed == (carry.len() + ids.len() + usize::from(!apart)) as u64
    };
    clock.stamped();
    if !all_changed {
        tx.rollback().await?;
        return Ok(None);
    }
    tx.commit().await?;
    clock.committed(jobs.len(), carry.len());
    Ok(Some(Claim {
        jobs,
        carried: true,
    }))
}

/// The claim with its finishes made apart, each checked on its own: BEGIN, the fenced finish (rolled
/// back and left out when it falls short), the locking SELECT, the stamp, COMMIT. Also the claim that
/// carries nothing.
async fn claim_apart(
    conn: &mut MySqlConnection,
    args: ClaimArgs<'_>,
) -> Result<Claim, sqlx::Error> {
    let mut clock = Clock::start();
    let (mut tx, carried) = begin_carrying!(conn, args.token, args.carry);
    clock.begun();
    let Locked { jobs, set_aside } = lock_due(&mut tx, args).await?;
    clock.picked();
    if jobs.is_empty() {
        end(tx, set_aside || (carried && !args.carry.is_empty())).await?;
        return Ok(Claim { jobs, carried });
    }
    let jobs = stamp(&mut tx, args.token.as_str(), args.holding, jobs).await?;
    clock.stamped();
    tx.commit().await?;
    clock.committed(jobs.len(), if carried { args.carry.len() } else { 0 });
    Ok(Claim { jobs, carried })
}

/// When each step of a committed claim ended, for a trace event (`JOBQ_LOG=jobq::db::claim=trace`)
/// that says where its time went: a job's pickup delay under a steady stream is one to one and a half
/// claims (what is left of the claim under way when it arrives, then the claim that takes it), so
/// which step is slow is what an operator chasing latency needs to know. Four clock reads per claim.
struct Clock {
    began: Instant,
    /// BEGIN, with a carried finish when it is made apart.
    begun: Duration,
    /// The locking SELECT.
    picked: Duration,
    /// The holdings list and the stamp.
    stamped: Duration,
}

impl Clock {
    fn start() -> Self {
        Self {
            began: Instant::now(),
            begun: Duration::ZERO,
            picked: Duration::ZERO,
            stamped: Duration::ZERO,
        }
    }

    fn begun(&mut self) {
        self.begun = self.began.elapsed();
    }

    fn picked(&mut self) {
        self.picked = self.began.elapsed();
    }

    fn stamped(&mut self) {
        self.stamped = self.began.elapsed();
    }

    /// The trace event, once the claim of `rows` rows carrying `carried` finishes has committed.
    fn committed(&self, rows: usize, carried: usize) {
        let us = |d: Duration| d.as_micros() as u64;
        trace!(
            rows,
            carried,
            begin_us = us(self.begun),
            pick_us = us(self.picked - self.begun),
            stamp_us = us(self.stamped - self.picked),
            commit_us = us(self.began.elapsed() - self.stamped),
            "claim committed"
        );
    }
}

/// Ends a claim's transaction: COMMIT when it changed something worth keeping, else ROLLBACK (a
/// claim that found nothing and carried nothing holds only locks).
async fn end(tx: sqlx::Transaction<'_, sqlx::MySql>, keep: bool) -> Result<(), sqlx::Error> {
    if keep {
        tx.commit().await
    } else {
        tx.rollback().await
    }
}

/// Step 1 of a claim, in the caller's transaction: locks up to `limit` due rows (none when there is
/// nothing to ask for), of the pick or of the locking walk (see [`Reach`]).
async fn lock_due(
    tx: &mut MySqlConnection,
    ClaimArgs {
        queue,
        kinds,
        limit,
        reach,
        slice,
        ahead,
        ..
    }: ClaimArgs<'_>,
) -> Result<Locked, sqlx::Error> {
    if limit == 0 || kinds.is_empty() {
        return Ok(Locked {
            jobs: Vec::new(),
            set_aside: false,
        });
    }
    let mut select = match reach {
        Reach::Picked => claim_select(queue, kinds, slice, limit, ahead),
        Reach::PastHeld => claim_select_past_locked(queue, kinds, limit),
    };
    let mut names = Names::default();
    let picked: Vec<ClaimedJob> = select
        .build()
        .try_map(|row: MySqlRow| ClaimedJob::from_claim_row(&row, &mut names))
        .fetch_all(&mut *tx)
        .await?;
    let locked = picked.len();
    let jobs = malformed::set_aside_from(tx, picked).await?;
    Ok(Locked {
        set_aside: jobs.len() < locked,
        jobs,
    })
}

/// What step 1 of a claim locked.
struct Locked {
    /// The rows to stamp.
    jobs: Vec<ClaimedJob>,
    /// Whether it set rows aside (`malformed`): the transaction then commits, whatever else it holds.
    set_aside: bool,
}

/// Step 2 of a claim: stamps `token` on the rows the locking SELECT returned, and returns the ones it
/// stamped. As a claim without a worker stamps: the holdings list keeps what it held (and is made
/// when `token` has none).
#[doc(hidden)]
#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(not(feature = "test-util"), allow(unreachable_pub))] // public through `testing`
pub async fn stamp_selected(
    conn: &mut MySqlConnection,
    token: &str,
    jobs: Vec<ClaimedJob>,
) -> Result<Vec<ClaimedJob>, sqlx::Error> {
    let holding = Holding {
        running: &[],
        keep: true,
    };
    stamp(conn, token, holding, jobs).await
}

/// Step 2 of a claim: writes `holding` with the rows the locking SELECT returned to `token`'s holdings
/// list, stamps `token` on those rows, and returns the ones it stamped.
///
/// The UPDATE does not trust the row locks alone: it checks again that each row is still claimable
/// (waiting, unclaimed, due), and when it changes fewer rows than were selected, the rows that carry our
/// token and this attempt are read back and only those are returned. Under InnoDB the locks make this
/// a no-op; an engine that accepts SKIP LOCKED without locking (TiDB did) would otherwise let two
/// workers stamp one row and both run it ([`stamp_selected`] is the test's way in).
pub(super) async fn stamp(
    conn: &mut MySqlConnection,
    token: &str,
    holding: Holding<'_>,
    jobs: Vec<ClaimedJob>,
) -> Result<Vec<ClaimedJob>, sqlx::Error> {
    if jobs.is_empty() {
        return Ok(jobs);
    }
    let ids: Vec<u64> = jobs.iter().map(|j| j.id.0).collect();
    let stamped = stamp_listed(conn, token, holding, &ids).await?;
    if stamped == jobs.len() as u64 {
        return Ok(jobs);
    }
    let mut read = QueryBuilder::<MySql>::new(
        "SELECT id, attempts FROM job_queue WHERE state = 'running' AND claim = ",
    );
    read.push_bind(token);
    read.push(" AND id IN (");
    crate::db::push_id_list(&mut read, &ids);
    read.push(")");
    let held: Vec<AttemptKey> = read.build_query_as().fetch_all(&mut *conn).await?;
    let kept = keep_stamped(jobs, &held);
    tracing::warn!(
        selected = ids.len(),
        stamped,
        kept = kept.len(),
        "claim: rows locked FOR UPDATE SKIP LOCKED changed before they were stamped; keeping only \
         the rows that carry this worker's token (does the server really lock with SKIP LOCKED?)"
    );
    Ok(kept)
}

/// Stamps `token` on `ids` and writes `holding` with them to `token`'s holdings list: apart, before
/// the stamp, for a claim of [`LIST_APART_FROM`] rows or more, else in the stamp. The rows stamped.
///
/// A claimant without a holdings row gets one again. A reaper took it for gone and forgot it, with
/// nothing of its running; its heartbeat registers it again. Its list is made again now, in this
/// transaction, so that it does not claim nothing meanwhile (an idle worker's heartbeat may not notice
/// for a while). A reset of this token in progress holds the list's key until it commits (`reap`), so
/// the rows stamped here are new claims, never rows being reset.
async fn stamp_listed(
    conn: &mut MySqlConnection,
    token: &str,
    holding: Holding<'_>,
    ids: &[u64],
) -> Result<u64, sqlx::Error> {
    // rows_affected counts matched rows (sqlx sets CLIENT_FOUND_ROWS), and every matched row changes
    // anyway (attempts goes up); a repeated id of the padded list matches its row once.
    if ids.len() >= LIST_APART_FROM {
        write_list(conn, token, holding, ids).await?;
        return Ok(claim_stamp(token, None, ids)
            .build()
            .execute(&mut *conn)
            .await?
            .rows_affected());
    }
    // Joined: the holdings row is one more matched row, and without it nothing matches.
    let stamp = || claim_stamp(token, Some(holding), ids);
    let matched = stamp().build().execute(&mut *conn).await?.rows_affected();
    if matched > 0 || has_holdings(conn, token).await? {
        return Ok(matched.saturating_sub(1));
    }
    hold_again(conn, token).await?;
    let matched = stamp().build().execute(&mut *conn).await?.rows_affected();
    Ok(matched.saturating_sub(1))
}

/// Writes `holding` with `ids` as `token`'s holdings list ([`crate::statements::HOLDINGS_WRITE`]),
/// making the row again first when it is gone (see [`stamp_listed`]).
async fn write_list(
    conn: &mut MySqlConnection,
    token: &str,
    holding: Holding<'_>,
    ids: &[u64],
) -> Result<(), sqlx::Error> {
    // Matched rows (CLIENT_FOUND_ROWS): 1 when the row is there, whether or not the list changed.
    let write = || holdings_write(token, holding, ids);
    if write().build().execute(&mut *conn).await?.rows_affected() == 0 {
        hold_again(conn, token).await?;
        write().build().execute(&mut *conn).await?;
    }
    Ok(())
}

/// Makes `token`'s holdings row again, found gone by a claim (see [`stamp_listed`]).
async fn hold_again(conn: &mut MySqlConnection, token: &str) -> Result<(), sqlx::Error> {
    tracing::warn!(
        claim = token,
        "claim: this claimant's holdings row was gone (a reaper took it for gone); made it again"
    );
    sqlx::query(crate::statements::HOLD)
        .bind(token)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Whether `token` has a holdings row.
async fn has_holdings(conn: &mut MySqlConnection, token: &str) -> Result<bool, sqlx::Error> {
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobq_holdings WHERE holder = ?")
        .bind(token)
        .fetch_one(&mut *conn)
        .await?;
    Ok(n > 0)
}

/// The selected jobs that `held` (rows under our token, with their attempts) shows this claim stamped:
/// same id, and attempts one above what the SELECT read.
fn keep_stamped(jobs: Vec<ClaimedJob>, held: &[AttemptKey]) -> Vec<ClaimedJob> {
    jobs.into_iter()
        .filter(|j| held.contains(&j.key()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claim_selects_name_the_columns_in_the_order_they_are_read() {
        // The positions `ClaimedJob::from_claim_row` reads.
        let columns = "id, queue, kind, payload, attempts, max_attempts, timeout_secs, traceparent, \
                       TIMESTAMPDIFF(MICROSECOND, run_at, NOW(6)) AS waited_us FROM ";
        let picked = crate::statements::CLAIM_SELECT.parts()[0].replace("j.", "");
        let past = crate::statements::CLAIM_SELECT_PAST_LOCKED.parts()[0];
        for select in [picked.as_str(), past] {
            assert!(select.starts_with(&format!("SELECT {columns}")), "{select}");
        }
    }

    fn job(id: u64, attempts: u16) -> ClaimedJob {
        ClaimedJob {
            id: JobId(id),
            queue: "default".into(),
            kind: "k".into(),
            payload: "{}".into(),
            attempts,
            max_attempts: None,
            timeout_secs: None,
            waited_us: 0,
            traceparent: None,
        }
    }

    #[test]
    fn only_rows_stamped_by_this_claim_are_kept() {
        let jobs = vec![job(1, 0), job(2, 3), job(3, 0)];
        // Row 2 carries our token but at another attempt (not this claim's stamp); row 3 is not ours.
        let kept = keep_stamped(jobs, &crate::job::keys(&[(1, 1), (2, 2)]));
        assert_eq!(kept.iter().map(|j| j.id.0).collect::<Vec<_>>(), vec![1]);
        assert!(keep_stamped(vec![job(4, 0)], &[]).is_empty());
    }
}
